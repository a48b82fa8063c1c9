"""Arrays given to the public functional entry points (attention, class tokens, masks, tokens
on a grid): their shapes, checked before any einsum sees them.  The models call the unchecked
cores of those functions, so none of this runs inside a model's forward.
"""
from __future__ import annotations

from typing import Sequence

from .images import IMAGE_FLOAT_DTYPES, dtype_name
from .values import to_2tuple

def check_ndim(shape: Sequence[int], ndim: int | Sequence[int], name: str, layout: str) -> None:
    """``len(shape)`` must be ``ndim`` (or one of them); ``layout`` reads like ``(B, N, C)``."""
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if len(shape) not in allowed:
        raise ValueError(f"{name} must have shape {layout}, got shape {tuple(shape)}")


def check_last_dim(shape: Sequence[int], expected: int, name: str) -> None:
    """Token tensors are (..., C); a wrong C is named before a matmul fails on it."""
    if len(shape) == 0 or shape[-1] != expected:
        raise ValueError(f"{name} must have last dimension {expected}, got shape {tuple(shape)}")


def check_tokens(shape: Sequence[int], channels: int | None, name: str,
                 layout: str = "(B, N, C)", min_tokens: int = 0) -> None:
    """Tokens (B, N, C) with N >= ``min_tokens`` and C = ``channels`` (None: any), in one call:
    a public layer's input check.  ``layout`` is how the message describes the shape."""
    shape = tuple(shape)
    if len(shape) != 3 or shape[1] < min_tokens:
        raise ValueError(f"{name} must have shape {layout}, got shape {shape}")
    if channels is not None:
        check_last_dim(shape, channels, name)


def check_qkv(q_shape: Sequence[int], k_shape: Sequence[int],
              v_shape: Sequence[int] | None = None) -> None:
    """q (..., N_q, d), k (..., N_k, d), v (..., N_k, d_v): the shapes attention needs."""
    q_shape, k_shape = tuple(q_shape), tuple(k_shape)
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if shape is not None and len(shape) < 2:
            raise ValueError(f"{name} must have shape (..., N, d), got shape {tuple(shape)}")
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(f"q and k must have the same last dimension d, got q of shape "
                         f"{q_shape} and k of shape {k_shape}")
    if v_shape is not None and tuple(v_shape)[-2] != k_shape[-2]:
        raise ValueError(f"v must have one row per key (N_k = {k_shape[-2]}), got k of shape "
                         f"{k_shape} and v of shape {tuple(v_shape)}")


def check_token_grid(shape: Sequence[int], size, name: str = "tokens",
                     channels: int | None = None) -> tuple[int, int]:
    """Tokens (B, 1 + H·W, C) -- a class token, then an H×W grid in raster order -- that fit
    ``size`` (H, W) (and have C = ``channels`` unless None); returns (H, W)."""
    H, W = to_2tuple(size, "size")
    shape = tuple(shape)
    if len(shape) != 3 or shape[1] != 1 + H * W:
        raise ValueError(f"{name} of shape {shape} do not fit the grid size {(H, W)}: "
                         f"expected 1 + {H}·{W} = {1 + H * W} tokens")
    if channels is not None:
        check_last_dim(shape, channels, name)
    return H, W


def check_mask_dtype(dtype, name: str = "mask") -> str:
    """A mask is boolean (True = may attend) or additive floating-point (0 or -inf).
    An integer 0/1 mask would be *added* to the scores -- a silent mistake -- so it is refused."""
    kind = dtype_name(dtype)
    if kind == "bool" or kind in IMAGE_FLOAT_DTYPES:
        return kind
    raise ValueError(f"{name} has dtype {kind}; expected a boolean mask (True = may attend) or "
                     f"an additive floating-point mask (0 = keep, -inf = masked)")


def check_mask(mask_shape: Sequence[int], scores_shape: Sequence[int]) -> None:
    """An attention mask must broadcast to the score tensor (B, h, N_q, N_k)."""
    mask_shape, scores_shape = tuple(mask_shape), tuple(scores_shape)
    ok = len(mask_shape) <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(mask_shape[::-1], scores_shape[::-1])
    )
    if not ok:
        raise ValueError(
            f"mask of shape {mask_shape} does not broadcast to the attention scores "
            f"(B, heads, N_q, N_k) = {scores_shape}"
        )


def check_class_token(cls_shape: Sequence[int], tokens_shape: Sequence[int]) -> None:
    """A class token (B, 1, C) that joins patch tokens (B, N, C): one token, the same batch,
    the same width."""
    cls_shape, tokens_shape = tuple(cls_shape), tuple(tokens_shape)
    if len(tokens_shape) != 3:
        raise ValueError(f"tokens must have shape (B, N, C), got shape {tokens_shape}")
    if len(cls_shape) != 3 or cls_shape[1] != 1:
        raise ValueError(f"the class token must have shape (B, 1, C), got shape {cls_shape}")
    if cls_shape[2] != tokens_shape[2]:
        raise ValueError(
            f"the class token has width {cls_shape[2]} but the patch tokens have "
            f"{tokens_shape[2]} channels (class token shape {cls_shape}, tokens shape "
            f"{tokens_shape})")
    if cls_shape[0] != tokens_shape[0]:
        raise ValueError(
            f"the class token has batch size {cls_shape[0]} but the patch tokens have "
            f"{tokens_shape[0]} (class token shape {cls_shape}, tokens shape {tokens_shape})")
