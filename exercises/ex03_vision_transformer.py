"""Exercises for notebook 03 -- the Vision Transformer.

Replace each ``raise NotImplementedError`` with your code.  You may import the NumPy room
(``from vit_scratch.numpy_nn.layers import layer_norm, linear, gelu, softmax``) but not
``vit_scratch.numpy_nn.vit`` or ``vit_scratch.numpy_nn.attention`` -- those are the answers.
Check your work:  pytest exercises/test_ex03_vision_transformer.py
"""
import numpy as np


def vit_num_params(img_size: int, patch_size: int, in_chans: int, embed_dim: int, depth: int,
                   mlp_ratio: float, num_classes: int) -> int:
    """Exercise 3.1 -- the number of parameters of a ViT, in closed form (no model building).

    Count: patch embedding (conv weight and bias), class token, position embedding (class token
    included), per block two LayerNorms, qkv (with bias), proj, fc1, fc2 (all with biases),
    the final LayerNorm and the head.  vit_tiny_patch16_224 has 5,717,416.
    """
    raise NotImplementedError("Exercise 3.1: vit_num_params")


def block_forward(x: np.ndarray, params: dict, num_heads: int) -> np.ndarray:
    """Exercise 3.2 -- one pre-norm transformer block.

    x: (B, N, C).  params: the block's arrays keyed like timm's block state_dict without the
    ``blocks.i.`` prefix: ``norm1.weight``, ``norm1.bias``, ``attn.qkv.weight`` (3C, C),
    ``attn.qkv.bias``, ``attn.proj.weight``, ``attn.proj.bias``, ``norm2.weight``,
    ``norm2.bias``, ``mlp.fc1.weight``, ``mlp.fc1.bias``, ``mlp.fc2.weight``, ``mlp.fc2.bias``.
    Returns (B, N, C):  x = x + attn(norm1(x));  x = x + mlp(norm2(x)).  LayerNorm eps = 1e-6.
    """
    raise NotImplementedError("Exercise 3.2: block_forward")


def attention_rollout(attn_maps: list) -> np.ndarray:
    """Exercise 3.3 -- attention rollout (Abnar & Zuidema, 2020).

    attn_maps: a list with one (B, h, N, N) array per block, first block first.
    For each block: average over heads, add the identity (the residual path), renormalise each
    row to sum to 1.  Multiply the per-block matrices, later blocks on the left:
    R = A_L · ... · A_2 · A_1.  Returns (B, N, N).
    """
    raise NotImplementedError("Exercise 3.3: attention_rollout")
