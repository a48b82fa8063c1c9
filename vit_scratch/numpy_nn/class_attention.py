"""Class attention in NumPy (CaiT: Touvron et al., "Going deeper with Image Transformers",
ICCV 2021, https://arxiv.org/abs/2103.17239).

In ViT the class token is one more token in every self-attention layer.  In CaiT it joins
late, and only reads: with z = [x_cls; x_patches],

    Q = W_q x_cls + b_q         (B, h, 1, d)     one query per head: the class token's
    K = W_k z + b_k             (B, h, 1 + N, d)
    V = W_v z + b_v             (B, h, 1 + N, d)
    A = softmax(Q Kᵀ / √d)      (B, h, 1, 1 + N) one row per head
    out = W_o (A V) + b_o       (B, 1, C)        a new class token; the patches stay as they are

One query instead of 1 + N makes the cost linear in the number of tokens, O(N·C), where
self-attention's scores cost O(N²·C).  ``class_token_in_keys=False`` is the paper's ablation
z = x_patches: the class token then attends to the patches only (and, having no key, gives no
value either); the weights are (B, h, 1, N).
"""
from __future__ import annotations

import numpy as np

from .. import validation
from .attention import merge_heads, scaled_dot_product_attention, split_heads
from .layers import layer_norm, linear, mlp
from .layerscale import layer_scale


def class_attention(u: np.ndarray, q_weight: np.ndarray, q_bias: np.ndarray | None,
                    k_weight: np.ndarray, k_bias: np.ndarray | None, v_weight: np.ndarray,
                    v_bias: np.ndarray | None, proj_weight: np.ndarray, proj_bias: np.ndarray,
                    num_heads: int, class_token_in_keys: bool = True,
                    return_attention: bool = False):
    """Multi-head class attention.

    u: (B, 1 + N, C), the class token first (CaiT passes norm1([cls; patches]));
    q/k/v/proj weights: (C, C) in PyTorch's (out, in) layout
    ->  (B, 1, C), and the weights (B, h, 1, 1 + N) -- (B, h, 1, N) without the class token in
    the keys -- if ``return_attention``.
    """
    if u.ndim != 3 or u.shape[1] < 2:
        raise ValueError(f"u must have shape (B, 1 + N, C) with the class token first and N >= 1 "
                         f"patch tokens, got shape {u.shape}")
    validation.head_dim(u.shape[-1], num_heads)
    z = u if class_token_in_keys else u[:, 1:]  # what the class token may look at
    q = split_heads(linear(u[:, :1], q_weight, q_bias), num_heads)  # (B, h, 1, d)
    k = split_heads(linear(z, k_weight, k_bias), num_heads)  # (B, h, M, d), M = 1 + N or N
    v = split_heads(linear(z, v_weight, v_bias), num_heads)  # (B, h, M, d)
    out, attn = scaled_dot_product_attention(q, k, v, return_attention=True)  # (B, h, 1, d)
    out = linear(merge_heads(out), proj_weight, proj_bias)  # (B, 1, C)
    return (out, attn) if return_attention else out


def class_attention_block(x: np.ndarray, cls: np.ndarray, p: dict, num_heads: int,
                          class_token_in_keys: bool = True, return_attention: bool = False):
    """CaiT's class-attention block: the class token reads the (frozen) patch tokens.

        u   = [cls; x]
        cls = cls + diag(γ₁) · CA(norm1(u))
        cls = cls + diag(γ₂) · mlp(norm2(cls))

    x: (B, N, C) patch tokens, cls: (B, 1, C); p: keys ``gamma_1``, ``gamma_2``, ``norm1.*``,
    ``attn.q.*``, ``attn.k.*``, ``attn.v.*``, ``attn.proj.*``, ``norm2.*``, ``mlp.*``
    ->  the new class token (B, 1, C) (and the weights if ``return_attention``).
    """
    validation.check_class_token(cls.shape, x.shape)
    u = np.concatenate([cls.astype(x.dtype, copy=False), x], axis=1)  # (B, 1 + N, C)
    h, attn = class_attention(
        layer_norm(u, p["norm1.weight"], p["norm1.bias"]),
        p["attn.q.weight"], p.get("attn.q.bias"), p["attn.k.weight"], p.get("attn.k.bias"),
        p["attn.v.weight"], p.get("attn.v.bias"), p["attn.proj.weight"], p["attn.proj.bias"],
        num_heads, class_token_in_keys=class_token_in_keys, return_attention=True)
    cls = u[:, :1] + layer_scale(h, p["gamma_1"])
    cls = cls + layer_scale(mlp(layer_norm(cls, p["norm2.weight"], p["norm2.bias"]),
                                p["mlp.fc1.weight"], p["mlp.fc1.bias"], p["mlp.fc2.weight"],
                                p["mlp.fc2.bias"]), p["gamma_2"])
    return (cls, attn) if return_attention else cls
