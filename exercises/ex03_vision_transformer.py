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
    # TODO Exercise 3.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 3.1: vit_num_params")


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
    # TODO Exercise 3.2: your code here (replace the line below)
    raise NotImplementedError("Exercise 3.2: block_forward")


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
    # TODO Exercise 3.3: your code here (replace the line below)
    raise NotImplementedError("Exercise 3.3: attention_rollout")


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
        # TODO Exercise 3.4: your code here (replace the line below)
        raise NotImplementedError("Exercise 3.4: Block.__init__")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # TODO Exercise 3.4: your code here (replace the line below)
        raise NotImplementedError("Exercise 3.4: Block.forward")
