"""The Vision Transformer in NumPy, driven by a dict of arrays keyed like the PyTorch state_dict.

    tokens = [cls; patch_embed(images)] + pos_embed            # (B, 1 + N, C)
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    logits = head(norm(x)[:, 0])                               # (B, num_classes)

The config chooses the blocks' residual form (``cfg.residual``: with ``init_values``,
LayerScale's ``x + diag(λ)·attn(norm1(x))``; the block is ``layerscale.residual_block``) and
where the position embedding goes (``no_embed_class``: on the patches, before the class token
joins -- DeiT III).  DeiT's distilled models (``VisionTransformerDistilled``) put a
distillation token after the class token and average two heads:
``(head(x[:, 0]) + head_dist(x[:, 1])) / 2``.

:func:`block` is ViT's pre-norm block; the model checks its images once (``prepare_images``)
and runs the unchecked cores, and learns through the block's ``_forward``/``_backward`` pair
(CS231n's pairing) of the config's residual form, ``layerscale.residual_block_forward`` and
``residual_block_backward`` (:func:`block_forward` and :func:`block_backward`: the pre-norm
form's).
"""
from __future__ import annotations

import numpy as np

from .. import interface, validation
from ..specs.vit import ViTConfig, vit_param_shapes
from .backprop import Cache, check_backward, check_trainable, model_gradients
from .base import ModelBase
from .layers import (_layer_norm, _linear, drop_path_mask, layer_norm_backward,
                     layer_norm_forward, linear_backward, linear_forward, sub_params)
from .layerscale import (_residual_block, residual_block, residual_block_backward,
                         residual_block_forward)
from .patch_embed import (_add_class_token, _patch_embed, add_class_token_backward,
                          add_class_token_forward, add_pos_embed_backward, add_pos_embed_forward,
                          patch_embed_backward, patch_embed_forward)


def block(x: np.ndarray, p: dict, num_heads: int, return_attention: bool = False):
    """One pre-norm transformer block, ViT's and DeiT's:

        x = x + attn(norm1(x))
        x = x + mlp(norm2(x))

    x: (B, N, C); p: the block's parameters with keys relative to the block
    (``norm1.weight``, ``attn.qkv.weight``, ``mlp.fc1.weight``, ...)  ->  (B, N, C), and the
    attention weights (B, h, N, N) if ``return_attention``.  ``layerscale.residual_block``
    with ``residual="prenorm"``; the other forms (DeiT III's LayerScale) are there.
    """
    return residual_block(x, p, num_heads, "prenorm", return_attention)


def block_forward(x: np.ndarray, p: dict, num_heads: int, drop_path_masks=None):
    """:func:`block` -> (out, cache): ``layerscale.residual_block_forward`` with
    ``residual="prenorm"``.  ``drop_path_masks``: None (no stochastic depth), or the (B,)
    factors of ``layers.drop_path_mask`` for the attention and the MLP branch."""
    return residual_block_forward(x, p, num_heads, "prenorm", drop_path_masks)


def block_backward(dout: np.ndarray, cache):
    """x₁ = x + attn(norm1(x)), y = x₁ + mlp(norm2(x₁)): a residual passes its gradient through
    unchanged and adds the branch's, so

        ∂L/∂x₁ = dy + norm2ᵀ(mlpᵀ(dy)),   ∂L/∂x = ∂L/∂x₁ + norm1ᵀ(attnᵀ(∂L/∂x₁))

    (fᵀ(g): the backward of f applied to g; ``layerscale.residual_block_backward``).
    -> (dx, {key: gradient}) with p's keys."""
    return residual_block_backward(dout, cache)


class VisionTransformer(ModelBase):
    """A ViT forward pass in NumPy.  ``VisionTransformer(cfg, params)(images) -> logits``.

    params: ``{state_dict key: array}`` -- e.g. ``state_dict_to_numpy(torch_model.state_dict())``.
    Everything is computed in the params' floating dtype (float32 for a checkpoint, float64 for
    the precision tests).  The same class name and interface as ``torch_nn.vit.VisionTransformer``.
    """

    param_shapes = staticmethod(vit_param_shapes)
    num_prefix_tokens = 1

    def __init__(self, cfg: ViTConfig, params: dict, name: str | None = None):
        if cfg.distilled != isinstance(self, VisionTransformerDistilled):
            raise ValueError(f"distilled={cfg.distilled} is built by "
                             f"{self.class_for(cfg).__name__}, not {type(self).__name__} "
                             f"(vit_scratch.create_numpy_model picks the class)")
        super().__init__(cfg, params, name)
        self.num_features = self.embed_dim = cfg.embed_dim
        self.blocks = [sub_params(self.params, f"blocks.{i}.") for i in range(cfg.depth)]

    @property
    def drop_path_rates(self) -> list[float]:
        """Each block's stochastic-depth rate, rising linearly from 0 at the first block to
        ``drop_path_rate`` at the last, in float32 steps: what
        ``torch.linspace(0, rate, depth).tolist()`` gives the PyTorch blocks."""
        return np.linspace(0, self.cfg.drop_path_rate, self.cfg.depth, dtype=np.float32).tolist()

    @classmethod
    def class_for(cls, cfg: ViTConfig) -> type:
        """The class that builds ``cfg``: ``VisionTransformerDistilled`` for ``distilled=True``."""
        return VisionTransformerDistilled if cfg.distilled else VisionTransformer

    def embed(self, images: np.ndarray) -> np.ndarray:
        """images (B, C, H, W) -> tokens (B, prefix + N, C): the prefix tokens in front, the
        positions added -- to every token, or with ``no_embed_class`` to the patches before the
        prefix tokens join."""
        p = self.params
        x = _patch_embed(self.prepare_images(images),
                         p["patch_embed.proj.weight"], p["patch_embed.proj.bias"])  # (B, N, C)
        if self.cfg.no_embed_class:
            return self.prefix(x + p["pos_embed"])  # (B, prefix + N, C)
        return self.prefix(x) + p["pos_embed"]

    def prefix(self, x: np.ndarray) -> np.ndarray:
        """Patch tokens (B, N, C) -> [cls; x] (B, 1 + N, C)."""
        return _add_class_token(x, self.params["cls_token"])

    def _blocks(self, images: np.ndarray, keep_maps: bool = False):
        """Run the blocks: -> (tokens before the final norm, per-block outputs, attention maps)."""
        x, outputs, maps = self.embed(images), [], []
        for p in self.blocks:
            x, attn = _residual_block(x, p, self.cfg.num_heads, self.cfg.residual)
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
        interface.check_flags(norm=norm, intermediates_only=intermediates_only)
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
        if cfg.no_embed_class:  # the positions on the patches, then the prefix tokens
            x, c_pos = add_pos_embed_forward(x, p["pos_embed"])
            x, c_prefix = self.prefix_forward(x)  # (B, prefix + N, C)
        else:
            x, c_prefix = self.prefix_forward(x)  # (B, prefix + N, C)
            x, c_pos = add_pos_embed_forward(x, p["pos_embed"])
        blocks = []
        for blk, rate in zip(self.blocks, self.drop_path_rates):
            masks = [drop_path_mask(len(x), rate, rng, self.dtype) for _ in range(2)]
            x, c = residual_block_forward(x, blk, cfg.num_heads, cfg.residual, masks)
            blocks.append(c)
        x, c_norm = layer_norm_forward(x, p["norm.weight"], p["norm.bias"])
        logits, c_head = self.head_forward(x)
        return logits, Cache(type(self).__name__, logits, patch=c_patch, prefix=c_prefix,
                             pos=c_pos, blocks=blocks, norm=c_norm, head=c_head, tokens=x.shape)

    def backward(self, dlogits, cache):
        """The chain rule from the logits back to the images, block by block in reverse.
        -> (dimages (B, C, H, W), {state_dict key: gradient} for every parameter)."""
        dlogits = check_backward(type(self).__name__, dlogits, cache)
        g = {}
        dx = self.head_backward(dlogits, cache.head, cache.tokens, g)  # (B, prefix + N, C)
        dx, g["norm.weight"], g["norm.bias"] = layer_norm_backward(dx, cache.norm)
        for i in reversed(range(len(cache.blocks))):
            dx, d = residual_block_backward(dx, cache.blocks[i])
            g.update({f"blocks.{i}.{k}": v for k, v in d.items()})
        if self.cfg.no_embed_class:
            dx = self.prefix_backward(dx, cache.prefix, g)  # (B, N, C)
            dx, g["pos_embed"] = add_pos_embed_backward(dx, cache.pos)
        else:
            dx, g["pos_embed"] = add_pos_embed_backward(dx, cache.pos)
            dx = self.prefix_backward(dx, cache.prefix, g)  # (B, N, C)
        dimages, g["patch_embed.proj.weight"], g["patch_embed.proj.bias"] = \
            patch_embed_backward(dx, cache.patch)
        return dimages, model_gradients(self, g)

    def prefix_forward(self, x):
        """Patch tokens (B, N, C) -> [cls; x] (B, 1 + N, C), and the caches."""
        return add_class_token_forward(x, self.params["cls_token"])

    def prefix_backward(self, dx, cache, g: dict):
        """[cls; x] -> ∂L/∂x; ∂L/∂cls_token into ``g``."""
        dx, g["cls_token"] = add_class_token_backward(dx, cache)
        return dx

    def head_forward(self, x):
        """Final-normed tokens (B, 1 + N, C) -> logits head(x[:, 0]), and the cache."""
        return linear_forward(x[:, 0], self.params["head.weight"], self.params["head.bias"])

    def head_backward(self, dlogits, cache, tokens: tuple, g: dict):
        """∂L/∂logits -> ∂L/∂tokens: only the class token reaches the head; the head's
        gradients into ``g``."""
        dpooled, g["head.weight"], g["head.bias"] = linear_backward(dlogits, cache)
        dx = np.zeros(tokens, dtype=dpooled.dtype)
        dx[:, 0] = dpooled
        return dx


class VisionTransformerDistilled(VisionTransformer):
    """DeiT's distilled ViT in NumPy (the same class name and interface as
    ``torch_nn.vit.VisionTransformerDistilled``): the distillation token after the class token,
    and a second head on it; inference averages the two heads.

    ``__call__`` -> the average (B, num_classes); ``forward_features`` -> (B, 2 + N, C), the
    class and distillation tokens first.  Learning: with ``set_distilled_training(True)``,
    :meth:`forward_with_cache` returns the pair ``(class head, distillation head)`` and
    :meth:`backward` takes the pair of their gradients (the loss of
    ``numpy_nn.training.loss_and_grads`` with ``teacher_labels``); without it, the average and
    its gradient, as ``__call__``.
    """

    num_prefix_tokens = 2

    def __init__(self, cfg: ViTConfig, params: dict, name: str | None = None):
        super().__init__(cfg, params, name)
        self.distilled_training = False

    def set_distilled_training(self, enable: bool = True) -> None:
        """``forward_with_cache`` returns both heads' logits (for the distillation loss)."""
        self.distilled_training = validation.check_bool(enable, "enable")

    def prefix(self, x: np.ndarray) -> np.ndarray:
        """Patch tokens (B, N, C) -> [cls; dist; x] (B, 2 + N, C)."""
        p = self.params
        return _add_class_token(_add_class_token(x, p["dist_token"]), p["cls_token"])

    def pool(self, features: np.ndarray) -> np.ndarray:
        """forward_features' output -> (B, 2, num_features): the class and distillation tokens."""
        return features[:, :2]

    def classify(self, pooled: np.ndarray, pre_logits: bool = False) -> np.ndarray:
        """The two heads' average (B, num_classes); with ``pre_logits`` or without heads, the
        two tokens' average (B, C)."""
        if pre_logits or not self.num_classes:
            return pooled.mean(axis=1)
        p = self.params
        return (_linear(pooled[:, 0], p["head.weight"], p["head.bias"])
                + _linear(pooled[:, 1], p["head_dist.weight"], p["head_dist.bias"])) / 2

    def prefix_forward(self, x):
        """Patch tokens (B, N, C) -> [cls; dist; x] (B, 2 + N, C): the distillation token put in
        front first, then the class token in front of it."""
        x, c_dist = add_class_token_forward(x, self.params["dist_token"])
        x, c_cls = add_class_token_forward(x, self.params["cls_token"])
        return x, (c_cls, c_dist)

    def prefix_backward(self, dx, cache, g: dict):
        """Peel the two tokens off in reverse: the class token's gradient, then the
        distillation token's (each summed over the batch)."""
        c_cls, c_dist = cache
        dx, g["cls_token"] = add_class_token_backward(dx, c_cls)
        dx, g["dist_token"] = add_class_token_backward(dx, c_dist)
        return dx

    def head_forward(self, x):
        """Tokens (B, 2 + N, C) -> the pair (head(x[:, 0]), head_dist(x[:, 1])) in distilled
        training, else their average; and the cache."""
        p = self.params
        logits, c_head = linear_forward(x[:, 0], p["head.weight"], p["head.bias"])
        logits_dist, c_dist = linear_forward(x[:, 1], p["head_dist.weight"], p["head_dist.bias"])
        out = (logits, logits_dist) if self.distilled_training else (logits + logits_dist) / 2
        return out, (c_head, c_dist, self.distilled_training)

    def head_backward(self, dlogits, cache, tokens: tuple, g: dict):
        """The pair's gradients each to its head, or the average's halved to both:
        ∂L/∂(head logits) = ∂L/∂(head_dist logits) = ∂L/∂avg / 2.  Each head reaches only its
        token: ∂L/∂x[:, 0] from ``head``, ∂L/∂x[:, 1] from ``head_dist``."""
        c_head, c_dist, pair = cache
        d_cls, d_dist = dlogits if pair else (dlogits / 2, dlogits / 2)
        dx = np.zeros(tokens, dtype=d_cls.dtype)
        dx[:, 0], g["head.weight"], g["head.bias"] = linear_backward(d_cls, c_head)
        dx[:, 1], g["head_dist.weight"], g["head_dist.bias"] = linear_backward(d_dist, c_dist)
        return dx
