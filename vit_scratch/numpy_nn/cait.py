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

from .. import interface
from ..specs.cait import CaitConfig, cait_param_shapes
from .backprop import Cache, check_backward, check_trainable, model_gradients
from .base import ModelBase
from .class_attention import (_class_attention_block, class_attention_block_backward,
                              class_attention_block_forward)
from .layers import (_layer_norm, drop_path_mask, layer_norm_backward, layer_norm_forward,
                     linear_backward, linear_forward, sub_params)
from .layerscale import _layerscale_block, layerscale_block_backward, layerscale_block_forward
from .patch_embed import (_patch_embed, add_pos_embed_backward, add_pos_embed_forward,
                          patch_embed_backward, patch_embed_forward)


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
        x = _patch_embed(self.prepare_images(images),
                         p["patch_embed.proj.weight"], p["patch_embed.proj.bias"])  # (B, N, C)
        return x + p["pos_embed"]

    def _self_attention_stage(self, images: np.ndarray, keep: bool = False):
        """-> (patch tokens after the last block, every block's output if ``keep``)."""
        x, outputs = self.embed(images), []
        for p in self.blocks:
            x, _ = _layerscale_block(x, p, self.cfg.num_heads)
            if keep:
                outputs.append(x)
        return x, outputs

    def _class_attention_stage(self, x: np.ndarray):
        """patch tokens (B, N, C) -> (class token (B, 1, C), one weight array per block)."""
        cls = np.broadcast_to(self.params["cls_token"].astype(x.dtype, copy=False),
                              (x.shape[0], 1, x.shape[2]))
        maps = []
        for p in self.blocks_token_only:
            cls, attn = _class_attention_block(x, cls, p, self.cfg.num_heads,
                                               self.cfg.class_token_in_keys)
            maps.append(attn)
        return cls, maps

    def _final_norm(self, x: np.ndarray) -> np.ndarray:
        return _layer_norm(x, self.params["norm.weight"], self.params["norm.bias"])

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
        interface.check_flags(norm=norm, intermediates_only=intermediates_only)
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

    # --- learning: the forward pass with its cache, and the backward pass ------------------------
    def forward_with_cache(self, images, rng=None):
        """logits (B, num_classes) and the cache for :meth:`backward`, by the same steps as
        ``__call__``.  ``rng`` (a ``np.random.Generator``): training mode, stochastic depth
        drawn from it at the config's rate in every self-attention block (the class-attention
        blocks have none, as in the PyTorch model); None: eval mode."""
        cfg, p = self.cfg, self.params
        check_trainable(self, rng)
        images = self.prepare_images(images)
        x, c_patch = patch_embed_forward(images, p["patch_embed.proj.weight"],
                                         p["patch_embed.proj.bias"])  # (B, N, C)
        x, c_pos = add_pos_embed_forward(x, p["pos_embed"])
        blocks = []
        for blk in self.blocks:
            masks = [drop_path_mask(len(x), cfg.drop_path_rate, rng, self.dtype) for _ in range(2)]
            x, c = layerscale_block_forward(x, blk, cfg.num_heads, drop_path_masks=masks)
            blocks.append(c)
        cls = np.broadcast_to(p["cls_token"].astype(x.dtype, copy=False),
                              (x.shape[0], 1, x.shape[2]))  # (B, 1, C)
        ca_blocks = []
        for blk in self.blocks_token_only:
            cls, c = class_attention_block_forward(x, cls, blk, cfg.num_heads,
                                                   cfg.class_token_in_keys)
            ca_blocks.append(c)
        x, c_norm = layer_norm_forward(np.concatenate([cls, x], axis=1), p["norm.weight"],
                                       p["norm.bias"])  # (B, 1 + N, C)
        logits, c_head = linear_forward(x[:, 0], p["head.weight"], p["head.bias"])
        return logits, Cache("Cait", logits, patch=c_patch, pos=c_pos, blocks=blocks,
                             ca_blocks=ca_blocks, norm=c_norm, head=c_head, tokens=x.shape)

    def backward(self, dlogits, cache):
        """The chain rule from the logits back to the images.  The patch tokens x feed every
        class-attention block and the final norm, so their gradient is the sum over those uses;
        the learned class token is broadcast over the batch, so its gradient is the sum over
        the images.  -> (dimages (B, C, H, W), {state_dict key: gradient})."""
        dlogits = check_backward("Cait", dlogits, cache)
        g = {}
        dpooled, g["head.weight"], g["head.bias"] = linear_backward(dlogits, cache.head)
        dtokens = np.zeros(cache.tokens, dtype=dpooled.dtype)
        dtokens[:, 0] = dpooled  # only the class token reaches the head
        dtokens, g["norm.weight"], g["norm.bias"] = layer_norm_backward(dtokens, cache.norm)
        dcls, dx = dtokens[:, :1], dtokens[:, 1:].copy()
        for i in reversed(range(len(cache.ca_blocks))):
            dx_i, dcls, d = class_attention_block_backward(dcls, cache.ca_blocks[i])
            dx += dx_i
            g.update({f"blocks_token_only.{i}.{k}": v for k, v in d.items()})
        g["cls_token"] = dcls.sum(axis=0, keepdims=True)
        for i in reversed(range(len(cache.blocks))):
            dx, d = layerscale_block_backward(dx, cache.blocks[i])
            g.update({f"blocks.{i}.{k}": v for k, v in d.items()})
        dx, g["pos_embed"] = add_pos_embed_backward(dx, cache.pos)
        dimages, g["patch_embed.proj.weight"], g["patch_embed.proj.bias"] = \
            patch_embed_backward(dx, cache.patch)
        return dimages, model_gradients(self, g)
