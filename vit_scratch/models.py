"""The model factory: a name leads to its family's classes through one table.

    create_model("vit_tiny_patch16_224", num_classes=10)          # PyTorch nn.Module
    create_model("coat_lite_tiny", features_only=True)            # a backbone of feature maps
    create_numpy_model("vit_tiny_patch16_224", params)            # NumPy model
    list_models(), get_config(name), get_pretrained_cfg(name)

Names and architectures are timm's, so a timm or official checkpoint of the same name loads.
A name may carry the tag of its published weights, as timm's do (``deit_tiny_patch16_224.fb_in1k``).
:data:`FAMILIES` has one line per family: its torch-free spec module (config, key/shape table,
and ``MODELS``, the names it registers) and its model class in each room.  The room classes are
looked up on first use, so ``import vit_scratch`` does not import PyTorch and a NumPy model
builds without it.  A config may ask for a subclass of its family's class
(``cls.class_for(cfg)``: ViT's ``distilled=True`` is ``VisionTransformerDistilled``).
"""
from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from .specs import cait, coat, vit
from .specs.base import ModelSpec

__all__ = ["FAMILIES", "MODEL_OPTIONS", "create_model", "create_numpy_model", "get_config",
           "get_pretrained_cfg", "list_models", "timm_name"]


def torch_nn():
    """The PyTorch room, ``vit_scratch.torch_nn``, imported the first time a model is built."""
    from . import torch_nn as room

    return room


def numpy_nn():
    """The NumPy room, ``vit_scratch.numpy_nn`` (it never imports PyTorch)."""
    from . import numpy_nn as room

    return room


@dataclass(frozen=True)
class Family:
    """One model family: ``spec`` is its torch-free spec module (``spec.MODELS``: its names);
    ``torch_class()`` and ``numpy_class()`` return its model class in each room."""

    spec: ModuleType
    torch_class: Callable[[], type]
    numpy_class: Callable[[], type]


#: The model families, one line each: spec module, PyTorch class, NumPy class.
FAMILIES = (
    Family(vit, lambda: torch_nn().vit.VisionTransformer, lambda: numpy_nn().vit.VisionTransformer),
    Family(cait, lambda: torch_nn().cait.Cait, lambda: numpy_nn().cait.Cait),
    Family(coat, lambda: torch_nn().coat.CoaT, lambda: numpy_nn().coat.CoaT),
)


def _registered() -> dict[str, tuple[Family, ModelSpec]]:
    """Every registered name -> (its family, its spec), read from the families' ``MODELS``;
    built once for the table as it is (a family added to ``FAMILIES`` or a name registered
    later builds it again)."""
    return _name_table(FAMILIES, tuple(len(family.spec.MODELS) for family in FAMILIES))


@functools.lru_cache(maxsize=4)
def _name_table(families: tuple, sizes: tuple) -> dict[str, tuple[Family, ModelSpec]]:
    names: dict[str, tuple[Family, ModelSpec]] = {}
    for family in families:
        for name, spec in family.spec.MODELS.items():
            if name in names:
                raise ValueError(f"model name {name!r} is registered by two families")
            names[name] = (family, spec)
    return names


def lookup(name: str) -> tuple[Family, ModelSpec]:
    """``(family, spec)`` of a registered name, or of ``name.tag`` with the tag of the name's
    published weights (timm's tagged names); unknown names list the known ones."""
    registered = _registered()
    arch, _, tag = name.partition(".") if isinstance(name, str) else (name, "", "")
    if not isinstance(name, str) or arch not in registered:
        raise ValueError(f"unknown model name {name!r}; known models: "
                         f"{', '.join(sorted(registered))}")
    spec = registered[arch][1]
    if tag and tag != spec.tag:
        known = (f"the tag of its weights is {spec.tag!r}" if spec.tag
                 else "it has no published weights")
        raise ValueError(f"unknown model name {name!r}: {arch} is known, but {known} (timm's "
                         f"other tags of {arch} are timm's alone)")
    return registered[arch]


def list_models(filter: str = "") -> list[str]:
    """The names ``create_model`` and ``create_numpy_model`` accept, sorted.

    ``filter`` keeps the names that contain it, or match it as a shell pattern (``"cait_*"``)."""
    names = sorted(_registered())
    if not filter:
        return names
    return [n for n in names if fnmatch.fnmatch(n, filter) or filter in n]


def timm_name(name: str, cfg=None) -> str:
    """The name timm knows this model by: ``name`` itself when timm publishes weights for it
    (its ``pretrained_cfg`` has an ``hf_hub_id``), else the first such name of its family --
    whose class is the same; pass every field of the config to get this one.  With ``cfg``, a
    name whose class builds ``cfg`` (timm picks DeiT's distilled class by the name)."""
    family, spec = lookup(name)

    def builds(s) -> bool:
        return cfg is None or getattr(s.default, "distilled", False) == getattr(cfg, "distilled",
                                                                                 False)

    if spec.pretrained_cfg.get("hf_hub_id") and builds(spec):
        return name
    return next(other for other, s in family.spec.MODELS.items()
                if s.pretrained_cfg.get("hf_hub_id") and builds(s))


def get_config(name: str, **kwargs):
    """The config of ``name`` with ``kwargs`` overriding its fields (``img_size=(224, 160)``)."""
    return lookup(name)[1].config(**kwargs)


def get_pretrained_cfg(name: str, **kwargs) -> dict:
    """What ``name``'s weights expect: ``input_size``, ``mean``, ``std``, ``crop_pct``, ...
    (``input_size`` and ``num_classes`` follow ``kwargs``, as ``create_model(name, **kwargs)``'s)."""
    spec = lookup(name)[1]
    return spec.pretrained_cfg_for(spec.config(**kwargs))


def create_model(name: str, **kwargs):
    """Build the PyTorch model ``name`` (randomly initialised, as for training from scratch).

    kwargs override the name's config fields (``num_classes``, ``img_size``, ``in_chans``,
    ``drop_path_rate`` and the family's own: ``get_config(name)`` shows them all), or are one of
    timm's factory keywords (:data:`MODEL_OPTIONS`).
    Load weights with ``vit_scratch.load_checkpoint(model, path)``, or build the model with
    them: ``vit_scratch.create_model`` (``vit_scratch.hub.create_model``) adds timm's
    ``pretrained=`` and ``checkpoint_path=`` to this.
    """
    family, spec = lookup(name)
    kwargs, options, features = split_options(family, kwargs, spec.name)
    cfg = spec.config(**kwargs)  # bad kwargs: refused before anything is built
    return feature_model(build_model(family, spec, cfg, **options), **features)


#: What ``create_model`` takes besides a config's fields: timm's factory keywords, which change
#: neither the config nor the weights' shapes.
#:   device, dtype        where the parameters are created and their floating dtype
#:   global_pool          how the features are pooled (``"token"``, ``"avg"``; ``""``: not at all,
#:                        ``forward`` returns tokens; the family's ``global_pools``)
#:   dynamic_img_size     a model with a position embedding takes any size its patches tile
#:   pretrained_cfg_overlay  entries that replace those of the name's ``pretrained_cfg``
#:                        (:func:`check_pretrained_cfg_overlay`)
#:   features_only, out_indices, feature_cls   a backbone that returns feature maps
#:                        (``vit_scratch.torch_nn.features``; ``feature_cls="getter"``, timm's name)
MODEL_OPTIONS = ("device", "dtype", "global_pool", "dynamic_img_size", "pretrained_cfg_overlay")
FEATURE_OPTIONS = ("features_only", "out_indices", "feature_cls")

#: The entries a ``pretrained_cfg`` may hold: the fields of timm's ``PretrainedCfg``.  Where the
#: weights come from (``WEIGHT_SOURCES``), what the model's input must look like (``input_size``,
#: ``mean``, ``std``, ``crop_pct``, ``interpolation``, ``crop_mode``: what
#: ``vit_scratch.data.preprocess`` reads), the head, and descriptions.
PRETRAINED_CFG_KEYS = (
    "url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source", "architecture", "tag",
    "custom_load", "input_size", "test_input_size", "min_input_size", "fixed_input_size",
    "interpolation", "crop_pct", "test_crop_pct", "crop_mode", "mean", "std", "num_classes",
    "label_offset", "label_names", "label_descriptions", "pool_size", "test_pool_size",
    "first_conv", "classifier", "license", "description", "origin_url", "paper_name",
    "paper_ids", "notes")
#: The entries that say where ``pretrained=True`` finds the weights (``vit_scratch.hub``).
WEIGHT_SOURCES = ("state_dict", "file", "hf_hub_id", "hf_hub_filename", "url")
#: The resampling filters the preprocessing knows (``vit_scratch.data.preprocess``).
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")


def check_pretrained_cfg_overlay(overlay, name: str) -> dict:
    """timm's ``pretrained_cfg_overlay``: a dict whose entries replace those of ``name``'s
    ``pretrained_cfg``, keyed as timm's ``PretrainedCfg`` (an unknown key is a ``TypeError``,
    as in timm).  The entries the library reads are checked, each a ``ValueError`` naming the
    entry and the value: ``input_size`` (C, H, W), ``mean`` and ``std`` (one number per channel,
    std positive), ``crop_pct`` in (0, 1], ``interpolation``, ``crop_mode`` (``"center"``),
    ``num_classes``, ``fixed_input_size``, ``architecture`` (the name itself) and the weight
    sources (``file``: a path, ``state_dict``: a dict, ``hf_hub_id``, ``hf_hub_filename``,
    ``url``: strings).  Returns a new dict (tuples for sequences)."""
    from . import validation

    if overlay is None:
        return {}
    if not isinstance(overlay, dict):
        raise ValueError(f"pretrained_cfg_overlay must be a dict of pretrained_cfg entries "
                         f"(e.g. dict(file='model.safetensors')), got "
                         f"{validation.describe_value(overlay)}")
    unknown = [k for k in overlay if k not in PRETRAINED_CFG_KEYS]
    if unknown:
        raise TypeError(f"pretrained_cfg_overlay has the unknown key(s) "
                        f"{', '.join(map(repr, unknown))}; a pretrained_cfg knows "
                        f"{', '.join(PRETRAINED_CFG_KEYS)}")
    out = dict(overlay)
    what = lambda key: f"pretrained_cfg_overlay[{key!r}]"  # noqa: E731
    if "input_size" in out:
        size = out["input_size"]
        if isinstance(size, str) or not hasattr(size, "__len__") or len(size) != 3:
            raise ValueError(f"{what('input_size')} must be (C, H, W), got "
                             f"{validation.describe_value(size)}")
        out["input_size"] = tuple(validation.check_positive(v, what("input_size"))
                                  for v in size)
    for key in ("mean", "std"):
        if key in out:
            values = out[key]
            if isinstance(values, str) or not hasattr(values, "__len__") or not len(values):
                raise ValueError(f"{what(key)} must be one number per channel, got "
                                 f"{validation.describe_value(values)}")
            check = validation.check_positive_float if key == "std" else validation.check_float
            out[key] = tuple(check(v, what(key)) for v in values)
    if "crop_pct" in out:
        out["crop_pct"] = validation.check_float(out["crop_pct"], what("crop_pct"), 0.0, 1.0,
                                                 low_open=True)
    if "interpolation" in out:
        validation.check_choice(out["interpolation"], what("interpolation"), INTERPOLATIONS)
    if "crop_mode" in out:
        validation.check_choice(out["crop_mode"], what("crop_mode"), ("center",))
    if "num_classes" in out:
        out["num_classes"] = validation.check_int(out["num_classes"], what("num_classes"),
                                                  minimum=0)
    if "fixed_input_size" in out:
        out["fixed_input_size"] = validation.check_bool(out["fixed_input_size"],
                                                        what("fixed_input_size"))
    if out.get("architecture", name) != name:
        raise ValueError(f"{what('architecture')} is {out['architecture']!r}, but the model is "
                         f"{name}: build that name instead (the architecture is the name's)")
    if out.get("file") is not None and not isinstance(out["file"], (str, os.PathLike)):
        raise ValueError(f"{what('file')} must be a path, got "
                         f"{validation.describe_value(out['file'])}")
    if out.get("state_dict") is not None and not isinstance(out["state_dict"], dict):
        raise ValueError(f"{what('state_dict')} must be a dict of tensors, got "
                         f"{validation.describe_value(out['state_dict'])}")
    for key in ("hf_hub_id", "hf_hub_filename", "url"):
        if out.get(key) is not None and not isinstance(out[key], str):
            raise ValueError(f"{what(key)} must be a str, got "
                             f"{validation.describe_value(out[key])}")
    return out


def overlay_defaults(overlay: dict, kwargs: dict) -> dict:
    """timm's rule: the overlay's ``input_size`` gives ``in_chans`` and ``img_size``, and its
    ``num_classes`` gives ``num_classes``, unless ``kwargs`` give them (a size that contradicts
    them is refused when the model is built: :func:`overlaid_pretrained_cfg`)."""
    kwargs = dict(kwargs)
    if "input_size" in overlay:
        kwargs.setdefault("in_chans", overlay["input_size"][0])
        kwargs.setdefault("img_size", tuple(overlay["input_size"][1:]))
    if "num_classes" in overlay:
        kwargs.setdefault("num_classes", overlay["num_classes"])
    return kwargs


def overlaid_pretrained_cfg(spec: ModelSpec, cfg, overlay: dict | None) -> dict:
    """``spec``'s ``pretrained_cfg`` for ``cfg``, the overlay's entries in place of its own
    (an in-memory ``state_dict`` is not kept in it).  Its ``input_size`` is the model's and its
    ``num_classes`` the model's head: an overlay whose ``input_size`` or ``mean``/``std``
    contradict the model's channels and size is a ``ValueError``."""
    pcfg = spec.pretrained_cfg_for(cfg)
    if not overlay:
        return pcfg
    entries = {k: v for k, v in overlay.items() if k != "state_dict"}
    size = pcfg["input_size"]
    if "input_size" in entries and tuple(entries["input_size"]) != tuple(size):
        raise ValueError(f"pretrained_cfg_overlay['input_size'] is {entries['input_size']}, but "
                         f"the model takes (in_chans, *img_size) = {size}: leave out in_chans "
                         f"and img_size (the overlay's input_size then gives them) or make them "
                         f"agree")
    for key in ("mean", "std"):
        if key in entries and len(entries[key]) != size[0]:
            raise ValueError(f"pretrained_cfg_overlay[{key!r}] has {len(entries[key])} "
                             f"values, but the model takes {size[0]} channel(s)")
    return {**pcfg, **entries, "input_size": size, "num_classes": cfg.num_classes}


def split_options(family: Family, kwargs: dict, name: str | None = None) -> tuple[dict, dict, dict]:
    """``kwargs`` -> (config fields, :data:`MODEL_OPTIONS`, :data:`FEATURE_OPTIONS`), the
    options checked (a ``ValueError`` naming the option and the value).  The config fields
    take the defaults of a ``pretrained_cfg_overlay`` (:func:`overlay_defaults`); ``name`` is
    the registered name (the overlay's ``architecture``).  ``out_indices`` and ``feature_cls``
    without ``features_only=True`` are a ``TypeError``: timm's model classes refuse
    ``feature_cls`` so, and timm drops ``out_indices`` without a word, which hides a forgotten
    ``features_only=True``."""
    from . import validation

    rest = dict(kwargs)
    options = {k: rest.pop(k) for k in MODEL_OPTIONS if k in rest}
    features = {k: rest.pop(k) for k in FEATURE_OPTIONS if k in rest}
    pools = family.torch_class().global_pools
    if options.get("global_pool") is not None and options["global_pool"] not in pools:
        raise ValueError(f"global_pool must be one of {pools} for {family_name(family)}, got "
                         f"{options['global_pool']!r}")
    if options.get("dynamic_img_size") is not None:
        validation.check_bool(options["dynamic_img_size"], "dynamic_img_size")
    if "features_only" in features:
        validation.check_bool(features["features_only"], "features_only")
    if not features.get("features_only"):
        given = [f"{k}={features[k]!r}" for k in ("out_indices", "feature_cls")
                 if features.get(k) is not None]
        if given:
            raise TypeError(f"{' and '.join(given)} without features_only=True: "
                            f"{'they are options' if len(given) > 1 else 'it is an option'} of "
                            f"the backbone of feature maps (features_only=True), and the model "
                            f"itself takes no such argument")
    if features.get("feature_cls") not in (None, "getter"):
        raise ValueError(f"feature_cls must be 'getter' (features from forward_intermediates, "
                         f"which every family has) or None, got {features['feature_cls']!r}")
    if options.get("device") is not None or options.get("dtype") is not None:
        import torch

        device, dtype = options.get("device"), options.get("dtype")
        if device is not None:
            try:
                options["device"] = torch.device(device)
            except (RuntimeError, TypeError):
                raise ValueError(f"device must be a torch.device or a device name such as "
                                 f"'cpu', 'cuda' or 'meta', got {device!r}") from None
        if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise ValueError(f"dtype must be a floating-point torch.dtype (torch.float32, "
                             f"torch.bfloat16, ...), got {dtype!r}")
    if "pretrained_cfg_overlay" in options:
        overlay = check_pretrained_cfg_overlay(options["pretrained_cfg_overlay"], name)
        options["pretrained_cfg_overlay"] = overlay
        rest = overlay_defaults(overlay, rest)
    return rest, options, features


def build_model(family: Family, spec: ModelSpec, cfg, device=None, dtype=None,
                global_pool=None, dynamic_img_size=None, pretrained_cfg_overlay=None):
    """The PyTorch model of ``family`` for ``cfg`` (a config built, and so validated, once),
    with the ``pretrained_cfg`` of the registered name ``spec`` (``pretrained_cfg_overlay``'s
    entries in place of its own); its parameters created on ``device`` (the ``meta`` device
    allocates nothing) in ``dtype``, with the :data:`MODEL_OPTIONS` ``global_pool`` and
    ``dynamic_img_size``."""
    pretrained_cfg = overlaid_pretrained_cfg(spec, cfg, pretrained_cfg_overlay)
    if device is not None:
        import torch

        place = torch.device(device)
    else:
        place = contextlib.nullcontext()
    with place:
        model = family.torch_class().class_for(cfg)(cfg)
    if dtype is not None:
        model = model.to(dtype=dtype)
    model.pretrained_cfg = pretrained_cfg
    if global_pool is not None:
        model.global_pool = model.check_global_pool(global_pool)
    if dynamic_img_size is not None:
        model.set_dynamic_img_size(dynamic_img_size)
    return model


def feature_model(model, features_only: bool = False, out_indices=None, feature_cls=None):
    """``model``, or with ``features_only`` the backbone that returns its feature maps
    (``vit_scratch.torch_nn.features.FeatureGetter``: ``out_indices`` None takes the family's
    default maps; the layers after the last one are pruned)."""
    if not features_only:
        return model
    return torch_nn().features.FeatureGetter(model, out_indices=out_indices)


def create_numpy_model(name: str, params: dict, pretrained_cfg_overlay=None, **kwargs):
    """Build the NumPy model ``name`` from ``params``, a dict of arrays keyed like the PyTorch
    ``state_dict`` (``vit_scratch.state_dict_to_numpy(model.state_dict())``).

    Returns a callable model: images (B, C, H, W) ndarray -> logits (B, num_classes) ndarray.
    Missing, unexpected or mis-shaped keys raise a ``ValueError`` that lists them.
    ``pretrained_cfg_overlay`` is as for :func:`create_model`.
    ``vit_scratch.create_numpy_model`` (``vit_scratch.hub.create_numpy_model``) also takes
    ``checkpoint_path=`` or ``pretrained=True`` instead of ``params``.
    """
    family, spec = lookup(name)
    overlay = check_pretrained_cfg_overlay(pretrained_cfg_overlay, spec.name)
    cfg = spec.config(**overlay_defaults(overlay, kwargs))
    return build_numpy_model(family, spec, cfg, params, overlay)


def build_numpy_model(family: Family, spec: ModelSpec, cfg, params, pretrained_cfg_overlay=None):
    """The NumPy model of ``family`` for ``cfg`` from ``params``, named after ``spec``, with
    its ``pretrained_cfg`` (``pretrained_cfg_overlay``'s entries in place of its own)."""
    pretrained_cfg = overlaid_pretrained_cfg(spec, cfg, pretrained_cfg_overlay)
    if hasattr(params, "keys") and hasattr(params, "get"):  # a dict: another family's params?
        shapes = {k: getattr(v, "shape", ()) for k, v in params.items()}
        message = other_family_message(shapes, family, f"params for {spec.name}")
        if message:
            raise ValueError(message)
    model = family.numpy_class().class_for(cfg)(cfg, params, name=spec.name)
    model.pretrained_cfg = pretrained_cfg
    return model


# --- which family a state_dict belongs to -------------------------------------------------------


def _pattern(key: str) -> str:
    """``blocks.3.attn.qkv.weight`` -> ``blocks.#.attn.qkv.weight``: a key without its indices."""
    return re.sub(r"\.\d+(?=\.)", ".#", key)


@functools.lru_cache(maxsize=None)
def _family_keys(spec) -> tuple[frozenset, dict]:
    """A family's key patterns (over all its registered names) and each name's {key: shape}."""
    tables = {name: spec.MODELS.param_shapes(entry.config()) for name, entry in spec.MODELS.items()}
    return frozenset(_pattern(k) for table in tables.values() for k in table), tables


def identify_family(shapes: dict) -> tuple[Family, str | None] | None:
    """Which family a state_dict is, from its keys: ``(family, name)`` where ``name`` is the
    registered name whose ``{key: shape}`` table holds every key with its shape (None if no
    name does), or None when no family's keys fit.

    The keys are compared without their block indices (``blocks.#.gamma_1``), as sets: the
    family whose set overlaps most (intersection over union, at least one half) wins."""
    patterns = {_pattern(k) for k in shapes}
    best, best_overlap = None, 0.5
    for family in FAMILIES:
        known, _ = _family_keys(family.spec)
        overlap = len(patterns & known) / max(len(patterns | known), 1)
        if overlap >= best_overlap:
            best, best_overlap = family, overlap
    if best is None:
        return None
    _, tables = _family_keys(best.spec)
    fits = [name for name, table in tables.items()
            if all(k in table and tuple(table[k]) == tuple(s) for k, s in shapes.items())]
    return best, (min(fits, key=lambda n: len(tables[n]) - len(shapes)) if fits else None)


def family_name(family: Family) -> str:
    """A family's name in messages: its model class's name (the same in both rooms)."""
    return family.numpy_class().__name__


def other_family_message(shapes: dict, family: Family, what: str) -> str | None:
    """A message when ``shapes`` (a state_dict's ``{key: shape}``) is another family's than
    ``family``'s ("... are those of a Cait (cait_digits), but the model is a CoaT"), else None."""
    found = identify_family(shapes)
    if found is None or found[0] is family:
        return None
    other, name = found
    which = f" ({name})" if name else ""
    build = f"vit_scratch.create_model({name!r})" if name else "a model of that family"
    return (f"{what}: the keys and shapes are those of a {family_name(other)}{which}, but the "
            f"model is a {family_name(family)}; build {build} for these weights")


def family_of(model_class: type) -> Family | None:
    """The family whose PyTorch or NumPy class ``model_class`` is, or a subclass of (ViT's
    distilled models); None for any other class."""
    for family in FAMILIES:
        if issubclass(model_class, (family.torch_class(), family.numpy_class())):
            return family
    return None
