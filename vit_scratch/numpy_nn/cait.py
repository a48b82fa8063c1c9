"""CaiT in NumPy, driven by a dict of arrays keyed like the PyTorch state_dict (timm's keys).

    x   = patch_embed(images) + pos_embed                      # (B, N, C): no class token yet
    for each of `depth` blocks:  x = layerscale_block(x)       # talking-heads self-attention
    cls = cls_token                                            # (B, 1, C): joins only now
    for each of `depth_token_only` blocks:  cls = class_attention_block(x, cls)
    logits = head(norm([cls; x])[:, 0])                        # (B, num_classes)

Paper: Touvron et al., "Going deeper with Image Transformers", ICCV 2021,
https://arxiv.org/abs/2103.17239.
"""
from __future__ import annotations

import numpy as np

from .. import interface, validation
from ..specs.cait import CaitConfig, cait_param_shapes
from .base import ModelBase
from .class_attention import class_attention_block
from .layers import layer_norm, sub_params
from .layerscale import layerscale_block
from .patch_embed import patch_embed


class Cait(ModelBase):
    """A CaiT forward pass in NumPy.  ``Cait(cfg, params)(images) -> logits``.

    params: ``{state_dict key: array}`` -- e.g. ``state_dict_to_numpy(torch_model.state_dict())``.
    Computed in the params' floating dtype.  The same class name and interface as
    ``torch_nn.cait.Cait``:

    forward_features -> final-normed tokens (B, 1 + N, C): the class token, then the patches
    get_attention_maps -> per class-attention block, the class token's weights (B, heads, 1, 1 + N)
        (column 0: the class token itself, columns 1: the patches in raster order;
        (B, heads, 1, N) with ``class_token_in_keys=False``)
    forward_intermediates -> the self-attention blocks' outputs (patch tokens only, as timm)
    """

    param_shapes = staticmethod(cait_param_shapes)
    num_prefix_tokens = 1  # the class token, in front of the patches in forward_features

    def __init__(self, cfg: CaitConfig, params: dict, name: str = "Cait"):
        super().__init__(cfg, params, name)
        self.num_features = self.embed_dim = cfg.embed_dim
        self.blocks = [sub_params(self.params, f"blocks.{i}.") for i in range(cfg.depth)]
        self.blocks_token_only = [sub_params(self.params, f"blocks_token_only.{i}.")
                                  for i in range(cfg.depth_token_only)]

    def embed(self, images: np.ndarray) -> np.ndarray:
        """images (B, C, H, W) -> patch tokens with their positions (B, N, C)."""
        p = self.params
        x = patch_embed(self.prepare_images(images),
                        p["patch_embed.proj.weight"], p["patch_embed.proj.bias"])  # (B, N, C)
        return x + p["pos_embed"]

    def _self_attention_stage(self, images: np.ndarray, keep: bool = False):
        """-> (patch tokens after the last block, every block's output if ``keep``)."""
        x, outputs = self.embed(images), []
        for p in self.blocks:
            x = layerscale_block(x, p, self.cfg.num_heads)
            if keep:
                outputs.append(x)
        return x, outputs

    def _class_attention_stage(self, x: np.ndarray):
        """patch tokens (B, N, C) -> (class token (B, 1, C), one weight array per block)."""
        cls = np.broadcast_to(self.params["cls_token"].astype(x.dtype, copy=False),
                              (x.shape[0], 1, x.shape[2]))
        maps = []
        for p in self.blocks_token_only:
            cls, attn = class_attention_block(x, cls, p, self.cfg.num_heads,
                                              self.cfg.class_token_in_keys, return_attention=True)
            maps.append(attn)
        return cls, maps

    def _final_norm(self, x: np.ndarray) -> np.ndarray:
        return layer_norm(x, self.params["norm.weight"], self.params["norm.bias"])

    def forward_features(self, images: np.ndarray) -> np.ndarray:
        """-> final-normed tokens (B, 1 + N, C), the class token first."""
        x, _ = self._self_attention_stage(images)
        cls, _ = self._class_attention_stage(x)
        return self._final_norm(np.concatenate([cls, x], axis=1))

    def forward_intermediates(self, images: np.ndarray, indices=None, norm: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """As ``torch_nn.cait.Cait.forward_intermediates``: the outputs of the self-attention
        blocks in ``indices`` (patch tokens; the class token does not exist yet there)."""
        take = interface.resolve_indices(indices, self.cfg.depth)
        interface.check_output_fmt(output_fmt)
        x, outputs = self._self_attention_stage(images, keep=True)
        maps = [interface.tokens_to_grid(self._final_norm(outputs[i]) if norm else outputs[i],
                                         self.cfg.grid_size, 0, output_fmt) for i in take]
        if intermediates_only:
            return maps
        cls, _ = self._class_attention_stage(x)
        return self._final_norm(np.concatenate([cls, x], axis=1)), maps

    def get_attention_maps(self, images: np.ndarray) -> list[np.ndarray]:
        """One array per class-attention block: (B, heads, 1, 1 + N), the class token's weights
        over [itself, patch 0, ..., patch N-1]; (B, heads, 1, N) with
        ``class_token_in_keys=False``.  Each row sums to 1."""
        x, _ = self._self_attention_stage(images)
        return self._class_attention_stage(x)[1]

    def attention_grid(self, weights: np.ndarray) -> np.ndarray:
        """(B, heads, 1, [1 +] N) -> (B, heads, gh, gw): the weights on the patches."""
        return interface.readout_grid(weights, self.cfg.grid_size,
                                      1 if self.cfg.class_token_in_keys else 0)
