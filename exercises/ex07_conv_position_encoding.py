"""Exercises for notebook 07 -- convolutional position encodings (CoaT).

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
NumPy only (no torch, no scipy.signal / scipy.ndimage), nothing from ``vit_scratch``, and no
Python loops over tokens, pixels, channels or heads -- the grader counts the Python steps your
own code takes at two sizes. A loop over the k×k kernel offsets, or over CRPE's few window
sizes, is fine.

CoaT: Xu, Xu, Chang, Tu, "Co-Scale Conv-Attentional Image Transformers", ICCV 2021,
https://arxiv.org/abs/2104.06399. Relative positions: Shaw, Uszkoreit, Vaswani,
"Self-Attention with Relative Position Representations", NAACL 2018,
https://arxiv.org/abs/1803.02155.

Check your work:   python -m exercises.check 07
"""
import numpy as np


def clipped_relative_indices(num_tokens: int, window: int) -> np.ndarray:
    """Exercise 7.1 -- 1-D relative positions, clipped to a window.

    A relative position encoding gives token i one learned vector per *offset* j - i to the
    token j it looks at. With a window of M positions, offsets beyond ±(M // 2) are clipped to
    the edge. Example (notebook 07): 6 tokens, M = 3, row i = 4 reads
    [-1, -1, -1, -1, 0, 1]: tokens 0-3 lie at or beyond offset -1, token 5 at +1.

    num_tokens: N >= 1
    window:     M, odd and >= 1
    returns:    (N, N) array of ints, entry [i, j] = clip(j - i, -(M // 2), M // 2)
    Raises ValueError (naming the value) for an even or non-positive window, or N < 1.
    Hint: ``np.arange(N)[None, :] - np.arange(N)[:, None]`` has every offset at once.
    """
    # TODO Exercise 7.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 7.1: clipped_relative_indices")


def depthwise_conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray = None,
                     dilation: int = 1) -> np.ndarray:
    """Exercise 7.2 -- a dilated depthwise 2-D convolution in NumPy, vectorized.

    Notebook 07 (section 4) writes the plain case, dilation 1. Here the kernel's taps may sit
    ``dilation`` pixels apart: a 3 × 3 kernel with dilation 2 reads a 5 × 5 neighbourhood with
    9 weights (an "atrous" convolution: a wider window for the same parameters). Every channel
    is convolved with its own k_h × k_w filter, stride 1, zero padding dilation · (k // 2) on
    each side, so the output has the input's size. This is exactly
    ``F.conv2d(x, weight, bias, padding=(d·(k_h // 2), d·(k_w // 2)), dilation=d, groups=C)``:
    PyTorch's "convolution" is a cross-correlation (the kernel is not flipped).

        out[b, c, i, j] = bias[c] + Σ_u Σ_v w[c, 0, u, v] · x[b, c, i + d(u − k_h//2), j + d(v − k_w//2)]

    x:        (B, C, H, W)
    weight:   (C, 1, k_h, k_w), PyTorch's depthwise layout; k_h and k_w odd (the kernel may be
              larger than the image)
    bias:     (C,) or None
    dilation: d >= 1, an int
    returns:  (B, C, H, W), in x's dtype
    Raises ValueError for even kernel sizes, a weight whose shape is not (C, 1, k_h, k_w), or a
    dilation below 1.

    Hints: pad once with ``np.pad``; then either add up k_h·k_w shifted slices of the padded
    input, or take all windows of the dilated size at once with
    ``np.lib.stride_tricks.sliding_window_view`` and keep every d-th tap before ``np.einsum``.
    """
    # TODO Exercise 7.2: your code here (replace the line below)
    raise NotImplementedError("Exercise 7.2: depthwise_conv2d")


def conv_rel_pos_enc(q: np.ndarray, v: np.ndarray, size, weights: list, biases: list) -> np.ndarray:
    """Exercise 7.3 (try first) -- CoaT's convolutional relative position encoding (CRPE).

    Notebook 07 builds it; try it first. The relative-position term of CoaT's attention is a
    depthwise convolution of the values over the image grid, gated by the queries:

        EV = q_img ⊙ depthwise_conv(v_img)      for the H·W image tokens
        EV = 0                                  for the class token (a row of zeros)

    The heads are split into groups, each with its own window: CoaT's ``{3: 2, 5: 3, 7: 3}``
    gives the first 2 heads 3×3 kernels, the next 3 heads 5×5, the last 3 heads 7×7. Group i
    is given by its kernel ``weights[i]`` and bias ``biases[i]`` (timm's ``conv_list.{i}``), in
    head order; its window and its number of heads follow from the kernel's shape.

    q, v:    (B, h, 1 + H·W, d): the class token first, then the image tokens in raster order
    size:    (H, W), the token grid
    weights: a list, weights[i] of shape (heads_i·d, 1, k_i, k_i): group i's depthwise kernels
    biases:  a list, biases[i] of shape (heads_i·d,)
    returns: (B, h, 1 + H·W, d), with EV[:, :, 0] = 0

    Channels are head-major: the image tokens of v become a (B, h·d, H, W) image whose channel
    h_i·d + c is channel c of head h_i, so group i owns a contiguous block of heads_i·d channels.
    Raise ValueError when the groups' channels do not add up to h·d (their heads to h), or when
    the number of tokens is not 1 + H·W.
    Use your ``depthwise_conv2d`` (Exercise 7.2).
    """
    # TODO Exercise 7.3: your code here (replace the line below)
    raise NotImplementedError("Exercise 7.3: conv_rel_pos_enc")
