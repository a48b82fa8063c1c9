"""vit-scratch: Vision Transformers from scratch, NumPy first, then PyTorch.

    import vit_scratch
    model = vit_scratch.create_model("vit_tiny_patch16_224", num_classes=10)   # PyTorch
    vit_scratch.load_checkpoint(model, "vit_tiny.safetensors")                  # any timm/DeiT file
    np_model = vit_scratch.create_numpy_model(
        "vit_tiny_patch16_224", vit_scratch.state_dict_to_numpy(model.state_dict()))
    vit_scratch.list_models()
    vit_scratch.create_model("deit_tiny_patch16_224", pretrained=True, num_classes=4)  # [hub] extra

The rooms: ``vit_scratch.numpy_nn`` (functions on arrays) and ``vit_scratch.torch_nn``
(``nn.Module``s with timm's parameter names).  timm is never imported here.

``import vit_scratch`` does not import PyTorch: the NumPy room, the factory and the configs work
without it, and the names that need it (``load_checkpoint``, ``resize_pos_embed``, ...) import it
the first time they are used.
"""
from __future__ import annotations

import importlib

from .hub import create_model, create_numpy_model
from .models import get_config, get_pretrained_cfg, list_models
from .specs.vit import ViTConfig
from .checkpoint_checks import CheckpointError

__version__ = "0.1.0"

# name -> module that defines it; imported on first use (these need PyTorch)
_LAZY = {
    "load_checkpoint": "weights",
    "randomize_weights_": "weights",
    "read_state_dict": "weights",
    "save_checkpoint": "weights",
    "state_dict_to_numpy": "weights",
    "timm_kwargs": "weights",
    "resize_pos_embed": "torch_nn.patch_embed",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CheckpointError",
    "ViTConfig",
    "create_model",
    "create_numpy_model",
    "get_config",
    "get_pretrained_cfg",
    "list_models",
    "load_checkpoint",
    "randomize_weights_",
    "read_state_dict",
    "resize_pos_embed",
    "save_checkpoint",
    "state_dict_to_numpy",
    "timm_kwargs",
]
