"""HIDDEN TESTS -- instructors only. Notebook 02: self-attention."""
import math

import numpy as np

from exercises.feedback import Fail, close, expect_error
from exercises.grader.judge import exercise

from .references import NUMPY_ONLY, attention, attention_grads, rng, softmax as ref_softmax

MOD = "ex02_self_attention"
NO_SCIPY_SOFTMAX = NUMPY_ONLY + ("scipy.special.softmax", "scipy.special.log_softmax",
                                 "scipy.special.logsumexp")
OVERFLOW = "NaN or inf for large scores: exp() overflowed -- subtract each row's maximum first"
DIAGONAL_ONLY = ("only the diagonal of the softmax Jacobian, P ⊙ (1 − P) ⊙ dP as for a sigmoid: each score "
                 "moves every weight of its row, so dS = P ⊙ (dP − rowsum(dP ⊙ P))")


def _finite(got, what):
    got = np.asarray(got, dtype=np.float64)
    if not np.isfinite(got).all():
        raise Fail(f"{what}: {OVERFLOW}")


@exercise("2.1", "softmax", MOD, 10, forbid=NO_SCIPY_SOFTMAX)
def softmax(g):
    f = g.fn("softmax")

    def mistakes(x, axis):
        e = np.exp(x - x.max())
        return [(ref_softmax(x, -1), "normalised along the last axis: use the `axis` argument "
                                     "(in max and sum, with keepdims=True)"),
                (e / e.sum(), "the whole array sums to 1: sum along `axis` only (keepdims=True)")]

    @g.part("worked example: [1000, 1001, 1002]", 2)
    def _():
        got = f(np.array([1000.0, 1001.0, 1002.0]))
        _finite(got, "softmax([1000, 1001, 1002])")
        e = np.exp([-2.0, -1.0, 0.0])
        close(got, e / e.sum(), "softmax([1000, 1001, 1002])", atol=1e-12)

    @g.part("random shapes and axes vs torch.softmax", 3)
    def _():
        r = rng(101)
        for shape, axis in [((4, 7), -1), ((2, 3, 5), 1), ((6,), 0), ((3, 4, 5), 0), ((2, 5, 3, 4), -2),
                            ((1, 9), 1), ((5, 1), 1), ((2, 3, 4), 2)]:
            x = 3.0 * r.standard_normal(shape)
            close(f(x, axis=axis), ref_softmax(x, axis), f"softmax over axis {axis} of {shape}",
                  atol=1e-12, mistakes=lambda: mistakes(x, axis))

    @g.part("float32 in, float32 out", 1)
    def _():
        x = (3 * rng(102).standard_normal((5, 6))).astype(np.float32)
        close(f(x), ref_softmax(x), "softmax of float32", atol=1e-6, dtype=np.float32)

    @g.part("large logits, rows far apart, -inf entries", 2)
    def _():
        x = np.array([[1e4, 1e4 + 1, 1e4 - 3], [0.0, 1.0, -2.0], [-1e4, -1e4 + 2, -1e4]])
        got = f(x)
        if np.asarray(got).shape == x.shape and not np.isfinite(np.asarray(got, dtype=float)).all():
            raise Fail("rows far below the largest entry come out as NaN: subtract each row's own "
                       "maximum (max along `axis`, keepdims=True), not one maximum for the array")
        close(got, ref_softmax(x), "rows around 1e4, 0 and -1e4", atol=1e-12)
        close(f(np.array([0.0, -np.inf, 1.0, -np.inf])), ref_softmax(np.array([0.0, -np.inf, 1.0, -np.inf])),
              "softmax with -inf entries (they get weight 0)", atol=1e-12)
        x32 = np.array([[80.0, 90.0, 100.0]], dtype=np.float32)
        _finite(f(x32), "float32 softmax of [80, 90, 100]")

    def make(rows=2, length=3):
        x = rng(103).standard_normal((rows, length))
        return f.later(x, axis=-1)

    g.no_loops(2, make, {"rows": ({"rows": 2}, {"rows": 18}, 16),
                         "entries": ({"length": 3}, {"length": 19}, 16)},
               requires=["random shapes and axes vs torch.softmax"])


def sdpa_mistakes(q, k, v, mask=None):
    d = q.shape[-1]
    out = [
        (attention(q, k, v, mask, scale="after"),
         f"your weights' rows sum to 1/√d = {1 / math.sqrt(d):.3g}, not 1: did you scale after the softmax?"),
        (attention(q, k, v, mask, scale="none"), "no 1/√d scale: divide the scores q kᵀ by √d"),
        (attention(q, k, v, mask, scale="d"), "scaled by 1/d: the scale is 1/√d"),
        (attention(q, k, v, mask, scale="times"), "the scores were multiplied by √d: divide them by √d "
                                                  "(the scale 1/√d keeps their variance near 1)"),
        (attention(q, k, v, mask, scale="dv") if v.shape[-1] != q.shape[-1] else np.zeros(0),
         "scaled by √d_v, the values' width: d in 1/√d is the width of q and k (d_k), which q kᵀ sums over"),
        (attention(q, k, v, mask, softmax_dim=-2),
         "the softmax runs over the queries (axis -2): each query's weights over the keys "
         "(axis -1) must sum to 1"),
        (attention(q, np.swapaxes(k, -1, -2), v, mask) if k.shape[-1] == k.shape[-2] else np.zeros(0),
         "k is not transposed: the scores are q kᵀ, (N_q, d) @ (d, N_k) -- without the transpose "
         "they only have a shape when N_k = d"),
    ]
    if mask is not None:
        out += [(attention(q, k, v), "the mask is ignored: set masked scores to -inf before the softmax"),
                (attention(q, k, v, mask, mask_mode="inverted"), "the mask is inverted: True means "
                                                                 "'may attend'"),
                (attention(q, k, v, mask, mask_mode="after"), "the masked weights were zeroed after "
                                                              "the softmax, so rows no longer sum to 1: "
                                                              "mask the scores before the softmax"),
                (attention(q, k, v, mask, mask_mode="multiply"), "the mask was multiplied into the scores: a "
                                                                 "masked score becomes 0, and e⁰ = 1 still gives "
                                                                 "its key weight -- set masked scores to -inf "
                                                                 "(np.where) before the softmax")]
    return out


@exercise("2.2", "scaled_dot_product_attention", MOD, 12, forbid=NO_SCIPY_SOFTMAX)
def scaled_dot_product_attention(g):
    f = g.fn("scaled_dot_product_attention")

    @g.part("worked example: one query, two keys, d = 4", 2)
    def _():
        q = np.array([[2 * math.log(3.0), 0, 0, 0]])          # scaled scores: ln 3 and 0
        k = np.array([[1.0, 0, 0, 0], [0, 0, 0, 0]])
        v = np.array([[4.0, 0.0], [0.0, 8.0]])
        close(f(q, k, v), [[3.0, 2.0]], "softmax(q kᵀ/2) v", atol=1e-12, mistakes=lambda: sdpa_mistakes(q, k, v))

    @g.part("random shapes: leading axes, N_q != N_k, d_v != d, N_k = d", 3)
    def _():
        r = rng(111)
        for lead, nq, nk, d, dv in [((2,), 3, 6, 6, 4), ((), 5, 5, 5, 5), ((), 5, 5, 8, 8), ((2,), 3, 7, 4, 6),
                                    ((2, 3), 6, 6, 16, 16), ((1, 1), 1, 4, 2, 3), ((3, 1, 2), 4, 1, 5, 2)]:
            q, k, v = (r.standard_normal(lead + s) for s in [(nq, d), (nk, d), (nk, dv)])
            close(f(q, k, v), attention(q, k, v), f"attention, q {q.shape}, k {k.shape}, v {v.shape}",
                  atol=1e-10, mistakes=lambda: sdpa_mistakes(q, k, v))

    @g.part("masks: causal, padding, per head", 2)
    def _():
        r = rng(112)
        q, k, v = (r.standard_normal((2, 3, 5, 4)) for _ in range(3))
        causal = np.tril(np.ones((5, 5), dtype=bool))
        pad = np.ones((2, 1, 1, 5), dtype=bool)
        pad[1, ..., 3:] = False
        full = r.random((2, 3, 5, 5)) < 0.6
        full[..., 0] = True                                    # every query sees key 0
        for name, m in [("causal (5, 5)", causal), ("padding (2, 1, 1, 5)", pad), ("(2, 3, 5, 5)", full)]:
            close(f(q, k, v, mask=m), attention(q, k, v, m), f"attention with a {name} mask",
                  atol=1e-10, mistakes=lambda: sdpa_mistakes(q, k, v, m))

    @g.part("float32 in, float32 out", 1)
    def _():
        q, k, v = (rng(113).standard_normal((2, 6, 8)).astype(np.float32) for _ in range(3))
        close(f(q, k, v), attention(q, k, v), "float32 attention", atol=1e-5, dtype=np.float32,
              mistakes=lambda: sdpa_mistakes(q, k, v))

    @g.part("large logits (scores in the hundreds)", 2)
    def _():
        r = rng(114)
        q, k, v = 30 * r.standard_normal((2, 4, 8)), 30 * r.standard_normal((2, 6, 8)), r.standard_normal((2, 6, 3))
        got = f(q, k, v)
        _finite(got, "attention with scores in the hundreds")
        close(got, attention(q, k, v), "attention with large scores", atol=1e-10,
              mistakes=lambda: sdpa_mistakes(q, k, v))

    def make(n=3, heads=2):
        q = rng(115).standard_normal((heads, n, 4))
        return f.later(q, q, q)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"heads": 2}, {"heads": 12}, 10)},
               requires=["random shapes: leading axes, N_q != N_k, d_v != d, N_k = d"])


@exercise("2.3", "padding_mask", MOD, 8, forbid=NUMPY_ONLY)
def padding_mask(g):
    f = g.fn("padding_mask")

    def ref(lengths, n):
        return (np.arange(n)[None, :] < np.asarray(lengths)[:, None])[:, None, None, :]

    def mistakes(lengths, n):
        m = ref(lengths, n)
        return [(m[:, 0, 0], "shape (B, N) does not broadcast against the scores (B, h, N, N): "
                             "return (B, 1, 1, N)"),
                (~m, "the mask is inverted: True marks the real tokens (may attend)"),
                (ref(np.asarray(lengths) + 1, n), "one key too many: key j is real when j < length"),
                (ref(np.asarray(lengths) - 1, n), "one key too few: key j is real when j < length")]

    @g.part("worked example: lengths [3, 1], 4 tokens", 2)
    def _():
        close(f(np.array([3, 1]), 4), ref([3, 1], 4), "padding_mask([3, 1], 4)", mistakes=lambda: mistakes([3, 1], 4))

    @g.part("random batches (lengths as an array or a list)", 2)
    def _():
        r = rng(121)
        for B, n in [(1, 1), (5, 7), (3, 16), (8, 2)]:
            lengths = r.integers(1, n + 1, size=B)
            close(f(lengths, n), ref(lengths, n), f"padding_mask of {B} lengths, {n} tokens",
                  mistakes=lambda: mistakes(lengths, n))
        close(f([2, 4], 4), ref([2, 4], 4), "padding_mask([2, 4], 4) with a list")

    @g.part("the real tokens' outputs equal the unpadded sequences'", 2,
            requires=["random batches (lengths as an array or a list)"])
    def _():
        r = rng(122)
        lengths, n = np.array([5, 2, 4]), 5
        x = r.standard_normal((3, 2, n, 4))                    # (B, h, N, d), padded
        m = np.asarray(f(lengths, n))
        out = attention(x, x, x, m)
        for b, L in enumerate(lengths):
            alone = attention(x[b:b + 1, :, :L], x[b:b + 1, :, :L], x[b:b + 1, :, :L])
            close(out[b:b + 1, :, :L], alone, f"sequence {b} (length {L}) in the padded batch", atol=1e-12)

    @g.part("ValueError for a length of 0 or longer than num_tokens", 1,
            requires=["random batches (lengths as an array or a list)"])
    def _():
        expect_error(ValueError, lambda: f(np.array([2, 0]), 4), "length 0", mention="0")
        expect_error(ValueError, lambda: f(np.array([5, 2]), 4), "length 5 > 4 tokens", mention="5")

    def make(B=2, n=4):
        lengths = np.ones(B, dtype=int)
        return f.later(lengths, n)

    g.no_loops(1, make, {"sequences": ({"B": 2}, {"B": 18}, 16), "tokens": ({"n": 4}, {"n": 20}, 16)},
               requires=["random batches (lengths as an array or a list)"])


@exercise("2.4", "split_heads / merge_heads", MOD, 10, forbid=NUMPY_ONLY + ("einops",))
def split_merge_heads(g):
    split, merge = g.fn("split_heads"), g.fn("merge_heads")

    def ref_split(x, h):
        B, n, C = x.shape
        return x.reshape(B, n, h, C // h).transpose(0, 2, 1, 3)

    def split_mistakes(x, h):
        B, n, C = x.shape
        return [(x.reshape(B, n, C // h, h).transpose(0, 3, 1, 2),
                 "heads are head-major: head 1 owns channels d..2d-1, you took every h-th channel "
                 "((d h) instead of (h d))"),
                (x.reshape(B, h, n, C // h), "a reshape to (B, h, N, d) without a transpose mixes "
                                             "tokens and heads: reshape to (B, N, h, d), then transpose")]

    @g.part("worked example: 6 channels, 3 heads", 2)
    def _():
        x = np.arange(12.0).reshape(1, 2, 6)
        got = split(x, 3)
        close(got, ref_split(x, 3), "split_heads(x, 3)", atol=0, mistakes=lambda: split_mistakes(x, 3))

    @g.part("split_heads on random shapes (one head, d = 1, one token)", 3)
    def _():
        r = rng(131)
        for B, n, C, h in [(2, 5, 12, 3), (1, 1, 8, 2), (3, 4, 6, 1), (2, 3, 5, 5), (1, 7, 64, 8)]:
            x = r.standard_normal((B, n, C))
            close(split(x, h), ref_split(x, h), f"split_heads of {x.shape} into {h} heads", atol=0,
                  mistakes=lambda: split_mistakes(x, h))

    @g.part("merge_heads inverts split_heads", 2)
    def _():
        r = rng(132)
        for B, h, n, d in [(2, 3, 5, 4), (1, 1, 3, 2), (3, 4, 1, 1)]:
            xh = r.standard_normal((B, h, n, d))
            expected = xh.transpose(0, 2, 1, 3).reshape(B, n, h * d)
            close(merge(xh), expected, f"merge_heads of {xh.shape}", atol=0,
                  mistakes=[(xh.reshape(B, n, h * d), "a plain reshape mixes tokens and heads: "
                                                      "transpose (B, h, N, d) -> (B, N, h, d) first"),
                            (xh.transpose(0, 2, 3, 1).reshape(B, n, h * d) if h > 1 and d > 1 else np.zeros(0),
                             "merged in (d h) order, channel c of head i at c·h + i: channels are head-major, "
                             "(h d) -- head i owns channels i·d .. i·d + d − 1, so transpose to (B, N, h, d)")])
            close(merge(split(expected, h)), expected, "merge_heads(split_heads(x))", atol=0)

    @g.part("ValueError when the channels do not split evenly", 1,
            requires=["split_heads on random shapes (one head, d = 1, one token)"])
    def _():
        expect_error(ValueError, lambda: split(np.zeros((2, 5, 12)), 5), "12 channels into 5 heads")

    def make(n=3, h=2):
        x = np.zeros((1, n, 2 * h))
        return merge.later(split.later(x, h))

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["split_heads on random shapes (one head, d = 1, one token)"])


@exercise("2.5", "attention_backward", MOD, 12, forbid=NUMPY_ONLY)
def attention_backward(g):
    f = g.fn("attention_backward")

    def wrongs(q, k, v, grad):
        s = 1 / math.sqrt(q.shape[-1])
        P = ref_softmax(s * q @ np.swapaxes(k, -1, -2))
        dP = grad @ np.swapaxes(v, -1, -2)
        dS_diag = P * dP                                       # the row term forgotten
        dS_sigmoid = P * (1 - P) * dP                          # the Jacobian's diagonal only
        return {
            "dq": [(s * dS_diag @ k, "dS = P ⊙ dP misses the second term of the softmax Jacobian: "
                                     "dS = P ⊙ (dP − rowsum(dP ⊙ P))"),
                   (s * dS_sigmoid @ k, DIAGONAL_ONLY),
                   (attention_grads(q, k, v, grad)[0] / s, "missing the scale: S = s·q kᵀ, so dq = s·dS k")],
            "dk": [(s * np.swapaxes(dS_diag, -1, -2) @ q, "dS = P ⊙ dP misses the second term of the "
                                                          "softmax Jacobian"),
                   (s * np.swapaxes(dS_sigmoid, -1, -2) @ q, DIAGONAL_ONLY),
                   (attention_grads(q, k, v, grad)[1] / s, "missing the scale: dk = s·dSᵀ q")],
            "dv": [(P @ grad if P.shape[-1] == P.shape[-2] else np.zeros(0),
                    "dv needs the transpose: dv = Pᵀ grad_out")],
        }

    def check(q, k, v, grad, what, atol=1e-10, dtype=None):
        got = f(q, k, v, grad)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Fail(f"{what}: return the tuple (dq, dk, dv)")
        expected = attention_grads(q, k, v, grad)
        hints = wrongs(q, k, v, grad)
        for name, gv, ev in zip(("dq", "dk", "dv"), got, expected):
            close(gv, ev, f"{what}: {name}", atol=atol, mistakes=hints[name], dtype=dtype)

    @g.part("small case vs autograd (3 tokens, d = 2)", 3)
    def _():
        r = rng(141)
        q, k, v, grad = (r.standard_normal((1, 3, 2)) for _ in range(4))
        check(q, k, v, grad, "3 tokens")

    @g.part("random shapes vs autograd (leading axes, N_q != N_k, d_v != d)", 4)
    def _():
        r = rng(142)
        for lead, nq, nk, d, dv in [((2,), 4, 6, 3, 5), ((2, 3), 5, 5, 8, 8), ((), 1, 3, 4, 2),
                                    ((1, 2), 6, 1, 2, 3)]:
            q, k, v = (r.standard_normal(lead + s) for s in [(nq, d), (nk, d), (nk, dv)])
            grad = r.standard_normal(lead + (nq, dv))
            check(q, k, v, grad, f"q {q.shape}, k {k.shape}, v {v.shape}")

    @g.part("float32 in, float32 out", 1)
    def _():
        r = rng(143)
        q, k, v, grad = (r.standard_normal((2, 4, 4)).astype(np.float32) for _ in range(4))
        check(q, k, v, grad, "float32", atol=1e-5, dtype=np.float32)

    @g.part("large scores stay finite", 2)
    def _():
        r = rng(144)
        q, k = 30 * r.standard_normal((2, 4, 8)), 30 * r.standard_normal((2, 5, 8))
        v, grad = r.standard_normal((2, 5, 3)), r.standard_normal((2, 4, 3))
        got = f(q, k, v, grad)
        for name, gv in zip(("dq", "dk", "dv"), got):
            _finite(gv, f"{name} with scores in the hundreds")
        check(q, k, v, grad, "large scores", atol=1e-8)

    def make(n=3, heads=2):
        r = rng(145)
        q, grad = r.standard_normal((heads, n, 4)), r.standard_normal((heads, n, 4))
        return f.later(q, q, q, grad)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"heads": 2}, {"heads": 12}, 10)},
               requires=["random shapes vs autograd (leading axes, N_q != N_k, d_v != d)"])
