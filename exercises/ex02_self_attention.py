"""Exercises for notebook 02 -- self-attention.

Replace each ``raise NotImplementedError`` with your code.  NumPy only; no Python loops over
tokens or heads.  Check your work:  pytest exercises/test_ex02_self_attention.py
"""
import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Exercise 2.1 -- numerically stable softmax along ``axis``.

    Must return finite values for inputs like ``[1000., 1001., 1002.]`` and give weight 0 to
    entries equal to ``-np.inf``.  Same shape as x.
    """
    raise NotImplementedError("Exercise 2.1: softmax")


def scaled_dot_product_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                 mask: np.ndarray = None) -> np.ndarray:
    """Exercise 2.2 -- softmax(q kᵀ / √d) v, for any leading axes.

    q: (..., N_q, d), k: (..., N_k, d), v: (..., N_k, d_v)  ->  (..., N_q, d_v)
    mask: optional boolean array broadcastable to (..., N_q, N_k); True means "may attend".
    Scale before the softmax; mask before the softmax (notebook 02, section 5: a widely copied
    tutorial gets both wrong).
    """
    raise NotImplementedError("Exercise 2.2: scaled_dot_product_attention")


def causal_mask(n: int) -> np.ndarray:
    """Exercise 2.3 -- (n, n) boolean mask where token i may attend to tokens 0..i only."""
    raise NotImplementedError("Exercise 2.3: causal_mask")


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """Exercise 2.4a -- (B, N, h·d) -> (B, h, N, d) with reshape/transpose (no einops).

    Channels are head-major: head 0 owns channels 0 .. d-1, head 1 owns d .. 2d-1, ...
    (einops: ``"b n (h d) -> b h n d"``).  Raise ``ValueError`` if the channels do not split
    evenly into num_heads.
    """
    raise NotImplementedError("Exercise 2.4a: split_heads")


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Exercise 2.4b -- (B, h, N, d) -> (B, N, h·d), the inverse of split_heads."""
    raise NotImplementedError("Exercise 2.4b: merge_heads")
