"""Models with weights, the timm way: ``create_model(name, pretrained=..., checkpoint_path=...)``,
the weights timm publishes on the Hugging Face Hub, or a file.

    create_model("cait_xxs24_224", pretrained=True, num_classes=4)   # fetched once, then cached
    create_model("cait_xxs24_224", checkpoint_path="model.safetensors", num_classes=4)

``vit_scratch.create_model`` and ``vit_scratch.create_numpy_model`` are this module's: the
factory's builders (``vit_scratch.models``) with timm's keywords for the weights.  Both load
strictly, except a head for another number of classes (``weights.load_pretrained``).

Infrastructure, not teaching code: the download, the cache and offline mode are
``huggingface_hub``'s (``hf_hub_download``), installed by the ``[hub]`` extra.  A registered
name with published weights carries the repository in its ``pretrained_cfg["hf_hub_id"]`` (the
same as timm's ``pretrained_cfg`` for that name, e.g. ``timm/cait_xxs24_224.fb_dist_in1k``);
the file is ``model.safetensors``, which timm's repositories hold.

Without a connection, ``huggingface_hub`` serves the file from its cache (``HF_HUB_CACHE``,
``~/.cache/huggingface/hub`` by default; ``HF_HUB_OFFLINE=1`` skips the network).  A file that
is in no cache can be downloaded by hand and passed as ``checkpoint_path=``.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import models, validation
from .extras import require
from .models import list_models, lookup

#: The file of a timm repository on the Hugging Face Hub that holds the weights.
HF_HUB_FILENAME = "model.safetensors"


def pretrained_names() -> list[str]:
    """The registered names with published weights (``create_model(name, pretrained=True)``)."""
    return [name for name in list_models() if lookup(name)[1].pretrained_cfg.get("hf_hub_id")]


def hub_source(name: str) -> tuple[str, str]:
    """``(repository, file)`` of ``name``'s weights on the Hugging Face Hub; a ``ValueError``
    for a name without published weights (the ``*_digits`` configs are ours alone)."""
    cfg = lookup(name)[1].pretrained_cfg
    repo = cfg.get("hf_hub_id")
    if not repo:
        raise ValueError(
            f"pretrained=True: {name!r} has no published weights (timm publishes weights for "
            f"{', '.join(pretrained_names())}); train it from scratch (pretrained=False), or "
            f"load a file of your own with checkpoint_path=")
    return repo, cfg.get("hf_hub_filename", HF_HUB_FILENAME)


def download_instructions(name: str, source: tuple[str, str] | None = None) -> str:
    """How to fetch ``name``'s weights (or those at ``source``, ``(repository, file)``) by hand
    and use them without the Hub."""
    repo, filename = source or hub_source(name)
    return (f"download {filename} of the repository {repo} by hand "
            f"(https://huggingface.co/{repo}/resolve/main/{filename}) and pass its path: "
            f"vit_scratch.create_model({name!r}, checkpoint_path='{filename}') (the trainer: "
            f"--model {name} --init {filename})")


#: Seconds the first request to the Hub may take before the Hub counts as unreachable.
PROBE_TIMEOUT = 10.0


def download(name: str, cache_dir=None, option: str = "pretrained=True",
             source: tuple[str, str] | None = None) -> Path:
    """The local path of ``name``'s published weights (or of ``source``, ``(repository,
    file)``, another repository's), downloaded into the Hugging Face cache the first time
    (``cache_dir``: another cache folder, as timm's ``cache_dir``).  ``option`` is how the
    caller's user asked for them, in messages (the trainer: ``--pretrained``).

    One request asks the Hub for the file's metadata first, without retries
    (``get_hf_file_metadata``).  When it fails for any reason but the Hub's answer that the
    file is not there -- no network, no name resolution, a proxy or firewall in the way --
    the file is served from the cache alone (``local_files_only``), at once: without it,
    ``hf_hub_download`` retries an unreachable Hub for about half a minute, with a log line
    for every try, before it looks in the cache.

    Raises ``ValueError`` for a name without published weights (before anything else),
    ``ModuleNotFoundError`` naming the ``[hub]`` extra without ``huggingface_hub``, and
    ``FileNotFoundError`` naming the repository, the file and ``checkpoint_path=`` when the
    file is neither reachable (offline, ``HF_HUB_OFFLINE=1``, no connection) nor cached."""
    repo, filename = source or hub_source(name)
    hub = require("huggingface_hub", f"{option} ({name}'s weights from the Hugging Face Hub)")
    from huggingface_hub import constants
    from huggingface_hub.utils import (EntryNotFoundError, LocalEntryNotFoundError,
                                       RepositoryNotFoundError)

    cache = cache_dir if cache_dir is not None else constants.HF_HUB_CACHE
    endpoint = constants.ENDPOINT
    unreachable = "offline mode is on (HF_HUB_OFFLINE=1)" if constants.HF_HUB_OFFLINE else None
    try:
        if unreachable is None:
            try:
                hub.get_hf_file_metadata(hub.hf_hub_url(repo, filename, endpoint=endpoint),
                                         timeout=PROBE_TIMEOUT, endpoint=endpoint)
            except (RepositoryNotFoundError, EntryNotFoundError):
                raise
            except Exception as error:  # noqa: BLE001 -- any other failure: use the cache
                why = " ".join(str(error).split()) or type(error).__name__
                unreachable = f"the Hugging Face Hub ({endpoint}) could not be reached ({why})"
        return Path(hub.hf_hub_download(repo, filename, cache_dir=cache_dir, endpoint=endpoint,
                                        local_files_only=unreachable is not None))
    except LocalEntryNotFoundError as error:
        why = unreachable or "the Hugging Face Hub could not be reached"
        raise FileNotFoundError(
            f"{option}: {why} and {filename} of {repo} is not in the cache "
            f"{str(cache)!r}; {download_instructions(name, (repo, filename))}") from error
    except (RepositoryNotFoundError, EntryNotFoundError) as error:
        raise FileNotFoundError(
            f"{option}: the Hugging Face Hub has no {filename} in {repo} "
            f"({type(error).__name__}); {download_instructions(name, (repo, filename))}") from error


# --- models with weights: timm's create_model ------------------------------------------------


def _weights_source(name: str, pretrained, checkpoint_path, overlay: dict):
    """Where ``create_model``'s keywords say the weights are, checked before anything is built
    or downloaded: ``("file", path)`` (``checkpoint_path=``, or with ``pretrained=True`` a
    ``pretrained_cfg_overlay`` ``file``), ``("hub", (repository, file))`` (``pretrained=True``:
    the overlay's ``hf_hub_id`` and ``hf_hub_filename``, else the name's published weights), or
    None (random weights).  timm's order: an overlay's ``state_dict``, its ``file``, then the
    Hub; a ``state_dict`` and a ``url`` are refused (weights are read from files, checked on
    the way in, and fetched from the Hugging Face Hub only), saying what to do instead."""
    pretrained = validation.check_bool(pretrained, "pretrained")
    if checkpoint_path is not None and not isinstance(checkpoint_path, (str, os.PathLike)):
        raise ValueError(f"checkpoint_path must be a str or a path, got "
                         f"{type(checkpoint_path).__name__}")
    if pretrained and checkpoint_path is not None:
        raise ValueError(f"pretrained=True and checkpoint_path={str(checkpoint_path)!r} both say "
                         f"where the weights come from: give one (pretrained=True: {name}'s "
                         f"published weights; checkpoint_path: a file)")
    if not pretrained:
        return None if checkpoint_path is None else ("file", checkpoint_path)
    if overlay.get("state_dict") is not None:
        raise ValueError("pretrained=True with pretrained_cfg_overlay['state_dict']: weights are "
                         "loaded from files here, checked on the way in; save the dict with "
                         "vit_scratch.save_checkpoint(state_dict, 'weights.safetensors') and "
                         "pass pretrained_cfg_overlay=dict(file='weights.safetensors')")
    if overlay.get("file"):
        return "file", overlay["file"]
    cfg = {**lookup(name)[1].pretrained_cfg, **overlay}
    if cfg.get("hf_hub_id"):
        return "hub", (cfg["hf_hub_id"], cfg.get("hf_hub_filename") or HF_HUB_FILENAME)
    if cfg.get("url"):
        raise ValueError(f"pretrained=True with pretrained_cfg_overlay['url']={cfg['url']!r}: "
                         f"weights are fetched from the Hugging Face Hub only; download the file "
                         f"and pass pretrained_cfg_overlay=dict(file=PATH)")
    return "hub", hub_source(name)  # a name without published weights: ValueError


def _load_weights(name: str, source, cache_dir):
    """The path of the file ``source`` (:func:`_weights_source`) names, downloaded first from
    the Hub; None for random weights."""
    if source is None:
        return None
    kind, where = source
    return download(name, cache_dir, source=where) if kind == "hub" else where


def create_model(name: str, pretrained: bool = False, checkpoint_path=None, cache_dir=None,
                 **kwargs):
    """Build the PyTorch model ``name``: randomly initialised (to train from scratch), or with
    weights, as timm's ``create_model``:

    * ``pretrained=True``: the weights timm publishes for ``name`` on the Hugging Face Hub
      (``pip install -e '.[hub]'``; downloaded once into the Hugging Face cache, or
      ``cache_dir``; see :func:`download`), or, as timm's ``pretrained_cfg_overlay`` says,
      a local file (``pretrained_cfg_overlay=dict(file="model.safetensors")``) or another
      repository of the Hub (``dict(hf_hub_id=..., hf_hub_filename=...)``);
    * ``checkpoint_path=FILE``: a file of ours or timm's (safetensors, or a PyTorch file read
      with ``weights_only=True``).

    Both load strictly, except that a head for another ``num_classes`` than the file's is
    replaced by a fresh one (a warning says so): ``create_model("cait_xxs24_224",
    pretrained=True, num_classes=4)`` is a starting point for fine-tuning on 4 classes.

    kwargs override the name's config fields (``num_classes``, ``img_size``, ``in_chans``,
    ``drop_path_rate`` and the family's own: ``get_config(name)`` shows them all); a
    position embedding of another size is resized on load, and the first convolution of RGB
    weights is adapted to another ``in_chans`` (as timm's ``adapt_input_conv``).  timm's other
    factory keywords -- ``device``, ``dtype``, ``global_pool``, ``dynamic_img_size``,
    ``pretrained_cfg_overlay`` (entries of the model's ``pretrained_cfg``: the preprocessing,
    ``input_size`` giving ``in_chans`` and ``img_size``), ``features_only``, ``out_indices``,
    ``feature_cls`` -- are ``vit_scratch.models``' ``MODEL_OPTIONS``; a feature extractor is
    built after the weights are loaded.
    """
    family, spec = lookup(name)  # an unknown name lists the known ones
    kwargs, options, features = models.split_options(family, kwargs, spec.name)
    source = _weights_source(spec.name, pretrained, checkpoint_path,
                             options.get("pretrained_cfg_overlay") or {})
    cfg = spec.config(**kwargs)  # bad kwargs: refused before anything is downloaded
    path = _load_weights(spec.name, source, cache_dir)
    model = models.build_model(family, spec, cfg, **options)
    if path is not None:
        from .weights import load_pretrained

        load_pretrained(model, path)
    return models.feature_model(model, **features)


def create_numpy_model(name: str, params: dict | None = None, pretrained: bool = False,
                       checkpoint_path=None, cache_dir=None, pretrained_cfg_overlay=None,
                       **kwargs):
    """Build the NumPy model ``name`` from ``params``, a dict of arrays keyed like the PyTorch
    ``state_dict`` (``vit_scratch.state_dict_to_numpy(model.state_dict())``), or from a file:
    ``checkpoint_path=FILE`` or ``pretrained=True``, as for :func:`create_model` (reading a
    file uses PyTorch's reader; the model it builds does not).

    Returns a callable model: images (B, C, H, W) ndarray -> logits (B, num_classes) ndarray.
    Missing, unexpected or mis-shaped keys raise a ``ValueError`` that lists them: a file
    loads strictly, its head included (``num_classes`` must be the file's).
    """
    family, spec = lookup(name)  # an unknown name lists the known ones
    name = spec.name  # without a tag
    overlay = models.check_pretrained_cfg_overlay(pretrained_cfg_overlay, name)
    source = _weights_source(name, pretrained, checkpoint_path, overlay)
    given = params is not None
    if given and (pretrained or source is not None):
        raise ValueError("give params, checkpoint_path or pretrained=True, not several: each "
                         "says where the weights come from")
    if not given and source is None:
        raise ValueError(f"params for {name} must be a dict of NumPy arrays keyed like the "
                         f"PyTorch state_dict (vit_scratch.state_dict_to_numpy(model."
                         f"state_dict())), got NoneType; or load a file: checkpoint_path=FILE "
                         f"or pretrained=True")
    cfg = spec.config(**models.overlay_defaults(overlay, kwargs))  # before any download
    if not given:
        from .weights import read_state_dict, state_dict_to_numpy

        params = state_dict_to_numpy(read_state_dict(_load_weights(name, source, cache_dir)))
    return models.build_numpy_model(family, spec, cfg, params, overlay)
