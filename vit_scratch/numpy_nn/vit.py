"""The Vision Transformer in NumPy, driven by a dict of arrays keyed like the PyTorch state_dict.

    tokens = [cls; patch_embed(images)] + pos_embed            # (B, 1 + N, C)
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    logits = head(norm(x)[:, 0])                               # (B, num_classes)

:func:`block` is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); the model
checks its images once (``prepare_images``) and runs the unchecked cores.
"""
from __future__ import annotations

import numpy as np

from .. import interface, validation
from ..specs.vit import ViTConfig, vit_param_shapes
from .attention import (_multi_head_attention, multi_head_attention_backward,
                        multi_head_attention_forward)
from .backprop import Cache, check_backward, check_trainable, model_gradients
from .base import ModelBase
from .layers import (_layer_norm, drop_path_backward, drop_path_forward, drop_path_mask,
                     layer_norm_backward, layer_norm_forward, linear_backward, linear_forward,
                     _mlp, mlp_backward, mlp_forward, mlp_grads, mlp_params, sub_params)
from .patch_embed import (_add_class_token, _patch_embed, add_class_token_backward,
                          add_class_token_forward, add_pos_embed_backward, add_pos_embed_forward,
                          patch_embed_backward, patch_embed_forward)


def block(x: np.ndarray, p: dict, num_heads: int, return_attention: bool = False):
    """One pre-norm transformer block.

    x: (B, N, C); p: the block's parameters with keys relative to the block
    (``norm1.weight``, ``attn.qkv.weight``, ``mlp.fc1.weight``, ...)  ->  (B, N, C)
    """
    x = np.asarray(x)
    validation.check_tokens(x.shape, np.shape(p["norm1.weight"])[0], "x")
    validation.head_dim(x.shape[-1], num_heads)
    x, attn = _block(x, p, num_heads)
    return (x, attn) if return_attention else x


def _block(x, p: dict, num_heads: int):
    """:func:`block`'s formula, unchecked: -> (out, the attention weights)."""
    h, attn = _multi_head_attention(
        _layer_norm(x, p["norm1.weight"], p["norm1.bias"]),
        p["attn.qkv.weight"], p.get("attn.qkv.bias"), p["attn.proj.weight"], p["attn.proj.bias"],
        num_heads)
    x = x + h
    return x + _mlp(_layer_norm(x, p["norm2.weight"], p["norm2.bias"]), *mlp_params(p)), attn


def block_forward(x: np.ndarray, p: dict, num_heads: int, drop_path_masks=None):
    """:func:`block` -> (out, cache).  ``drop_path_masks``: None (no stochastic depth), or the
    (B,) factors of ``layers.drop_path_mask`` for the attention and the MLP branch."""
    m1, m2 = drop_path_masks or (None, None)
    h, c_n1 = layer_norm_forward(x, p["norm1.weight"], p["norm1.bias"])
    h, c_att = multi_head_attention_forward(h, p["attn.qkv.weight"], p.get("attn.qkv.bias"),
                                            p["attn.proj.weight"], p["attn.proj.bias"], num_heads)
    h, c_dp1 = drop_path_forward(h, m1)
    x = x + h
    h, c_n2 = layer_norm_forward(x, p["norm2.weight"], p["norm2.bias"])
    h, c_mlp = mlp_forward(h, *mlp_params(p))
    h, c_dp2 = drop_path_forward(h, m2)
    out = x + h
    return out, Cache("block", out, norm1=c_n1, attn=c_att, drop_path1=c_dp1, norm2=c_n2,
                      mlp=c_mlp, drop_path2=c_dp2, has_qkv_bias="attn.qkv.bias" in p)


def block_backward(dout: np.ndarray, cache: Cache):
    """x₁ = x + attn(norm1(x)), y = x₁ + mlp(norm2(x₁)): a residual passes its gradient through
    unchanged and adds the branch's, so

        ∂L/∂x₁ = dy + norm2ᵀ(mlpᵀ(dy)),   ∂L/∂x = ∂L/∂x₁ + norm1ᵀ(attnᵀ(∂L/∂x₁))

    (fᵀ(g): the backward of f applied to g).  -> (dx, {key: gradient}) with p's keys."""
    dout = check_backward("block", dout, cache)
    dh = drop_path_backward(dout, cache.drop_path2)
    dh, *d_mlp = mlp_backward(dh, cache.mlp)
    dx1, dn2_w, dn2_b = layer_norm_backward(dh, cache.norm2)
    dx1 += dout
    dh = drop_path_backward(dx1, cache.drop_path1)
    dh, dqkv_w, dqkv_b, dproj_w, dproj_b = multi_head_attention_backward(dh, cache.attn)
    dx, dn1_w, dn1_b = layer_norm_backward(dh, cache.norm1)
    dx += dx1
    grads = {"norm1.weight": dn1_w, "norm1.bias": dn1_b, "attn.qkv.weight": dqkv_w,
             "attn.proj.weight": dproj_w, "attn.proj.bias": dproj_b,
             "norm2.weight": dn2_w, "norm2.bias": dn2_b, **mlp_grads(d_mlp)}
    if cache.has_qkv_bias:
        grads["attn.qkv.bias"] = dqkv_b
    return dx, grads


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
        x = _patch_embed(self.prepare_images(images),
                         p["patch_embed.proj.weight"], p["patch_embed.proj.bias"])  # (B, N, C)
        return _add_class_token(x, p["cls_token"]) + p["pos_embed"]  # (B, 1 + N, C)

    def _blocks(self, images: np.ndarray, keep_maps: bool = False):
        """Run the blocks: -> (tokens before the final norm, per-block outputs, attention maps)."""
        x, outputs, maps = self.embed(images), [], []
        for p in self.blocks:
            x, attn = _block(x, p, self.cfg.num_heads)
            outputs.append(x)
            if keep_maps:
                maps.append(attn)
        return x, outputs, maps

    def forward_features(self, images: np.ndarray) -> np.ndarray:
        """-> final-normed tokens (B, 1 + N, C)."""
        x, _, _ = self._blocks(images)
        return _layer_norm(x, self.params["norm.weight"], self.params["norm.bias"])

    def forward_intermediates(self, images: np.ndarray, indices=None, norm: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """As ``torch_nn.vit.VisionTransformer.forward_intermediates``."""
        take = interface.resolve_indices(indices, self.cfg.depth)
        interface.check_output_fmt(output_fmt)
        x, outputs, _ = self._blocks(images)
        final_norm = lambda y: _layer_norm(y, self.params["norm.weight"], self.params["norm.bias"])  # noqa: E731
        maps = [interface.tokens_to_grid(final_norm(outputs[i]) if norm else outputs[i],
                                         self.cfg.grid_size, self.num_prefix_tokens, output_fmt)
                for i in take]
        return maps if intermediates_only else (final_norm(x), maps)

    def get_attention_maps(self, images: np.ndarray) -> list[np.ndarray]:
        """One (B, heads, 1 + N, 1 + N) array per block; row 0 is the class token's attention."""
        return self._blocks(images, keep_maps=True)[2]

    # --- learning: the forward pass with its cache, and the backward pass ------------------------
    def forward_with_cache(self, images, rng=None):
        """logits (B, num_classes) and the cache for :meth:`backward`, by the same steps as
        ``__call__``.  ``rng`` (a ``np.random.Generator``): training mode, stochastic depth drawn
        from it at the config's rates (linear in depth, as the PyTorch model); None: eval mode."""
        cfg, p = self.cfg, self.params
        check_trainable(self, rng)
        images = self.prepare_images(images)
        x, c_patch = patch_embed_forward(images, p["patch_embed.proj.weight"],
                                         p["patch_embed.proj.bias"])  # (B, N, C)
        x, c_cls = add_class_token_forward(x, p["cls_token"])  # (B, 1 + N, C)
        x, c_pos = add_pos_embed_forward(x, p["pos_embed"])
        # float32 steps, as torch.linspace(0, rate, depth).tolist() gives the PyTorch blocks
        rates = np.linspace(0, cfg.drop_path_rate, cfg.depth, dtype=np.float32).tolist()
        blocks = []
        for blk, rate in zip(self.blocks, rates):
            masks = [drop_path_mask(len(x), rate, rng, self.dtype) for _ in range(2)]
            x, c = block_forward(x, blk, cfg.num_heads, masks)
            blocks.append(c)
        x, c_norm = layer_norm_forward(x, p["norm.weight"], p["norm.bias"])
        logits, c_head = linear_forward(x[:, 0], p["head.weight"], p["head.bias"])
        return logits, Cache("VisionTransformer", logits, patch=c_patch, cls=c_cls, pos=c_pos,
                             blocks=blocks, norm=c_norm, head=c_head, tokens=x.shape)

    def backward(self, dlogits, cache):
        """The chain rule from the logits back to the images, block by block in reverse.
        -> (dimages (B, C, H, W), {state_dict key: gradient} for every parameter)."""
        dlogits = check_backward("VisionTransformer", dlogits, cache)
        g = {}
        dpooled, g["head.weight"], g["head.bias"] = linear_backward(dlogits, cache.head)
        dx = np.zeros(cache.tokens, dtype=dpooled.dtype)
        dx[:, 0] = dpooled  # only the class token reaches the head
        dx, g["norm.weight"], g["norm.bias"] = layer_norm_backward(dx, cache.norm)
        for i in reversed(range(len(cache.blocks))):
            dx, d = block_backward(dx, cache.blocks[i])
            g.update({f"blocks.{i}.{k}": v for k, v in d.items()})
        dx, g["pos_embed"] = add_pos_embed_backward(dx, cache.pos)
        dx, g["cls_token"] = add_class_token_backward(dx, cache.cls)
        dimages, g["patch_embed.proj.weight"], g["patch_embed.proj.bias"] = \
            patch_embed_backward(dx, cache.patch)
        return dimages, model_gradients(self, g)
