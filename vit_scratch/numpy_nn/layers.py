"""Elementary layers in NumPy: linear, LayerNorm, exact GELU, stable softmax, MLP.

Shapes in the docstrings follow CS231n: ``x`` is (..., C_in) -- any number of leading axes
(batch, tokens, heads) -- and only the last axis is transformed.  Weights use PyTorch's
layout, so ``linear(x, model.fc.weight.numpy(), model.fc.bias.numpy())`` is ``model.fc(x)``.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special

from .. import validation
from . import _fast

LAYER_NORM_EPS = 1e-6  # every token LayerNorm of ViT, CaiT and CoaT (timm's eps for them)


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y = x Wᵀ + b.

    x: (..., C_in), weight: (C_out, C_in), bias: (C_out,) or None  ->  (..., C_out)

    The leading axes are folded into one so BLAS sees a single (M, C_in) @ (C_in, C_out)
    product instead of a batch of small ones.  Integer and bool arrays are computed in float64
    (as NumPy computes an int times a float).
    """
    x, weight = np.asarray(x), np.asarray(weight)
    x = x.astype(np.float64) if x.dtype.kind in "biu" else x
    weight = weight.astype(np.float64) if weight.dtype.kind in "biu" else weight
    validation.check_ndim(weight.shape, 2, "linear weight", "(C_out, C_in)")
    validation.check_last_dim(x.shape, weight.shape[1], "linear input")
    if bias is not None:
        bias = np.asarray(bias)
        validation.check_ndim(bias.shape, 1, "linear bias", f"(C_out,) = ({weight.shape[0]},)")
        validation.check_last_dim(bias.shape, weight.shape[0], "linear bias")
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def layer_norm(
    x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float = LAYER_NORM_EPS
) -> np.ndarray:
    """Normalise each token over its channels, then scale and shift.

    x: (..., C), weight/bias: (C,)  ->  (..., C)
    y = (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance (divide by C).

    A token whose variance overflows its dtype (float32 deviations beyond ~1e19) would be
    normalised to 0 -- every such token the same -- so it raises a ``ValueError`` instead
    (``torch.nn.LayerNorm`` returns the bias silently; the models refuse such inputs first).
    """
    x = np.asarray(x)
    for name, p in (("layer_norm weight", weight), ("layer_norm bias", bias)):
        validation.check_ndim(np.shape(p), 1, name, "(C,)")
    validation.check_last_dim(x.shape, weight.shape[0], "layer_norm input")
    validation.check_last_dim(bias.shape, weight.shape[0], "layer_norm bias")
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    with np.errstate(over="ignore"):
        var = np.mean(centered * centered, axis=-1, keepdims=True)
    if np.isposinf(var).any():
        big = float(np.abs(x[np.isfinite(x)]).max(initial=0.0))
        raise ValueError(
            f"layer_norm input reaches |value| = {big:.3g}: the variance of a token overflows "
            f"{var.dtype}, which would normalise it to 0; expected values well below "
            f"{math.sqrt(np.finfo(var.dtype).max / x.shape[-1]):.3g}")
    y = centered * (1.0 / np.sqrt(var + eps))
    y *= weight
    y += bias
    return y


def gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Exact GELU: x · Φ(x) = 0.5 · x · (1 + erf(x / √2)), with SciPy's erf (NumPy has none).
    Same shape as x, floating dtype; ``out=x`` works in place.

    (The tanh approximation 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) differs by up to ~5e-4.
    timm's models, and DeiT's checkpoints trained with them, use the exact form, ``nn.GELU()``'s
    default; the original JAX ViT was trained with flax's ``nn.gelu``, whose default is the tanh
    form.)

    The models call its faster twin ``_fast.gelu`` (numpy_nn/_fast.py, tested equal).
    """
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise ValueError(f"gelu input must be real numbers, got dtype {x.dtype}")
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != x.shape):
        raise ValueError(f"gelu: out must be an array of x's shape {x.shape}, got "
                         f"{getattr(out, 'shape', type(out).__name__)}")
    y = 0.5 * x * (1.0 + scipy.special.erf(x / math.sqrt(2.0)))
    if out is None:
        return y
    out[...] = y
    return out


def softmax(x: np.ndarray, axis: int = -1, out: np.ndarray | None = None) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    Subtracting the maximum first changes nothing mathematically (softmax(x) = softmax(x - c))
    but keeps exp() from overflowing: exp(1000) is inf, exp(1000 - 1000) is 1.
    Entries equal to -inf (masked out) get weight 0; a row that is -inf everywhere (nothing
    may be attended to) gets weight 0 everywhere, not 0/0 = nan.  ``out=x`` works in place;
    an empty axis gives an empty result, as in PyTorch.
    """
    x = np.asarray(x)
    if x.dtype.kind == "c":
        raise ValueError(f"softmax input must be real numbers, got dtype {x.dtype}")
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if out is not None and (not isinstance(out, np.ndarray) or out.shape != x.shape):
        raise ValueError(f"softmax: out must be an array of x's shape {x.shape}, got "
                         f"{getattr(out, 'shape', type(out).__name__)}")
    if out is not None and out.dtype.kind != "f":
        raise ValueError(f"softmax: out must be a floating-point array (the weights are "
                         f"fractions), got dtype {out.dtype}")
    if x.size == 0:  # an empty axis (or batch): nothing to normalise, an empty result
        return np.empty_like(x) if out is None else out
    peak = np.max(x, axis=axis, keepdims=True)
    peak[np.isneginf(peak)] = 0.0  # an all -inf row: exp(-inf - 0) = 0 everywhere
    out = np.subtract(x, peak, out=out)  # every entry <= 0
    np.exp(out, out=out)
    total = np.sum(out, axis=axis, keepdims=True)
    total[total == 0] = 1.0  # an all-zero row stays 0
    out /= total
    return out


def mlp(
    x: np.ndarray,
    fc1_weight: np.ndarray,
    fc1_bias: np.ndarray,
    fc2_weight: np.ndarray,
    fc2_bias: np.ndarray,
) -> np.ndarray:
    """The transformer's feed-forward network: fc1 -> GELU -> fc2.

    x: (..., C), fc1_weight: (H, C), fc2_weight: (C, H)  ->  (..., C)
    """
    h = linear(x, fc1_weight, fc1_bias)  # (..., H)
    h = _fast.gelu(h, out=h)  # gelu's faster twin (numpy_nn/_fast.py, tested equal), in place
    return linear(h, fc2_weight, fc2_bias)


def sub_params(params: dict, prefix: str) -> dict:
    """The entries of a state_dict below ``prefix``, with the prefix removed.

    ``sub_params(sd, "blocks.3.")["attn.qkv.weight"] is sd["blocks.3.attn.qkv.weight"]``
    """
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
