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
    "11": ("ex11_distillation", "distillation and stochastic depth"),
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


def _torch_attention(q, k, v, mask=None):
    import torch
    import torch.nn.functional as F

    t = [torch.as_tensor(a, dtype=torch.float64) for a in (q, k, v)]
    return F.scaled_dot_product_attention(*t, attn_mask=None if mask is None else torch.as_tensor(mask)).numpy()


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
    r = np.random.default_rng(9)                              # 2 images, 3 heads, 4 queries, 5 keys
    q, k, v = r.standard_normal((2, 3, 4, 6)), r.standard_normal((2, 3, 5, 6)), r.standard_normal((2, 3, 5, 2))
    mask = np.tril(np.ones((4, 5), dtype=bool), k=1)
    got = m.scaled_dot_product_attention(q, k, v, mask=mask)
    shape(got, (2, 3, 4, 2), "attention of (2, 3, 4, 6) queries over (2, 3, 5, 6) keys, d_v = 2")
    close(got, _torch_attention(q, k, v, mask), "several heads, N_q != N_k, d_v != d, a mask: vs PyTorch's "
          "F.scaled_dot_product_attention", atol=1e-10)


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
    xh = np.arange(2 * 4 * 3 * 2.0).reshape(2, 4, 3, 2)                      # (B, h, N, d): 4 heads
    close(m.merge_heads(xh)[0, 1], xh[0, :, 1].reshape(8), "token 1 of merge_heads((2, 4, 3, 2)): head 0's "
          "2 channels, then head 1's, ...", atol=0)
    expect_error(ValueError, lambda: m.split_heads(x, 4), "6 channels into 4 heads")


@check("2.5", "attention_backward", "dv = Pᵀ g, dP = g vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dq = s·dS k, "
       "dk = s·dSᵀ q")
def _(m):
    import torch

    r = np.random.default_rng(0)
    q, k, v, g = (r.standard_normal(s) for s in [(2, 3, 4, 2), (2, 3, 5, 2), (2, 3, 5, 3), (2, 3, 4, 3)])
    got = m.attention_backward(q, k, v, g)
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Fail("attention_backward must return the tuple (dq, dk, dv)")
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out = torch.softmax(qt @ kt.transpose(-2, -1) / math.sqrt(2), dim=-1) @ vt
    out.backward(torch.tensor(g))
    for name, mine, ref in zip(("dq", "dk", "dv"), got, (qt.grad, kt.grad, vt.grad)):
        shape(mine, ref.shape, name)
        close(mine, ref.numpy(), f"{name} vs autograd (2 images, 3 heads, 4 queries, 5 keys)", atol=1e-10)


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
    import torch

    r = np.random.default_rng(10)
    maps = [r.dirichlet(np.ones(5), size=(2, 3, 5)) for _ in range(3)]           # 3 blocks, 3 heads
    per_block = [torch.from_numpy(m_).mean(dim=1) + torch.eye(5, dtype=torch.float64) for m_ in maps]
    per_block = [b / b.sum(dim=-1, keepdim=True) for b in per_block]
    expected = (per_block[2] @ per_block[1] @ per_block[0]).numpy()
    close(m.attention_rollout(maps), expected, "3 blocks of (2, 3, 5, 5) maps: 2 images, 3 heads", atol=1e-12)


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




# The checks of the later notebooks live beside this file; importing them registers them.
from exercises import visible_checks_backprop, visible_checks_cait_coat  # noqa: E402,F401
