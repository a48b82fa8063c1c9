"""A toy model family, added through the factory's table by ``tests/test_families.py``.

A real family is three files -- ``specs/<family>.py``, ``numpy_nn/<family>.py`` and
``torch_nn/<family>.py`` -- and one line in ``vit_scratch.models.FAMILIES``; the three parts sit
together here.  The model: patch embedding, a class token, LayerNorm, mean of the tokens, head.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from vit_scratch import validation
from vit_scratch.numpy_nn import base as numpy_base
from vit_scratch.numpy_nn.layers import layer_norm
from vit_scratch.numpy_nn.patch_embed import add_class_token, patch_embed
from vit_scratch.specs.base import ConfigMixin, ModelTable
from vit_scratch.torch_nn import base as torch_base
from vit_scratch.torch_nn.patch_embed import PatchEmbed


# --- the spec (specs/toy.py) -------------------------------------------------------------------

@dataclass(frozen=True)
class ToyConfig(ConfigMixin):
    img_size: int | tuple[int, int] = 16
    patch_size: int = 4
    in_chans: int = 3
    num_classes: int = 5
    embed_dim: int = 8

    def validate(self):
        validation.grid_size(self.img_size, self.patch_size)
        object.__setattr__(self, "img_size", validation.to_2tuple(self.img_size, "img_size"))
        super().validate()

    @property
    def grid_size(self) -> tuple[int, int]:
        return validation.grid_size(self.img_size, self.patch_size)


def toy_param_shapes(cfg: ToyConfig) -> dict[str, tuple[int, ...]]:
    C, p = cfg.embed_dim, cfg.patch_size
    return {"cls_token": (1, 1, C), "patch_embed.proj.weight": (C, cfg.in_chans, p, p),
            "patch_embed.proj.bias": (C,), "norm.weight": (C,), "norm.bias": (C,),
            "head.weight": (cfg.num_classes, C), "head.bias": (cfg.num_classes,)}


MODELS = ModelTable(toy_param_shapes, pretrained_cfg=dict(
    input_size=(3, 16, 16), mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), crop_pct=1.0,
    interpolation="bilinear"))


@MODELS.register
def toy_tiny() -> ToyConfig:
    """A toy: 16×16 images, 4×4 patches, 8 channels."""
    return ToyConfig()


# --- the PyTorch room (torch_nn/toy.py) --------------------------------------------------------

class Toy(torch_base.ModelBase):
    def __init__(self, cfg: ToyConfig | None = None, **kwargs):
        cfg = ToyConfig.build(cfg, **kwargs)
        super().__init__(cfg)
        C = self.num_features = self.embed_dim = cfg.embed_dim
        self.patch_embed = PatchEmbed(cfg.img_size, cfg.patch_size, cfg.in_chans, C)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
        self.norm = nn.LayerNorm(C, eps=1e-6)
        self.head = nn.Linear(C, cfg.num_classes)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.embed(self.prepare_images(images))  # (B, N, C)
        return self.norm(torch.cat([self.cls_token.expand(len(x), -1, -1), x], dim=1))

    def pool(self, features: torch.Tensor) -> torch.Tensor:
        return features.mean(dim=1)


# --- the NumPy room (numpy_nn/toy.py) ----------------------------------------------------------

class NumpyToy(numpy_base.ModelBase):
    param_shapes = staticmethod(toy_param_shapes)

    def __init__(self, cfg: ToyConfig, params: dict, name: str = "Toy"):
        super().__init__(cfg, params, name)
        self.num_features = self.embed_dim = cfg.embed_dim

    def forward_features(self, images: np.ndarray) -> np.ndarray:
        p = self.params
        x = patch_embed(self.prepare_images(images), p["patch_embed.proj.weight"],
                        p["patch_embed.proj.bias"])
        return layer_norm(add_class_token(x, p["cls_token"]), p["norm.weight"], p["norm.bias"])

    def pool(self, features: np.ndarray) -> np.ndarray:
        return features.mean(axis=1)
