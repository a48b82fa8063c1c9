"""Exercises for notebook 01 -- patch embedding.

Replace each ``raise NotImplementedError`` with your code.  NumPy only (einops is allowed
where it says so); no Python loops over patches, tokens or pixels.
Check your work:  pytest exercises/test_ex01_patch_embedding.py
"""
import numpy as np


def patchify_reshape(images: np.ndarray, patch_size: int) -> np.ndarray:
    """Exercise 1.1 -- patchify with ``reshape`` and ``transpose`` only (no einops).

    images: (B, C, H, W) with H and W multiples of patch_size.
    Returns (B, N, C·P·P), N = (H/P)·(W/P), patches in raster order (row by row), each patch
    flattened channel first, then row, then column -- the order of a Conv2d weight (E, C, P, P),
    so that ``patchify_reshape(x, P) @ conv.weight.reshape(E, -1).T + bias`` equals the conv.
    Raise ``ValueError`` if H or W is not divisible by patch_size.
    """
    raise NotImplementedError("Exercise 1.1: patchify_reshape")


def unpatchify(patches: np.ndarray, patch_size: int, img_size: int) -> np.ndarray:
    """Exercise 1.2 -- the inverse of patchify: (B, N, C·P·P) -> (B, C, H, W).

    ``img_size`` is the side of the square image (H = W = img_size).
    ``unpatchify(patchify_reshape(x, P), P, H)`` must give back ``x`` exactly.  einops allowed.
    """
    raise NotImplementedError("Exercise 1.2: unpatchify")


def conv_weight_to_seed_linear(weight: np.ndarray) -> np.ndarray:
    """Exercise 1.3 -- channel-last code flattens each patch as (row, column, channel):
    ``rearrange(x, 'b c (gh p1) (gw p2) -> b (gh gw) (p1 p2 c)')`` followed by ``nn.Linear``.

    Given a Conv2d weight (E, C, P, P), return the Linear weight (E, P·P·C) that makes that
    flatten + Linear compute exactly what the Conv2d computes.
    """
    raise NotImplementedError("Exercise 1.3: conv_weight_to_seed_linear")


def pos_embed_similarity(pos_embed: np.ndarray, num_prefix_tokens: int = 1) -> np.ndarray:
    """Exercise 1.4 -- cosine similarity between the position embeddings of all patches.

    pos_embed: (1, num_prefix_tokens + N, C).  Skip the prefix (class token) entries.
    Returns (N, N) with entry [i, j] = cos(pos_embed_i, pos_embed_j); the diagonal is 1.
    """
    raise NotImplementedError("Exercise 1.4: pos_embed_similarity")
