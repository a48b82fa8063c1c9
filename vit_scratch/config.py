"""Model configurations (kept for existing imports; each family's spec lives in ``specs/``).

``ViTConfig`` and ``vit_param_shapes`` are ViT's (``vit_scratch.specs.vit``); ``check_fields``
and ``num_params`` are shared by every family (``vit_scratch.specs.base``).
"""
from __future__ import annotations

from .specs.base import ConfigMixin, check_fields, num_params  # noqa: F401
from .specs.vit import ViTConfig, vit_param_shapes  # noqa: F401
