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

Parameters are keyed like timm's ViT blocks (``norm1``, ``attn.qkv``, ``ls1.gamma``, ...):
:func:`residual_block` is the ViT family's block, whose form its config chooses (pre-norm for
ViT and DeiT, LayerScale for DeiT III).  CaiT's own blocks name their LayerScale vectors
``gamma_1`` and ``gamma_2`` (:func:`layerscale_block`).  Both blocks' learning passes are two
:func:`residual_forward` steps, one per branch, and their :func:`residual_backward`.

Each function is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); a public
function checks its arguments and calls its unchecked core ``_f``, which the models call.
"""
from __future__ import annotations

import numpy as np

from .. import validation
# the residual forms and the depth rule live in the (torch-free) spec; re-exported here
from ..specs.cait import RESIDUAL_FORMS, check_residual, layerscale_init_value  # noqa: F401
from .attention import (_multi_head_attention, _talking_heads_attention,
                        multi_head_attention_backward, multi_head_attention_forward,
                        talking_heads_attention_backward, talking_heads_attention_forward)
from .backprop import Cache, check_backward
from .layers import (MLP_KEYS, _layer_norm, _mlp, drop_path_backward, drop_path_forward,
                     layer_norm_backward, layer_norm_forward, mlp_backward, mlp_forward,
                     mlp_params)


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


def scalar_gate_forward(x: np.ndarray, alpha: np.ndarray):
    """:func:`scalar_gate` -> (out, cache)."""
    out = scalar_gate(x, alpha)
    return out, Cache("scalar_gate", out, x=x, alpha=alpha)


def scalar_gate_backward(dout: np.ndarray, cache: Cache):
    """y = α·x (one α for every entry)  ⇒  ∂L/∂x = α·dy,   ∂L/∂α = Σ dy ⊙ x   (the sum over
    every entry).  -> (dx, dalpha (1,))."""
    dout = check_backward("scalar_gate", dout, cache)
    dx = dout * cache.alpha.astype(dout.dtype, copy=False)
    return dx, np.reshape(np.vdot(dout, cache.x), (1,)).astype(dout.dtype, copy=False)


#: Each scale kind of :data:`RESIDUAL_FORMS`: its parameter's name, and its three functions.
SCALES = {"channel": ("gamma", layer_scale, layer_scale_forward, layer_scale_backward),
          "scalar": ("alpha", scalar_gate, scalar_gate_forward, scalar_gate_backward)}


def _scale(x: np.ndarray, p: dict, prefix: str, kind: str | None) -> np.ndarray:
    """A branch's output times its scale ``{prefix}.gamma`` or ``{prefix}.alpha`` (``kind``
    None: as it is)."""
    if kind is None:
        return x
    name, scale, _, _ = SCALES[kind]
    return scale(x, p[f"{prefix}.{name}"])


# --- one residual branch, for learning ----------------------------------------------------------


def residual_forward(x: np.ndarray, branch_forward, branch_backward, norm=None, scale=None,
                     mask=None):
    """One residual branch of a block, ``x + m · s(f(LN(x)))`` -> (out, cache).

    ``branch_forward``: ``h -> (f(h), cache)``, a ``_forward`` function with the branch's
    parameters bound (``lambda h: mlp_forward(h, *mlp_params(p))``), and ``branch_backward``
    its backward; ``norm``: the LayerNorm's ``(weight, bias)``, or None (no norm: ReZero);
    ``scale``: ``(kind, array)`` with a kind of :data:`SCALES`, or None; ``mask``: the (B,)
    stochastic-depth factors of ``layers.drop_path_mask``, or None."""
    h, c_norm = (x, None) if norm is None else layer_norm_forward(x, *norm)
    h, c_branch = branch_forward(h)
    h, c_scale = (h, None) if scale is None else SCALES[scale[0]][2](h, scale[1])
    h, c_drop = drop_path_forward(h, mask)
    out = x + h
    return out, Cache("residual", out, norm=c_norm, branch=c_branch, branch_backward=branch_backward,
                      scale=c_scale, scale_kind=None if scale is None else scale[0],
                      drop_path=c_drop)


def residual_backward(dout: np.ndarray, cache: Cache):
    """y = x + m · s(f(n(x))): the residual passes ``dout`` through unchanged and the branch
    adds its own, the chain rule back through the mask, the scale, the branch and the norm,

        ∂L/∂x = dy + nᵀ(fᵀ(sᵀ(m · dy)))      (gᵀ(d): the backward of g applied to d)

    -> (dx, dnorm: (dweight, dbias) or None, dscale or None, the branch's parameter gradients:
    what ``branch_backward`` returns after its input's gradient)."""
    dout = check_backward("residual", dout, cache)
    dh = drop_path_backward(dout, cache.drop_path)
    dscale = None
    if cache.scale_kind is not None:
        dh, dscale = SCALES[cache.scale_kind][3](dh, cache.scale)
    dh, *dbranch = cache.branch_backward(dh, cache.branch)
    dnorm = None
    if cache.norm is not None:
        dh, *dnorm = layer_norm_backward(dh, cache.norm)
    return dh + dout, dnorm, dscale, dbranch


def _attention_params(p: dict, talking_heads: bool = False) -> list:
    """A block's attention arrays, in the argument order of ``multi_head_attention`` (or of
    ``talking_heads_attention`` with ``talking_heads``)."""
    return [p[k] if k != "attn.qkv.bias" else p.get(k) for k in _attention_keys(talking_heads)]


def _attention_keys(talking_heads: bool = False) -> list[str]:
    """The keys of :func:`_attention_params`, in its order: the order in which the attention's
    backward returns their gradients."""
    heads = ["attn.proj_l.weight", "attn.proj_l.bias", "attn.proj_w.weight", "attn.proj_w.bias"]
    return ["attn.qkv.weight", "attn.qkv.bias", *(heads if talking_heads else []),
            "attn.proj.weight", "attn.proj.bias"]


def _branch_grads(grads: dict, prefix: str, keys, dnorm, dscale, scale_key, dbranch) -> dict:
    """A residual step's gradients into ``grads`` under the block's keys: its norm
    (``{prefix}.weight``, ``.bias``), its scale (``scale_key``) and its branch (``keys``, in
    the order of the branch's backward; an absent bias (None) is left out)."""
    if dnorm is not None:
        grads[f"{prefix}.weight"], grads[f"{prefix}.bias"] = dnorm
    if dscale is not None:
        grads[scale_key] = dscale
    grads.update({k: g for k, g in zip(keys, dbranch) if g is not None})
    return grads


def _step(p: dict, norm: str | None, scale: str | None, kind: str | None) -> tuple:
    """The ``norm`` and ``scale`` arguments of :func:`residual_forward` from a block's
    parameters: the LayerNorm ``{norm}.weight``/``.bias`` (None: no norm), and the scale of
    ``kind`` (a kind of :data:`SCALES`, or None) at the key ``scale``."""
    norm_params = None if norm is None else (p[f"{norm}.weight"], p[f"{norm}.bias"])
    return norm_params, None if kind is None else (kind, p[scale])


def _scale_key(prefix: str, kind: str | None) -> str | None:
    """A ViT block's scale key: ``ls1.gamma``, ``ls1.alpha``, or None (no scale)."""
    return None if kind is None else f"{prefix}.{SCALES[kind][0]}"


MLP_GRAD_KEYS = [f"mlp.{k}" for k in MLP_KEYS]


# --- the ViT family's block ---------------------------------------------------------------------


def residual_block(x: np.ndarray, p: dict, num_heads: int, residual: str = "layerscale",
                   return_attention: bool = False):
    """One transformer block (multi-head self-attention, then MLP) with a residual form of
    :data:`RESIDUAL_FORMS`:

        x = x + s₁(attn(norm1(x)))
        x = x + s₂(mlp(norm2(x)))

    x: (B, N, C); p: the block's parameters (``norm1.*`` unless "rezero", ``attn.qkv.*``,
    ``attn.proj.*``, ``ls1.gamma`` or ``ls1.alpha``, ``norm2.*``, ``mlp.*``, ``ls2.*``)
    ->  (B, N, C), and the attention weights (B, h, N, N) if ``return_attention``.
    The ViT family's block: ``residual="prenorm"`` is ViT's and DeiT's (``vit.block``),
    ``"layerscale"`` DeiT III's.
    """
    norm, kind = check_residual(residual)
    scales = {k for k in p if k.startswith(("ls1.", "ls2."))}
    expected = set() if kind is None else {f"ls{i}.{SCALES[kind][0]}" for i in (1, 2)}
    if scales != expected:
        raise ValueError(f"residual={residual!r} scales its branches with {sorted(expected)}, "
                         f"but p holds {sorted(scales)}: pass the residual form of these "
                         f"parameters")
    x = np.asarray(x)
    validation.check_tokens(x.shape, np.shape(p["attn.proj.weight"])[0], "x")
    validation.head_dim(x.shape[-1], num_heads)
    x, attn = _residual_block(x, p, num_heads, residual)
    return (x, attn) if return_attention else x


def _residual_block(x, p: dict, num_heads: int, residual: str = "layerscale"):
    """:func:`residual_block`'s formula, unchecked: -> (out, the attention weights)."""
    norm, kind = RESIDUAL_FORMS[residual]
    h = _layer_norm(x, p["norm1.weight"], p["norm1.bias"]) if norm else x
    h, attn = _multi_head_attention(h, *_attention_params(p), num_heads)
    x = x + _scale(h, p, "ls1", kind)
    h = _layer_norm(x, p["norm2.weight"], p["norm2.bias"]) if norm else x
    return x + _scale(_mlp(h, *mlp_params(p)), p, "ls2", kind), attn


def residual_block_forward(x: np.ndarray, p: dict, num_heads: int, residual: str = "layerscale",
                           drop_path_masks=None):
    """:func:`residual_block` -> (out, cache): two :func:`residual_forward` steps, the attention
    branch and the MLP branch.  ``drop_path_masks``: None (no stochastic depth), or the (B,)
    factors of ``layers.drop_path_mask`` for the attention and the MLP branch."""
    m1, m2 = drop_path_masks or (None, None)
    norm, kind = check_residual(residual)
    x, c_attn = residual_forward(
        x, lambda h: multi_head_attention_forward(h, *_attention_params(p), num_heads),
        multi_head_attention_backward,
        *_step(p, "norm1" if norm else None, _scale_key("ls1", kind), kind), m1)
    out, c_mlp = residual_forward(
        x, lambda h: mlp_forward(h, *mlp_params(p)), mlp_backward,
        *_step(p, "norm2" if norm else None, _scale_key("ls2", kind), kind), m2)
    return out, Cache("residual_block", out, attn=c_attn, mlp=c_mlp, kind=kind)


def residual_block_backward(dout: np.ndarray, cache: Cache):
    """x₁ = x + s₁(attn(norm1(x))), y = x₁ + s₂(mlp(norm2(x₁))): :func:`residual_backward`
    through the MLP step, then through the attention step.  -> (dx, {key: gradient}) with p's
    keys."""
    dout = check_backward("residual_block", dout, cache)
    g: dict = {}
    dx, *d = residual_backward(dout, cache.mlp)
    _branch_grads(g, "norm2", MLP_GRAD_KEYS, *d[:2], _scale_key("ls2", cache.kind), d[2])
    dx, *d = residual_backward(dx, cache.attn)
    _branch_grads(g, "norm1", _attention_keys(), *d[:2], _scale_key("ls1", cache.kind), d[2])
    return dx, g


# --- CaiT's self-attention block ------------------------------------------------------------------


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
    """:func:`layerscale_block` -> (out, cache): two :func:`residual_forward` steps.
    ``drop_path_masks``: None, or the (B,) factors of ``layers.drop_path_mask`` for the
    attention and the MLP branch."""
    m1, m2 = drop_path_masks or (None, None)
    attention = (talking_heads_attention_forward, talking_heads_attention_backward) \
        if talking_heads else (multi_head_attention_forward, multi_head_attention_backward)
    x, c_attn = residual_forward(
        x, lambda h: attention[0](h, *_attention_params(p, talking_heads), num_heads),
        attention[1], *_step(p, "norm1", "gamma_1", "channel"), m1)
    out, c_mlp = residual_forward(x, lambda h: mlp_forward(h, *mlp_params(p)), mlp_backward,
                                  *_step(p, "norm2", "gamma_2", "channel"), m2)
    return out, Cache("layerscale_block", out, attn=c_attn, mlp=c_mlp,
                      talking_heads=talking_heads)


def layerscale_block_backward(dout: np.ndarray, cache: Cache):
    """x₁ = x + γ₁ ⊙ attn(norm1(x)), y = x₁ + γ₂ ⊙ mlp(norm2(x₁)): :func:`residual_backward`
    through both steps, the MLP's first.  -> (dx, {key: gradient}) with p's keys."""
    dout = check_backward("layerscale_block", dout, cache)
    g: dict = {}
    dx, *d = residual_backward(dout, cache.mlp)
    _branch_grads(g, "norm2", MLP_GRAD_KEYS, *d[:2], "gamma_2", d[2])
    dx, *d = residual_backward(dx, cache.attn)
    _branch_grads(g, "norm1", _attention_keys(cache.talking_heads), *d[:2], "gamma_1", d[2])
    return dx, g
