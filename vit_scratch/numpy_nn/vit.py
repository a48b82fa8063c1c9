"""The Vision Transformer in NumPy, driven by a dict of arrays keyed like the PyTorch state_dict.

    tokens = [cls; patch_embed(images)] + pos_embed            # (B, 1 + N, C)
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    logits = head(norm(x)[:, 0])                               # (B, num_classes)
"""
from __future__ import annotations

import numpy as np

from .. import checks
from ..config import ViTConfig, vit_param_shapes
from .attention import multi_head_attention
from .layers import layer_norm, linear, mlp, sub_params
from .patch_embed import add_class_token, patch_embed


def block(x: np.ndarray, p: dict, num_heads: int, return_attention: bool = False):
    """One pre-norm transformer block.

    x: (B, N, C); p: the block's parameters with keys relative to the block
    (``norm1.weight``, ``attn.qkv.weight``, ``mlp.fc1.weight``, ...)  ->  (B, N, C)
    """
    h, attn = multi_head_attention(
        layer_norm(x, p["norm1.weight"], p["norm1.bias"]),
        p["attn.qkv.weight"], p.get("attn.qkv.bias"), p["attn.proj.weight"], p["attn.proj.bias"],
        num_heads, return_attention=True,
    )
    x = x + h
    x = x + mlp(layer_norm(x, p["norm2.weight"], p["norm2.bias"]),
                p["mlp.fc1.weight"], p["mlp.fc1.bias"], p["mlp.fc2.weight"], p["mlp.fc2.bias"])
    return (x, attn) if return_attention else x


class ViT:
    """A ViT forward pass in NumPy.  ``ViT(cfg, params)(images) -> logits``.

    params: ``{state_dict key: array}`` -- e.g. ``state_dict_to_numpy(torch_model.state_dict())``.
    Everything is computed in the params' floating dtype (float32 for a checkpoint, float64 for
    the precision tests).
    """

    def __init__(self, cfg: ViTConfig, params: dict, name: str = "ViT"):
        params = {k: np.asarray(v) for k, v in params.items()}
        checks.check_params(params, vit_param_shapes(cfg), f"params for {name}")
        self.cfg = cfg
        self.params = params
        self.dtype = np.result_type(*params.values(), np.float32)
        self.blocks = [sub_params(params, f"blocks.{i}.") for i in range(cfg.depth)]

    def embed(self, images: np.ndarray) -> np.ndarray:
        """images (B, C, H, W) -> tokens (B, 1 + N, C) with class token and positions."""
        cfg, p = self.cfg, self.params
        images = np.asarray(images)
        checks.check_images(images.shape, cfg.in_chans, cfg.img_size, cfg.patch_size)
        x = patch_embed(images.astype(self.dtype, copy=False),
                        p["patch_embed.proj.weight"], p["patch_embed.proj.bias"])  # (B, N, C)
        return add_class_token(x, p["cls_token"]) + p["pos_embed"]  # (B, 1 + N, C)

    def forward_features(self, images: np.ndarray, return_attention: bool = False):
        """-> final-normed tokens (B, 1 + N, C) [and the list of per-block attention maps]."""
        x = self.embed(images)
        maps = []
        for p in self.blocks:
            x, attn = block(x, p, self.cfg.num_heads, return_attention=True)
            maps.append(attn)
        x = layer_norm(x, self.params["norm.weight"], self.params["norm.bias"])
        return (x, maps) if return_attention else x

    def forward_head(self, features: np.ndarray) -> np.ndarray:
        """(B, 1 + N, C) -> logits (B, num_classes), or the class token (B, C) without a head."""
        cls = features[:, 0]
        if not self.cfg.num_classes:
            return cls
        return linear(cls, self.params["head.weight"], self.params["head.bias"])

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.forward_head(self.forward_features(images))

    def get_attention_maps(self, images: np.ndarray) -> list[np.ndarray]:
        """One (B, heads, 1 + N, 1 + N) array per block; row 0 is the class token's attention."""
        return self.forward_features(images, return_attention=True)[1]
