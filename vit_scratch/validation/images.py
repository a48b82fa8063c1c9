"""Images: one dtype policy for both rooms, finite normalised values, the model's size.

A model takes *floating-point* images, normalised with its mean and std.  float16, bfloat16,
float32 and float64 images are cast to the model's dtype (the dtype of its parameters); integer
(uint8 0-255 included), bool and complex images are refused.  Non-finite values, and values
beyond ``MAX_ABS_IMAGE`` (far outside any normalised image, and where float32 LayerNorm starts
to overflow), are refused too.  Both rooms' ``prepare_images`` call these three checks.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

from .configs import grid_size
from .values import _show, to_2tuple

#: Floating dtypes a model accepts (cast to the model's own dtype on the way in).
IMAGE_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: Larger magnitudes are refused: a normalised image lies within about ±3 (±1e4 leaves room for
#: any sane normalisation), and near 1e19 the float32 LayerNorm variance overflows, after which
#: every image gets the same logits.
MAX_ABS_IMAGE = 1e4


def dtype_name(dtype) -> str:
    """``np.float32`` / ``dtype('float32')`` / ``torch.float32`` -> ``'float32'``."""
    name = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
    return str(name if isinstance(name, str) else dtype).removeprefix("torch.")


def check_image_dtype(dtype, name: str = "images") -> str:
    """The documented input dtype policy, the same in both rooms.

    Models take floating-point images that are already scaled and normalised with the model's
    mean and std (``vit_scratch.data.normalize`` / ``preprocess``).  float16, bfloat16, float32
    and float64 pass (the model casts them to its own dtype).  Everything else is a
    ``ValueError``: a uint8 picture holds 0-255 and would be fed to the model unscaled and
    unnormalised -- a classic silent mistake -- and bool, integer and complex images have no
    meaning for the model either.  Returns the dtype's name.
    """
    kind = dtype_name(dtype)
    if kind in IMAGE_FLOAT_DTYPES:
        return kind
    if kind == "uint8":
        raise ValueError(
            f"{name} have dtype uint8 (0-255 pixels?); the model expects floating-point images "
            f"scaled to [0, 1] and normalised with its mean and std: use "
            f"vit_scratch.data.preprocess(image, model) for a picture, or "
            f"normalize(images / 255.0, model) for a uint8 batch"
        )
    raise ValueError(
        f"{name} have dtype {kind}; the model expects floating-point images "
        f"({', '.join(IMAGE_FLOAT_DTYPES)}) normalised with its mean and std "
        f"(vit_scratch.data.normalize)"
    )


def check_image_values(max_abs: float, name: str = "images") -> None:
    """``max_abs`` = the largest ``|value|`` of a batch (NaN if any value is NaN).

    Refuses NaN, infinities and values beyond ``MAX_ABS_IMAGE``: both rooms would return
    garbage (NaN logits, or -- from about 1e19 on, where the float32 LayerNorm variance
    overflows -- the same logits for every image) without any other sign."""
    if max_abs != max_abs:
        raise ValueError(f"{name} contain NaN; expected finite, normalised values")
    if max_abs == math.inf:
        raise ValueError(f"{name} contain infinite values; expected finite, normalised values")
    if max_abs > MAX_ABS_IMAGE:
        raise ValueError(
            f"{name} reach |value| = {max_abs:.3g}; expected normalised images (about ±3, at most "
            f"±{MAX_ABS_IMAGE:g}): scale them to [0, 1] and normalise with the model's mean and "
            f"std (vit_scratch.data.normalize).  Far beyond that, LayerNorm's variance overflows "
            f"float32 and every image gets the same logits"
        )


def check_images(shape: Sequence[int], in_chans: int | None = None, img_size=None,
                 patch_size=None, dtype=None) -> None:
    """Check a batch of images of ``shape`` (B, C, H, W) before it enters a model.

    ``img_size`` is the size a fixed-size model was built for (its position embedding has
    one entry per patch of that size); ``patch_size`` alone checks only divisibility.  With
    ``dtype``, the dtype policy (:func:`check_image_dtype`) is checked first.
    """
    if dtype is not None:
        check_image_dtype(dtype)
    if len(shape) != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got shape {tuple(map(int, shape))}")
    # The batch size is only shown, never read: under torch.export it is a symbolic size, and
    # reading it (int(), ==) would fix the exported model to the example's batch.
    batch = int(shape[0]) if isinstance(shape[0], numbers.Integral) else shape[0]
    chans, height, width = map(int, shape[1:])
    shape = (batch, chans, height, width)
    if in_chans is not None and chans != in_chans:
        raise ValueError(
            f"images have {chans} channels but the model expects in_chans={in_chans} "
            f"(got shape {shape})"
        )
    if img_size is not None:
        expected = to_2tuple(img_size, "img_size")
        if (height, width) != expected:
            raise ValueError(
                f"image size {_show((height, width))} does not match the model's "
                f"img_size {_show(expected)}; build the model with img_size=({height}, {width}) "
                f"and load the checkpoint with vit_scratch.load_checkpoint, which resizes the "
                f"position embedding"
            )
    if patch_size is not None:
        grid_size((height, width), patch_size)
