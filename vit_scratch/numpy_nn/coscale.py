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
"""
from __future__ import annotations

import numpy as np

from .. import validation
from .factorized_attention import conv_attend, conv_attention, crpe_params, split_qkv
from .layers import layer_norm, linear, mlp

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


def interpolate_tokens(x: np.ndarray, size, scale_factor: float) -> np.ndarray:
    """Feature interpolation on tokens: the image tokens resized bilinearly, the class token
    carried as it is.

    x: (B, 1 + H·W, C), size: (H, W) of x's grid  ->  (B, 1 + H'·W', C), (H', W') =
    floor((H, W) · scale_factor)
    """
    H, W = validation.check_token_grid(np.shape(x), size)
    B, N, C = x.shape
    img = bilinear_resize(x[:, 1:].reshape(B, H, W, C), scale_factor=scale_factor, axes=(1, 2))
    return np.concatenate([x[:, :1], img.reshape(B, img.shape[1] * img.shape[2], C)], axis=1)


def _factor(src: int, dst: int) -> float:
    """Scale factor from scale ``src``'s grid to scale ``dst``'s (each scale halves the grid)."""
    return 2.0 ** (src - dst)


def parallel_block(xs, p: dict, sizes, num_heads: int, mode: str = "interpolation",
                   records: list | None = None):
    """One co-scale parallel block on scales 2-4 (see the module docstring).

    xs: [x2, x3, x4], each (B, 1 + H_s·W_s, C), after the scales' CPE; p: the block's params with
    keys relative to it (``norm12.weight``, ``factoratt_crpe2.qkv.weight``, ``mlp2.fc1.weight``,
    ...); sizes: [(H2, W2), (H3, W3), (H4, W4)]; mode: ``"interpolation"`` or
    ``"cross_attention"``  ->  [x2, x3, x4]
    """
    if mode not in ("interpolation", "cross_attention"):
        raise ValueError(f"mode must be 'interpolation' or 'cross_attention', got {mode!r}")
    normed = [layer_norm(x, p[f"norm1{s}.weight"], p[f"norm1{s}.bias"])
              for x, s in zip(xs, PARALLEL_SCALES)]
    att = {s: {k[len(f"factoratt_crpe{s}."):]: v for k, v in p.items()
               if k.startswith(f"factoratt_crpe{s}.")} for s in PARALLEL_SCALES}
    if mode == "interpolation":
        c2, c3, c4 = (conv_attention(u, att[s], num_heads, size, records)
                      for u, s, size in zip(normed, PARALLEL_SCALES, sizes))
        S2, S3, S4 = sizes
        cur = [c2 + interpolate_tokens(c3, S3, 2.0) + interpolate_tokens(c4, S4, 4.0),
               c3 + interpolate_tokens(c4, S4, 2.0) + interpolate_tokens(c2, S2, 0.5),
               c4 + interpolate_tokens(c3, S3, 0.5) + interpolate_tokens(c2, S2, 0.25)]
    else:
        cur = cross_scale_attention(normed, att, sizes, num_heads, records)
    out = []
    for x, c, s in zip(xs, cur, PARALLEL_SCALES):
        x = x + c
        h = layer_norm(x, p[f"norm2{s}.weight"], p[f"norm2{s}.bias"])
        out.append(x + mlp(h, p[f"mlp{s}.fc1.weight"], p[f"mlp{s}.fc1.bias"],
                           p[f"mlp{s}.fc2.weight"], p[f"mlp{s}.fc2.bias"]))
    return out


def cross_scale_attention(normed, att: dict, sizes, num_heads: int, records: list | None = None):
    """Direct cross-layer attention (``parallel_mode="cross_attention"``), before the residual.

    normed: [u2, u3, u4] normalised tokens (B, 1 + H_s·W_s, C); att: per scale, its
    conv-attention params (``{2: {"qkv.weight": ...}, ...}``); sizes: the three grids
    ->  [c2, c3, c4], each scale's projected sum of conv-attentions over the three sources.
    Only the within-scale term is recorded in ``records``.
    """
    qkv = {s: split_qkv(u, att[s]["qkv.weight"], att[s].get("qkv.bias"))
           for u, s in zip(normed, PARALLEL_SCALES)}
    size = dict(zip(PARALLEL_SCALES, sizes))
    out = []
    for i in PARALLEL_SCALES:
        q, k, v = qkv[i]
        weights, biases = crpe_params(att[i])
        acc = conv_attend(q, k, v, size[i], num_heads, weights, biases, records)
        for j in PARALLEL_SCALES:
            if j != i:
                f = _factor(j, i)
                k_ji = interpolate_tokens(qkv[j][1], size[j], f)
                v_ji = interpolate_tokens(qkv[j][2], size[j], f)
                acc += conv_attend(q, k_ji, v_ji, size[i], num_heads, weights, biases)
        out.append(linear(acc, att[i]["proj.weight"], att[i]["proj.bias"]))
    return out
