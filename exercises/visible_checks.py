"""The visible checks: shapes and one worked example per exercise, with a hint when wrong.

Run them with ``python -m exercises.check NN`` (or ``pytest exercises``). They are quick and
friendly, not exhaustive: the grader's hidden tests also try many random shapes, float32,
edge cases, large values, and check that there are no Python loops and no calls to the
library's reference versions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from exercises.feedback import Fail, close, describe_error, expect_error

TOPICS = {
    "01": ("ex01_patch_embedding", "patch embedding"),
    "02": ("ex02_self_attention", "self-attention"),
    "03": ("ex03_vision_transformer", "the Vision Transformer"),
    "04": ("ex04_layerscale", "LayerScale"),
    "05": ("ex05_class_attention", "class attention"),
    "06": ("ex06_factorized_attention", "factorized attention"),
    "07": ("ex07_conv_position_encoding", "convolutional position encodings"),
    "08": ("ex08_coscale", "co-scale"),
    "10": ("ex10_backprop", "backprop by hand"),
}


def sort_key(exercise_id: str):
    """'2.10' after '2.9': exercise IDs in numeric order."""
    major, minor = exercise_id.split(".")
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0), minor


@dataclass
class Check:
    id: str
    name: str
    notebook: str
    run: Callable
    hint: str


CHECKS: dict[str, Check] = {}


def check(ex_id: str, name: str, hint: str):
    def register(run):
        CHECKS[ex_id] = Check(ex_id, name, f"{int(ex_id.split('.')[0]):02d}", run, hint)
        return run

    return register


def shape(got, expected, what):
    got_shape = tuple(np.shape(got))
    if got_shape != tuple(expected):
        raise Fail(f"{what}: expected shape {tuple(expected)}, got {got_shape}")


def torch_block(x, sd, num_heads, gamma=None):
    """A pre-norm block written with PyTorch's functional ops (the notebook's recipe)."""
    import torch
    import torch.nn.functional as F

    t = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in sd.items()}
    x = torch.as_tensor(x, dtype=torch.float64)
    B, n, C = x.shape
    h = F.layer_norm(x, (C,), t["norm1.weight"], t["norm1.bias"], eps=1e-6)
    q, k, v = F.linear(h, t["attn.qkv.weight"], t.get("attn.qkv.bias")).reshape(
        B, n, 3, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
    a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, n, C)
    a = F.linear(a, t["attn.proj.weight"], t["attn.proj.bias"])
    x = x + (a if gamma is None else torch.as_tensor(gamma[0]) * a)
    h = F.layer_norm(x, (C,), t["norm2.weight"], t["norm2.bias"], eps=1e-6)
    m = F.linear(F.gelu(F.linear(h, t["mlp.fc1.weight"], t["mlp.fc1.bias"])), t["mlp.fc2.weight"],
                 t["mlp.fc2.bias"])
    return (x + (m if gamma is None else torch.as_tensor(gamma[1]) * m)).numpy()


def random_block(C, hidden, seed=0):
    r = np.random.default_rng(seed)
    shapes = {"norm1.weight": (C,), "norm1.bias": (C,), "attn.qkv.weight": (3 * C, C),
              "attn.qkv.bias": (3 * C,), "attn.proj.weight": (C, C), "attn.proj.bias": (C,),
              "norm2.weight": (C,), "norm2.bias": (C,), "mlp.fc1.weight": (hidden, C),
              "mlp.fc1.bias": (hidden,), "mlp.fc2.weight": (C, hidden), "mlp.fc2.bias": (C,)}
    return {k: (1.0 if k.endswith("norm1.weight") or k.endswith("norm2.weight") else 0.0)
            + 0.3 * r.standard_normal(s) for k, s in shapes.items()}


def load_module(module, sd):
    import torch

    module = module.double()
    missing = set(sd) ^ set(module.state_dict())
    if missing:
        raise Fail(f"state_dict keys differ from the docstring's list: {', '.join(sorted(missing)[:4])}")
    module.load_state_dict({k: torch.as_tensor(v, dtype=torch.float64) for k, v in sd.items()})
    return module.eval()


# ---- 01 patch embedding -------------------------------------------------------------------------

@check("1.1", "patchify_reshape", "split H into (H/P, P) and W into (W/P, P), move the two grid axes "
       "first with transpose, then merge (C, P, P)")
def _(m):
    x = np.arange(48.0).reshape(1, 2, 4, 6)                   # channel 1 = channel 0 + 24
    got = m.patchify_reshape(x, 2)
    shape(got, (1, 6, 8), "patchify_reshape(x of shape (1, 2, 4, 6), 2)")
    close(got[0, 0], [0, 1, 6, 7, 24, 25, 30, 31], "patch 0 (top-left), flattened (channel, row, col)", atol=0)
    close(got[0, 1], [2, 3, 8, 9, 26, 27, 32, 33], "patch 1 (row 0, column 1: raster order)", atol=0)
    expect_error(ValueError, lambda: m.patchify_reshape(np.zeros((1, 3, 30, 32)), 16), "H=30, P=16")


@check("1.2", "unpatchify", "undo 1.1 step by step: reshape to (B, H/P, W/P, C, P, P), transpose back, reshape")
def _(m):
    x = np.arange(48.0).reshape(1, 2, 4, 6)
    patches = x.reshape(1, 2, 2, 2, 3, 2).transpose(0, 2, 4, 1, 3, 5).reshape(1, 6, 8)
    got = m.unpatchify(patches, 2, (4, 6))
    shape(got, (1, 2, 4, 6), "unpatchify(patches of shape (1, 6, 8), 2, (4, 6))")
    close(got, x, "the image back from its patches", atol=0)
    expect_error(ValueError, lambda: m.unpatchify(np.zeros((1, 5, 8)), 2, (4, 6)), "5 patches for a 2x3 grid")


@check("1.3", "conv_weight_to_hwc_linear", "the Linear's input runs over (row, col, channel): transpose "
       "(E, C, P, P) to (E, P, P, C) before reshaping")
def _(m):
    w = np.arange(8.0).reshape(1, 2, 2, 2)                    # E = 1, C = 2, P = 2
    got = m.conv_weight_to_hwc_linear(w)
    shape(got, (1, 8), "conv_weight_to_hwc_linear(weight of shape (1, 2, 2, 2))")
    close(got, [[0, 4, 1, 5, 2, 6, 3, 7]], "the weight in (row, col, channel) order", atol=0)


@check("1.4", "pos_embed_similarity", "skip the prefix entries, normalise each row to unit length, "
       "then one matrix product")
def _(m):
    pe = np.array([[[9.0, 9.0], [1.0, 0.0], [0.0, 2.0], [3.0, 3.0]]])   # a class token, then 3 patches
    got = m.pos_embed_similarity(pe)
    shape(got, (3, 3), "pos_embed_similarity(pos_embed of shape (1, 4, 2))")
    s = math.sqrt(0.5)
    close(got, [[1, 0, s], [0, 1, s], [s, s, 1]], "cosines of (1, 0), (0, 2), (3, 3)", atol=1e-12)


# ---- 02 self-attention --------------------------------------------------------------------------

@check("2.1", "softmax", "subtract the maximum along `axis` (keepdims=True) before exp()")
def _(m):
    got = m.softmax(np.array([1000.0, 1001.0, 1002.0]))
    e = np.exp([-2.0, -1.0, 0.0])
    close(got, e / e.sum(), "softmax([1000, 1001, 1002])", atol=1e-12)
    got = m.softmax(np.array([[0.0, 0.0], [math.log(3.0), 0.0]]), axis=0)
    close(got, [[0.25, 0.5], [0.75, 0.5]], "softmax([[0, 0], [ln 3, 0]], axis=0): columns sum to 1", atol=1e-12)
    close(m.softmax(np.array([-np.inf, 0.0, 0.0])), [0.0, 0.5, 0.5], "softmax([-inf, 0, 0])", atol=1e-12)


@check("2.2", "scaled_dot_product_attention", "scores = q kᵀ / √d; masked scores = -inf; softmax over the "
       "last axis; then @ v")
def _(m):
    q = np.array([[2 * math.log(3.0), 0.0, 0.0, 0.0]])        # d = 4: scaled scores ln 3 and 0
    k = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    v = np.array([[4.0, 0.0], [0.0, 8.0]])
    got = m.scaled_dot_product_attention(q, k, v)
    shape(got, (1, 2), "attention of 1 query over 2 keys with d_v = 2")
    close(got, [[3.0, 2.0]], "weights 3/4, 1/4 give 3/4·(4, 0) + 1/4·(0, 8)", atol=1e-12)
    close(m.scaled_dot_product_attention(q, k, v, mask=np.array([[False, True]])), [[0.0, 8.0]],
          "with key 0 masked out, all the weight goes to key 1", atol=1e-12)


@check("2.3", "padding_mask", "np.arange(num_tokens) < lengths[:, None], then add the two broadcast axes")
def _(m):
    got = m.padding_mask(np.array([3, 1]), 4)
    shape(got, (2, 1, 1, 4), "padding_mask([3, 1], 4)")
    close(got, np.array([[True, True, True, False], [True, False, False, False]])[:, None, None],
          "the real keys of sequences of length 3 and 1")
    expect_error(ValueError, lambda: m.padding_mask(np.array([5]), 4), "a length of 5 with 4 tokens")


@check("2.4", "split_heads / merge_heads", "reshape (B, N, C) to (B, N, h, d), then transpose tokens and heads")
def _(m):
    x = np.arange(12.0).reshape(1, 2, 6)                      # 2 tokens, 6 channels
    heads = m.split_heads(x, 3)
    shape(heads, (1, 3, 2, 2), "split_heads(x of shape (1, 2, 6), 3)")
    close(heads[0, 1], [[2, 3], [8, 9]], "head 1 owns channels 2 and 3 of both tokens", atol=0)
    close(m.merge_heads(heads), x, "merge_heads(split_heads(x))", atol=0)
    expect_error(ValueError, lambda: m.split_heads(x, 4), "6 channels into 4 heads")


@check("2.5", "attention_backward", "dv = Pᵀ g, dP = g vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dq = s·dS k, "
       "dk = s·dSᵀ q")
def _(m):
    import torch

    r = np.random.default_rng(0)
    q, k, v, g = (r.standard_normal((1, 3, 2)) for _ in range(4))
    got = m.attention_backward(q, k, v, g)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Fail("attention_backward must return the tuple (dq, dk, dv)")
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out = torch.softmax(qt @ kt.transpose(-2, -1) / math.sqrt(2), dim=-1) @ vt
    out.backward(torch.tensor(g))
    for name, mine, ref in zip(("dq", "dk", "dv"), got, (qt.grad, kt.grad, vt.grad)):
        shape(mine, ref.shape, name)
        close(mine, ref.numpy(), f"{name} vs autograd (3 tokens, d = 2)", atol=1e-10)


# ---- 03 the Vision Transformer ------------------------------------------------------------------

@check("3.1", "vit_num_params", "patch conv (C·in·P² + C) + cls (C) + pos ((1 + N)·C) + depth·block + "
       "norm (2C) + head")
def _(m):
    got = m.vit_num_params(224, 16, 3, 192, 12, 4.0, 1000)
    if got != 5_717_416:
        raise Fail(f"vit_tiny_patch16_224: expected 5,717,416, got {got:,}")
    # 8x8 image, P = 4 (N = 4), 1 channel, C = 2, one block with 4 hidden units, 3 classes:
    # 34 + 2 + 10 + (8 + 18 + 6 + 12 + 10) + 4 + 9 = 113
    got = m.vit_num_params(8, 4, 1, 2, 1, 2.0, 3)
    if got != 113:
        raise Fail(f"vit_num_params(8, 4, 1, 2, 1, 2.0, 3): expected 113 (worked out in checks.py), got {got}")


@check("3.2", "block_forward", "x + attn(norm1(x)), then + mlp(norm2(x)); LayerNorm eps 1e-6, exact GELU, "
       "scale before the softmax")
def _(m):
    x = np.random.default_rng(1).standard_normal((2, 5, 8))
    sd = random_block(8, 32, seed=2)
    got = m.block_forward(x, sd, 2)
    shape(got, (2, 5, 8), "block_forward(x of shape (2, 5, 8), params, 2)")
    close(got, torch_block(x, sd, 2), "one block vs PyTorch's functional ops", atol=1e-10)


@check("3.3", "attention_rollout", "per block: mean over heads + identity, rows / row sums; R = A_L ... A_1")
def _(m):
    a = np.array([[[[0.0, 1.0], [0.0, 1.0]]]])                # token 0 copies token 1
    got = m.attention_rollout([a])
    shape(got, (1, 2, 2), "rollout of one (1, 1, 2, 2) map")
    one = np.array([[0.5, 0.5], [0.0, 1.0]])                   # (A + I) / row sums
    close(got[0], one, "one block: (A + I), rows renormalised", atol=1e-12)
    close(m.attention_rollout([a, a])[0], one @ one, "two blocks", atol=1e-12)


@check("3.4", "Block", "nn.Module() containers give the dotted names; nn.LayerNorm(dim, eps=1e-6)")
def _(m):
    import torch

    blk = m.Block(8, 2)
    want = set(random_block(8, 32))
    got = set(blk.state_dict())
    if got != want:
        raise Fail(f"state_dict keys: missing {sorted(want - got)[:3]}, unexpected {sorted(got - want)[:3]}")
    sd = random_block(8, 32, seed=3)
    blk = load_module(blk, sd)
    x = np.random.default_rng(4).standard_normal((2, 5, 8))
    with torch.no_grad():
        got = blk(torch.from_numpy(x)).numpy()
    close(got, torch_block(x, sd, 2), "Block(8, 2) vs PyTorch's functional ops", atol=1e-10)


# ---- 04 LayerScale ------------------------------------------------------------------------------

@check("4.1", "layerscale_init_value", "0.1 for depth <= 18, 1e-5 for depth <= 24, 1e-6 beyond")
def _(m):
    for depth, value in [(12, 0.1), (18, 0.1), (24, 1e-5), (36, 1e-6)]:
        got = m.layerscale_init_value(depth)
        if got != value:
            raise Fail(f"layerscale_init_value({depth}): expected {value}, got {got}")


@check("4.2", "LayerScaleBlock", "gamma_1 = nn.Parameter(init_values · ones(dim)); x + gamma_1 * attn(...)")
def _(m):
    import torch

    blk = m.LayerScaleBlock(8, 2, init_values=0.1)
    sd = {k: v.detach().numpy() for k, v in blk.state_dict().items()}
    for name in ("gamma_1", "gamma_2"):
        if name not in sd:
            raise Fail(f"state_dict has no {name}")
        close(sd[name], np.full(8, 0.1), f"{name} at initialisation (init_values=0.1)", atol=1e-7)
    params = random_block(8, 32, seed=5)
    gamma = (np.linspace(0.5, 1.5, 8), np.linspace(2.0, 0.0, 8))
    blk = load_module(blk, {**params, "gamma_1": gamma[0], "gamma_2": gamma[1]})
    x = np.random.default_rng(6).standard_normal((2, 5, 8))
    with torch.no_grad():
        got = blk(torch.from_numpy(x)).numpy()
    close(got, torch_block(x, params, 2, gamma=gamma), "LayerScaleBlock vs PyTorch's functional ops", atol=1e-10)


# ---- 05 class attention -------------------------------------------------------------------------

def _identity_case():
    x = np.array([[[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]])       # class token 0, patches (1, 0) and (0, 1)
    eye, zero = np.eye(2), np.zeros(2)
    return x, (eye, zero, eye, zero, eye, zero, eye, zero)      # q, k, v, proj: weight and bias


def _scaled_after(expected, d):
    return [(np.asarray(expected) / math.sqrt(d), f"your weights' rows sum to 1/√d = {1 / math.sqrt(d):.3g}: "
             "the scale 1/√d goes on the scores, before the softmax")]


@check("5.1", "class_attention", "q from u[:, :1] only; k and v from all tokens; scores scaled by 1/√d before "
       "the softmax; output (B, 1, C)")
def _(m):
    x, w = _identity_case()
    got = m.class_attention(x, *w, 1)
    shape(got, (1, 1, 2), "class_attention of (1, 3, 2) tokens")
    close(got, [[[1 / 3, 1 / 3]]], "a zero query weighs the 3 values equally: mean of (0,0), (1,0), (0,1)",
          atol=1e-12, mistakes=_scaled_after([[[1 / 3, 1 / 3]]], 2))
    out, attn = m.class_attention(x, *w, 1, return_attention=True)
    shape(attn, (1, 1, 1, 3), "the weights with return_attention=True (B, h, 1, 1 + N)")
    close(attn, np.full((1, 1, 1, 3), 1 / 3), "equal weights for a zero query", atol=1e-12,
          mistakes=_scaled_after(np.full((1, 1, 1, 3), 1 / 3), 2))


@check("5.2", "class_attention(class_token_in_keys=False)", "keys and values from u[:, 1:], the query still "
       "from u[:, :1]")
def _(m):
    x, w = _identity_case()
    got = m.class_attention(x, *w, 1, class_token_in_keys=False)
    shape(got, (1, 1, 2), "class_attention(..., class_token_in_keys=False)")
    close(got, [[[0.5, 0.5]]], "the mean of the 2 patches only", atol=1e-12,
          mistakes=[([[[1 / 3, 1 / 3]]], "the class token is still among the keys: use u[:, 1:] for k and v")]
          + _scaled_after([[[0.5, 0.5]]], 2))


@check("5.3", "TalkingHeadAttention", "a (B, h, N, N) -> permute(0, 2, 3, 1) -> proj_l -> permute back; "
       "softmax; the same with proj_w")
def _(m):
    import torch
    import torch.nn.functional as F

    att = m.TalkingHeadAttention(8, 2)
    want = {"qkv.weight": (24, 8), "qkv.bias": (24,), "proj_l.weight": (2, 2), "proj_l.bias": (2,),
            "proj_w.weight": (2, 2), "proj_w.bias": (2,), "proj.weight": (8, 8), "proj.bias": (8,)}
    got = {k: tuple(v.shape) for k, v in att.state_dict().items()}
    if got != want:
        raise Fail(f"state_dict: expected {want}, got {got}")
    r = np.random.default_rng(7)
    sd = {k: 0.5 * r.standard_normal(s) for k, s in want.items()}
    sd.update({"proj_l.weight": np.eye(2), "proj_l.bias": np.zeros(2), "proj_w.weight": np.eye(2),
               "proj_w.bias": np.zeros(2)})
    att = load_module(att, sd)
    x = torch.from_numpy(r.standard_normal((2, 5, 8)))
    t = {k: torch.from_numpy(v) for k, v in sd.items()}
    q, k, v = F.linear(x, t["qkv.weight"], t["qkv.bias"]).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
    plain = F.linear(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, 5, 8),
                     t["proj.weight"], t["proj.bias"])
    with torch.no_grad():
        close(att(x).numpy(), plain.numpy(), "with identity head mixing it is plain multi-head attention",
              atol=1e-10)
    # proj_l = [[1, 0], [1, 1]]: before the softmax, head 1's scores become head 0's + head 1's
    with torch.no_grad():
        att.proj_l.weight.copy_(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
        s = q @ k.transpose(-2, -1) / 2.0                                          # d = 4: scale 1/2
        w = torch.softmax(torch.stack([s[:, 0], s[:, 0] + s[:, 1]], dim=1), dim=-1)
        mixed = F.linear((w @ v).transpose(1, 2).reshape(2, 5, 8), t["proj.weight"], t["proj.bias"])
        close(att(x).numpy(), mixed.numpy(), "proj_l = [[1, 0], [1, 1]] mixes the scores before the softmax: "
              "head 1 gets head 0's + head 1's", atol=1e-10)


# ---- 06 factorized attention --------------------------------------------------------------------

@check("6.1", "factorized_attention", "softmax(k) over axis -2 (the tokens); context = softmax(k)ᵀ v is "
       "(d, d); out = q @ context / √d")
def _(m):
    q, k, v = np.array([[1.0], [2.0]]), np.array([[0.0], [math.log(3.0)]]), np.array([[4.0], [8.0]])
    got = m.factorized_attention(q, k, v)
    shape(got, (2, 1), "factorized attention of 2 tokens, d = 1")
    close(got, [[7.0], [14.0]], "softmax over the tokens [1/4, 3/4], context 1/4·4 + 3/4·8 = 7", atol=1e-12)


@check("6.2", "factorized_attention_flops + crossover", "per head: 2·N²·d (softmax) vs 2·N·d² "
       "(factorized), d = C/h; summed over the h heads")
def _(m):
    got = tuple(m.factorized_attention_flops(196, 64, 1))
    if got != (2 * 196 * 196 * 64, 2 * 196 * 64 * 64):
        raise Fail(f"factorized_attention_flops(196, 64, 1): expected (4917248, 1605632), got {got}")
    got = tuple(m.factorized_attention_flops(196, 64, 8))
    if got != (2 * 196 * 196 * 64, 2 * 196 * 8 * 8 * 8):
        raise Fail(f"factorized_attention_flops(196, 64, 8): expected (4917248, 200704), got {got}")
    if m.crossover_num_tokens(64, 1) != 65:
        raise Fail(f"crossover_num_tokens(64, 1): expected 65, got {m.crossover_num_tokens(64, 1)}")


# ---- 07 convolutional position encodings --------------------------------------------------------

@check("7.1", "clipped_relative_indices", "np.arange(N)[None, :] - np.arange(N)[:, None], then np.clip")
def _(m):
    got = m.clipped_relative_indices(6, 3)
    shape(got, (6, 6), "clipped_relative_indices(6, 3)")
    close(np.asarray(got)[4], [-1, -1, -1, -1, 0, 1], "row i = 4 (offsets j - i clipped to ±1)", atol=0)
    expect_error(ValueError, lambda: m.clipped_relative_indices(6, 4), "an even window")


@check("7.2", "depthwise_conv2d", "pad by d·(k // 2), then sum w[c, 0, u, v] · xp[:, c, i + d·u, j + d·v] over the "
       "kernel (no flip)")
def _(m):
    x = np.arange(12.0).reshape(1, 1, 3, 4)
    w = np.zeros((1, 1, 3, 3))
    w[0, 0, 0, 0] = 1.0                                       # out[i, j] = x[i - d, j - d]
    got = m.depthwise_conv2d(x, w)
    shape(got, (1, 1, 3, 4), "a 3x3 depthwise conv of a (1, 1, 3, 4) image")
    expected = np.zeros((1, 1, 3, 4))
    expected[..., 1:, 1:] = x[..., :-1, :-1]
    close(got, expected, "a top-left 1 shifts the image down and right by one pixel", atol=1e-12)
    x = np.arange(30.0).reshape(1, 1, 5, 6)
    got = m.depthwise_conv2d(x, w, dilation=2)
    shape(got, (1, 1, 5, 6), "a 3x3 depthwise conv with dilation 2 of a (1, 1, 5, 6) image")
    expected = np.zeros((1, 1, 5, 6))
    expected[..., 2:, 2:] = x[..., :-2, :-2]
    close(got, expected, "with dilation 2 the top-left tap reads two pixels up and left", atol=1e-12,
          mistakes=[(np.pad(x[..., :-1, :-1], ((0, 0), (0, 0), (1, 0), (1, 0))),
                     "dilation 2 gives the same as dilation 1: space the taps d pixels apart")])


@check("7.3", "conv_rel_pos_enc", "v's image tokens -> (B, h·d, H, W); per group depthwise_conv2d; back to "
       "(B, h, H·W, d); times q's image tokens; a zero row in front")
def _(m):
    r = np.random.default_rng(8)
    q, v = r.standard_normal((1, 1, 5, 2)), r.standard_normal((1, 1, 5, 2))   # 1 head, 2x2 grid, d = 2
    w, b = np.array([2.0, -1.0]).reshape(2, 1, 1, 1), np.array([0.5, 1.0])   # one group: 1 head, 1x1
    got = m.conv_rel_pos_enc(q, v, (2, 2), [w], [b])
    shape(got, (1, 1, 5, 2), "CRPE of (1, 1, 1 + 4, 2) tokens")
    expected = np.zeros_like(q)
    expected[:, :, 1:] = q[:, :, 1:] * (v[:, :, 1:] * [2.0, -1.0] + [0.5, 1.0])
    close(got, expected, "a 1x1 window: EV = q ⊙ (w·v + b), and 0 for the class token", atol=1e-12)


# ---- 08 co-scale --------------------------------------------------------------------------------

@check("8.1", "bilinear_resize", "align_corners=False: src = (i + 0.5)·n_in/n_out − 0.5, clamped at 0; "
       "align_corners=True: src = i·(n_in − 1)/(n_out − 1); i0 = floor(src), i1 = min(i0 + 1, n_in − 1), "
       "λ = src − i0")
def _(m):
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    got = m.bilinear_resize(x, (4, 4))
    shape(got, (1, 1, 4, 4), "bilinear_resize of a 2x2 image to (4, 4)")
    close(got[0, 0, 0], [1.0, 1.25, 1.75, 2.0], "the first row (as F.interpolate, align_corners=False)", atol=1e-12,
          mistakes=[([1.0, 4 / 3, 5 / 3, 2.0], "this is align_corners=True: with align_corners=False the "
                                              "centres sit at i + 0.5")])
    close(got[0, 0, :, 0], [1.0, 1.5, 2.5, 3.0], "the first column", atol=1e-12)
    got = m.bilinear_resize(x, (3, 3), align_corners=True)
    shape(got, (1, 1, 3, 3), "bilinear_resize of a 2x2 image to (3, 3), align_corners=True")
    close(got[0, 0], [[1.0, 1.5, 2.0], [2.0, 2.5, 3.0], [3.0, 3.5, 4.0]],
          "align_corners=True keeps the corners and puts the midpoints between them", atol=1e-12)


@check("8.2", "interpolate_tokens", "cls = x[:, :1]; image = x[:, 1:].transpose(1, 2).reshape(B, C, H, W); "
       "F.interpolate; flatten back; cat")
def _(m):
    import torch

    x = torch.zeros(1, 5, 2, dtype=torch.float64)
    x[0, 0] = torch.tensor([7.0, -7.0])                       # the class token
    x[0, 1:, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0])           # channel 0: the grid [[1, 2], [3, 4]]
    got = m.interpolate_tokens(x, (2, 2), (4, 4))
    shape(got, (1, 17, 2), "interpolate_tokens of (1, 1 + 2·2, 2) to a 4x4 grid")
    got = got.detach().numpy()
    close(got[0, 0], [7.0, -7.0], "the class token, carried over unchanged", atol=0)
    close(got[0, 1:5, 0], [1.0, 1.25, 1.75, 2.0], "channel 0 of the first grid row", atol=1e-12)
    close(got[0, 1:, 1], np.zeros(16), "channel 1 (all zeros in the input)", atol=1e-12)


# ---- running them ------------------------------------------------------------------------------

@dataclass
class Outcome:
    id: str
    name: str
    status: str          # ok | wrong | not done | error
    message: str = ""
    hint: str = ""


def run_check(ex_id: str, module) -> Outcome:
    chk = CHECKS[ex_id]
    import os

    root = os.path.dirname(getattr(module, "__file__", "") or ".")
    try:
        chk.run(module)
    except NotImplementedError as err:
        return Outcome(ex_id, chk.name, "not done", str(err))
    except Fail as err:
        return Outcome(ex_id, chk.name, "wrong", str(err), "" if err.diagnosed else chk.hint)
    except Exception as err:  # noqa: BLE001 - an error in the learner's code
        return Outcome(ex_id, chk.name, "error", describe_error(err, root), chk.hint)
    return Outcome(ex_id, chk.name, "ok")


# ---- 10 backprop by hand ------------------------------------------------------------------------

def _autograd(fn, arrays, dout):
    import torch

    ts = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    fn(*ts).backward(torch.tensor(dout))
    return [t.grad.numpy() for t in ts]


def _compare(got, names, expected, what):
    if not isinstance(got, (tuple, list)) or len(got) != len(names):
        raise Fail(f"return the tuple ({', '.join(names)})")
    for name, mine, ref in zip(names, got, expected):
        shape(mine, ref.shape, name)
        close(mine, ref, f"{name} vs autograd ({what})", atol=1e-10)


@check("10.1", "layer_norm_backward", "g = dout·weight; dx = (g − mean(g) − x̂·mean(g·x̂)) / σ; "
       "dweight = Σ dout·x̂ and dbias = Σ dout over every axis but the last")
def _(m):
    import torch.nn.functional as F

    r = np.random.default_rng(0)
    x, dout = r.standard_normal((2, 3, 4)), r.standard_normal((2, 3, 4))
    w, b = 1 + r.standard_normal(4), r.standard_normal(4)
    expected = _autograd(lambda x_, w_, b_: F.layer_norm(x_, (4,), w_, b_, eps=1e-6), (x, w, b), dout)
    _compare(m.layer_norm_backward(dout, x, w), ("dx", "dweight", "dbias"), expected, "x (2, 3, 4)")


@check("10.2", "softmax_backward", "dx = p ⊙ (dout − Σ dout ⊙ p), the sum along `axis` with "
       "keepdims=True")
def _(m):
    import torch

    r = np.random.default_rng(0)
    x, dout = r.standard_normal((3, 5)), r.standard_normal((3, 5))
    for axis in (-1, 0):
        p = torch.softmax(torch.tensor(x), dim=axis).numpy()
        (dx,) = _autograd(lambda t: torch.softmax(t, dim=axis), (x,), dout)
        _compare((m.softmax_backward(dout, p, axis=axis),), ("dx",), (dx,), f"(3, 5), axis {axis}")


@check("10.3", "class_attention_backward", "the softmax backward as in 10.2; dW = Σ dyᵀ x over "
       "batch and tokens; x[:, 0] gets dq @ q_weight too")
def _(m):
    r = np.random.default_rng(0)
    B, n, C, h = 2, 3, 4, 2
    x, dout = r.standard_normal((B, n, C)), r.standard_normal((B, 1, C))
    ws = [r.standard_normal((C, C)) / 2 for _ in range(3)]

    def forward(x_, wq, wk, wv):
        import torch

        q = (x_[:, :1] @ wq.T).reshape(B, 1, h, C // h).transpose(1, 2)
        k = (x_ @ wk.T).reshape(B, n, h, C // h).transpose(1, 2)
        v = (x_ @ wv.T).reshape(B, n, h, C // h).transpose(1, 2)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // h), dim=-1)
        return (a @ v).transpose(1, 2).reshape(B, 1, C)

    expected = _autograd(forward, (x, *ws), dout)
    _compare(m.class_attention_backward(dout, x, *ws, h), ("dx", "dq_weight", "dk_weight", "dv_weight"),
             expected, "B=2, N=3, C=4, 2 heads")


@check("10.4", "factorized_attention_backward", "dkv = s·qᵀ dout, dq = s·dout kvᵀ, dk̃ = v dkvᵀ, "
       "dv = k̃ dkv, then the softmax backward down the tokens (axis -2)")
def _(m):
    import torch

    r = np.random.default_rng(0)
    q, k, v, dout = (r.standard_normal((2, 4, 3)) for _ in range(4))
    expected = _autograd(lambda q_, k_, v_: q_ @ (torch.softmax(k_, dim=-2).transpose(-2, -1) @ v_)
                         / math.sqrt(3), (q, k, v), dout)
    _compare(m.factorized_attention_backward(dout, q, k, v), ("dq", "dk", "dv"), expected, "(2, 4, 3)")
