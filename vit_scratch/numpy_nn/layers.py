"""Elementary layers in NumPy: linear, LayerNorm, exact GELU, stable softmax, MLP.

Shapes in the docstrings follow CS231n: ``x`` is (..., C_in) -- any number of leading axes
(batch, tokens, heads) -- and only the last axis is transformed.  Weights use PyTorch's
layout, so ``linear(x, model.fc.weight.numpy(), model.fc.bias.numpy())`` is ``model.fc(x)``.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.special

from .. import validation

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


# Rational approximation of erf for float32 on [-4, 4] (odd numerator of degree 13 over an even
# denominator of degree 8; outside [-4, 4] erf is ±1 in float32).  These are the published
# coefficients used by Eigen and XLA for single precision; the maximum absolute error against
# the exact erf is below 5e-7 (tests/test_rooms.py::test_erf_float32_accuracy).
_ERF_NUM = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
            -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
            -1.60960333262415e-02)
_ERF_DEN = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
            -7.37332916720468e-03, -1.42647390514189e-02)


def _erf_rational(z: np.ndarray) -> np.ndarray:
    """erf for float32, overwriting z (a scratch array) to save memory traffic."""
    np.clip(z, -4.0, 4.0, out=z)  # erf is ±1 in float32 beyond ±4
    z2 = z * z
    num = np.multiply(z2, _ERF_NUM[0])
    for c in _ERF_NUM[1:-1]:
        num += c
        num *= z2
    num += _ERF_NUM[-1]
    num *= z  # odd numerator: z · P(z²)
    den = np.multiply(z2, _ERF_DEN[0], out=z)  # z is no longer needed: reuse it
    for c in _ERF_DEN[1:-1]:
        den += c
        den *= z2
    den += _ERF_DEN[-1]
    num /= den
    return num


def erf(x: np.ndarray) -> np.ndarray:
    """The error function erf(x) = 2/√π ∫₀ˣ e^(−t²) dt, elementwise, in x's dtype.

    NumPy has no erf.  float32 uses a rational approximation, several times faster than SciPy
    and accurate to < 5e-7 (float32 itself resolves 6e-8 near 1); every other dtype uses
    ``scipy.special.erf`` (exact to rounding, ~20 ns per element).
    """
    x = np.asarray(x)
    if x.dtype != np.float32:  # float64 (and anything else): SciPy, in float64 or wider
        return scipy.special.erf(x)
    return _erf_rational(x.copy())


_GELU_BLOCK = 1 << 16  # float32 elements per block: 256 KB, so temporaries stay in the cache


def gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Exact GELU: x · Φ(x) = 0.5 · x · (1 + erf(x / √2)).  Same shape and dtype as x.

    (The tanh approximation 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) differs by up to ~5e-4.
    timm's models, and DeiT's checkpoints trained with them, use the exact form, ``nn.GELU()``'s
    default; the original JAX ViT was trained with flax's ``nn.gelu``, whose default is the tanh
    form.)  ``out=x`` works in place.

    Speed note: the float32 erf is ~25 elementwise passes.  Over a whole (B·N, 4C) activation
    each pass streams megabytes through main memory; over blocks of 65,536 elements the
    temporaries stay in the CPU cache, which makes GELU ~2x faster.  The loop is over memory
    blocks, not tokens: every element gets exactly the same arithmetic.
    """
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise ValueError(f"gelu input must be real numbers, got dtype {x.dtype}")
    dtype = np.result_type(x, np.float32)
    if out is None:
        out = np.empty(x.shape, dtype=dtype)  # C order, whatever x's memory order
    elif not isinstance(out, np.ndarray) or out.shape != x.shape:
        raise ValueError(f"gelu: out must be an array of x's shape {x.shape}, got "
                         f"{getattr(out, 'shape', type(out).__name__)}")
    if x.dtype != np.float32:
        out[...] = 0.5 * x * (1.0 + scipy.special.erf(x * (1.0 / math.sqrt(2.0))))
        return out
    if not out.flags.c_contiguous:  # e.g. out=x for a Fortran-order x: compute, then copy
        out[...] = gelu(x)
        return out
    x_flat = np.ascontiguousarray(x).reshape(-1)  # a copy only if x is not C-contiguous
    out_flat = out.reshape(-1)  # a view of out
    for start in range(0, x_flat.size, _GELU_BLOCK):
        xb = x_flat[start:start + _GELU_BLOCK]
        y = _erf_rational(xb * (1.0 / math.sqrt(2.0)))
        y += 1.0
        y *= xb
        y *= 0.5
        out_flat[start:start + _GELU_BLOCK] = y
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
    return linear(gelu(h, out=h), fc2_weight, fc2_bias)  # GELU in place: h is ours


def sub_params(params: dict, prefix: str) -> dict:
    """The entries of a state_dict below ``prefix``, with the prefix removed.

    ``sub_params(sd, "blocks.3.")["attn.qkv.weight"] is sd["blocks.3.attn.qkv.weight"]``
    """
    return {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}


# --- using several cores ------------------------------------------------------------------------
# BLAS runs matrix products on every core, but NumPy's elementwise work (GELU, LayerNorm, softmax,
# depthwise convolutions, resizing) runs on one.  NumPy releases the GIL inside those loops, so
# splitting the *batch* over a few Python threads runs all of it in parallel -- images are
# independent, so each image's result is the same computation either way.
_worker = threading.local()
_pools: dict[int, ThreadPoolExecutor] = {}


def num_threads() -> int:
    """Threads the NumPy room may use: 1 inside one of its own worker threads; otherwise
    ``OMP_NUM_THREADS`` if set (the variable that also sizes BLAS and PyTorch), else the CPUs
    this process may run on."""
    if getattr(_worker, "active", False):
        return 1
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_blas_controller = None


@contextlib.contextmanager
def _single_threaded_blas():
    """BLAS on one thread inside the block (the batch threads already use every core);
    a no-op without ``threadpoolctl`` (a scikit-learn dependency)."""
    global _blas_controller
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover
        yield
        return
    if _blas_controller is None:  # finding the loaded BLAS libraries once is enough
        _blas_controller = ThreadpoolController()
    with _blas_controller.limit(limits=1, user_api="blas"):
        yield


def split_batch(fn, x: np.ndarray, threads: int | None = None) -> list:
    """``[fn(chunk) for chunk in x split along axis 0]``, the chunks computed in parallel
    threads (each with single-threaded BLAS); one chunk, in this thread, when only one thread
    is available or the batch has one item.  Concatenate the results to get ``fn(x)``.

    ``fn`` must treat the items of the batch independently (every model forward does)."""
    n = min(num_threads() if threads is None else threads, len(x))
    if n <= 1:
        return [fn(x)]
    bounds = np.linspace(0, len(x), n + 1).astype(int)

    def work(i: int):
        _worker.active = True
        try:
            return fn(x[bounds[i]:bounds[i + 1]])
        finally:
            _worker.active = False

    if n not in _pools:
        _pools[n] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="vit_scratch_numpy")
    with _single_threaded_blas():
        return list(_pools[n].map(work, range(n)))
