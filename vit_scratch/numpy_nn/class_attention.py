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

Each function is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); a public
function checks its arguments and calls its unchecked core ``_f``, which the model calls.
"""
from __future__ import annotations

import numpy as np

from .. import validation
from .attention import (_merge_heads, _scaled_dot_product_attention, _split_heads,
                        attention_backward, attention_forward)
from .backprop import Cache, check_backward
from .layers import (_layer_norm, _linear, _mlp, layer_norm_backward, layer_norm_forward,
                     linear_backward, linear_forward, mlp_backward, mlp_forward, mlp_grads,
                     mlp_params)
from .layerscale import layer_scale, layer_scale_backward, layer_scale_forward


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
    u = np.asarray(u)
    validation.check_tokens(u.shape, None, "u", min_tokens=2, layout=(
        "(B, 1 + N, C) with the class token first and N >= 1 patch tokens"))
    C = u.shape[-1]
    validation.head_dim(C, num_heads)
    validation.check_bool(class_token_in_keys, "class_token_in_keys")
    for name, w, shape in (("q_weight", q_weight, (C, C)), ("q_bias", q_bias, (C,)),
                           ("k_weight", k_weight, (C, C)), ("k_bias", k_bias, (C,)),
                           ("v_weight", v_weight, (C, C)), ("v_bias", v_bias, (C,)),
                           ("proj_weight", proj_weight, (C, C)), ("proj_bias", proj_bias, (C,))):
        if w is not None and np.shape(w) != shape:
            raise ValueError(f"{name} must have shape {shape} for u with C = {C}, got shape "
                             f"{np.shape(w)}")
    out, attn = _class_attention(u, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias,
                                 proj_weight, proj_bias, num_heads, class_token_in_keys)
    return (out, attn) if return_attention else out


def _class_attention(u, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, proj_weight,
                     proj_bias, num_heads: int, class_token_in_keys: bool = True):
    """:func:`class_attention`'s formula, unchecked: -> (out, the weights)."""
    z = u if class_token_in_keys else u[:, 1:]  # what the class token may look at
    q = _split_heads(_linear(u[:, :1], q_weight, q_bias), num_heads)  # (B, h, 1, d)
    k = _split_heads(_linear(z, k_weight, k_bias), num_heads)  # (B, h, M, d), M = 1 + N or N
    v = _split_heads(_linear(z, v_weight, v_bias), num_heads)  # (B, h, M, d)
    out, attn = _scaled_dot_product_attention(q, k, v)  # (B, h, 1, d), (B, h, 1, M)
    return _linear(_merge_heads(out), proj_weight, proj_bias), attn  # (B, 1, C)


def class_attention_forward(u: np.ndarray, q_weight: np.ndarray, q_bias: np.ndarray | None,
                            k_weight: np.ndarray, k_bias: np.ndarray | None, v_weight: np.ndarray,
                            v_bias: np.ndarray | None, proj_weight: np.ndarray,
                            proj_bias: np.ndarray, num_heads: int,
                            class_token_in_keys: bool = True):
    """:func:`class_attention` -> (out, cache), through the parts' ``_forward``s;
    ``cache.attention.attn`` holds the weights (B, h, 1, M)."""
    z = u if class_token_in_keys else u[:, 1:]  # what the class token may look at
    q, c_q = linear_forward(u[:, :1], q_weight, q_bias)  # (B, 1, C)
    k, c_k = linear_forward(z, k_weight, k_bias)  # (B, M, C)
    v, c_v = linear_forward(z, v_weight, v_bias)
    o, c_att = attention_forward(_split_heads(q, num_heads), _split_heads(k, num_heads),
                                 _split_heads(v, num_heads))  # (B, h, 1, d)
    out, c_proj = linear_forward(_merge_heads(o), proj_weight, proj_bias)  # (B, 1, C)
    return out, Cache("class_attention", out, q=c_q, k=c_k, v=c_v, attention=c_att, proj=c_proj,
                      num_heads=num_heads, class_token_in_keys=class_token_in_keys,
                      u_shape=u.shape)


def class_attention_backward(dout: np.ndarray, cache: Cache):
    """Attention with the one query of the class token (``attention_backward`` states the
    formulas), then the projections.  u feeds two paths, so its gradient is their sum:

        ∂L/∂u = [∂L/∂u₀ from the query; 0] + ∂L/∂z from the keys and values

    where z = u (class token in the keys) or z = u[:, 1:] (not: only the patches get the
    keys' and values' gradient).  -> (du (B, 1 + N, C), dq_weight, dq_bias, dk_weight, dk_bias,
    dv_weight, dv_bias, dproj_weight, dproj_bias)."""
    dout = check_backward("class_attention", dout, cache)
    h = cache.num_heads
    dmerged, dproj_w, dproj_b = linear_backward(dout, cache.proj)
    dq, dk, dv = attention_backward(_split_heads(dmerged, h), cache.attention)
    du = np.zeros(cache.u_shape, dtype=dout.dtype)
    dz = du if cache.class_token_in_keys else du[:, 1:]  # a view: writing it writes du
    dz_k, dk_w, dk_b = linear_backward(_merge_heads(dk), cache.k)
    dz_v, dv_w, dv_b = linear_backward(_merge_heads(dv), cache.v)
    dz += dz_k
    dz += dz_v
    du_q, dq_w, dq_b = linear_backward(_merge_heads(dq), cache.q)
    du[:, :1] += du_q
    return du, dq_w, dq_b, dk_w, dk_b, dv_w, dv_b, dproj_w, dproj_b


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
    x, cls = np.asarray(x), np.asarray(cls)
    validation.check_class_token(cls.shape, x.shape)
    validation.check_last_dim(x.shape, np.shape(p["norm1.weight"])[0], "x")
    validation.head_dim(x.shape[-1], num_heads)
    cls, attn = _class_attention_block(x, cls, p, num_heads, class_token_in_keys)
    return (cls, attn) if return_attention else cls


def _class_attention_block(x, cls, p: dict, num_heads: int, class_token_in_keys: bool = True):
    """:func:`class_attention_block`'s formula, unchecked: -> (the new class token, the
    weights)."""
    u = np.concatenate([cls.astype(x.dtype, copy=False), x], axis=1)  # (B, 1 + N, C)
    h, attn = _class_attention(
        _layer_norm(u, p["norm1.weight"], p["norm1.bias"]),
        p["attn.q.weight"], p.get("attn.q.bias"), p["attn.k.weight"], p.get("attn.k.bias"),
        p["attn.v.weight"], p.get("attn.v.bias"), p["attn.proj.weight"], p["attn.proj.bias"],
        num_heads, class_token_in_keys)
    cls = u[:, :1] + layer_scale(h, p["gamma_1"])
    h = _mlp(_layer_norm(cls, p["norm2.weight"], p["norm2.bias"]), *mlp_params(p))
    return cls + layer_scale(h, p["gamma_2"]), attn


def class_attention_block_forward(x: np.ndarray, cls: np.ndarray, p: dict, num_heads: int,
                                  class_token_in_keys: bool = True):
    """:func:`class_attention_block` -> (the new class token (B, 1, C), cache)."""
    u = np.concatenate([cls.astype(x.dtype, copy=False), x], axis=1)  # (B, 1 + N, C)
    h, c_n1 = layer_norm_forward(u, p["norm1.weight"], p["norm1.bias"])
    h, c_att = class_attention_forward(
        h, p["attn.q.weight"], p.get("attn.q.bias"), p["attn.k.weight"], p.get("attn.k.bias"),
        p["attn.v.weight"], p.get("attn.v.bias"), p["attn.proj.weight"], p["attn.proj.bias"],
        num_heads, class_token_in_keys=class_token_in_keys)
    h, c_ls1 = layer_scale_forward(h, p["gamma_1"])
    cls = u[:, :1] + h
    h, c_n2 = layer_norm_forward(cls, p["norm2.weight"], p["norm2.bias"])
    h, c_mlp = mlp_forward(h, *mlp_params(p))
    h, c_ls2 = layer_scale_forward(h, p["gamma_2"])
    out = cls + h
    return out, Cache("class_attention_block", out, norm1=c_n1, attn=c_att, ls1=c_ls1,
                      norm2=c_n2, mlp=c_mlp, ls2=c_ls2,
                      qkv_bias=[k for k in ("attn.q.bias", "attn.k.bias", "attn.v.bias") if k in p])


def class_attention_block_backward(dout: np.ndarray, cache: Cache):
    """u = [cls; x], cls₁ = cls + γ₁ ⊙ CA(norm1(u)), y = cls₁ + γ₂ ⊙ mlp(norm2(cls₁)).
    The patches x reach the output only through the keys and values, so ∂L/∂x is
    ∂L/∂u[:, 1:]; the class token gets ∂L/∂cls₁ (the residual) plus ∂L/∂u[:, :1].
    -> (dx (B, N, C), dcls (B, 1, C), {key: gradient} with p's keys)."""
    dout = check_backward("class_attention_block", dout, cache)
    g = {}
    dh, g["gamma_2"] = layer_scale_backward(dout, cache.ls2)
    dh, *d_mlp = mlp_backward(dh, cache.mlp)
    g.update(mlp_grads(d_mlp))
    dcls, g["norm2.weight"], g["norm2.bias"] = layer_norm_backward(dh, cache.norm2)
    dcls += dout
    dh, g["gamma_1"] = layer_scale_backward(dcls, cache.ls1)
    (dh, g["attn.q.weight"], dq_b, g["attn.k.weight"], dk_b, g["attn.v.weight"], dv_b,
     g["attn.proj.weight"], g["attn.proj.bias"]) = class_attention_backward(dh, cache.attn)
    for key, d in zip(("attn.q.bias", "attn.k.bias", "attn.v.bias"), (dq_b, dk_b, dv_b)):
        if key in cache.qkv_bias:
            g[key] = d
    du, g["norm1.weight"], g["norm1.bias"] = layer_norm_backward(dh, cache.norm1)
    du[:, :1] += dcls
    return du[:, 1:], du[:, :1], g
