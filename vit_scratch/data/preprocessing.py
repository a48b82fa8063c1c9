"""Preprocessing that follows the model: a picture or an array shaped, scaled and normalised as
the model's ``pretrained_cfg`` says (``input_size``, ``mean``, ``std``, ``crop_pct``,
``interpolation``), and the sample photo that ships with matplotlib.

Normalisation has no default on purpose: each checkpoint expects the mean and std it was trained
with, and they differ (timm's ``vit_*`` weights: mean = std = 0.5; ``deit_*``, ``cait_*``,
``coat_*``: ImageNet's).  ``normalize(images, model)`` and ``preprocess(image, model)`` read
them from the model's ``pretrained_cfg``; wherever a function takes ``model``, a model, its
registered name or its ``pretrained_cfg`` dict will do.

Written by hand: ``preprocess`` is timm's evaluation transform (tested equal).
"""
from __future__ import annotations

import math

import numpy as np

from .. import validation
from ..specs.base import IMAGENET_DEFAULT_MEAN as IMAGENET_MEAN  # noqa: F401  (DeiT/CaiT/CoaT)
from ..specs.base import IMAGENET_DEFAULT_STD as IMAGENET_STD  # noqa: F401


def resolve_pretrained_cfg(model) -> dict:
    """``model``: a model, a registered name or a ``pretrained_cfg`` dict -> the
    ``pretrained_cfg`` dict (what the model's input must look like)."""
    if isinstance(model, dict):
        return model
    if isinstance(model, str):
        from ..models import get_pretrained_cfg

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

    from ..extras import require

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


def to_model_input(images: np.ndarray, model):
    """Images (N, C, H, W) float in [0, 1] -> a float32 tensor shaped and normalised as the
    model expects: resized to its ``input_size`` (its ``interpolation``; antialiased when
    shrinking), grey repeated to 3 channels or RGB averaged to grey, then ``normalize``.

    model: a model, a registered name or a ``pretrained_cfg``."""
    import torch

    pcfg = resolve_pretrained_cfg(model)
    x = torch.as_tensor(np.asarray(images, dtype=np.float32))
    if x.ndim != 4:
        raise ValueError(f"images must have shape (N, C, H, W), got shape {tuple(x.shape)}")
    return torch.from_numpy(normalize(fit_input_size(x, pcfg).numpy(), pcfg))


def fit_input_size(x, pcfg: dict):
    """A float tensor of pictures (N, C, H, W) in [0, 1], on any device -> the size and channels
    of ``pcfg["input_size"]``: resized with its ``interpolation`` (antialiased when shrinking)
    and clamped to [0, 1], grey repeated to 3 channels or RGB averaged to grey.  Not normalised
    (:func:`to_model_input` is this, then ``normalize``)."""
    import torch.nn.functional as F

    chans, height, width = pcfg["input_size"]
    if tuple(x.shape[-2:]) != (height, width):
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
    return x
