"""LayerScale and the residual forms it is compared with, in NumPy.

A residual block adds a branch f (attention or MLP) to its input.  The forms CaiT compares
(Touvron et al., "Going deeper with Image Transformers", Fig. 1, https://arxiv.org/abs/2103.17239):

    "prenorm"         x + f(LN(x))                   ViT, DeiT
    "rezero"          x + α · f(x),   α = 0 at init   ReZero (Bachlechner et al., 2020,
                                                      https://arxiv.org/abs/2003.04887) and
                                                      SkipInit (De & Smith, 2020,
                                                      https://arxiv.org/abs/2002.10444): one
                                                      learned scalar, no normalisation
    "prenorm_scalar"  x + α · f(LN(x)), α = 0 at init the scalar with the norm put back
    "layerscale"      x + diag(λ) · f(LN(x)), λ = ε   CaiT: one learned scale per channel,
                                                      ε small (``layerscale_init_value``)

Parameters are keyed like timm's ViT blocks (``norm1``, ``attn.qkv``, ``ls1.gamma``, ...);
CaiT's own blocks name their LayerScale vectors ``gamma_1`` and ``gamma_2``
(:func:`layerscale_block`).

Each function is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); a public
function checks its arguments and calls its unchecked core ``_f``, which the CaiT model calls.
"""
from __future__ import annotations

import numpy as np

from .. import validation
# the residual forms and the depth rule live in the (torch-free) spec; re-exported here
from ..specs.cait import RESIDUAL_FORMS, check_residual, layerscale_init_value  # noqa: F401
from .attention import (_multi_head_attention, _talking_heads_attention, multi_head_attention,
                        multi_head_attention_backward, multi_head_attention_forward,
                        talking_heads_attention_backward, talking_heads_attention_forward)
from .backprop import Cache, check_backward
from .layers import (_layer_norm, _mlp, drop_path_backward, drop_path_forward, layer_norm,
                     layer_norm_backward, layer_norm_forward, mlp, mlp_backward, mlp_forward,
                     mlp_grads, mlp_params)


def layer_scale(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """diag(γ) applied to every token: x (..., C), gamma (C,) -> (..., C).  (A diagonal
    matrix times a vector is an elementwise product; nobody builds the C×C matrix.)"""
    return x * gamma.astype(x.dtype, copy=False)


def layer_scale_forward(x: np.ndarray, gamma: np.ndarray):
    """:func:`layer_scale` -> (out, cache)."""
    out = layer_scale(x, gamma)
    return out, Cache("layer_scale", out, x=x, gamma=gamma)


def layer_scale_backward(dout: np.ndarray, cache: Cache):
    """y = x ⊙ γ (γ per channel, the same at every token)  ⇒

        ∂L/∂x = dy ⊙ γ,   ∂L/∂γ = Σ dy ⊙ x   (the sum over every token of every image)

    -> (dx, dgamma (C,))."""
    dout = check_backward("layer_scale", dout, cache)
    x, gamma = cache.x, cache.gamma
    dx = dout * gamma.astype(dout.dtype, copy=False)
    C = x.shape[-1]
    dgamma = np.einsum("mc,mc->c", dout.reshape(-1, C), x.reshape(-1, C))
    return dx, dgamma


def scalar_gate(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """α·x with one learned scalar for the whole branch: x (..., C), alpha (1,) -> (..., C)."""
    return x * alpha.astype(x.dtype, copy=False)


def _scale(x: np.ndarray, p: dict, prefix: str, kind: str | None) -> np.ndarray:
    if kind is None:
        return x
    if kind == "scalar":
        return scalar_gate(x, p[f"{prefix}.alpha"])
    return layer_scale(x, p[f"{prefix}.gamma"])


def residual_block(x: np.ndarray, p: dict, num_heads: int, residual: str = "layerscale",
                   return_attention: bool = False):
    """One transformer block (multi-head self-attention, then MLP) with a residual form of
    :data:`RESIDUAL_FORMS`.

    x: (B, N, C); p: the block's parameters (``norm1.*`` unless "rezero", ``attn.qkv.*``,
    ``attn.proj.*``, ``ls1.gamma`` or ``ls1.alpha``, ``norm2.*``, ``mlp.*``, ``ls2.*``)
    ->  (B, N, C), and the attention weights (B, h, N, N) if ``return_attention``.
    """
    norm, kind = check_residual(residual)
    h1 = layer_norm(x, p["norm1.weight"], p["norm1.bias"]) if norm else x
    h, attn = multi_head_attention(h1, p["attn.qkv.weight"], p.get("attn.qkv.bias"),
                                   p["attn.proj.weight"], p["attn.proj.bias"], num_heads,
                                   return_attention=True)
    x = x + _scale(h, p, "ls1", kind)
    h2 = layer_norm(x, p["norm2.weight"], p["norm2.bias"]) if norm else x
    h = mlp(h2, *mlp_params(p))
    x = x + _scale(h, p, "ls2", kind)
    return (x, attn) if return_attention else x


def layerscale_block(x: np.ndarray, p: dict, num_heads: int, talking_heads: bool = True,
                     return_attention: bool = False):
    """CaiT's self-attention block: pre-norm, LayerScale on both branches.

        x = x + diag(γ₁) · attn(norm1(x))
        x = x + diag(γ₂) · mlp(norm2(x))

    x: (B, N, C); p: keys ``gamma_1``, ``gamma_2``, ``norm1.*``, ``attn.qkv.*``, ``attn.proj.*``
    (with ``talking_heads``: ``attn.proj_l.*``, ``attn.proj_w.*``), ``norm2.*``, ``mlp.*``
    ->  (B, N, C), and the attention weights (B, h, N, N) if ``return_attention``.
    """
    x = np.asarray(x)
    validation.check_tokens(x.shape, np.shape(p["norm1.weight"])[0], "x")
    validation.head_dim(x.shape[-1], num_heads)
    x, attn = _layerscale_block(x, p, num_heads, validation.check_bool(talking_heads,
                                                                        "talking_heads"))
    return (x, attn) if return_attention else x


def _attention_params(p: dict, talking_heads: bool) -> list:
    """A block's attention arrays, in the argument order of ``talking_heads_attention`` (or of
    ``multi_head_attention`` without talking heads)."""
    heads = ["attn.proj_l.weight", "attn.proj_l.bias", "attn.proj_w.weight", "attn.proj_w.bias"]
    return [p["attn.qkv.weight"], p.get("attn.qkv.bias"), *(p[k] for k in heads if talking_heads),
            p["attn.proj.weight"], p["attn.proj.bias"]]


def _layerscale_block(x, p: dict, num_heads: int, talking_heads: bool = True):
    """:func:`layerscale_block`'s formula, unchecked: -> (out, the attention weights)."""
    attention = _talking_heads_attention if talking_heads else _multi_head_attention
    h, attn = attention(_layer_norm(x, p["norm1.weight"], p["norm1.bias"]),
                        *_attention_params(p, talking_heads), num_heads)
    x = x + layer_scale(h, p["gamma_1"])
    h = _mlp(_layer_norm(x, p["norm2.weight"], p["norm2.bias"]), *mlp_params(p))
    return x + layer_scale(h, p["gamma_2"]), attn


def layerscale_block_forward(x: np.ndarray, p: dict, num_heads: int, talking_heads: bool = True,
                             drop_path_masks=None):
    """:func:`layerscale_block` -> (out, cache).  ``drop_path_masks``: None, or the (B,)
    factors of ``layers.drop_path_mask`` for the attention and the MLP branch."""
    m1, m2 = drop_path_masks or (None, None)
    h, c_n1 = layer_norm_forward(x, p["norm1.weight"], p["norm1.bias"])
    attention = talking_heads_attention_forward if talking_heads else multi_head_attention_forward
    h, c_att = attention(h, *_attention_params(p, talking_heads), num_heads)
    h, c_ls1 = layer_scale_forward(h, p["gamma_1"])
    h, c_dp1 = drop_path_forward(h, m1)
    x = x + h
    h, c_n2 = layer_norm_forward(x, p["norm2.weight"], p["norm2.bias"])
    h, c_mlp = mlp_forward(h, *mlp_params(p))
    h, c_ls2 = layer_scale_forward(h, p["gamma_2"])
    h, c_dp2 = drop_path_forward(h, m2)
    out = x + h
    return out, Cache("layerscale_block", out, norm1=c_n1, attn=c_att, ls1=c_ls1, drop_path1=c_dp1,
                      norm2=c_n2, mlp=c_mlp, ls2=c_ls2, drop_path2=c_dp2,
                      talking_heads=talking_heads, has_qkv_bias="attn.qkv.bias" in p)


def layerscale_block_backward(dout: np.ndarray, cache: Cache):
    """x₁ = x + γ₁ ⊙ attn(norm1(x)), y = x₁ + γ₂ ⊙ mlp(norm2(x₁)): the residuals pass the
    gradient through, each branch adds its own (LayerScale's backward, then the branch's).
    -> (dx, {key: gradient}) with p's keys."""
    dout = check_backward("layerscale_block", dout, cache)
    g = {}
    dh = drop_path_backward(dout, cache.drop_path2)
    dh, g["gamma_2"] = layer_scale_backward(dh, cache.ls2)
    dh, *d_mlp = mlp_backward(dh, cache.mlp)
    g.update(mlp_grads(d_mlp))
    dx1, g["norm2.weight"], g["norm2.bias"] = layer_norm_backward(dh, cache.norm2)
    dx1 += dout
    dh = drop_path_backward(dx1, cache.drop_path1)
    dh, g["gamma_1"] = layer_scale_backward(dh, cache.ls1)
    if cache.talking_heads:
        (dh, g["attn.qkv.weight"], dqkv_b, g["attn.proj_l.weight"], g["attn.proj_l.bias"],
         g["attn.proj_w.weight"], g["attn.proj_w.bias"], g["attn.proj.weight"],
         g["attn.proj.bias"]) = talking_heads_attention_backward(dh, cache.attn)
    else:
        (dh, g["attn.qkv.weight"], dqkv_b, g["attn.proj.weight"],
         g["attn.proj.bias"]) = multi_head_attention_backward(dh, cache.attn)
    if cache.has_qkv_bias:
        g["attn.qkv.bias"] = dqkv_b
    dx, g["norm1.weight"], g["norm1.bias"] = layer_norm_backward(dh, cache.norm1)
    dx += dx1
    return dx, g
