"""Elementary layers in NumPy: linear, LayerNorm, exact GELU, stable softmax, the MLP, and the
two pieces training adds -- the cross-entropy loss and stochastic depth.

Shapes in the docstrings follow CS231n: ``x`` is (..., C_in) -- any number of leading axes
(batch, tokens, heads) -- and only the last axis is transformed.  Weights use PyTorch's
layout, so ``linear(x, model.fc.weight.numpy(), model.fc.bias.numpy())`` is ``model.fc(x)``.

Each function ``f`` is followed by ``f_forward -> (out, cache)`` and ``f_backward(dout, cache)``,
the backward's derivation in its docstring (CS231n's pairing; the pattern is
``vit_scratch.numpy_nn.backprop``'s).  A public function checks its arguments and calls its
core ``_f``, the formula itself; the models call the cores (``vit_scratch.validation``: the
rule).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special

from .. import validation
from ..specs.base import LAYER_NORM_EPS  # noqa: F401 (the token LayerNorms' eps, both rooms)
from . import _fast
from .backprop import Cache, check_backward

#: The parameters of an MLP, relative to it, in :func:`mlp`'s argument order.
MLP_KEYS = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


# --- linear -------------------------------------------------------------------------------------


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
    return _linear(x, weight, bias)


def _linear(x, weight, bias=None):
    """:func:`linear`'s formula, unchecked."""
    y = x.reshape(-1, x.shape[-1]) @ weight.T
    if bias is not None:
        y += bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


def linear_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None):
    """:func:`linear` -> (out, cache)."""
    out = linear(x, weight, bias)
    return out, Cache("linear", out, x=x, weight=weight, has_bias=bias is not None)


def linear_backward(dout: np.ndarray, cache: Cache):
    """y = x Wᵀ + b  ⇒  ∂L/∂x = dy W,   ∂L/∂W = Σ dyᵀ x,   ∂L/∂b = Σ dy,

    the sums over every leading axis (batch, tokens): each row of x met the same W.
    -> (dx (..., C_in), dweight (C_out, C_in), dbias (C_out,) or None)."""
    dout = check_backward("linear", dout, cache)
    x, w = cache.x, cache.weight
    d2 = dout.reshape(-1, dout.shape[-1])  # (M, C_out)
    dx = (d2 @ w).reshape(x.shape)
    dweight = d2.T @ x.reshape(-1, x.shape[-1])
    dbias = d2.sum(axis=0) if cache.has_bias else None
    return dx, dweight, dbias


# --- LayerNorm ----------------------------------------------------------------------------------


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
    return _layer_norm(x, weight, bias, eps)


def _layer_norm(x, weight, bias, eps=LAYER_NORM_EPS):
    """:func:`layer_norm`'s formula, unchecked (the overflow guard stays: it is about values)."""
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


def layer_norm_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray,
                       eps: float = LAYER_NORM_EPS):
    """:func:`layer_norm` -> (out, cache)."""
    out = layer_norm(x, weight, bias, eps)
    return out, Cache("layer_norm", out, x=x, weight=weight, eps=eps)


def layer_norm_backward(dout: np.ndarray, cache: Cache):
    """With x̂ = (x - μ)·r, r = 1/√(σ² + ε) over the C channels of a token, and y = γ ⊙ x̂ + β:

        ∂L/∂β = Σ dy,   ∂L/∂γ = Σ dy ⊙ x̂      (sums over every token)
        ∂L/∂x = r · (g - mean(g) - x̂ · mean(g ⊙ x̂)),   g = γ ⊙ dy   (means over the channels)

    The two means are the paths through μ and σ²: every channel of a token moves the token's
    mean and variance.  -> (dx, dweight (C,), dbias (C,))."""
    dout = check_backward("layer_norm", dout, cache)
    x, weight = cache.x, cache.weight
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    r = 1.0 / np.sqrt(np.mean(centered * centered, axis=-1, keepdims=True) + cache.eps)
    x_hat = centered * r
    lead = tuple(range(x.ndim - 1))
    dweight = np.sum(dout * x_hat, axis=lead)
    dbias = np.sum(dout, axis=lead)
    g = dout * weight
    dx = r * (g - g.mean(axis=-1, keepdims=True)
              - x_hat * np.mean(g * x_hat, axis=-1, keepdims=True))
    return dx, dweight, dbias


# --- GELU ---------------------------------------------------------------------------------------


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


def gelu_forward(x: np.ndarray):
    """:func:`gelu` -> (out, cache)."""
    out = gelu(x)
    return out, Cache("gelu", out, x=x, out=out)


def gelu_backward(dout: np.ndarray, cache: Cache) -> np.ndarray:
    """GELU(x) = x·Φ(x)  ⇒  ∂L/∂x = dy · (Φ(x) + x·φ(x)),

    Φ the standard normal CDF, φ(x) = e^(-x²/2)/√(2π) its density.  Φ(x) = GELU(x)/x is read
    off the forward's output (Φ(0) = ½), so no second erf is computed."""
    dout = check_backward("gelu", dout, cache)
    x = cache.x
    cdf = np.divide(cache.out, x, out=np.full_like(x, 0.5), where=x != 0)
    pdf = np.exp(-0.5 * x * x)
    pdf *= 1.0 / math.sqrt(2.0 * math.pi)
    pdf *= x
    pdf += cdf
    pdf *= dout
    return pdf


# --- softmax ------------------------------------------------------------------------------------


def softmax(x: np.ndarray, axis: int = -1, out: np.ndarray | None = None) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    Subtracting the maximum first changes nothing mathematically (softmax(x) = softmax(x - c))
    but keeps exp() from overflowing: exp(1000) is inf, exp(1000 - 1000) is 1.
    Entries equal to -inf (masked out) get weight 0; a row that is -inf everywhere (nothing
    may be attended to) gets weight 0 everywhere, not 0/0 = nan.  ``out=x`` works in place;
    an empty axis gives an empty result, as in PyTorch.  A +inf entry (a score that overflowed
    its dtype: float32 ends at 3.4e38) would make its row NaN (inf - inf), as it does in
    PyTorch; it is a ``ValueError`` instead.
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
    return _softmax(x, axis, out)


def _softmax(x, axis=-1, out=None):
    """:func:`softmax`'s formula, unchecked (x floating point)."""
    if x.size == 0:  # an empty axis (or batch): nothing to normalise, an empty result
        return np.empty_like(x) if out is None else out
    peak = np.max(x, axis=axis, keepdims=True)
    if np.isposinf(peak).any():  # the guard stays in the formula: it is about values
        raise ValueError(
            f"softmax input holds +inf in {int(np.isposinf(peak).sum())} of its rows (a "
            f"{x.dtype} score that overflowed?): their weights would be NaN (inf - inf); keep "
            f"the scores finite, and mask with -inf")
    peak[np.isneginf(peak)] = 0.0  # an all -inf row: exp(-inf - 0) = 0 everywhere
    out = np.subtract(x, peak, out=out)  # every entry <= 0
    np.exp(out, out=out)
    total = np.sum(out, axis=axis, keepdims=True)
    total[total == 0] = 1.0  # an all-zero row stays 0
    out /= total
    return out


def softmax_forward(x: np.ndarray, axis: int = -1):
    """:func:`softmax` -> (out, cache)."""
    out = softmax(x, axis=axis)
    return out, Cache("softmax", out, out=out, axis=axis)


def softmax_backward(dout: np.ndarray, cache: Cache) -> np.ndarray:
    """p = softmax(x) along an axis has the Jacobian ∂p_i/∂x_j = p_i (δ_ij - p_j), so the
    Jacobian-vector product, never building the matrix, is

        ∂L/∂x = p ⊙ (dp - Σ_j dp_j p_j)      (the sum along the softmax axis).

    Masked entries (p = 0) get gradient 0."""
    dout = check_backward("softmax", dout, cache)
    p = cache.out
    return p * (dout - np.sum(dout * p, axis=cache.axis, keepdims=True))


# --- the MLP ------------------------------------------------------------------------------------


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
    h = linear(x, fc1_weight, fc1_bias)  # (..., H), checked
    return linear(_fast.gelu(h, out=h), fc2_weight, fc2_bias)


def _mlp(x, fc1_weight, fc1_bias, fc2_weight, fc2_bias):
    """:func:`mlp`'s formula, unchecked."""
    h = _linear(x, fc1_weight, fc1_bias)  # (..., H)
    h = _fast.gelu(h, out=h)  # gelu's faster twin (numpy_nn/_fast.py, tested equal), in place
    return _linear(h, fc2_weight, fc2_bias)


def mlp_forward(x: np.ndarray, fc1_weight: np.ndarray, fc1_bias: np.ndarray,
                fc2_weight: np.ndarray, fc2_bias: np.ndarray):
    """:func:`mlp` -> (out, cache): fc1 -> GELU -> fc2 through their ``_forward``s."""
    h, c1 = linear_forward(x, fc1_weight, fc1_bias)
    a, c_act = gelu_forward(h)
    out, c2 = linear_forward(a, fc2_weight, fc2_bias)
    return out, Cache("mlp", out, fc1=c1, act=c_act, fc2=c2)


def mlp_backward(dout: np.ndarray, cache: Cache):
    """h = x W₁ᵀ + b₁, a = GELU(h), y = a W₂ᵀ + b₂: the chain rule through the three, last first,

        ∂L/∂W₂ = Σ dyᵀ a,  ∂L/∂b₂ = Σ dy,  ∂L/∂a = dy W₂,  ∂L/∂h = ∂L/∂a ⊙ GELU'(h),
        ∂L/∂W₁ = Σ (∂L/∂h)ᵀ x,  ∂L/∂b₁ = Σ ∂L/∂h,  ∂L/∂x = (∂L/∂h) W₁

    -> (dx, dfc1_weight, dfc1_bias, dfc2_weight, dfc2_bias)."""
    dout = check_backward("mlp", dout, cache)
    da, dw2, db2 = linear_backward(dout, cache.fc2)
    dh = gelu_backward(da, cache.act)
    dx, dw1, db1 = linear_backward(dh, cache.fc1)
    return dx, dw1, db1, dw2, db2


def sub_params(params: dict, prefix: str) -> dict:
    """The entries of a state_dict below ``prefix``, with the prefix removed.

    ``sub_params(sd, "blocks.3.")["attn.qkv.weight"] is sd["blocks.3.attn.qkv.weight"]``
    """
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


def mlp_params(p: dict, prefix: str = "mlp.") -> list[np.ndarray]:
    """An MLP's four arrays from a block's params, in :func:`mlp`'s argument order."""
    return [p[prefix + k] for k in MLP_KEYS]


def mlp_grads(grads, prefix: str = "mlp.") -> dict[str, np.ndarray]:
    """:func:`mlp_backward`'s four parameter gradients under the block's keys."""
    return {prefix + k: g for k, g in zip(MLP_KEYS, grads)}


# --- the loss -----------------------------------------------------------------------------------


def cross_entropy(logits: np.ndarray, labels: np.ndarray,
                  label_smoothing: float = 0.0) -> np.ndarray:
    """Mean cross-entropy of ``logits`` (B, K) against integer ``labels`` (B,), with label
    smoothing as ``F.cross_entropy(logits, labels, label_smoothing=ε)``: the target of each
    image is (1 - ε)·one_hot(label) + ε/K, so

        loss = mean_b [ (1 - ε)·(-log p[b, y_b]) + ε · mean_c (-log p[b, c]) ],  p = softmax(logits)

    -log p comes from the stable log-softmax, x - max - log Σ exp(x - max).  -> a 0-d array.
    """
    logits = np.asarray(logits)
    labels = np.asarray(labels)
    validation.check_ndim(logits.shape, 2, "logits", "(B, num_classes)")
    if not np.issubdtype(logits.dtype, np.floating):
        raise ValueError(f"logits must be floating point, got dtype {logits.dtype}")
    if labels.shape != logits.shape[:1] or labels.dtype.kind not in "iu":
        raise ValueError(f"labels must be integers of shape (B,) = ({logits.shape[0]},), got "
                         f"shape {labels.shape} and dtype {labels.dtype}")
    K = logits.shape[1]
    if labels.size and (labels.min() < 0 or labels.max() >= K):
        raise ValueError(f"labels must be class indices in [0, {K}), got values from "
                         f"{labels.min()} to {labels.max()}")
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing!r}")
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))  # (B, K)
    nll = -log_p[np.arange(len(labels)), labels]  # (B,)
    loss = (1.0 - label_smoothing) * nll - label_smoothing * log_p.mean(axis=1)
    return loss.mean()


def cross_entropy_forward(logits: np.ndarray, labels: np.ndarray, label_smoothing: float = 0.0):
    """:func:`cross_entropy` -> (loss, cache)."""
    loss = cross_entropy(logits, labels, label_smoothing)
    return loss, Cache("cross_entropy", loss, logits=logits, labels=np.asarray(labels),
                       label_smoothing=label_smoothing)


def cross_entropy_backward(dloss, cache: Cache) -> np.ndarray:
    """With p = softmax(logits) and the smoothed target t = (1 - ε)·one_hot(y) + ε/K,

        ∂loss/∂logits = (p - t) / B       (the mean over the batch gives the 1/B),

    times ``dloss`` (1.0 when the loss is the end of the chain).  -> dlogits (B, K)."""
    dloss = check_backward("cross_entropy", dloss, cache)
    logits, labels, eps = cache.logits, cache.labels, cache.label_smoothing
    B, K = logits.shape
    grad = softmax(logits, axis=1)  # a fresh array: p
    grad -= eps / K
    grad[np.arange(B), labels] -= 1.0 - eps
    grad *= dloss / B
    return grad


# --- stochastic depth ---------------------------------------------------------------------------


def drop_path_mask(batch: int, drop_prob: float, rng: np.random.Generator | None,
                   dtype=np.float32) -> np.ndarray | None:
    """Stochastic depth's per-sample factors: 0 (the branch dropped, with probability
    ``drop_prob``) or 1/(1 - drop_prob) (kept, scaled so the expected value is unchanged).
    -> (batch,) in ``dtype``; None (no stochastic depth) when ``rng`` is None (evaluation) or
    ``drop_prob`` is 0."""
    batch = validation.check_int(batch, "batch", minimum=0)  # the number of samples
    if not 0.0 <= drop_prob < 1.0:
        raise ValueError(f"drop_prob must be in [0, 1), got {drop_prob!r}")
    if rng is None or drop_prob == 0.0:
        return None
    keep = np.asarray(1.0 - drop_prob, dtype=dtype)
    return (rng.random(batch) < keep).astype(dtype) / keep


def drop_path(x: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """DropPath (stochastic depth): each sample's residual branch times its factor of
    :func:`drop_path_mask`.  x: (B, ...), mask: (B,) or None (x unchanged, as in evaluation)
    ->  x's shape."""
    if mask is None:
        return x
    if np.shape(mask) != x.shape[:1]:
        raise ValueError(f"drop_path mask must have shape (B,) = ({x.shape[0]},), got shape "
                         f"{np.shape(mask)}")
    return x * mask.astype(x.dtype, copy=False).reshape((-1,) + (1,) * (x.ndim - 1))


def drop_path_forward(x: np.ndarray, mask: np.ndarray):
    """:func:`drop_path` -> (out, cache)."""
    out = drop_path(x, mask)
    return out, Cache("drop_path", out, mask=mask)


def drop_path_backward(dout: np.ndarray, cache: Cache) -> np.ndarray:
    """y = m_b · x per sample b  ⇒  ∂L/∂x = m_b · dy: a dropped branch gets no gradient, a kept
    one its gradient scaled by 1/(1 - p), like its output.  (The mask is not learned.)"""
    dout = check_backward("drop_path", dout, cache)
    return drop_path(dout, cache.mask)
