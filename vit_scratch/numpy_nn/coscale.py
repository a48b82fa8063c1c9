"""The co-scale mechanism in NumPy: bilinear resizing, feature interpolation and CoaT's
parallel block, in its two variants.

Paper: Co-Scale Conv-Attentional Image Transformers -- Xu, Xu, Chang, Tu, ICCV 2021,
https://arxiv.org/abs/2104.06399 (Section 4.2, co-scale parallel block).

A parallel block updates scales 2, 3 and 4 together (strides 8, 16, 32; scale 1 is left as it
is).  Each scale runs its own conv-attention; then the scales exchange information, fine to
coarse and coarse to fine, in one of two ways (``parallel_mode``):

* ``"interpolation"`` (the reference, "feature interpolation"): every scale's attention output
  is resized bilinearly to the other two grids and the copies are added,

      c2 += up(c3, ×2) + up(c4, ×4);  c3 += up(c4, ×2) + down(c2, ×½);  c4 += down(c3, ×½) + down(c2, ×¼)

  Each resized copy keeps *its source's* class token, so the three class tokens are summed too.
* ``"cross_attention"`` ("direct cross-layer attention"; the paper describes it, no public code
  has it; this library's design): every scale's *queries* attend, besides to their own keys and
  values, to the other scales' keys and values resampled to their grid.  Design, per scale i:

      q_i, k_i, v_i = qkv_i(norm1i(x_i))                                    (B, 1 + H_i·W_i, C)
      k_j→i, v_j→i  = k_j, v_j bilinearly resized from grid j to grid i (×2, ×4, ×½ or ×¼),
                      the class token's key and value of scale j carried in front
      c_i = proj_i( Σ_j ConvAtt_i(q_i, k_j→i, v_j→i) ),  j = i first, then the other two scales
      ConvAtt_i(q, k, v) = d^-½ q (softmax(k)ᵀ v) + [0; q_img ⊙ crpe_i(v_img)]

  i.e. the same conv-attention as within a scale (softmax of the keys over the query grid's
  tokens, the query scale's CRPE on the resampled values), once per source scale, summed before
  scale i's output projection.  It reuses the interpolation variant's parameters exactly (no new
  key in the state_dict), so the same checkpoint loads into either variant.  Resampling keys and
  values *before* attending is what lets the CRPE term, which needs values on the query's grid,
  apply to other scales too; the factorized term alone would not need it.  Properties the tests
  check: shifting any scale's keys by a constant changes nothing (the softmax is over tokens and
  bilinear weights sum to 1); with the other scales' values (and the CRPE biases) zeroed, a
  scale's output is its plain conv-attention; gradients reach every scale from every scale.

Afterwards both variants add the result to x_i and apply one MLP shared by the three scales.

Each function is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); a public
function checks its arguments and calls its unchecked core ``_f``, which the CoaT model calls.
"""
from __future__ import annotations

import numpy as np

from .. import validation
from ..specs.coat import PARALLEL_MODES
from .backprop import Cache, check_backward
from .factorized_attention import (_conv_attend, _conv_attention, conv_attend_backward,
                                   conv_attend_forward, conv_attention_backward,
                                   conv_attention_forward, crpe_params, split_qkv)
from .layers import (_layer_norm, _linear, _mlp, drop_path_backward, drop_path_forward,
                     layer_norm_backward, layer_norm_forward, linear_backward, linear_forward,
                     mlp_backward, mlp_forward, mlp_grads, mlp_params)

PARALLEL_SCALES = (2, 3, 4)


def _linear_taps(in_size: int, out_size: int, ratio: float, dtype):
    """PyTorch's source indices and weights for 1-D linear resizing, align_corners=False:
    output index o samples the input at (o + ½)·ratio - ½, clamped at 0."""
    ratio = np.asarray(ratio, dtype=dtype)
    src = ratio * (np.arange(out_size, dtype=dtype) + np.asarray(0.5, dtype=dtype)) - np.asarray(0.5, dtype=dtype)
    src = np.maximum(src, 0)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam1 = np.clip(src - i0.astype(dtype), 0, 1).astype(dtype)
    i1 = np.where(i0 < in_size - 1, i0 + 1, i0)
    return i0, i1, (1 - lam1).astype(dtype), lam1


def resized_shape(in_hw, size=None, scale_factor=None) -> tuple[tuple[int, int], tuple[float, float]]:
    """Output (H', W') and the source-pixels-per-output-pixel ratios, as ``F.interpolate``
    computes them: with ``scale_factor`` s the output is floor(H·s) and the ratio exactly 1/s
    (``recompute_scale_factor=False``); with ``size`` the ratio is H / H'."""
    if (size is None) == (scale_factor is None):
        raise ValueError("give exactly one of size and scale_factor")
    if size is not None:
        out = validation.to_2tuple(size, "size")
        return out, (in_hw[0] / out[0], in_hw[1] / out[1])
    sf = (scale_factor, scale_factor) if np.isscalar(scale_factor) else tuple(scale_factor)
    if len(sf) != 2 or min(sf) <= 0:
        raise ValueError(f"scale_factor must be positive (one number or a pair), got {scale_factor!r}")
    out = (int(np.floor(in_hw[0] * sf[0])), int(np.floor(in_hw[1] * sf[1])))
    if min(out) < 1:
        raise ValueError(f"scale_factor {scale_factor!r} shrinks the grid {tuple(in_hw)} to {out}")
    return out, (1.0 / sf[0], 1.0 / sf[1])


def bilinear_resize(x: np.ndarray, size=None, scale_factor=None, axes=(-2, -1)) -> np.ndarray:
    """Bilinear resizing equal to ``F.interpolate(x, size, scale_factor, mode="bilinear",
    align_corners=False, recompute_scale_factor=False)``.

    x: any array whose ``axes`` are (H, W) -- (B, C, H, W) by default, ``axes=(1, 2)`` for
    channels-last (B, H, W, C)  ->  the same with (H', W').  Exactly one of ``size`` (H', W')
    and ``scale_factor`` (one number or a pair).

    align_corners=False treats pixels as unit squares: output pixel o has its centre at
    (o + ½)·ratio - ½ in input coordinates and blends the two nearest input pixels; outside the
    first centre it copies the edge.  For an even grid, ×½ averages each 2×2 block; ×¼ averages
    the *central* 2×2 of each 4×4 block (there is no anti-aliasing).  The blend order is
    PyTorch's: along W within each of the two rows, then along H.
    """
    x = np.asarray(x)
    ah, aw = (a % x.ndim for a in axes)
    if ah == aw:
        raise ValueError(f"axes must name two different axes, got {axes!r}")
    (out_h, out_w), (rh, rw) = resized_shape((x.shape[ah], x.shape[aw]), size, scale_factor)
    dtype = np.result_type(x, np.float32)
    h0, h1, wh0, wh1 = _linear_taps(x.shape[ah], out_h, rh, dtype)
    w0, w1, ww0, ww1 = _linear_taps(x.shape[aw], out_w, rw, dtype)

    def along(weights, axis):  # (n,) -> broadcastable to x along ``axis``
        shape = [1] * x.ndim
        shape[axis] = -1
        return weights.reshape(shape)

    def blend_w(rows):
        return along(ww0, aw) * rows.take(w0, axis=aw) + along(ww1, aw) * rows.take(w1, axis=aw)

    top, bottom = x.take(h0, axis=ah), x.take(h1, axis=ah)
    return along(wh0, ah) * blend_w(top) + along(wh1, ah) * blend_w(bottom)


def bilinear_resize_forward(x: np.ndarray, size=None, scale_factor=None, axes=(-2, -1)):
    """:func:`bilinear_resize` -> (out, cache)."""
    out = bilinear_resize(x, size=size, scale_factor=scale_factor, axes=axes)
    x = np.asarray(x)
    return out, Cache("bilinear_resize", out, in_shape=x.shape,
                      axes=tuple(a % x.ndim for a in axes), size=size, scale_factor=scale_factor)


def bilinear_resize_backward(dout: np.ndarray, cache: Cache) -> np.ndarray:
    """Bilinear resizing is linear and separable: out = M_h x M_wᵀ along the two axes, with
    the 1-D resizing matrices of :func:`resize_matrix`.  Its gradient is the transpose,

        ∂L/∂x = M_hᵀ dout M_w

    which scatters each output pixel's gradient back to the (up to four) input pixels it
    blended, with the same weights.  -> dx, x's shape."""
    dout = check_backward("bilinear_resize", dout, cache)
    ah, aw = cache.axes
    in_hw = (cache.in_shape[ah], cache.in_shape[aw])
    (out_h, out_w), (rh, rw) = resized_shape(in_hw, cache.size, cache.scale_factor)
    dtype = dout.dtype
    m_h = resize_matrix(in_hw[0], out_h, rh, dtype)  # (H', H)
    m_w = resize_matrix(in_hw[1], out_w, rw, dtype)  # (W', W)
    dx = np.moveaxis(np.tensordot(m_h.T, np.moveaxis(dout, ah, 0), axes=1), 0, ah)  # H' -> H
    return np.moveaxis(np.tensordot(m_w.T, np.moveaxis(dx, aw, 0), axes=1), 0, aw)  # W' -> W


def resize_matrix(in_size: int, out_size: int, ratio: float, dtype) -> np.ndarray:
    """1-D linear resizing as a matrix M (out_size, in_size): ``M @ x`` resizes x along one
    axis exactly as :func:`bilinear_resize` does (the same taps and weights); each row has at
    most two non-zero entries, summing to 1."""
    i0, i1, w0, w1 = _linear_taps(in_size, out_size, ratio, dtype)
    m = np.zeros((out_size, in_size), dtype=dtype)
    rows = np.arange(out_size)
    np.add.at(m, (rows, i0), w0)
    np.add.at(m, (rows, i1), w1)
    return m


def interpolate_tokens(x: np.ndarray, size, scale_factor: float) -> np.ndarray:
    """Feature interpolation on tokens: the image tokens resized bilinearly, the class token
    carried as it is.

    x: (B, 1 + H·W, C), size: (H, W) of x's grid  ->  (B, 1 + H'·W', C), (H', W') =
    floor((H, W) · scale_factor)
    """
    x = np.asarray(x)
    H, W = validation.check_token_grid(x.shape, size)
    return _interpolate_tokens(x, (H, W), scale_factor)


def _interpolate_tokens(x, size, scale_factor: float):
    """:func:`interpolate_tokens`' formula, unchecked (``size`` a pair)."""
    (H, W), (B, _, C) = size, x.shape
    img = bilinear_resize(x[:, 1:].reshape(B, H, W, C), scale_factor=scale_factor, axes=(1, 2))
    return np.concatenate([x[:, :1], img.reshape(B, img.shape[1] * img.shape[2], C)], axis=1)


def interpolate_tokens_forward(x: np.ndarray, size, scale_factor: float):
    """:func:`interpolate_tokens` -> (out, cache), through ``bilinear_resize_forward``."""
    B, N, C = x.shape
    H, W = validation.to_2tuple(size, "size")
    if N != 1 + H * W:
        raise ValueError(f"tokens of shape {x.shape} do not fit the grid size {(H, W)}")
    img, c_resize = bilinear_resize_forward(x[:, 1:].reshape(B, H, W, C), scale_factor=scale_factor,
                                            axes=(1, 2))
    out = np.concatenate([x[:, :1], img.reshape(B, -1, C)], axis=1)
    return out, Cache("interpolate_tokens", out, resize=c_resize, img_shape=img.shape)


def interpolate_tokens_backward(dout: np.ndarray, cache: Cache) -> np.ndarray:
    """The class token was carried as it is (gradient passed through); the image tokens were
    resized (:func:`bilinear_resize_backward`).  -> dx (B, 1 + H·W, C)."""
    dout = check_backward("interpolate_tokens", dout, cache)
    B, _, C = dout.shape
    dimg = bilinear_resize_backward(dout[:, 1:].reshape(cache.img_shape), cache.resize)
    return np.concatenate([dout[:, :1], dimg.reshape(B, -1, C)], axis=1)


def _factor(src: int, dst: int) -> float:
    """Scale factor from scale ``src``'s grid to scale ``dst``'s (each scale halves the grid)."""
    return 2.0 ** (src - dst)


def _attention_params(p: dict) -> dict:
    return {s: {k[len(f"factoratt_crpe{s}."):]: v for k, v in p.items()
                if k.startswith(f"factoratt_crpe{s}.")} for s in PARALLEL_SCALES}


def parallel_block(xs, p: dict, sizes, num_heads: int, mode: str = "interpolation",
                   records: list | None = None):
    """One co-scale parallel block on scales 2-4 (see the module docstring).

    xs: [x2, x3, x4], each (B, 1 + H_s·W_s, C), after the scales' CPE; p: the block's params with
    keys relative to it (``norm12.weight``, ``factoratt_crpe2.qkv.weight``, ``mlp2.fc1.weight``,
    ...); sizes: [(H2, W2), (H3, W3), (H4, W4)]; mode: ``"interpolation"`` or
    ``"cross_attention"``  ->  [x2, x3, x4]
    """
    validation.check_choice(mode, "mode", PARALLEL_MODES)
    if len(xs) != 3 or len(sizes) != 3:
        raise ValueError(f"a parallel block takes the three scales 2-4, got {len(xs)} arrays "
                         f"and {len(sizes)} sizes")
    xs = [np.asarray(x) for x in xs]
    sizes = [validation.check_token_grid(x.shape, size, f"x{s}", np.shape(p[f"norm1{s}.weight"])[0])
             for x, size, s in zip(xs, sizes, PARALLEL_SCALES)]
    validation.head_dim(xs[0].shape[-1], num_heads)
    return _parallel_block(xs, p, sizes, num_heads, mode, records)


def _parallel_block(xs, p: dict, sizes, num_heads: int, mode: str = "interpolation",
                    records: list | None = None):
    """:func:`parallel_block`'s formula, unchecked (``sizes`` pairs)."""
    normed = [_layer_norm(x, p[f"norm1{s}.weight"], p[f"norm1{s}.bias"])
              for x, s in zip(xs, PARALLEL_SCALES)]
    att = _attention_params(p)
    if mode == "interpolation":
        c2, c3, c4 = (_conv_attention(u, att[s], num_heads, size, records)
                      for u, s, size in zip(normed, PARALLEL_SCALES, sizes))
        S2, S3, S4 = sizes
        cur = [c2 + _interpolate_tokens(c3, S3, 2.0) + _interpolate_tokens(c4, S4, 4.0),
               c3 + _interpolate_tokens(c4, S4, 2.0) + _interpolate_tokens(c2, S2, 0.5),
               c4 + _interpolate_tokens(c3, S3, 0.5) + _interpolate_tokens(c2, S2, 0.25)]
    else:
        cur = cross_scale_attention(normed, att, sizes, num_heads, records)
    out = []
    for x, c, s in zip(xs, cur, PARALLEL_SCALES):
        x = x + c
        h = _layer_norm(x, p[f"norm2{s}.weight"], p[f"norm2{s}.bias"])
        out.append(x + _mlp(h, *mlp_params(p, f"mlp{s}.")))
    return out


def parallel_block_forward(xs, p: dict, sizes, num_heads: int, mode: str = "interpolation",
                           drop_path_masks=None):
    """:func:`parallel_block` -> ([x2, x3, x4], cache).  ``drop_path_masks``: None, or per
    scale the (B,) factors of ``layers.drop_path_mask`` for the attention and the MLP branch."""
    validation.check_choice(mode, "mode", PARALLEL_MODES)
    masks = drop_path_masks or [(None, None)] * len(PARALLEL_SCALES)
    normed, c_norm1 = zip(*(layer_norm_forward(x, p[f"norm1{s}.weight"], p[f"norm1{s}.bias"])
                            for x, s in zip(xs, PARALLEL_SCALES)))
    att = _attention_params(p)
    if mode == "interpolation":
        c_att, c_interp = [], {}
        cs = []
        for u, s, size in zip(normed, PARALLEL_SCALES, sizes):
            c, cache = conv_attention_forward(u, att[s], num_heads, size)
            cs.append(c)
            c_att.append(cache)

        def resized(j: int, i: int):  # scale j's attention output on scale i's grid
            r, c_interp[i, j] = interpolate_tokens_forward(
                cs[j], sizes[j], _factor(PARALLEL_SCALES[j], PARALLEL_SCALES[i]))
            return r

        cur = [cs[0] + resized(1, 0) + resized(2, 0),  # the order of parallel_block's sums
               cs[1] + resized(2, 1) + resized(0, 1),
               cs[2] + resized(1, 2) + resized(0, 2)]
        c_mix = Cache("interpolation", cur, attention=c_att, interp=c_interp)
    else:
        cur, c_mix = cross_scale_attention_forward(normed, att, sizes, num_heads)
    out, c_dp1, c_norm2, c_mlp, c_dp2 = [], [], [], [], []
    for x, c, s, (m1, m2) in zip(xs, cur, PARALLEL_SCALES, masks):
        c, cache = drop_path_forward(c, m1)
        c_dp1.append(cache)
        x = x + c
        h, cache = layer_norm_forward(x, p[f"norm2{s}.weight"], p[f"norm2{s}.bias"])
        c_norm2.append(cache)
        h, cache = mlp_forward(h, *mlp_params(p, f"mlp{s}."))
        c_mlp.append(cache)
        h, cache = drop_path_forward(h, m2)
        c_dp2.append(cache)
        out.append(x + h)
    return out, Cache("parallel_block", out, norm1=c_norm1, mix=c_mix, mode=mode, drop_path1=c_dp1,
                      norm2=c_norm2, mlp=c_mlp, drop_path2=c_dp2,
                      qkv_bias={s: "qkv.bias" in att[s] for s in PARALLEL_SCALES})


def parallel_block_backward(douts, cache: Cache):
    """Per scale, x' = x + c, y = x' + mlp(norm2(x')): residual gradients pass through.  The
    exchange between the scales is linear: with feature interpolation, c_i = a_i + Σ_j
    resize_{j→i}(a_j), so ∂L/∂a_j = ∂L/∂c_j + Σ_i resizeᵀ_{j→i}(∂L/∂c_i) -- every scale's
    attention output collects the gradient of every copy made of it.  (The cross-attention
    mode: :func:`cross_scale_attention_backward`.)  The three scales' MLPs get their own
    gradients under their own keys (``mlp2``, ``mlp3``, ``mlp4``; where they are one shared
    module, the model sums them).  -> ([dx2, dx3, dx4], {key: gradient} with p's keys)."""
    douts = check_backward("parallel_block", douts, cache)
    g, dcur, dxs = {}, [], []
    for i, s in enumerate(PARALLEL_SCALES):
        dy = douts[i]
        dh = drop_path_backward(dy, cache.drop_path2[i])
        dh, *d_mlp = mlp_backward(dh, cache.mlp[i])
        g.update(mlp_grads(d_mlp, f"mlp{s}."))
        dx, g[f"norm2{s}.weight"], g[f"norm2{s}.bias"] = layer_norm_backward(dh, cache.norm2[i])
        dx += dy
        dxs.append(dx)
        dcur.append(drop_path_backward(dx, cache.drop_path1[i]))
    if cache.mode == "interpolation":
        mix = cache.mix
        dcs = [d.copy() for d in dcur]
        for (i, j), c in mix.interp.items():  # the copy of a_j resized to grid i
            dcs[j] += interpolate_tokens_backward(dcur[i], c)
        datt = {}
        dnormed = []
        for i, s in enumerate(PARALLEL_SCALES):
            du, datt[s] = conv_attention_backward(dcs[i], mix.attention[i])
            dnormed.append(du)
    else:
        dnormed, datt = cross_scale_attention_backward(dcur, cache.mix)
    for i, s in enumerate(PARALLEL_SCALES):
        g.update({f"factoratt_crpe{s}.{k}": v for k, v in datt[s].items()})
        dx, g[f"norm1{s}.weight"], g[f"norm1{s}.bias"] = layer_norm_backward(dnormed[i],
                                                                             cache.norm1[i])
        dxs[i] = dxs[i] + dx
    return dxs, g


def cross_scale_attention(normed, att: dict, sizes, num_heads: int, records: list | None = None):
    """Direct cross-layer attention (``parallel_mode="cross_attention"``), before the residual.

    normed: [u2, u3, u4] normalised tokens (B, 1 + H_s·W_s, C); att: per scale, its
    conv-attention params (``{2: {"qkv.weight": ...}, ...}``); sizes: the three grids
    ->  [c2, c3, c4], each scale's projected sum of conv-attentions over the three sources.
    Only the within-scale term is recorded in ``records``.  A step of :func:`parallel_block`,
    which checks the arrays: unchecked.
    """
    qkv = {s: split_qkv(u, att[s]["qkv.weight"], att[s].get("qkv.bias"))
           for u, s in zip(normed, PARALLEL_SCALES)}
    size = dict(zip(PARALLEL_SCALES, sizes))
    out = []
    for i in PARALLEL_SCALES:
        q, k, v = qkv[i]
        weights, biases = crpe_params(att[i])
        acc = _conv_attend(q, k, v, size[i], num_heads, weights, biases, records)
        for j in PARALLEL_SCALES:
            if j != i:
                f = _factor(j, i)
                k_ji = _interpolate_tokens(qkv[j][1], size[j], f)
                v_ji = _interpolate_tokens(qkv[j][2], size[j], f)
                acc += _conv_attend(q, k_ji, v_ji, size[i], num_heads, weights, biases)
        out.append(_linear(acc, att[i]["proj.weight"], att[i]["proj.bias"]))
    return out


def cross_scale_attention_forward(normed, att: dict, sizes, num_heads: int):
    """:func:`cross_scale_attention` -> ([c2, c3, c4], cache), through the parts' ``_forward``s."""
    size = dict(zip(PARALLEL_SCALES, sizes))
    qkv, c_qkv = {}, {}
    for u, s in zip(normed, PARALLEL_SCALES):
        y, c_qkv[s] = linear_forward(u, att[s]["qkv.weight"], att[s].get("qkv.bias"))
        C = u.shape[-1]
        qkv[s] = (y[..., :C], y[..., C:2 * C], y[..., 2 * C:])
    out, c_attend, c_interp, c_proj = [], {}, {}, {}
    for i in PARALLEL_SCALES:
        q, k, v = qkv[i]
        weights, biases = crpe_params(att[i])
        acc, c_attend[i, i] = conv_attend_forward(q, k, v, size[i], num_heads, weights, biases)
        for j in PARALLEL_SCALES:
            if j != i:
                f = _factor(j, i)
                k_ji, c_k = interpolate_tokens_forward(qkv[j][1], size[j], f)
                v_ji, c_v = interpolate_tokens_forward(qkv[j][2], size[j], f)
                c_interp[i, j] = (c_k, c_v)
                a, c_attend[i, j] = conv_attend_forward(q, k_ji, v_ji, size[i], num_heads,
                                                        weights, biases)
                acc += a
        y, c_proj[i] = linear_forward(acc, att[i]["proj.weight"], att[i]["proj.bias"])
        out.append(y)
    return out, Cache("cross_scale_attention", out, qkv=c_qkv, attend=c_attend, interp=c_interp,
                      proj=c_proj, qkv_bias={s: "qkv.bias" in att[s] for s in PARALLEL_SCALES})


def cross_scale_attention_backward(douts, cache: Cache):
    """c_i = proj_i(Σ_j ConvAtt_i(q_i, k_j→i, v_j→i)): each term's gradient flows to q_i and,
    through the resizing's transpose, to k_j and v_j; every scale's q, k, v collect the sum over
    all the terms they entered, then go back through their qkv projection.  Scale i's CRPE
    convolutions are used by all three of its terms: their gradients add up.
    -> ([du2, du3, du4], {scale: {key: gradient}} with att's keys)."""
    douts = check_backward("cross_scale_attention", douts, cache)
    dqkv = {s: [None, None, None] for s in PARALLEL_SCALES}

    def add(s, which, d):
        dqkv[s][which] = d if dqkv[s][which] is None else dqkv[s][which] + d

    datt = {s: {} for s in PARALLEL_SCALES}
    for i, dout in zip(PARALLEL_SCALES, douts):
        dacc, datt[i]["proj.weight"], datt[i]["proj.bias"] = linear_backward(dout, cache.proj[i])
        for j in PARALLEL_SCALES:
            dq, dk, dv, dws, dbs = conv_attend_backward(dacc, cache.attend[i, j])
            add(i, 0, dq)
            if j == i:
                add(i, 1, dk)
                add(i, 2, dv)
            else:
                c_k, c_v = cache.interp[i, j]
                add(j, 1, interpolate_tokens_backward(dk, c_k))
                add(j, 2, interpolate_tokens_backward(dv, c_v))
            for n, (dw, db) in enumerate(zip(dws, dbs)):
                for leaf, d in (("weight", dw), ("bias", db)):
                    key = f"crpe.conv_list.{n}.{leaf}"
                    datt[i][key] = datt[i][key] + d if key in datt[i] else d
    dnormed = []
    for s in PARALLEL_SCALES:
        du, datt[s]["qkv.weight"], db = linear_backward(np.concatenate(dqkv[s], axis=-1),
                                                        cache.qkv[s])
        if cache.qkv_bias[s]:
            datt[s]["qkv.bias"] = db
        dnormed.append(du)
    return dnormed, datt
