"""HIDDEN TESTS -- instructors only. Notebook 10: backprop by hand.

Every gradient is compared with PyTorch autograd on the same inputs (float64), on many shapes;
the classic slips are recomputed here so the feedback can name them."""
import math

import numpy as np
import torch
import torch.nn.functional as F

from exercises.feedback import Fail, close
from exercises.grader.judge import exercise

from .references import NUMPY_ONLY, N, T, rng

MOD = "ex10_backprop"
NO_SCIPY_SOFTMAX = NUMPY_ONLY + ("scipy.special.softmax", "scipy.special.log_softmax")
WRONG_AXIS = ("summed over the wrong axis: a parameter used at every position gets the sum of "
              "the gradients over every axis but its own (batch and tokens)")
DIAGONAL_ONLY = ("only the diagonal of the softmax Jacobian, p ⊙ (1 − p) ⊙ dout as for a sigmoid: each input "
                 "moves every output of its row, so dx = p ⊙ (dout − Σ dout ⊙ p)")
OVERFLOW = ("NaN or inf for large scores: the forward softmax overflowed -- subtract each row's maximum "
            "before exp()")


def _grads(fn, arrays, dout):
    """Autograd's gradients of ``fn(*arrays)`` contracted with ``dout`` (float64)."""
    ts = [T(np.asarray(a, dtype=np.float64)).requires_grad_() for a in arrays]
    out = fn(*ts)
    out.backward(T(np.asarray(dout, dtype=np.float64)))
    return [N(t.grad) if t.grad is not None else np.zeros(tuple(t.shape)) for t in ts]


def _tuple(got, n, what, names):
    if not isinstance(got, (tuple, list)) or len(got) != n:
        raise Fail(f"{what}: return the tuple ({', '.join(names)})")
    return got


def _shape_hint(got, expected, what):
    """A parameter gradient of the wrong shape: almost always a sum over the wrong axes."""
    shape = tuple(np.shape(got))
    if shape != tuple(expected.shape):
        raise Fail(f"{what}: expected shape {tuple(expected.shape)}, got {shape}: {WRONG_AXIS}")


# ---- 10.1 LayerNorm ---------------------------------------------------------------------------

def ln_forward(x, w, b, eps=1e-6):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=eps)


def ln_mistakes(dout, x, w, eps):
    mu = x.mean(-1, keepdims=True)
    sigma = np.sqrt(x.var(-1, keepdims=True) + eps)
    xhat = (x - mu) / sigma
    g = dout * w
    return [
        ((g - xhat * (g * xhat).mean(-1, keepdims=True)) / sigma,
         "the mean term is forgotten: μ depends on every channel, so dx has − mean(g) "
         "(g = dout · weight): dx = (g − mean(g) − x̂ · mean(g · x̂)) / σ"),
        ((g - g.mean(-1, keepdims=True)) / sigma,
         "the variance term is forgotten: σ depends on every channel too, so dx has "
         "− x̂ · mean(g · x̂)"),
        (g / sigma, "only the direct path: μ and σ depend on x, which adds − mean(g) and "
                    "− x̂ · mean(g · x̂)"),
    ]


@exercise("10.1", "layer_norm_backward", MOD, 10, forbid=NUMPY_ONLY)
def layer_norm_backward(g):
    f = g.fn("layer_norm_backward")

    def check(shape, seed, what, eps=1e-6, dtype=np.float64, atol=1e-10):
        r = rng(seed)
        C = shape[-1]
        x = 2 + 3 * r.standard_normal(shape)
        w, b = 1 + r.standard_normal(C), r.standard_normal(C)
        dout = r.standard_normal(shape)
        dx, dw, db = _grads(lambda x_, w_, b_: ln_forward(x_, w_, b_, eps), (x, w, b), dout)
        args = [a.astype(dtype) for a in (dout, x, w)]
        got = _tuple(f(*args, eps=eps), 3, what, ("dx", "dweight", "dbias"))
        close(got[0], dx, f"{what}: dx", atol=atol, mistakes=ln_mistakes(dout, x, w, eps),
              dtype=None if dtype == np.float64 else dtype)
        for name, gv, ev in (("dweight", got[1], dw), ("dbias", got[2], db)):
            _shape_hint(gv, ev, f"{what}: {name}")
            close(gv, ev, f"{what}: {name}", atol=atol * 10)

    @g.part("(2, 3, 4) vs autograd", 3)
    def _():
        check((2, 3, 4), 1001, "x (2, 3, 4)")

    @g.part("random shapes vs autograd (2-D to 4-D, one channel more or less, eps)", 4)
    def _():
        for i, shape in enumerate([(5, 8), (2, 7, 6), (3, 2, 4, 5), (1, 1, 3), (4, 16)]):
            check(shape, 1010 + i, f"x {shape}", eps=1e-5 if i % 2 else 1e-6)

    @g.part("float32 in, float32 out", 1)
    def _():
        check((2, 5, 8), 1020, "float32", dtype=np.float32, atol=1e-4)

    def make(n=3):
        r = rng(1030)
        x = r.standard_normal((2, n, 8))
        return f.later(x, x, np.ones(8))

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16)},
               requires=["random shapes vs autograd (2-D to 4-D, one channel more or less, eps)"])


# ---- 10.2 softmax -----------------------------------------------------------------------------

def softmax_mistakes(dout, p, axis):
    return [
        (-p * (dout * p).sum(axis=axis, keepdims=True),
         "the softmax Jacobian is missing its diagonal: ∂p_i/∂x_j = p_i (δ_ij − p_j) has the "
         "term p_i δ_ij, so dx = p ⊙ (dout − Σ dout ⊙ p)"),
        (p * dout, "the Jacobian's − p_i p_j term is missing: it adds − p ⊙ Σ(dout ⊙ p)"),
        (p * (1 - p) * dout, DIAGONAL_ONLY),
        (p * (dout - (dout * p).sum(axis=-1, keepdims=True)),
         "summed over the last axis: the sum runs along `axis`, the axis the softmax normalises"),
    ]


@exercise("10.2", "softmax_backward", MOD, 10, forbid=NO_SCIPY_SOFTMAX)
def softmax_backward(g):
    f = g.fn("softmax_backward")

    def check(shape, axis, seed, what, dtype=np.float64, atol=1e-12, scale=1.0):
        r = rng(seed)
        x, dout = scale * r.standard_normal(shape), r.standard_normal(shape)
        p = N(torch.softmax(T(x), dim=axis))
        (dx,) = _grads(lambda t: torch.softmax(t, dim=axis), (x,), dout)
        got = f(dout.astype(dtype), p.astype(dtype), axis=axis)
        close(got, dx, what, atol=atol, mistakes=softmax_mistakes(dout, p, axis),
              dtype=None if dtype == np.float64 else dtype)

    @g.part("one row of 4 vs autograd", 3)
    def _():
        check((4,), -1, 2001, "softmax of (4,)")

    @g.part("random shapes and axes vs autograd (negative axes too)", 4)
    def _():
        for i, (shape, axis) in enumerate([((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1),
                                           ((2, 3, 4), -3), ((2, 2, 3, 6), 2), ((1, 7), 1)]):
            check(shape, axis, 2010 + i, f"shape {shape}, axis {axis}")

    @g.part("float32 in, float32 out; peaked rows", 1)
    def _():
        check((4, 6), -1, 2020, "float32", dtype=np.float32, atol=1e-6)
        check((3, 5), -1, 2021, "scores in the tens (p close to one-hot)", scale=30.0)

    def make(n=3):
        r = rng(2030)
        p = N(torch.softmax(T(r.standard_normal((2, n, 5))), dim=-1))
        return f.later(p, p, axis=-1)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16)},
               requires=["random shapes and axes vs autograd (negative axes too)"])


# ---- 10.3 class attention ---------------------------------------------------------------------

class _DiagonalSoftmax(torch.autograd.Function):
    """A softmax whose backward keeps only the Jacobian's diagonal, p (1 − p): the slip to name."""

    @staticmethod
    def forward(ctx, s):
        p = torch.softmax(s, dim=-1)
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, grad):
        (p,) = ctx.saved_tensors
        return p * (1 - p) * grad


def class_attention_torch(x, wq, wk, wv, h, class_query=True, softmax=None):
    B, n, C = x.shape
    d = C // h
    q = (x[:, :1] @ wq.T).reshape(B, 1, h, d).transpose(1, 2)
    k = (x @ wk.T).reshape(B, n, h, d).transpose(1, 2)
    v = (x @ wv.T).reshape(B, n, h, d).transpose(1, 2)
    if not class_query:  # the slip: the query treated as a constant (no gradient to x)
        q = q.detach()
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    a = torch.softmax(s, dim=-1) if softmax is None else softmax(s)
    return (a @ v).transpose(1, 2).reshape(B, 1, C)


@exercise("10.3", "class_attention_backward", MOD, 12, forbid=NUMPY_ONLY)
def class_attention_backward(g):
    f = g.fn("class_attention_backward")

    def check(B, n, C, h, seed, what, dtype=np.float64, atol=1e-10, scale=1.0):
        r = rng(seed)
        x = scale * r.standard_normal((B, n, C))
        ws = [r.standard_normal((C, C)) / math.sqrt(C) for _ in range(3)]
        dout = r.standard_normal((B, 1, C))
        expected = _grads(lambda *t: class_attention_torch(*t, h), (x, *ws), dout)
        no_query = _grads(lambda *t: class_attention_torch(*t, h, class_query=False), (x, *ws), dout)
        diagonal = _grads(lambda *t: class_attention_torch(*t, h, softmax=_DiagonalSoftmax.apply), (x, *ws), dout)
        got = _tuple(f(*(a.astype(dtype) for a in (dout, x, *ws)), h), 4, what,
                     ("dx", "dq_weight", "dk_weight", "dv_weight"))
        if scale > 1:
            for name, gv in zip(("dx", "dq_weight", "dk_weight", "dv_weight"), got):
                if not np.isfinite(np.asarray(gv, dtype=float)).all():
                    raise Fail(f"{what}: {name}: {OVERFLOW}")
        rtol = 1e-9 if scale > 1 else 0.0
        close(got[0], expected[0], f"{what}: dx", atol=atol, rtol=rtol, dtype=None if dtype == np.float64 else dtype,
              mistakes=[(no_query[0], "the class token's query path is missing: x[:, 0] also makes "
                                      "q, so dx[:, 0] gets dq @ q_weight as well"),
                        (diagonal[0], DIAGONAL_ONLY)])
        for name, gv, ev, dv in zip(("dq_weight", "dk_weight", "dv_weight"), got[1:], expected[1:], diagonal[1:]):
            _shape_hint(gv, ev, f"{what}: {name}")
            close(gv, ev, f"{what}: {name}", atol=atol * 10, rtol=rtol,
                  mistakes=([(ev / B, "averaged over the batch: a weight's gradient is the sum "
                                      "over the batch and the tokens")] if B > 1 else []) + [(dv, DIAGONAL_ONLY)])

    @g.part("one image, 3 tokens, 1 head vs autograd", 3)
    def _():
        check(1, 3, 4, 1, 3001, "B=1, N=3, C=4, 1 head")

    @g.part("random shapes vs autograd (batch, tokens, heads), large scores too", 5)
    def _():
        for i, (B, n, C, h) in enumerate([(2, 5, 8, 2), (3, 4, 6, 3), (1, 1, 4, 2), (2, 9, 12, 4)]):
            check(B, n, C, h, 3010 + i, f"B={B}, N={n}, C={C}, {h} heads")
        check(2, 6, 8, 2, 3015, "scores in the thousands", atol=1e-7, scale=60.0)

    @g.part("float32 in, float32 out", 1)
    def _():
        check(2, 5, 8, 2, 3020, "float32", dtype=np.float32, atol=1e-4)

    def make(n=3, h=2):
        r = rng(3030)
        C = 2 * h
        x, w = r.standard_normal((1, n, C)), np.eye(C)
        return f.later(r.standard_normal((1, 1, C)), x, w, w, w, h)

    g.no_loops(3, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random shapes vs autograd (batch, tokens, heads), large scores too"])


# ---- 10.4 factorized attention ----------------------------------------------------------------

def factorized_torch(q, k, v, softmax_dim=-2):
    kt = torch.softmax(k, dim=softmax_dim)
    return (q @ (kt.transpose(-2, -1) @ v)) / math.sqrt(q.shape[-1])


def factorized_mistakes(dout, q, k, v):
    s = 1 / math.sqrt(q.shape[-1])
    kt = N(torch.softmax(T(k), dim=-2))
    dkv = s * np.swapaxes(q, -1, -2) @ dout
    dkt = v @ np.swapaxes(dkv, -1, -2)
    return [
        (kt * (dkt - (dkt * kt).sum(axis=-1, keepdims=True)),
         "the softmax backward summed over the channels: k's softmax runs down the tokens "
         "(axis -2), so its backward sums over the tokens (axis -2) too"),
        (kt * dkt, "the softmax Jacobian is missing its off-diagonal term: subtract "
                   "k̃ ⊙ Σ_tokens(dk̃ ⊙ k̃)"),
        (kt * (1 - kt) * dkt, "only the diagonal of the softmax Jacobian, k̃ ⊙ (1 − k̃) ⊙ dk̃ as for a "
                              "sigmoid: each key moves the whole column of k̃, so "
                              "dk = k̃ ⊙ (dk̃ − Σ_tokens dk̃ ⊙ k̃)"),
        (_grads(lambda *t: factorized_torch(*t, softmax_dim=-1), (q, k, v), dout)[1],
         "the softmax over the channels: CoaT's k̃ = softmax(k) runs over the tokens (axis -2)"),
    ]


@exercise("10.4", "factorized_attention_backward", MOD, 12, forbid=NO_SCIPY_SOFTMAX)
def factorized_attention_backward(g):
    f = g.fn("factorized_attention_backward")

    def check(lead, n, d, dv, seed, what, dtype=np.float64, atol=1e-10):
        r = rng(seed)
        q, k = r.standard_normal(lead + (n, d)), r.standard_normal(lead + (n, d))
        v, dout = r.standard_normal(lead + (n, dv)), r.standard_normal(lead + (n, dv))
        expected = _grads(factorized_torch, (q, k, v), dout)
        got = _tuple(f(*(a.astype(dtype) for a in (dout, q, k, v))), 3, what, ("dq", "dk", "dv"))
        hints = {"dk": factorized_mistakes(dout, q, k, v)}
        for name, gv, ev in zip(("dq", "dk", "dv"), got, expected):
            close(gv, ev, f"{what}: {name}", atol=atol, mistakes=hints.get(name, ()),
                  dtype=None if dtype == np.float64 else dtype)

    @g.part("one head, 4 tokens, d = 3 vs autograd", 3)
    def _():
        check((1,), 4, 3, 3, 4001, "(1, 4, 3)")

    @g.part("random shapes vs autograd (leading axes, d_v != d, one token)", 5)
    def _():
        for i, (lead, n, d, dv) in enumerate([((2, 3), 6, 4, 4), ((2,), 5, 3, 7), ((), 9, 8, 2),
                                              ((1, 2), 1, 4, 4), ((2, 2), 16, 2, 5)]):
            check(lead, n, d, dv, 4010 + i, f"q {lead + (n, d)}, v {lead + (n, dv)}")

    @g.part("float32 in, float32 out", 1)
    def _():
        check((2, 2), 6, 4, 4, 4020, "float32", dtype=np.float32, atol=1e-5)

    def make(n=3, h=2):
        r = rng(4030)
        q = r.standard_normal((h, n, 4))
        return f.later(q, q, q, q)

    g.no_loops(3, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random shapes vs autograd (leading axes, d_v != d, one token)"])
