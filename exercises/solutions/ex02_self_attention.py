"""Exercises for notebook 02 -- self-attention.

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Rules: NumPy only (no torch, no scipy.special.softmax), and no Python loops over tokens or
heads -- the grader runs your function at two sizes and counts the Python steps your own code
takes (vectorized code takes the same number at both sizes).

Check your work:   python -m exercises.check 02
"""
import math

import numpy as np


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Exercise 2.1 (try first) -- a numerically stable softmax along ``axis``.

    Notebook 02, section 2 ("A stable softmax"). Try it before reading the notebook's version.

    x:       any shape, float32 or float64
    axis:    the axis that sums to 1 (any valid axis, negative ones included)
    returns: same shape and dtype as x
    Must stay finite for inputs like ``[1000., 1001., 1002.]``, and give weight exactly 0 to
    entries equal to ``-np.inf``.
    Hint: softmax(x) = softmax(x - c) for any c that is constant along ``axis``. Which c keeps
    every exp() at most 1? ``keepdims=True`` keeps the shapes broadcastable.
    """
    ### BEGIN SOLUTION
    z = x - x.max(axis=axis, keepdims=True)        # every entry <= 0, the max is 0
    e = np.exp(z)                                  # in (0, 1]
    return e / e.sum(axis=axis, keepdims=True)
    ### END SOLUTION


def scaled_dot_product_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray,
                                 mask: np.ndarray = None) -> np.ndarray:
    """Exercise 2.2 (try first) -- softmax(q kᵀ / √d) v for any leading axes.

    Notebook 02, section 2 ("One head"). Try it before reading the notebook's version.

    q:       (..., N_q, d)
    k:       (..., N_k, d)
    v:       (..., N_k, d_v)
    mask:    optional boolean array broadcastable to (..., N_q, N_k); True = "may attend"
    returns: (..., N_q, d_v), in the inputs' dtype
    Scale the scores before the softmax, and mask them before the softmax. Rows of the
    weights must sum to 1. Every query in the tests may attend to at least one key.
    Hints: ``np.swapaxes(k, -1, -2)`` transposes the last two axes for any number of
    leading ones. A masked score set to ``-np.inf`` gets weight exactly 0.
    """
    ### BEGIN SOLUTION
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)     # (..., N_q, N_k), scaled BEFORE the softmax
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)           # masked BEFORE the softmax
    return softmax(scores, axis=-1) @ v                    # (..., N_q, d_v)
    ### END SOLUTION


def padding_mask(lengths, num_tokens: int) -> np.ndarray:
    """Exercise 2.3 -- the attention mask of a padded batch.

    Sequences of different lengths are batched by padding them to a common length N with
    dummy tokens at the end. A real token must not attend to padding. The notebook mentions
    padding masks (section 4) but builds only the causal one.

    lengths:    (B,) ints, the number of real tokens of each sequence (1 <= length <= N)
    num_tokens: N, the padded length
    returns:    boolean array of shape (B, 1, 1, N): entry [b, 0, 0, j] is True when key j is a
                real token of sequence b. It broadcasts against scores (B, h, N_q, N) -- every
                query of every head gets the same key mask.
    Raises ValueError (naming the length) when a length is < 1 or > num_tokens.

    Why only keys? Padded *queries* produce outputs that nobody reads; padded *keys* would
    leak into the real tokens' weighted averages. With this mask, the real tokens' outputs
    equal those of the sequence run alone, unpadded.
    Hint: compare ``np.arange(N)`` with the lengths, broadcasting (B, 1) against (N,).
    Not allowed: loops over sequences or tokens.
    """
    ### BEGIN SOLUTION
    lengths = np.asarray(lengths)
    if (lengths < 1).any() or (lengths > num_tokens).any():
        bad = lengths[(lengths < 1) | (lengths > num_tokens)][0]
        raise ValueError(f"length {bad} is outside 1..num_tokens={num_tokens}")
    keep = np.arange(num_tokens) < lengths[:, None]       # (B, N): key j is real
    return keep[:, None, None, :]                          # (B, 1, 1, N)
    ### END SOLUTION


def split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """Exercise 2.4a -- (B, N, h·d) -> (B, h, N, d) with ``reshape``/``transpose`` (no einops).

    Notebook 02, section 3 does this with one einops string, ``"b n (h d) -> b h n d"``.
    Write what einops does for you.

    x:         (B, N, C) with C = h·d
    num_heads: h
    returns:   (B, h, N, d). Channels are head-major: head 0 owns channels 0 .. d-1, head 1
               owns d .. 2d-1, and so on.
    Raises ValueError (naming C and num_heads) when C is not a multiple of num_heads.
    Hint: a reshape alone gives the right shape and the wrong numbers.
    """
    ### BEGIN SOLUTION
    B, N, C = x.shape
    if C % num_heads:
        raise ValueError(f"C={C} channels do not split evenly into num_heads={num_heads}")
    return x.reshape(B, N, num_heads, C // num_heads).transpose(0, 2, 1, 3)
    ### END SOLUTION


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Exercise 2.4b -- (B, h, N, d) -> (B, N, h·d), the inverse of ``split_heads``.

    ``merge_heads(split_heads(x, h))`` must give back ``x`` exactly. No einops.
    """
    ### BEGIN SOLUTION
    B, h, N, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, N, h * d)
    ### END SOLUTION


def attention_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, grad_out: np.ndarray):
    """Exercise 2.5 -- the backward pass of softmax attention, by hand.

    The notebook only runs attention forward. Here you derive the gradients that autograd
    computes for you. With s = 1/√d:

        S = s · q kᵀ    (..., N_q, N_k)      scores
        P = softmax(S)  (along the last axis) weights
        O = P v         (..., N_q, d_v)      output

    q, k, v:  as in Exercise 2.2 (no mask), any leading axes
    grad_out: dL/dO, same shape as O
    returns:  (dq, dk, dv) = (dL/dq, dL/dk, dL/dv), shaped like q, k, v

    Hints: dv and dP come from O = P v like any matrix product. For one row p = softmax(s):
    ∂p_i/∂s_j = p_i (δ_ij − p_j). So dS = P ⊙ (dP − Σ_j dP_j P_j), where the sum runs over each
    row. Then S = s · q kᵀ gives dq and dk; mind the scale and the transposes.
    Not allowed: torch (autograd is what the grader checks you against), loops over tokens
    or heads.
    """
    ### BEGIN SOLUTION
    s = 1.0 / math.sqrt(q.shape[-1])
    P = softmax(s * (q @ np.swapaxes(k, -1, -2)), axis=-1)     # (..., N_q, N_k)
    dv = np.swapaxes(P, -1, -2) @ grad_out                     # (..., N_k, d_v)
    dP = grad_out @ np.swapaxes(v, -1, -2)                     # (..., N_q, N_k)
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))       # softmax backward, row by row
    dq = s * (dS @ k)                                          # (..., N_q, d)
    dk = s * (np.swapaxes(dS, -1, -2) @ q)                     # (..., N_k, d)
    return dq, dk, dv
    ### END SOLUTION
