"""Factorized attention and CoaT's conv-attention in NumPy.

Paper: Co-Scale Conv-Attentional Image Transformers -- Xu, Xu, Chang, Tu, ICCV 2021,
https://arxiv.org/abs/2104.06399 (Section 3).

Softmax attention, softmax(Q Kᵀ / √d) V, builds an N×N matrix: O(N²·d) time and O(N²) memory.
Factorized attention moves the softmax onto K alone, *over the tokens*, for each channel:

    FactorAtt(Q, K, V) = (1/√d) · Q (softmax(K)ᵀ V)          softmax(K): (N, d), columns sum to 1

``softmax(K)ᵀ V`` is a d×d summary of the whole sequence (each of the d key channels is a
distribution over the N tokens, pooling the values), so the cost is O(N·d²) per head,
O(N·C²/h) for C channels in h heads: linear in N, where softmax attention is quadratic.  By
associativity it equals ``(Q softmax(K)ᵀ) V``, an attention with the N×N weights
``Q softmax(K)ᵀ / √d`` that is never formed; unlike softmax attention these weights are not
normalised and may be negative.

CoaT's conv-attention (timm: ``FactorAttnConvRelPosEnc``) adds the convolutional relative
position encoding (``conv_position_encoding.conv_rel_pos_enc``); the scale multiplies the
factorized term only::

    out = proj( merge_heads( FactorAtt(Q, K, V) + [0; Q_img ⊙ conv(V_img)] ) )

The model calls the token-layout functions (:func:`split_qkv`, :func:`conv_attend`): queries,
keys and values stay (B, N, C) views of one ``qkv`` array, heads are formed only for the small
d×d summaries.

Each function is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); a public
function checks its arguments and calls its unchecked core ``_f``, which the CoaT model calls.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from einops import rearrange

from .. import validation
from .backprop import Cache, check_backward
from .conv_position_encoding import _crpe_conv, crpe_conv_backward, crpe_conv_forward
from .layers import (_linear, _softmax, linear_backward, linear_forward, softmax,
                     softmax_backward, softmax_forward)


def key_softmax(k: np.ndarray, axis: int = -2) -> np.ndarray:
    """softmax of the keys over the *token* axis (default -2 of (..., N, d)): every key
    channel becomes a distribution over the tokens."""
    return softmax(k, axis=axis)


def factorized_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                         scale: float | None = None) -> np.ndarray:
    """scale · q (softmax(k)ᵀ v), the softmax over k's tokens, for any leading axes.

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v); scale
    defaults to d^-½.  Costs O(N·d²); never builds the N_q×N_k weights.
    """
    if k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"factorized attention needs q (..., N_q, d), k (..., N_k, d) and "
                         f"v (..., N_k, d_v), got {q.shape}, {k.shape}, {v.shape}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    summary = np.swapaxes(key_softmax(k), -1, -2) @ v  # (..., d, d_v)
    return (q @ summary) * np.asarray(scale, dtype=summary.dtype)


def factorized_attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                 scale: float | None = None):
    """:func:`factorized_attention` -> (out, cache), through ``softmax_forward``."""
    if k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"factorized attention needs q (..., N_q, d), k (..., N_k, d) and "
                         f"v (..., N_k, d_v), got {q.shape}, {k.shape}, {v.shape}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    ks, c_soft = softmax_forward(k, axis=-2)  # key_softmax: over the tokens
    summary = np.swapaxes(ks, -1, -2) @ v  # (..., d, d_v)
    out = (q @ summary) * np.asarray(scale, dtype=summary.dtype)
    return out, Cache("factorized_attention", out, q=q, v=v, ks=ks, softmax=c_soft,
                      summary=summary, scale=scale)


def factorized_attention_backward(dout: np.ndarray, cache: Cache):
    """With K̃ = softmax(k) over the tokens (each channel a distribution), G = K̃ᵀ v (d×d_v)
    and O = s · q G:

        ∂L/∂q = s · dO Gᵀ,   ∂L/∂G = s · qᵀ dO,
        ∂L/∂v = K̃ ∂L/∂G,    ∂L/∂K̃ = v (∂L/∂G)ᵀ,
        ∂L/∂k = K̃ ⊙ (∂L/∂K̃ - Σ_n ∂L/∂K̃ ⊙ K̃)   (softmax's backward, the sum over the tokens)

    No N×N matrix appears: O(N·d²), like the forward.  -> (dq, dk, dv)."""
    dout = check_backward("factorized_attention", dout, cache)
    q, v, ks, G = cache.q, cache.v, cache.ks, cache.summary
    s = np.asarray(cache.scale, dtype=dout.dtype)
    dq = (dout @ np.swapaxes(G, -1, -2)) * s
    dG = (np.swapaxes(q, -1, -2) @ dout) * s  # (..., d, d_v)
    dv = ks @ dG
    dk = softmax_backward(v @ np.swapaxes(dG, -1, -2), cache.softmax)
    return dq, dk, dv


def split_qkv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None):
    """x (B, N, C) -> q, k, v, each (B, N, C): column views of one (B, N, 3C) projection whose
    output channels are [q; k; v], each head-major (timm's layout).  Unchecked: the
    conv-attention's step (:func:`conv_attention` checks ``x``)."""
    C = x.shape[-1]
    qkv = _linear(x, weight, bias)  # (B, N, 3C)
    return qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:]


@dataclass
class FactorizedAttentionRecord:
    """What one factorized-attention layer computed, for drawing (``get_attention_maps``):

    key_softmax: (B, h, N, d), softmax(K) over the tokens (each column sums to 1)
    class_query: (B, h, 1, d), the class token's query times d^-½
    size:        (H, W), the grid of the N - 1 image tokens
    """

    key_softmax: np.ndarray
    class_query: np.ndarray
    size: tuple[int, int]


def head_summaries(ks: np.ndarray, v: np.ndarray, num_heads: int) -> np.ndarray:
    """softmax(K)ᵀ V per head: ks, v (B, N, h·d) token layout  ->  (B, h, d, d)."""
    B, N, C = ks.shape
    d = C // num_heads
    return np.einsum("bnhd,bnhe->bhde", ks.reshape(B, N, num_heads, d),
                     v.reshape(B, N, num_heads, d), optimize=True)


def _check_attend_input(q, k, v, size, num_heads: int) -> tuple[int, int, int]:
    """q, k, v (B, 1 + H·W, C) that fit ``size`` and split into ``num_heads``; returns
    (H, W, head dim)."""
    C = q.shape[-1]
    H, W = validation.to_2tuple(size, "size")
    d = validation.head_dim(C, num_heads)
    if q.shape[1] != 1 + H * W or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have shape (B, 1 + H·W, C) = (B, {1 + H * W}, {C}) for "
                         f"size {(H, W)}, got {q.shape}, {k.shape}, {v.shape}")
    return H, W, d


def conv_attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, size, num_heads: int,
                crpe_weights, crpe_biases, records: list | None = None) -> np.ndarray:
    """The conv-attention before its output projection, in token layout (heads merged):

        d^-½ · Q (softmax(K)ᵀ V)  per head   +   [0; Q_img ⊙ conv(V_img)]

    q, k, v: (B, 1 + H·W, C) (the class token first; k and v already on q's grid);
    size: (H, W); crpe_weights/biases: the head groups' depthwise convs  ->  (B, 1 + H·W, C).
    ``records``: if a list, a :class:`FactorizedAttentionRecord` is appended to it.
    The heads are never split into a (B, h, N, d) copy: ``einsum`` reads them as a reshape
    view of the channels and only the (B, h, d, d) summaries are per-head arrays.
    """
    H, W, _ = _check_attend_input(q, k, v, size, num_heads)
    return _conv_attend(q, k, v, (H, W), num_heads, crpe_weights, crpe_biases, records)


def _conv_attend(q, k, v, size, num_heads: int, crpe_weights, crpe_biases, records=None):
    """:func:`conv_attend`'s formula, unchecked (``size`` a pair)."""
    B, N, C = q.shape
    (H, W), d = size, C // num_heads
    scale = np.asarray(d ** -0.5, dtype=q.dtype)
    ks = _softmax(k, axis=1)  # key_softmax: per channel, a distribution over the tokens
    summary = head_summaries(ks, v, num_heads) * scale  # (B, h, d, d)
    q_h = q.reshape(B, N, num_heads, d)  # a view
    out = np.einsum("bnhd,bhde->bnhe", q_h, summary, optimize=True).reshape(B, N, C)
    conv_v = _crpe_conv(v[:, 1:].reshape(B, H, W, C), crpe_weights, crpe_biases, d)
    out[:, 1:] += q[:, 1:] * conv_v.reshape(B, H * W, C)  # EV; the class token's row is zero
    if records is not None:
        records.append(FactorizedAttentionRecord(
            key_softmax=rearrange(ks, "b n (h d) -> b h n d", h=num_heads),
            class_query=rearrange(q_h[:, :1], "b one h d -> b h one d") * scale, size=(H, W)))
    return out


def conv_attend_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, size, num_heads: int,
                        crpe_weights, crpe_biases):
    """:func:`conv_attend` -> (out, cache), through ``softmax_forward`` and
    ``crpe_conv_forward``."""
    B, N, C = q.shape
    H, W, d = _check_attend_input(q, k, v, size, num_heads)
    scale = np.asarray(d ** -0.5, dtype=q.dtype)
    ks, c_soft = softmax_forward(k, axis=1)  # key_softmax over the tokens
    summary = head_summaries(ks, v, num_heads) * scale  # (B, h, d, d)
    q_h = q.reshape(B, N, num_heads, d)
    out = np.einsum("bnhd,bhde->bnhe", q_h, summary, optimize=True).reshape(B, N, C)
    conv_v, c_conv = crpe_conv_forward(v[:, 1:].reshape(B, H, W, C), crpe_weights, crpe_biases, d)
    conv_v = conv_v.reshape(B, H * W, C)
    out[:, 1:] += q[:, 1:] * conv_v  # EV; the class token's row is zero
    return out, Cache("conv_attend", out, q=q, v=v, ks=ks, softmax=c_soft, summary=summary,
                      scale=scale, conv_v=conv_v, conv=c_conv, num_heads=num_heads)


def conv_attend_backward(dout: np.ndarray, cache: Cache):
    """out = d^-½ · Q (K̃ᵀ V) per head + [0; Q_img ⊙ conv(V_img)]: the two terms' gradients
    add up (:func:`factorized_attention_backward` and ``conv_rel_pos_enc_backward`` state
    them), computed in token layout with the heads as a reshape view of the channels.
    -> (dq, dk, dv (B, 1 + H·W, C), [dweight per CRPE group], [dbias per CRPE group])."""
    dout = check_backward("conv_attend", dout, cache)
    q, v, ks, S, h = cache.q, cache.v, cache.ks, cache.summary, cache.num_heads
    B, N, C = q.shape
    d = C // h
    dout_h = dout.reshape(B, N, h, d)
    # the factorized term, S = s · K̃ᵀ V per head
    dq = np.einsum("bnhe,bhde->bnhd", dout_h, S, optimize=True).reshape(B, N, C)
    dG = np.einsum("bnhd,bnhe->bhde", q.reshape(B, N, h, d), dout_h, optimize=True) * cache.scale
    dks = np.einsum("bnhe,bhde->bnhd", v.reshape(B, N, h, d), dG, optimize=True).reshape(B, N, C)
    dv = np.einsum("bnhd,bhde->bnhe", ks.reshape(B, N, h, d), dG, optimize=True).reshape(B, N, C)
    dk = softmax_backward(dks, cache.softmax)
    # the CRPE term, [0; Q_img ⊙ conv(V_img)]
    dq[:, 1:] += dout[:, 1:] * cache.conv_v
    dconv = (dout[:, 1:] * q[:, 1:]).reshape(cache.conv.v_img.shape)
    dv_img, dweights, dbiases = crpe_conv_backward(dconv, cache.conv)
    dv[:, 1:] += dv_img.reshape(B, N - 1, C)
    return dq, dk, dv, dweights, dbiases


def crpe_params(p: dict, prefix: str = "crpe."):
    """The CRPE convs' weights and biases from a conv-attention's params, in order."""
    n = sum(1 for key in p if key.startswith(prefix + "conv_list.") and key.endswith(".weight"))
    return ([p[f"{prefix}conv_list.{i}.weight"] for i in range(n)],
            [p[f"{prefix}conv_list.{i}.bias"] for i in range(n)])


def conv_attention(x: np.ndarray, p: dict, num_heads: int, size,
                   records: list | None = None) -> np.ndarray:
    """CoaT's conv-attention (timm's ``FactorAttnConvRelPosEnc``).

    x: (B, 1 + H·W, C) normalised tokens; p: its params with keys relative to the module
    (``qkv.weight`` (3C, C), ``qkv.bias``, ``proj.weight``, ``proj.bias``,
    ``crpe.conv_list.i.weight``/``bias``); size: (H, W)  ->  (B, 1 + H·W, C)
    """
    x = np.asarray(x)
    H, W = validation.check_token_grid(x.shape, size, "x", np.shape(p["qkv.weight"])[1])
    validation.head_dim(x.shape[-1], num_heads)
    return _conv_attention(x, p, num_heads, (H, W), records)


def _conv_attention(x, p: dict, num_heads: int, size, records=None):
    """:func:`conv_attention`'s formula, unchecked (``size`` a pair)."""
    q, k, v = split_qkv(x, p["qkv.weight"], p.get("qkv.bias"))
    weights, biases = crpe_params(p)
    out = _conv_attend(q, k, v, size, num_heads, weights, biases, records)
    return _linear(out, p["proj.weight"], p["proj.bias"])


def conv_attention_forward(x: np.ndarray, p: dict, num_heads: int, size):
    """:func:`conv_attention` -> (out, cache), through the parts' ``_forward``s."""
    C = x.shape[-1]
    qkv, c_qkv = linear_forward(x, p["qkv.weight"], p.get("qkv.bias"))  # (B, N, 3C)
    weights, biases = crpe_params(p)
    out, c_att = conv_attend_forward(qkv[..., :C], qkv[..., C:2 * C], qkv[..., 2 * C:], size,
                                     num_heads, weights, biases)
    out, c_proj = linear_forward(out, p["proj.weight"], p["proj.bias"])
    return out, Cache("conv_attention", out, qkv=c_qkv, attend=c_att, proj=c_proj,
                      num_crpe=len(weights), has_qkv_bias="qkv.bias" in p)


def conv_attention_backward(dout: np.ndarray, cache: Cache):
    """Back through proj, the conv-attention (:func:`conv_attend_backward`) and the fused qkv
    projection, whose gradient is [∂L/∂q, ∂L/∂k, ∂L/∂v] side by side.
    -> (dx, {key: gradient}) with the keys of p."""
    dout = check_backward("conv_attention", dout, cache)
    g = {}
    dh, g["proj.weight"], g["proj.bias"] = linear_backward(dout, cache.proj)
    dq, dk, dv, dws, dbs = conv_attend_backward(dh, cache.attend)
    dx, g["qkv.weight"], dqkv_b = linear_backward(np.concatenate([dq, dk, dv], axis=-1), cache.qkv)
    if cache.has_qkv_bias:
        g["qkv.bias"] = dqkv_b
    for i, (dw, db) in enumerate(zip(dws, dbs)):
        g[f"crpe.conv_list.{i}.weight"] = dw
        g[f"crpe.conv_list.{i}.bias"] = db
    return dx, g
