"""Multi-head self-attention in PyTorch.

The fast path is ``F.scaled_dot_product_attention`` (a fused kernel that never stores the
(N, N) weights).  When the weights are asked for (``return_attention=True``) the same result
is computed the explicit way, softmax(q kᵀ / √d) v, and the weights are returned -- the fast
path stays the default, so asking costs nothing when you don't.

The functions check their arguments and call their unchecked cores (``_attention_weights``,
``_scaled_dot_product_attention``), which the modules call; a module built by hand checks its
arguments and inputs (``layers.check_inputs_by_hand``), a model's does not.  Compiled by
TorchScript (``torch.jit.script``), the modules take their fused path only: returning or
recording the weights is for eager PyTorch.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .. import validation
from . import _fast
from .layers import check_args_by_hand, check_inputs_by_hand


def attention_weights(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None = None,
                      scale: float | None = None) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask): (..., N_q, d), (..., N_k, d) -> (..., N_q, N_k).

    mask: boolean (True = may attend) or additive float, broadcastable to the scores --
    the convention of ``F.scaled_dot_product_attention``.  A query that may attend to nothing
    gets all-zero weights, as in the fused kernel (and its gradient stays finite).
    """
    validation.check_qkv(q.shape, k.shape)
    if mask is not None:
        validation.check_mask_dtype(mask.dtype)
        validation.check_mask(mask.shape, q.shape[:-1] + k.shape[-2:-1])
    return _attention_weights(q, k, mask, scale)


def _attention_weights(q, k, mask=None, scale=None):
    """:func:`attention_weights` without the checks (its callers have made them)."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q * scale) @ k.transpose(-2, -1)
    if mask is None:
        return scores.softmax(dim=-1)
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))  # returns a new tensor
    else:
        scores = scores + mask
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., N_q, 1)
    return scores.masked_fill(empty, 0.0).softmax(dim=-1).masked_fill(empty, 0.0)


def scaled_dot_product_attention(q, k, v, mask=None, scale=None, dropout_p: float = 0.0,
                                 return_attention: bool = False):
    """softmax(q kᵀ / √d) v for (..., N, d) tensors; fused unless the weights are requested."""
    validation.check_qkv(q.shape, k.shape, v.shape)
    if mask is not None:
        validation.check_mask_dtype(mask.dtype)
        validation.check_mask(mask.shape, q.shape[:-1] + k.shape[-2:-1])
    return _scaled_dot_product_attention(q, k, v, mask, scale, dropout_p, return_attention)


def _scaled_dot_product_attention(q, k, v, mask=None, scale=None, dropout_p: float = 0.0,
                                  return_attention: bool = False):
    """:func:`scaled_dot_product_attention` without the checks."""
    if not return_attention:
        return _fused_attention(q, k, v, mask, dropout_p, scale)
    attn = _attention_weights(q, k, mask, scale)
    out = F.dropout(attn, dropout_p) @ v if dropout_p else attn @ v
    return out, attn


def _fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0,
                     scale: Optional[float] = None) -> torch.Tensor:
    """softmax(q kᵀ · scale + mask) v in one fused kernel (``F.scaled_dot_product_attention``)."""
    if mask is not None and mask.ndim < 2:  # (N_k,) broadcasts; the fused kernel wants 2 dims
        mask = mask.reshape([1] * (2 - mask.ndim) + list(mask.shape))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                          scale=scale)


class RecordsAttention:
    """Mixin for attention modules.  While ``record_attention`` is True (switched on for one
    forward pass by a model's ``get_attention_maps``), ``forward`` computes the weights
    explicitly and keeps the last ones in ``recorded``."""

    def __init__(self):
        super().__init__()
        self.record_attention = False
        self.recorded = None

    def keep(self, weights: torch.Tensor) -> None:
        if self.record_attention:
            self.recorded = weights


class Attention(RecordsAttention, nn.Module):
    """Multi-head self-attention with a fused qkv projection.   (B, N, C) -> (B, N, C)

    ``forward(x, return_attention=True)`` returns ``(out, attn)`` with attn (B, heads, N, N).
    """

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0):
        super().__init__()
        check_args_by_hand(dim=dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                           proj_drop=proj_drop)
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        check_inputs_by_hand(self)

    def check_inputs(self, x, mask=None, return_attention=False):
        """Tokens (B, N, dim), and a mask that fits their scores (a layer built by hand)."""
        validation.check_tokens(x.shape, self.qkv.in_features, "x")
        if mask is not None:
            validation.check_mask_dtype(mask.dtype)
            validation.check_mask(mask.shape, (x.shape[0], self.num_heads, x.shape[1], x.shape[1]))

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None,
                return_attention: bool = False):
        B, N, C = x.shape
        # (B, N, 3C) -> 3 × (B, h, N, d); rows of qkv are [q; k; v], each head-major
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        dropout_p = self.attn_drop.p if self.training else 0.0
        if not torch.jit.is_scripting():
            if return_attention or self.record_attention:  # the weights, computed explicitly
                out, attn = _scaled_dot_product_attention(q, k, v, mask, None, dropout_p, True)
                self.keep(attn)
                out = self.project(out)
                return (out, attn) if return_attention else out
        return self.project(_fused_attention(q, k, v, mask, dropout_p))

    def project(self, out: torch.Tensor) -> torch.Tensor:
        """Merge the heads, (B, h, N, d) -> (B, N, C), then the output projection."""
        B, h, N, d = out.shape
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(B, N, h * d)))


# --- talking-heads attention (CaiT's self-attention) ------------------------------------------


def mix_heads(attn: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """A Linear layer over the *head* axis: out[b, g] = Σ_h weight[g, h] · attn[b, h] + bias[g].

    attn: (B, h, N_q, N_k), weight: (h', h), bias: (h',)  ->  (B, h', N_q, N_k).
    ``TalkingHeadAttention`` calls its faster twin ``_fast.mix_heads`` (torch_nn/_fast.py,
    tested equal).
    """
    h = attn.shape[1]
    if weight.ndim != 2 or weight.shape[1] != h:
        raise ValueError(f"mix_heads: weight of shape {tuple(weight.shape)} does not mix the {h} "
                         f"heads of attn (shape {tuple(attn.shape)}); expected (h', {h})")
    out = torch.einsum("bhqk,gh->bgqk", attn, weight)
    return out if bias is None else out + bias.view(-1, 1, 1)


class TalkingHeadAttention(RecordsAttention, nn.Module):
    """Talking-heads attention (Shazeer et al., 2020, https://arxiv.org/abs/2003.02436), as in
    CaiT's self-attention blocks.   (B, N, C) -> (B, N, C)

        scores  = (q · d^-½) kᵀ                      (B, h, N, N)
        weights = proj_w(softmax(proj_l(scores)))     h×h maps over the head axis
        out     = proj(merge_heads(weights @ v))

    The heads mix before and after the softmax, so no fused attention kernel applies: the
    (B, h, N, N) weights are always computed, and recording them costs nothing extra.  Recorded
    (``get_attention_maps``) are the weights that multiply v, after ``proj_w``: mixtures of
    softmax rows, which need not be positive or sum to 1.
    """

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0):
        super().__init__()
        check_args_by_hand(dim=dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                           proj_drop=proj_drop)
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_l = nn.Linear(num_heads, num_heads)  # mixes the heads' scores (pre-softmax)
        self.proj_w = nn.Linear(num_heads, num_heads)  # mixes the heads' weights (post-softmax)
        self.proj_drop = nn.Dropout(proj_drop)
        check_inputs_by_hand(self)

    def check_inputs(self, x):
        """Tokens (B, N, dim) (a layer built by hand)."""
        validation.check_tokens(x.shape, self.qkv.in_features, "x")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, C = x.shape
        # (B, N, 3C) -> 3 × (B, h, N, d); rows of qkv are [q; k; v], each head-major
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        scores = (q * self.scale) @ k.transpose(-2, -1)  # (B, h, N, N)
        # mix_heads' faster twin (torch_nn/_fast.py, tested equal): talk before softmax, and after
        scores = _fast.mix_heads(scores, self.proj_l.weight, self.proj_l.bias)
        attn = _fast.mix_heads(scores.softmax(dim=-1), self.proj_w.weight, self.proj_w.bias)
        if not torch.jit.is_scripting():
            self.keep(attn)
        out = self.attn_drop(attn) @ v  # (B, h, N, d)
        out = out.transpose(1, 2).reshape(B, N, C)  # merge heads
        return self.proj_drop(self.proj(out))
