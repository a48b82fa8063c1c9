"""HIDDEN TESTS -- instructors only. Notebook 08: co-scale (feature interpolation)."""
import numpy as np
import torch
import torch.nn.functional as F

from exercises.feedback import Fail, close, expect_error, type_name
from exercises.grader.judge import exercise

from .references import NUMPY_ONLY, N, T, bilinear, rng

MOD = "ex08_coscale"
TOKENS_FORWARD = "random grids up and down vs an independent reference"


def nearest(x, size):
    return N(F.interpolate(T(np.asarray(x, dtype=np.float64)), size=tuple(size), mode="nearest"))


def unclamped(x, size, wrap=True):
    """Bilinear with align_corners=False but without clamping the source index at 0: index -1
    either wraps around to the last pixel (NumPy's negative indexing) or is clipped to 0."""
    def weights(n_in, n_out):
        src = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
        i0 = np.floor(src).astype(int)
        lam = src - i0
        if wrap:
            return np.minimum(i0, n_in - 1), np.minimum(i0 + 1, n_in - 1), lam
        return np.clip(i0, 0, n_in - 1), np.clip(i0 + 1, 0, n_in - 1), lam

    i0, i1, a = weights(x.shape[-2], size[0])
    rows = x[..., i0, :] * (1 - a)[:, None] + x[..., i1, :] * a[:, None]
    j0, j1, b = weights(x.shape[-1], size[1])
    return rows[..., j0] * (1 - b) + rows[..., j1] * b


def no_half_pixel(x, size):
    """Bilinear with src = i·n_in/n_out: the pixels' corners aligned at 0 instead of their centres
    (TensorFlow 1's ``align_corners=False`` without half-pixel centres)."""
    def weights(n_in, n_out):
        src = np.arange(n_out) * (n_in / n_out)
        i0 = np.minimum(np.floor(src).astype(int), n_in - 1)
        return i0, np.minimum(i0 + 1, n_in - 1), src - i0

    i0, i1, a = weights(x.shape[-2], size[0])
    rows = x[..., i0, :] * (1 - a)[:, None] + x[..., i1, :] * a[:, None]
    j0, j1, b = weights(x.shape[-1], size[1])
    return rows[..., j0] * (1 - b) + rows[..., j1] * b


def bl_mistakes(x, size, align_corners=False):
    if align_corners:
        return [(bilinear(x, size), "this is align_corners=False: with align_corners=True the corner pixels' "
                                    "centres line up, src = i·(n_in − 1)/(n_out − 1)"),
                (nearest(x, size), "nearest-neighbour: mix the two nearest input pixels with weights (1 − λ, λ)")]
    out = [(bilinear(x, size, align_corners=True), "this is align_corners=True (src = i·(n_in − 1)/(n_out − 1)): "
                                                   "with align_corners=False pixel centres sit at i + 0.5, "
                                                   "src = (i + 0.5)·n_in/n_out − 0.5"),
           (no_half_pixel(x, size), "without half-pixel centres: src = i·n_in/n_out lines up the pixels' "
                                    "corners; with align_corners=False the centres sit at i + 0.5, "
                                    "src = (i + 0.5)·n_in/n_out − 0.5 (clamped at 0)"),
           (nearest(x, size), "nearest-neighbour: mix the two nearest input pixels with weights (1 − λ, λ)"),
           (unclamped(x, size), "clamp src at 0: the first output pixels of an upsampling read index "
                                "-1, which NumPy wraps around to the last pixel"),
           (unclamped(x, size, wrap=False), "clamp src at 0 (before computing λ): the first output pixels "
                                            "of an upsampling read before pixel 0's centre")]
    H, W = x.shape[-2:]
    if (H, W) != (W, H) or tuple(size) != tuple(size)[::-1]:
        swapped = bilinear(np.swapaxes(x, -1, -2), size[::-1]).swapaxes(-1, -2)
        out.append((swapped, "rows and columns are mixed up: the height scale is H/H_out, the width scale W/W_out"))
    return out


@exercise("8.1", "bilinear_resize", MOD, 12, forbid=NUMPY_ONLY + ("scipy",))
def bilinear_resize(g):
    f = g.fn("bilinear_resize")

    @g.part("worked example: 2x2 -> 4x4", 2)
    def _():
        x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
        close(f(x, (4, 4)), bilinear(x, (4, 4)), "bilinear_resize([[1, 2], [3, 4]], (4, 4))", atol=1e-12,
              mistakes=lambda: bl_mistakes(x, (4, 4)))

    @g.part("upsampling (x2, x4, odd grids, any ratio) vs F.interpolate", 2)
    def _():
        r = rng(801)
        for (H, W), size in [((7, 7), (14, 14)), ((7, 7), (28, 28)), ((5, 3), (10, 6)), ((3, 4), (7, 9)),
                             ((1, 1), (3, 2)), ((4, 6), (5, 13))]:
            x = r.standard_normal((2, 3, H, W))
            close(f(x, size), bilinear(x, size), f"resize {H}x{W} -> {size[0]}x{size[1]}", atol=1e-10,
                  mistakes=lambda: bl_mistakes(x, size))

    @g.part("downsampling (x1/2, x1/4, odd grids, to 1x1) vs F.interpolate", 2)
    def _():
        r = rng(802)
        for (H, W), size in [((28, 28), (14, 14)), ((28, 28), (7, 7)), ((7, 7), (3, 3)), ((9, 6), (4, 5)),
                             ((5, 8), (1, 1)), ((6, 9), (2, 3))]:
            x = r.standard_normal((1, 4, H, W))
            close(f(x, size), bilinear(x, size), f"resize {H}x{W} -> {size[0]}x{size[1]}", atol=1e-10,
                  mistakes=lambda: bl_mistakes(x, size))

    @g.part("align_corners=True, up and down (and to 1x1) vs F.interpolate", 3)
    def _():
        r = rng(806)
        x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
        close(f(x, (3, 3), align_corners=True), bilinear(x, (3, 3), align_corners=True),
              "bilinear_resize([[1, 2], [3, 4]], (3, 3), align_corners=True)", atol=1e-12,
              mistakes=lambda: bl_mistakes(x, (3, 3), align_corners=True))
        for (H, W), size in [((7, 7), (14, 14)), ((5, 3), (11, 4)), ((28, 28), (7, 7)), ((9, 6), (4, 5)),
                             ((5, 8), (1, 1)), ((1, 1), (3, 2)), ((4, 6), (1, 5))]:
            x = r.standard_normal((2, 2, H, W))
            close(f(x, size, align_corners=True), bilinear(x, size, align_corners=True),
                  f"resize {H}x{W} -> {size[0]}x{size[1]}, align_corners=True", atol=1e-10,
                  mistakes=lambda: bl_mistakes(x, size, align_corners=True))

    @g.part("float32 in, float32 out", 1)
    def _():
        x = rng(803).standard_normal((2, 3, 6, 5)).astype(np.float32)
        close(f(x, (9, 4)), bilinear(x, (9, 4)), "float32 resize", atol=1e-5, dtype=np.float32,
              mistakes=lambda: bl_mistakes(x, (9, 4)))
        close(f(x, (4, 9), align_corners=True), bilinear(x, (4, 9), align_corners=True),
              "float32 resize, align_corners=True", atol=1e-5, dtype=np.float32)

    @g.part("rows and columns scale independently", 1)
    def _():
        x = rng(804).standard_normal((1, 2, 3, 8))
        close(f(x, (9, 2)), bilinear(x, (9, 2)), "resize 3x8 -> 9x2", atol=1e-10,
              mistakes=lambda: bl_mistakes(x, (9, 2)))

    def make(H=4, W=4, C=2):
        x = rng(805).standard_normal((1, C, H, W))
        return f.later(x, (2 * H + 1, 2 * W - 1))

    g.no_loops(1, make, {"pixel rows": ({"H": 4}, {"H": 12}, 8), "pixel columns": ({"W": 4}, {"W": 12}, 8),
                         "channels": ({"C": 2}, {"C": 10}, 8)},
               requires=["upsampling (x2, x4, odd grids, any ratio) vs F.interpolate"])


def tokens_ref(x, size, new_size, mode="right"):
    xt = T(np.asarray(x, dtype=np.float64))
    B, n, C = xt.shape
    H, W = size
    cls, img = xt[:, :1], xt[:, 1:]
    if mode == "no_transpose":
        grid = img.reshape(B, C, H, W)
    elif mode == "swap":
        grid = img.transpose(1, 2).reshape(B, C, W, H).transpose(-1, -2)
    else:
        grid = img.transpose(1, 2).reshape(B, C, H, W)
    out = F.interpolate(grid, size=tuple(new_size), mode="bilinear", align_corners=mode == "align_corners")
    if mode == "no_transpose":
        out = out.reshape(B, -1, C)
    elif mode == "swap":
        out = out.transpose(-1, -2).flatten(2).transpose(1, 2)
    else:
        out = out.flatten(2).transpose(1, 2)
    if mode == "drop_cls":
        return N(out)
    return N(torch.cat([cls, out], dim=1))


def tok_mistakes(x, size, new_size):
    out = [(tokens_ref(x, size, new_size, "no_transpose"), "(B, N, C) tokens are channels-last: transpose "
                                                           "to (B, C, N) before reshaping to (B, C, H, W), "
                                                           "and back afterwards"),
           (tokens_ref(x, size, new_size, "drop_cls"), "the class token is missing: carry it over unchanged, "
                                                       "(B, 1 + H'·W', C)"),
           (tokens_ref(x, size, new_size, "align_corners"), "resized with align_corners=True: CoaT's co-scale "
                                                            "resizes with F.interpolate(..., mode=\"bilinear\", "
                                                            "align_corners=False), pixel centres at i + 0.5")]
    if tuple(size) != tuple(size)[::-1] or tuple(new_size) != tuple(new_size)[::-1]:
        out.append((tokens_ref(x, size, new_size, "swap"), "the grid is (H, W) in raster order: "
                                                            "reshape to (B, C, H, W), not (B, C, W, H)"))
    return out


@exercise("8.2", "interpolate_tokens", MOD, 10)
def interpolate_tokens(g):
    f = g.fn("interpolate_tokens")

    def run(x, size, new_size):
        out = f(T(x), size, new_size)
        if not isinstance(out, torch.Tensor):
            raise Fail(f"interpolate_tokens must return a tensor, got {type_name(out)}")
        return N(out)

    @g.part("worked example: a 2x2 grid to 4x4, class token first", 2)
    def _():
        x = rng(811).standard_normal((1, 5, 3))
        close(run(x, (2, 2), (4, 4)), tokens_ref(x, (2, 2), (4, 4)), "interpolate_tokens 2x2 -> 4x4",
              atol=1e-12, mistakes=lambda: tok_mistakes(x, (2, 2), (4, 4)))

    @g.part(TOKENS_FORWARD, 3)
    def _():
        r = rng(812)
        for B, (H, W), new, C in [(2, (7, 7), (14, 14), 8), (1, (28, 28), (7, 7), 4), (3, (3, 5), (6, 10), 6),
                                  (2, (6, 4), (3, 2), 5), (1, (4, 4), (5, 3), 2)]:
            x = r.standard_normal((B, 1 + H * W, C))
            close(run(x, (H, W), new), tokens_ref(x, (H, W), new), f"tokens on a {H}x{W} grid -> {new}",
                  atol=1e-10, mistakes=lambda: tok_mistakes(x, (H, W), new))

    @g.part("the class token is carried over exactly", 1, requires=[TOKENS_FORWARD])
    def _():
        x = rng(813).standard_normal((2, 1 + 12, 4))
        got = run(x, (3, 4), (6, 8))
        if got.ndim != 3 or got.shape[1] != 1 + 48:
            raise Fail(f"expected shape (2, 49, 4), got {got.shape}")
        close(got[:, 0], x[:, 0], "the class token after resizing", atol=0)

    @g.part("gradients flow back to every token", 1, requires=[TOKENS_FORWARD])
    def _():
        x = T(rng(814).standard_normal((2, 1 + 9, 3))).requires_grad_()
        out, (grad,) = f.with_grad(x, (3, 3), (5, 5), wrt=(0,))
        if not isinstance(out, torch.Tensor):
            raise Fail(f"interpolate_tokens must return a tensor, got {type_name(out)}")
        if not isinstance(grad, torch.Tensor) or tuple(grad.shape) != tuple(x.shape) or \
                float(grad[:, 0].abs().min()) == 0 or float(grad[:, 1:].abs().min()) == 0:
            raise Fail("some input tokens get no gradient: keep every step a torch operation on x")

    @g.part("ValueError when the tokens do not make 1 + H·W", 1, requires=[TOKENS_FORWARD])
    def _():
        expect_error(ValueError, lambda: f(torch.zeros(1, 10, 3), (3, 4), (6, 8)), "10 tokens for a 3x4 grid")

    def make(H=4, W=4, C=2):
        x = torch.zeros(1, 1 + H * W, C)
        return f.later(x, (H, W), (2 * H, 2 * W))

    g.no_loops(2, make, {"pixel rows": ({"H": 4}, {"H": 12}, 8), "pixel columns": ({"W": 4}, {"W": 12}, 8),
                         "channels": ({"C": 2}, {"C": 10}, 8)},
               requires=[TOKENS_FORWARD])
