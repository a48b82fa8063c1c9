"""Exercises for notebook 08 -- co-scale (CoaT's parallel blocks).

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Nothing from ``vit_scratch`` may be called here. 8.1 is NumPy only (no torch, no scipy); no
Python loops over pixels or channels in either exercise -- the grader counts the Python steps
your own code takes at two sizes.

CoaT: Xu, Xu, Chang, Tu, "Co-Scale Conv-Attentional Image Transformers", ICCV 2021,
https://arxiv.org/abs/2104.06399.

Check your work:   python -m exercises.check 08
"""
import numpy as np
import torch
import torch.nn.functional as F


def bilinear_resize(x: np.ndarray, size, align_corners: bool = False) -> np.ndarray:
    """Exercise 8.1 -- bilinear resizing in NumPy, equal to PyTorch's ``F.interpolate`` in both
    of its conventions.

    CoaT's parallel blocks move features between scales with
    ``F.interpolate(mode="bilinear", align_corners=False)``; notebook 08 (section 2) writes that
    case. Many other models resize with ``align_corners=True``. Write both, up and down:

    x:             (B, C, H, W)
    size:          (H_out, W_out), larger or smaller than (H, W), any integers >= 1
    align_corners: PyTorch's switch (see below)
    returns:       (B, C, H_out, W_out) in x's dtype, equal to ``F.interpolate(torch.from_numpy(x),
                   size=size, mode="bilinear", align_corners=align_corners)`` (no antialiasing)

    Along an axis of length n_in -> n_out, output pixel i reads the input at a position src:

    * ``align_corners=False``: the pixels are squares of side 1 whose centres sit at i + 0.5,
      src = (i + 0.5) · n_in / n_out − 0.5, clamped below at 0;
    * ``align_corners=True``: the first and last pixels' centres line up,
      src = i · (n_in − 1) / (n_out − 1)   (src = 0 when n_out = 1).

    Then it mixes the two nearest input pixels i0 = floor(src) and i1 = min(i0 + 1, n_in − 1)
    with weights (1 − λ, λ), λ = src − i0. Do rows, then columns (bilinear is separable).
    Hints: compute i0, i1, λ for all output rows at once; fancy indexing ``x[:, :, i0]``
    gathers whole rows. Not allowed: torch, scipy, loops over pixels or channels.
    """
    # TODO Exercise 8.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 8.1: bilinear_resize")


def interpolate_tokens(x: torch.Tensor, size, new_size) -> torch.Tensor:
    """Exercise 8.2 (try first) -- feature interpolation of a token sequence, class token carried.

    Notebook 08 moves a scale's tokens to another scale's grid; try it first. The image tokens
    are resized as an image (bilinear, align_corners=False), and the class token is carried
    over unchanged (CoaT's parallel block then adds the resized copies, class tokens included).

    x:        (B, 1 + H·W, C), class token first, image tokens in raster order
    size:     (H, W), the grid of x
    new_size: (H', W'), the grid to resize to
    returns:  (B, 1 + H'·W', C), same dtype and device; gradients must flow back to x
    Raise ValueError when the number of tokens is not 1 + H·W.

    ``F.interpolate`` is allowed here. The work is in the reshapes: the tokens are (B, N, C),
    channels last, but ``F.interpolate`` wants (B, C, H, W). Do not let the class token into
    the image.
    """
    # TODO Exercise 8.2: your code here (replace the line below)
    raise NotImplementedError("Exercise 8.2: interpolate_tokens")
