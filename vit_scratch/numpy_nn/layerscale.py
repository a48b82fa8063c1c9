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
"""
from __future__ import annotations

import numpy as np

# the residual forms and the depth rule live in the (torch-free) spec; re-exported here
from ..specs.cait import RESIDUAL_FORMS, check_residual, layerscale_init_value  # noqa: F401
from .attention import multi_head_attention, talking_heads_attention
from .layers import layer_norm, mlp

def layer_scale(x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """diag(γ) applied to every token: x (..., C), gamma (C,) -> (..., C).  (A diagonal
    matrix times a vector is an elementwise product; nobody builds the C×C matrix.)"""
    return x * gamma.astype(x.dtype, copy=False)


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
    h = mlp(h2, p["mlp.fc1.weight"], p["mlp.fc1.bias"], p["mlp.fc2.weight"], p["mlp.fc2.bias"])
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
    h = layer_norm(x, p["norm1.weight"], p["norm1.bias"])
    if talking_heads:
        h, attn = talking_heads_attention(
            h, p["attn.qkv.weight"], p.get("attn.qkv.bias"), p["attn.proj_l.weight"],
            p["attn.proj_l.bias"], p["attn.proj_w.weight"], p["attn.proj_w.bias"],
            p["attn.proj.weight"], p["attn.proj.bias"], num_heads, return_attention=True)
    else:
        h, attn = multi_head_attention(h, p["attn.qkv.weight"], p.get("attn.qkv.bias"),
                                       p["attn.proj.weight"], p["attn.proj.bias"], num_heads,
                                       return_attention=True)
    x = x + layer_scale(h, p["gamma_1"])
    x = x + layer_scale(mlp(layer_norm(x, p["norm2.weight"], p["norm2.bias"]),
                            p["mlp.fc1.weight"], p["mlp.fc1.bias"], p["mlp.fc2.weight"],
                            p["mlp.fc2.bias"]), p["gamma_2"])
    return (x, attn) if return_attention else x
