"""HIDDEN TESTS -- instructors only. Notebook 06: factorized attention."""
import math

import numpy as np

from exercises.feedback import Fail, close, equal, expect_error
from exercises.grader.judge import exercise

from .references import NUMPY_ONLY, attention, rng, softmax

MOD = "ex06_factorized_attention"


def factorized_ref(q, k, v, axis=-2, scale="out", norm=None):
    """d^-½ q (softmax(k)ᵀ v) in float64; the mistakes: the softmax over ``axis`` -1 (the
    channels), the scale 'none' or 'inside' the softmax, ``norm='broadcast'``: exp(k - max over
    the tokens) divided by each token's sum over the channels, without keepdims (it broadcasts
    only when N = d)."""
    d = q.shape[-1]
    if norm == "broadcast":
        e = np.exp(k - k.max(axis=-2, keepdims=True))
        sk = e / e.sum(axis=-1)[..., None, :]
        out = q @ (np.swapaxes(sk, -1, -2) @ v)
        return out / math.sqrt(d)
    sk = softmax(k / math.sqrt(d) if scale == "inside" else k, axis=axis)
    out = q @ (np.swapaxes(sk, -1, -2) @ v)
    return out / math.sqrt(d) if scale == "out" else out


def fa_mistakes(q, k, v):
    return [(factorized_ref(q, k, v, axis=-1), "softmax(k) must normalise each channel over the tokens "
                                               "(axis -2), not each token over its channels"),
            (factorized_ref(q, k, v, scale="none"), "the factorized term is scaled by d^-½"),
            (factorized_ref(q, k, v, scale="inside"), "the scale d^-½ multiplies the result, not k "
                                                     "inside the softmax"),
            (attention(q, k, v), "this is softmax attention, softmax(q kᵀ/√d) v: the factorized form is "
                                 "d^-½ q (softmax(k)ᵀ v)"),
            (factorized_ref(q, k, v, norm="broadcast") if k.shape[-1] == k.shape[-2] else np.zeros(0),
             "softmax(k) must normalise each channel over the tokens: divide by the sum over axis -2 "
             "(keepdims=True); a sum over the channels without keepdims only broadcasts when N = d")]


@exercise("6.1", "factorized_attention", MOD, 12, forbid=NUMPY_ONLY)
def factorized_attention(g):
    f = g.fn("factorized_attention")

    @g.part("worked example: 2 tokens, d = 1", 2)
    def _():
        q, k, v = np.array([[1.0], [2.0]]), np.array([[0.0], [math.log(3.0)]]), np.array([[4.0], [8.0]])
        # softmax over the tokens: [1/4, 3/4]; softmax(k)ᵀ v = 7; d^-½ = 1
        close(f(q, k, v), [[7.0], [14.0]], "factorized attention by hand", atol=1e-12,
              mistakes=lambda: fa_mistakes(q, k, v))

    @g.part("random shapes vs an independent reference", 3)
    def _():
        r = rng(601)
        for lead, n, d in [((2,), 6, 6), ((), 7, 4), ((2,), 5, 8), ((2, 3), 9, 16), ((1, 1), 1, 2), ((3,), 12, 1)]:
            q, k, v = (r.standard_normal(lead + (n, d)) for _ in range(3))
            close(f(q, k, v), factorized_ref(q, k, v), f"factorized attention on {q.shape}", atol=1e-10,
                  mistakes=lambda: fa_mistakes(q, k, v))

    @g.part("float32 in, float32 out", 1)
    def _():
        q, k, v = (rng(602).standard_normal((2, 6, 8)).astype(np.float32) for _ in range(3))
        close(f(q, k, v), factorized_ref(q, k, v), "float32 factorized attention", atol=1e-5, dtype=np.float32)

    @g.part("large keys stay finite", 1)
    def _():
        r = rng(603)
        q, k, v = r.standard_normal((2, 8, 4)), 400 * r.standard_normal((2, 8, 4)), r.standard_normal((2, 8, 4))
        got = f(q, k, v)
        if not np.isfinite(np.asarray(got, dtype=float)).all():
            raise Fail("NaN or inf for large keys: subtract the maximum over the tokens before exp()")
        close(got, factorized_ref(q, k, v), "factorized attention with large keys", atol=1e-10)

    @g.part("no (N, N) array: peak memory at N = 4096", 3, requires=["random shapes vs an independent reference"])
    def _():
        q, k, v = (rng(604).standard_normal((1, 4096, 8)) for _ in range(3))
        peak = g.peak_memory_mb(f.later(q, k, v))
        if peak > 16:
            raise Fail(f"peak memory {peak:.0f} MiB at N = 4096 (one (N, N) float64 array is 128 MiB): "
                       "compute softmax(k)ᵀ v first, a (d, d) matrix, then multiply q by it")

    def make(n=3, h=2):
        q = rng(605).standard_normal((h, n, 4))
        return f.later(q, q, q)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random shapes vs an independent reference"])


@exercise("6.2", "factorized_attention_flops + crossover", MOD, 6)
def flops(g):
    count, crossover = g.fn("factorized_attention_flops"), g.fn("crossover_num_tokens")

    def ref(n, C, h=1):
        d = C // h
        return 2 * n * n * C, 2 * n * d * d * h

    @g.part("operation counts", 3)
    def _():
        for n, C, h in [(196, 64, 1), (3136, 64, 8), (1, 8, 2), (50, 48, 3), (785, 768, 12)]:
            got = count(n, C, h)
            try:
                got = tuple(int(x) for x in got)
            except (TypeError, ValueError):
                raise Fail(f"factorized_attention_flops({n}, {C}, {h}) should return two ints, got {got!r}") from None
            s, fz = ref(n, C, h)
            equal(got, (s, fz), f"factorized_attention_flops({n}, {C}, {h})",
                  mistakes=[((s, 2 * n * C * C), "with h heads each product runs per head on d = C/h "
                                                  "channels: the factorized form costs 2·N·d²·h"),
                            ((s // 2, fz // 2), "each form has two matrix products; count both"),
                            ((s, fz // 2), "the factorized form has two products too: softmax(k)ᵀ v and "
                                           "q (that)")])

    @g.part("crossover N", 2)
    def _():
        for C, h in [(64, 1), (64, 8), (768, 12), (5, 5), (216, 8)]:
            d = C // h
            equal(int(crossover(C, h)), d + 1, f"crossover_num_tokens({C}, {h})",
                  mistakes=[(d, f"at N = d = {d} both cost the same: the crossover is the first N with "
                                "strictly fewer operations"),
                            (C + 1, "with h heads the crossover is at d + 1 = C/h + 1")])

    @g.part("ValueError when dim is not a multiple of num_heads", 1, requires=["operation counts"])
    def _():
        expect_error(ValueError, lambda: count(10, 10, 3), "factorized_attention_flops(10, 10, 3)")
        expect_error(ValueError, lambda: crossover(10, 3), "crossover_num_tokens(10, 3)")
