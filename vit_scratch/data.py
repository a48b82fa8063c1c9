"""Offline data: pictures that ship with matplotlib, and the ImageNet normalisation.

Nothing here downloads anything.  ``sample_image()`` is Grace Hopper's portrait from
matplotlib's bundled sample data, center-cropped and resized to the size a ViT expects.
"""
from __future__ import annotations

import numpy as np

from . import checks

IMAGENET_MEAN = (0.485, 0.456, 0.406)  # what timm's ViT/DeiT checkpoints were trained with
IMAGENET_STD = (0.229, 0.224, 0.225)


def sample_image(size=224, name: str = "grace_hopper.jpg") -> np.ndarray:
    """A real photo as float32 (3, H, W) in [0, 1]; ``size`` is an int or (H, W).

    The largest centred crop with the target aspect ratio is resized with bicubic filtering.
    """
    from matplotlib import cbook
    from PIL import Image

    height, width = checks.to_2tuple(size, "size")
    img = Image.open(cbook.get_sample_data(name, asfileobj=False)).convert("RGB")
    w, h = img.size
    scale = min(w / width, h / height)
    cw, ch = round(width * scale), round(height * scale)
    left, top = (w - cw) // 2, (h - ch) // 2
    img = img.crop((left, top, left + cw, top + ch)).resize((width, height), Image.BICUBIC)
    return np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0  # (3, H, W)


def normalize(images: np.ndarray, mean=IMAGENET_MEAN, std=IMAGENET_STD) -> np.ndarray:
    """(x - mean) / std per channel, for (C, H, W) or (B, C, H, W) arrays."""
    images = np.asarray(images, dtype=np.float32)
    shape = (-1, 1, 1)
    return (images - np.reshape(mean, shape).astype(np.float32)) / np.reshape(std, shape).astype(
        np.float32)


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's bundled handwritten digits (1,797 images, 8×8, grey, 10 classes).

    Returns ``(x_train, y_train, x_test, y_test)``: images float32 (N, 1, 8, 8) in [0, 1],
    labels int64 (N,).  The split is stratified (each class split in the same proportion) and
    fixed by ``seed``.  Bundled with scikit-learn, so it works offline.
    """
    from sklearn.datasets import load_digits as _load

    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    digits = _load()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        test[idx[: round(test_fraction * len(idx))]] = True
    return images[~test], labels[~test], images[test], labels[test]
