"""Augmentation: the random affine of a batch (written by hand), the photo augmentations of
a folder's pictures (torchvision's transforms v2, infrastructure) in :class:`ModelTransform`,
and the seeds of both, drawn for each picture from ``(seed, epoch, index)`` -- never from the
process that loads it, so that a run under torchrun augments every picture as one process does
(:class:`SeededSamples`, :func:`affine_draws`).
"""
from __future__ import annotations

import math

import numpy as np

from .preprocessing import (_interpolation, picture_for_model, picture_to_input, resize_and_crop,
                            resolve_pretrained_cfg)


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
    from ..extras import require

    return require("torchvision.transforms.v2", "augmenting pictures (--flip, --crop-scale, "
                                                "--color-jitter)")


def random_affine(images, rotate: float, translate: float, scale: float, gen=None, draws=None):
    """Rotate by U(-rotate, rotate) degrees, zoom by U(1 - scale, 1 + scale) and shift by
    U(-translate, translate) of the image side, one draw per image; bilinear, edges repeated.

    images (B, C, H, W) tensor -> (B, C, H, W).  The random numbers come from ``gen`` (a
    ``torch.Generator`` on the CPU, so a run is the same on every device), or are given:
    ``draws`` (B, 4), uniform in [0, 1), one row per image (the trainer's: :func:`affine_draws`,
    seeded by each image's index).  Written by hand: a batched affine resampling is two lines of
    PyTorch (``affine``)."""
    import torch

    if rotate == 0 and translate == 0 and scale == 0:
        return images
    B = images.shape[0]
    if draws is None:
        draws = torch.rand(B, 4, generator=gen, dtype=torch.float32)
    u = torch.as_tensor(draws, dtype=torch.float32) * 2 - 1  # (B, 4) in [-1, 1)
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


def sample_rng(seed: int, epoch: int, index: int, stream: int) -> np.random.Generator:
    """The random stream ``stream`` of one picture in one epoch: NumPy's generator seeded by
    ``SeedSequence([seed, epoch, index, stream])`` (0: the picture's transforms, 1: the batch
    affine)."""
    return np.random.default_rng([seed, epoch, index, stream])


def affine_draws(seed: int, epoch: int, indices) -> np.ndarray:
    """The ``draws`` of :func:`random_affine` for the pictures ``indices`` of a batch: (B, 4)
    float32, each row from the picture's own stream."""
    return np.stack([sample_rng(seed, epoch, int(i), 1).random(4, dtype=np.float32)
                     for i in np.asarray(indices).ravel()]) if len(indices) else \
        np.zeros((0, 4), np.float32)


class SeededSamples:
    """A training dataset of ``(image, label)`` read by key ``(epoch, index, counted)`` (the
    keys ``vit_scratch.distributed.BatchShares`` yields): returns ``(image, label, index,
    counted)``, the picture's transforms (``ModelTransform``'s random crop, flip and jitter,
    which draw from PyTorch's global generator) seeded by ``(seed, epoch, index)`` inside a
    forked generator.  Any process -- a DataLoader worker, a torchrun rank -- then augments a
    picture the same way.  Plain attributes, so it pickles for ``spawn`` workers."""

    def __init__(self, dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        import torch

        epoch, index, counted = key
        stream = sample_rng(self.seed, epoch, index, 0)
        with torch.random.fork_rng(devices=[]):  # the CPU generator (torch.manual_seed would
            torch.default_generator.manual_seed(int(stream.integers(2 ** 63)))  # seed GPUs too)
            image, label = self.dataset[index]
        return image, label, index, counted
