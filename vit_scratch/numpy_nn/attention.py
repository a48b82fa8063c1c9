"""Multi-head self-attention in NumPy, straight from the formula

    Attention(Q, K, V) = softmax(Q Kᵀ / √d) V

with the scale applied to the scores *before* the softmax, and masked scores set to -inf
*before* the softmax (a widely copied from-scratch tutorial gets exactly these two steps wrong;
notebook 02, section 5).

Each function is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); a public
function checks its arguments and calls its unchecked core ``_f``, which the models call.
"""
from __future__ import annotations

import numpy as np
from einops import rearrange

from .. import validation
from .backprop import Cache, check_backward
from .layers import (_linear, _softmax, linear_backward, linear_forward, softmax_backward,
                     softmax_forward)


def attention_weights(q: np.ndarray, k: np.ndarray, mask: np.ndarray | None = None,
                      scale: float | None = None) -> np.ndarray:
    """softmax(q kᵀ · scale + mask) -- each row sums to 1.

    q: (..., N_q, d), k: (..., N_k, d)  ->  (..., N_q, N_k); scale defaults to d^-½.
    mask: boolean (True = may attend) or additive float, broadcastable to the scores.
    A query that may attend to nothing gets all-zero weights (so its output is 0), the
    convention of PyTorch's ``F.scaled_dot_product_attention``, instead of 0/0 = nan.
    """
    q, k = np.asarray(q), np.asarray(k)
    validation.check_qkv(q.shape, k.shape)
    if mask is not None:
        mask = np.asarray(mask)
        validation.check_mask_dtype(mask.dtype)
        validation.check_mask(mask.shape, q.shape[:-1] + k.shape[-2:-1])
    return _attention_weights(q, k, mask, scale)


def _attention_weights(q, k, mask=None, scale=None):
    """:func:`attention_weights`' formula, unchecked."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q * np.asarray(scale, dtype=q.dtype)) @ np.swapaxes(k, -1, -2)  # (..., N_q, N_k)
    if mask is None:
        return _softmax(scores, axis=-1, out=scores)  # in place: scores is ours
    if mask.dtype == np.bool_:
        scores = np.where(mask, scores, -np.inf)
    else:
        scores = scores + mask.astype(scores.dtype, copy=False)
    empty = np.isneginf(scores).all(axis=-1, keepdims=True)  # (..., N_q, 1)
    weights = _softmax(np.where(empty, 0.0, scores), axis=-1)
    return np.where(empty, 0.0, weights).astype(scores.dtype, copy=False)


def scaled_dot_product_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                 mask: np.ndarray | None = None, scale: float | None = None,
                                 return_attention: bool = False):
    """softmax(q kᵀ / √d) v, for any leading axes (batch, heads).

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    With ``return_attention=True`` also returns the weights (..., N_q, N_k).
    """
    validation.check_qkv(np.shape(q), np.shape(k), np.shape(v))
    attn = attention_weights(q, k, mask=mask, scale=scale)  # checks the mask
    out = attn @ v
    return (out, attn) if return_attention else out


def _scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    """:func:`scaled_dot_product_attention`, unchecked: -> (out, the weights)."""
    attn = _attention_weights(q, k, mask, scale)
    return attn @ v, attn


def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None,
                      scale: float | None = None):
    """:func:`scaled_dot_product_attention` -> (out, cache); ``cache.attn`` holds the weights."""
    out, attn = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale,
                                             return_attention=True)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return out, Cache("attention", out, q=q, k=k, v=v, attn=attn, scale=scale)


def attention_backward(dout: np.ndarray, cache: Cache):
    """With S = s·q kᵀ, P = softmax(S) row by row, O = P v:

        ∂L/∂v = Pᵀ dO,      ∂L/∂P = dO vᵀ,
        ∂L/∂S = P ⊙ (dP - Σ_j dP_j P_j)      (softmax's Jacobian-vector product, per row)
        ∂L/∂q = s · dS k,   ∂L/∂k = s · dSᵀ q

    A masked-out score has P = 0, so its dS is 0 (and a row that may attend to nothing, all
    zero weights, sends no gradient).  -> (dq, dk, dv), shaped like q, k, v."""
    dout = check_backward("attention", dout, cache)
    q, k, v, p, s = cache.q, cache.k, cache.v, cache.attn, cache.scale
    dv = np.swapaxes(p, -1, -2) @ dout  # (..., N_k, d_v)
    dp = dout @ np.swapaxes(v, -1, -2)  # (..., N_q, N_k)
    ds = p * (dp - np.sum(dp * p, axis=-1, keepdims=True))
    ds *= np.asarray(s, dtype=ds.dtype)
    return ds @ k, np.swapaxes(ds, -1, -2) @ q, dv


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """(B, N, h·d) -> (B, h, N, d): channels are head-major, head 0 owns channels 0..d-1."""
    validation.check_ndim(np.shape(x), 3, "x", "(B, N, h·d)")
    validation.head_dim(x.shape[-1], num_heads)
    return _split_heads(x, num_heads)


def _split_heads(x, num_heads: int):
    return rearrange(x, "b n (h d) -> b h n d", h=num_heads)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, h, N, d) -> (B, N, h·d), the inverse of :func:`split_heads`."""
    validation.check_ndim(np.shape(x), 4, "x", "(B, h, N, d)")
    return _merge_heads(x)


def _merge_heads(x):
    return rearrange(x, "b h n d -> b n (h d)")


def multi_head_attention(x: np.ndarray, qkv_weight: np.ndarray, qkv_bias: np.ndarray | None,
                         proj_weight: np.ndarray, proj_bias: np.ndarray, num_heads: int,
                         mask: np.ndarray | None = None, return_attention: bool = False):
    """Multi-head self-attention with one fused qkv projection (timm's layout).

    x: (B, N, C), qkv_weight: (3C, C) with rows [q; k; v], proj_weight: (C, C)
    ->  (B, N, C), and the attention weights (B, h, N, N) if ``return_attention``.
    """
    x = np.asarray(x)
    validation.check_ndim(x.shape, 3, "x", "(B, N, C)")
    C = x.shape[-1]
    validation.head_dim(C, num_heads)
    for name, w, shape in (("qkv_weight", qkv_weight, (3 * C, C)), ("qkv_bias", qkv_bias, (3 * C,)),
                           ("proj_weight", proj_weight, (C, C)), ("proj_bias", proj_bias, (C,))):
        if w is not None and np.shape(w) != shape:
            raise ValueError(f"{name} must have shape {shape} for x with C = {C}, got shape "
                             f"{np.shape(w)}")
    if mask is not None:
        mask = np.asarray(mask)
        validation.check_mask_dtype(mask.dtype)
        validation.check_mask(mask.shape, (x.shape[0], num_heads, x.shape[1], x.shape[1]))
    x = x.astype(np.float64) if x.dtype.kind in "biu" else x
    out, attn = _multi_head_attention(x, qkv_weight, qkv_bias, proj_weight, proj_bias, num_heads,
                                      mask)
    return (out, attn) if return_attention else out


def _multi_head_attention(x, qkv_weight, qkv_bias, proj_weight, proj_bias, num_heads: int,
                          mask=None):
    """:func:`multi_head_attention`'s formula, unchecked: -> (out, the weights)."""
    qkv = _linear(x, qkv_weight, qkv_bias)  # (B, N, 3C)
    q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=num_heads)
    out, attn = _scaled_dot_product_attention(q, k, v, mask)  # (B, h, N, d), (B, h, N, N)
    return _linear(_merge_heads(out), proj_weight, proj_bias), attn  # (B, N, C)


def multi_head_attention_forward(x: np.ndarray, qkv_weight: np.ndarray, qkv_bias: np.ndarray | None,
                                 proj_weight: np.ndarray, proj_bias: np.ndarray, num_heads: int,
                                 mask: np.ndarray | None = None):
    """:func:`multi_head_attention` -> (out, cache), through the parts' ``_forward``s;
    ``cache.attention.attn`` holds the weights (B, h, N, N)."""
    qkv, c_qkv = linear_forward(x, qkv_weight, qkv_bias)  # (B, N, 3C)
    q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=num_heads)
    o, c_att = attention_forward(q, k, v, mask=mask)  # (B, h, N, d)
    out, c_proj = linear_forward(_merge_heads(o), proj_weight, proj_bias)  # (B, N, C)
    return out, Cache("multi_head_attention", out, qkv=c_qkv, attention=c_att, proj=c_proj,
                      num_heads=num_heads)


def multi_head_attention_backward(dout: np.ndarray, cache: Cache):
    """The chain rule back through proj, the merged heads (a reshape: its gradient is the
    inverse reshape), attention and the fused qkv projection, whose gradient is the three
    heads' dq, dk, dv laid side by side as [q; k; v].
    -> (dx, dqkv_weight, dqkv_bias, dproj_weight, dproj_bias)."""
    dout = check_backward("multi_head_attention", dout, cache)
    dmerged, dproj_w, dproj_b = linear_backward(dout, cache.proj)
    dq, dk, dv = attention_backward(_split_heads(dmerged, cache.num_heads), cache.attention)
    dx, dqkv_w, dqkv_b = linear_backward(_heads_to_qkv(dq, dk, dv), cache.qkv)
    return dx, dqkv_w, dqkv_b, dproj_w, dproj_b


def _heads_to_qkv(dq: np.ndarray, dk: np.ndarray, dv: np.ndarray) -> np.ndarray:
    """Three (B, h, N, d) gradients -> the (B, N, 3·h·d) gradient of the fused qkv projection
    (the inverse of ``rearrange(qkv, "b n (three h d) -> three b h n d")``)."""
    return rearrange(np.stack([dq, dk, dv]), "three b h n d -> b n (three h d)")


def causal_mask(n: int) -> np.ndarray:
    """(n, n) boolean mask, True on and below the diagonal: token i may attend to 0..i.

    (ViT attends everywhere; masks matter for padding and for autoregressive models.)
    """
    n = validation.check_positive(n, "n")
    return np.tril(np.ones((n, n), dtype=bool))


def attention_rollout(attn_maps, head_fusion: str = "mean") -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020): how much each output token draws on each input
    token through all layers, counting the residual path.

    attn_maps: per-block weights, each (B, h, N, N)  ->  (B, N, N).
    Per block: fuse the heads (mean or max), add the identity for the residual connection,
    renormalise rows to sum to 1; then multiply the blocks' matrices, last block on the left.
    Row 0 of the result, reshaped to the patch grid, is the class token's view of the image.
    """
    if head_fusion not in ("mean", "max"):
        raise ValueError(f"head_fusion must be 'mean' or 'max', got {head_fusion!r}")
    rollout = None
    for i, attn in enumerate(attn_maps):
        attn = np.asarray(attn)
        validation.check_ndim(attn.shape, 4, f"attn_maps[{i}]", "(B, h, N, N)")
        if attn.shape[-1] != attn.shape[-2] or (rollout is not None
                                                and rollout.shape[-1] != attn.shape[-1]):
            raise ValueError(f"attn_maps[{i}] must have shape (B, h, N, N) with the same N in "
                             f"every block, got shape {attn.shape}")
        a = attn.mean(axis=1) if head_fusion == "mean" else attn.max(axis=1)  # (B, N, N)
        a = a + np.eye(a.shape[-1], dtype=a.dtype)
        a = a / a.sum(axis=-1, keepdims=True)
        rollout = a if rollout is None else a @ rollout
    if rollout is None:
        raise ValueError("attn_maps is empty")
    return rollout


# --- talking-heads attention (CaiT's self-attention) ------------------------------------------


def mix_heads(attn: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """A Linear layer over the *head* axis: out[b, g] = Σ_h weight[g, h] · attn[b, h] + bias[g].

    attn: (B, h, N_q, N_k), weight: (h', h), bias: (h',)  ->  (B, h', N_q, N_k).
    Every (query, key) pair gets the same h×h map, so each new head is a learned mixture of the
    old ones.  Computed as one matmul, (h', h) @ (B, h, N_q·N_k), without moving the heads last.
    """
    attn, weight = np.asarray(attn), np.asarray(weight)
    validation.check_ndim(attn.shape, 4, "attn", "(B, h, N_q, N_k)")
    h = attn.shape[1]
    if weight.ndim != 2 or weight.shape[1] != h:
        raise ValueError(f"mix_heads: weight of shape {weight.shape} does not mix the {h} heads "
                         f"of attn (shape {attn.shape}); expected (h', {h})")
    return _mix_heads(attn, weight, bias)


def _mix_heads(attn, weight, bias=None):
    """:func:`mix_heads`' formula, unchecked."""
    B, h, nq, nk = attn.shape
    out = np.matmul(weight.astype(attn.dtype, copy=False), attn.reshape(B, h, nq * nk))
    if bias is not None:
        out += bias.astype(attn.dtype, copy=False)[:, None]
    return out.reshape(B, weight.shape[0], nq, nk)


def mix_heads_forward(attn: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None):
    """:func:`mix_heads` -> (out, cache)."""
    out = mix_heads(attn, weight, bias)
    return out, Cache("mix_heads", out, attn=attn, weight=weight, has_bias=bias is not None)


def mix_heads_backward(dout: np.ndarray, cache: Cache):
    """y[b, g] = Σ_h W[g, h] · a[b, h] + c[g], the same map at every (query, key) pair:

        ∂L/∂a[b, h] = Σ_g W[g, h] · dy[b, g],
        ∂L/∂W[g, h] = Σ_{b,i,j} dy[b, g, i, j] · a[b, h, i, j],   ∂L/∂c[g] = Σ_{b,i,j} dy[b, g, i, j]

    -> (dattn (B, h, N_q, N_k), dweight (h', h), dbias (h',) or None)."""
    dout = check_backward("mix_heads", dout, cache)
    a, w = cache.attn, cache.weight
    B, h, nq, nk = a.shape
    d3 = dout.reshape(B, w.shape[0], nq * nk)
    dattn = np.matmul(w.T.astype(a.dtype, copy=False), d3).reshape(a.shape)
    dweight = np.tensordot(d3, a.reshape(B, h, nq * nk), axes=([0, 2], [0, 2]))  # (h', h)
    dbias = d3.sum(axis=(0, 2)) if cache.has_bias else None
    return dattn, dweight, dbias


def talking_heads_attention(x: np.ndarray, qkv_weight: np.ndarray, qkv_bias: np.ndarray | None,
                            proj_l_weight: np.ndarray, proj_l_bias: np.ndarray,
                            proj_w_weight: np.ndarray, proj_w_bias: np.ndarray,
                            proj_weight: np.ndarray, proj_bias: np.ndarray, num_heads: int,
                            return_attention: bool = False):
    """Talking-heads attention (Shazeer et al., 2020, https://arxiv.org/abs/2003.02436), as in
    CaiT's self-attention blocks: the heads exchange information through two learned h×h maps,
    one on the scores before the softmax (``proj_l``) and one on the weights after it (``proj_w``).

        scores  = (q · d^-½) kᵀ                      (B, h, N, N)
        weights = mix_w(softmax(mix_l(scores)))       (B, h, N, N)
        out     = proj(merge_heads(weights @ v))      (B, N, C)

    x: (B, N, C), qkv_weight: (3C, C) with rows [q; k; v], proj_l/proj_w weights: (h, h)
    ->  (B, N, C), and the weights that multiply v (B, h, N, N) if ``return_attention``.
    After ``proj_w`` they are mixtures of softmax rows: they need not be positive, and a row
    sums to Σ_h proj_w[g, h] + proj_w_bias[g] rather than to 1.
    """
    x = np.asarray(x)
    validation.check_ndim(x.shape, 3, "x", "(B, N, C)")
    C = x.shape[-1]
    h = num_heads
    validation.head_dim(C, h)
    for name, w, shape in (("qkv_weight", qkv_weight, (3 * C, C)), ("proj_weight", proj_weight, (C, C)),
                           ("proj_l_weight", proj_l_weight, (h, h)),
                           ("proj_w_weight", proj_w_weight, (h, h))):
        if np.shape(w) != shape:
            raise ValueError(f"{name} must have shape {shape} for x with C = {C} in {h} heads, "
                             f"got shape {np.shape(w)}")
    out, attn = _talking_heads_attention(x, qkv_weight, qkv_bias, proj_l_weight, proj_l_bias,
                                         proj_w_weight, proj_w_bias, proj_weight, proj_bias, h)
    return (out, attn) if return_attention else out


def _talking_heads_attention(x, qkv_weight, qkv_bias, proj_l_weight, proj_l_bias, proj_w_weight,
                             proj_w_bias, proj_weight, proj_bias, num_heads: int):
    """:func:`talking_heads_attention`'s formula, unchecked: -> (out, the mixed weights)."""
    qkv = _linear(x, qkv_weight, qkv_bias)  # (B, N, 3C)
    q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=num_heads)
    scores = (q * np.asarray(q.shape[-1] ** -0.5, dtype=q.dtype)) @ np.swapaxes(k, -1, -2)
    scores = _mix_heads(scores, proj_l_weight, proj_l_bias)  # talk before the softmax
    attn = _mix_heads(_softmax(scores, axis=-1, out=scores), proj_w_weight, proj_w_bias)  # after
    return _linear(_merge_heads(attn @ v), proj_weight, proj_bias), attn  # (B, N, C)


def talking_heads_attention_forward(x: np.ndarray, qkv_weight: np.ndarray,
                                    qkv_bias: np.ndarray | None, proj_l_weight: np.ndarray,
                                    proj_l_bias: np.ndarray, proj_w_weight: np.ndarray,
                                    proj_w_bias: np.ndarray, proj_weight: np.ndarray,
                                    proj_bias: np.ndarray, num_heads: int):
    """:func:`talking_heads_attention` -> (out, cache), through the parts' ``_forward``s;
    ``cache.mix_w`` holds the mixed weights that multiply v."""
    qkv, c_qkv = linear_forward(x, qkv_weight, qkv_bias)  # (B, N, 3C)
    q, k, v = rearrange(qkv, "b n (three h d) -> three b h n d", three=3, h=num_heads)
    s = np.asarray(q.shape[-1] ** -0.5, dtype=q.dtype)
    scores = (q * s) @ np.swapaxes(k, -1, -2)  # (B, h, N, N)
    mixed, c_l = mix_heads_forward(scores, proj_l_weight, proj_l_bias)  # talk before the softmax
    p, c_soft = softmax_forward(mixed, axis=-1)
    attn, c_w = mix_heads_forward(p, proj_w_weight, proj_w_bias)  # and after
    out, c_proj = linear_forward(_merge_heads(attn @ v), proj_weight, proj_bias)  # (B, N, C)
    return out, Cache("talking_heads_attention", out, qkv=c_qkv, q=q, k=k, v=v, scale=s,
                      mix_l=c_l, softmax=c_soft, mix_w=c_w, attn=attn, proj=c_proj,
                      num_heads=num_heads)


def talking_heads_attention_backward(dout: np.ndarray, cache: Cache):
    """Back through proj, O = A v (∂L/∂A = dO vᵀ, ∂L/∂v = Aᵀ dO), the mix after the softmax,
    the softmax, the mix before it, and the scores S = s·q kᵀ (∂L/∂q = s·dS k, ∂L/∂k = s·dSᵀ q).
    -> (dx, dqkv_weight, dqkv_bias, dproj_l_weight, dproj_l_bias, dproj_w_weight, dproj_w_bias,
    dproj_weight, dproj_bias)."""
    dout = check_backward("talking_heads_attention", dout, cache)
    q, k, v, attn, s = cache.q, cache.k, cache.v, cache.attn, cache.scale
    dmerged, dproj_w, dproj_b = linear_backward(dout, cache.proj)
    do = _split_heads(dmerged, cache.num_heads)  # (B, h, N, d)
    dv = np.swapaxes(attn, -1, -2) @ do
    dattn = do @ np.swapaxes(v, -1, -2)  # (B, h, N, N)
    dp, dw_w, dw_b = mix_heads_backward(dattn, cache.mix_w)
    dmixed = softmax_backward(dp, cache.softmax)
    dscores, dl_w, dl_b = mix_heads_backward(dmixed, cache.mix_l)
    dscores *= s
    dq, dk = dscores @ k, np.swapaxes(dscores, -1, -2) @ q
    dx, dqkv_w, dqkv_b = linear_backward(_heads_to_qkv(dq, dk, dv), cache.qkv)
    return dx, dqkv_w, dqkv_b, dl_w, dl_b, dw_w, dw_b, dproj_w, dproj_b
