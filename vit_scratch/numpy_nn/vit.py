"""The Vision Transformer in NumPy, driven by a dict of arrays keyed like the PyTorch state_dict.

    tokens = [cls; patch_embed(images)] + pos_embed            # (B, 1 + N, C)
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    logits = head(norm(x)[:, 0])                               # (B, num_classes)
"""
from __future__ import annotations

import numpy as np

from .. import interface
from ..specs.vit import ViTConfig, vit_param_shapes
from .attention import multi_head_attention
from .base import ModelBase
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


class VisionTransformer(ModelBase):
    """A ViT forward pass in NumPy.  ``VisionTransformer(cfg, params)(images) -> logits``.

    params: ``{state_dict key: array}`` -- e.g. ``state_dict_to_numpy(torch_model.state_dict())``.
    Everything is computed in the params' floating dtype (float32 for a checkpoint, float64 for
    the precision tests).  The same class name and interface as ``torch_nn.vit.VisionTransformer``.
    """

    param_shapes = staticmethod(vit_param_shapes)
    num_prefix_tokens = 1

    def __init__(self, cfg: ViTConfig, params: dict, name: str = "VisionTransformer"):
        super().__init__(cfg, params, name)
        self.num_features = self.embed_dim = cfg.embed_dim
        self.blocks = [sub_params(self.params, f"blocks.{i}.") for i in range(cfg.depth)]

    def embed(self, images: np.ndarray) -> np.ndarray:
        """images (B, C, H, W) -> tokens (B, 1 + N, C) with class token and positions."""
        p = self.params
        x = patch_embed(self.prepare_images(images),
                        p["patch_embed.proj.weight"], p["patch_embed.proj.bias"])  # (B, N, C)
        return add_class_token(x, p["cls_token"]) + p["pos_embed"]  # (B, 1 + N, C)

    def _blocks(self, images: np.ndarray, keep_maps: bool = False):
        """Run the blocks: -> (tokens before the final norm, per-block outputs, attention maps)."""
        x, outputs, maps = self.embed(images), [], []
        for p in self.blocks:
            x, attn = block(x, p, self.cfg.num_heads, return_attention=True)
            outputs.append(x)
            if keep_maps:
                maps.append(attn)
        return x, outputs, maps

    def forward_features(self, images: np.ndarray) -> np.ndarray:
        """-> final-normed tokens (B, 1 + N, C)."""
        x, _, _ = self._blocks(images)
        return layer_norm(x, self.params["norm.weight"], self.params["norm.bias"])

    def forward_intermediates(self, images: np.ndarray, indices=None, norm: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """As ``torch_nn.vit.VisionTransformer.forward_intermediates``."""
        take = interface.resolve_indices(indices, self.cfg.depth)
        interface.check_output_fmt(output_fmt)
        x, outputs, _ = self._blocks(images)
        final_norm = lambda y: layer_norm(y, self.params["norm.weight"], self.params["norm.bias"])  # noqa: E731
        maps = [interface.tokens_to_grid(final_norm(outputs[i]) if norm else outputs[i],
                                         self.cfg.grid_size, self.num_prefix_tokens, output_fmt)
                for i in take]
        return maps if intermediates_only else (final_norm(x), maps)

    def get_attention_maps(self, images: np.ndarray) -> list[np.ndarray]:
        """One (B, heads, 1 + N, 1 + N) array per block; row 0 is the class token's attention."""
        return self._blocks(images, keep_maps=True)[2]

