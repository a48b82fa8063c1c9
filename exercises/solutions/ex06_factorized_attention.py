"""Exercises for notebook 06 -- factorized attention (CoaT).

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Nothing from ``vit_scratch`` may be called here. 6.1 is NumPy only (no torch), with no Python
loops over tokens or heads; the grader counts the Python steps your own code takes at two
sizes, and measures its peak memory.

CoaT: Xu, Xu, Chang, Tu, "Co-Scale Conv-Attentional Image Transformers", ICCV 2021,
https://arxiv.org/abs/2104.06399.

Check your work:   python -m exercises.check 06
"""
import math

import numpy as np


def factorized_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Exercise 6.1 (try first) -- CoaT's factorized attention, in O(N·d²) time and memory.

    Notebook 06 goes from softmax(q kᵀ) v to the factorized form; try it first.

        out = d^-½ · q (softmax(k)ᵀ v)

    where softmax(k) normalises each channel of k over the N tokens (not each token over its
    channels), and the brackets say which product comes first.

    q, k, v: (..., N, d), any leading axes (batch, heads)
    returns: (..., N, d)
    No (N, N) array may be formed: the grader runs N = 4096 and watches the peak memory.
    Hints: which axis of k (..., N, d) holds the tokens? softmax(k)ᵀ v is only (d, d).
    Write the softmax yourself (stable: subtract the maximum over the same axis).
    """
    ### BEGIN SOLUTION
    d = q.shape[-1]
    k = np.exp(k - k.max(axis=-2, keepdims=True))
    k = k / k.sum(axis=-2, keepdims=True)                       # softmax over the tokens
    context = np.swapaxes(k, -1, -2) @ v                        # (..., d, d)
    return (q @ context) / math.sqrt(d)                         # (..., N, d)
    ### END SOLUTION


def factorized_attention_flops(num_tokens: int, dim: int, num_heads: int = 1):
    """Exercise 6.2 -- the cost of softmax attention vs factorized attention, counted.

    Count the multiply-adds (one multiply-add = one operation, the convention of most papers'
    FLOPs tables) of the two matrix products of each form, summed over the heads. Leave out
    the projections, the scaling and the softmax (they cost the same or O(N·C) in both).

        softmax attention:     q kᵀ, then (weights) v       per head, with d = dim / h
        factorized attention:  softmax(k)ᵀ v, then q (that)

    num_tokens: N >= 1;  dim: C;  num_heads: h (C must be a multiple of h)
    returns:    (softmax_ops, factorized_ops), two ints
    Raises ValueError when dim is not a multiple of num_heads.
    """
    ### BEGIN SOLUTION
    if dim % num_heads:
        raise ValueError(f"dim={dim} is not a multiple of num_heads={num_heads}")
    d = dim // num_heads
    softmax_ops = num_heads * 2 * num_tokens * num_tokens * d
    factorized_ops = num_heads * 2 * num_tokens * d * d
    return softmax_ops, factorized_ops
    ### END SOLUTION


def crossover_num_tokens(dim: int, num_heads: int = 1) -> int:
    """Exercise 6.2 (second half) -- from how many tokens on is the factorized form cheaper?

    returns: the smallest N for which the factorized form needs strictly fewer operations
             than softmax attention, counted as in ``factorized_attention_flops``.
    Work it out on paper first: it is a closed formula (a loop over N would also work, but the
    formula is the point). Raises ValueError when dim is not a multiple of num_heads.
    """
    ### BEGIN SOLUTION
    if dim % num_heads:
        raise ValueError(f"dim={dim} is not a multiple of num_heads={num_heads}")
    return dim // num_heads + 1          # 2N·d² < 2N²·d  <=>  N > d
    ### END SOLUTION
