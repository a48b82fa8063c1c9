"""The model factory: one name -> one architecture, in both rooms.

    create_model("vit_tiny_patch16_224", num_classes=10)          # PyTorch nn.Module
    create_numpy_model("vit_tiny_patch16_224", params)            # NumPy model
    list_models(), get_config(name), get_pretrained_cfg(name)

Names and architectures are timm's, so a timm or official checkpoint of the same name loads.
The factory knows no family by name: each family registers its names in its spec module
(``vit_scratch/specs/<family>.py``), and its model classes live in ``numpy_nn/<family>.py`` and
``torch_nn/<family>.py`` under the same class name.
"""
from __future__ import annotations

from .registry import get_config, get_pretrained_cfg, get_spec, list_models, register_model

__all__ = ["create_model", "create_numpy_model", "get_config", "get_pretrained_cfg",
           "list_models", "register_model"]


def create_model(name: str, **kwargs):
    """Build the PyTorch model ``name`` (randomly initialised, as for training from scratch).

    kwargs override the name's config fields (``num_classes``, ``img_size``, ``in_chans``,
    ``drop_path_rate`` and the family's own: ``get_config(name)`` shows them all).
    Load weights with ``vit_scratch.load_checkpoint(model, path)``.
    """
    spec = get_spec(name)
    cfg = spec.config(**kwargs)
    model = spec.family.torch_class()(cfg)
    model.pretrained_cfg = spec.pretrained_cfg_for(cfg)
    return model


def create_numpy_model(name: str, params: dict, **kwargs):
    """Build the NumPy model ``name`` from ``params``, a dict of arrays keyed like the PyTorch
    ``state_dict`` (``vit_scratch.state_dict_to_numpy(model.state_dict())``).

    Returns a callable model: images (B, C, H, W) ndarray -> logits (B, num_classes) ndarray.
    Missing, unexpected or mis-shaped keys raise a ``ValueError`` that lists them.
    """
    spec = get_spec(name)
    cfg = spec.config(**kwargs)
    model = spec.family.numpy_class()(cfg, params, name=name)
    model.pretrained_cfg = spec.pretrained_cfg_for(cfg)
    return model
