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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from einops import rearrange

from .. import validation
from .conv_position_encoding import crpe_conv
from .layers import linear, softmax


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


def split_qkv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None):
    """x (B, N, C) -> q, k, v, each (B, N, C): column views of one (B, N, 3C) projection whose
    output channels are [q; k; v], each head-major (timm's layout)."""
    C = x.shape[-1]
    qkv = linear(x, weight, bias)  # (B, N, 3C)
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
    B, N, C = q.shape
    H, W = validation.to_2tuple(size, "size")
    d = validation.head_dim(C, num_heads)
    if N != 1 + H * W or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k, v must have shape (B, 1 + H·W, C) = (B, {1 + H * W}, {C}) for "
                         f"size {(H, W)}, got {q.shape}, {k.shape}, {v.shape}")
    scale = np.asarray(d ** -0.5, dtype=q.dtype)
    ks = key_softmax(k, axis=1)  # (B, N, C): per channel, a distribution over the tokens
    summary = head_summaries(ks, v, num_heads) * scale  # (B, h, d, d)
    q_h = q.reshape(B, N, num_heads, d)  # a view
    out = np.einsum("bnhd,bhde->bnhe", q_h, summary, optimize=True).reshape(B, N, C)
    conv_v = crpe_conv(v[:, 1:].reshape(B, H, W, C), crpe_weights, crpe_biases, d)
    out[:, 1:] += q[:, 1:] * conv_v.reshape(B, H * W, C)  # EV; the class token's row is zero
    if records is not None:
        records.append(FactorizedAttentionRecord(
            key_softmax=rearrange(ks, "b n (h d) -> b h n d", h=num_heads),
            class_query=rearrange(q_h[:, :1], "b one h d -> b h one d") * scale, size=(H, W)))
    return out


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
    q, k, v = split_qkv(x, p["qkv.weight"], p.get("qkv.bias"))
    weights, biases = crpe_params(p)
    out = conv_attend(q, k, v, size, num_heads, weights, biases, records)
    return linear(out, p["proj.weight"], p["proj.bias"])
