"""Figures the notebooks draw: patch grids, position-embedding similarity, attention maps.

Every function takes arrays (C, H, W images, (N, N) similarity, (heads, gh, gw) maps) and an
optional matplotlib ``ax``; they return the axes so a notebook can add titles.
"""
from __future__ import annotations

import numpy as np
from einops import rearrange


def _axes(ax, figsize=(4, 4)):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=figsize)
    return ax


def to_hwc(img: np.ndarray) -> np.ndarray:
    """(C, H, W) in [0, 1] -> (H, W, C) clipped, ready for ``imshow``."""
    return np.clip(np.asarray(img).transpose(1, 2, 0), 0.0, 1.0)


def show_image(img: np.ndarray, ax=None, title: str | None = None):
    ax = _axes(ax)
    ax.imshow(to_hwc(img))
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax


def draw_patch_grid(img: np.ndarray, patch_size: int, ax=None, title: str | None = None,
                    numbers: bool = False, color: str = "white"):
    """The image with the patch boundaries drawn on top (and each patch's raster index)."""
    ax = show_image(img, ax, title)
    _, h, w = img.shape
    for y in range(0, h + 1, patch_size):
        ax.axhline(y - 0.5, color=color, lw=0.8)
    for x in range(0, w + 1, patch_size):
        ax.axvline(x - 0.5, color=color, lw=0.8)
    if numbers:
        gw = w // patch_size
        for i in range(0, (h // patch_size) * gw):
            r, c = divmod(i, gw)
            ax.text((c + 0.5) * patch_size, (r + 0.5) * patch_size, str(i), color=color,
                    ha="center", va="center", fontsize=6)
    return ax


def patch_mosaic(patches: np.ndarray, grid, patch_size: int, gap: int = 2) -> np.ndarray:
    """Flattened patches (N, C·P·P) back into a picture with a gap between patches, as the
    (H', W', C) array ``imshow`` takes -- shows what the model actually receives."""
    gh, gw = grid
    tiles = rearrange(patches, "(gh gw) (c p1 p2) -> gh gw p1 p2 c", gh=gh, gw=gw,
                      p1=patch_size, p2=patch_size)
    tiles = np.pad(tiles, ((0, 0), (0, 0), (0, gap), (0, gap), (0, 0)), constant_values=1.0)
    return np.clip(rearrange(tiles, "gh gw p1 p2 c -> (gh p1) (gw p2) c"), 0.0, 1.0)


def similarity_mosaic(sim: np.ndarray, grid, gap: int = 1) -> np.ndarray:
    """(N, N) similarities -> one (gh·(gh+gap), gw·(gw+gap)) image: the tile at (r, c) is the
    similarity of patch (r, c)'s embedding with every patch, drawn on the patch grid (Fig. 7 of
    the ViT paper, as one image instead of N subplots)."""
    gh, gw = grid
    tiles = rearrange(np.asarray(sim), "(r c) (y x) -> r c y x", r=gh, c=gw, y=gh, x=gw)
    tiles = np.pad(tiles, ((0, 0), (0, 0), (0, gap), (0, gap)), constant_values=np.nan)
    return rearrange(tiles, "r c y x -> (r y) (c x)")


def plot_similarity_grid(sim: np.ndarray, grid, ax=None, title: str | None = None,
                         vmin: float | None = -1.0, vmax: float | None = 1.0):
    """The similarity mosaic with a colour scale; ``vmin=None`` stretches it to the data
    (sin-cos similarities all lie in about [0.65, 1])."""
    ax = _axes(ax, figsize=(5, 5))
    image = ax.imshow(similarity_mosaic(sim, grid), cmap="viridis", vmin=vmin, vmax=vmax)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax, image


def upsample_map(attn_map: np.ndarray, patch_size: int) -> np.ndarray:
    """(gh, gw) -> (gh·P, gw·P): one value per pixel, constant over each patch."""
    return np.kron(attn_map, np.ones((patch_size, patch_size), dtype=attn_map.dtype))


def plot_attention_overlay(img: np.ndarray, attn_map: np.ndarray, patch_size: int, ax=None,
                           title: str | None = None, alpha: float = 0.6, cmap: str = "inferno",
                           vmin: float | None = None, vmax: float | None = None):
    """An attention map over the patch grid (gh, gw), drawn over the image it came from.
    The colours stretch to the map's range unless ``vmin``/``vmax`` fix them (e.g. 0 and 1
    to compare maps on one scale)."""
    ax = show_image(img, ax, title)
    ax.imshow(upsample_map(np.asarray(attn_map, dtype=np.float32), patch_size), cmap=cmap,
              alpha=alpha, vmin=vmin, vmax=vmax)
    return ax
