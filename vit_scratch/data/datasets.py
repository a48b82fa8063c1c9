"""The data sets the trainer knows by name, and ``make_datasets``, which turns a name or a folder
into PyTorch datasets shaped for a model.  Nothing here downloads anything.

    "digits"            scikit-learn's bundled 8×8 handwritten digits (``load_digits``)
    "digits_on_canvas"  the localisation set: each digit at a random place on a larger noisy
                        canvas, its box recorded (``digits_on_canvas``)
    "digits_in_clutter" the clutter world: a digit and a fainter digit of another class on a
                        noisy canvas (``data.clutter``)
    a folder            your own pictures, one subfolder per class (``data.folders``)
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import validation
from .augment import ModelTransform
from .folders import _split_folders, image_folder_datasets
from .preprocessing import resolve_pretrained_cfg, to_model_input
from .splits import _tensor_dataset, stratified_split, validation_split


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's bundled handwritten digits (1,797 images, 8×8, grey, 10 classes).

    Returns ``(x_train, y_train, x_test, y_test)``: images float32 (N, 1, 8, 8) in [0, 1],
    labels int64 (N,).  The split is stratified (each class split in the same proportion) and
    fixed by ``seed``.  Bundled with scikit-learn, so it works offline.
    """
    from ..extras import require

    digits = require("sklearn.datasets", "the digits data set (bundled with scikit-learn)"
                     ).load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None]  # (N, 1, 8, 8)
    labels = digits.target.astype(np.int64)
    test = stratified_split(labels, test_fraction, seed)
    return images[~test], labels[~test], images[test], labels[test]


def digits_on_canvas(canvas_size: int = 32, scale: int = 1, noise: float = 0.1,
                     test_fraction: float = 0.2, seed: int = 0):
    """A localisation set: each of scikit-learn's digits pasted at a random place on a larger,
    noisy canvas, with its box recorded -- so that attention maps can be scored against where
    the object really is.

    Each 8×8 digit is enlarged ``scale`` times (pixel repetition, so an 8·scale square), placed
    at a uniformly random (top, left) on a ``canvas_size``² canvas of uniform noise in
    [0, ``noise``], and the canvas is clipped to [0, 1].  The train/test split is
    :func:`load_digits`' (stratified, fixed by ``seed``); positions and noise are fixed by
    ``seed`` too.

    Returns ``(x_train, y_train, box_train, x_test, y_test, box_test)``: images float32
    (N, 1, canvas_size, canvas_size), labels int64 (N,), boxes int64 (N, 4) as
    (top, left, height, width) in pixels.
    """
    side = 8 * validation.check_positive(scale, "scale")
    validation.check_positive(canvas_size, "canvas_size")
    if canvas_size < side:
        raise ValueError(f"canvas_size {canvas_size} is smaller than the digit ({side} pixels at "
                         f"scale={scale})")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be in [0, 1], got {noise!r}")
    x_train, y_train, x_test, y_test = load_digits(test_fraction, seed)
    rng = np.random.default_rng(seed + 1)

    def paste(digits: np.ndarray):
        n = len(digits)
        big = digits.repeat(scale, axis=2).repeat(scale, axis=3)  # (n, 1, side, side)
        canvas = rng.uniform(0.0, noise, size=(n, 1, canvas_size, canvas_size)).astype(np.float32)
        top, left = rng.integers(0, canvas_size - side + 1, size=(2, n))
        rows = top[:, None] + np.arange(side)  # (n, side)
        cols = left[:, None] + np.arange(side)  # (n, side)
        idx = np.arange(n)[:, None, None]
        window = canvas[idx, 0, rows[:, :, None], cols[:, None, :]]  # (n, side, side)
        canvas[idx, 0, rows[:, :, None], cols[:, None, :]] = np.maximum(window, big[:, 0])
        boxes = np.stack([top, left, np.full(n, side), np.full(n, side)], axis=1).astype(np.int64)
        return np.clip(canvas, 0.0, 1.0), boxes

    canvas_train, box_train = paste(x_train)
    canvas_test, box_test = paste(x_test)
    return canvas_train, y_train, box_train, canvas_test, y_test, box_test


#: The built-in data sets ``make_datasets`` (and ``python -m vit_scratch.train --data``) know.
DATASETS = {
    "digits": "scikit-learn's 1,797 handwritten digits (8×8, grey, 10 classes), resized to the "
              "model's input",
    "digits_on_canvas": "the localisation set: each digit at a random place on a noisy canvas "
                        "of the model's input size (boxes in dataset.boxes)",
    "digits_in_clutter": "8,000 training and 2,000 test canvases of the model's input size, "
                         "each with a digit, a fainter digit of another class and noise "
                         "(data.clutter; boxes in dataset.boxes)",
}


def digits_datasets(model, test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's digits as a train and a test ``TensorDataset`` of ``(image, label)``,
    images shaped for ``model`` (a model, a registered name or a ``pretrained_cfg``) by
    :func:`to_model_input`.  The split is :func:`load_digits`' (stratified, fixed by ``seed``)."""
    x_train, y_train, x_test, y_test = load_digits(test_fraction, seed)
    classes = [str(d) for d in range(10)]
    return (_tensor_dataset(to_model_input(x_train, model), y_train, classes),
            _tensor_dataset(to_model_input(x_test, model), y_test, classes))


def canvas_datasets(model, test_fraction: float = 0.2, seed: int = 0, scale: int | None = None,
                    noise: float = 0.1):
    """The localisation set (:func:`digits_on_canvas`) as a train and a test ``TensorDataset``.

    The canvas is the model's input size (square), so the boxes are in the model's pixels; the
    digit is enlarged ``scale`` times (default: ``max(1, size // 32)``).  Each dataset has
    ``.boxes``, an int64 array (N, 4) of (top, left, height, width)."""
    pcfg = resolve_pretrained_cfg(model)
    _, height, width = pcfg["input_size"]
    if height != width:
        raise ValueError(f"digits_on_canvas needs a square input, the model takes {height}×{width}")
    scale = max(1, height // 32) if scale is None else scale
    x_tr, y_tr, b_tr, x_te, y_te, b_te = digits_on_canvas(height, scale, noise, test_fraction,
                                                          seed)
    classes = [str(d) for d in range(10)]
    return (_tensor_dataset(to_model_input(x_tr, pcfg), y_tr, classes, boxes=b_tr),
            _tensor_dataset(to_model_input(x_te, pcfg), y_te, classes, boxes=b_te))


def clutter_datasets(model, test_fraction: float = 0.2, seed: int = 0):
    """The clutter world's trainer set (:data:`clutter.TRAINER_SET`) at the model's input size,
    as a train and a test ``TensorDataset`` with ``.boxes`` (the true digit's)."""
    from .clutter import trainer_splits

    size = resolve_pretrained_cfg(model)["input_size"][-1]
    classes = [str(d) for d in range(10)]
    return tuple(_tensor_dataset(to_model_input(x, model), y, classes, boxes=b)
                 for x, y, b in trainer_splits(size, test_fraction, seed))


def check_data(data) -> str:
    """A ``--data`` value: a built-in name (``DATASETS``) or an existing folder; anything else
    is a ``ValueError`` listing the known names."""
    if isinstance(data, (str, Path)):
        if str(data) in DATASETS:
            return str(data)
        if Path(data).is_dir():
            return str(data)
    raise ValueError(f"unknown data {str(data)!r}: not a built-in data set and not a folder; "
                     f"known data sets: {', '.join(DATASETS)}, or a folder of images with one "
                     f"subfolder per class")


def data_classes(data) -> list[str]:
    """The class names of ``data`` (a name in ``DATASETS`` or a folder of class subfolders),
    read without loading any image: the trainer builds the model for them before the data."""
    data = check_data(data)
    if data in DATASETS:
        return [str(d) for d in range(10)]
    split = _split_folders(Path(data))
    return sorted(entry.name for entry in os.scandir(split["train"] if split else data)
                  if entry.is_dir())


def make_datasets(data, model, test_fraction: float = 0.2, seed: int = 0, *,
                  val_fraction: float | None = None, bad_images: str = "error",
                  augment: ModelTransform | None = None):
    """``data`` (a name in ``DATASETS`` or a folder of class subfolders) -> ``(train, test)``
    PyTorch datasets of ``(image, label)``, or ``(train, val, test)`` with ``val_fraction``:
    images shaped for ``model`` (a model, a registered name or a ``pretrained_cfg``); all have
    ``.classes``.  ``seed`` fixes the test and the validation split.  ``bad_images`` and
    ``augment`` (a :class:`ModelTransform` with augmentation) apply to folders of pictures
    (:func:`image_folder_datasets`)."""
    data = check_data(data)
    if data in DATASETS:
        if augment is not None and augment.augments:
            raise ValueError(f"--flip, --crop-scale and --color-jitter augment folders of "
                             f"pictures; for {data!r} use --rotate, --translate and --scale")
        if data == "digits_in_clutter":
            splits = clutter_datasets(model, test_fraction, seed)
        else:
            splits = (digits_datasets if data == "digits" else canvas_datasets)(
                model, test_fraction, seed)
        if val_fraction is None:
            return splits
        return (*validation_split(splits[0], val_fraction, seed), splits[1])
    return image_folder_datasets(data, model, test_fraction, seed, val_fraction=val_fraction,
                                 bad_images=bad_images, augment=augment)
