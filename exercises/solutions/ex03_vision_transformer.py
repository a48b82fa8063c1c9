"""Exercises for notebook 03 -- the Vision Transformer.

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
You may use ``layer_norm``, ``linear``, ``gelu`` and ``softmax`` from
``vit_scratch.numpy_nn.layers``, but nothing else from ``vit_scratch`` (the library's ``vit``
and ``attention`` modules are the answers: the grader gives zero to an exercise that calls
them). No Python loops over tokens or heads -- the grader counts the Python steps your own
code takes at two sizes.

Check your work:   python -m exercises.check 03
"""
import math

import numpy as np
import scipy.special
import torch
import torch.nn.functional as F
from torch import nn


def vit_num_params(img_size, patch_size: int, in_chans: int, embed_dim: int, depth: int,
                   mlp_ratio: float, num_classes: int, qkv_bias: bool = True) -> int:
    """Exercise 3.1 -- the number of parameters of a ViT, in closed form (no model building).

    Notebook 03, section 7 counts vit_tiny_patch16_224 (5,717,416). Here you write the count
    for any configuration, with the edge cases a real model has:

    img_size:    an int (square image) or a pair (H, W); N = (H/P)·(W/P) patches
    mlp_ratio:   the MLP has int(embed_dim · mlp_ratio) hidden units (timm rounds down)
    num_classes: 0 means no head at all (timm's ``num_classes=0``: the model returns features)
    qkv_bias:    whether the qkv projection has a bias (proj, fc1, fc2 always have one)

    Count: the patch embedding (Conv2d weight and bias), the class token, the position
    embedding (the class token has a position too), per block two LayerNorms (weight and
    bias), qkv, proj, fc1 and fc2, then the final LayerNorm and the head (weight and bias).
    """
    ### BEGIN SOLUTION
    H, W = (img_size, img_size) if isinstance(img_size, int) else img_size
    C, P = embed_dim, patch_size
    N = (H // P) * (W // P)
    hidden = int(C * mlp_ratio)
    patch_embed = C * in_chans * P * P + C
    tokens = C + (1 + N) * C                                   # cls_token, pos_embed
    per_block = (2 * 2 * C                                     # norm1, norm2
                 + 3 * C * C + (3 * C if qkv_bias else 0)      # qkv
                 + C * C + C                                   # proj
                 + hidden * C + hidden + C * hidden + C)       # fc1, fc2
    head = num_classes * C + num_classes
    return patch_embed + tokens + depth * per_block + 2 * C + head
    ### END SOLUTION


def block_forward(x: np.ndarray, params: dict, num_heads: int) -> np.ndarray:
    """Exercise 3.2 (try first) -- one pre-norm transformer block in NumPy.

    Notebook 03, section 5 ("The pre-norm block"). Try it before reading on: this time you
    write the multi-head attention yourself (notebook 02), plus the LayerNorm and the MLP.

    x:         (B, N, C)
    params:    the block's arrays, keyed like timm's block state_dict without ``blocks.i.``:
               ``norm1.weight``, ``norm1.bias``, ``attn.qkv.weight`` (3C, C) with rows
               [q; k; v] (each head-major), ``attn.qkv.bias``, ``attn.proj.weight``,
               ``attn.proj.bias``, ``norm2.weight``, ``norm2.bias``, ``mlp.fc1.weight``
               (hidden, C), ``mlp.fc1.bias``, ``mlp.fc2.weight``, ``mlp.fc2.bias``.
               Weights use PyTorch's layout: y = x Wᵀ + b.
    num_heads: h (d = C / h)
    returns:   (B, N, C):  x = x + attn(norm1(x));  x = x + mlp(norm2(x))

    The details that decide whether you match a checkpoint: LayerNorm uses the biased variance
    and eps = 1e-6; GELU is the exact erf form (``scipy.special.erf``), not the tanh one; the
    scale 1/√d goes before the softmax. Works in float32 and float64 (keep the dtype).
    """
    ### BEGIN SOLUTION
    def layer_norm(t, w, b, eps=1e-6):
        mean = t.mean(axis=-1, keepdims=True)
        var = ((t - mean) ** 2).mean(axis=-1, keepdims=True)       # biased
        return (t - mean) / np.sqrt(var + eps) * w + b

    def linear(t, name):
        return t @ params[name + ".weight"].T + params[name + ".bias"]

    B, N, C = x.shape
    h = num_heads
    d = C // h
    t = layer_norm(x, params["norm1.weight"], params["norm1.bias"])              # (B, N, C)
    qkv = linear(t, "attn.qkv").reshape(B, N, 3, h, d).transpose(2, 0, 3, 1, 4)  # (3, B, h, N, d)
    q, k, v = qkv[0], qkv[1], qkv[2]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)                          # (B, h, N, N)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = scores / scores.sum(axis=-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(B, N, C)                  # merge heads
    x = x + linear(out, "attn.proj")
    t = linear(layer_norm(x, params["norm2.weight"], params["norm2.bias"]), "mlp.fc1")
    t = 0.5 * t * (1.0 + scipy.special.erf(t / math.sqrt(2.0)))                 # exact GELU
    return x + linear(t, "mlp.fc2")
    ### END SOLUTION


def attention_rollout(attn_maps: list) -> np.ndarray:
    """Exercise 3.3 (try first) -- attention rollout (Abnar & Zuidema, "Quantifying Attention
    Flow in Transformers", ACL 2020, https://arxiv.org/abs/2005.00928).

    Notebook 03, section 11 ("Attention rollout"). Try it before reading the notebook's code.

    attn_maps: a list with one (B, h, N, N) array of attention weights per block, first block
               first (rows sum to 1)
    returns:   (B, N, N), rows summing to 1
    For each block: average over the heads, add the identity (the residual path), renormalise
    each row to sum to 1. Then multiply the per-block matrices, later blocks on the left:
    R = A_L · ... · A_2 · A_1.
    A loop over the blocks is fine; no loops over tokens or heads.
    """
    ### BEGIN SOLUTION
    rollout = None
    for attn in attn_maps:
        a = attn.mean(axis=1) + np.eye(attn.shape[-1])          # (B, N, N)
        a = a / a.sum(axis=-1, keepdims=True)
        rollout = a if rollout is None else a @ rollout         # later blocks on the left
    return rollout
    ### END SOLUTION


class Block(nn.Module):
    """Exercise 3.4 (try first) -- the pre-norm ViT block as a PyTorch module with timm's names.

    Notebook 03, sections 2-5 build the block in NumPy; here you write the PyTorch module
    whose ``state_dict`` loads timm's block weights unchanged.

    Block(dim, num_heads, mlp_ratio=4.0, qkv_bias=True);  forward: (B, N, C) -> (B, N, C)

    ``state_dict()`` must have exactly these keys (and shapes, with hidden = int(dim·mlp_ratio)):
        norm1.weight, norm1.bias                      (dim,)
        attn.qkv.weight (3·dim, dim), attn.qkv.bias   (3·dim,)   -- no bias if qkv_bias=False
        attn.proj.weight (dim, dim), attn.proj.bias   (dim,)
        norm2.weight, norm2.bias                      (dim,)
        mlp.fc1.weight (hidden, dim), mlp.fc1.bias    (hidden,)
        mlp.fc2.weight (dim, hidden), mlp.fc2.bias    (dim,)
    forward:  x = x + attn(norm1(x));  x = x + mlp(norm2(x)), LayerNorm eps = 1e-6, exact GELU,
    qkv rows [q; k; v] each head-major. Raise ValueError when dim is not a multiple of num_heads.

    Hints: ``nn.Module()`` is an empty container: ``self.attn = nn.Module()`` followed by
    ``self.attn.qkv = nn.Linear(...)`` gives the key ``attn.qkv.weight``. Check PyTorch's
    defaults against the list above (``nn.LayerNorm``'s eps, ``nn.GELU``'s approximation).
    ``F.scaled_dot_product_attention`` is allowed. No loops over tokens or heads.
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not a multiple of num_heads={num_heads}")
        self.num_heads = num_heads
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(dim, hidden)
        self.mlp.act = nn.GELU()                                 # exact erf form (the default)
        self.mlp.fc2 = nn.Linear(hidden, dim)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        B, N, C = x.shape
        h = self.num_heads
        qkv = self.attn.qkv(self.norm1(x)).reshape(B, N, 3, h, C // h).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])   # (B, h, N, d)
        x = x + self.attn.proj(out.transpose(1, 2).reshape(B, N, C))
        return x + self.mlp.fc2(self.mlp.act(self.mlp.fc1(self.norm2(x))))
        ### END SOLUTION
