"""The model factory: one name -> one architecture, in both rooms.

    create_model("vit_tiny_patch16_224", num_classes=10)          # PyTorch nn.Module
    create_numpy_model("vit_tiny_patch16_224", params)            # NumPy callable
    list_models()

Names and architectures are timm's, so a timm or official checkpoint of the same name loads.
Later families (CaiT, CoaT) register here too.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .config import ViTConfig, check_fields


@dataclass(frozen=True)
class ModelEntry:
    config: object  # the default config of this name
    torch_builder: Callable  # (cfg) -> nn.Module
    numpy_builder: Callable  # (cfg, params, name) -> callable


def _vit_torch(cfg):
    from .torch_nn.vit import VisionTransformer

    return VisionTransformer(cfg)


def _vit_numpy(cfg, params, name):
    from .numpy_nn.vit import ViT

    return ViT(cfg, params, name=name)


_REGISTRY: dict[str, ModelEntry] = {}


def register_model(name: str, config, torch_builder, numpy_builder) -> None:
    _REGISTRY[name] = ModelEntry(config, torch_builder, numpy_builder)


for _name, (_dim, _heads) in {
    "vit_tiny_patch16_224": (192, 3),
    "vit_small_patch16_224": (384, 6),
    "vit_base_patch16_224": (768, 12),
    "deit_tiny_patch16_224": (192, 3),
    "deit_small_patch16_224": (384, 6),
}.items():
    register_model(_name, ViTConfig(patch_size=16, img_size=224, embed_dim=_dim, depth=12,
                                    num_heads=_heads), _vit_torch, _vit_numpy)


def list_models() -> list[str]:
    """The names ``create_model`` and ``create_numpy_model`` accept, sorted."""
    return sorted(_REGISTRY)


def _entry(name: str) -> ModelEntry:
    if name not in _REGISTRY:
        raise ValueError(f"unknown model name {name!r}; known models: {', '.join(list_models())}")
    return _REGISTRY[name]


def get_config(name: str, **kwargs):
    """The config of ``name`` with ``kwargs`` overriding its fields (``img_size=(224, 160)``)."""
    entry = _entry(name)
    return entry.config.replace(**check_fields(type(entry.config), kwargs))


def create_model(name: str, **kwargs):
    """Build the PyTorch model ``name`` (randomly initialised, as for training from scratch).

    kwargs override the config: ``num_classes``, ``img_size`` (int or (H, W), any multiple of the
    patch size), ``embed_dim``, ``depth``, ``num_heads``, ``patch_size``, ``in_chans``,
    ``mlp_ratio``, ``qkv_bias``, ``drop_rate``, ``attn_drop_rate``, ``drop_path_rate``.
    Load weights with ``vit_scratch.load_checkpoint(model, path)``.
    """
    return _entry(name).torch_builder(get_config(name, **kwargs))


def create_numpy_model(name: str, params: dict, **kwargs):
    """Build the NumPy model ``name`` from ``params``, a dict of arrays keyed like the PyTorch
    ``state_dict`` (``vit_scratch.state_dict_to_numpy(model.state_dict())``).

    Returns a callable: images (B, C, H, W) ndarray -> logits (B, num_classes) ndarray.
    Missing, unexpected or mis-shaped keys raise a ``ValueError`` that lists them.
    """
    return _entry(name).numpy_builder(get_config(name, **kwargs), params, name)
