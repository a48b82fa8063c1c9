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
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from .specs import cait, coat, vit
from .specs.base import ModelSpec, num_params
from .specs.pretrained_cfg import (PRETRAINED_CFG_KEYS,  # noqa: F401  (models.PRETRAINED_CFG_KEYS)
                                   check_pretrained_cfg_overlay, overlaid_pretrained_cfg,
                                   overlay_defaults)

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
#:                        (``specs.pretrained_cfg.check_pretrained_cfg_overlay``)
#:   features_only, out_indices, feature_cls   a backbone that returns feature maps
#:                        (``vit_scratch.torch_nn.features``; ``feature_cls="getter"``, timm's name)
MODEL_OPTIONS = ("device", "dtype", "global_pool", "dynamic_img_size", "pretrained_cfg_overlay")
FEATURE_OPTIONS = ("features_only", "out_indices", "feature_cls")


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
        what = f"params for {spec.name}"
        message = (other_family_message(shapes, family, what)
                   or other_variant_message(shapes, family.spec.MODELS.param_shapes(cfg),
                                            family, what, own_name=spec.name))
        if message:
            raise ValueError(message)
    model = family.numpy_class().class_for(cfg)(cfg, params, name=spec.name)
    model.pretrained_cfg = pretrained_cfg
    return model


# --- which family a model or a state_dict belongs to ----------------------------------------------
# By name first: a model of the factory and a file of save_checkpoint carry their registered
# name, which the table leads to.  Keys decide only where there is no name (timm's own files, a
# dict of arrays), and at the level of families: every name of a family -- its variants
# included (DeiT III is ViT's) -- stands for that family.


def _pattern(key: str) -> str:
    """``blocks.3.attn.qkv.weight`` -> ``blocks.#.attn.qkv.weight``: a key without its indices."""
    return re.sub(r"\.\d+(?=\.)", ".#", key)


def _layouts() -> dict[str, tuple[Family, frozenset, dict]]:
    """Every registered name -> (its family, its key patterns, its ``{key: shape}``), for the
    table as it is (built again when a family or a name is added)."""
    return _layout_table(FAMILIES, tuple(len(family.spec.MODELS) for family in FAMILIES))


@functools.lru_cache(maxsize=4)
def _layout_table(families: tuple, sizes: tuple) -> dict[str, tuple[Family, frozenset, dict]]:
    out = {}
    for name, (family, spec) in _name_table(families, sizes).items():
        table = spec.param_shapes(spec.default)
        out[name] = (family, frozenset(_pattern(k) for k in table), table)
    return out


def identify_family(shapes: dict, name: str | None = None) -> tuple[Family, str | None] | None:
    """Which family a state_dict is: ``(family, name)``, or None when nothing says.

    ``name``, the registered name the weights were saved under (a file's ``model_name``),
    decides when it is known.  Otherwise the keys do: each registered name's keys, compared
    without their block indices (``blocks.#.ls1.gamma``), as sets -- the family of the name whose
    set overlaps most (intersection over union, at least one half) wins, and a tie between
    families decides nothing.  ``name`` is then the registered name whose ``{key: shape}``
    table holds every key with its shape (None if no name does)."""
    layouts = _layouts()
    if isinstance(name, str) and name.partition(".")[0] in layouts:
        return layouts[name.partition(".")[0]][0], name.partition(".")[0]
    patterns = {_pattern(k) for k in shapes}
    scores = {n: len(patterns & known) / max(len(patterns | known), 1)
              for n, (_, known, _) in layouts.items()}
    best = max(scores.values(), default=0.0)
    families = {layouts[n][0] for n, score in scores.items() if score == best}
    if best < 0.5 or len(families) != 1:
        return None
    family = families.pop()
    fits = [n for n, (f, _, table) in layouts.items() if f is family and all(
        k in table and tuple(table[k]) == tuple(s) for k, s in shapes.items())]
    return family, (min(fits, key=lambda n: len(layouts[n][2]) - len(shapes)) if fits else None)


def family_name(family: Family) -> str:
    """A family's name in messages: its model class's name (the same in both rooms)."""
    return family.numpy_class().__name__


def other_family_message(shapes: dict, family: Family, what: str,
                         name: str | None = None) -> str | None:
    """A message when ``shapes`` (a state_dict's ``{key: shape}``, saved under the registered
    ``name`` if known) is another family's than ``family``'s ("... are those of a Cait
    (cait_digits), but the model is a CoaT"), else None."""
    found = identify_family(shapes, name)
    if found is None or found[0] is family:
        return None
    other, name = found
    which = f" ({name})" if name else ""
    build = f"vit_scratch.create_model({name!r})" if name else "a model of that family"
    return (f"{what}: the keys and shapes are those of a {family_name(other)}{which}, but the "
            f"model is a {family_name(family)}; build {build} for these weights")


def layout_name(shapes: dict, family: Family | None = None) -> str | None:
    """The registered name (of ``family``, if given) whose keys, block indices aside, are
    exactly ``shapes``' keys -- the variant a state_dict's layout is (the smallest such name) --
    or None."""
    patterns = frozenset(_pattern(k) for k in shapes)
    names = [n for n, (f, known, table) in _layouts().items()
             if known == patterns and (family is None or f is family)]
    return min(names, key=lambda n: num_params(_layouts()[n][2])) if names else None


def other_variant_message(shapes: dict, own: dict, family: Family, what: str,
                          name: str | None = None, own_name: str | None = None) -> str | None:
    """A message when ``shapes`` (a state_dict's ``{key: shape}``, saved under ``name`` if
    known) is another variant of ``family`` than ``own`` (the model's ``{key: shape}``, built
    as ``own_name`` if known): both layouts registered, and not the same ("... are those of
    deit3_small_patch16_224, another variant of VisionTransformer than the model's
    (deit_small_patch16_224)"), else None."""
    theirs, mine = (_variant(table, n, family) for table, n in ((shapes, name), (own, own_name)))
    if theirs is None or mine is None or _layouts()[theirs][1] == _layouts()[mine][1]:
        return None
    return (f"{what}: the keys and shapes are those of {theirs}, another variant of "
            f"{family_name(family)} than the model's ({mine}); build "
            f"vit_scratch.create_model({theirs!r}) for these weights")


def _variant(shapes: dict, name: str | None, family: Family) -> str | None:
    """The registered name whose layout ``shapes`` has: ``name`` if it is one, else
    :func:`layout_name`."""
    arch = name.partition(".")[0] if isinstance(name, str) else None
    known = _layouts().get(arch)
    if known and known[0] is family and known[1] == frozenset(_pattern(k) for k in shapes):
        return arch
    return layout_name(shapes, family)


def family_of(model) -> Family | None:
    """The family of ``model``, a model of either room or a model class: a model of the factory
    carries its registered name (``pretrained_cfg["architecture"]``), which the table leads to;
    otherwise the family whose PyTorch or NumPy class is the model's class or, failing that,
    its nearest base class (ViT's distilled models are ViT's).  None for any other class."""
    if not isinstance(model, type):
        architecture = (getattr(model, "pretrained_cfg", None) or {}).get("architecture")
        if isinstance(architecture, str) and architecture in _registered():
            return _registered()[architecture][0]
        model = type(model)
    for cls in model.__mro__:
        for family in FAMILIES:
            if cls is family.torch_class() or cls is family.numpy_class():
                return family
    return None
