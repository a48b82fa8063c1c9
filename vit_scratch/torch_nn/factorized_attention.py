"""Factorized attention and CoaT's conv-attention in PyTorch.

Paper: Co-Scale Conv-Attentional Image Transformers -- Xu, Xu, Chang, Tu, ICCV 2021,
https://arxiv.org/abs/2104.06399.  The derivation and the NumPy twins are in
``vit_scratch.numpy_nn.factorized_attention``:

    FactorAtt(Q, K, V) = d^-½ · Q (softmax(K)ᵀ V)        softmax over the tokens, O(N·d²)
    conv-attention     = proj(merge_heads(FactorAtt(Q, K, V) + [0; Q_img ⊙ conv(V_img)]))

Attention maps: factorized attention never forms N×N weights.  While recording
(``get_attention_maps``) the module keeps a :class:`FactorizedAttentionRecord` -- softmax(K) and
the class token's scaled query -- from which ``vit_scratch.interface.factorized_attention_map``
draws the class token's implicit attention row or the key distributions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import torch
from torch import nn

from .. import validation
from .attention import RecordsAttention
from .conv_position_encoding import ConvRelPosEnc
from .layers import check_args_by_hand, check_inputs_by_hand


def key_softmax(k: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """softmax of the keys over the *token* axis (default -2 of (..., N, d))."""
    return k.softmax(dim=dim)


def factorized_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                         scale: float | None = None) -> torch.Tensor:
    """scale · q (softmax(k)ᵀ v): (..., N_q, d), (..., N_k, d), (..., N_k, d_v) -> (..., N_q, d_v);
    scale defaults to d^-½."""
    if k.shape[-2] != v.shape[-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"factorized attention needs q (..., N_q, d), k (..., N_k, d) and "
                         f"v (..., N_k, d_v), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    return scale * (q @ (key_softmax(k).transpose(-1, -2) @ v))


@dataclass
class FactorizedAttentionRecord:
    """What one factorized-attention layer computed, for drawing: ``key_softmax`` (B, h, N, d),
    ``class_query`` (B, h, 1, d) (times d^-½) and ``size`` (H, W) of the image tokens."""

    key_softmax: torch.Tensor
    class_query: torch.Tensor
    size: tuple[int, int]


class FactorAttnConvRelPosEnc(RecordsAttention, nn.Module):
    """CoaT's conv-attention: factorized attention plus CRPE, with a fused qkv projection.

    (B, 1 + H·W, C), size (H, W) -> (B, 1 + H·W, C).  ``shared_crpe``: the scale's
    :class:`ConvRelPosEnc`, shared by all its blocks (a new one with ``crpe_window`` if None).
    The pieces are public for the co-scale block: ``split_qkv`` -> ``attend`` -> ``project``
    (they trust their arguments; built by hand, the layer checks ``x`` against ``size``).
    """

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False,
                 proj_drop: float = 0.0, shared_crpe: ConvRelPosEnc | None = None,
                 crpe_window=None):
        super().__init__()
        check_args_by_hand(dim=dim, num_heads=num_heads, qkv_bias=qkv_bias, proj_drop=proj_drop)
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.crpe = shared_crpe if shared_crpe is not None else ConvRelPosEnc(
            self.head_dim, num_heads, crpe_window)
        check_inputs_by_hand(self)

    def check_inputs(self, x, size):
        """Tokens (B, 1 + H·W, dim) on the grid ``size`` (a layer built by hand)."""
        validation.check_token_grid(x.shape, size, "x", self.qkv.in_features)

    def split_qkv(self, x: torch.Tensor):
        """(B, N, C) -> q, k, v, each (B, h, N, d) (views of one projection)."""
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        return qkv.unbind(0)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, size: Tuple[int, int],
               record: bool = True) -> torch.Tensor:
        """d^-½ q (softmax(k)ᵀ v) + CRPE(q, v), heads merged: q, k, v (B, h, 1 + H·W, d)
        -> (B, 1 + H·W, h·d).  Keeps a record for the attention maps while recording (and
        ``record``).  The scale is folded into the small d×d summary and the CRPE term is added
        in place, so the only full-size tensors are the output and CRPE's convolution."""
        B, h, N, d = q.shape
        ks = key_softmax(k, dim=2)  # (B, h, N, d): each channel a distribution over the tokens
        summary = (ks.transpose(-1, -2) @ v) * self.scale  # (B, h, d, d)
        if not torch.jit.is_scripting():
            if record and self.record_attention:
                self.keep(FactorizedAttentionRecord(ks, q[:, :, :1] * self.scale, tuple(size)))
        out = (q @ summary).transpose(1, 2).reshape(B, N, h * d)  # (B, N, C), heads merged
        return self.crpe.add_to(out, q, v, size)

    def project(self, out: torch.Tensor) -> torch.Tensor:
        """(B, N, C) -> proj -> dropout -> (B, N, C)."""
        return self.proj_drop(self.proj(out))

    def forward(self, x: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
        q, k, v = self.split_qkv(x)
        return self.project(self.attend(q, k, v, size))
