"""HIDDEN TESTS -- instructors only. Notebook 04: LayerScale."""
import numpy as np

from exercises.feedback import Fail, close, equal, expect_error, type_name
from exercises.grader.judge import exercise

from .h03_vision_transformer import check_keys, forward, grads_reach_everything, load
from .references import N, T, block, block_params, expected_keys, rng

MOD = "ex04_layerscale"
LS_FORWARD = "forward vs an independent reference (random weights and gammas)"


def rule(depth):
    return 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6


@exercise("4.1", "layerscale_init_value", MOD, 5)
def layerscale_init_value(g):
    f = g.fn("layerscale_init_value")

    @g.part("CaiT's rule at every depth 1 ... 40, and 100", 3)
    def _():
        for depth in list(range(1, 41)) + [100]:
            got = f(depth)
            hints = []
            if depth in (18, 24):
                hints.append((rule(depth + 1), f"depth {depth} is included in its range ('up to "
                                               f"{depth}' includes {depth}): use <="))
            if depth in (19, 25):
                hints.append((rule(depth - 1), f"depth {depth} already belongs to the next range"))
            try:
                value = float(got)
            except (TypeError, ValueError):
                raise Fail(f"layerscale_init_value({depth}) returned {type_name(got)}, not a number") from None
            equal(value, rule(depth), f"layerscale_init_value({depth})", mistakes=hints)

    @g.part("returns a float", 1, requires=["CaiT's rule at every depth 1 ... 40, and 100"])
    def _():
        got = f(12)
        if not isinstance(got, (float, np.floating)):
            raise Fail(f"layerscale_init_value(12) returned {type_name(got)}: return a float")

    @g.part("ValueError for depth < 1", 1, requires=["CaiT's rule at every depth 1 ... 40, and 100"])
    def _():
        expect_error(ValueError, lambda: f(0), "depth 0", mention="0")
        expect_error(ValueError, lambda: f(-3), "depth -3", mention="-3")


def gammas(C, seed):
    r = rng(seed)
    return 0.5 + r.random(C), 0.5 + r.random(C)


def ls_mistakes(x, p, h, gam):
    n, C = x.shape[1], x.shape[2]
    out = [(block(x, p, h, gamma=gam[::-1]), "gamma_1 scales the attention branch, gamma_2 the MLP branch"),
           (block(x, p, h, gamma=(gam[0], np.ones(C))), "the MLP branch needs its LayerScale too (gamma_2)"),
           (block(x, p, h, gamma=(np.ones(C), gam[1])), "the attention branch needs its LayerScale too (gamma_1)"),
           (block(x, p, h), "the branches are not scaled: x = x + gamma_1 * attn(norm1(x))")]
    if n == C:
        out.append((block(x, p, h, gamma=gam, gamma_axis="tokens"),
                    "gamma scales the tokens (axis 1), not the channels: a per-channel factor "
                    "multiplies the last axis of the (B, N, C) branch output"))
    return out


@exercise("4.2", "LayerScaleBlock", MOD, 12)
def layerscale_block(g):
    make = g.cls("LayerScaleBlock")
    extra = lambda C: {"gamma_1": (C,), "gamma_2": (C,)}  # noqa: E731

    @g.part(LS_FORWARD, 4)
    def _():
        r = rng(401)
        for B, n, C, h in [(2, 10, 10, 5), (2, 7, 12, 3), (1, 8, 8, 2), (3, 1, 6, 1)]:
            p = block_params(C, h, 4 * C, seed=int(r.integers(1 << 30)))
            gam = gammas(C, int(r.integers(1 << 30)))
            m = make(C, h)
            check_keys(m, expected_keys(C, 4 * C, extra=extra(C)), f"LayerScaleBlock({C}, {h})")
            m = load(m, {**p, "gamma_1": gam[0], "gamma_2": gam[1]})
            x = r.standard_normal((B, n, C))
            close(forward(m, x), block(x, p, h, gamma=gam), f"LayerScaleBlock({C}, {h}) on (B={B}, N={n})",
                  atol=1e-10, mistakes=lambda: ls_mistakes(x, p, h, gam))

    @g.part("state_dict keys, shapes and initial values", 2, requires=[LS_FORWARD])
    def _():
        m = make(12, 3)
        check_keys(m, expected_keys(12, 48, extra=extra(12)), "LayerScaleBlock(12, 3)")
        sd = m.state_dict()
        close(N(sd["gamma_1"]), np.full(12, 1e-5), "gamma_1 at init (init_values=1e-5)", atol=1e-12, rtol=1e-6)
        m = make(8, 2, mlp_ratio=2.0, init_values=0.1)
        check_keys(m, expected_keys(8, 16, extra=extra(8)), "LayerScaleBlock(8, 2, mlp_ratio=2.0)")
        close(N(m.state_dict()["gamma_2"]), np.full(8, 0.1), "gamma_2 at init (init_values=0.1)",
              atol=1e-9, rtol=1e-6)

    @g.part("gamma = 0 makes the block the identity", 1, requires=[LS_FORWARD])
    def _():
        p = block_params(8, 2, 32, seed=402)
        m = load(make(8, 2), {**p, "gamma_1": np.zeros(8), "gamma_2": np.zeros(8)})
        x = rng(403).standard_normal((2, 5, 8))
        close(forward(m, x), x, "output with gamma_1 = gamma_2 = 0", atol=0)

    @g.part("gradients reach every parameter, gammas included", 1, requires=[LS_FORWARD])
    def _():
        p = block_params(8, 2, 32, seed=404)
        gam = gammas(8, 405)
        m = load(make(8, 2), {**p, "gamma_1": gam[0], "gamma_2": gam[1]})
        grads_reach_everything(m, rng(406).standard_normal((2, 3, 8)))

    @g.part("ValueError for init_values <= 0 and dim % num_heads", 2, requires=[LS_FORWARD])
    def _():
        expect_error(ValueError, lambda: make(8, 2, init_values=0.0), "init_values=0")
        expect_error(ValueError, lambda: make(8, 2, init_values=-1e-5), "init_values=-1e-5")
        expect_error(ValueError, lambda: make(10, 3), "LayerScaleBlock(10, 3)")

    def make_call(n=3, h=2):
        C = 2 * h
        m = load(make(C, h), {**block_params(C, h, 4 * C, seed=407), "gamma_1": np.ones(C), "gamma_2": np.ones(C)})
        x = T(rng(408).standard_normal((1, n, C)))

        return m.later(x)

    g.no_loops(2, make_call, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=[LS_FORWARD])
