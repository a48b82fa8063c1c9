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


def _once(fn):
    """``fn()``, computed at the first call and kept: a slip's values are computed only when a
    result is wrong."""
    kept = []

    def get():
        if not kept:
            kept.append(fn())
        return kept[0]

    return get


def _tuple(got, n, what, names):
    if not isinstance(got, (tuple, list)) or len(got) != n:
        raise Fail(f"{what}: return the tuple ({', '.join(names)})")
    return got


def _shape_hint(got, expected, what):
    """A parameter gradient of the wrong shape: almost always a sum over the wrong axes."""
    shape = tuple(np.shape(got))
    if shape != tuple(expected.shape):
        raise Fail(f"{what}: expected shape {tuple(expected.shape)}, got {shape}: {WRONG_AXIS}")


# ---- 10.1 GELU, tanh form -------------------------------------------------------------------

GELU_C = math.sqrt(2.0 / math.pi)


def gelu_tanh_mistakes(dout, x):
    t = np.tanh(GELU_C * (x + 0.044715 * x ** 3))
    du = GELU_C * (1 + 3 * 0.044715 * x * x)
    cdf = 0.5 * (1 + N(torch.erf(T(x / math.sqrt(2)))))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return [
        (dout * (cdf + x * pdf), "this is the exact GELU's derivative, Φ(x) + x·φ(x): the tanh form "
                                 "differentiates ½·x·(1 + tanh(u)), u = √(2/π)(x + 0.044715·x³)"),
        (dout * 0.5 * (1 + t), "only ½(1 + tanh u): x also appears inside u, so the product rule adds "
                               "½·x·(1 − tanh²u)·u′"),
        (dout * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C),
         "u′ is missing the cubic term's derivative: u′ = √(2/π)·(1 + 3·0.044715·x²)"),
        (dout * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (1 + 3 * 0.044715 * x * x)),
         "u′ is missing its factor √(2/π): u′ = √(2/π)·(1 + 3·0.044715·x²)"),
        (dout * (0.5 * (1 + t) + 0.5 * x * (1 - t) * du), "tanh′(u) = 1 − tanh²(u), not 1 − tanh(u)"),
    ]


@exercise("10.1", "gelu_tanh_backward", MOD, 8, forbid=NUMPY_ONLY)
def gelu_tanh_backward(g):
    f = g.fn("gelu_tanh_backward")

    def check(x, seed, what, dtype=np.float64, atol=1e-12):
        dout = rng(seed).standard_normal(x.shape)
        (dx,) = _grads(lambda t: F.gelu(t, approximate="tanh"), (x,), dout)
        got = f(dout.astype(dtype), x.astype(dtype))
        close(got, dx, what, atol=atol, mistakes=lambda: gelu_tanh_mistakes(dout, x),
              dtype=None if dtype == np.float64 else dtype)

    @g.part("worked values: x = 0, ±0.5, ±1, ±3 vs autograd", 2)
    def _():
        check(np.array([0.0, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0]), 1001, "gelu_tanh_backward at 0, ±0.5, ±1, ±3")

    @g.part("random shapes vs autograd (1-D to 4-D)", 3)
    def _():
        r = rng(1010)
        for i, shape in enumerate([(7,), (3, 5), (2, 3, 4), (2, 1, 3, 6), (1,)]):
            check(2.5 * r.standard_normal(shape), 1011 + i, f"x of shape {shape}")

    @g.part("float32 in, float32 out", 1)
    def _():
        check(2 * rng(1020).standard_normal((4, 6)), 1021, "float32", dtype=np.float32, atol=1e-6)

    @g.part("large |x| stays finite (tanh saturates)", 1)
    def _():
        x = np.array([-60.0, -25.0, -8.0, 8.0, 25.0, 60.0])
        dout = np.ones_like(x)
        got = f(dout, x)
        if np.shape(got) == x.shape and not np.isfinite(np.asarray(got, dtype=float)).all():
            raise Fail("NaN or inf for large |x|: tanh written with exp() overflows -- use np.tanh")
        check(x, 1022, "x = ±8, ±25, ±60")

    def make(n=3):
        x = rng(1030).standard_normal((2, n))
        return f.later(x, x)

    g.no_loops(1, make, {"entries": ({"n": 3}, {"n": 19}, 32)}, requires=["random shapes vs autograd (1-D to 4-D)"])


# ---- 10.2 talking heads -----------------------------------------------------------------------

def talking_heads_torch(q, k, v, wl, bl, ww, bw):
    """Talking-heads attention on split heads (B, h, N, d), in torch ops (for autograd)."""
    a = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    a = torch.einsum("gh,bhij->bgij", wl, a) + bl[:, None, None]
    a = torch.softmax(a, dim=-1)
    a = torch.einsum("gh,bhij->bgij", ww, a) + bw[:, None, None]
    return a @ v


def talking_heads_slip(dout, q, k, v, wl, bl, ww, bw, mix_back="transpose", weight_grad="gh",
                       softmax="full", scale=True, scaled_scores=True):
    """The backward with one slip switched on (NumPy, float64): the head mixes' backward with W
    instead of Wᵀ, the weight gradients transposed, the softmax backward as its diagonal or
    summed over the queries, no scale on dq and dk, proj_l's gradient against unscaled scores."""
    s = q.shape[-1] ** -0.5
    raw = q @ np.swapaxes(k, -1, -2)
    a = s * raw
    l = np.einsum("gh,bhij->bgij", wl, a) + bl[:, None, None]
    p = np.exp(l - l.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    w = np.einsum("gh,bhij->bgij", ww, p) + bw[:, None, None]
    back = "gh,bgij->bhij" if mix_back == "transpose" else "hg,bgij->bhij"
    grad_w = "bgij,bhij->gh" if weight_grad == "gh" else "bgij,bhij->hg"
    dv = np.swapaxes(w, -1, -2) @ dout
    dw = dout @ np.swapaxes(v, -1, -2)
    dww, dbw = np.einsum(grad_w, dw, p), dw.sum((0, 2, 3))
    dp = np.einsum(back, ww, dw)
    if softmax == "diagonal":
        dl = p * (1 - p) * dp
    else:
        dl = p * (dp - (dp * p).sum(-1 if softmax == "full" else -2, keepdims=True))
    dwl, dbl = np.einsum(grad_w, dl, a if scaled_scores else raw), dl.sum((0, 2, 3))
    da = np.einsum(back, wl, dl)
    f = s if scale else 1.0
    return f * da @ k, f * np.swapaxes(da, -1, -2) @ q, dv, dwl, dbl, dww, dbw


TH_NAMES = ("dq", "dk", "dv", "dproj_l_weight", "dproj_l_bias", "dproj_w_weight", "dproj_w_bias")
TH_SLIPS = [
    ({"mix_back": "plain"}, "a head mix's backward multiplies by Wᵀ: ∂L/∂a_h = Σ_g W[g, h]·∂L/∂l_g "
                            "(you mixed the gradients with W itself)"),
    ({"weight_grad": "hg"}, "the mix's weight gradient is transposed: ∂L/∂W[g, h] = Σ ∂L/∂l_g · a_h, "
                            "summed over batch, queries and keys (output head first, as in PyTorch's "
                            "(out, in) layout)"),
    ({"softmax": "diagonal"}, DIAGONAL_ONLY),
    ({"softmax": "queries"}, "the softmax backward summed over the queries: the softmax runs over the "
                             "keys (the last axis), so its backward sums over the keys"),
    ({"scale": False}, "missing the scale: a = s·q kᵀ, so dq = s·∂L/∂a k and dk = s·(∂L/∂a)ᵀ q"),
    ({"scaled_scores": False}, "proj_l mixes the scaled scores a = s·q kᵀ: its weight's gradient is "
                               "Σ ∂L/∂l_g · a_h with the scale s"),
]


@exercise("10.2", "talking_heads_backward", MOD, 12, forbid=NO_SCIPY_SOFTMAX)
def talking_heads_backward(g):
    f = g.fn("talking_heads_backward")

    def check(B, h, n, d, seed, what, dtype=np.float64, atol=1e-10, scale=1.0):
        r = rng(seed)
        q, k, v, dout = (r.standard_normal((B, h, n, d)) for _ in range(4))
        q = scale * q
        wl, ww = (r.standard_normal((h, h)) / math.sqrt(h) + np.eye(h) for _ in range(2))
        bl, bw = 0.3 * r.standard_normal(h), 0.3 * r.standard_normal(h)
        args = (q, k, v, wl, bl, ww, bw)
        expected = _grads(talking_heads_torch, args, dout)
        slips = _once(lambda: [(talking_heads_slip(dout, *args, **switch), text) for switch, text in TH_SLIPS])
        got = _tuple(f(*(a.astype(dtype) for a in (dout, *args))), 7, what, TH_NAMES)
        if scale > 1:
            for name, gv in zip(TH_NAMES, got):
                if not np.isfinite(np.asarray(gv, dtype=float)).all():
                    raise Fail(f"{what}: {name}: {OVERFLOW}")
        for i, (name, gv, ev) in enumerate(zip(TH_NAMES, got, expected)):
            if i >= 3:
                _shape_hint(gv, ev, f"{what}: {name}")
            close(gv, ev, f"{what}: {name}", atol=atol * (10 if i >= 3 else 1), rtol=1e-9 if scale > 1 else 0.0,
                  mistakes=lambda i=i: [(wrong[i], text) for wrong, text in slips()],
                  dtype=None if dtype == np.float64 else dtype)

    @g.part("one image, 2 heads, 3 tokens vs autograd", 3)
    def _():
        check(1, 2, 3, 2, 2001, "B=1, 2 heads, N=3, d=2")

    @g.part("random shapes vs autograd (batch, heads, tokens, d), large scores too", 5)
    def _():
        for i, (B, h, n, d) in enumerate([(2, 3, 5, 4), (3, 4, 2, 3), (1, 1, 4, 2), (2, 5, 7, 1), (1, 3, 1, 4)]):
            check(B, h, n, d, 2010 + i, f"B={B}, {h} heads, N={n}, d={d}")
        check(2, 3, 6, 4, 2016, "scores in the thousands", atol=1e-7, scale=60.0)

    @g.part("float32 in, float32 out", 1)
    def _():
        check(2, 3, 5, 4, 2020, "float32", dtype=np.float32, atol=1e-4)

    def make(n=3, h=2):
        r = rng(2030)
        q = r.standard_normal((1, h, n, 2))
        w, b = np.eye(h), np.zeros(h)
        return f.later(q, q, q, q, w, b, w, b)

    g.no_loops(3, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random shapes vs autograd (batch, heads, tokens, d), large scores too"])


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
        no_query = _once(lambda: _grads(lambda *t: class_attention_torch(*t, h, class_query=False), (x, *ws), dout))
        diagonal = _once(lambda: _grads(lambda *t: class_attention_torch(*t, h, softmax=_DiagonalSoftmax.apply),
                                        (x, *ws), dout))
        got = _tuple(f(*(a.astype(dtype) for a in (dout, x, *ws)), h), 4, what,
                     ("dx", "dq_weight", "dk_weight", "dv_weight"))
        if scale > 1:
            for name, gv in zip(("dx", "dq_weight", "dk_weight", "dv_weight"), got):
                if not np.isfinite(np.asarray(gv, dtype=float)).all():
                    raise Fail(f"{what}: {name}: {OVERFLOW}")
        rtol = 1e-9 if scale > 1 else 0.0
        close(got[0], expected[0], f"{what}: dx", atol=atol, rtol=rtol, dtype=None if dtype == np.float64 else dtype,
              mistakes=lambda: [(no_query()[0], "the class token's query path is missing: x[:, 0] also makes "
                                                "q, so dx[:, 0] gets dq @ q_weight as well"),
                                (diagonal()[0], DIAGONAL_ONLY)])
        for i, (name, gv, ev) in enumerate(zip(("dq_weight", "dk_weight", "dv_weight"), got[1:], expected[1:]), 1):
            _shape_hint(gv, ev, f"{what}: {name}")
            close(gv, ev, f"{what}: {name}", atol=atol * 10, rtol=rtol,
                  mistakes=lambda i=i, ev=ev: ([(ev / B, "averaged over the batch: a weight's gradient is the sum "
                                                         "over the batch and the tokens")] if B > 1 else [])
                  + [(diagonal()[i], DIAGONAL_ONLY)])

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


# ---- 10.4 conv-attention: factorized attention and CRPE ---------------------------------------

def conv_attention_torch(q, k, v, *kernels, size, layout="hd", softmax_dim=-2):
    """CoaT's factorized attention with its CRPE, on split heads (B, h, 1 + H·W, d), in torch
    ops (for autograd). ``kernels``: the groups' weights, then their biases. The slips:
    ``layout`` 'dh' (channel-major image of v), ``softmax_dim`` -1 (over the channels)."""
    B, h, n, d = q.shape
    H, W = size
    weights, biases = kernels[:len(kernels) // 2], kernels[len(kernels) // 2:]
    kt = torch.softmax(k, dim=softmax_dim)
    factorized = q @ (kt.transpose(-2, -1) @ v) * d ** -0.5
    img = v[:, :, 1:].permute(0, 1, 3, 2) if layout == "hd" else v[:, :, 1:].permute(0, 3, 1, 2)
    img = img.reshape(B, h * d, H, W)
    outs, start = [], 0
    for w, b in zip(weights, biases):
        c = w.shape[0]
        outs.append(F.conv2d(img[:, start:start + c], w, b, padding=(w.shape[-2] // 2, w.shape[-1] // 2), groups=c))
        start += c
    conv = torch.cat(outs, dim=1)
    conv = conv.reshape(B, h, d, H * W).permute(0, 1, 3, 2) if layout == "hd" else \
        conv.reshape(B, d, h, H * W).permute(0, 2, 3, 1)
    ev = torch.cat([torch.zeros_like(q[:, :, :1]), q[:, :, 1:] * conv], dim=2)
    return factorized + ev


def conv_attention_slips(dout, q, k, v, size, weights, biases, right):
    """[(the gradients with one slip, its name)]: each slip's gradients recomputed here from the
    parts of the correct ones, ``right`` (NumPy, float64), or by autograd of a wrong forward."""
    B, h, n, d = q.shape
    H, W = size
    s = d ** -0.5
    kern = (*weights, *biases)
    dq, dk, dv = right[:3]
    kt = N(torch.softmax(T(k), dim=-2))
    kv = np.swapaxes(kt, -1, -2) @ v
    dq_factorized = s * dout @ np.swapaxes(kv, -1, -2)
    dkt = v @ np.swapaxes(s * np.swapaxes(q, -1, -2) @ dout, -1, -2)
    dv_factorized = kt @ (s * np.swapaxes(q, -1, -2) @ dout)
    dq_crpe, dv_crpe = dq - dq_factorized, dv - dv_factorized
    unrotated = _grads(lambda v_: conv_attention_torch(T(q), T(k), v_, *(T(np.asarray(w[..., ::-1, ::-1]).copy())
                                                                          for w in weights),
                                                       *(T(b) for b in biases), size=size),
                       (v,), dout)[0] - dv_factorized
    n_w = len(weights)

    def with_(dq_=dq, dk_=dk, dv_=dv, dws=None):
        return [dq_, dk_, dv_, *(right[3:3 + n_w] if dws is None else dws), *right[3 + n_w:]]

    slips = [
        (with_(dq_=dq - dq_factorized + dq_factorized / s),
         "dq of the factorized term is missing its scale: out = s·q (k̃ᵀ v), so dq = s·dout (k̃ᵀ v)ᵀ"),
        (with_(dq_=dq - dq_crpe), "q reaches the output twice: EV = q ⊙ conv(v) adds dout ⊙ conv(v) to the "
                                  "image tokens' dq"),
        (with_(dv_=dv - dv_crpe), "v reaches the output twice: the convolution of EV sends its gradient back "
                                  "to v's image tokens too"),
        (with_(dv_=dv_factorized + unrotated), "the convolution's backward to its input needs the kernel "
                                               "rotated by 180° (a cross-correlation's transpose)"),
        (with_(dk_=kt * (dkt - (dkt * kt).sum(axis=-1, keepdims=True))),
         "the softmax backward summed over the channels: k's softmax runs down the tokens (axis -2), "
         "so its backward sums over the tokens too"),
        (with_(dk_=kt * (1 - kt) * dkt), "only the diagonal of the softmax Jacobian, k̃ ⊙ (1 − k̃) ⊙ dk̃: "
                                         "each key moves its whole column of k̃, so dk = k̃ ⊙ (dk̃ − Σ_tokens "
                                         "dk̃ ⊙ k̃)"),
        (with_(dws=[dw[..., ::-1, ::-1] for dw in right[3:3 + n_w]]),
         "the kernels' gradients are rotated by 180°: ∂L/∂w[c, 0, u, v] = Σ g[c, i, j]·x_pad[c, i + u, j + v], "
         "the window read in the forward's order"),
    ]
    if h > 1 and d > 1:
        slips.append((_grads(lambda *t: conv_attention_torch(*t, size=size, layout="dh"), (q, k, v, *kern), dout),
                      "channels are head-major: v's image is (B, h·d, H, W) with channel h_i·d + c, as in "
                      "Exercise 7.3"))
    return slips


def crpe_kernels(window, d, seed):
    r = rng(seed)
    weights = [r.standard_normal((heads * d, 1, k, k)) / k for k, heads in window.items()]
    return weights, [0.3 * r.standard_normal(heads * d) for heads in window.values()]


@exercise("10.4", "conv_attention_backward", MOD, 12, forbid=NUMPY_ONLY + ("scipy.signal", "scipy.ndimage"))
def conv_attention_backward(g):
    f = g.fn("conv_attention_backward")
    names = ("dq", "dk", "dv", "dweights", "dbiases")

    def check(B, H, W, d, window, seed, what, dtype=np.float64, atol=1e-10):
        r = rng(seed)
        h = sum(window.values())
        q, k, v, dout = (r.standard_normal((B, h, 1 + H * W, d)) for _ in range(4))
        weights, biases = crpe_kernels(window, d, seed + 1)
        expected = _grads(lambda *t: conv_attention_torch(*t, size=(H, W)), (q, k, v, *weights, *biases), dout)
        slips = _once(lambda: conv_attention_slips(dout, q, k, v, (H, W), weights, biases, expected))
        cast = lambda a: a.astype(dtype)  # noqa: E731
        got = _tuple(f(cast(dout), cast(q), cast(k), cast(v), (H, W), [cast(w) for w in weights],
                       [cast(b) for b in biases]), 5, what, names)
        flat = list(got[:3])
        for name, theirs, mine in (("dweights", got[3], weights), ("dbiases", got[4], biases)):
            if not isinstance(theirs, (tuple, list)) or len(theirs) != len(mine):
                raise Fail(f"{what}: {name} must be a list with one array per head group ({len(mine)} here)")
            flat += list(theirs)
        labels = ["dq", "dk", "dv"] + [f"dweights[{i}]" for i in range(len(weights))] + \
            [f"dbiases[{i}]" for i in range(len(biases))]
        for i, (label, gv, ev) in enumerate(zip(labels, flat, expected)):
            if i >= 3:
                _shape_hint(gv, ev, f"{what}: {label}")
            close(gv, ev, f"{what}: {label}", atol=atol * (10 if i >= 3 else 1),
                  mistakes=lambda i=i: [(wrong[i], text) for wrong, text in slips()],
                  dtype=None if dtype == np.float64 else dtype)

    @g.part("one head, a 2x3 grid, a 3x3 window vs autograd", 3)
    def _():
        check(1, 2, 3, 2, {3: 1}, 4001, "1 head, 2x3 grid, d=2, window {3: 1}")

    @g.part("random shapes vs autograd (head groups, non-square grids, d = 1)", 5)
    def _():
        for i, (B, H, W, d, window) in enumerate([(2, 3, 4, 2, {3: 2, 5: 1}), (1, 4, 2, 3, {3: 1, 5: 2, 7: 1}),
                                                  (2, 1, 5, 2, {5: 1, 3: 2}), (1, 3, 3, 1, {3: 3}),
                                                  (3, 2, 2, 4, {1: 1, 3: 1})]):
            check(B, H, W, d, window, 4010 + 10 * i, f"B={B}, {H}x{W} grid, d={d}, window {window}")

    @g.part("float32 in, float32 out", 1)
    def _():
        check(2, 3, 4, 2, {3: 1, 5: 1}, 4060, "float32", dtype=np.float32, atol=1e-4)

    def make(H=3, W=4, h=2):
        r = rng(4070)
        q = r.standard_normal((1, h, 1 + H * W, 2))
        weights, biases = crpe_kernels({3: h}, 2, 4071)
        return f.later(q, q, q, q, (H, W), weights, biases)

    g.no_loops(3, make, {"pixel rows": ({"H": 3}, {"H": 11}, 8), "pixel columns": ({"W": 4}, {"W": 12}, 8),
                         "heads": ({"h": 2}, {"h": 10}, 8)},
               requires=["random shapes vs autograd (head groups, non-square grids, d = 1)"])
