"""Small folders like a student's, made offline: crops of photographs, crops of surface textures,
and drawn shapes -- a few hundred pictures of mixed sizes and formats, classes of unequal size.

    make_photo_pictures(root, "photos")     # root/<photograph>/<n>.<jpg|png>: five colour photos
    make_photo_pictures(root, "textures")   # four grey surfaces: brick, grass, gravel, the moon
    make_photo_pictures(root, "shapes")     # four drawn shapes in random colours

The photographs are the ones scikit-image ships in its wheel (``skimage.data``; the ``[test]``
extra installs it): a folder's class is the photograph a picture was cut from.

* **photos**: ``astronaut`` (Eileen Collins, NASA), ``coffee`` (a coffee cup, Rachel
  Michetti), ``chelsea`` (a cat, Stefan van der Walt), ``rocket`` (DSCOVR's launch on a Falcon 9,
  SpaceX), ``hubble`` (the Hubble eXtreme Deep Field, NASA) -- colour photographs of 300 to 1000
  pixels a side.
* **textures**: ``brick``, ``grass``, ``gravel`` (CC0 photographs of surfaces, greyscale) and
  ``moon`` (the lunar surface, grey and of low contrast), 512 × 512 each.

Each picture is a crop at a random place of the photograph, one side drawn in [40, 300] (at
most the photograph's side) and the other within 1.5 times it, sometimes shrunk by up to half,
so the same surface comes at several scales.  **shapes** are a circle, a square, a triangle and
a star filled with one random colour over a background of another (brightness differing by at
least 60 of 255), turned at random, 30-80% of the picture's side, on pictures of 40 to 160
pixels.

Formats alternate between JPEG (quality 75-95), PNG, PNG with an alpha channel and greyscale
PNG, so a colour photograph sometimes arrives grey.  Classes have unequal sizes (:data:`FOLDERS`
gives them).  Deterministic for a given ``seed``.  Used by benchmarks/bench_small_folder.py and
the tests (tests/test_readme.py, tests/test_small_folder.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from digit_pictures import save_picture

#: folder kind -> its classes and how many pictures each has.
FOLDERS = {
    "photos": {"astronaut": 85, "coffee": 75, "chelsea": 65, "rocket": 55, "hubble": 45},
    "textures": {"brick": 90, "grass": 75, "gravel": 65, "moon": 55},
    "shapes": {"circle": 90, "square": 75, "triangle": 65, "star": 55},
}
#: The formats pictures are written in, in turn.
FORMATS = ("jpg", "png", "jpg", "png-rgba", "png-grey", "jpg")
#: The side of a crop, in pixels of the photograph, and of a drawn shape's picture.
CROP_SIDES = (40, 300)
SHAPE_SIDES = (40, 160)
_SKIMAGE = {"hubble": "hubble_deep_field"}


def photograph(name: str) -> np.ndarray:
    """The photograph of scikit-image named ``name`` (``hubble``: the Hubble deep field), as
    uint8 (H, W, 3)."""
    try:
        from skimage import data
    except ImportError:  # pragma: no cover - the [test] extra installs it
        raise ModuleNotFoundError("the photo folders need scikit-image's bundled photographs: "
                                  "pip install scikit-image (the [test] extra has it)") from None
    pixels = getattr(data, _SKIMAGE.get(name, name))()
    if pixels.ndim == 2:
        pixels = np.repeat(pixels[..., None], 3, axis=-1)
    return np.ascontiguousarray(pixels[..., :3])


def picture_size(low: int, high: int, rng) -> tuple[int, int]:
    """``(height, width)``: a side drawn in [low, high], the other within 1.5 times it (and the
    same bounds)."""
    side = int(rng.integers(low, high + 1))
    other = int(np.clip(round(side * rng.uniform(2 / 3, 1.5)), low, high))
    return (side, other) if rng.random() < 0.5 else (other, side)


def crop(source: np.ndarray, rng) -> np.ndarray:
    """A crop of ``source`` (H, W, 3) at a random place, width and height in ``CROP_SIDES`` (at
    most the source's), shrunk by a factor in [0.5, 1] one time in three."""
    from PIL import Image

    height, width = source.shape[:2]
    h, w = picture_size(CROP_SIDES[0], min(CROP_SIDES[1], height, width), rng)
    top, left = int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1))
    piece = source[top:top + h, left:left + w]
    if rng.random() < 1 / 3:
        factor = rng.uniform(0.5, 1.0)
        size = (max(CROP_SIDES[0], round(w * factor)), max(CROP_SIDES[0], round(h * factor)))
        piece = np.asarray(Image.fromarray(piece).resize(size, Image.BILINEAR))
    return piece


def _colours(rng) -> tuple[np.ndarray, np.ndarray]:
    """A foreground and a background colour whose brightness differs by at least 60 of 255."""
    weights = np.array([0.299, 0.587, 0.114])
    while True:
        fg, bg = rng.uniform(0, 255, (2, 3))
        if abs(float(fg @ weights - bg @ weights)) >= 60:
            return fg, bg


def shape_outline(kind: str, centre, radius: float, angle: float) -> list[tuple[float, float]]:
    """The corners of ``kind`` (a square, triangle or star; a circle as 48 points) around
    ``centre``, ``radius`` to its farthest point, turned by ``angle`` radians."""
    corners = {"circle": 48, "square": 4, "triangle": 3, "star": 10}[kind]
    turns = angle + 2 * np.pi * np.arange(corners) / corners
    radii = np.full(corners, radius)
    if kind == "star":
        radii[1::2] *= 0.45
    xs, ys = centre[0] + radii * np.cos(turns), centre[1] + radii * np.sin(turns)
    return list(zip(xs.tolist(), ys.tolist()))


def draw_shape(kind: str, width: int, height: int, rng) -> np.ndarray:
    """One picture of ``kind``: uint8 (height, width, 3)."""
    from PIL import Image, ImageDraw

    side = min(width, height)
    radius = side * rng.uniform(0.3, 0.8) / 2
    centre = (width / 2 + rng.uniform(-0.1, 0.1) * side, height / 2 + rng.uniform(-0.1, 0.1) * side)
    mask = Image.new("L", (width, height), 0)
    ImageDraw.Draw(mask).polygon(shape_outline(kind, centre, radius, rng.uniform(0, 2 * np.pi)),
                                 fill=255)
    alpha = np.asarray(mask, dtype=np.float64)[..., None] / 255.0  # (H, W, 1)
    fg, bg = _colours(rng)
    ramp = np.linspace(-1, 1, width)[None, :, None] * rng.uniform(-20, 20, 3)  # (1, W, 3)
    background = bg + ramp + rng.normal(0, 6, (height, width, 3))
    return np.clip(alpha * fg + (1 - alpha) * background, 0, 255).round().astype(np.uint8)


def make_photo_pictures(root, kind: str = "photos", seed: int = 0, scale: float = 1.0,
                        counts: dict | None = None) -> Path:
    """The folder ``kind`` (one of :data:`FOLDERS`) under ``root``, each class with its count of
    pictures times ``scale`` (at least 3), or the classes and counts of ``counts`` (some of the
    kind's classes); returns ``root``."""
    if kind not in FOLDERS:
        raise ValueError(f"kind must be one of {', '.join(FOLDERS)}, got {kind!r}")
    counts = FOLDERS[kind] if counts is None else counts
    unknown = sorted(set(counts) - set(FOLDERS[kind]))
    if unknown:
        raise ValueError(f"counts names classes that {kind!r} does not have: {unknown}")
    root = Path(root)
    rng = np.random.default_rng([seed, list(FOLDERS).index(kind)])
    n = 0
    for name, count in counts.items():
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        source = photograph(name) if kind != "shapes" else None
        for j in range(max(3, round(count * scale))):
            if source is None:
                height, width = picture_size(*SHAPE_SIDES, rng)
                pixels = draw_shape(name, width, height, rng)
            else:
                pixels = crop(source, rng)
            fmt = FORMATS[n % len(FORMATS)]
            if fmt == "jpg":
                from PIL import Image

                path = (folder / f"{j:03d}").with_suffix(".jpg")
                Image.fromarray(pixels).save(path, quality=int(rng.integers(75, 96)))
            else:
                save_picture(pixels, folder / f"{j:03d}", fmt)
            n += 1
    return root
