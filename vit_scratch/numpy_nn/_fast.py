"""Faster twins of NumPy-room functions; the models' forward passes call these.

Each function here computes what a plain formula elsewhere in the room computes -- read that
one first -- and ``tests/test_fast_paths.py`` checks the two equal, with the tolerances stated
there.  ``benchmarks/bench_fast_paths.py`` measures what each twin gains over its formula.

    erf               ``scipy.special.erf``; float32: a rational approximation (< 5e-7)
    gelu              ``layers.gelu``; float32: that erf, over cache-sized blocks
    depthwise_conv2d  ``conv_position_encoding.depthwise_conv2d``: k² shifted multiply-adds
                      over cache-sized chunks of images instead of one einsum over windows
    split_batch       ``[fn(x)]``: the batch split over threads, one per core

Nothing here checks its arguments: the callers have.
"""
from __future__ import annotations

import contextlib
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.special

# --- erf and GELU ------------------------------------------------------------------------------
# Rational approximation of erf for float32 on [-4, 4] (odd numerator of degree 13 over an even
# denominator of degree 8; outside [-4, 4] erf is ±1 in float32).  These are the published
# coefficients used by Eigen and XLA for single precision; the maximum absolute error against
# the exact erf is below 5e-7.
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
    for c in _ERF_NUM[1:-1]:  # Horner's rule: one pass per coefficient
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
    """``scipy.special.erf(x)``; for float32 a rational approximation, several times faster
    and within 5e-7 of the exact value (float32 itself resolves 6e-8 near 1)."""
    x = np.asarray(x)
    if x.dtype != np.float32:
        return scipy.special.erf(x)
    return _erf_rational(x.copy())


_GELU_BLOCK = 1 << 16  # float32 elements per block: 256 KB, so the temporaries stay in the cache


def gelu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``layers.gelu(x, out)``.  float32 uses the rational :func:`erf`, over blocks of 65,536
    elements: the erf is ~25 elementwise passes, and over a whole (B·N, 4C) activation each pass
    would stream megabytes through main memory, while a block's temporaries stay in the CPU
    cache (about 2× faster).  The loop is over memory blocks, not tokens: every element gets
    the same arithmetic.  Other dtypes use SciPy's erf, as ``layers.gelu`` does."""
    x = np.asarray(x)
    if out is None:
        out = np.empty(x.shape, dtype=np.result_type(x, np.float32))  # C order
    if x.dtype != np.float32:
        out[...] = 0.5 * x * (1.0 + scipy.special.erf(x / math.sqrt(2.0)))
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


# --- depthwise convolution ---------------------------------------------------------------------
_CHUNK_BYTES = 1 << 21  # images per chunk of the tap sum: ~2 MB of padded input stays in cache


def depthwise_conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
                     channels_last: bool = False) -> np.ndarray:
    """``conv_position_encoding.depthwise_conv2d(x, weight, bias, channels_last)``, computed as
    k² whole-array multiply-adds, one per kernel offset (i, j),

        out[b, y, x, c] += padded[b, y + i, x + j, c] · weight[c, 0, i, j],

    over chunks of images small enough to stay in the CPU cache (the einsum over
    ``sliding_window_view`` windows walks a strided 6-D view instead).  No loop over pixels."""
    xc = x if channels_last else np.moveaxis(x, 1, -1)  # (B, H, W, C), a view
    dtype = np.result_type(x, weight)
    w = np.ascontiguousarray(np.moveaxis(weight[:, 0], 0, -1), dtype=dtype)  # (k, k, C)
    out = _conv_taps(xc, w, w.shape[0] // 2, dtype)
    if bias is not None:  # in place, unless the bias's dtype promotes the result's
        out = np.add(out, bias, out=out if np.result_type(out, bias) == dtype else None)
    return out if channels_last else np.moveaxis(out, -1, 1)


def _pad_hw(x: np.ndarray, p: int, dtype) -> np.ndarray:
    """(B, H, W, C) -> (B, H + 2p, W + 2p, C) with a zero border."""
    B, H, W, C = x.shape
    padded = np.zeros((B, H + 2 * p, W + 2 * p, C), dtype=dtype)
    padded[:, p:p + H, p:p + W] = x
    return padded


def _conv_taps(x: np.ndarray, w: np.ndarray, p: int, dtype) -> np.ndarray:
    """(B, H, W, C) convolved with w (k, k, C), zero padding p  ->  (B, H, W, C) in dtype."""
    B, H, W, C = x.shape
    k = w.shape[0]
    out = np.empty((B, H, W, C), dtype=dtype)
    per_image = (H + 2 * p) * (W + 2 * p) * C * np.dtype(dtype).itemsize
    chunk = max(1, _CHUNK_BYTES // max(1, per_image))
    tmp = np.empty((min(chunk, B), H, W, C), dtype=dtype)
    for b0 in range(0, B, chunk):  # memory blocking over images, not a loop over pixels
        padded = _pad_hw(x[b0:b0 + chunk], p, dtype)
        o, t = out[b0:b0 + chunk], tmp[:len(padded)]
        np.multiply(padded[:, :H, :W], w[0, 0], out=o)
        for i, j in np.ndindex(k, k):  # one multiply-add per kernel offset
            if i or j:
                np.multiply(padded[:, i:i + H, j:j + W], w[i, j], out=t)
                o += t
    return out


# --- using several cores -----------------------------------------------------------------------
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
    threads (each with single-threaded BLAS); ``[fn(x)]``, in this thread, when only one
    thread is available or the batch has at most one item.  Concatenate the results to get
    ``fn(x)``.

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
