"""HIDDEN TESTS -- instructors only. Notebook 11: the distillation token, and stochastic depth.

Every gradient is compared with PyTorch autograd on the same inputs (float64); the classic slips
are recomputed here so the feedback can name them."""
import numpy as np
import torch
import torch.nn.functional as F

from exercises.feedback import Fail, close, expect_error
from exercises.grader.judge import exercise

from .h10_backprop import _grads, _once, _shape_hint, _tuple
from .references import NUMPY_ONLY, N, T, rng

MOD = "ex11_distillation"
NO_SCIPY_SOFTMAX = NUMPY_ONLY + ("scipy.special.softmax", "scipy.special.log_softmax", "scipy.special.logsumexp")
OVERFLOW = "NaN or inf for large logits: the softmax overflowed -- subtract each row's maximum before exp()"

# ---- 11.1 hard distillation through the two heads ----------------------------------------------

HEAD_NAMES = ("dtokens", "dhead_weight", "dhead_bias", "dhead_dist_weight", "dhead_dist_bias")


def distillation_torch(tokens, w, b, w_dist, b_dist, labels, teacher, eps):
    """½·CE_ε(head(tokens[:, 0]), labels) + ½·CE(head_dist(tokens[:, 1]), teacher), in torch ops."""
    z, z_dist = tokens[:, 0] @ w.T + b, tokens[:, 1] @ w_dist.T + b_dist
    return 0.5 * F.cross_entropy(z, torch.from_numpy(labels), label_smoothing=eps) \
        + 0.5 * F.cross_entropy(z_dist, torch.from_numpy(teacher))


def distillation_slip(tokens, w, b, w_dist, b_dist, labels, teacher_logits, eps, soft=False, smooth_teacher=False,
                      weight=0.5, mean=True, swap=False, smoothing="uniform"):
    """(loss, dtokens, dW, db, dW_dist, db_dist) with one slip switched on (NumPy, float64):
    the teacher's probabilities as a soft target, label smoothing on the teacher's term too,
    each term's weight 1 instead of ½, sums over the batch, the heads' targets swapped, the
    smoothing's ε/K left out."""
    B, K = teacher_logits.shape
    rows = np.arange(B)

    def log_softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    def smoothed(y, e):
        t = np.full((B, K), e / K if smoothing == "uniform" else 0.0)
        t[rows, y] += 1 - e
        return t

    target = smoothed(labels, eps)
    teacher = np.exp(log_softmax(teacher_logits)) if soft else smoothed(np.argmax(teacher_logits, 1),
                                                                         eps if smooth_teacher else 0.0)
    if swap:
        target, teacher = teacher, target
    cls, dist = tokens[:, 0], tokens[:, 1]
    lp, lpd = log_softmax(cls @ w.T + b), log_softmax(dist @ w_dist.T + b_dist)
    norm = B if mean else 1
    loss = weight * (-(target * lp).sum() - (teacher * lpd).sum()) / norm
    dz, dzd = weight * (np.exp(lp) - target) / norm, weight * (np.exp(lpd) - teacher) / norm
    dtokens = np.zeros_like(tokens)
    dtokens[:, 0], dtokens[:, 1] = dz @ w, dzd @ w_dist
    return loss, dtokens, dz.T @ cls, dz.sum(0), dzd.T @ dist, dzd.sum(0)


DISTILLATION_SLIPS = [
    ({"soft": True}, "this is soft distillation's target: hard distillation takes the teacher's decision, "
                     "y_t = argmax of its logits, as a label"),
    ({"smooth_teacher": True}, "label smoothing is on the true labels only: the teacher's term is a plain "
                               "cross-entropy with one_hot(y_t)"),
    ({"weight": 1.0}, "each term has the weight ½: loss = ½·CE_ε(z, y) + ½·CE(z_dist, y_t)"),
    ({"mean": False}, "summed over the batch: each cross-entropy is a mean over the B images, so every "
                      "gradient has a factor 1/B"),
    ({"swap": True}, "the heads' targets are swapped: the class token's head learns the labels, the "
                     "distillation token's head the teacher's decisions"),
    ({"smoothing": "missing"}, "the smoothed target is (1 − ε)·one_hot(y) + ε/K: the ε/K on every class is "
                               "missing"),
]


@exercise("11.1", "hard_distillation_heads", MOD, 12, forbid=NO_SCIPY_SOFTMAX)
def hard_distillation_heads(g):
    f = g.fn("hard_distillation_heads")

    def case(B, n, C, K, seed, scale=1.0, disagree=0.3):
        r = rng(seed)
        tokens = r.standard_normal((B, 2 + n, C))
        w, w_dist = (scale * r.standard_normal((K, C)) / np.sqrt(C) for _ in range(2))
        b, b_dist = 0.3 * r.standard_normal(K), 0.3 * r.standard_normal(K)
        labels = r.integers(0, K, B)
        teacher_logits = 2 * r.standard_normal((B, K))
        agree = r.random(B) >= disagree                     # most of the time the teacher is right
        teacher_logits[agree, labels[agree]] += 10.0
        return tokens, w, b, w_dist, b_dist, labels, teacher_logits

    def check(args, eps, what, dtype=np.float64, atol=1e-10):
        tokens, w, b, w_dist, b_dist, labels, teacher_logits = args
        teacher = np.argmax(teacher_logits, axis=1)
        floats = (tokens, w, b, w_dist, b_dist)
        ts = [T(np.asarray(a, dtype=np.float64)).requires_grad_() for a in floats]
        loss = distillation_torch(*ts, labels, teacher, eps)
        loss.backward()
        expected = [N(t.grad) for t in ts]
        slips = _once(lambda: [(distillation_slip(*args, eps, **switch), text) for switch, text in DISTILLATION_SLIPS])
        got = _tuple(f(*(a.astype(dtype) for a in floats), labels, teacher_logits.astype(dtype),
                       label_smoothing=eps), 6, what, ("loss",) + HEAD_NAMES)
        try:
            value = float(got[0])
        except (TypeError, ValueError):
            raise Fail(f"{what}: the loss must be a number, got {type(got[0]).__name__}") from None
        close(value, loss.item(), f"{what}: loss", atol=atol * 10, rtol=1e-9 if dtype == np.float64 else 1e-5,
              mistakes=lambda: [(wrong[0], text) for wrong, text in slips()])
        for i, (name, gv, ev) in enumerate(zip(HEAD_NAMES, got[1:], expected), start=1):
            _shape_hint(gv, ev, f"{what}: {name}")
            close(gv, ev, f"{what}: {name}", atol=atol,
                  mistakes=lambda i=i: [(wrong[i], text) for wrong, text in slips()],
                  dtype=None if dtype == np.float64 else dtype)

    @g.part("worked example: 3 images, 4 classes, the teacher disagrees on one", 2)
    def _():
        args = case(3, 2, 5, 4, 1101)
        args[6][1] = [0.0, 0.0, 0.0, 0.0]
        args[6][1, (args[5][1] + 1) % 4] = 5.0               # image 1: the teacher says another class
        check(args, 0.0, "3 images, 4 classes, no smoothing")

    @g.part("random batches vs autograd (label smoothing 0 and 0.1, one image, many classes)", 4)
    def _():
        for i, (B, n, C, K, eps) in enumerate([(4, 3, 6, 5, 0.1), (1, 1, 3, 2, 0.0), (6, 4, 8, 10, 0.1),
                                               (2, 0, 4, 7, 0.25), (5, 2, 2, 3, 0.0)]):
            check(case(B, n, C, K, 1110 + i), eps, f"B={B}, {2 + n} tokens, C={C}, K={K}, ε={eps}")

    @g.part("large logits stay finite", 1)
    def _():
        args = case(3, 2, 6, 5, 1120, scale=400.0)
        got = f(*args, label_smoothing=0.1)
        try:
            finite = all(np.isfinite(np.asarray(v, dtype=float)).all() for v in got)
        except (TypeError, ValueError):
            finite = True                                   # not numbers: check() says what it expected
        if not finite:
            raise Fail(OVERFLOW)
        check(args, 0.1, "logits in the thousands", atol=1e-7)

    @g.part("float32 in, float32 out", 1)
    def _():
        check(case(4, 3, 6, 5, 1130), 0.1, "float32", dtype=np.float32, atol=1e-5)

    @g.part("ValueError for label_smoothing outside [0, 1), or labels that do not fit", 1,
            requires=["random batches vs autograd (label smoothing 0 and 0.1, one image, many classes)"])
    def _():
        args = case(3, 2, 4, 5, 1140)
        expect_error(ValueError, lambda: f(*args, label_smoothing=1.0), "label_smoothing=1.0", mention="1.0")
        expect_error(ValueError, lambda: f(*args, label_smoothing=-0.1), "label_smoothing=-0.1", mention="-0.1")
        bad = args[:5] + (args[5][:2], args[6])
        expect_error(ValueError, lambda: f(*bad), "2 labels for 3 images")

    def make(B=2, K=3):
        return f.later(*case(B, 2, 4, K, 1150))

    g.no_loops(3, make, {"images": ({"B": 2}, {"B": 18}, 16), "classes": ({"K": 3}, {"K": 19}, 16)},
               requires=["random batches vs autograd (label smoothing 0 and 0.1, one image, many classes)"])


# ---- 11.2 stochastic depth on a residual branch ------------------------------------------------

def drop_path_torch(x, w, b, keep, p, training=True, scale="inverse", drop_residual=False):
    """x + m·(x Wᵀ + b) per sample, in torch ops; the slips: ``scale`` 'times' (m = keep·(1 − p)),
    'none' (m = keep), 'test' (evaluation scaled by 1 − p); ``drop_residual``: m·(x + branch)."""
    branch = x @ w.T + b
    shape = (-1,) + (1,) * (x.ndim - 1)
    k = torch.from_numpy(np.asarray(keep, dtype=np.float64)).reshape(shape)
    if not training:
        return x + ((1 - p) * branch if scale == "test" else branch)
    m = k / (1 - p) if scale in ("inverse", "test") else k * (1 - p) if scale == "times" else k
    return m * (x + branch) if drop_residual else x + m * branch


FORWARD_SLIPS = [
    ({"scale": "times"}, "a kept branch is divided by 1 − drop_prob (so the expected update stays the "
                         "branch's), not multiplied by it"),
    ({"scale": "none"}, "a kept branch is scaled by 1/(1 − drop_prob), so that the expected update is the "
                        "branch's full output"),
    ({"drop_residual": True}, "only the branch is dropped: the identity path x always passes, out = x + m·branch"),
]
EVAL_SLIPS = [
    ({"scale": "test"}, "in evaluation the branch runs unscaled: the scaling by 1/(1 − p) happens in training "
                        "(Huang et al.'s (1 − p) at test time is the other convention)"),
]


def drop_path_grads(dout, x, w, b, keep, p, training=True, **slip):
    return _grads(lambda x_, w_, b_: drop_path_torch(x_, w_, b_, keep, p, training, **slip), (x, w, b), dout)


def backward_slips(dout, x, w, b, keep, p, training, right):
    """[(dx, dweight, dbias) with one slip, its name]; ``right``: the correct three."""
    dx, dw, db = right
    C = x.shape[-1]
    flat = lambda a: a.reshape(-1, C)  # noqa: E731
    out = [((dx - dout, dw, db), "dx is missing the identity path: out = x + m·branch, so dx = dout + "
                                 "(m·dout) W")]
    if training:
        out += [((dx, flat(dout).T @ flat(x), flat(dout).sum(0)),
                 "a dropped sample's branch did not run: its gradient reaches no weight -- use m·dout for "
                 "dweight and dbias"),
                ((dout + dout @ w, dw, db), "the branch's gradient to x must be masked and scaled too: "
                                            "dx = dout + (m·dout) W"),
                (tuple(drop_path_grads(dout, x, w, b, keep, p, scale="none")),
                 "the backward needs the forward's factor m = keep/(1 − drop_prob), the scale included"),
                (tuple(drop_path_grads(dout, x, w, b, keep, p, scale="times")),
                 "a kept branch's gradient is scaled by 1/(1 − drop_prob), like its output, not by 1 − drop_prob")]
    else:
        out.append((tuple(drop_path_grads(dout, x, w, b, keep, p, training=True)),
                    "in evaluation (training=False) nothing is dropped: every sample's branch gets its gradient"))
    return out


@exercise("11.2", "drop_path_residual and its backward", MOD, 10, forbid=NUMPY_ONLY)
def drop_path_residual(g):
    fwd, bwd = g.fn("drop_path_residual"), g.fn("drop_path_residual_backward")

    def case(shape, seed, p):
        r = rng(seed)
        C = shape[-1]
        x = r.standard_normal(shape)
        w, b = r.standard_normal((C, C)) / np.sqrt(C), 0.5 * r.standard_normal(C)
        keep = r.random(shape[0]) >= p
        if p > 0:
            keep[0], keep[-1] = True, shape[0] == 1           # one kept, one dropped (when B > 1)
        return x, w, b, keep

    def check_forward(x, w, b, keep, p, training, what, dtype=np.float64, atol=1e-12):
        expected = N(drop_path_torch(T(x), T(w), T(b), keep, p, training))
        slips = FORWARD_SLIPS if training else EVAL_SLIPS + [({"training": True}, "in evaluation "
                                                             "(training=False) nothing is dropped and nothing "
                                                             "scaled: out = x + branch")]
        def mistakes():
            return [(N(drop_path_torch(T(x), T(w), T(b), keep, p, **{"training": training, **s})), text)
                    for s, text in slips] + \
                [(N(drop_path_torch(T(x), T(w), T(b), ~keep, p, training)),
                  "keep is True where the sample keeps its branch (you dropped the kept ones)")]
        got = fwd(x.astype(dtype), w.astype(dtype), b.astype(dtype), keep, p, training=training)
        close(got, expected, what, atol=atol, mistakes=mistakes, dtype=None if dtype == np.float64 else dtype)

    def check_backward(x, w, b, keep, p, training, what, seed, dtype=np.float64, atol=1e-12):
        dout = rng(seed).standard_normal(x.shape)
        expected = drop_path_grads(dout, x, w, b, keep, p, training)
        slips = _once(lambda: backward_slips(dout, x, w, b, keep, p, training, expected))
        got = _tuple(bwd(dout.astype(dtype), x.astype(dtype), w.astype(dtype), keep, p, training=training), 3,
                     what, ("dx", "dweight", "dbias"))
        for i, (name, gv, ev) in enumerate(zip(("dx", "dweight", "dbias"), got, expected)):
            if i:
                _shape_hint(gv, ev, f"{what}: {name}")
            close(gv, ev, f"{what}: {name}", atol=atol * (10 if i else 1),
                  mistakes=lambda i=i: [(wrong[i], text) for wrong, text in slips()],
                  dtype=None if dtype == np.float64 else dtype)

    @g.part("forward: worked example, 4 images, image 1 dropped, p = 0.5", 1)
    def _():
        x, w, b, _ = case((4, 3, 2), 1201, 0.5)
        check_forward(x, w, b, np.array([True, False, True, True]), 0.5, True, "drop_path_residual, p = 0.5")

    @g.part("forward vs an independent reference (training and evaluation, any token axes)", 2)
    def _():
        for i, (shape, p) in enumerate([((5, 4, 3), 0.3), ((3, 6), 0.5), ((2, 2, 3, 4), 0.1), ((1, 5, 2), 0.25),
                                        ((6, 1, 5), 0.0)]):
            x, w, b, keep = case(shape, 1210 + i, p)
            for training in (True, False):
                check_forward(x, w, b, keep, p, training, f"x {shape}, drop_prob {p}, training={training}",
                              atol=1e-10)

    @g.part("backward vs autograd (training and evaluation, any token axes)", 4)
    def _():
        for i, (shape, p) in enumerate([((4, 3, 2), 0.5), ((5, 4, 3), 0.3), ((3, 6), 0.5), ((2, 2, 3, 4), 0.1),
                                        ((1, 5, 2), 0.25)]):
            x, w, b, keep = case(shape, 1220 + i, p)
            for training in (True, False):
                check_backward(x, w, b, keep, p, training, f"x {shape}, drop_prob {p}, training={training}",
                               1225 + 2 * i + training, atol=1e-10)

    @g.part("float32 in, float32 out", 1)
    def _():
        x, w, b, keep = case((4, 3, 5), 1230, 0.2)
        check_forward(x, w, b, keep, 0.2, True, "float32 forward", dtype=np.float32, atol=1e-5)
        check_backward(x, w, b, keep, 0.2, True, "float32 backward", 1231, dtype=np.float32, atol=1e-5)

    @g.part("ValueError for drop_prob outside [0, 1) or a keep of the wrong shape", 1,
            requires=["forward vs an independent reference (training and evaluation, any token axes)",
                      "backward vs autograd (training and evaluation, any token axes)"])
    def _():
        x, w, b, keep = case((3, 2, 4), 1240, 0.5)
        for fn, name, extra in ((fwd, "drop_path_residual", (x, w, b)), (bwd, "drop_path_residual_backward",
                                                                          (x, x, w))):
            expect_error(ValueError, lambda: fn(*extra, keep, 1.0), f"{name} with drop_prob=1.0", mention="1.0")
            expect_error(ValueError, lambda: fn(*extra, keep, -0.5), f"{name} with drop_prob=-0.5", mention="-0.5")
            expect_error(ValueError, lambda: fn(*extra, keep[:2], 0.5), f"{name} with 2 coins for 3 images")

    def make(B=2, n=3):
        x, w, b, keep = case((B, n, 4), 1250, 0.5)
        return bwd.later(fwd.later(x, w, b, keep, 0.5), x, w, keep, 0.5)

    g.no_loops(1, make, {"images": ({"B": 2}, {"B": 18}, 16), "tokens": ({"n": 3}, {"n": 19}, 16)},
               requires=["forward vs an independent reference (training and evaluation, any token axes)",
                         "backward vs autograd (training and evaluation, any token axes)"])

