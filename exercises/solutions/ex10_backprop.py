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
    ### BEGIN SOLUTION
    c = math.sqrt(2.0 / math.pi)
    t = np.tanh(c * (x + 0.044715 * x ** 3))
    du = c * (1.0 + 3 * 0.044715 * x * x)                          # u′(x)
    return dout * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    s = q.shape[-1] ** -0.5
    a = s * q @ np.swapaxes(k, -1, -2)                                       # (B, h, N, N)
    l = np.einsum("gh,bhij->bgij", proj_l_weight, a) + proj_l_bias[:, None, None]
    e = np.exp(l - l.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)                                    # over the keys
    w = np.einsum("gh,bhij->bgij", proj_w_weight, p) + proj_w_bias[:, None, None]
    dv = np.swapaxes(w, -1, -2) @ dout                                       # (B, h, N, d)
    dw = dout @ np.swapaxes(v, -1, -2)                                       # (B, h, N, N)
    dproj_w_weight = np.einsum("bgij,bhij->gh", dw, p)
    dproj_w_bias = dw.sum(axis=(0, 2, 3))
    dp = np.einsum("gh,bgij->bhij", proj_w_weight, dw)                       # mixed back with Wwᵀ
    dl = p * (dp - (dp * p).sum(axis=-1, keepdims=True))                     # softmax backward
    dproj_l_weight = np.einsum("bgij,bhij->gh", dl, a)
    dproj_l_bias = dl.sum(axis=(0, 2, 3))
    da = np.einsum("gh,bgij->bhij", proj_l_weight, dl)                       # mixed back with Wlᵀ
    dq = s * da @ k
    dk = s * np.swapaxes(da, -1, -2) @ q
    return dq, dk, dv, dproj_l_weight, dproj_l_bias, dproj_w_weight, dproj_w_bias
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
    ### BEGIN SOLUTION
    B, h, T, d = q.shape
    H, W = size
    s = d ** -0.5
    # the factorized term, s · q (k̃ᵀ v)
    e = np.exp(k - k.max(axis=-2, keepdims=True))
    kt = e / e.sum(axis=-2, keepdims=True)                                   # (B, h, T, d)
    kv = np.swapaxes(kt, -1, -2) @ v                                         # (B, h, d, d)
    dq = s * dout @ np.swapaxes(kv, -1, -2)
    dkv = s * np.swapaxes(q, -1, -2) @ dout                                  # (B, h, d, d)
    dkt = v @ np.swapaxes(dkv, -1, -2)
    dv = kt @ dkv
    dk = kt * (dkt - (dkt * kt).sum(axis=-2, keepdims=True))                 # down the tokens
    # the CRPE term, EV = q_img ⊙ conv(v_img), as images (B, h·d, H, W)
    to_image = lambda t: np.swapaxes(t[:, :, 1:], -1, -2).reshape(B, h * d, H, W)  # noqa: E731
    v_img, q_img, g_img = to_image(v), to_image(q), to_image(dout)
    conv_v, dconv_in, dweights, dbiases, start = [], [], [], [], 0
    for weight, bias in zip(weights, biases):                                # a few head groups
        stop = start + weight.shape[0]
        kh, kw = weight.shape[2:]
        ph, pw = kh // 2, kw // 2
        g = g_img[:, start:stop] * q_img[:, start:stop]                      # ∂L/∂conv(v)
        pad = ((0, 0), (0, 0), (ph, ph), (pw, pw))
        win = np.lib.stride_tricks.sliding_window_view(np.pad(v_img[:, start:stop], pad), (kh, kw), axis=(2, 3))
        conv_v.append(np.einsum("bchwij,cij->bchw", win, weight[:, 0]) + bias[:, None, None])
        dweights.append(np.einsum("bchw,bchwij->cij", g, win)[:, None])
        dbiases.append(g.sum(axis=(0, 2, 3)))
        gwin = np.lib.stride_tricks.sliding_window_view(np.pad(g, pad), (kh, kw), axis=(2, 3))
        dconv_in.append(np.einsum("bchwij,cij->bchw", gwin, weight[:, 0, ::-1, ::-1]))   # rotated 180°
        start = stop
    to_tokens = lambda t: np.swapaxes(t.reshape(B, h, d, H * W), -1, -2)     # noqa: E731
    dq[:, :, 1:] += to_tokens(g_img * np.concatenate(conv_v, axis=1))
    dv[:, :, 1:] += to_tokens(np.concatenate(dconv_in, axis=1))
    return dq, dk, dv, dweights, dbiases
    ### END SOLUTION
