"""Convolutional position encodings in NumPy (CoaT): the depthwise convolution, CPE and CRPE.

Paper: Co-Scale Conv-Attentional Image Transformers -- Xu, Xu, Chang, Tu, ICCV 2021,
https://arxiv.org/abs/2104.06399 (Section 3: conv-attention).

Factorized attention alone cannot tell tokens apart by position: two tokens with the same
query get the same output, wherever they sit.  CoaT adds position twice, both times with a
*depthwise* convolution (one k×k kernel per channel, no mixing across channels):

* **CRPE** (convolutional relative position encoding), inside the attention:
  ``EV = Q ⊙ conv(V)``.  A relative position encoding gives token i a weight for token j that
  depends only on the offset j - i.  Shaw et al. ("Self-Attention with Relative Position
  Representations", 2018, https://arxiv.org/abs/1803.02155) *clip* the offsets, so every far
  offset shares the edge embedding (:func:`clipped_relative_indices`); CoaT instead keeps a
  weight per offset inside a k×k window and none outside -- and "sum the values with weights
  that depend only on the offset, inside a window" *is* a convolution of V, one kernel per
  channel (a depthwise convolution).  Heads are split into groups with their own window
  ({3: 2, 5: 3, 7: 3}: two heads see 3×3, three 5×5, three 7×7).  The class token has no place
  on the grid: its row of EV is zero.
* **CPE** (convolutional position encoding), before each block: ``x + dwconv3×3(x)`` on the
  image tokens, the class token unchanged (as in CPVT, Chu et al., https://arxiv.org/abs/2102.10882).

Layouts: the public functions take PyTorch's layouts (``(B, C, H, W)`` images, ``(B, h, N, d)``
heads) so they can be checked against ``F.conv2d`` and the PyTorch modules; the CoaT model calls
the ``channels_last`` forms, (B, H, W, C), which are plain views of its (B, N, C) tokens.

Each function is followed by its ``_forward`` and ``_backward`` (CS231n's pairing); a public
function checks its arguments and calls its unchecked core ``_f``, which the CoaT model calls.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import validation
from . import _fast
from .backprop import Cache, check_backward


def clipped_relative_indices(num_tokens: int, window: int) -> np.ndarray:
    """(N, N) relative positions ``j - i`` clipped to a centred window of ``window`` offsets (1-D).

    Row ``i`` holds the offsets from token ``i`` to every token ``j``; with a window of M only the
    offsets -(M // 2) ... M // 2 have their own embedding, and anything farther shares the edge
    one. ``clipped_relative_indices(6, 3)[4] -> [-1, -1, -1, -1, 0, 1]`` (unclipped:
    [-4, -3, -2, -1, 0, 1]). The same signature as Exercise 7.1.
    """
    num_tokens = validation.check_positive(num_tokens, "num_tokens")
    window = validation.check_positive(window, "window")
    if window % 2 == 0:
        raise ValueError(f"window must be odd (a centred window), got {window}")
    idx = np.arange(num_tokens)
    return np.clip(idx[None, :] - idx[:, None], -(window // 2), window // 2)   # (N, N)


def _check_depthwise(x_shape, weight_shape, channels_last: bool) -> int:
    if len(x_shape) != 4:
        raise ValueError(f"x must have shape (B, C, H, W) (or (B, H, W, C) with channels_last), "
                         f"got shape {tuple(x_shape)}")
    C = x_shape[-1] if channels_last else x_shape[1]
    if len(weight_shape) != 4 or weight_shape[1] != 1 or weight_shape[2] != weight_shape[3] \
            or weight_shape[0] != C:
        raise ValueError(f"a depthwise weight for {C} channels has shape ({C}, 1, k, k), "
                         f"got {tuple(weight_shape)}")
    k = weight_shape[-1]
    if k % 2 == 0:
        raise ValueError(f"depthwise kernel size must be odd ('same' padding k // 2), got {k}")
    return k


def depthwise_conv2d(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
                     channels_last: bool = False) -> np.ndarray:
    """Depthwise 2-D convolution, stride 1, zero 'same' padding k // 2: every channel is
    convolved with its own k×k kernel (``F.conv2d(x, weight, bias, padding=k // 2, groups=C)``).

    x: (B, C, H, W), or (B, H, W, C) with ``channels_last``; weight: (C, 1, k, k) (PyTorch's
    layout for groups = C); bias: (C,)  ->  same shape as x.

    With ``windows = sliding_window_view(padded, (k, k))``, (B, H, W, C, k, k), the convolution is

        out[b, y, x, c] = Σ_ij windows[b, y, x, c, i, j] · weight[c, 0, i, j]  (+ bias[c])

    -- one ``np.einsum``, no loop over pixels.  (Like PyTorch's convolution this is a
    cross-correlation: no kernel flip.)  The models call its faster twin
    ``_fast.depthwise_conv2d`` (numpy_nn/_fast.py, tested equal).
    """
    x = np.asarray(x)
    k = _check_depthwise(x.shape, weight.shape, channels_last)
    xc = x if channels_last else np.moveaxis(x, 1, -1)  # (B, H, W, C), a view
    p = k // 2
    padded = np.pad(xc, ((0, 0), (p, p), (p, p), (0, 0)))  # zero border: H×W outputs
    windows = sliding_window_view(padded, (k, k), axis=(1, 2))  # (B, H, W, C, k, k)
    out = np.einsum("bhwcij,cij->bhwc", windows, weight[:, 0])  # weight[:, 0]: (C, k, k)
    if bias is not None:
        out = out + bias
    return out if channels_last else np.moveaxis(out, -1, 1)


def depthwise_conv2d_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None,
                             channels_last: bool = False):
    """:func:`depthwise_conv2d` -> (out, cache)."""
    out = depthwise_conv2d(x, weight, bias, channels_last=channels_last)
    return out, Cache("depthwise_conv2d", out, x=x, weight=weight, has_bias=bias is not None,
                      channels_last=channels_last)


def depthwise_conv2d_backward(dout: np.ndarray, cache: Cache):
    """out[y, x, c] = Σ_ij x_pad[y + i, x + j, c] · w[c, i, j] + b[c]  (per image, zero padding
    p = k // 2), so

        ∂L/∂w[c, i, j] = Σ_{b,y,x} x_pad[b, y + i, x + j, c] · dout[b, y, x, c]
        ∂L/∂b[c]       = Σ_{b,y,x} dout[b, y, x, c]
        ∂L/∂x          = depthwise_conv2d(dout, w rotated by 180°)

    The last line: pixel z met weight w[i] in output z - i + p, so ∂L/∂x[z] = Σ_i dout[z - i + p]
    w[i] -- a 'same' convolution of dout with the flipped kernel (the transposed convolution
    of stride 1).  -> (dx, dweight (C, 1, k, k), dbias (C,) or None), in x's layout."""
    dout = check_backward("depthwise_conv2d", dout, cache)
    return _depthwise_grads(dout, cache.x, cache.weight, cache.has_bias, cache.channels_last)


def _depthwise_grads(dout, x, w, has_bias: bool, channels_last: bool):
    k = w.shape[-1]
    dx = depthwise_conv2d(dout, w[:, :, ::-1, ::-1], None, channels_last=channels_last)
    xc = x if channels_last else np.moveaxis(x, 1, -1)  # (B, H, W, C) views
    dc = dout if channels_last else np.moveaxis(dout, 1, -1)
    p = k // 2
    padded = np.pad(xc.astype(dout.dtype, copy=False), ((0, 0), (p, p), (p, p), (0, 0)))
    windows = sliding_window_view(padded, (k, k), axis=(1, 2))  # (B, H, W, C, k, k)
    dweight = np.einsum("bhwcij,bhwc->cij", windows, dc)[:, None]  # (C, 1, k, k)
    dbias = dc.sum(axis=(0, 1, 2)) if has_bias else None
    return dx.astype(dout.dtype, copy=False), dweight.astype(w.dtype, copy=False), dbias


def conv_pos_enc(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, size) -> np.ndarray:
    """Convolutional position encoding (CPE): ``f + dwconv(f)`` on the image tokens.

    x: (B, 1 + H·W, C) tokens (class token first), weight: (C, 1, 3, 3), bias: (C,),
    size: (H, W)  ->  (B, 1 + H·W, C); the class token passes unchanged.
    """
    x = np.asarray(x)
    H, W = validation.check_token_grid(x.shape, size)
    _check_depthwise((x.shape[0], H, W, x.shape[-1]), np.shape(weight), channels_last=True)
    return _conv_pos_enc(x, weight, bias, (H, W))


def _conv_pos_enc(x, weight, bias, size):
    """:func:`conv_pos_enc`'s formula, unchecked (``size`` a pair)."""
    (H, W), (B, _, C) = size, x.shape
    img = x[:, 1:].reshape(B, H, W, C)  # a view: tokens are raster order, channels last
    out = np.empty_like(x)
    out[:, :1] = x[:, :1]
    # depthwise_conv2d's faster twin (numpy_nn/_fast.py, tested equal)
    feat = _fast.depthwise_conv2d(img, weight, bias, channels_last=True)
    feat += img
    out[:, 1:] = feat.reshape(B, H * W, C)
    return out


def conv_pos_enc_forward(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, size):
    """:func:`conv_pos_enc` -> (out, cache), through ``depthwise_conv2d_forward``."""
    H, W = validation.check_token_grid(np.shape(x), size)
    B, N, C = x.shape
    img = x[:, 1:].reshape(B, H, W, C)  # a view: tokens are raster order, channels last
    out = np.empty_like(x)
    out[:, :1] = x[:, :1]
    feat, c_conv = depthwise_conv2d_forward(img, weight, bias, channels_last=True)
    feat += img
    out[:, 1:] = feat.reshape(B, H * W, C)
    return out, Cache("conv_pos_enc", out, conv=c_conv)


def conv_pos_enc_backward(dout: np.ndarray, cache: Cache):
    """y = [x_cls; f + dwconv(f)], f the image tokens: the class token's gradient passes
    unchanged, and each image token gets its residual gradient plus the convolution's,
    ∂L/∂f = dy_f + dwconvᵀ(dy_f).  -> (dx (B, 1 + H·W, C), dweight, dbias)."""
    dout = check_backward("conv_pos_enc", dout, cache)
    B, N, C = dout.shape
    dimg = dout[:, 1:].reshape(cache.conv.x.shape)
    dfeat, dweight, dbias = depthwise_conv2d_backward(np.ascontiguousarray(dimg), cache.conv)
    dx = dout.copy()
    dx[:, 1:] += dfeat.reshape(B, N - 1, C)
    return dx, dweight, dbias


def crpe_conv(v_img: np.ndarray, weights, biases, head_dim: int) -> np.ndarray:
    """CRPE's convolution of V: each head group with its own window.

    v_img: (B, H, W, h·d), channels head-major (head 0 owns channels 0..d-1);
    weights[i]: (heads_i·d, 1, k_i, k_i), biases[i]: (heads_i·d,), in head order  ->  (B, H, W, h·d)
    """
    v_img = np.asarray(v_img)
    start = 0
    for w in weights:
        stop = start + w.shape[0]
        if w.shape[0] % head_dim:
            raise ValueError(f"CRPE conv with {w.shape[0]} channels does not hold whole heads of "
                             f"{head_dim} channels")
        _check_depthwise(v_img[..., start:stop].shape, w.shape, channels_last=True)
        start = stop
    if start != v_img.shape[-1]:
        raise ValueError(f"CRPE convs cover {start} channels, but v has {v_img.shape[-1]}")
    return _crpe_conv(v_img, weights, biases, head_dim)


def _crpe_conv(v_img, weights, biases, head_dim: int):
    """:func:`crpe_conv`'s formula, unchecked."""
    out = np.empty(v_img.shape, dtype=np.result_type(v_img, np.float32))
    start = 0
    for w, b in zip(weights, biases):  # one depthwise conv per window (head group)
        stop = start + w.shape[0]
        # depthwise_conv2d's faster twin (numpy_nn/_fast.py, tested equal)
        out[..., start:stop] = _fast.depthwise_conv2d(v_img[..., start:stop], w, b,
                                                      channels_last=True)
        start = stop
    return out


def crpe_conv_forward(v_img: np.ndarray, weights, biases, head_dim: int):
    """:func:`crpe_conv` -> (out, cache)."""
    out = crpe_conv(v_img, weights, biases, head_dim)
    return out, Cache("crpe_conv", out, v_img=v_img, weights=list(weights),
                      has_bias=[b is not None for b in biases])


def crpe_conv_backward(dout: np.ndarray, cache: Cache):
    """Each head group's channels went through their own depthwise convolution, so each group
    of channels takes that convolution's backward (:func:`depthwise_conv2d_backward`).
    -> (dv_img (B, H, W, h·d), [dweight per group], [dbias per group])."""
    dout = check_backward("crpe_conv", dout, cache)
    v_img = cache.v_img
    dv = np.empty(v_img.shape, dtype=dout.dtype)
    dweights, dbiases, start = [], [], 0
    for w, has_bias in zip(cache.weights, cache.has_bias):  # one convolution per head group
        stop = start + w.shape[0]
        dv[..., start:stop], dw, db = _depthwise_grads(
            dout[..., start:stop], v_img[..., start:stop], w, has_bias, channels_last=True)
        dweights.append(dw)
        dbiases.append(db)
        start = stop
    return dv, dweights, dbiases


def _check_crpe_input(q: np.ndarray, v: np.ndarray, size) -> tuple[int, int]:
    """q and v (B, h, 1 + H·W, d) that fit ``size``; returns (H, W)."""
    H, W = validation.to_2tuple(size, "size")
    if q.shape[2] != 1 + H * W or v.shape != q.shape:
        raise ValueError(f"q and v must have shape (B, h, 1 + H·W, d) = (B, h, {1 + H * W}, d) "
                         f"for size {(H, W)}, got {q.shape} and {v.shape}")
    return H, W


def conv_rel_pos_enc(q: np.ndarray, v: np.ndarray, size, weights, biases) -> np.ndarray:
    """Convolutional relative position encoding: ``EV = Q_img ⊙ conv(V_img)``, zero class row.

    q, v: (B, h, 1 + H·W, d) (the class token first); size: (H, W); weights/biases: the
    head groups' depthwise convs (``crpe.conv_list.i.weight`` (heads_i·d, 1, k_i, k_i))
    ->  (B, h, 1 + H·W, d), row 0 zero (the class token has no relative position).
    """
    B, h, N, d = q.shape
    H, W = _check_crpe_input(q, v, size)
    v_img = np.moveaxis(v[:, :, 1:], 1, 2).reshape(B, H, W, h * d)  # (B, H, W, h·d), head-major
    conv_v = crpe_conv(v_img, weights, biases, d).reshape(B, H * W, h, d)
    ev = np.zeros(q.shape, dtype=np.result_type(q, conv_v))
    ev[:, :, 1:] = q[:, :, 1:] * np.moveaxis(conv_v, 2, 1)
    return ev


def conv_rel_pos_enc_forward(q: np.ndarray, v: np.ndarray, size, weights, biases):
    """:func:`conv_rel_pos_enc` -> (out, cache), through ``crpe_conv_forward``."""
    B, h, N, d = q.shape
    H, W = _check_crpe_input(q, v, size)
    v_img = np.moveaxis(v[:, :, 1:], 1, 2).reshape(B, H, W, h * d)  # (B, H, W, h·d), head-major
    conv_v, c_conv = crpe_conv_forward(v_img, weights, biases, d)
    conv_v = np.moveaxis(conv_v.reshape(B, H * W, h, d), 2, 1)  # (B, h, H·W, d)
    ev = np.zeros(q.shape, dtype=np.result_type(q, conv_v))
    ev[:, :, 1:] = q[:, :, 1:] * conv_v
    return ev, Cache("conv_rel_pos_enc", ev, q=q, conv_v=conv_v, conv=c_conv)


def conv_rel_pos_enc_backward(dout: np.ndarray, cache: Cache):
    """EV = [0; q_img ⊙ conv(v_img)]  ⇒  ∂L/∂q_img = dEV_img ⊙ conv(v_img),
    ∂L/∂conv(v_img) = dEV_img ⊙ q_img, then the convolutions' backward; the class token's row
    of EV is the constant 0, so q_cls and v_cls get no gradient from it.
    -> (dq, dv (B, h, 1 + H·W, d), [dweight per group], [dbias per group])."""
    dout = check_backward("conv_rel_pos_enc", dout, cache)
    q, conv_v = cache.q, cache.conv_v
    B, h, N, d = q.shape
    dq = np.zeros_like(dout)
    dq[:, :, 1:] = dout[:, :, 1:] * conv_v
    dconv = np.moveaxis(dout[:, :, 1:] * q[:, :, 1:], 1, 2).reshape(cache.conv.v_img.shape)
    dv_img, dweights, dbiases = crpe_conv_backward(dconv, cache.conv)
    dv = np.zeros_like(dout)
    dv[:, :, 1:] = np.moveaxis(dv_img.reshape(B, N - 1, h, d), 2, 1)
    return dq, dv, dweights, dbiases
