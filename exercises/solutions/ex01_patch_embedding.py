"""Exercises for notebook 01 -- patch embedding.

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Rules: NumPy only, and no Python loops over patches, tokens or pixels -- the grader runs your
function at two sizes and counts the Python steps your own code takes (vectorized code takes
the same number at both sizes).

Check your work:   python -m exercises.check 01
"""
import numpy as np


def patchify_reshape(images: np.ndarray, patch_size: int) -> np.ndarray:
    """Exercise 1.1 (try first) -- cut images into patches with ``reshape`` and ``transpose`` only.

    Notebook 01, section 1 ("Cut a real picture into patches") does this with one einops
    pattern. Try it here first, without einops.

    images:     (B, C, H, W), H and W multiples of patch_size (H != W is allowed)
    patch_size: P
    returns:    (B, N, C·P·P) with N = (H/P)·(W/P) in the input's dtype. The patches come in
                raster order (left to right, then top to bottom), and each one is flattened
                channel first, then row, then column. That is the order of a Conv2d weight
                (E, C, P, P), so ``patchify_reshape(x, P) @ conv.weight.reshape(E, -1).T + bias``
                equals the convolution.
    Raises ValueError (naming H or W and P) when H or W is not a multiple of P.

    Hints: ``images.reshape(B, C, H // P, P, W // P, P)`` splits each spatial axis into
    (which patch, where inside the patch). Move the two patch-grid axes to the front with
    ``transpose``, then merge axes with one last ``reshape``.
    Not allowed: einops, torch, loops over patches/rows/columns.
    """
    ### BEGIN SOLUTION
    B, C, H, W = images.shape
    P = patch_size
    if H % P:
        raise ValueError(f"image height H={H} is not a multiple of patch_size={P}")
    if W % P:
        raise ValueError(f"image width W={W} is not a multiple of patch_size={P}")
    gh, gw = H // P, W // P
    x = images.reshape(B, C, gh, P, gw, P)             # (B, C, gh, p1, gw, p2)
    x = x.transpose(0, 2, 4, 1, 3, 5)                  # (B, gh, gw, C, p1, p2)
    return x.reshape(B, gh * gw, C * P * P)            # (B, N, C·P·P)
    ### END SOLUTION


def unpatchify(patches: np.ndarray, patch_size: int, img_size) -> np.ndarray:
    """Exercise 1.2 -- the inverse of patchify, for rectangular images too.

    The notebook's ``unpatchify`` takes square images and uses einops. This one takes
    ``img_size`` as an int (square) or a pair (H, W), and uses ``reshape``/``transpose`` only.

    patches:  (B, N, C·P·P), flattened as in Exercise 1.1 (raster order, (c, row, col) inside)
    img_size: H (square image) or (H, W)
    returns:  (B, C, H, W), so that ``unpatchify(patchify_reshape(x, P), P, (H, W))`` is ``x``
              exactly (bit for bit).
    Raises ValueError when H or W is not a multiple of P, when N is not (H/P)·(W/P), or when
    the patch length is not a multiple of P·P (so C cannot be found).

    Hint: undo 1.1's three steps in reverse order. Which axes did the transpose move?
    Not allowed: einops, torch, loops.
    """
    ### BEGIN SOLUTION
    H, W = (img_size, img_size) if np.isscalar(img_size) else tuple(img_size)
    P = patch_size
    B, N, D = patches.shape
    if H % P or W % P:
        raise ValueError(f"img_size {(H, W)} is not a multiple of patch_size={P}")
    gh, gw = H // P, W // P
    if N != gh * gw:
        raise ValueError(f"{N} patches do not make a {gh}x{gw} grid (img_size {(H, W)}, P={P})")
    if D % (P * P):
        raise ValueError(f"patch length {D} is not a multiple of P·P = {P * P}")
    C = D // (P * P)
    x = patches.reshape(B, gh, gw, C, P, P)            # (B, gh, gw, C, p1, p2)
    x = x.transpose(0, 3, 1, 4, 2, 5)                  # (B, C, gh, p1, gw, p2)
    return x.reshape(B, C, H, W)
    ### END SOLUTION


def conv_weight_to_hwc_linear(weight: np.ndarray) -> np.ndarray:
    """Exercise 1.3 -- load a conv checkpoint into a Linear that reads (row, col, channel) patches.

    Notebook 01, section 2 ("The flattening-order trap") shows a patch embedding written as
    ``Rearrange('b c (h s1) (w s2) -> b (h w) (s1 s2 c)')`` followed by ``nn.Linear``: each
    patch is flattened row, then column, then channel (channel last, "HWC"). Every ViT
    checkpoint stores the projection as a Conv2d weight of shape (E, C, P, P).

    weight:  (E, C, P, P), a Conv2d weight (kernel = stride = P)
    returns: (E, P·P·C), the Linear weight W such that ``hwc_patches @ W.T + bias`` equals
             the convolution for every input
    Hint: the Linear's input index runs over (s1, s2, c), and so must the weight's second axis.
    """
    ### BEGIN SOLUTION
    E = weight.shape[0]
    return weight.transpose(0, 2, 3, 1).reshape(E, -1)   # (E, P, P, C) -> (E, P·P·C)
    ### END SOLUTION


def pos_embed_similarity(pos_embed: np.ndarray, num_prefix_tokens: int = 1) -> np.ndarray:
    """Exercise 1.4 (try first) -- cosine similarity between the position embeddings of all patches.

    Notebook 01, section 4 ("Looking at them: the cosine-similarity grid"). Try it before
    reading the notebook's version.

    pos_embed:         (1, num_prefix_tokens + N, C). The first entries belong to prefix
                       tokens (the class token, a distillation token, ...) and are skipped.
    returns:           (N, N), entry [i, j] = cos(pe_i, pe_j); the diagonal is 1
    Hint: normalise every row to unit length, then one matrix product gives all the cosines.
    Not allowed: loops over tokens.
    """
    ### BEGIN SOLUTION
    pe = pos_embed[0, num_prefix_tokens:]                         # (N, C)
    pe = pe / np.linalg.norm(pe, axis=-1, keepdims=True)          # unit rows
    return pe @ pe.T                                              # (N, N)
    ### END SOLUTION
