"""Offline data: pictures that ship with matplotlib, training sets, preprocessing that follows
the model, and the augmentation of a batch.

Nothing here downloads anything.  ``sample_image()`` is Grace Hopper's portrait from
matplotlib's bundled sample data, center-cropped and resized to the size a ViT expects.

Training data (``make_datasets(name, model)`` -> a train and a test PyTorch dataset of
``(image, label)`` pairs, images already shaped for the model; with ``val_fraction`` also a
validation set between them):

    "digits"            scikit-learn's bundled 8×8 handwritten digits (``load_digits``)
    "digits_on_canvas"  the localisation set: each digit at a random place on a larger noisy
                        canvas, its box recorded (``digits_on_canvas``)
    a folder            your own pictures, one subfolder per class (torchvision's
                        ``ImageFolder``; ``train/``, ``val/``, ``test/`` subfolders are the split)

The data follows the model: images are resized to the model's ``input_size``, turned into its
number of channels and normalised with its mean and std (all from its ``pretrained_cfg``); the
trainer then gives the model as many classes as the data has.  Wherever a function takes
``model``, a model, its registered name or its ``pretrained_cfg`` dict will do.

Normalisation has no default on purpose: each checkpoint expects the mean and std it was trained
with, and they differ (timm's ``vit_*`` weights: mean = std = 0.5; ``deit_*``, ``cait_*``,
``coat_*``: ImageNet's).  ``normalize(images, model)`` and ``preprocess(image, model)`` read
them from the model's ``pretrained_cfg``.

Which is which: the preprocessing (``preprocess``: timm's evaluation transform, tested equal),
the test split (``stratified_split``) and the batch augmentation (``random_affine``) are written
by hand; the folders (``ImageFolder``), the photo augmentations (transforms v2) and the
validation split (``train_test_split``) are torchvision's and scikit-learn's.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from . import validation
from .specs.base import IMAGENET_DEFAULT_MEAN as IMAGENET_MEAN  # noqa: F401  (DeiT/CaiT/CoaT)
from .specs.base import IMAGENET_DEFAULT_STD as IMAGENET_STD  # noqa: F401


def resolve_pretrained_cfg(model) -> dict:
    """``model``: a model, a registered name or a ``pretrained_cfg`` dict -> the
    ``pretrained_cfg`` dict (what the model's input must look like)."""
    if isinstance(model, dict):
        return model
    if isinstance(model, str):
        from .models import get_pretrained_cfg

        return get_pretrained_cfg(model)
    pcfg = getattr(model, "pretrained_cfg", None)
    if isinstance(pcfg, dict) and pcfg:
        return pcfg
    raise ValueError(
        f"expected a model (with a pretrained_cfg), a model name or a pretrained_cfg dict, got "
        f"{type(model).__name__}; build models with vit_scratch.create_model to get one"
    )


def sample_image(size=224, name: str = "grace_hopper.jpg") -> np.ndarray:
    """A real photo as float32 (3, H, W) in [0, 1]; ``size`` is an int or (H, W).

    The largest centred crop with the target aspect ratio is resized with bicubic filtering.
    """
    from PIL import Image

    from .extras import require

    cbook = require("matplotlib.cbook", "the sample photo (matplotlib's bundled pictures)")
    height, width = validation.to_2tuple(size, "size")
    img = Image.open(cbook.get_sample_data(name, asfileobj=False)).convert("RGB")
    w, h = img.size
    scale = min(w / width, h / height)
    cw, ch = round(width * scale), round(height * scale)
    left, top = (w - cw) // 2, (h - ch) // 2
    img = img.crop((left, top, left + cw, top + ch)).resize((width, height), Image.BICUBIC)
    return np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0  # (3, H, W)


def normalize(images: np.ndarray, model=None, *, mean=None, std=None) -> np.ndarray:
    """(x - mean) / std per channel, for (C, H, W) or (B, C, H, W) arrays in [0, 1].

    The mean and std are the model's: pass the model, its registered name or its
    ``pretrained_cfg`` as ``model`` (``normalize(img, model)``), or give ``mean=`` and ``std=``.
    There is no default: timm's ``vit_*`` weights expect mean = std = 0.5, ``deit_*`` ImageNet's
    (0.485, 0.456, 0.406) / (0.229, 0.224, 0.225), and the wrong pair costs accuracy silently.
    """
    if model is not None:
        if mean is not None or std is not None:
            raise ValueError("pass either model or mean= and std=, not both")
        pcfg = resolve_pretrained_cfg(model)
        mean, std = pcfg["mean"], pcfg["std"]
    elif mean is None or std is None:
        raise ValueError(
            "normalize needs the model's mean and std: normalize(images, model) or "
            "normalize(images, mean=..., std=...) (vit_* weights use 0.5/0.5, deit_* ImageNet's)"
        )
    images = np.asarray(images)
    if images.dtype.kind not in "f":  # uint8 0-255 would come out ~400: refuse it, as the models do
        validation.check_image_dtype(images.dtype)
    images = images.astype(np.float32, copy=False)
    shape = (-1, 1, 1)
    mean = np.reshape(np.asarray(mean, dtype=np.float32), shape)
    std = np.reshape(np.asarray(std, dtype=np.float32), shape)
    chans = images.shape[-3] if images.ndim >= 3 else None
    for name, value in (("mean", mean), ("std", std)):
        if chans is not None and value.shape[0] not in (1, chans):
            raise ValueError(f"images have {chans} channels but {name} has {value.shape[0]} "
                             f"entries")
    if not (np.isfinite(std).all() and (std > 0).all()):
        raise ValueError(f"std must be positive and finite, got {std.ravel().tolist()}")
    return (images - mean) / std


#: PIL modes of pictures with more than 8 bits per pixel (16-bit greyscale PNG, TIFF).
WIDE_MODES = {"I;16": 65535.0, "I;16B": 65535.0, "I;16L": 65535.0, "I;16N": 65535.0,
              "I": 65535.0}


def _interpolation(pcfg: dict):
    from PIL import Image

    return {"bicubic": Image.BICUBIC, "bilinear": Image.BILINEAR,
            "nearest": Image.NEAREST}[pcfg.get("interpolation", "bicubic")]


def picture_for_model(image, chans: int):
    """A PIL image in the mode the model's channels need: ``"L"`` or ``"RGB"``, or for a
    picture with more than 8 bits per pixel (a 16-bit greyscale PNG), ``"F"`` scaled to
    [0, 1] -- not clipped at 255 as ``convert("L")`` would."""
    from PIL import Image

    if not isinstance(image, Image.Image):
        array = np.asarray(image)
        if array.dtype not in (np.uint8, np.uint16):
            raise ValueError(f"preprocess takes a PIL image or a uint8 (H, W[, C]) array, got "
                             f"dtype {array.dtype}; for floats in [0, 1] use normalize")
        image = Image.fromarray(array)
    if image.mode in WIDE_MODES:
        return Image.fromarray(np.asarray(image, dtype=np.float32) / WIDE_MODES[image.mode],
                               mode="F")
    return image.convert("L" if chans == 1 else "RGB")


def resize_and_crop(image, model):
    """timm's evaluation geometry on a PIL image: the shorter side resized to
    ``input_size / crop_pct`` (``interpolation``), then the centre ``input_size`` cut out."""
    pcfg = resolve_pretrained_cfg(model)
    _, height, width = pcfg["input_size"]
    crop_pct = pcfg.get("crop_pct", 1.0)
    w, h = image.size
    if height == width:  # shorter side to floor(size / crop_pct), aspect ratio kept (torchvision)
        short = math.floor(height / crop_pct)
        new = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
    else:
        new = (math.floor(width / crop_pct), math.floor(height / crop_pct))
    image = image.resize(new, _interpolation(pcfg))
    left, top = int(round((new[0] - width) / 2.0)), int(round((new[1] - height) / 2.0))
    return image.crop((left, top, left + width, top + height))


def picture_to_input(image, model) -> np.ndarray:
    """A PIL image of the model's input size -> float32 (C, H, W): scaled to [0, 1] (8-bit
    pictures / 255; ``"F"`` pictures are already), grey repeated to the model's channels,
    normalised with its mean and std."""
    pcfg = resolve_pretrained_cfg(model)
    chans = pcfg["input_size"][0]
    array = np.asarray(image, dtype=np.float32)
    if image.mode != "F":
        array = array / 255.0
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    if array.shape[0] != chans:
        array = np.repeat(array, chans, axis=0)
    return normalize(array, pcfg)


def preprocess(image, model) -> np.ndarray:
    """timm's evaluation transform, in NumPy/PIL: resize the shorter side to
    ``input_size / crop_pct`` (``interpolation``), center-crop ``input_size``, scale to [0, 1],
    normalise with the model's mean and std.

    image: a PIL image, or an (H, W, C) / (H, W) uint8 array (a uint16 (H, W) array, like a
    16-bit PNG, keeps its 16 bits).  model: a model, a registered name or a
    ``pretrained_cfg``.  Returns float32 (C, H, W), ready to stack into a batch.
    """
    pcfg = resolve_pretrained_cfg(model)
    image = picture_for_model(image, pcfg["input_size"][0])
    return picture_to_input(resize_and_crop(image, pcfg), pcfg)


def stratified_split(labels: np.ndarray, test_fraction: float = 0.2, seed: int = 0) -> np.ndarray:
    """A boolean mask (N,) that is True for the test items: ``round(test_fraction · n_c)`` of each
    class c, drawn at random (fixed by ``seed``), so every class is split in the same proportion."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    test = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        test[idx[: round(test_fraction * len(idx))]] = True
    return test


def load_digits(test_fraction: float = 0.2, seed: int = 0):
    """scikit-learn's bundled handwritten digits (1,797 images, 8×8, grey, 10 classes).

    Returns ``(x_train, y_train, x_test, y_test)``: images float32 (N, 1, 8, 8) in [0, 1],
    labels int64 (N,).  The split is stratified (each class split in the same proportion) and
    fixed by ``seed``.  Bundled with scikit-learn, so it works offline.
    """
    from .extras import require

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


# --- PyTorch datasets for the trainer ---------------------------------------------------------

#: The built-in data sets ``make_datasets`` (and ``python -m vit_scratch.train --data``) know.
DATASETS = {
    "digits": "scikit-learn's 1,797 handwritten digits (8×8, grey, 10 classes), resized to the "
              "model's input",
    "digits_on_canvas": "the localisation set: each digit at a random place on a noisy canvas "
                        "of the model's input size (boxes in dataset.boxes)",
    # the clutter world (vit_scratch.clutter): one digit, a fainter distractor digit, noise
    "digits_in_clutter": "8,000 training and 2,000 test canvases of the model's input size, "
                         "each with a digit, a fainter digit of another class and noise "
                         "(vit_scratch.clutter; boxes in dataset.boxes)",
}


def to_model_input(images: np.ndarray, model):
    """Images (N, C, H, W) float in [0, 1] -> a float32 tensor shaped and normalised as the
    model expects: resized to its ``input_size`` (its ``interpolation``; antialiased when
    shrinking), grey repeated to 3 channels or RGB averaged to grey, then ``normalize``.

    model: a model, a registered name or a ``pretrained_cfg``."""
    import torch
    import torch.nn.functional as F

    pcfg = resolve_pretrained_cfg(model)
    chans, height, width = pcfg["input_size"]
    x = torch.as_tensor(np.asarray(images, dtype=np.float32))
    if x.ndim != 4:
        raise ValueError(f"images must have shape (N, C, H, W), got shape {tuple(x.shape)}")
    if x.shape[-2:] != (height, width):
        mode = pcfg.get("interpolation", "bilinear")
        shrink = x.shape[-2] > height or x.shape[-1] > width
        x = F.interpolate(x, size=(height, width), mode=mode,
                          align_corners=None if mode == "nearest" else False,
                          antialias=shrink and mode != "nearest").clamp_(0.0, 1.0)
    if x.shape[1] != chans:
        if x.shape[1] == 1:
            x = x.expand(-1, chans, -1, -1)
        elif chans == 1:
            x = x.mean(dim=1, keepdim=True)
        else:
            raise ValueError(f"cannot turn {x.shape[1]}-channel images into {chans} channels")
    return torch.from_numpy(normalize(x.numpy(), pcfg))


def _tensor_dataset(images, labels, classes, **attributes):
    import torch
    from torch.utils.data import TensorDataset

    dataset = TensorDataset(images, torch.as_tensor(labels, dtype=torch.int64))
    if classes is not None:
        dataset.classes = list(classes)
    for key, value in attributes.items():
        setattr(dataset, key, value)
    return dataset


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


# --- folders of pictures ---------------------------------------------------------------------

def _decode(path):
    from PIL import Image

    with open(path, "rb") as f:
        image = Image.open(f)
        image.load()
    return image


def _decode_errors():
    from PIL import Image

    return OSError, SyntaxError, ValueError, Image.DecompressionBombError


def open_picture(path):
    """A picture file -> a PIL image, fully decoded now (a truncated or damaged file fails
    here, with a ``ValueError`` naming the file), in its own mode (16-bit greyscale stays
    16-bit).  The loader of the trainer's image folders."""
    try:
        return _decode(path)
    except _decode_errors() as error:
        raise ValueError(f"picture {str(path)!r} cannot be decoded: {error}") from None


def unreadable_pictures(paths) -> list[tuple[str, str]]:
    """``(path, reason)`` for every file of ``paths`` that does not decode as a picture."""
    bad = []
    for path in paths:
        try:
            _decode(path)
        except _decode_errors() as error:
            bad.append((str(path), str(error) or type(error).__name__))
    return bad


class ModelTransform:
    """A picture (PIL image) -> the model's input, a float32 tensor (C, H, W).

    Without augmentation it is :func:`preprocess` (timm's evaluation transform).  For training
    on photos, optional augmentations from torchvision's transforms v2 (not written by hand):
    ``crop_scale`` -- ``RandomResizedCrop`` to the input size, keeping a random share in
    [crop_scale, 1] of the picture's area instead of the centre crop; ``flip`` --
    ``RandomHorizontalFlip``; ``color_jitter`` -- ``ColorJitter`` of brightness, contrast and
    (RGB) saturation by up to that factor.

    A plain object of plain attributes, so it pickles: ``DataLoader`` workers started with
    ``spawn`` (the default on macOS and Windows) can use it."""

    def __init__(self, model, flip: bool = False, crop_scale: float = 0.0,
                 color_jitter: float = 0.0):
        self.pretrained_cfg = dict(resolve_pretrained_cfg(model))
        self.flip, self.crop_scale, self.color_jitter = bool(flip), crop_scale, color_jitter

    @property
    def augments(self) -> bool:
        return self.flip or self.crop_scale > 0 or self.color_jitter > 0

    def __call__(self, image):
        import torch

        pcfg = self.pretrained_cfg
        chans, height, width = pcfg["input_size"]
        image = picture_for_model(image, chans)
        if not self.augments:
            return torch.from_numpy(picture_to_input(resize_and_crop(image, pcfg), pcfg))
        v2 = _transforms_v2()
        if image.mode == "F":  # the colour transforms take 8-bit pictures
            from PIL import Image

            image = Image.fromarray(np.round(np.asarray(image) * 255).astype(np.uint8), "L")
            image = image.convert("L" if chans == 1 else "RGB")
        if self.crop_scale > 0:
            image = v2.RandomResizedCrop((height, width), scale=(self.crop_scale, 1.0),
                                         interpolation=_interpolation(pcfg), antialias=True)(image)
        else:
            image = resize_and_crop(image, pcfg)
        if self.flip:
            image = v2.RandomHorizontalFlip()(image)
        if self.color_jitter > 0:
            j = self.color_jitter
            image = v2.ColorJitter(brightness=j, contrast=j,
                                   saturation=j if chans == 3 else None)(image)
        return torch.from_numpy(picture_to_input(image, pcfg))


def _transforms_v2():
    from .extras import require

    return require("torchvision.transforms.v2", "augmenting pictures (--flip, --crop-scale, "
                                                "--color-jitter)")


def _split_folders(root: Path):
    """``{"train": ..., "val": ..., "test": ...}`` for the split folders ``root`` holds (a
    ``val/`` folder without ``test/`` is the test split), or ``None`` without ``train/``."""
    if not (root / "train").is_dir():
        return None
    found = {name: root / name for name in ("train", "val", "test") if (root / name).is_dir()}
    if "test" not in found and "val" in found:
        found["test"] = found.pop("val")
    return found if "test" in found else None


def _image_folder(path: Path, transform, bad_images: str):
    """torchvision's ``ImageFolder`` of ``path`` with our loader; unreadable pictures refused
    or left out (with a warning naming them), as ``bad_images`` says."""
    import warnings

    from .extras import require

    image_folder = require("torchvision.datasets", "training on a folder of pictures").ImageFolder
    try:
        dataset = image_folder(str(path), transform=transform, loader=open_picture)
    except (FileNotFoundError, OSError) as error:
        raise ValueError(f"data folder {str(path)!r} holds no images in class subfolders "
                         f"(expected {path}/<class>/<image>.png, ...): {error}") from None
    if len(dataset.classes) < 2:
        raise ValueError(f"data folder {str(path)!r} has {len(dataset.classes)} class "
                         f"subfolder(s) with images; a classifier needs at least 2")
    bad = unreadable_pictures(p for p, _ in dataset.samples)
    if bad:
        listed = "; ".join(f"{p} ({reason})" for p, reason in bad[:10])
        more = f"; and {len(bad) - 10} more" if len(bad) > 10 else ""
        if bad_images == "error":
            raise ValueError(f"{len(bad)} picture(s) in {str(path)!r} cannot be decoded: "
                             f"{listed}{more}. Remove or repair them, or pass --bad-images skip "
                             f"to train without them")
        warnings.warn(f"left out {len(bad)} picture(s) of {str(path)!r} that cannot be decoded: "
                      f"{listed}{more}", stacklevel=3)
        skipped = {p for p, _ in bad}
        dataset.samples = [s for s in dataset.samples if s[0] not in skipped]
        dataset.imgs, dataset.targets = dataset.samples, [t for _, t in dataset.samples]
    return dataset


def _with_transform(folder, transform):
    """The same ``ImageFolder`` (the same files, scanned once), read through ``transform``."""
    import copy

    if folder.transform is transform:
        return folder
    other = copy.copy(folder)
    other.transform = transform
    return other


def image_folder(root, model, bad_images: str = "error"):
    """Every picture of ``root`` (one subfolder per class) as one dataset, shaped for ``model``
    by :func:`preprocess` (no split, no augmentation): what ``python -m vit_scratch.evaluate
    --data DIR`` evaluates."""
    if bad_images not in ("skip", "error"):
        raise ValueError(f"bad_images must be 'skip' or 'error', got {bad_images!r}")
    return _image_folder(Path(root), ModelTransform(model), bad_images)


def _same_classes(datasets: dict) -> None:
    (first, a), *others = datasets.items()
    for name, b in others:
        if a.classes != b.classes:
            raise ValueError(f"{first} and {name} have different class folders: "
                             f"{a.classes} vs {b.classes}")


def image_folder_datasets(root, model, test_fraction: float = 0.2, seed: int = 0, *,
                          val_fraction: float | None = None, bad_images: str = "error",
                          augment: ModelTransform | None = None):
    """Your own pictures: a folder with one subfolder per class (torchvision's ``ImageFolder``).

    Returns ``(train, test)``, or ``(train, val, test)`` when ``val_fraction`` is given.  If
    ``root`` holds ``train/`` and ``test/`` folders (or ``train/`` and ``val/``, ImageNet's
    layout: then ``val/`` is the test split), those are the split, and ``train/``, ``val/``,
    ``test/`` are all three; otherwise ``test_fraction`` of each class is held out for testing
    (stratified, fixed by ``seed``) and ``val_fraction`` of each class of the rest for
    validation (:func:`validation_split`).  Every picture goes through
    :class:`ModelTransform` (:func:`preprocess`: resize, centre crop, normalise, as the model's
    ``pretrained_cfg`` says); the training split through ``augment`` if given.  Pictures that
    do not decode are refused before anything is trained (``bad_images="error"``) or left out
    with a warning (``"skip"``), named either way.  Every dataset has ``.classes`` (the folder
    names)."""
    from torch.utils.data import Subset

    if bad_images not in ("skip", "error"):
        raise ValueError(f"bad_images must be 'skip' or 'error', got {bad_images!r}")
    root = Path(root)
    plain = ModelTransform(model)
    train_transform = augment if augment is not None else plain
    split = _split_folders(root)
    if split is not None:
        parts = {name: _image_folder(path, train_transform if name == "train" else plain,
                                     bad_images) for name, path in split.items()}
        _same_classes({split[name]: d for name, d in parts.items()})
        if val_fraction is None:
            return parts["train"], parts["test"]
        if "val" in parts:
            return parts["train"], parts["val"], parts["test"]
        train, val = validation_split(parts["train"], val_fraction, seed,
                                      eval_dataset=_with_transform(parts["train"], plain))
        return train, val, parts["test"]
    full = _image_folder(root, plain, bad_images)
    is_test = stratified_split(np.asarray(full.targets), test_fraction, seed)
    if is_test.all() or not is_test.any():
        raise ValueError(f"data folder {str(root)!r} has too few images ({len(full)}) to split "
                         f"into train and test with test_fraction={test_fraction}")
    train = Subset(_with_transform(full, train_transform), np.flatnonzero(~is_test).tolist())
    test = Subset(full, np.flatnonzero(is_test).tolist())
    train.classes = test.classes = full.classes
    if val_fraction is None:
        return train, test
    train, val = validation_split(train, val_fraction, seed,
                                  eval_dataset=Subset(full, train.indices))
    return train, val, test


# --- the validation split ---------------------------------------------------------------------

def dataset_labels(dataset) -> np.ndarray:
    """The labels of a dataset of ``(image, label)``, read without loading images where the
    dataset keeps them (``TensorDataset``, ``ImageFolder``'s ``.targets``, a ``Subset``)."""
    from torch.utils.data import Subset, TensorDataset

    if isinstance(dataset, Subset):
        return dataset_labels(dataset.dataset)[np.asarray(dataset.indices, dtype=np.int64)]
    if isinstance(dataset, TensorDataset):
        return dataset.tensors[1].numpy()
    if getattr(dataset, "targets", None) is not None:
        return np.asarray(dataset.targets)
    return np.asarray([int(dataset[i][1]) for i in range(len(dataset))])


def validation_indices(labels, val_fraction: float, seed: int = 0,
                       classes=None) -> tuple[np.ndarray, np.ndarray]:
    """``(train_indices, val_indices)``: ``val_fraction`` of the items held out for validation,
    stratified (every class in the same proportion) by scikit-learn's ``train_test_split``,
    fixed by ``seed``.  A ``ValueError`` if the split leaves a class without a validation (or
    a training) item; ``classes`` names the classes in that message."""
    from .extras import require

    if not (isinstance(val_fraction, (int, float)) and 0.0 < val_fraction < 1.0):
        raise ValueError(f"--val-fraction must be in (0, 1), got {val_fraction!r}")
    labels = np.asarray(labels)
    present, counts = np.unique(labels, return_counts=True)

    def name(c):
        return repr(classes[c]) if classes is not None and c < len(classes) else repr(str(c))

    fewest = int(np.argmin(counts))
    if counts[fewest] < 2:
        raise ValueError(f"class {name(present[fewest])} has {counts[fewest]} training "
                         f"picture(s): a validation split needs at least 2 of every class (one "
                         f"to train on, one to validate)")
    train_test_split = require("sklearn.model_selection", "the validation split").train_test_split
    index = np.arange(len(labels))
    try:
        train, val = train_test_split(index, test_size=val_fraction, stratify=labels,
                                      random_state=seed)
    except ValueError as error:  # e.g. fewer validation items than classes
        raise ValueError(f"--val-fraction {val_fraction} of {len(labels)} training pictures in "
                         f"{len(present)} classes cannot hold every class ({error}); raise "
                         f"--val-fraction") from None
    for part, what in ((val, "validation"), (train, "training")):
        missing = sorted(set(present.tolist()) - set(labels[part].tolist()))
        if missing:
            raise ValueError(f"--val-fraction {val_fraction} leaves class "
                             f"{', '.join(name(c) for c in missing)} without a {what} picture "
                             f"({counts[np.searchsorted(present, missing[0])]} in all); "
                             f"{'raise' if what == 'validation' else 'lower'} --val-fraction "
                             f"or add pictures")
    return np.sort(train), np.sort(val)


def validation_split(dataset, val_fraction: float, seed: int = 0, eval_dataset=None):
    """``dataset`` -> ``(train, val)``, split by :func:`validation_indices`.  A
    ``TensorDataset`` gives two ``TensorDataset`` s; anything else two ``Subset`` s, the
    validation one of ``eval_dataset`` (the same items without augmentation) if given.  Both
    keep ``.classes``."""
    from torch.utils.data import Subset, TensorDataset

    classes = getattr(dataset, "classes", None)
    train_idx, val_idx = validation_indices(dataset_labels(dataset), val_fraction, seed, classes)
    if isinstance(dataset, TensorDataset) and eval_dataset is None:
        def part(idx):
            boxes = {"boxes": dataset.boxes[idx]} if hasattr(dataset, "boxes") else {}
            return _tensor_dataset(dataset.tensors[0][idx], dataset.tensors[1][idx], classes,
                                   **boxes)

        return part(train_idx), part(val_idx)
    train = Subset(dataset, train_idx.tolist())
    val = Subset(eval_dataset if eval_dataset is not None else dataset, val_idx.tolist())
    if classes is not None:
        train.classes = val.classes = list(classes)
    return train, val


# --- augmentation of a batch ----------------------------------------------------------------

def random_affine(images, rotate: float, translate: float, scale: float, gen):
    """Rotate by U(-rotate, rotate) degrees, zoom by U(1 - scale, 1 + scale) and shift by
    U(-translate, translate) of the image side, one draw per image; bilinear, edges repeated.

    images (B, C, H, W) tensor -> (B, C, H, W).  The random numbers come from ``gen`` (a
    ``torch.Generator`` on the CPU, so a run is the same on every device).  Written by hand:
    a batched affine resampling is two lines of PyTorch (``affine``)."""
    import torch

    if rotate == 0 and translate == 0 and scale == 0:
        return images
    B = images.shape[0]
    u = torch.rand(B, 4, generator=gen, dtype=torch.float32) * 2 - 1  # (B, 4) in [-1, 1)
    angle = u[:, 0] * math.radians(rotate)
    zoom = 1 + u[:, 1] * scale
    shift = u[:, 2:] * translate * 2  # affine_grid's coordinates span 2 per image side
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1),
                         torch.stack([sin, cos, shift[:, 1]], 1)], 1)  # (B, 2, 3)
    return affine(images, theta.to(images.device, images.dtype))


def affine(images, theta):
    """Resample ``images`` (B, C, H, W) at the affine map ``theta`` (B, 2, 3) of output to input
    coordinates (``F.affine_grid``'s convention, [-1, 1] over the image); edges repeated."""
    import torch.nn.functional as F

    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border",
                         align_corners=False)


# --- choosing the data ------------------------------------------------------------------------

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
        if data == "digits_in_clutter":  # the clutter world (vit_scratch.clutter)
            from .clutter import trainer_splits

            size = resolve_pretrained_cfg(model)["input_size"][-1]
            splits = tuple(_tensor_dataset(to_model_input(x, model), y, [str(d) for d in range(10)],
                                           boxes=b)
                           for x, y, b in trainer_splits(size, test_fraction, seed))
        else:
            splits = (digits_datasets if data == "digits" else canvas_datasets)(
                model, test_fraction, seed)
        if val_fraction is None:
            return splits
        return (*validation_split(splits[0], val_fraction, seed), splits[1])
    return image_folder_datasets(data, model, test_fraction, seed, val_fraction=val_fraction,
                                 bad_images=bad_images, augment=augment)
