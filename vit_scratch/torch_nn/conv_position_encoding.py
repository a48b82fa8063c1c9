"""Convolutional position encodings in PyTorch (CoaT): depthwise convolution, CPE and CRPE.

Paper: Co-Scale Conv-Attentional Image Transformers -- Xu, Xu, Chang, Tu, ICCV 2021,
https://arxiv.org/abs/2104.06399.  The NumPy twins, with the derivation, are in
``vit_scratch.numpy_nn.conv_position_encoding``; parameter names are timm's
(``cpe1.proj.weight``, ``crpe1.conv_list.0.weight``).
"""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .. import validation
from .layers import built_by_hand, check_args_by_hand, check_inputs_by_hand, fx_tracing


def depthwise_conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """Depthwise 2-D convolution, stride 1, zero 'same' padding: (B, C, H, W) -> (B, C, H, W)
    with weight (C, 1, k, k), one k×k kernel per channel (``groups = C``)."""
    k = weight.shape[-1]
    if k % 2 == 0:
        raise ValueError(f"depthwise kernel size must be odd ('same' padding k // 2), got {k}")
    return F.conv2d(x, weight, bias, padding=k // 2, groups=x.shape[1])


def tokens_to_image(x: torch.Tensor, size) -> torch.Tensor:
    """(B, 1 + H·W, C) tokens -> (B, C, H, W) view of the image tokens (channels-last strides,
    no copy); the class token is dropped."""
    H, W = validation.check_token_grid(x.shape, size)
    return _tokens_to_image(x, (H, W))


def _tokens_to_image(x: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
    """:func:`tokens_to_image`, unchecked (``size`` a pair)."""
    B, N, C = x.shape
    return x[:, 1:].reshape(B, size[0], size[1], C).permute(0, 3, 1, 2)


class ConvPosEnc(nn.Module):
    """Convolutional position encoding (CPE): image tokens f -> f + dwconv_k×k(f); the class
    token passes unchanged.   (B, 1 + H·W, C), size (H, W) -> (B, 1 + H·W, C)"""

    def __init__(self, dim: int, k: int = 3):
        super().__init__()
        check_args_by_hand(dim=dim, kernel_size=k)
        self.proj = nn.Conv2d(dim, dim, k, 1, k // 2, groups=dim)
        check_inputs_by_hand(self)

    def check_inputs(self, x, size):
        """Tokens (B, 1 + H·W, dim) on the grid ``size`` (a layer built by hand)."""
        validation.check_token_grid(x.shape, size, "x", self.proj.in_channels)

    def forward(self, x: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
        feat = _tokens_to_image(x, size)  # (B, C, H, W)
        feat = self.proj(feat) + feat
        return torch.cat([x[:, :1], feat.flatten(2).transpose(1, 2)], dim=1)


class ConvRelPosEnc(nn.Module):
    """Convolutional relative position encoding (CRPE): ``EV = Q_img ⊙ conv(V_img)``, with a
    zero row for the class token.  The heads are split into groups, each with its own window:
    ``window={3: 2, 5: 3, 7: 3}`` gives heads 0-1 a 3×3, heads 2-4 a 5×5 and heads 5-7 a 7×7
    depthwise convolution (``conv_list.0/1/2``).

    forward(q, v (B, h, 1 + H·W, d), size (H, W)) -> (B, h, 1 + H·W, d)
    """

    def __init__(self, head_chs: int, num_heads: int, window=None):
        super().__init__()
        window = {3: 2, 5: 3, 7: 3} if window is None else window
        if built_by_hand():
            window = validation.check_window_heads(window, num_heads, "window")
        self.head_chs, self.num_heads, self.window = head_chs, num_heads, window
        self.head_splits = list(window.values())
        self.channel_splits = [heads * head_chs for heads in self.head_splits]
        self.conv_list = nn.ModuleList(
            nn.Conv2d(ch, ch, kernel_size=w, padding=w // 2, groups=ch)
            for w, ch in zip(window, self.channel_splits))

    def conv(self, v_img: torch.Tensor) -> torch.Tensor:
        """(B, h·d, H, W), channels head-major -> each head group through its own window."""
        parts = torch.split(v_img, self.channel_splits, dim=1)
        return torch.cat([conv(parts[i]) for i, conv in enumerate(self.conv_list)], dim=1)

    def forward(self, q: torch.Tensor, v: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
        if not torch.jit.is_scripting():
            self._check(q, v, size)
        B, h, N, d = q.shape
        H, W = size
        v_img = v[:, :, 1:].transpose(-1, -2).reshape(B, h * d, H, W)  # (B, h·d, H, W)
        conv_v = self.conv(v_img).reshape(B, h, d, H * W).transpose(-1, -2)  # (B, h, HW, d)
        return F.pad(q[:, :, 1:] * conv_v, (0, 0, 1, 0))  # zero row for the class token

    def add_to(self, out: torch.Tensor, q: torch.Tensor, v: torch.Tensor,
               size: Tuple[int, int]) -> torch.Tensor:
        """``out[:, 1:] += Q_img ⊙ conv(V_img)`` in token layout, in place: the same EV as
        ``forward`` without building the zero row or a head-layout copy (the attention's fast
        path; the attention's ``forward`` has checked the shapes).  out: (B, 1 + H·W, h·d) heads merged;
        q, v: (B, h, 1 + H·W, d)."""
        B, h, N, d = q.shape
        H, W = size
        v_img = _image_tokens(v).reshape(B, H, W, h * d).permute(0, 3, 1, 2)  # channels-last view
        conv_v = self.conv(v_img).permute(0, 2, 3, 1).reshape(B, H * W, h * d)
        if not torch.jit.is_scripting():
            if fx_tracing():  # a traced graph would drop the in-place update: a new tensor
                img = torch.addcmul(out[:, 1:], _image_tokens(q), conv_v)
                return torch.cat([out[:, :1], img], dim=1)
        out[:, 1:].addcmul_(_image_tokens(q), conv_v)
        return out

    def _check(self, q, v, size):
        N, (H, W) = q.shape[2], size
        if N != 1 + H * W or v.shape != q.shape:
            raise ValueError(f"q and v must have shape (B, h, 1 + H·W, d) = (B, h, {1 + H * W}, d) "
                             f"for size {(H, W)}, got {tuple(q.shape)} and {tuple(v.shape)}")


def _image_tokens(t: torch.Tensor) -> torch.Tensor:
    """(B, h, 1 + H·W, d) per-head tokens -> (B, H·W, h·d): the image tokens, heads merged."""
    B, h, N, d = t.shape
    return t[:, :, 1:].transpose(1, 2).reshape(B, N - 1, h * d)
