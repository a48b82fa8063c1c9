"""Class attention in PyTorch (CaiT: Touvron et al., "Going deeper with Image Transformers",
ICCV 2021, https://arxiv.org/abs/2103.17239).

With z = [x_cls; x_patches]: Q = W_q x_cls (one query per head), K = W_k z, V = W_v z,
A = softmax(Q Kᵀ / √d) of shape (B, h, 1, 1 + N), out = W_o (A V): a new class token, while the
patch tokens stay as they are.  One query row instead of 1 + N makes the cost linear in N.
``class_token_in_keys=False`` is the paper's ablation z = x_patches.
The NumPy twins are in ``vit_scratch.numpy_nn.class_attention``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import validation
from .attention import RecordsAttention, _attention_weights
from .layers import (LAYER_NORM_EPS, DropPath, Mlp, check_args_by_hand, check_inputs_by_hand,
                     mlp_hidden)


class ClassAttention(RecordsAttention, nn.Module):
    """Multi-head class attention.   u (B, 1 + N, C), class token first -> (B, 1, C)

    The normal forward uses ``F.scaled_dot_product_attention`` (fused); while a model's
    ``get_attention_maps`` records, the weights (B, h, 1, 1 + N) -- (B, h, 1, N) with
    ``class_token_in_keys=False`` -- are computed explicitly and kept.
    """

    def __init__(self, dim: int, num_heads: int = 8, qkv_bias: bool = False,
                 attn_drop: float = 0.0, proj_drop: float = 0.0,
                 class_token_in_keys: bool = True):
        super().__init__()
        check_args_by_hand(dim=dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                           proj_drop=proj_drop, class_token_in_keys=class_token_in_keys)
        self.num_heads, self.head_dim = num_heads, dim // num_heads
        self.class_token_in_keys = bool(class_token_in_keys)
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.k = nn.Linear(dim, dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        check_inputs_by_hand(self)

    def check_inputs(self, u):
        """Tokens (B, 1 + N, dim), the class token first (a layer built by hand)."""
        validation.check_tokens(u.shape, self.q.in_features, "u", min_tokens=2, layout=(
            "(B, 1 + N, C) with the class token first and N >= 1 patch tokens"))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        B, _, C = u.shape
        h, d = self.num_heads, self.head_dim
        z = u if self.class_token_in_keys else u[:, 1:]  # what the class token may look at
        q = self.q(u[:, :1]).view(B, 1, h, d).transpose(1, 2)  # (B, h, 1, d)
        M = z.shape[1]  # 1 + N or N
        k = self.k(z).view(B, M, h, d).transpose(1, 2)  # (B, h, M, d)
        v = self.v(z).view(B, M, h, d).transpose(1, 2)  # (B, h, M, d)
        dropout_p = self.attn_drop.p if self.training else 0.0
        if not torch.jit.is_scripting() and self.record_attention:
            attn = _attention_weights(q, k)  # (B, h, 1, M)
            self.keep(attn)
            out = self.attn_drop(attn) @ v
        else:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
        out = out.transpose(1, 2).reshape(B, 1, C)  # merge heads: (B, h, 1, d) -> (B, 1, C)
        return self.proj_drop(self.proj(out))

    def extra_repr(self) -> str:
        return f"class_token_in_keys={self.class_token_in_keys}"


class LayerScaleBlockClassAttn(nn.Module):
    """CaiT's class-attention block: the class token reads the (frozen) patch tokens.

        u   = [cls; x]
        cls = cls + diag(γ₁) · CA(norm1(u))
        cls = cls + diag(γ₂) · mlp(norm2(cls))

    ``forward(x (B, N, C), cls (B, 1, C)) -> cls (B, 1, C)``.  timm's name and keys.
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True,
                 init_values: float = 1e-5, class_token_in_keys: bool = True, drop: float = 0.0,
                 attn_drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        check_args_by_hand(init_values=init_values)  # the rest: ClassAttention, Mlp
        self.norm1 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.attn = ClassAttention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                                   proj_drop=drop, class_token_in_keys=class_token_in_keys)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(dim, mlp_hidden(dim, mlp_ratio), drop=drop)
        self.gamma_1 = nn.Parameter(torch.full((dim,), float(init_values)))
        self.gamma_2 = nn.Parameter(torch.full((dim,), float(init_values)))
        check_inputs_by_hand(self)

    def check_inputs(self, x, cls):
        """Patch tokens (B, N, C) and a class token (B, 1, C) (a block built by hand)."""
        validation.check_class_token(cls.shape, x.shape)

    def forward(self, x: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
        u = torch.cat([cls, x], dim=1)  # (B, 1 + N, C)
        cls = cls + self.drop_path(self.gamma_1 * self.attn(self.norm1(u)))
        cls = cls + self.drop_path(self.gamma_2 * self.mlp(self.norm2(cls)))
        return cls
