"""Pretrained weights from the Hugging Face Hub, where timm publishes them.

    create_model("cait_xxs24_224", pretrained=True, num_classes=4)   # fetched once, then cached

Infrastructure, not teaching code: the download, the cache and offline mode are
``huggingface_hub``'s (``hf_hub_download``), installed by the ``[hub]`` extra.  A registered
name with published weights carries the repository in its ``pretrained_cfg["hf_hub_id"]`` (the
same as timm's ``pretrained_cfg`` for that name, e.g. ``timm/cait_xxs24_224.fb_dist_in1k``);
the file is ``model.safetensors``, which timm's repositories hold.  The weights load like any
other file (``weights.load_pretrained``): strictly, except a head for another number of classes.

Without a connection, ``huggingface_hub`` serves the file from its cache (``HF_HUB_CACHE``,
``~/.cache/huggingface/hub`` by default; ``HF_HUB_OFFLINE=1`` skips the network).  A file that
is in no cache can be downloaded by hand and passed as ``checkpoint_path=``.
"""
from __future__ import annotations

from pathlib import Path

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


def download_instructions(name: str) -> str:
    """How to fetch ``name``'s weights by hand and use them without the Hub."""
    repo, filename = hub_source(name)
    return (f"download {filename} of the repository {repo} by hand "
            f"(https://huggingface.co/{repo}/resolve/main/{filename}) and pass its path: "
            f"vit_scratch.create_model({name!r}, checkpoint_path='{filename}') (the trainer: "
            f"--model {name} --init {filename})")


def download(name: str, cache_dir=None) -> Path:
    """The local path of ``name``'s published weights, downloaded into the Hugging Face cache
    the first time (``cache_dir``: another cache folder, as timm's ``cache_dir``).

    Raises ``ValueError`` for a name without published weights (before anything else),
    ``ModuleNotFoundError`` naming the ``[hub]`` extra without ``huggingface_hub``, and
    ``FileNotFoundError`` naming the repository, the file and ``checkpoint_path=`` when the
    file is neither reachable (offline, ``HF_HUB_OFFLINE=1``, no connection) nor cached."""
    repo, filename = hub_source(name)
    hub = require("huggingface_hub", f"pretrained=True ({name}'s weights from the Hugging "
                                     f"Face Hub)")
    from huggingface_hub.utils import (EntryNotFoundError, LocalEntryNotFoundError,
                                       RepositoryNotFoundError)

    try:
        return Path(hub.hf_hub_download(repo, filename, cache_dir=cache_dir))
    except LocalEntryNotFoundError as error:
        cache = cache_dir if cache_dir is not None else hub.constants.HF_HUB_CACHE
        why = ("offline mode is on (HF_HUB_OFFLINE=1)" if hub.constants.HF_HUB_OFFLINE
               else "the Hugging Face Hub could not be reached")
        raise FileNotFoundError(
            f"pretrained=True: {why} and {filename} of {repo} is not in the cache "
            f"{str(cache)!r}; {download_instructions(name)}") from error
    except (RepositoryNotFoundError, EntryNotFoundError) as error:
        raise FileNotFoundError(
            f"pretrained=True: the Hugging Face Hub has no {filename} in {repo} "
            f"({type(error).__name__}); {download_instructions(name)}") from error
