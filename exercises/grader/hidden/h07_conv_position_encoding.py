"""HIDDEN TESTS -- instructors only. Notebook 07: convolutional position encodings."""
import numpy as np
import torch

from exercises.feedback import Fail, close, expect_error
from exercises.grader.judge import exercise

from .references import NUMPY_ONLY, N, T, depthwise, rng

MOD = "ex07_conv_position_encoding"
NO_CONV_LIBS = NUMPY_ONLY + ("scipy.signal", "scipy.ndimage")
CRPE_FORWARD = "random inputs vs an independent reference (windows {3: 2, 5: 3, 7: 3} and others)"


def rel_ref(n, window, sign=1, bound=None):
    i = np.arange(n)
    m = window // 2 if bound is None else bound
    return np.clip(sign * (i[None, :] - i[:, None]), -m, m)


@exercise("7.1", "clipped_relative_indices", MOD, 8, forbid=NUMPY_ONLY)
def clipped_relative_indices(g):
    f = g.fn("clipped_relative_indices")

    def mistakes(n, w):
        return [(rel_ref(n, w, sign=-1), "entry [i, j] is the offset from token i to token j, j - i "
                                         "(yours is i - j: the transpose)"),
                (rel_ref(n, w, bound=w), "clip to ±(M // 2) (a window of M positions), not ±M"),
                (rel_ref(n, w, bound=n), "the offsets are not clipped: np.clip to ±(M // 2)")]

    @g.part("notebook example: 6 tokens, M = 3", 2)
    def _():
        got = np.asarray(f(6, 3))
        close(got, rel_ref(6, 3), "clipped_relative_indices(6, 3)", atol=0, mistakes=lambda: mistakes(6, 3))
        close(got[4], [-1, -1, -1, -1, 0, 1], "row i = 4", atol=0)

    @g.part("random sizes and windows (M = 1, M > 2N)", 3)
    def _():
        for n, w in [(1, 1), (5, 1), (9, 5), (12, 7), (4, 13), (16, 3), (30, 9)]:
            got = f(n, w)
            close(got, rel_ref(n, w), f"clipped_relative_indices({n}, {w})", atol=0, mistakes=lambda: mistakes(n, w))
            if not np.issubdtype(np.asarray(got).dtype, np.integer):
                raise Fail(f"clipped_relative_indices({n}, {w}) has dtype {np.asarray(got).dtype}: return ints "
                           "(they index a table of learned vectors)")

    @g.part("ValueError for an even or non-positive window", 1, requires=["random sizes and windows (M = 1, M > 2N)"])
    def _():
        expect_error(ValueError, lambda: f(5, 4), "window 4", mention="4")
        expect_error(ValueError, lambda: f(5, 0), "window 0", mention="0")

    def make(n=3):
        return f.later(n, 3)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16)},
               requires=["random sizes and windows (M = 1, M > 2N)"])


def dw_mistakes(x, w, b, dilation=1):
    out = [(depthwise(x, w, b, flip=True, dilation=dilation),
            "the kernel is flipped: PyTorch's conv2d is a cross-correlation, "
            "out[i, j] = Σ w[u, v]·x[i + d(u − k//2), j + d(v − k//2)]")]
    if b is not None:
        out.append((depthwise(x, w, None, dilation=dilation), "the bias is missing: add bias[c] to channel c"))
    if dilation > 1:
        out.append((depthwise(x, w, b), "the dilation is ignored: the taps sit d pixels apart"))
    return out


@exercise("7.2", "depthwise_conv2d", MOD, 12, forbid=NO_CONV_LIBS)
def depthwise_conv2d(g):
    f = g.fn("depthwise_conv2d")

    @g.part("worked example: a kernel with one 1 in its top-left corner", 2)
    def _():
        x = np.arange(12.0).reshape(1, 1, 3, 4)
        w = np.zeros((1, 1, 3, 3))
        w[0, 0, 0, 0] = 1.0                                    # out[i, j] = x[i - 1, j - 1]
        expected = np.zeros((1, 1, 3, 4))
        expected[..., 1:, 1:] = x[..., :-1, :-1]
        close(f(x, w), expected, "the shifted image", atol=1e-12, mistakes=lambda: dw_mistakes(x, w, None))

    @g.part("random inputs vs F.conv2d(groups=C), with and without bias", 3)
    def _():
        r = rng(701)
        for B, C, H, W, kh, kw, bias in [(2, 3, 5, 4, 3, 3, True), (1, 4, 6, 6, 5, 5, True),
                                         (3, 2, 7, 3, 3, 5, False), (1, 1, 8, 9, 7, 7, True),
                                         (2, 5, 4, 4, 1, 1, True)]:
            x, w = r.standard_normal((B, C, H, W)), r.standard_normal((C, 1, kh, kw))
            b = r.standard_normal(C) if bias else None
            close(f(x, w, b), depthwise(x, w, b), f"depthwise conv of {x.shape}, kernel {kh}x{kw}, "
                  f"bias {'yes' if bias else 'None'}", atol=1e-10, mistakes=lambda: dw_mistakes(x, w, b))

    @g.part("dilation 2 and 3 vs F.conv2d(dilation=d, groups=C)", 3)
    def _():
        r = rng(705)
        x = np.zeros((1, 1, 5, 5))
        x[0, 0, 2, 2] = 1.0                                    # one pixel: the output is the dilated kernel
        w = np.arange(1.0, 10.0).reshape(1, 1, 3, 3)
        close(f(x, w, dilation=2), depthwise(x, w, dilation=2), "a single pixel, 3x3 kernel, dilation 2",
              atol=1e-12, mistakes=lambda: dw_mistakes(x, w, None, dilation=2))
        for B, C, H, W, kh, kw, d in [(2, 3, 7, 6, 3, 3, 2), (1, 2, 9, 8, 3, 5, 3), (2, 2, 4, 5, 5, 3, 2)]:
            x, w, b = r.standard_normal((B, C, H, W)), r.standard_normal((C, 1, kh, kw)), r.standard_normal(C)
            close(f(x, w, b, dilation=d), depthwise(x, w, b, dilation=d),
                  f"{kh}x{kw} kernel, dilation {d}, on a {H}x{W} image", atol=1e-10,
                  mistakes=lambda: dw_mistakes(x, w, b, dilation=d))

    @g.part("kernels larger than the image", 1)
    def _():
        r = rng(702)
        for H, W, k in [(3, 2, 7), (1, 1, 3), (2, 5, 5)]:
            x, w, b = r.standard_normal((2, 3, H, W)), r.standard_normal((3, 1, k, k)), r.standard_normal(3)
            close(f(x, w, b), depthwise(x, w, b), f"a {k}x{k} kernel on a {H}x{W} image", atol=1e-10,
                  mistakes=lambda: dw_mistakes(x, w, b))

    @g.part("float32 in, float32 out", 1)
    def _():
        r = rng(703)
        x, w, b = (r.standard_normal(s).astype(np.float32) for s in [(2, 3, 6, 5), (3, 1, 3, 3), (3,)])
        close(f(x, w, b), depthwise(x, w, b), "float32 depthwise conv", atol=1e-5, dtype=np.float32)

    @g.part("ValueError for even kernels, mismatched weights and dilation 0", 1,
            requires=["random inputs vs F.conv2d(groups=C), with and without bias"])
    def _():
        x = np.zeros((1, 3, 5, 5))
        expect_error(ValueError, lambda: f(x, np.zeros((3, 1, 2, 2))), "a 2x2 kernel")
        expect_error(ValueError, lambda: f(x, np.zeros((4, 1, 3, 3))), "a weight for 4 channels on 3")
        expect_error(ValueError, lambda: f(x, np.zeros((3, 1, 3, 3)), dilation=0), "dilation 0")

    def make(H=3, W=4, C=2):
        r = rng(704)
        x, w, b = r.standard_normal((1, C, H, W)), r.standard_normal((C, 1, 3, 3)), r.standard_normal(C)
        return f.later(x, w, b, dilation=2)

    g.no_loops(1, make, {"pixel rows": ({"H": 3}, {"H": 11}, 8), "pixel columns": ({"W": 4}, {"W": 12}, 8),
                         "channels": ({"C": 2}, {"C": 10}, 8)},
               requires=["random inputs vs F.conv2d(groups=C), with and without bias"])


def crpe_params(window, d, seed):
    r = rng(seed)
    p = {}
    for i, (k, heads) in enumerate(window.items()):
        p[f"conv_list.{i}.weight"] = r.standard_normal((heads * d, 1, k, k)) / k
        p[f"conv_list.{i}.bias"] = 0.3 * r.standard_normal(heads * d)
    return p


def groups(params, window):
    """The dict of timm's names -> the stub's (weights, biases) lists, in the window's order."""
    return ([params[f"conv_list.{i}.weight"] for i in range(len(window))],
            [params[f"conv_list.{i}.bias"] for i in range(len(window))])


def crpe_ref(q, v, size, params, window, zero_cls=True, heads="hd", sort=False, swap_hw=False, gate=True,
             reverse=False):
    """CRPE in float64 torch ops, with switches for the classic mistakes: no zero class row, the
    image of v channel-major (``heads='dh'``), the groups sorted by window or in ``reverse``
    order (each kernel on another block of heads), the grid read as (W, H), EV not gated by q."""
    qt, vt = T(np.asarray(q, dtype=np.float64)), T(np.asarray(v, dtype=np.float64))
    B, h, n, d = qt.shape
    H, W = size
    v_img = vt[:, :, 1:]
    if heads == "hd":
        img = v_img.permute(0, 1, 3, 2).reshape(B, h * d, H, W)
    else:
        img = v_img.permute(0, 3, 1, 2).reshape(B, d * h, H, W)
    if swap_hw:
        img = img.reshape(B, h * d, W, H).transpose(-1, -2)
    items = list(enumerate(window.items()))
    if sort:
        items = sorted(items, key=lambda it: it[1][0])
    if reverse:
        items = items[::-1]
    outs, start = [], 0
    for i, (k, nh) in items:
        ch = nh * d
        outs.append(torch.from_numpy(depthwise(N(img[:, start:start + ch]), params[f"conv_list.{i}.weight"],
                                               params[f"conv_list.{i}.bias"])))
        start += ch
    conv = torch.cat(outs, dim=1)
    if swap_hw:
        conv = conv.transpose(-1, -2).reshape(B, h * d, H, W)
    if heads == "hd":
        conv = conv.reshape(B, h, d, H * W).permute(0, 1, 3, 2)
    else:
        conv = conv.reshape(B, d, h, H * W).permute(0, 2, 3, 1)
    ev = qt[:, :, 1:] * conv if gate else conv
    if zero_cls:
        ev = torch.cat([torch.zeros_like(qt[:, :, :1]), ev], dim=2)
    return N(ev)


def crpe_mistakes(q, v, size, p, window):
    H, W = size
    h, d = q.shape[1], q.shape[-1]
    out = [(crpe_ref(q, v, size, p, window, zero_cls=False),
            "the class token needs a row of zeros: return (B, h, 1 + H·W, d), EV[:, :, 0] = 0"),
           (crpe_ref(q, v, size, p, window, gate=False), "EV is q ⊙ conv(v): multiply by the image "
                                                         "tokens' queries")]
    ref = crpe_ref(q, v, size, p, window)
    bad_cls = ref.copy()
    bad_cls[:, :, 0] = 1.0                                         # anything nonzero is caught below
    if h > 1 and d > 1:
        out.append((crpe_ref(q, v, size, p, window, heads="dh"), "channels are head-major: the image of v "
                                                                 "is (B, h·d, H, W) with channel h_i·d + c"))
    if list(window) != sorted(window):
        out.append((crpe_ref(q, v, size, p, window, sort=True), "the head groups follow the lists' order: "
                                                                "weights[i] convolves the i-th block of "
                                                                "heads, whatever its kernel size"))
    if len(window) > 1:
        out.append((crpe_ref(q, v, size, p, window, reverse=True),
                    "the window groups are in reverse order: take the groups in the lists' order -- weights[0] "
                    "convolves the first heads_0·d channels (the first heads), weights[1] the next block, ..."))
    if H != W:
        out.append((crpe_ref(q, v, size, p, window, swap_hw=True), "the grid is (H, W), raster order: "
                                                                   "token 1 + r·W + c is row r, column c"))
    return out


@exercise("7.3", "conv_rel_pos_enc", MOD, 12, forbid=NO_CONV_LIBS)
def conv_rel_pos_enc(g):
    f = g.fn("conv_rel_pos_enc")

    @g.part("worked example: one head, a 1x1 window", 2)
    def _():
        r = rng(711)
        q, v = r.standard_normal((1, 1, 5, 2)), r.standard_normal((1, 1, 5, 2))
        p = {"conv_list.0.weight": np.array([2.0, -1.0]).reshape(2, 1, 1, 1), "conv_list.0.bias": np.array([0.5, 1.0])}
        expected = np.zeros_like(q)
        expected[:, :, 1:] = q[:, :, 1:] * (v[:, :, 1:] * [2.0, -1.0] + [0.5, 1.0])
        close(f(q, v, (2, 2), *groups(p, {1: 1})), expected, "EV = q ⊙ (w·v + b), zero class row", atol=1e-12,
              mistakes=lambda: crpe_mistakes(q, v, (2, 2), p, {1: 1}))

    @g.part(CRPE_FORWARD, 4)
    def _():
        r = rng(712)
        for B, H, W, d, window in [(2, 5, 4, 2, {3: 2, 5: 3, 7: 3}), (1, 3, 3, 4, {3: 1}),
                                   (2, 4, 6, 3, {5: 2, 3: 1}), (1, 7, 2, 1, {3: 2, 5: 3, 7: 3}),
                                   (3, 1, 5, 2, {1: 2, 3: 2})]:
            h = sum(window.values())
            q, v = r.standard_normal((B, h, 1 + H * W, d)), r.standard_normal((B, h, 1 + H * W, d))
            p = crpe_params(window, d, int(r.integers(1 << 30)))
            close(f(q, v, (H, W), *groups(p, window)), crpe_ref(q, v, (H, W), p, window),
                  f"CRPE on a {H}x{W} grid, {h} heads, d={d}, window {window}", atol=1e-10,
                  mistakes=lambda: crpe_mistakes(q, v, (H, W), p, window))

    @g.part("the class token's row is exactly zero", 2, requires=[CRPE_FORWARD])
    def _():
        r = rng(713)
        window = {3: 2, 5: 1}
        q, v = r.standard_normal((2, 3, 1 + 12, 2)), r.standard_normal((2, 3, 1 + 12, 2))
        got = np.asarray(f(q, v, (3, 4), *groups(crpe_params(window, 2, 714), window)))
        if got.shape != q.shape:
            raise Fail(f"expected shape {q.shape} (the class token's row included), got {got.shape}")
        if np.any(got[:, :, 0] != 0):
            raise Fail("the class token's row (index 0 of the tokens) must be exactly zero")

    @g.part("float32 in, float32 out", 1)
    def _():
        r = rng(715)
        window = {3: 1, 5: 1}
        q, v = (r.standard_normal((2, 2, 1 + 20, 3)).astype(np.float32) for _ in range(2))
        p = {k: a.astype(np.float32) for k, a in crpe_params(window, 3, 716).items()}
        close(f(q, v, (4, 5), *groups(p, window)), crpe_ref(q, v, (4, 5), p, window), "float32 CRPE", atol=1e-5,
              dtype=np.float32, mistakes=lambda: crpe_mistakes(q, v, (4, 5), p, window))

    @g.part("ValueError for heads that do not add up, or a wrong number of tokens", 1, requires=[CRPE_FORWARD])
    def _():
        q = np.zeros((1, 4, 10, 2))
        p = crpe_params({3: 2, 5: 2}, 2, 717)
        expect_error(ValueError, lambda: f(q, q, (3, 3), *groups(crpe_params({3: 2, 5: 1}, 2, 717), {3: 2, 5: 1})),
                     "window heads 3 for 4 heads")
        expect_error(ValueError, lambda: f(q, q, (3, 4), *groups(p, {3: 2, 5: 2})), "10 tokens for a 3x4 grid")

    def make(H=3, W=4, h=2):
        r = rng(718)
        window = {3: h}
        q = r.standard_normal((1, h, 1 + H * W, 2))
        p = crpe_params(window, 2, 719)
        return f.later(q, q, (H, W), *groups(p, window))

    g.no_loops(2, make, {"pixel rows": ({"H": 3}, {"H": 11}, 8), "pixel columns": ({"W": 4}, {"W": 12}, 8),
                         "heads": ({"h": 2}, {"h": 10}, 8)}, requires=[CRPE_FORWARD])
