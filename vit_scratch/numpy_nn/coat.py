"""CoaT and CoaT-Lite in NumPy, driven by a dict of arrays keyed like the PyTorch state_dict.

Paper: Co-Scale Conv-Attentional Image Transformers -- Xu, Xu, Chang, Tu, ICCV 2021,
https://arxiv.org/abs/2104.06399

    for scale s = 1..4:                                   (strides p, 2p, 4p, 8p)
        tokens = [cls_s; LayerNorm(patch_embed_s(grid of scale s-1, or the image))]
        for each serial block:  x = cpe_s(x);  x = x + conv_att(norm1(x));  x = x + mlp(norm2(x))
    CoaT only, for each parallel block:  x_s = cpe_s(x_s) (s = 2..4);  x2, x3, x4 = parallel(x2, x3, x4)
    CoaT-Lite: logits = head(norm4(x4)[:, 0])
    CoaT:      logits = head(aggregate([norm2(x2)[:, 0], norm3(x3)[:, 0], norm4(x4)[:, 0]]))

Tokens stay (B, N, C) throughout; a scale's grid is the channels-last view (B, H, W, C) of its
image tokens, which is what the depthwise convolutions and the resizing work on.  A batch is
split over the CPU cores (``_fast.split_batch``): NumPy's elementwise work runs on one core
per call, and images are independent.  There is no
absolute position embedding, so any input whose sides are multiples of the total stride runs.

:func:`scale_patch_embed` and :func:`serial_block` are each followed by their ``_forward`` and
``_backward`` (CS231n's pairing); the model checks its images once (``prepare_images``) and runs
the unchecked cores.
"""
from __future__ import annotations

import numpy as np
from einops import rearrange

from .. import interface, validation
from ..specs.coat import (PATCH_NORM_EPS, CoaTConfig, CoaTImageSizeMixin, coat_param_shapes,
                          shared_keys, unused_keys)
from . import _fast
from .backprop import Cache, check_backward, check_trainable, model_gradients
from .base import ModelBase
from .conv_position_encoding import _conv_pos_enc, conv_pos_enc_backward, conv_pos_enc_forward
from .coscale import _parallel_block, parallel_block_backward, parallel_block_forward
from .factorized_attention import (_conv_attention, conv_attention_backward,
                                   conv_attention_forward)
from .layers import (_layer_norm, _linear, _mlp, drop_path_backward, drop_path_forward,
                     drop_path_mask, layer_norm_backward, layer_norm_forward, linear_backward,
                     linear_forward, mlp_backward, mlp_forward, mlp_grads, mlp_params, sub_params)
from .patch_embed import _add_class_token, add_class_token_backward, add_class_token_forward


def scale_patch_embed(x: np.ndarray, p: dict, channels_last: bool = False) -> np.ndarray:
    """Patch embedding of one scale: non-overlapping P×P patches -> Linear (a Conv2d's weights)
    -> LayerNorm (eps 1e-5).

    x: (B, C, H, W) images, or the previous scale's grid (B, H, W, C) with ``channels_last``;
    p: ``proj.weight`` (E, C, P, P), ``proj.bias``, ``norm.weight``, ``norm.bias``
    ->  (B, (H/P)·(W/P), E) tokens in raster order
    """
    x = np.asarray(x)
    E, C, P, _ = np.shape(p["proj.weight"])
    layout = "(B, H, W, C)" if channels_last else "(B, C, H, W)"
    validation.check_ndim(x.shape, 4, "x", layout)
    chans, hw = (x.shape[3], x.shape[1:3]) if channels_last else (x.shape[1], x.shape[2:])
    if chans != C:
        raise ValueError(f"x has {chans} channels, but proj.weight of shape "
                         f"{np.shape(p['proj.weight'])} takes {C} (x of shape {x.shape}, {layout})")
    validation.check_divisible(tuple(hw), P, "x's size", f"patch size {P}")
    return _scale_patch_embed(x, p, channels_last)


def _scale_patch_embed(x, p: dict, channels_last: bool = False):
    """:func:`scale_patch_embed`'s formula, unchecked."""
    weight = p["proj.weight"]
    E, C, P, _ = weight.shape
    if channels_last:  # flatten each patch as (row, col, channel) and permute the weight to match
        patches = rearrange(x, "b (gh p1) (gw p2) c -> b (gh gw) (p1 p2 c)", p1=P, p2=P)
        w = weight.transpose(0, 2, 3, 1).reshape(E, -1)
    else:  # (channel, row, col): the order a Conv2d weight flattens in
        patches = rearrange(x, "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)", p1=P, p2=P)
        w = weight.reshape(E, -1)
    tokens = _linear(patches, w, p["proj.bias"])
    return _layer_norm(tokens, p["norm.weight"], p["norm.bias"], eps=PATCH_NORM_EPS)


def scale_patch_embed_forward(x: np.ndarray, p: dict, channels_last: bool = False):
    """:func:`scale_patch_embed` -> (out, cache), through ``linear_forward`` and
    ``layer_norm_forward``."""
    weight = p["proj.weight"]
    E, C, P, _ = weight.shape
    if channels_last:
        patches = rearrange(x, "b (gh p1) (gw p2) c -> b (gh gw) (p1 p2 c)", p1=P, p2=P)
        w = weight.transpose(0, 2, 3, 1).reshape(E, -1)
    else:
        patches = rearrange(x, "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)", p1=P, p2=P)
        w = weight.reshape(E, -1)
    tokens, c_proj = linear_forward(patches, w, p["proj.bias"])
    out, c_norm = layer_norm_forward(tokens, p["norm.weight"], p["norm.bias"], eps=PATCH_NORM_EPS)
    return out, Cache("scale_patch_embed", out, proj=c_proj, norm=c_norm, x_shape=x.shape,
                      channels_last=channels_last, weight_shape=weight.shape)


def scale_patch_embed_backward(dout: np.ndarray, cache: Cache):
    """Back through the LayerNorm and the Linear on the flattened patches (``patch_embed_backward``
    states the formulas); the patches' gradient is folded back into the grid, the flattened
    weight's into the Conv2d layout (E, C, P, P).  -> (dx in x's layout, {key: gradient})."""
    dout = check_backward("scale_patch_embed", dout, cache)
    g = {}
    dtokens, g["norm.weight"], g["norm.bias"] = layer_norm_backward(dout, cache.norm)
    dpatches, dw, g["proj.bias"] = linear_backward(dtokens, cache.proj)
    E, C, P, _ = cache.weight_shape
    if cache.channels_last:
        gh, gw = cache.x_shape[1] // P, cache.x_shape[2] // P
        dx = rearrange(dpatches, "b (gh gw) (p1 p2 c) -> b (gh p1) (gw p2) c", gh=gh, gw=gw,
                       p1=P, p2=P)
        g["proj.weight"] = dw.reshape(E, P, P, C).transpose(0, 3, 1, 2)
    else:
        gh, gw = cache.x_shape[2] // P, cache.x_shape[3] // P
        dx = rearrange(dpatches, "b (gh gw) (c p1 p2) -> b c (gh p1) (gw p2)", gh=gh, gw=gw,
                       p1=P, p2=P)
        g["proj.weight"] = dw.reshape(E, C, P, P)
    return dx, {k: g[k] for k in ("proj.weight", "proj.bias", "norm.weight", "norm.bias")}


def serial_block(x: np.ndarray, p: dict, num_heads: int, size, records: list | None = None):
    """One serial block: CPE, then conv-attention and MLP, both pre-norm with residuals.

    x: (B, 1 + H·W, C); p: the block's params relative to it (``cpe.proj.weight``,
    ``norm1.weight``, ``factoratt_crpe.qkv.weight``, ``mlp.fc1.weight``, ...)  ->  (B, 1 + H·W, C)
    """
    x = np.asarray(x)
    size = validation.check_token_grid(x.shape, size, "x", np.shape(p["norm1.weight"])[0])
    validation.head_dim(x.shape[-1], num_heads)
    return _serial_block(x, p, num_heads, size, records)


def _serial_block(x, p: dict, num_heads: int, size, records: list | None = None):
    """:func:`serial_block`'s formula, unchecked (``size`` a pair)."""
    x = _conv_pos_enc(x, p["cpe.proj.weight"], p["cpe.proj.bias"], size)
    h = _layer_norm(x, p["norm1.weight"], p["norm1.bias"])
    x = x + _conv_attention(h, sub_params(p, "factoratt_crpe."), num_heads, size, records)
    return x + _mlp(_layer_norm(x, p["norm2.weight"], p["norm2.bias"]), *mlp_params(p))


def serial_block_forward(x: np.ndarray, p: dict, num_heads: int, size, drop_path_masks=None):
    """:func:`serial_block` -> (out, cache).  ``drop_path_masks``: None, or the (B,) factors of
    ``layers.drop_path_mask`` for the attention and the MLP branch."""
    m1, m2 = drop_path_masks or (None, None)
    x, c_cpe = conv_pos_enc_forward(x, p["cpe.proj.weight"], p["cpe.proj.bias"], size)
    h, c_n1 = layer_norm_forward(x, p["norm1.weight"], p["norm1.bias"])
    h, c_att = conv_attention_forward(h, sub_params(p, "factoratt_crpe."), num_heads, size)
    h, c_dp1 = drop_path_forward(h, m1)
    x = x + h
    h, c_n2 = layer_norm_forward(x, p["norm2.weight"], p["norm2.bias"])
    h, c_mlp = mlp_forward(h, *mlp_params(p))
    h, c_dp2 = drop_path_forward(h, m2)
    out = x + h
    return out, Cache("serial_block", out, cpe=c_cpe, norm1=c_n1, attn=c_att, drop_path1=c_dp1,
                      norm2=c_n2, mlp=c_mlp, drop_path2=c_dp2)


def serial_block_backward(dout: np.ndarray, cache: Cache):
    """x₀ = cpe(x), x₁ = x₀ + att(norm1(x₀)), y = x₁ + mlp(norm2(x₁)): residual gradients pass
    through, each branch adds its own, and the CPE's backward comes last.
    -> (dx, {key: gradient}) with p's keys."""
    dout = check_backward("serial_block", dout, cache)
    g = {}
    dh = drop_path_backward(dout, cache.drop_path2)
    dh, *d_mlp = mlp_backward(dh, cache.mlp)
    g.update(mlp_grads(d_mlp))
    dx1, g["norm2.weight"], g["norm2.bias"] = layer_norm_backward(dh, cache.norm2)
    dx1 += dout
    dh = drop_path_backward(dx1, cache.drop_path1)
    dh, d_att = conv_attention_backward(dh, cache.attn)
    g.update({f"factoratt_crpe.{k}": v for k, v in d_att.items()})
    dx0, g["norm1.weight"], g["norm1.bias"] = layer_norm_backward(dh, cache.norm1)
    dx0 += dx1
    dx, g["cpe.proj.weight"], g["cpe.proj.bias"] = conv_pos_enc_backward(dx0, cache.cpe)
    return dx, g


class CoaT(CoaTImageSizeMixin, ModelBase):
    """A CoaT / CoaT-Lite forward pass in NumPy.  ``CoaT(cfg, params)(images) -> logits``.

    params: ``{state_dict key: array}``, with or without the aliases of the shared modules
    (``serial_blocks2.0.cpe.proj.weight`` is ``cpe2.proj.weight``; either may be left out).
    Computed in the params' floating dtype.  Same class name and interface as
    ``torch_nn.coat.CoaT``; see there for ``forward_features``, ``forward_intermediates`` and
    the attention views.
    """

    param_shapes = staticmethod(coat_param_shapes)
    shared_keys = staticmethod(shared_keys)
    num_prefix_tokens = 1  # each scale's class token

    def __init__(self, cfg: CoaTConfig, params: dict, name: str = "CoaT"):
        super().__init__(cfg, params, name)
        self.num_features = self.embed_dim = cfg.embed_dims[-1]
        self.feature_info = cfg.feature_info
        p = self.params
        self.patch_embeds = [sub_params(p, f"patch_embed{s}.") for s in range(1, 5)]
        self.serial_blocks = [[sub_params(p, f"serial_blocks{s}.{n}.") for n in range(depth)]
                              for s, depth in zip(range(1, 5), cfg.serial_depths)]
        self.parallel_blocks = [sub_params(p, f"parallel_blocks.{n}.")
                                for n in range(cfg.parallel_depth)]

    def _scales(self, images: np.ndarray, last: int = 3, records: list | None = None):
        """Scales 1..last+1 through their serial blocks (then the parallel blocks, when all four
        ran): -> ([x1, x2, x3, x4] tokens before the final norms, their grid sizes).

        The batch is split over ``_fast.num_threads()`` threads (images are independent; see
        ``_fast.split_batch``), except when attention records are collected."""
        images = self.prepare_images(images)  # checked and cast here, before any thread starts
        sizes = self.grid_sizes(images)
        if records is not None:
            return self._run(images, sizes, last, records), sizes
        parts = _fast.split_batch(lambda chunk: self._run(chunk, sizes, last), images)
        if len(parts) == 1:
            return parts[0], sizes
        return [np.concatenate(scale, axis=0) for scale in zip(*parts)], sizes

    def _run(self, images: np.ndarray, sizes, last: int, records: list | None = None) -> list:
        cfg, p = self.cfg, self.params
        x, xs = images.astype(self.dtype, copy=False), []
        for s in range(last + 1):
            if s == 0:
                tokens = _scale_patch_embed(x, self.patch_embeds[0])
            else:
                (H, W), prev = sizes[s - 1], xs[-1]
                grid = prev[:, 1:].reshape(prev.shape[0], H, W, prev.shape[-1])  # channels last
                tokens = _scale_patch_embed(grid, self.patch_embeds[s], channels_last=True)
            tokens = _add_class_token(tokens, p[f"cls_token{s + 1}"])
            for blk in self.serial_blocks[s]:
                tokens = _serial_block(tokens, blk, cfg.num_heads, sizes[s], records)
            xs.append(tokens)
        if self.parallel_blocks and last == 3:
            rest = xs[1:]
            for blk in self.parallel_blocks:
                rest = [_conv_pos_enc(x, p[f"cpe{s}.proj.weight"], p[f"cpe{s}.proj.bias"], size)
                        for x, s, size in zip(rest, (2, 3, 4), sizes[1:])]
                rest = _parallel_block(rest, blk, sizes[1:], cfg.num_heads, cfg.parallel_mode,
                                       records)
            xs[1:] = rest
        return xs

    def _final_norm(self, s: int):
        """Scale s's final norm (0-based), or None (scale 1 never has one; CoaT-Lite only norm4)."""
        if s == 3 or (s > 0 and not self.cfg.is_lite):
            w, b = self.params[f"norm{s + 1}.weight"], self.params[f"norm{s + 1}.bias"]
            return lambda x: _layer_norm(x, w, b)
        return None

    def _features(self, xs):
        if self.cfg.is_lite:
            return self._final_norm(3)(xs[3])
        return [self._final_norm(s)(xs[s]) for s in (1, 2, 3)]

    def forward_features(self, images: np.ndarray):
        """CoaT-Lite: norm4(x4), (B, 1 + H4·W4, C4).  CoaT: [norm2(x2), norm3(x3), norm4(x4)]."""
        return self._features(self._scales(images)[0])

    def pool(self, features) -> np.ndarray:
        """forward_features' output -> (B, num_features): scale 4's class token (CoaT-Lite), or
        the ``aggregate`` mix (a 1×1 Conv1d over 3 channels) of scales 2-4's class tokens."""
        if self.cfg.is_lite:
            return features[:, 0]
        tokens = np.stack([f[:, 0] for f in features], axis=1)  # (B, 3, C)
        w, b = self.params["aggregate.weight"], self.params["aggregate.bias"]
        return np.einsum("bsc,s->bc", tokens, w[0, :, 0]) + b[0]

    def forward_intermediates(self, images: np.ndarray, indices=None, norm: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """As ``torch_nn.coat.CoaT.forward_intermediates``: the four scales' grids."""
        take = interface.resolve_indices(indices, 4, what="scales")
        interface.check_output_fmt(output_fmt)
        interface.check_flags(norm=norm, intermediates_only=intermediates_only)
        early = intermediates_only and (self.cfg.is_lite or take[-1] == 0)
        xs, sizes = self._scales(images, last=take[-1] if early else 3)
        maps = []
        for s in take:
            f = self._final_norm(s)
            y = f(xs[s]) if norm and f is not None else xs[s]
            maps.append(interface.tokens_to_grid(y, sizes[s], 1, output_fmt))
        return maps if intermediates_only else (self._features(xs), maps)

    def _records(self, images):
        records = []
        self._scales(images, records=records)
        return records

    def get_attention_maps(self, images: np.ndarray, view: str = "class") -> list[np.ndarray]:
        """One array per factorized-attention layer, in forward order (serial blocks of scales
        1-4, then each parallel block's scales 2-4): ``view="class"`` (B, h, 1, N), the class
        token's implicit attention row; ``view="keys"`` (B, h, N, d), softmax(K).
        See ``vit_scratch.interface.factorized_attention_map``."""
        interface.check_attention_view(view)
        return [interface.factorized_attention_map(r.key_softmax, r.class_query, view)
                for r in self._records(images)]

    # --- learning: the forward pass with its cache, and the backward pass ------------------------
    def forward_with_cache(self, images, rng=None):
        """logits (B, num_classes) and the cache for :meth:`backward`, by the same steps as
        ``__call__`` (on the whole batch, in this thread).  ``rng`` (a
        ``np.random.Generator``): training mode, stochastic depth drawn from it at the config's
        rate in every serial and parallel block, as the PyTorch model; None: eval mode."""
        cfg, p = self.cfg, self.params
        check_trainable(self, rng)
        images = self.prepare_images(images)
        sizes = self.grid_sizes(images)
        B = len(images)

        def masks():  # a block's two DropPath draws: attention and MLP branch
            return [drop_path_mask(B, cfg.drop_path_rate, rng, self.dtype) for _ in range(2)]

        xs, c_embed, c_cls, c_serial = [], [], [], []
        for s in range(4):
            if s == 0:
                tokens, c = scale_patch_embed_forward(images, self.patch_embeds[0])
            else:
                (H, W), prev = sizes[s - 1], xs[-1]
                grid = prev[:, 1:].reshape(B, H, W, prev.shape[-1])  # channels last
                tokens, c = scale_patch_embed_forward(grid, self.patch_embeds[s],
                                                      channels_last=True)
            c_embed.append(c)
            tokens, c = add_class_token_forward(tokens, p[f"cls_token{s + 1}"])
            c_cls.append(c)
            caches = []
            for blk in self.serial_blocks[s]:
                tokens, c = serial_block_forward(tokens, blk, cfg.num_heads, sizes[s], masks())
                caches.append(c)
            c_serial.append(caches)
            xs.append(tokens)
        c_parallel = []
        if self.parallel_blocks:
            rest = xs[1:]
            for blk in self.parallel_blocks:
                c_cpe = []
                for n, (x, s, size) in enumerate(zip(rest, (2, 3, 4), sizes[1:])):
                    rest[n], c = conv_pos_enc_forward(x, p[f"cpe{s}.proj.weight"],
                                                      p[f"cpe{s}.proj.bias"], size)
                    c_cpe.append(c)
                rest, c = parallel_block_forward(rest, blk, sizes[1:], cfg.num_heads,
                                                 cfg.parallel_mode, [masks() for _ in range(3)])
                c_parallel.append((c_cpe, c))
            xs[1:] = rest
        scales = (3,) if cfg.is_lite else (1, 2, 3)
        c_norm, firsts = {}, []
        for s in scales:  # the final norms; only the class tokens go on
            f, c_norm[s] = layer_norm_forward(xs[s], p[f"norm{s + 1}.weight"],
                                              p[f"norm{s + 1}.bias"])
            firsts.append(f[:, 0])
        if cfg.is_lite:
            pooled, stacked = firsts[0], None
        else:  # aggregate: a 1×1 Conv1d mixing the three class tokens
            stacked = np.stack(firsts, axis=1)  # (B, 3, C)
            w, b = p["aggregate.weight"], p["aggregate.bias"]
            pooled = np.einsum("bsc,s->bc", stacked, w[0, :, 0]) + b[0]
        logits, c_head = linear_forward(pooled, p["head.weight"], p["head.bias"])
        return logits, Cache("CoaT", logits, embed=c_embed, cls=c_cls, serial=c_serial,
                             parallel=c_parallel, norm=c_norm, stacked=stacked, head=c_head,
                             sizes=sizes, shapes=[x.shape for x in xs])

    def backward(self, dlogits, cache):
        """The chain rule from the logits back to the images.  A scale's serial output feeds
        the next scale's patch embedding and (CoaT) the parallel blocks: its gradient is the
        sum of both.  ``cpe{s}`` runs before every parallel block, so its gradient sums over
        them; the aliases of shared tensors are summed into the canonical key by
        ``backprop.model_gradients``.  -> (dimages (B, C, H, W), {key: gradient})."""
        dlogits = check_backward("CoaT", dlogits, cache)
        cfg, p, g = self.cfg, self.params, {}

        def add(key, value):
            g[key] = g[key] + value if key in g else value

        dpooled, g["head.weight"], g["head.bias"] = linear_backward(dlogits, cache.head)
        if cfg.is_lite:
            dfirsts = {3: dpooled}
        else:
            w = p["aggregate.weight"][0, :, 0]
            g["aggregate.weight"] = np.einsum("bc,bsc->s", dpooled, cache.stacked).reshape(1, 3, 1)
            g["aggregate.bias"] = dpooled.sum().reshape(1)
            dfirsts = {s: dpooled * w[n] for n, s in enumerate((1, 2, 3))}
        dxs = [np.zeros(shape, dtype=dpooled.dtype) for shape in cache.shapes]
        for s, d in dfirsts.items():
            df = np.zeros_like(dxs[s])
            df[:, 0] = d
            dxs[s], g[f"norm{s + 1}.weight"], g[f"norm{s + 1}.bias"] = layer_norm_backward(
                df, cache.norm[s])
        for n in reversed(range(len(cache.parallel))):
            c_cpe, c_blk = cache.parallel[n]
            drest, d = parallel_block_backward(dxs[1:], c_blk)
            g.update({f"parallel_blocks.{n}.{k}": v for k, v in d.items()})
            for i, s in enumerate((2, 3, 4)):
                drest[i], dw, db = conv_pos_enc_backward(drest[i], c_cpe[i])
                add(f"cpe{s}.proj.weight", dw)
                add(f"cpe{s}.proj.bias", db)
            dxs[1:] = drest
        for s in reversed(range(4)):
            dtokens = dxs[s]
            for n in reversed(range(len(cache.serial[s]))):
                dtokens, d = serial_block_backward(dtokens, cache.serial[s][n])
                g.update({f"serial_blocks{s + 1}.{n}.{k}": v for k, v in d.items()})
            dtokens, g[f"cls_token{s + 1}"] = add_class_token_backward(dtokens, cache.cls[s])
            dgrid, d = scale_patch_embed_backward(dtokens, cache.embed[s])
            g.update({f"patch_embed{s + 1}.{k}": v for k, v in d.items()})
            if s > 0:  # the grid was scale s-1's image tokens
                dxs[s - 1][:, 1:] += dgrid.reshape(dgrid.shape[0], -1, dgrid.shape[-1])
        return dgrid, model_gradients(self, g, unused=unused_keys(cfg))

    def get_attention_grids(self, images: np.ndarray, view: str = "class") -> list[np.ndarray]:
        """One (B, h, H_s, W_s) grid per factorized-attention layer, on its scale's grid."""
        interface.check_attention_view(view)
        return [interface.factorized_attention_grid(
                    interface.factorized_attention_map(r.key_softmax, r.class_query, view),
                    r.size, view)
                for r in self._records(images)]
