"""HIDDEN TESTS -- instructors only. Independent references, written with PyTorch ops.

Each reference takes switches that reproduce one classic mistake, so the tests can recognise a
wrong answer ("the rows sum to 1/√d: did you scale after the softmax?").
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

NUMPY_ONLY = ("vit_scratch", "timm", "torch")


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def T(a) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def N(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


# ---- attention --------------------------------------------------------------------------------

def softmax(x, axis=-1):
    return N(torch.softmax(T(np.asarray(x, dtype=np.float64)), dim=axis))


def attention(q, k, v, mask=None, scale="before", softmax_dim=-1, mask_mode="fill"):
    """softmax(q kᵀ/√d) v in float64, and the mistakes: scale 'after' the softmax, 'none',
    'd' (1/d), 'dv' (1/√d_v, v's width), 'times' (× √d); the softmax over the queries
    (softmax_dim=-2); the mask 'ignored', 'inverted', 'multiply' (the scores times the mask)
    or applied 'after' the softmax."""
    q, k, v = (T(np.asarray(a, dtype=np.float64)) for a in (q, k, v))
    d = q.shape[-1]
    s = q @ k.transpose(-2, -1)
    if scale == "before":
        s = s / math.sqrt(d)
    elif scale == "d":
        s = s / d
    elif scale == "dv":
        s = s / math.sqrt(v.shape[-1])
    elif scale == "times":
        s = s * math.sqrt(d)
    if mask is not None and mask_mode in ("fill", "inverted"):
        m = T(np.asarray(mask))
        s = s.masked_fill(~m if mask_mode == "fill" else m, float("-inf"))
    elif mask is not None and mask_mode == "multiply":
        s = s * T(np.asarray(mask)).to(s.dtype)
    w = torch.softmax(s, dim=softmax_dim)
    if scale == "after":
        w = w / math.sqrt(d)
    if mask is not None and mask_mode == "after":
        w = w * T(np.asarray(mask)).to(w.dtype)
    return N(w @ v)


def attention_grads(q, k, v, g):
    qt, kt, vt = (T(np.asarray(a, dtype=np.float64)).requires_grad_() for a in (q, k, v))
    w = torch.softmax(qt @ kt.transpose(-2, -1) / math.sqrt(qt.shape[-1]), dim=-1)
    out = w @ vt
    out.backward(T(np.asarray(g, dtype=np.float64)))
    return N(qt.grad), N(kt.grad), N(vt.grad)


def layer_norm(x, w, b, eps=1e-6, unbiased=False):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=unbiased)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def block(x, p, num_heads, post_norm=False, gelu="none", eps=1e-6, unbiased=False,
          heads="hd", residual=True, scale="before", gamma=None, gamma_axis="channels"):
    """A pre-norm ViT block in float64 torch ops, with switches for the classic mistakes
    (``heads``: 'hd', the right order; 'dh', split and merged channel-major; 'merge_reshape',
    merged by a reshape without the transpose). p: numpy arrays keyed like timm's block.
    gamma: optional (gamma_1, gamma_2) LayerScale."""
    t = {k: T(np.asarray(v, dtype=np.float64)) for k, v in p.items()}
    x = T(np.asarray(x, dtype=np.float64))
    B, Ntok, C = x.shape
    h, d = num_heads, C // num_heads

    def attn(u):
        qkv = F.linear(u, t["attn.qkv.weight"], t.get("attn.qkv.bias"))
        if heads == "dh":  # channels interleaved: (d h) instead of (h d)
            qkv = qkv.reshape(B, Ntok, 3, d, h).permute(2, 0, 4, 1, 3)
        else:
            qkv = qkv.reshape(B, Ntok, 3, h, d).permute(2, 0, 3, 1, 4)
        out = torch.from_numpy(attention(N(qkv[0]), N(qkv[1]), N(qkv[2]), scale=scale))
        if heads == "hd":
            out = out.transpose(1, 2).reshape(B, Ntok, C)
        elif heads == "dh":
            out = out.permute(0, 2, 3, 1).reshape(B, Ntok, C)
        else:  # "merge_reshape": (B, h, N, d) reshaped to (B, N, C) without the transpose
            out = out.reshape(B, Ntok, C)
        return F.linear(out, t["attn.proj.weight"], t["attn.proj.bias"])

    def mlp(u):
        a = F.linear(u, t["mlp.fc1.weight"], t["mlp.fc1.bias"])
        a = F.gelu(a, approximate="tanh") if gelu == "tanh" else F.gelu(a)
        return F.linear(a, t["mlp.fc2.weight"], t["mlp.fc2.bias"])

    def ln(u, name):
        return layer_norm(u, t[name + ".weight"], t[name + ".bias"], eps, unbiased)

    def scaled(u, i):
        if gamma is None:
            return u
        g = T(np.asarray(gamma[i], dtype=np.float64))
        return u * (g if gamma_axis == "channels" else g[:, None])

    r = 1.0 if residual else 0.0
    if post_norm:
        x = ln(r * x + scaled(attn(x), 0), "norm1")
        return N(ln(r * x + scaled(mlp(x), 1), "norm2"))
    x = r * x + scaled(attn(ln(x, "norm1")), 0)
    return N(r * x + scaled(mlp(ln(x, "norm2")), 1))


def block_params(C, num_heads, hidden, seed, qkv_bias=True, dtype=np.float64, scale=0.3):
    """Random block weights with every parameter non-trivial (LayerNorms not the identity)."""
    r = rng(seed)
    p = {
        "norm1.weight": 1 + scale * r.standard_normal(C), "norm1.bias": scale * r.standard_normal(C),
        "attn.qkv.weight": r.standard_normal((3 * C, C)) / math.sqrt(C),
        "attn.proj.weight": r.standard_normal((C, C)) / math.sqrt(C),
        "attn.proj.bias": scale * r.standard_normal(C),
        "norm2.weight": 1 + scale * r.standard_normal(C), "norm2.bias": scale * r.standard_normal(C),
        "mlp.fc1.weight": r.standard_normal((hidden, C)) / math.sqrt(C),
        "mlp.fc1.bias": scale * r.standard_normal(hidden),
        "mlp.fc2.weight": r.standard_normal((C, hidden)) / math.sqrt(hidden),
        "mlp.fc2.bias": scale * r.standard_normal(C),
    }
    if qkv_bias:
        p["attn.qkv.bias"] = scale * r.standard_normal(3 * C)
    return {k: v.astype(dtype) for k, v in p.items()}


BLOCK_KEYS = {
    "norm1.weight": lambda C, H: (C,), "norm1.bias": lambda C, H: (C,),
    "attn.qkv.weight": lambda C, H: (3 * C, C), "attn.qkv.bias": lambda C, H: (3 * C,),
    "attn.proj.weight": lambda C, H: (C, C), "attn.proj.bias": lambda C, H: (C,),
    "norm2.weight": lambda C, H: (C,), "norm2.bias": lambda C, H: (C,),
    "mlp.fc1.weight": lambda C, H: (H, C), "mlp.fc1.bias": lambda C, H: (H,),
    "mlp.fc2.weight": lambda C, H: (C, H), "mlp.fc2.bias": lambda C, H: (C,),
}


def expected_keys(C, hidden, qkv_bias=True, extra=None) -> dict:
    keys = {k: f(C, hidden) for k, f in BLOCK_KEYS.items()}
    if not qkv_bias:
        del keys["attn.qkv.bias"]
    keys.update(extra or {})
    return keys


# ---- convolutions and resizing ----------------------------------------------------------------

def depthwise(x, w, b=None, flip=False, padding="same", dilation=1):
    """F.conv2d(groups=C) with 'same' zero padding; ``flip``: the kernel flipped (a true
    convolution), ``padding`` 'plain': k // 2 whatever the dilation."""
    xt, wt = T(np.asarray(x, dtype=np.float64)), T(np.asarray(w, dtype=np.float64))
    if flip:
        wt = wt.flip(-1, -2)
    step = dilation if padding == "same" else 1
    pad = (step * (wt.shape[-2] // 2), step * (wt.shape[-1] // 2))
    bt = None if b is None else T(np.asarray(b, dtype=np.float64))
    return N(F.conv2d(xt, wt, bt, padding=pad, dilation=dilation, groups=xt.shape[1]))


def bilinear(x, size, align_corners=False):
    xt = T(np.asarray(x, dtype=np.float64))
    return N(F.interpolate(xt, size=tuple(size), mode="bilinear", align_corners=align_corners))
