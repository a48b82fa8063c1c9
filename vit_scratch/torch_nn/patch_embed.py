"""From pixels to tokens in PyTorch: the patch embedding and position-embedding resizing."""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import validation
from .layers import check_args_by_hand


class PatchEmbed(nn.Module):
    """Conv2d(kernel = stride = P) then flatten to tokens in raster order.

    (B, C, H, W) -> (B, N, E), N = (H/P)·(W/P).  Same as flatten + Linear on non-overlapping
    patches (``vit_scratch.numpy_nn.patch_embed.patch_embed``), but one fused kernel.

    ``forward`` checks its images (a layer used on its own); a model checks its images once,
    in ``prepare_images``, and calls :meth:`embed`.
    """

    def __init__(self, img_size=224, patch_size: int = 16, in_chans: int = 3,
                 embed_dim: int = 768):
        super().__init__()
        check_args_by_hand(img_size=img_size, patch_size=patch_size, in_chans=in_chans,
                           embed_dim=embed_dim)
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.patch_size, self.in_chans = patch_size, in_chans
        self.grid_size = (self.img_size[0] // patch_size, self.img_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():
            validation.check_images(x.shape, self.in_chans, self.img_size, dtype=x.dtype)
            x = x.to(self.proj.weight.dtype)  # floats cast to the layer's dtype
        return self.embed(x)

    def set_img_size(self, img_size) -> None:
        """Another input size (a model's ``set_input_size``, which has validated it)."""
        self.img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        self.grid_size = (self.img_size[0] // self.patch_size, self.img_size[1] // self.patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The embedding of images already checked: (B, C, H, W) -> (B, N, E)."""
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, E, gh, gw) -> (B, N, E)


def square_grid(positions: int) -> tuple[int, int] | None:
    """The square grid (side, side) of ``positions`` patches, or None if it is not a square
    (then the grid must be given: 12 positions read as 3×4 or as 4×3 alike)."""
    side = math.isqrt(max(positions, 0))
    return (side, side) if side * side == positions else None


def resize_pos_embed(pos_embed, new_grid, old_grid=None, num_prefix_tokens: int = 1,
                     mode: str = "bicubic", antialias: bool = True):
    """Resize a learned position embedding to another patch grid, e.g. 14×14 -> 24×24 for a
    224-trained ViT run at 384.

    pos_embed: (1, prefix + gh·gw, C), a tensor or an ndarray (returned as the same type);
    new_grid / old_grid: (rows, cols) of patches, old_grid defaults to a square grid.
    The ``num_prefix_tokens`` leading entries (the class token's) are kept as they are; the grid
    entries are viewed as a C-channel image and interpolated (bicubic with antialiasing, in
    float32).  Use the same function for a model's ``img_size`` change and in
    ``vit_scratch.load_checkpoint``.

    ``old_grid`` must be given as (rows, cols) for a non-square grid: a tensor of 12 positions
    reads as 3×4 or as 4×3 alike, and nothing in it tells which (a transposed ``old_grid``
    resamples the positions transposed, silently).  That is why ``save_checkpoint`` records the
    grid in the file's metadata, and ``load_checkpoint`` refuses a ``pos_embed_grid`` that
    contradicts the record.
    """
    validation.check_choice(mode, "mode", ("bicubic", "bilinear", "nearest", "area"))
    antialias = validation.check_bool(antialias, "antialias") and mode in ("bicubic", "bilinear")
    num_prefix_tokens = validation.check_int(num_prefix_tokens, "num_prefix_tokens", minimum=0)
    as_numpy = isinstance(pos_embed, np.ndarray)
    pe = torch.from_numpy(pos_embed) if as_numpy else pos_embed
    if pe.ndim != 3 or pe.shape[0] != 1:
        raise ValueError(f"pos_embed must have shape (1, tokens, C), got {tuple(pe.shape)}")
    n = pe.shape[1] - num_prefix_tokens
    if old_grid is None:
        old_grid = square_grid(n)
        if old_grid is None:
            raise ValueError(
                f"pos_embed has {n} grid entries after {num_prefix_tokens} prefix token(s), "
                f"which is not a square grid; pass old_grid=(rows, cols)"
            )
    old_grid = validation.to_2tuple(old_grid, "old_grid")
    new_grid = validation.to_2tuple(new_grid, "new_grid")
    if old_grid[0] * old_grid[1] != n:
        raise ValueError(f"old_grid {old_grid} does not hold the {n} grid entries of pos_embed")
    if old_grid != new_grid:
        pe = _resize_pos_embed(pe, new_grid, old_grid, num_prefix_tokens, mode, antialias)
    return pe.numpy() if as_numpy else pe


def _resize_pos_embed(pos_embed: torch.Tensor, new_grid: tuple[int, int],
                      old_grid: tuple[int, int], num_prefix_tokens: int, mode: str = "bicubic",
                      antialias: bool = True) -> torch.Tensor:
    """:func:`resize_pos_embed` on a tensor, unchecked (a model's ``dynamic_img_size`` calls it
    on every forward; TorchScript compiles it)."""
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    C = grid.shape[-1]
    # (1, gh·gw, C) -> (1, C, gh, gw), interpolated in float32, and back
    grid = grid.float().reshape(1, old_grid[0], old_grid[1], C).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=new_grid, mode=mode, antialias=antialias,
                         align_corners=False if mode in ("bicubic", "bilinear") else None)
    grid = grid.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], C).to(pos_embed.dtype)
    return torch.cat([prefix, grid], dim=1)


def adapt_input_conv(weight: torch.Tensor, in_chans: int) -> torch.Tensor:
    """A first convolution trained on ``weight.shape[1]`` input channels (RGB: 3), made to take
    ``in_chans``, the way timm adapts pretrained weights (``timm.models.adapt_input_conv``):

    * one channel: the sum over the trained channels (a grey image x·(1, 1, 1) gives the
      response the RGB weights give to that grey);
    * other counts: the trained channels repeated as often as needed, cut to ``in_chans`` and
      scaled by trained / ``in_chans``, so that the response to a constant image keeps its size.

    weight: (out, c, kh, kw) -> (out, in_chans, kh, kw), computed in float32, returned in the
    weight's dtype (a half-precision checkpoint stays half).  The same weight when the counts
    agree."""
    in_chans = validation.check_int(in_chans, "in_chans", minimum=1)
    if weight.ndim != 4:
        raise ValueError(f"adapt_input_conv takes a Conv2d weight (out, in, kh, kw), got shape "
                         f"{tuple(weight.shape)}")
    trained = weight.shape[1]
    if in_chans == trained:
        return weight
    w = weight.float()
    if in_chans == 1:
        w = w.sum(dim=1, keepdim=True)
    else:
        repeats = -(-in_chans // trained)  # ceil
        w = w.repeat(1, repeats, 1, 1)[:, :in_chans] * (trained / in_chans)
    return w.to(weight.dtype)
