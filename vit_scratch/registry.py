"""The model registry: names -> (family, default config, preprocessing).  Torch-free.

Spec modules register their names with a decorator, in the style of timm's ``@register_model``::

    @register_model(FAMILY, pretrained_cfg=dict(mean=..., std=..., crop_pct=0.9))
    def vit_tiny_patch16_224() -> ViTConfig:
        "ViT-Ti/16: 192 channels, 12 blocks, 3 heads."
        return ViTConfig(patch_size=16, embed_dim=192, depth=12, num_heads=3)

The decorated function returns the name's *default config*; ``get_config(name, **kwargs)``
overrides its fields.  Every module in ``vit_scratch/specs/`` is imported the first time the
registry is asked anything, so a new family is found without editing this file.
"""
from __future__ import annotations

import importlib
import pkgutil

from .specs.base import Family, ModelSpec

_REGISTRY: dict[str, ModelSpec] = {}
_discovered = False


def register_model(family: Family, pretrained_cfg: dict | None = None, name: str | None = None):
    """Decorator: register ``fn`` (-> default config) under ``name`` (default: ``fn.__name__``).

    ``pretrained_cfg`` holds what the name's weights expect (``input_size``, ``mean``, ``std``,
    ``crop_pct``, ``interpolation``), on top of the family's defaults."""

    def decorate(fn):
        key = name or fn.__name__
        if key in _REGISTRY and _REGISTRY[key].default_config is not fn:
            raise ValueError(f"model name {key!r} is registered twice")
        cfg = {**family.pretrained_cfg, **(pretrained_cfg or {})}
        _REGISTRY[key] = ModelSpec(key, family, fn, cfg, (fn.__doc__ or "").strip())
        return fn

    return decorate


def _discover() -> None:
    """Import every spec module once (they register their names as they load)."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    from . import specs

    for info in pkgutil.iter_modules(specs.__path__):
        if info.name != "base" and not info.name.startswith("_"):
            importlib.import_module(f"{specs.__name__}.{info.name}")


def list_models(filter: str = "") -> list[str]:
    """The names ``create_model`` and ``create_numpy_model`` accept, sorted.

    ``filter`` keeps the names that contain it, or match it as a shell pattern (``"cait_*"``)."""
    import fnmatch

    _discover()
    names = sorted(_REGISTRY)
    if not filter:
        return names
    return [n for n in names if fnmatch.fnmatch(n, filter) or filter in n]


def get_spec(name: str) -> ModelSpec:
    """The registered spec of ``name``; unknown names list the known ones."""
    _discover()
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown model name {name!r}; known models: {', '.join(list_models())}")
    return _REGISTRY[name]


def get_config(name: str, **kwargs):
    """The config of ``name`` with ``kwargs`` overriding its fields (``img_size=(224, 160)``)."""
    return get_spec(name).config(**kwargs)


def get_pretrained_cfg(name: str) -> dict:
    """What ``name``'s weights expect: ``input_size``, ``mean``, ``std``, ``crop_pct``, ..."""
    spec = get_spec(name)
    return spec.pretrained_cfg_for(spec.config())


def families() -> list[Family]:
    """The registered families, each once, in name order of their first model."""
    _discover()
    seen: dict[str, Family] = {}
    for spec in sorted(_REGISTRY.values(), key=lambda s: s.name):
        seen.setdefault(spec.family.module, spec.family)
    return list(seen.values())
