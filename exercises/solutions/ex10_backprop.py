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
    ### BEGIN SOLUTION
    mu = x.mean(axis=-1, keepdims=True)
    sigma = np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) / sigma                                       # (..., C)
    g = dout * weight                                             # ∂L/∂x̂
    dx = (g - g.mean(axis=-1, keepdims=True)
          - xhat * (g * xhat).mean(axis=-1, keepdims=True)) / sigma
    lead = tuple(range(x.ndim - 1))                               # every axis but the channels
    return dx, (dout * xhat).sum(axis=lead), dout.sum(axis=lead)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    return p * (dout - (dout * p).sum(axis=axis, keepdims=True))
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    B, N, C = x.shape
    h = num_heads
    d = C // h
    s = 1.0 / math.sqrt(d)
    q = (x[:, :1] @ q_weight.T).reshape(B, 1, h, d).transpose(0, 2, 1, 3)   # (B, h, 1, d)
    k = (x @ k_weight.T).reshape(B, N, h, d).transpose(0, 2, 1, 3)          # (B, h, N, d)
    v = (x @ v_weight.T).reshape(B, N, h, d).transpose(0, 2, 1, 3)          # (B, h, N, d)
    scores = s * q @ k.transpose(0, 1, 3, 2)                                # (B, h, 1, N)
    a = np.exp(scores - scores.max(axis=-1, keepdims=True))
    a /= a.sum(axis=-1, keepdims=True)
    do = dout.reshape(B, 1, h, d).transpose(0, 2, 1, 3)                     # (B, h, 1, d)
    dv = a.transpose(0, 1, 3, 2) @ do                                       # (B, h, N, d)
    da = do @ v.transpose(0, 1, 3, 2)                                       # (B, h, 1, N)
    dscores = a * (da - (da * a).sum(axis=-1, keepdims=True))
    dq = s * dscores @ k                                                    # (B, h, 1, d)
    dk = s * dscores.transpose(0, 1, 3, 2) @ q                              # (B, h, N, d)
    merge = lambda t: t.transpose(0, 2, 1, 3).reshape(B, -1, C)             # noqa: E731
    dq, dk, dv = merge(dq), merge(dk), merge(dv)                            # (B, 1|N, C)
    dx = dk @ k_weight + dv @ v_weight
    dx[:, :1] += dq @ q_weight                                              # the class token asks too
    dq_weight = np.einsum("bnc,bne->ce", dq, x[:, :1])
    dk_weight = np.einsum("bnc,bne->ce", dk, x)
    dv_weight = np.einsum("bnc,bne->ce", dv, x)
    return dx, dq_weight, dk_weight, dv_weight
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    s = 1.0 / math.sqrt(q.shape[-1])
    e = np.exp(k - k.max(axis=-2, keepdims=True))
    kt = e / e.sum(axis=-2, keepdims=True)                        # (..., N, d), tokens sum to 1
    kv = np.swapaxes(kt, -1, -2) @ v                              # (..., d, d_v)
    dq = s * dout @ np.swapaxes(kv, -1, -2)                       # (..., N, d)
    dkv = s * np.swapaxes(q, -1, -2) @ dout                       # (..., d, d_v)
    dkt = v @ np.swapaxes(dkv, -1, -2)                            # (..., N, d)
    dv = kt @ dkv                                                 # (..., N, d_v)
    dk = kt * (dkt - (dkt * kt).sum(axis=-2, keepdims=True))      # softmax backward down the tokens
    return dq, dk, dv
    ### END SOLUTION
