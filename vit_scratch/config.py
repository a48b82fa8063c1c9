"""Model configurations: one frozen dataclass per family, shared by both rooms.

``ViTConfig`` holds every number that fixes a ViT's architecture.  The NumPy room reads it
to know what to compute, the PyTorch room to know what to build, and ``param_shapes`` turns it
into the exact ``{state_dict key: shape}`` table both rooms agree on (a test checks that the
PyTorch model's ``state_dict`` has exactly these keys and shapes).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from . import checks


@dataclass(frozen=True)
class ViTConfig:
    img_size: int | tuple[int, int] = 224  # (H, W) the position embedding is built for
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000  # 0 -> no head, the model returns the class-token features
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    # Regularisation for training (identity in eval; the NumPy room is inference only).
    drop_rate: float = 0.0  # dropout on embeddings, attention output and MLP
    attn_drop_rate: float = 0.0  # dropout on attention weights
    drop_path_rate: float = 0.0  # stochastic depth, linearly increasing over blocks

    def __post_init__(self):
        checks.check_positive(self.patch_size, "patch_size")
        checks.grid_size(self.img_size, self.patch_size)  # the error shows img_size as given
        size = checks.to_2tuple(self.img_size, "img_size")
        object.__setattr__(self, "img_size", size)
        checks.check_positive(self.in_chans, "in_chans")
        checks.check_positive(self.depth, "depth")
        if not isinstance(self.num_classes, int) or self.num_classes < 0:
            raise ValueError(f"num_classes must be an int >= 0, got {self.num_classes!r}")
        if self.mlp_ratio <= 0:
            raise ValueError(f"mlp_ratio must be positive, got {self.mlp_ratio!r}")
        for name in ("drop_rate", "attn_drop_rate", "drop_path_rate"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        checks.head_dim(self.embed_dim, self.num_heads)

    @property
    def grid_size(self) -> tuple[int, int]:
        return checks.grid_size(self.img_size, self.patch_size)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return int(self.embed_dim * self.mlp_ratio)

    def replace(self, **changes) -> "ViTConfig":
        """A copy with some fields changed; unknown field names are a ``TypeError``."""
        return dataclasses.replace(self, **check_fields(type(self), changes))


def check_fields(cls, kwargs: dict) -> dict:
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise TypeError(
            f"unknown argument(s) {', '.join(map(repr, unknown))} for {cls.__name__}; "
            f"known: {', '.join(known)}"
        )
    return kwargs


def vit_param_shapes(cfg: ViTConfig) -> dict[str, tuple[int, ...]]:
    """The ``state_dict`` of a ViT as ``{key: shape}``, in the order PyTorch lists it."""
    C, H, p = cfg.embed_dim, cfg.mlp_hidden, cfg.patch_size
    shapes = {
        "cls_token": (1, 1, C),
        "pos_embed": (1, 1 + cfg.num_patches, C),
        "patch_embed.proj.weight": (C, cfg.in_chans, p, p),
        "patch_embed.proj.bias": (C,),
    }
    for i in range(cfg.depth):
        block = {
            "norm1.weight": (C,),
            "norm1.bias": (C,),
            "attn.qkv.weight": (3 * C, C),
            **({"attn.qkv.bias": (3 * C,)} if cfg.qkv_bias else {}),
            "attn.proj.weight": (C, C),
            "attn.proj.bias": (C,),
            "norm2.weight": (C,),
            "norm2.bias": (C,),
            "mlp.fc1.weight": (H, C),
            "mlp.fc1.bias": (H,),
            "mlp.fc2.weight": (C, H),
            "mlp.fc2.bias": (C,),
        }
        shapes.update({f"blocks.{i}.{k}": v for k, v in block.items()})
    shapes["norm.weight"] = (C,)
    shapes["norm.bias"] = (C,)
    if cfg.num_classes:
        shapes["head.weight"] = (cfg.num_classes, C)
        shapes["head.bias"] = (cfg.num_classes,)
    return shapes


def num_params(shapes: dict[str, tuple[int, ...]]) -> int:
    """Total number of parameters of a ``{key: shape}`` table (e.g. ``vit_param_shapes(cfg)``)."""
    return sum(math.prod(shape) for shape in shapes.values())
