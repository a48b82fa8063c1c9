"""The co-scale mechanism in PyTorch: bilinear resizing, feature interpolation and CoaT's
parallel block, in both variants (``"interpolation"``, the reference, and
``"cross_attention"``, direct cross-layer attention).

Paper: Co-Scale Conv-Attentional Image Transformers -- Xu, Xu, Chang, Tu, ICCV 2021,
https://arxiv.org/abs/2104.06399 (Section 4.2).  The design of direct cross-layer attention
(no public code has it) is written out in ``vit_scratch.numpy_nn.coscale``; in short, for each
scale i of 2-4 and each source scale j:

    c_i = proj_i( Σ_j [ d^-½ q_i softmax(k_j→i)ᵀ v_j→i + [0; q_i,img ⊙ crpe_i(v_j→i,img)] ] )

with k_j→i, v_j→i scale j's keys and values bilinearly resized to scale i's grid (class token
carried), j = i the usual conv-attention.  Same parameters as the interpolation variant.
Parameter names are timm's (``parallel_blocks.0.factoratt_crpe2.qkv.weight``, ``...mlp2...``).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .. import validation
from ..specs.coat import PARALLEL_MODES
from .factorized_attention import FactorAttnConvRelPosEnc
from .layers import (LAYER_NORM_EPS, DropPath, Mlp, built_by_hand, mlp_hidden,
                     recompute_in_backward)


def bilinear_resize(x: torch.Tensor, size=None, scale_factor=None) -> torch.Tensor:
    """(B, C, H, W) -> (B, C, H', W'): ``F.interpolate(mode="bilinear", align_corners=False)``;
    with ``scale_factor`` the factor itself is used (``recompute_scale_factor=False``), as the
    reference does.  The NumPy twin derives the arithmetic."""
    if (size is None) == (scale_factor is None):
        raise ValueError("give exactly one of size and scale_factor")
    return _bilinear_resize(x, size, scale_factor)


def _bilinear_resize(x: torch.Tensor, size: Optional[List[int]] = None,
                     scale_factor: Optional[float] = None) -> torch.Tensor:
    if scale_factor is not None:
        return F.interpolate(x, scale_factor=scale_factor, mode="bilinear", align_corners=False,
                             recompute_scale_factor=False)
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False)


def interpolate_tokens(x: torch.Tensor, size, scale_factor: float) -> torch.Tensor:
    """Feature interpolation on tokens: (B, 1 + H·W, C), grid (H, W) -> (B, 1 + H'·W', C), the
    image tokens resized bilinearly by ``scale_factor``, the class token carried as it is."""
    H, W = validation.check_token_grid(x.shape, size)
    return _interpolate_tokens(x, (H, W), scale_factor)


def _interpolate_tokens(x: torch.Tensor, size: Tuple[int, int],
                        scale_factor: float) -> torch.Tensor:
    """:func:`interpolate_tokens`, unchecked (``size`` a pair)."""
    B, N, C = x.shape
    img = x[:, 1:].transpose(1, 2).reshape(B, C, size[0], size[1])
    img = _bilinear_resize(img, scale_factor=scale_factor)
    return torch.cat([x[:, :1], img.flatten(2).transpose(1, 2)], dim=1)


def _interpolate_heads(x: torch.Tensor, size: Tuple[int, int], scale_factor: float) -> torch.Tensor:
    """interpolate_tokens for (B, h, N, d) per-head tensors (resized in token layout, returned
    as a head view of the result)."""
    B, h, N, d = x.shape
    out = _interpolate_tokens(x.transpose(1, 2).reshape(B, N, h * d), size, scale_factor)
    return out.reshape(B, out.shape[1], h, d).transpose(1, 2)


class ParallelBlock(nn.Module):
    """One co-scale parallel block on scales 2-4 (scale 1 is not updated).

    forward([x2, x3, x4], sizes) -> [x2, x3, x4], each (B, 1 + H_s·W_s, C) on its grid size;
    the scales' CPE runs before the block (in the model).  ``mode``: ``"interpolation"`` or
    ``"cross_attention"``.  ``shared_crpes``: the CRPE of scales 2, 3, 4 (shared with the serial
    blocks); ``mlp2``, ``mlp3`` and ``mlp4`` are one module.
    """

    def __init__(self, dims, num_heads: int, mlp_ratios, qkv_bias: bool = True,
                 proj_drop: float = 0.0, drop_path: float = 0.0, shared_crpes=None,
                 mode: str = "interpolation"):
        super().__init__()
        if built_by_hand():
            validation.check_choice(mode, "mode", PARALLEL_MODES)
        if not dims[1] == dims[2] == dims[3] or not mlp_ratios[1] == mlp_ratios[2] == mlp_ratios[3]:
            raise ValueError(f"a parallel block needs equal dims and mlp_ratios at scales 2-4, got "
                             f"dims={tuple(dims)}, mlp_ratios={tuple(mlp_ratios)}")
        self.mode = mode
        shared_crpes = shared_crpes or [None] * 4
        for s in (2, 3, 4):
            setattr(self, f"norm1{s}", nn.LayerNorm(dims[s - 1], eps=LAYER_NORM_EPS))
        for s in (2, 3, 4):
            setattr(self, f"factoratt_crpe{s}", FactorAttnConvRelPosEnc(
                dims[s - 1], num_heads, qkv_bias=qkv_bias, proj_drop=proj_drop,
                shared_crpe=shared_crpes[s - 1]))
        self.drop_path = DropPath(drop_path)
        for s in (2, 3, 4):
            setattr(self, f"norm2{s}", nn.LayerNorm(dims[s - 1], eps=LAYER_NORM_EPS))
        self.mlp2 = self.mlp3 = self.mlp4 = Mlp(dims[1], mlp_hidden(dims[1], mlp_ratios[1]),
                                                  drop=proj_drop)
        self.grad_checkpointing = False  # the model's set_grad_checkpointing switches it

    def scale_modules(self, s: int):
        """(norm1s, factoratt_crpes, norm2s, mlps) of scale s (2, 3 or 4)."""
        return tuple(getattr(self, f"{name}{s}") for name in ("norm1", "factoratt_crpe", "norm2", "mlp"))

    def forward(self, xs: List[torch.Tensor], sizes: List[Tuple[int, int]]) -> List[torch.Tensor]:
        if not torch.jit.is_scripting():
            if len(xs) != 3 or len(sizes) != 3:
                raise ValueError(f"a parallel block takes the three scales 2-4, got {len(xs)} "
                                 f"tensors and {len(sizes)} sizes")
            if self.grad_checkpointing:  # recomputed in the backward pass
                return recompute_in_backward(self.residuals, xs, sizes)
        return self.residuals(xs, sizes)

    def residuals(self, xs: List[torch.Tensor], sizes: List[Tuple[int, int]]) -> List[torch.Tensor]:
        """The block's two residual steps on the three scales (written out per scale, so that
        TorchScript compiles it): x_s + (co-scale attention), then x_s + mlp(norm2(x_s))."""
        x2, x3, x4 = xs[0], xs[1], xs[2]
        normed = [self.norm12(x2), self.norm13(x3), self.norm14(x4)]
        if self.mode == "interpolation":
            c = self.feature_interpolation(normed, sizes)
        elif torch.jit.is_scripting():
            raise RuntimeError("TorchScript compiles the parallel blocks' interpolation mode "
                               "only; run a cross_attention model in eager PyTorch")
        else:
            c = self.cross_attention(normed, sizes)
        x2, x3, x4 = x2 + self.drop_path(c[0]), x3 + self.drop_path(c[1]), x4 + self.drop_path(c[2])
        return [x2 + self.drop_path(self.mlp2(self.norm22(x2))),
                x3 + self.drop_path(self.mlp3(self.norm23(x3))),
                x4 + self.drop_path(self.mlp4(self.norm24(x4)))]

    def feature_interpolation(self, normed: List[torch.Tensor],
                              sizes: List[Tuple[int, int]]) -> List[torch.Tensor]:
        """Each scale's conv-attention, then every output resized to the other two grids and
        added (class tokens carried and summed)."""
        c2 = self.factoratt_crpe2(normed[0], sizes[0])
        c3 = self.factoratt_crpe3(normed[1], sizes[1])
        c4 = self.factoratt_crpe4(normed[2], sizes[2])
        S2, S3, S4 = sizes[0], sizes[1], sizes[2]
        return [c2 + _interpolate_tokens(c3, S3, 2.0) + _interpolate_tokens(c4, S4, 4.0),
                c3 + _interpolate_tokens(c4, S4, 2.0) + _interpolate_tokens(c2, S2, 0.5),
                c4 + _interpolate_tokens(c3, S3, 0.5) + _interpolate_tokens(c2, S2, 0.25)]

    def cross_attention(self, normed: List[torch.Tensor],
                        sizes: List[Tuple[int, int]]) -> List[torch.Tensor]:
        """Direct cross-layer attention: each scale's queries attend to its own keys and values
        and to the other scales' resized to its grid; the three conv-attentions are summed
        before the scale's output projection.  Only the within-scale term is recorded.
        (Eager PyTorch and torch.fx only: TorchScript compiles the reference's interpolation.)"""
        atts = [self.scale_modules(s)[1] for s in (2, 3, 4)]
        qkv = [att.split_qkv(u) for att, u in zip(atts, normed)]
        out = []
        for i, att in enumerate(atts):
            q, k, v = qkv[i]
            acc = att.attend(q, k, v, sizes[i])
            for j in range(3):
                if j != i:
                    f = 2.0 ** (j - i)  # scale j's grid -> scale i's (each scale halves the grid)
                    k_ji = _interpolate_heads(qkv[j][1], sizes[j], f)
                    v_ji = _interpolate_heads(qkv[j][2], sizes[j], f)
                    acc = acc + att.attend(q, k_ji, v_ji, sizes[i], record=False)
            out.append(att.project(acc))
        return out
