"""LayerScale and the residual forms it is compared with, in PyTorch: ``x + f(LN(x))`` (ViT,
DeiT), ReZero's and SkipInit's ``x + α · f(x)``, ``x + α · f(LN(x))``, and CaiT's
``x + diag(λ) · f(LN(x))`` (Touvron et al., "Going deeper with Image Transformers", Fig. 1,
https://arxiv.org/abs/2103.17239).  The forms, with their papers, are written out in the NumPy
twins' module, ``vit_scratch.numpy_nn.layerscale``; their names are ``specs.vit.RESIDUAL_FORMS``.

``Block`` (also named ``ResidualBlock``) is the ViT family's block, with timm's ViT names
(``ls1.gamma``: with LayerScale it is timm's ViT ``Block(init_values=ε)``); a ViT builds its
blocks from its config's residual form (DeiT III: LayerScale).  ``LayerScaleBlock`` is CaiT's self-attention block, whose LayerScale vectors are
the block's own parameters ``gamma_1`` and ``gamma_2``.
"""
from __future__ import annotations

import torch
from torch import nn

# the residual forms and the depth rule live in the (torch-free) spec; re-exported here
from ..specs.cait import RESIDUAL_FORMS, check_residual, layerscale_init_value  # noqa: F401
from .attention import Attention, TalkingHeadAttention
from .layers import LAYER_NORM_EPS, DropPath, Mlp, check_args_by_hand, mlp_hidden


class LayerScale(nn.Module):
    """diag(γ) on every token: x (..., C) -> x · γ, with γ (C,) learned, initialised at ε.

    (timm's ViT calls this module ``ls1``/``ls2`` with the parameter ``gamma``.)"""

    def __init__(self, dim: int, init_values: float = 1e-5):
        super().__init__()
        check_args_by_hand(dim=dim, init_values=init_values)
        self.init_values = float(init_values)
        self.gamma = nn.Parameter(torch.full((dim,), self.init_values))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """γ back at ε."""
        self.gamma.fill_(self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma

    def extra_repr(self) -> str:
        return f"dim={self.gamma.shape[0]}"


class ScalarGate(nn.Module):
    """α·x with one learned scalar α for the whole branch, initialised at 0 (ReZero, SkipInit).
    At α = 0 the block is the identity: its branch's weights get no gradient until α moves."""

    def __init__(self, init_value: float = 0.0):
        super().__init__()
        self.init_value = float(init_value)
        self.alpha = nn.Parameter(torch.full((1,), self.init_value))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """α back at its initial value."""
        self.alpha.fill_(self.init_value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.alpha


def _scale(kind: str | None, dim: int, init_values: float) -> nn.Module:
    if kind == "channel":
        return LayerScale(dim, init_values)
    return ScalarGate() if kind == "scalar" else nn.Identity()


class Block(nn.Module):
    """A transformer block -- multi-head self-attention, then an MLP -- with one of the residual
    forms above.   (B, N, C) -> (B, N, C)

        x = x + s₁(attn(norm1(x)))
        x = x + s₂(mlp(norm2(x)))

    (s: the identity, α·, or diag(λ)·; "rezero" has no norms).  The form is ``residual``, or
    without it timm's rule: LayerScale when ``init_values`` is given (timm's ViT
    ``Block(init_values=ε)``, DeiT III's block), pre-norm otherwise (ViT's and DeiT's block:
    ``ResidualBlock(dim, num_heads)``).  ``init_values`` is LayerScale's ε (1e-5 when
    ``residual="layerscale"`` comes without one); the scalar forms start at α = 0, and pre-norm
    has nothing to initialise.  Parameter names: ``norm1``/``norm2`` (absent for "rezero"),
    ``attn.qkv``, ``attn.proj``, ``ls1``/``ls2`` (``gamma`` or ``alpha``), ``mlp.fc1``,
    ``mlp.fc2``.  ``ResidualBlock`` and ``vit_scratch.torch_nn.vit.Block`` are this class.

    ``forward(x, return_attention=True)`` also returns the attention weights (B, heads, N, N)
    (eager PyTorch only), like the NumPy ``block``.
    """

    def __init__(self, dim: int, num_heads: int, residual: str | None = None,
                 mlp_ratio: float = 4.0, qkv_bias: bool = True, init_values: float | None = None,
                 drop: float = 0.0, attn_drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        if residual is None:
            residual = "prenorm" if init_values is None else "layerscale"
        norm, kind = check_residual(residual)
        if kind == "channel" and init_values is None:
            init_values = 1e-5
        self.residual = residual
        self.norm1 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS) if norm else nn.Identity()
        self.attn = Attention(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                              proj_drop=drop)
        self.ls1 = _scale(kind, dim, init_values)
        self.drop_path1 = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS) if norm else nn.Identity()
        self.mlp = Mlp(dim, mlp_hidden(dim, mlp_ratio), drop=drop)
        self.ls2 = _scale(kind, dim, init_values)
        self.drop_path2 = DropPath(drop_path)

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        if not torch.jit.is_scripting() and return_attention:  # eager only: (x, weights)
            h, attn = self.attn(self.norm1(x), return_attention=True)
            x = x + self.drop_path1(self.ls1(h))
            return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x)))), attn
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))

    def extra_repr(self) -> str:
        return f"residual={self.residual!r}"


#: The residual block's name beside CaiT's blocks (notebook 04): ``Block`` itself.
ResidualBlock = Block


class LayerScaleBlock(nn.Module):
    """CaiT's self-attention block: pre-norm, LayerScale on both branches.   (B, N, C) -> (B, N, C)

        x = x + diag(γ₁) · attn(norm1(x))
        x = x + diag(γ₂) · mlp(norm2(x))

    ``attn`` is talking-heads attention (CaiT), or plain multi-head attention with
    ``talking_heads=False``.  Parameter names are timm's CaiT names (``gamma_1``, ``gamma_2``,
    ``norm1``, ``attn.qkv``, ``attn.proj``, ``attn.proj_l``, ``attn.proj_w``, ``norm2``, ``mlp``).
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True,
                 init_values: float = 1e-5, talking_heads: bool = True, drop: float = 0.0,
                 attn_drop: float = 0.0, drop_path: float = 0.0):
        super().__init__()
        check_args_by_hand(init_values=init_values)  # the rest: the attention, Mlp
        attn_layer = TalkingHeadAttention if talking_heads else Attention
        self.norm1 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.attn = attn_layer(dim, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop,
                               proj_drop=drop)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(dim, mlp_hidden(dim, mlp_ratio), drop=drop)
        self.gamma_1 = nn.Parameter(torch.full((dim,), float(init_values)))
        self.gamma_2 = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.gamma_1 * self.attn(self.norm1(x)))
        x = x + self.drop_path(self.gamma_2 * self.mlp(self.norm2(x)))
        return x
