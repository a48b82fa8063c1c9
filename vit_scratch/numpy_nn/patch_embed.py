"""From pixels to tokens in NumPy: patchify, patch embedding, class token, position embeddings.

A ViT cuts an image into non-overlapping P×P patches, flattens each one and projects it to
``embed_dim`` channels.  Because the patches do not overlap, "flatten + Linear" and
"Conv2d(kernel = stride = P)" are the same computation -- provided the flattening order is the
order in which Conv2d's weight ``(E, C, P, P)`` flattens: channel first, then row, then column.

Each function with a backward is followed by its ``_forward`` and ``_backward`` (CS231n's
pairing); a public function checks its arguments and calls its unchecked core ``_f``, which the
models call.
"""
from __future__ import annotations

import numpy as np
from einops import rearrange

from .. import validation
from .backprop import Cache, check_backward
from .layers import _linear


def patchify(images: np.ndarray, patch_size: int) -> np.ndarray:
    """Cut images into flattened patches, in raster order (left to right, top to bottom).

    images: (B, C, H, W)  ->  (B, N, C·P·P) with N = (H/P)·(W/P); each patch is flattened
    as (c, row, col), the order of a Conv2d weight (E, C, P, P).
    """
    images = np.asarray(images)
    patch_size = validation.check_positive(patch_size, "patch_size")
    validation.check_images(images.shape, patch_size=patch_size)
    return _patchify(images, patch_size)


def _patchify(images, patch_size: int):
    return rearrange(images, "b c (gh p1) (gw p2) -> b (gh gw) (c p1 p2)",
                     p1=patch_size, p2=patch_size)


def unpatchify(patches: np.ndarray, patch_size: int, img_size) -> np.ndarray:
    """Inverse of :func:`patchify`: (B, N, C·P·P) -> (B, C, H, W)."""
    patches = np.asarray(patches)
    gh, gw = validation.grid_size(img_size, patch_size)
    if patches.ndim != 3 or patches.shape[1] != gh * gw or patches.shape[2] % (patch_size**2):
        raise ValueError(
            f"patches of shape {patches.shape} do not fit img_size={img_size!r} with "
            f"patch_size={patch_size}: expected (B, {gh * gw}, C·{patch_size}·{patch_size})"
        )
    return rearrange(patches, "b (gh gw) (c p1 p2) -> b c (gh p1) (gw p2)",
                     gh=gh, gw=gw, p1=patch_size, p2=patch_size)


def patch_embed(images: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """Patch embedding as flatten + Linear, with a Conv2d's weights.

    images: (B, C, H, W), weight: (E, C, P, P), bias: (E,)  ->  (B, N, E)

    Images follow the models' dtype policy (``vit_scratch.validation.check_image_dtype``): floats,
    computed in the weight's dtype; integer (uint8), bool and complex images are refused.
    """
    images, weight = np.asarray(images), np.asarray(weight)
    validation.check_ndim(weight.shape, 4, "patch_embed weight", "(E, C, P, P)")
    embed_dim, in_chans, patch, patch_w = weight.shape
    if patch != patch_w:
        raise ValueError(f"patch_embed weight must have square patches (E, C, P, P), got shape "
                         f"{weight.shape}")
    validation.check_image_dtype(images.dtype)
    validation.check_images(images.shape, in_chans, patch_size=patch)
    validation.check_ndim(np.shape(bias), 1, "patch_embed bias", f"(E,) = ({embed_dim},)")
    validation.check_last_dim(np.shape(bias), embed_dim, "patch_embed bias")
    return _patch_embed(images, weight, bias)


def _patch_embed(images, weight, bias):
    """:func:`patch_embed`'s formula, unchecked."""
    images = images.astype(weight.dtype, copy=False)
    return _linear(_patchify(images, weight.shape[-1]), weight.reshape(weight.shape[0], -1), bias)


def patch_embed_forward(images: np.ndarray, weight: np.ndarray, bias: np.ndarray):
    """:func:`patch_embed` -> (out, cache)."""
    out = patch_embed(images, weight, bias)
    images = np.asarray(images).astype(weight.dtype, copy=False)
    return out, Cache("patch_embed", out, images=images, weight=weight)


def patch_embed_backward(dout: np.ndarray, cache: Cache):
    """Patch embedding is a Linear on the flattened patches X = patchify(images), with the
    Conv2d weight flattened to W (E, C·P·P):  y = X Wᵀ + b, so

        ∂L/∂W = Σ dyᵀ X  (reshaped to (E, C, P, P)),   ∂L/∂b = Σ dy,
        ∂L/∂images = unpatchify(dy W)       (each pixel is in exactly one patch).

    -> (dimages (B, C, H, W), dweight (E, C, P, P), dbias (E,))."""
    dout = check_backward("patch_embed", dout, cache)
    images, weight = cache.images, cache.weight
    E, _, P, _ = weight.shape
    patches = _patchify(images, P)  # (B, N, C·P·P)
    d2 = dout.reshape(-1, E)
    dweight = (d2.T @ patches.reshape(-1, patches.shape[-1])).reshape(weight.shape)
    dpatches = (d2 @ weight.reshape(E, -1)).reshape(patches.shape)
    return unpatchify(dpatches, P, images.shape[2:]), dweight, d2.sum(axis=0)


def add_class_token(tokens: np.ndarray, cls_token: np.ndarray) -> np.ndarray:
    """Prepend the learned class token to every sequence of the batch.

    tokens: (B, N, C), cls_token: (1, 1, C)  ->  (B, 1 + N, C)
    """
    tokens, cls_token = np.asarray(tokens), np.asarray(cls_token)
    validation.check_ndim(tokens.shape, 3, "tokens", "(B, N, C)")
    if cls_token.shape != (1, 1, tokens.shape[-1]):
        raise ValueError(f"cls_token must have shape (1, 1, C) = (1, 1, {tokens.shape[-1]}), "
                         f"got shape {cls_token.shape}")
    return _add_class_token(tokens, cls_token)


def _add_class_token(tokens, cls_token):
    cls = np.broadcast_to(cls_token, (tokens.shape[0], 1, tokens.shape[-1]))
    return np.concatenate([cls.astype(tokens.dtype, copy=False), tokens], axis=1)


def add_class_token_forward(tokens: np.ndarray, cls_token: np.ndarray):
    """:func:`add_class_token` -> (out, cache)."""
    out = add_class_token(tokens, cls_token)
    return out, Cache("add_class_token", out)


def add_class_token_backward(dout: np.ndarray, cache: Cache):
    """y = [cls; x]: the gradient splits along the tokens.  Every image's row 0 is the same
    learned token, so its gradient is the sum over the batch:

        ∂L/∂x = dy[:, 1:],   ∂L/∂cls = Σ_b dy[b, 0]

    -> (dtokens (B, N, C), dcls_token (1, 1, C))"""
    dout = check_backward("add_class_token", dout, cache)
    return dout[:, 1:], dout[:, :1].sum(axis=0, keepdims=True)


def add_pos_embed(tokens: np.ndarray, pos_embed: np.ndarray) -> np.ndarray:
    """tokens + pos_embed, the same position embedding for every image of the batch.

    tokens: (B, N, C), pos_embed: (1, N, C)  ->  (B, N, C)"""
    if np.shape(pos_embed) != (1,) + tuple(tokens.shape[1:]):
        raise ValueError(f"pos_embed must have shape (1, N, C) = (1, {tokens.shape[1]}, "
                         f"{tokens.shape[2]}) for tokens of shape {tokens.shape}, got shape "
                         f"{np.shape(pos_embed)}")
    return tokens + pos_embed


def add_pos_embed_forward(tokens: np.ndarray, pos_embed: np.ndarray):
    """:func:`add_pos_embed` -> (out, cache)."""
    out = add_pos_embed(tokens, pos_embed)
    return out, Cache("add_pos_embed", out)


def add_pos_embed_backward(dout: np.ndarray, cache: Cache):
    """y = x + e, e broadcast over the batch  ⇒  ∂L/∂x = dy,  ∂L/∂e = Σ_b dy[b].
    -> (dtokens (B, N, C), dpos_embed (1, N, C))."""
    dout = check_backward("add_pos_embed", dout, cache)
    return dout, dout.sum(axis=0, keepdims=True)


def sincos_pos_embed_1d(positions: np.ndarray, dim: int, temperature: float = 10000.0):
    """Sinusoidal embedding of 1-D positions ("Attention Is All You Need").

    positions: (M,)  ->  (M, dim); the first half are sines, the second half cosines, at
    frequencies ω_i = temperature^(-i / (dim/2)), i = 0 .. dim/2 - 1.
    """
    validation.check_positive(dim, "dim")
    if dim % 2:
        raise ValueError(f"dim {dim} must be even for a sin-cos embedding")
    validation.check_ndim(np.shape(positions), 1, "positions", "(M,)")
    omega = temperature ** -(np.arange(dim // 2, dtype=np.float64) / (dim // 2))  # (dim/2,)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * omega[None, :]  # (M, dim/2)
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


def sincos_pos_embed_2d(embed_dim: int, grid_size, class_token: bool = True,
                        temperature: float = 10000.0) -> np.ndarray:
    """Fixed 2-D sin-cos position embedding (as in MAE): half the channels encode the row,
    half the column, so tokens in the same row or column share half their embedding.

    ->  (1, [1 +] gh·gw, embed_dim), raster order like :func:`patchify`; the class token's row
    is zeros (it has no place in the grid).
    """
    validation.check_positive(embed_dim, "embed_dim")
    if embed_dim % 4:
        raise ValueError(f"embed_dim {embed_dim} must be divisible by 4 for a 2-D sin-cos embedding")
    gh, gw = validation.to_2tuple(grid_size, "grid_size")
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")  # (gh, gw) each
    emb = np.concatenate(
        [sincos_pos_embed_1d(rows.ravel(), embed_dim // 2, temperature),
         sincos_pos_embed_1d(cols.ravel(), embed_dim // 2, temperature)],
        axis=1,
    )  # (gh·gw, embed_dim)
    if class_token:
        emb = np.concatenate([np.zeros((1, embed_dim)), emb], axis=0)
    return emb[None].astype(np.float32)


def cosine_similarity_grid(pos_embed: np.ndarray, num_prefix_tokens: int = 1) -> np.ndarray:
    """Cosine similarity of every patch's position embedding with every other's.

    pos_embed: (1, [prefix +] N, C)  ->  (N, N); row i, reshaped to the patch grid, is the
    picture Fig. 7 of the ViT paper draws for patch i.
    """
    pe = np.asarray(pos_embed, dtype=np.float64)
    validation.check_ndim(pe.shape, 3, "pos_embed", "(1, [prefix +] N, C)")
    pe = pe[0, num_prefix_tokens:]  # (N, C)
    pe = pe / np.maximum(np.linalg.norm(pe, axis=-1, keepdims=True), 1e-12)
    return pe @ pe.T
