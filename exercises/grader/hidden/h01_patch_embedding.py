"""HIDDEN TESTS -- instructors only. Notebook 01: patch embedding."""
import numpy as np
import torch.nn.functional as F
from einops import rearrange

from exercises.feedback import close, expect_error
from exercises.grader.judge import exercise

from .references import NUMPY_ONLY, N, T, rng

MOD = "ex01_patch_embedding"


def unfold(x, P):
    return N(F.unfold(T(x), kernel_size=P, stride=P).transpose(1, 2))


def patchify_mistakes(x, P):
    return [
        (rearrange(x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=P, p2=P),
         "each patch is flattened (row, col, channel); a Conv2d weight (E, C, P, P) reads "
         "(channel, row, col): transpose C before the two inside-patch axes"),
        (rearrange(x, "b c (h p1) (w p2) -> b (w h) (c p1 p2)", p1=P, p2=P),
         "the patches are in column-major order: raster order goes along a row first "
         "(the grid axes must be (H/P, W/P), in that order)"),
        (rearrange(x, "b c (h p1) (w p2) -> b (h w) (c p2 p1)", p1=P, p2=P),
         "inside a patch, columns come before rows: the order is (channel, row, col)"),
        (x.reshape(x.shape[0], -1, x.shape[1] * P * P),
         "a plain reshape mixes pixels of different patches: split H and W into "
         "(grid, inside-patch) axes and transpose before merging"),
    ]


@exercise("1.1", "patchify_reshape", MOD, 10, forbid=NUMPY_ONLY + ("einops",))
def patchify_reshape(g):
    f = g.fn("patchify_reshape")

    @g.part("worked example (1, 2, 4, 6), P = 2", 2)
    def _():
        x = np.arange(48.0).reshape(1, 2, 4, 6)
        got = f(x, 2)
        close(got, unfold(x, 2), "patches", atol=0, mistakes=lambda: patchify_mistakes(x, 2))

    @g.part("random shapes (square and not, P = 1 ... 16)", 3)
    def _():
        r = rng(11)
        for B, C, gh, gw, P in [(2, 3, 2, 3, 16), (1, 1, 4, 4, 2), (3, 4, 4, 2, 3), (1, 3, 1, 1, 16),
                                (2, 2, 1, 5, 4), (1, 3, 7, 1, 1), (2, 1, 3, 3, 5)]:
            x = r.standard_normal((B, C, gh * P, gw * P))
            close(f(x, P), unfold(x, P), f"patchify of {x.shape} with P={P}", atol=0,
                  mistakes=lambda: patchify_mistakes(x, P))

    @g.part("float32 stays float32", 1)
    def _():
        x = rng(12).standard_normal((2, 3, 8, 12)).astype(np.float32)
        close(f(x, 4), unfold(x, 4), "patchify of float32 images", atol=0, dtype=np.float32)

    @g.part("ValueError when H or W is not a multiple of P", 2,
            requires=["random shapes (square and not, P = 1 ... 16)"])
    def _():
        expect_error(ValueError, lambda: f(np.zeros((1, 3, 30, 32)), 16), "H=30, P=16", mention="30")
        expect_error(ValueError, lambda: f(np.zeros((1, 3, 32, 20)), 16), "W=20, P=16", mention="20")

    def make(gh=2, gw=2, P=2):
        x = np.zeros((1, 2, gh * P, gw * P))
        return f.later(x, P)

    g.no_loops(2, make, {"patch rows": ({"gh": 2}, {"gh": 10}, 8),
                         "patch columns": ({"gw": 2}, {"gw": 10}, 8),
                         "pixels inside a patch": ({"P": 2}, {"P": 10}, 8)},
               requires=["random shapes (square and not, P = 1 ... 16)"])


@exercise("1.2", "unpatchify", MOD, 10, forbid=NUMPY_ONLY + ("einops",))
def unpatchify(g):
    f = g.fn("unpatchify")

    def mistakes(patches, P, H, W):
        B, n, D = patches.shape
        C = D // (P * P)
        return [(rearrange(patches, "b (w h) (c p1 p2) -> b c (h p1) (w p2)", h=H // P, w=W // P,
                           p1=P, p2=P),
                 "the grid is read column by column: patch n sits at row n // (W/P), column n % (W/P)"),
                (patches.reshape(B, C, H, W) if n * D == B * C * H * W else np.zeros(0),
                 "a plain reshape puts pixels of different patches side by side: undo the transpose")]

    @g.part("worked example: a (1, 2, 4, 6) image, P = 2", 2)
    def _():
        x = np.arange(48.0).reshape(1, 2, 4, 6)
        p = unfold(x, 2)
        close(f(p, 2, (4, 6)), x, "unpatchify(patches, 2, (4, 6))", atol=0, mistakes=lambda: mistakes(p, 2, 4, 6))

    @g.part("random round trips, square and rectangular", 3)
    def _():
        r = rng(21)
        for B, C, gh, gw, P in [(2, 3, 2, 3, 4), (1, 1, 5, 2, 2), (3, 2, 1, 4, 3), (1, 3, 1, 1, 8),
                                (2, 4, 3, 1, 1)]:
            x = r.standard_normal((B, C, gh * P, gw * P))
            p = unfold(x, P)
            close(f(p, P, (gh * P, gw * P)), x, f"unpatchify back to {x.shape}", atol=0,
                  mistakes=lambda: mistakes(p, P, gh * P, gw * P))

    @g.part("img_size as one int (square image)", 1)
    def _():
        x = rng(22).standard_normal((2, 3, 12, 12))
        close(f(unfold(x, 4), 4, 12), x, "unpatchify(patches, 4, 12)", atol=0)

    @g.part("ValueError for patches that do not fit the image", 2,
            requires=["random round trips, square and rectangular"])
    def _():
        p = np.zeros((1, 6, 3 * 4))
        expect_error(ValueError, lambda: f(p, 2, (4, 4)), "6 patches for a 2x2 grid")
        expect_error(ValueError, lambda: f(np.zeros((1, 4, 10)), 2, (4, 4)), "patch length 10 with P=2")
        expect_error(ValueError, lambda: f(np.zeros((1, 4, 12)), 2, (5, 4)), "H=5 with P=2")

    def make(gh=2, gw=2):
        p = np.zeros((1, gh * gw, 2 * 4))
        return f.later(p, 2, (2 * gh, 2 * gw))

    g.no_loops(2, make, {"patch rows": ({"gh": 2}, {"gh": 10}, 8),
                         "patch columns": ({"gw": 2}, {"gw": 10}, 8)},
               requires=["random round trips, square and rectangular"])


@exercise("1.3", "conv_weight_to_hwc_linear", MOD, 8)
def conv_weight_to_hwc_linear(g):
    f = g.fn("conv_weight_to_hwc_linear")

    def mistakes(w):
        E = w.shape[0]
        return [(w.reshape(E, -1), "a plain reshape keeps the conv's (channel, row, col) order; "
                                   "the Linear reads (row, col, channel)"),
                (w.transpose(0, 3, 2, 1).reshape(E, -1), "rows and columns are swapped: the order is "
                                                          "(row, col, channel)")]

    @g.part("worked example: E = 1, C = 2, P = 2", 2)
    def _():
        w = np.arange(8.0).reshape(1, 2, 2, 2)
        close(f(w), [[0, 4, 1, 5, 2, 6, 3, 7]], "converted weight", atol=0, mistakes=lambda: mistakes(w))

    @g.part("random convs: hwc patches @ W.T + b equals the Conv2d", 4)
    def _():
        r = rng(31)
        for E, C, P in [(5, 3, 4), (3, 2, 16), (4, 1, 3), (2, 3, 1), (6, 4, 2)]:
            w, b = r.standard_normal((E, C, P, P)), r.standard_normal(E)
            x = r.standard_normal((2, C, 2 * P, 3 * P))
            conv = N(F.conv2d(T(x), T(w), T(b), stride=P).flatten(2).transpose(1, 2))
            hwc = rearrange(x, "b c (h s1) (w s2) -> b (h w) (s1 s2 c)", s1=P, s2=P)
            got = f(w)
            close(got, w.transpose(0, 2, 3, 1).reshape(E, -1), f"weight of shape {w.shape}",
                  atol=0, mistakes=lambda: mistakes(w))
            close(hwc @ np.asarray(got).T + b, conv, "hwc patches @ W.T + b vs the conv")

    @g.part("float32 weights stay float32, values unchanged", 2)
    def _():
        w = rng(32).standard_normal((3, 3, 4, 4)).astype(np.float32)
        got = f(w)
        close(got, w.transpose(0, 2, 3, 1).reshape(3, -1), "float32 weight", atol=0, dtype=np.float32)


@exercise("1.4", "pos_embed_similarity", MOD, 8, forbid=NUMPY_ONLY)
def pos_embed_similarity(g):
    f = g.fn("pos_embed_similarity")

    def ref(pe, prefix):
        t = T(pe[0, prefix:])
        return N(F.cosine_similarity(t[:, None], t[None], dim=-1))

    def mistakes(pe, prefix):
        raw = pe[0, prefix:]
        by_token = raw / np.linalg.norm(raw, axis=0, keepdims=True)
        return [(ref(pe, 0), "the prefix tokens (class token) must be skipped: the result is (N, N) "
                             "over the patches only"),
                (raw @ raw.T, "these are dot products: normalise each embedding to unit length first"),
                (by_token @ by_token.T, "each embedding (a row, over its C channels) must have unit "
                                        "length; you normalised over the tokens")]

    @g.part("worked example: 3 patches in 2-D after a class token", 2)
    def _():
        pe = np.array([[[9.0, 9.0], [1.0, 0.0], [0.0, 2.0], [3.0, 3.0]]])
        s = np.sqrt(0.5)
        close(f(pe), [[1, 0, s], [0, 1, s], [s, s, 1]], "similarity", atol=1e-12,
              mistakes=lambda: mistakes(pe, 1))

    @g.part("random embeddings", 3)
    def _():
        r = rng(41)
        for n, C in [(16, 8), (49, 32), (1, 4), (7, 1), (30, 64)]:
            pe = r.standard_normal((1, 1 + n, C))
            close(f(pe), ref(pe, 1), f"similarity of {n} patches, C={C}", atol=1e-12,
                  mistakes=lambda: mistakes(pe, 1))

    @g.part("num_prefix_tokens = 0 and 2", 1)
    def _():
        pe = rng(42).standard_normal((1, 12, 6))
        close(f(pe, num_prefix_tokens=0), ref(pe, 0), "num_prefix_tokens=0", atol=1e-12)
        close(f(pe, num_prefix_tokens=2), ref(pe, 2), "num_prefix_tokens=2", atol=1e-12)

    def make(n=4):
        pe = rng(43).standard_normal((1, 1 + n, 8))
        return f.later(pe)

    g.no_loops(2, make, {"tokens": ({"n": 4}, {"n": 20}, 16)}, requires=["random embeddings"])
