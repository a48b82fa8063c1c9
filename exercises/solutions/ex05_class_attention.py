"""Exercises for notebook 05 -- class attention and talking heads (CaiT).

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Nothing from ``vit_scratch`` may be called here (the library's class attention is the answer).
5.1 and 5.2 are NumPy only (no torch), with no Python loops over tokens or heads; the grader
counts the Python steps your own code takes at two sizes.

CaiT: Touvron, Cord, Sablayrolles, Synnaeve, Jégou, "Going deeper with Image Transformers",
ICCV 2021, https://arxiv.org/abs/2103.17239. Talking-heads: Shazeer, Lan, Cheng, Ding, Hou,
"Talking-Heads Attention", 2020, https://arxiv.org/abs/2003.02436.

Check your work:   python -m exercises.check 05
"""
import math

import numpy as np
import torch
from torch import nn


def class_attention(u: np.ndarray, q_weight: np.ndarray, q_bias, k_weight: np.ndarray, k_bias,
                    v_weight: np.ndarray, v_bias, proj_weight: np.ndarray, proj_bias,
                    num_heads: int, class_token_in_keys: bool = True, return_attention: bool = False):
    """Exercise 5.1 (try first) -- class attention: only the class token asks, everyone answers.

    Notebook 05 derives it in NumPy; try it first. This is the signature of the library's
    ``vit_scratch.numpy_nn.class_attention.class_attention`` (which you may not call here).
    In CaiT's last blocks the class token is the only query; keys and values come from the
    class token and the patches:

        q = u[:, :1] Wqᵀ + bq             one query per image       (B, 1, C) -> (B, h, 1, d)
        k = u Wkᵀ + bk,   v = u Wvᵀ + bv  all 1 + N tokens            (B, h, 1 + N, d)
        A = softmax(q kᵀ / √d)            one row of weights per head (B, h, 1, 1 + N)
        out = merge_heads(A v) Wpᵀ + bp                               (B, 1, C)

    u:                 (B, 1 + N, C), the class token first, then the N patch tokens (normed)
    q/k/v/proj_weight: (C, C) in PyTorch's (out, in) layout, y = x Wᵀ + b
    q/k/v_bias:        (C,), or None (qkv_bias=False: no bias); proj_bias: (C,)
    num_heads:         h; heads are head-major channel groups, as in notebook 02
    returns:           out (B, 1, C), the update of the class token only; with
                       ``return_attention=True`` the pair (out, A)

    Exercise 5.2 -- ``class_token_in_keys=False``: the paper's ablation, where the class token
    attends to the patches only. Keys and values then come from the N patch tokens alone (the
    query still comes from the class token), and A is (B, h, 1, N).
    """
    ### BEGIN SOLUTION
    B, T, C = u.shape
    h = num_heads
    d = C // h

    def linear(t, weight, bias):
        y = t @ weight.T
        return y if bias is None else y + bias

    z = u if class_token_in_keys else u[:, 1:]                                  # (B, M, C)
    M = z.shape[1]
    q = linear(u[:, :1], q_weight, q_bias).reshape(B, 1, h, d).transpose(0, 2, 1, 3)   # (B, h, 1, d)
    k = linear(z, k_weight, k_bias).reshape(B, M, h, d).transpose(0, 2, 1, 3)          # (B, h, M, d)
    v = linear(z, v_weight, v_bias).reshape(B, M, h, d).transpose(0, 2, 1, 3)          # (B, h, M, d)
    scores = (q / math.sqrt(d)) @ np.swapaxes(k, -1, -2)                        # (B, h, 1, M)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = scores / scores.sum(axis=-1, keepdims=True)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(B, 1, C)                  # (B, 1, C)
    out = linear(out, proj_weight, proj_bias)
    return (out, weights) if return_attention else out
    ### END SOLUTION


class TalkingHeadAttention(nn.Module):
    """Exercise 5.3 (try first) -- talking-heads attention, the self-attention of CaiT's blocks.

    Notebook 05 builds it after class attention; try it first. Plain multi-head attention
    keeps the h heads apart. Talking heads mix them with two learned h×h maps, one before
    the softmax and one after it:

        a = (q · d^-½) kᵀ                      (B, h, N, N)
        a = proj_l(a over the head axis)       each (query, key) pair's h scores mixed by a Linear h -> h
        a = softmax(a, over the keys)
        a = proj_w(a over the head axis)       mixed again, Linear h -> h
        out = proj(merge_heads(a v))           (B, N, C)

    TalkingHeadAttention(dim, num_heads, qkv_bias=True);  forward: (B, N, C) -> (B, N, C).
    ``state_dict()`` keys: ``qkv.weight`` (3·dim, dim), ``qkv.bias`` (if qkv_bias),
    ``proj_l.weight`` (h, h), ``proj_l.bias`` (h,), ``proj_w.weight`` (h, h), ``proj_w.bias``,
    ``proj.weight`` (dim, dim), ``proj.bias``. qkv rows [q; k; v], each head-major.
    Raise ValueError when dim is not a multiple of num_heads.

    Hint: a Linear acts on the last axis. ``a.permute(0, 2, 3, 1)`` puts the heads last.
    No loops over tokens or heads.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        if dim % num_heads:
            raise ValueError(f"dim={dim} is not a multiple of num_heads={num_heads}")
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj_l = nn.Linear(num_heads, num_heads)
        self.proj_w = nn.Linear(num_heads, num_heads)
        self.proj = nn.Linear(dim, dim)
        ### END SOLUTION

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ### BEGIN SOLUTION
        B, N, C = x.shape
        h = self.num_heads
        d = C // h
        q, k, v = self.qkv(x).reshape(B, N, 3, h, d).permute(2, 0, 3, 1, 4)       # 3 × (B, h, N, d)
        a = (q * d ** -0.5) @ k.transpose(-2, -1)                                  # (B, h, N, N)
        a = self.proj_l(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)                 # mix heads before
        a = a.softmax(dim=-1)
        a = self.proj_w(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)                 # ... and after
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, C))
        ### END SOLUTION
