"""HIDDEN TESTS -- instructors only. Notebook 03: the Vision Transformer."""

import numpy as np
import torch
from torch import nn

from exercises.feedback import Fail, close, equal, expect_error, type_name
from exercises.grader.judge import exercise

from .references import NUMPY_ONLY, N, T, block, block_params, expected_keys, rng

MOD = "ex03_vision_transformer"
LAYERS = "vit_scratch.numpy_nn.layers."
BLOCK_FORWARD = "forward vs an independent reference (float64, random weights)"


def vit_params_reference(img_size, patch_size, in_chans, embed_dim, depth, mlp_ratio, num_classes,
                         qkv_bias=True) -> int:
    """Build the model's parameters on the meta device (no memory, no time) and count them."""
    H, W = (img_size, img_size) if isinstance(img_size, int) else img_size
    C, hidden = embed_dim, int(embed_dim * mlp_ratio)
    with torch.device("meta"):
        parts = [nn.Conv2d(in_chans, C, patch_size, patch_size), nn.LayerNorm(C)]
        tokens = [nn.Parameter(torch.empty(1, 1, C)),
                  nn.Parameter(torch.empty(1, 1 + (H // patch_size) * (W // patch_size), C))]
        for _ in range(depth):
            parts += [nn.LayerNorm(C), nn.Linear(C, 3 * C, bias=qkv_bias), nn.Linear(C, C),
                      nn.LayerNorm(C), nn.Linear(C, hidden), nn.Linear(hidden, C)]
        if num_classes:
            parts.append(nn.Linear(C, num_classes))
    return sum(p.numel() for m in parts for p in m.parameters()) + sum(t.numel() for t in tokens)


@exercise("3.1", "vit_num_params", MOD, 8, forbid=NUMPY_ONLY)
def vit_num_params(g):
    f = g.fn("vit_num_params")

    def mistakes(args, kwargs):
        ref = vit_params_reference(*args, **kwargs)
        C, depth, ratio = args[3], args[4], args[5]
        out = [(ref - C, "off by embed_dim: the class token has a position embedding too "
                         "(pos_embed is (1, 1 + N, C))"),
               (ref - depth * 4 * C, "the two LayerNorms of each block have a weight and a bias"),
               (ref - 2 * C, "the final LayerNorm (norm) has 2·C parameters")]
        if kwargs.get("qkv_bias", True):
            out.append((ref - depth * 3 * C, "the qkv projection has a bias of 3·C"))
        rounded = round(C * ratio) - int(C * ratio)
        if rounded:
            out.append((ref + depth * rounded * (2 * C + 1), "the MLP's hidden size is int(C · mlp_ratio), "
                                                             "rounded down (timm), not round()"))
        return out

    def check(*args, **kwargs):
        equal(f(*args, **kwargs), vit_params_reference(*args, **kwargs),
              f"vit_num_params{args}{'' if not kwargs else ' ' + str(kwargs)}",
              mistakes=lambda: mistakes(args, kwargs))

    @g.part("vit_tiny_patch16_224: 5,717,416", 2)
    def _():
        check(224, 16, 3, 192, 12, 4.0, 1000)

    @g.part("random configurations (C · mlp_ratio = 76.6 and 27.5 round down)", 3)
    def _():
        for args in [(32, 8, 1, 20, 2, 3.83, 10), (40, 8, 3, 10, 3, 2.75, 4), (32, 8, 1, 48, 2, 2.0, 10),
                     (64, 16, 3, 96, 5, 4.0, 7), (384, 16, 3, 768, 12, 4.0, 1000), (30, 3, 2, 20, 3, 2.5, 5),
                     (16, 16, 3, 10, 1, 1.0, 1), (28, 7, 1, 33, 4, 2.7, 3)]:
            check(*args)

    @g.part("rectangular img_size (224, 160)", 1)
    def _():
        check((224, 160), 16, 3, 192, 12, 4.0, 1000)

    @g.part("num_classes = 0: no head", 1)
    def _():
        check(224, 16, 3, 192, 12, 4.0, 0)

    @g.part("qkv_bias = False", 1)
    def _():
        check(64, 8, 3, 64, 3, 4.0, 10, qkv_bias=False)


def block_mistakes(x, p, h):
    C = x.shape[-1]
    out = [(block(x, p, h, post_norm=True), "post-norm: ViT normalises the input of each branch, "
                                            "x = x + attn(norm1(x)), and leaves the sum alone"),
           (block(x, p, h, gelu="tanh"), "the tanh approximation of GELU: use the exact erf form"),
           (block(x, p, h, eps=1e-5), "LayerNorm eps 1e-5 (PyTorch's default): ViT uses 1e-6"),
           (block(x, p, h, unbiased=True), "LayerNorm with the unbiased variance: divide by C, not C − 1"),
           (block(x, p, h, residual=False), "the residual connections are missing: x = x + branch(x)"),
           (block(x, p, h, scale="after"), "the scale 1/√d goes before the softmax, not after"),
           (block(x, p, h, scale="none"), "the attention scores need the scale 1/√d")]
    if h > 1 and C // h > 1:
        out.append((block(x, p, h, heads="dh"), "heads split in the wrong order: channels are "
                                                "head-major, (h d), not (d h)"))
    if h > 1 and x.shape[1] > 1:
        out.append((block(x, p, h, heads="merge_reshape"), "heads merged without the transpose: a reshape of "
                                                           "(B, h, N, d) to (B, N, C) mixes tokens and heads -- "
                                                           "transpose to (B, N, h, d) first"))
    return out


@exercise("3.2", "block_forward", MOD, 12, forbid=NUMPY_ONLY,
          allow=tuple(LAYERS + n for n in ("layer_norm", "linear", "gelu", "softmax")))
def block_forward(g):
    f = g.fn("block_forward")

    @g.part("one block vs an independent reference", 3)
    def _():
        x = rng(301).standard_normal((2, 7, 12))
        p = block_params(12, 3, 48, seed=302)
        close(f(x, p, 3), block(x, p, 3), "block_forward (B=2, N=7, C=12, 3 heads)", atol=1e-10,
              mistakes=lambda: block_mistakes(x, p, 3))

    @g.part("random shapes: one head, one token, batch of one, MLP ratio 2", 2)
    def _():
        r = rng(303)
        for B, n, C, h, hidden in [(1, 5, 16, 4, 64), (3, 1, 8, 2, 16), (2, 6, 6, 1, 12), (1, 9, 20, 5, 40)]:
            x = r.standard_normal((B, n, C))
            p = block_params(C, h, hidden, seed=int(r.integers(1 << 30)))
            close(f(x, p, h), block(x, p, h), f"block_forward (B={B}, N={n}, C={C}, {h} heads)",
                  atol=1e-10, mistakes=lambda: block_mistakes(x, p, h))

    @g.part("large logits (attention scores in the thousands)", 2)
    def _():
        x = rng(310).standard_normal((2, 6, 16))
        p = block_params(16, 2, 32, seed=311)
        p["attn.qkv.weight"] = 40 * p["attn.qkv.weight"]
        got = f(x, p, 2)
        if np.asarray(got).shape == x.shape and not np.isfinite(np.asarray(got, dtype=float)).all():
            raise Fail("NaN or inf for large attention scores: exp() overflowed -- subtract each row's "
                       "maximum before exp() (not the minimum, and not nothing)")
        close(got, block(x, p, 2), "block_forward with scores in the thousands", atol=1e-8, rtol=1e-10)

    @g.part("float32 in, float32 out", 1)
    def _():
        x = rng(304).standard_normal((2, 5, 16)).astype(np.float32)
        p = block_params(16, 4, 64, seed=305, dtype=np.float32)
        close(f(x, p, 4), block(x, p, 4), "float32 block_forward", atol=2e-5, rtol=1e-5, dtype=np.float32)

    @g.part("quiet tokens (where LayerNorm's eps matters)", 2)
    def _():
        x = 1e-3 * rng(306).standard_normal((1, 6, 16))
        p = block_params(16, 2, 32, seed=307)
        close(f(x, p, 2), block(x, p, 2), "block_forward on tokens of size 1e-3", atol=1e-10,
              mistakes=lambda: block_mistakes(x, p, 2))

    def make(n=3, h=2):
        x = rng(308).standard_normal((1, n, 2 * h))
        p = block_params(2 * h, h, 4 * h, seed=309)
        return f.later(x, p, h)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random shapes: one head, one token, batch of one, MLP ratio 2"])


def rollout_ref(maps, fusion="mean", residual=True, renorm=True, order="left", renorm_axis=-1):
    out = None
    for m in maps:
        a = m.mean(axis=1) if fusion == "mean" else m.max(axis=1)
        if residual:
            a = a + np.eye(a.shape[-1])
        if renorm:
            a = a / a.sum(renorm_axis, keepdims=True)
        out = a if out is None else (a @ out if order == "left" else out @ a)
    return out


@exercise("3.3", "attention_rollout", MOD, 8, forbid=NUMPY_ONLY)
def attention_rollout(g):
    f = g.fn("attention_rollout")

    def mistakes(maps):
        return [(rollout_ref(maps, residual=False), "the residual path is missing: add the identity "
                                                    "to each block's averaged map"),
                (rollout_ref(maps, order="right"), "the product is in the wrong order: later blocks "
                                                   "go on the left, R = A_L ... A_1"),
                (rollout_ref(maps, renorm=False), "renormalise each row to sum to 1 after adding "
                                                  "the identity"),
                (rollout_ref(maps, fusion="max"), "average the heads (mean over axis 1), not max"),
                (rollout_ref(maps, renorm_axis=-2), "renormalised over the columns: each row (a query's "
                                                    "weights, the last axis) must sum to 1 -- divide by "
                                                    "a.sum(axis=-1, keepdims=True)")]

    @g.part("hand-worked: token 0 copies token 1", 2)
    def _():
        a = np.array([[[[0.0, 1.0], [0.0, 1.0]]]])
        one = np.array([[0.5, 0.5], [0.0, 1.0]])
        close(f([a])[0], one, "rollout of one block", atol=1e-12, mistakes=[(m[0], t) for m, t in mistakes([a])])
        close(f([a, a])[0], one @ one, "rollout of two blocks", atol=1e-12)

    @g.part("random maps: blocks, heads, batch of one", 3)
    def _():
        r = rng(311)
        for B, h, n, L in [(2, 3, 6, 3), (1, 1, 4, 1), (3, 4, 5, 4), (1, 2, 9, 2)]:
            maps = [r.dirichlet(np.ones(n), size=(B, h, n)) for _ in range(L)]
            close(f(maps), rollout_ref(maps), f"rollout of {L} blocks, B={B}, {h} heads, N={n}",
                  atol=1e-12, mistakes=lambda: mistakes(maps))

    @g.part("shape (B, N, N), rows sum to 1", 1, requires=["random maps: blocks, heads, batch of one"])
    def _():
        maps = [rng(312).dirichlet(np.ones(7), size=(2, 3, 7)) for _ in range(5)]
        got = np.asarray(f(maps))
        if got.shape != (2, 7, 7):
            raise Fail(f"expected shape (2, 7, 7), got {got.shape}")
        close(got.sum(-1), np.ones((2, 7)), "row sums of the rollout", atol=1e-10)

    def make(n=3, h=2):
        maps = [rng(313).dirichlet(np.ones(n), size=(1, h, n)) for _ in range(3)]
        return f.later(maps)

    g.no_loops(2, make, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=["random maps: blocks, heads, batch of one"])


# ---- PyTorch modules -------------------------------------------------------------------------------

def check_keys(module, expected: dict, what: str, hint: str = "") -> None:
    got = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:4])}")
        if extra:
            parts.append(f"unexpected {', '.join(extra[:4])}")
        raise Fail(f"{what}: state_dict keys differ from timm's: {'; '.join(parts)}")
    for k, shape in expected.items():
        if got[k] != tuple(shape):
            raise Fail(f"{what}: {k} has shape {got[k]}, expected {tuple(shape)}" + (f": {hint}" if hint else ""))


def load(module, params: dict, dtype=torch.float64):
    module = module.to(dtype)
    try:
        module.load_state_dict({k: T(v).to(dtype) for k, v in params.items()}, strict=True)
    except RuntimeError as err:
        raise Fail(f"load_state_dict(strict=True) failed: {str(err).splitlines()[0][:120]}") from None
    return module.eval()


def forward(module, x):
    with torch.no_grad():
        out = module(T(x))
    if not isinstance(out, torch.Tensor):
        raise Fail(f"forward must return a tensor, got {type_name(out)}")
    return N(out)


def grads_reach_everything(module, x) -> None:
    dead = module.dead_parameters(T(x))
    if dead:
        raise Fail(f"no gradient reaches {', '.join(dead[:3])}")


@exercise("3.4", "Block", MOD, 12)
def block_module(g):
    make = g.cls("Block")

    def eps_hint(m):
        return any(e != 1e-6 for e in m.layer_norm_eps())

    @g.part(BLOCK_FORWARD, 5)
    def _():
        r = rng(341)
        for B, n, C, h, ratio in [(2, 7, 12, 3, 4.0), (1, 5, 8, 1, 2.0), (3, 1, 16, 4, 4.0), (2, 6, 10, 5, 3.0),
                                  (2, 3, 10, 2, 2.75)]:
            hidden = int(C * ratio)
            p = block_params(C, h, hidden, seed=int(r.integers(1 << 30)))
            m = make(C, h, mlp_ratio=ratio)
            check_keys(m, expected_keys(C, hidden), f"Block({C}, {h}, mlp_ratio={ratio})",
                       hint="" if hidden == round(C * ratio) else
                       f"the MLP's hidden size is int(dim · mlp_ratio) = {hidden}, rounded down (timm), not round()")
            m = load(m, p)
            x = r.standard_normal((B, n, C))
            if eps_hint(m):
                raise Fail("a LayerNorm has eps != 1e-6 (nn.LayerNorm's default is 1e-5; ViT uses 1e-6)")
            close(forward(m, x), block(x, p, h), f"Block({C}, {h}) on (B={B}, N={n})", atol=1e-10,
                  mistakes=lambda: block_mistakes(x, p, h))

    @g.part("state_dict keys and shapes (timm's names)", 2, requires=[BLOCK_FORWARD])
    def _():
        check_keys(make(12, 3), expected_keys(12, 48), "Block(12, 3)")
        check_keys(make(8, 2, mlp_ratio=2.0, qkv_bias=False), expected_keys(8, 16, qkv_bias=False),
                   "Block(8, 2, mlp_ratio=2.0, qkv_bias=False)")
        check_keys(make(10, 2, mlp_ratio=2.75), expected_keys(10, 27), "Block(10, 2, mlp_ratio=2.75)",
                   hint="the MLP's hidden size is int(dim · mlp_ratio) = 27, rounded down (timm), not round()")

    @g.part("float32 (PyTorch's default dtype)", 1)
    def _():
        p = block_params(12, 3, 48, seed=342, dtype=np.float32)
        m = load(make(12, 3), p, dtype=torch.float32)
        x = rng(343).standard_normal((2, 5, 12)).astype(np.float32)
        close(forward(m, x), block(x, p, 3), "float32 Block", atol=2e-5, rtol=1e-5, dtype=np.float32,
              mistakes=lambda: block_mistakes(x, p, 3))

    @g.part("gradients reach every parameter", 1, requires=[BLOCK_FORWARD])
    def _():
        m = load(make(8, 2), block_params(8, 2, 32, seed=344))
        grads_reach_everything(m, rng(345).standard_normal((2, 3, 8)))

    @g.part("ValueError when dim is not a multiple of num_heads", 1, requires=[BLOCK_FORWARD])
    def _():
        expect_error(ValueError, lambda: make(10, 3), "Block(10, 3)")

    def make_call(n=3, h=2):
        m = load(make(2 * h, h), block_params(2 * h, h, 8 * h, seed=346))
        x = T(rng(347).standard_normal((1, n, 2 * h)))

        return m.later(x)

    g.no_loops(2, make_call, {"tokens": ({"n": 3}, {"n": 19}, 16), "heads": ({"h": 2}, {"h": 12}, 10)},
               requires=[BLOCK_FORWARD])
