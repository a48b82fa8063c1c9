"""Exercises for notebook 10 -- backprop by hand.

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Rules: NumPy only (no torch: autograd is what the grader checks you against), nothing from
``vit_scratch`` (the library's backward passes are the answers), and no Python loops over
tokens, heads or channels -- the grader runs your function at two sizes and counts the Python
steps your own code takes.

Every function gets ``dout`` = ∂L/∂out, the gradient of some loss L with respect to the
forward's output, and returns the gradients with respect to the forward's inputs (CS231n's
backward pattern: Stanford CS231n, assignment 2, https://cs231n.github.io/).

Check your work:   python -m exercises.check 10
"""
import math

import numpy as np


def layer_norm_backward(dout: np.ndarray, x: np.ndarray, weight: np.ndarray, eps: float = 1e-6):
    """Exercise 10.1 -- the backward pass of LayerNorm over the last axis.

    Forward (notebook 10, section 3), over the last axis of x (C channels):

        μ = mean(x),  σ = √(var(x) + eps)   (the biased variance, mean of squares)
        x̂ = (x − μ) / σ
        out = x̂ · weight + bias             weight, bias: (C,)

    dout, x: (..., C), any leading axes; weight: (C,)
    returns: (dx, dweight, dbias): dx shaped like x; dweight and dbias (C,), summed over every
             leading axis (every token of every image used the same weight).

    Hint: with g = dout · weight, dx = (g − mean(g) − x̂ · mean(g · x̂)) / σ, the means over the
    last axis with keepdims=True: μ and σ depend on every channel, which is where the two
    mean terms come from.
    """
    # TODO Exercise 10.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 10.1: layer_norm_backward")


def softmax_backward(dout: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Exercise 10.2 -- the backward pass of softmax, from its output.

    p = softmax(x) along ``axis`` (any shape, any valid axis). Its Jacobian, along that axis:

        ∂p_i/∂x_j = p_i (δ_ij − p_j)

    dout: ∂L/∂p, shaped like p
    returns: dx = ∂L/∂x, shaped like p -- the Jacobian-vector product, never the (n, n)
             Jacobian itself.

    Hint: dx_j = Σ_i dout_i · p_i (δ_ij − p_j). Write out both terms of the bracket (the δ_ij
    term is the Jacobian's diagonal); the sum runs along ``axis`` (keepdims=True).
    """
    # TODO Exercise 10.2: your code here (replace the line below)
    raise NotImplementedError("Exercise 10.2: softmax_backward")


def class_attention_backward(dout: np.ndarray, x: np.ndarray, q_weight: np.ndarray,
                             k_weight: np.ndarray, v_weight: np.ndarray, num_heads: int):
    """Exercise 10.3 -- the backward pass of CaiT's class attention (no biases, no projection).

    Forward (notebook 05; x[:, 0] is the class token, d = C / num_heads, s = 1/√d):

        q = x[:, :1] @ q_weightᵀ   (B, 1, C)    only the class token asks
        k = x @ k_weightᵀ          (B, N, C)    every token answers, the class token included
        v = x @ v_weightᵀ          (B, N, C)
        split the channels into heads: q (B, h, 1, d), k and v (B, h, N, d)
        a = softmax(s · q kᵀ)      (B, h, 1, N)   over the tokens
        out = a v, heads merged    (B, 1, C)

    dout: (B, 1, C); x: (B, N, C); the weights: (C, C)
    returns: (dx, dq_weight, dk_weight, dv_weight), shaped like x and the weights.

    Hints: the weight gradients sum over the batch and the tokens (dW = Σ dyᵀ x). The class
    token reaches the output three ways: through q, k and v.
    """
    # TODO Exercise 10.3: your code here (replace the line below)
    raise NotImplementedError("Exercise 10.3: class_attention_backward")


def factorized_attention_backward(dout: np.ndarray, q: np.ndarray, k: np.ndarray,
                                  v: np.ndarray):
    """Exercise 10.4 -- the backward pass of CoaT's factorized attention.

    Forward (notebook 06), per head, d = q.shape[-1], s = 1/√d:

        k̃ = softmax(k) over the TOKENS (axis -2)     (..., N, d)
        kv = k̃ᵀ v                                    (..., d, d_v)   one small matrix per head
        out = s · q kv                               (..., N, d_v)

    dout: (..., N, d_v); q, k: (..., N, d); v: (..., N, d_v), any leading axes
    returns: (dq, dk, dv), shaped like q, k, v.

    Hints: kv is a matrix product of two matrices of the same tokens: dk̃ = v dkvᵀ, dv = k̃ dkv.
    The softmax of k runs down the tokens, so its backward sums over the tokens too.
    """
    # TODO Exercise 10.4: your code here (replace the line below)
    raise NotImplementedError("Exercise 10.4: factorized_attention_backward")
