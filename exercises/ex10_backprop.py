"""Exercises for notebook 10 -- backprop by hand.

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Rules: NumPy only (no torch: autograd is what the grader checks you against), nothing from
``vit_scratch`` (the library's backward passes are the answers), and no Python loops over
tokens, heads or channels -- the grader runs your function at two sizes and counts the Python
steps your own code takes.

Notebook 10 derives the backward passes of softmax, LayerNorm and attention. These exercises
ask for the ones it leaves to you: each combines its rules (a Jacobian-vector product, a value
used twice, a linear map's transpose) on a layer of the later notebooks.

Every function gets ``dout`` = ∂L/∂out, the gradient of some loss L with respect to the
forward's output, and returns the gradients with respect to the forward's inputs (CS231n's
backward pattern: Stanford CS231n, assignment 2, https://cs231n.github.io/).

Check your work:   python -m exercises.check 10
"""
import math

import numpy as np


def gelu_tanh_backward(dout: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Exercise 10.1 -- the backward pass of GELU's tanh form.

    ViT's checkpoints use the exact GELU, x·Φ(x). The original JAX ViT, BERT and GPT-2 use its
    tanh approximation (Hendrycks & Gimpel, "Gaussian Error Linear Units (GELUs)", 2016,
    https://arxiv.org/abs/1606.08415), PyTorch's ``F.gelu(x, approximate="tanh")``:

        u = √(2/π) · (x + 0.044715 · x³)
        out = ½ · x · (1 + tanh(u))

    dout, x: any shape (the same), float32 or float64
    returns: dx = ∂L/∂x, shaped like x, in x's dtype

    Hints: x appears twice, as the factor in front and inside u (the product rule), and
    tanh′(u) = 1 − tanh²(u). Compute tanh with ``np.tanh``: a formula with exp() overflows for
    large |x|.
    """
    # TODO Exercise 10.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 10.1: gelu_tanh_backward")


def talking_heads_backward(dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                           proj_l_weight: np.ndarray, proj_l_bias: np.ndarray,
                           proj_w_weight: np.ndarray, proj_w_bias: np.ndarray):
    """Exercise 10.2 -- the backward pass of talking-heads attention (CaiT's self-attention).

    Forward (notebook 05, Exercise 5.3), on the heads already split, s = d^-½:

        a = s · q kᵀ                       (B, h, N, N)   one score map per head
        l = mix(a, Wl, bl)                 l[:, g] = Σ_h Wl[g, h] · a[:, h] + bl[g]
        p = softmax(l)                     over the keys (the last axis)
        w = mix(p, Ww, bw)                 mixed again
        out = w v                          (B, h, N, d)

    dout, q, k, v: (B, h, N, d); proj_l_weight, proj_w_weight (Wl, Ww): (h, h), PyTorch's
                   (out, in) layout; proj_l_bias, proj_w_bias: (h,)
    returns: (dq, dk, dv, dproj_l_weight, dproj_l_bias, dproj_w_weight, dproj_w_bias), each
             shaped like its input

    Hints: a head mix is a Linear over the head axis, used at every (batch, query, key)
    position: its backward mixes the gradients with Wᵀ, and its weight's gradient sums
    dy_g · a_h over all those positions. The softmax backward is notebook 10's, section 2.
    ``np.einsum`` says which axis is which.
    """
    # TODO Exercise 10.2: your code here (replace the line below)
    raise NotImplementedError("Exercise 10.2: talking_heads_backward")


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


def conv_attention_backward(dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                            size, weights: list, biases: list):
    """Exercise 10.4 -- the backward pass of CoaT's conv-attention: factorized attention plus
    its convolutional relative position encoding (CRPE).

    Forward (notebooks 06 and 07; d = q.shape[-1], s = d^-½), per head:

        k̃ = softmax(k) over the TOKENS (axis -2)     the class token included
        out = s · q (k̃ᵀ v) + EV                     (B, h, 1 + H·W, d)
        EV = q_img ⊙ depthwise_conv(v_img)            the H·W image tokens (Exercise 7.3)
        EV = 0                                        the class token

    The convolution is Exercise 7.2's (stride 1, zero padding k // 2, no flip), on the image
    tokens of v as a (B, h·d, H, W) image with head-major channels; group i of the heads has
    its own kernel ``weights[i]`` (heads_i·d, 1, k_i, k_i) and bias ``biases[i]``, in head
    order, as in Exercise 7.3.

    dout, q, k, v: (B, h, 1 + H·W, d), the class token first
    size:          (H, W)
    weights, biases: the lists of Exercise 7.3
    returns: (dq, dk, dv, dweights, dbiases): dq, dk, dv shaped like q, k, v; dweights and
             dbiases lists shaped like weights and biases

    Hints: q and v each reach the output twice (the factorized term and EV): add both
    gradients. Section 6 of notebook 10 gives the factorized term's steps. The convolution's
    backward to its input is the same convolution with the kernel rotated by 180°; to its
    kernel, Σ over batch and pixels of dout-of-the-conv times the padded input's window
    (``np.lib.stride_tricks.sliding_window_view``). A loop over the few head groups, or over
    the kernel offsets, is fine.
    """
    # TODO Exercise 10.4: your code here (replace the line below)
    raise NotImplementedError("Exercise 10.4: conv_attention_backward")
