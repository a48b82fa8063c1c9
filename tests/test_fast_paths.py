"""Each fast path (``numpy_nn/_fast.py``, ``torch_nn/_fast.py``) equals the plain formula it
stands in for, and the models run the fast paths.

Tolerances, and where they come from:
* float64: the GELU twin and ``split_batch`` are bit-for-bit the formula; the depthwise
  convolution and the head mixing add the same terms in another order, within 1e-12.
* float32 erf: the rational approximation is within 5e-7 of the exact erf (float32 resolves 6e-8
  near 1).  GELU multiplies it by x/2, and both sides round a result of size |x| once:
  |fast - formula| <= (0.5 · 5e-7 + 2 · 2^-24) · max(1, |x|) < 4e-7 · max(1, |x|).
* float32 sums of n terms (the k² taps plus the bias; the h heads plus the bias): each side is
  within n · 2^-24 · Σ|term| of the exact sum, so the two differ by at most twice that.
"""
import math
import threading

import numpy as np
import pytest
import scipy.special
import torch

import vit_scratch
from vit_scratch.numpy_nn import _fast as np_fast
from vit_scratch.numpy_nn import conv_position_encoding as np_cpe
from vit_scratch.numpy_nn import layers as np_layers
from vit_scratch.torch_nn import _fast as t_fast
from vit_scratch.torch_nn import attention as t_attn

EPS32 = 2.0 ** -24  # float32 unit roundoff
F64 = 1e-12


def _layouts(x):
    """x in C order, Fortran order, transposed and as a strided view (same values)."""
    return {"C": np.ascontiguousarray(x), "F": np.asfortranarray(x),
            "T": np.ascontiguousarray(x.T).T, "strided": np.repeat(x, 2, axis=-1)[..., ::2]}


# --- erf and GELU -------------------------------------------------------------------------------
def test_erf_float32_within_5e_7_of_the_exact_erf():
    x = np.linspace(-8, 8, 400_001).astype(np.float32)
    got = np_fast.erf(x)
    assert got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - scipy.special.erf(x.astype(np.float64))).max()
    assert err < 5e-7, err
    edges = np_fast.erf(np.array([np.inf, -np.inf, np.nan, 0.0], np.float32))
    np.testing.assert_array_equal(edges, [1.0, -1.0, np.nan, 0.0])
    x64 = x.astype(np.float64)
    np.testing.assert_array_equal(np_fast.erf(x64), scipy.special.erf(x64))  # SciPy's, exactly


def _check_gelu(x, fast):
    plain = np_layers.gelu(x)
    assert fast.dtype == plain.dtype and fast.shape == x.shape
    if x.dtype == np.float64:
        np.testing.assert_array_equal(fast, plain)
    else:
        bound = 4e-7 * np.maximum(1.0, np.abs(x.astype(np.float64)))
        assert (np.abs(fast.astype(np.float64) - plain) <= bound).all()


# 1 element, odd 2-D and 3-D shapes, one GELU block plus 17 elements, three whole blocks
@pytest.mark.parametrize("shape", [(1,), (7, 13), (3, 5, 11), (1, 65536 + 17), (3, 65536)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_equals_the_formula(rng, shape, dtype):
    x = (4.0 * rng.standard_normal(shape)).astype(dtype)
    x.flat[0] = 0.0
    _check_gelu(x, np_fast.gelu(x))
    inplace = x.copy()
    assert np_fast.gelu(inplace, out=inplace) is inplace
    np.testing.assert_array_equal(inplace, np_fast.gelu(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_any_memory_order_and_out(rng, dtype):
    base = (4.0 * rng.standard_normal((33, 65))).astype(dtype)
    expected = np_fast.gelu(base)
    for name, x in _layouts(base).items():
        np.testing.assert_array_equal(np_fast.gelu(x), expected, err_msg=name)
        out = np.empty_like(x)  # keeps x's layout, so some outs are not C-contiguous
        assert np_fast.gelu(x, out=out) is out
        np.testing.assert_array_equal(out, expected, err_msg=name)
        if name != "strided":
            inplace = x.copy(order="K")
            np_fast.gelu(inplace, out=inplace)
            np.testing.assert_array_equal(inplace, expected, err_msg=name)


def test_gelu_extremes_and_empty():
    x = np.array([-1e30, -1e4, -50.0, -4.5, 4.5, 50.0, 1e4, 1e30], np.float32)
    _check_gelu(x, np_fast.gelu(x))
    special = np.array([np.inf, np.nan], np.float32)
    np.testing.assert_array_equal(np_fast.gelu(special), np_layers.gelu(special))  # inf, nan
    for dtype in (np.float32, np.float64):
        empty = np.empty((0, 5), dtype)
        assert np_fast.gelu(empty).shape == (0, 5) and np_fast.gelu(empty).dtype == dtype


# --- depthwise convolution ----------------------------------------------------------------------
def _check_conv(x, w, b, channels_last):
    fast = np_fast.depthwise_conv2d(x, w, b, channels_last=channels_last)
    plain = np_cpe.depthwise_conv2d(x, w, b, channels_last=channels_last)
    assert fast.dtype == plain.dtype and fast.shape == plain.shape == x.shape
    if np.result_type(x, w) == np.float64:  # the dtype the sum is computed in
        assert np.abs(fast - plain).max(initial=0.0) < F64
    else:  # both within (k² + 1) · 2^-24 · Σ|term| of the exact sum
        n = w.shape[-1] ** 2 + 1
        terms = np_cpe.depthwise_conv2d(np.abs(x.astype(np.float64)), np.abs(w),
                                        None if b is None else np.abs(b), channels_last)
        assert (np.abs(fast.astype(np.float64) - plain) <= 2 * n * EPS32 * terms).all()


@pytest.mark.parametrize("k", [1, 3, 5, 7])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels_last", [False, True])
def test_depthwise_conv_equals_the_formula(rng, k, dtype, channels_last):
    # an odd, non-square grid smaller than the 7×7 window; batches of 1 and 3
    for B in (1, 3):
        shape = (B, 5, 3, 6) if channels_last else (B, 6, 5, 3)
        x = rng.standard_normal(shape).astype(dtype)
        w, b = rng.standard_normal((6, 1, k, k)).astype(dtype), rng.standard_normal(6).astype(dtype)
        _check_conv(x, w, b, channels_last)
        _check_conv(x, w, None, channels_last)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_conv_any_memory_order_chunks_and_empty_batch(rng, dtype, monkeypatch):
    w, b = rng.standard_normal((4, 1, 3, 3)).astype(dtype), rng.standard_normal(4).astype(dtype)
    base = rng.standard_normal((5, 7, 9, 4)).astype(dtype)
    for name, x in {"C": base, "F": np.asfortranarray(base), "strided": base[:, :, ::2],
                    "transposed": base.transpose(0, 2, 1, 3)}.items():
        _check_conv(x, w, b, channels_last=True)
    _check_conv(np.moveaxis(base, -1, 1), w, b, channels_last=False)  # a channels-first view
    monkeypatch.setattr(np_fast, "_CHUNK_BYTES", 2 * 9 * 11 * 4 * np.dtype(dtype).itemsize)
    _check_conv(base, w, b, channels_last=True)  # chunks of 2 images: 2 + 2 + 1
    _check_conv(base[:0], w, b, channels_last=True)  # batch 0


def test_depthwise_conv_mixed_dtypes_promote_like_the_formula(rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    w, b = rng.standard_normal((3, 1, 3, 3)), rng.standard_normal(3)  # float64
    _check_conv(x, w, b, channels_last=False)
    _check_conv(x, w.astype(np.float32), b, channels_last=False)
    assert np_fast.depthwise_conv2d(x, w.astype(np.float32), None).dtype == np.float32


# --- threads over a batch ---------------------------------------------------------------------
def test_split_batch_concatenates_to_fn_of_the_batch(rng, monkeypatch):
    x = rng.standard_normal((5, 6, 7))
    w = rng.standard_normal((7, 7))
    seen = []

    def fn(chunk):  # elementwise and BLAS work; records the thread count it sees
        seen.append((threading.current_thread() is threading.main_thread(), np_fast.num_threads()))
        return np_fast.gelu(chunk @ w)

    expected = fn(x)
    for threads in (1, 2, 3, 8):
        parts = np_fast.split_batch(fn, x, threads=threads)
        assert len(parts) == min(threads, len(x))
        assert np.abs(np.concatenate(parts) - expected).max() < F64
    assert [len(c) for c in np_fast.split_batch(lambda c: c, x, threads=3)] == [1, 2, 2]
    in_workers = {n for main, n in seen if not main}
    assert in_workers == {1}  # inside a worker the room uses one thread: no nested pools
    for batch in (x[:0], x[:1]):  # batch 0 and 1: fn(x) in this thread
        parts = np_fast.split_batch(fn, batch, threads=4)
        assert len(parts) == 1 and parts[0].shape == (len(batch), 6, 7)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert np_fast.num_threads() == 3
    assert len(np_fast.split_batch(lambda c: c, x)) == 3


# --- head mixing (PyTorch) ----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [0, 1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_mix_heads_equals_the_einsum_forward_and_backward(dtype, batch, bias):
    g = torch.Generator().manual_seed(batch)
    # 4 heads -> 5, N_q = 7 queries, N_k = 6 keys; attn a transposed (non-contiguous) view
    attn = torch.randn(batch, 4, 6, 7, generator=g, dtype=dtype).transpose(-1, -2)
    weight = torch.randn(5, 4, generator=g, dtype=dtype)
    b = torch.randn(5, generator=g, dtype=dtype) if bias else None
    grad_out = torch.randn(batch, 5, 7, 6, generator=g, dtype=dtype)
    results = []
    for mix in (t_fast.mix_heads, t_attn.mix_heads):
        leaves = [t.clone().requires_grad_() for t in (attn, weight) + ((b,) if bias else ())]
        out = mix(*leaves)
        out.backward(grad_out)
        results.append([out.detach()] + [t.grad for t in leaves])
    fast, plain = results
    assert fast[0].shape == (batch, 5, 7, 6) and fast[0].dtype == dtype
    assert fast[0].is_contiguous()
    n = batch * 7 * 6  # terms of the weight's and the bias's gradients
    a, w, go = attn.abs(), weight.abs(), grad_out.abs()
    sizes = [(5, torch.einsum("bhqk,gh->bgqk", a, w) + (b.abs().view(-1, 1, 1) if bias else 0)),
             (5, torch.einsum("bgqk,gh->bhqk", go, w)),   # d attn
             (n, torch.einsum("bgqk,bhqk->gh", go, a)),  # d weight
             (n, go.sum(dim=(0, 2, 3)))]                  # d bias
    for f, p, (terms, sum_of_abs) in zip(fast, plain, sizes):
        if dtype == torch.float64:
            assert f.numel() == 0 or (f - p).abs().max().item() < F64
        else:  # both within terms · 2^-24 · Σ|term| of the exact sum
            assert ((f - p).abs() <= 2 * terms * EPS32 * sum_of_abs).all()


# --- the models run the fast paths, and the plain formulas give the same logits -----------------
def _plain_paths(monkeypatch):
    monkeypatch.setattr(np_fast, "gelu", np_layers.gelu)
    monkeypatch.setattr(np_fast, "depthwise_conv2d", np_cpe.depthwise_conv2d)
    monkeypatch.setattr(np_fast, "split_batch", lambda fn, x, threads=None: [fn(x)])
    monkeypatch.setattr(t_fast, "mix_heads", t_attn.mix_heads)


def _counting(monkeypatch, module, name, calls):
    fn = getattr(module, name)

    def counted(*args, **kwargs):
        calls[name] = calls.get(name, 0) + 1
        return fn(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("name", ["cait_digits", "coat_digits"])
def test_models_run_the_fast_paths_and_equal_the_formulas(name, monkeypatch):
    model = vit_scratch.create_model(name).double().eval()
    vit_scratch.randomize_weights_(model, seed=0, std=0.2)
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(model.state_dict()))
    x = torch.randn(3, model.cfg.in_chans, *model.cfg.img_size, generator=torch.Generator()
                    .manual_seed(0), dtype=torch.float64)
    with monkeypatch.context() as m:
        calls = {}
        for module, fn in [(np_fast, "gelu"), (np_fast, "depthwise_conv2d"),
                           (np_fast, "split_batch"), (t_fast, "mix_heads")]:
            _counting(m, module, fn, calls)
        with torch.no_grad():
            fast_pt = model(x)
        fast_np = np_model(x.numpy())
        expected = {"gelu"} | ({"depthwise_conv2d", "split_batch"} if "coat" in name
                               else {"mix_heads"})
        assert set(calls) == expected
    with monkeypatch.context() as m:
        _plain_paths(m)
        with torch.no_grad():
            plain_pt = model(x)
        plain_np = np_model(x.numpy())
    scale = math.sqrt(fast_pt.square().mean().item())
    assert scale > 1e-3
    assert (fast_pt - plain_pt).abs().max().item() < F64 * scale
    assert np.abs(fast_np - plain_np).max() < F64 * scale
