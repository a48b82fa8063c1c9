"""The model factory: a name leads to its family's classes through one table.

    create_model("vit_tiny_patch16_224", num_classes=10)          # PyTorch nn.Module
    create_numpy_model("vit_tiny_patch16_224", params)            # NumPy model
    list_models(), get_config(name), get_pretrained_cfg(name)

Names and architectures are timm's, so a timm or official checkpoint of the same name loads.
:data:`FAMILIES` has one line per family: its torch-free spec module (config, key/shape table,
and ``MODELS``, the names it registers) and its model class in each room.  The room classes are
looked up on first use, so ``import vit_scratch`` does not import PyTorch and a NumPy model
builds without it.  A config may ask for a subclass of its family's class
(``cls.class_for(cfg)``: ViT's ``distilled=True`` is ``VisionTransformerDistilled``).
"""
from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from .specs import cait, coat, vit
from .specs.base import ModelSpec

__all__ = ["FAMILIES", "create_model", "create_numpy_model", "get_config", "get_pretrained_cfg",
           "list_models"]


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
    """``(family, spec)`` of a registered name; unknown names list the known ones."""
    registered = _registered()
    if not isinstance(name, str) or name not in registered:
        raise ValueError(f"unknown model name {name!r}; known models: "
                         f"{', '.join(sorted(registered))}")
    return registered[name]


def list_models(filter: str = "") -> list[str]:
    """The names ``create_model`` and ``create_numpy_model`` accept, sorted.

    ``filter`` keeps the names that contain it, or match it as a shell pattern (``"cait_*"``)."""
    names = sorted(_registered())
    if not filter:
        return names
    return [n for n in names if fnmatch.fnmatch(n, filter) or filter in n]


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
    ``drop_path_rate`` and the family's own: ``get_config(name)`` shows them all).
    Load weights with ``vit_scratch.load_checkpoint(model, path)``, or build the model with
    them: ``vit_scratch.create_model`` (``vit_scratch.hub.create_model``) adds timm's
    ``pretrained=`` and ``checkpoint_path=`` to this.
    """
    family, spec = lookup(name)
    return build_model(family, spec, spec.config(**kwargs))


def build_model(family: Family, spec: ModelSpec, cfg):
    """The PyTorch model of ``family`` for ``cfg`` (a config built, and so validated, once),
    with the ``pretrained_cfg`` of the registered name ``spec``."""
    model = family.torch_class().class_for(cfg)(cfg)
    model.pretrained_cfg = spec.pretrained_cfg_for(cfg)
    return model


def create_numpy_model(name: str, params: dict, **kwargs):
    """Build the NumPy model ``name`` from ``params``, a dict of arrays keyed like the PyTorch
    ``state_dict`` (``vit_scratch.state_dict_to_numpy(model.state_dict())``).

    Returns a callable model: images (B, C, H, W) ndarray -> logits (B, num_classes) ndarray.
    Missing, unexpected or mis-shaped keys raise a ``ValueError`` that lists them.
    ``vit_scratch.create_numpy_model`` (``vit_scratch.hub.create_numpy_model``) also takes
    ``checkpoint_path=`` or ``pretrained=True`` instead of ``params``.
    """
    family, spec = lookup(name)
    return build_numpy_model(family, spec, spec.config(**kwargs), params)


def build_numpy_model(family: Family, spec: ModelSpec, cfg, params):
    """The NumPy model of ``family`` for ``cfg`` from ``params``, named after ``spec``."""
    if hasattr(params, "keys") and hasattr(params, "get"):  # a dict: another family's params?
        shapes = {k: getattr(v, "shape", ()) for k, v in params.items()}
        message = other_family_message(shapes, family, f"params for {spec.name}")
        if message:
            raise ValueError(message)
    model = family.numpy_class().class_for(cfg)(cfg, params, name=spec.name)
    model.pretrained_cfg = spec.pretrained_cfg_for(cfg)
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
