"""A student's small folder, generated: digits drawn in random colours on random backgrounds, a
few hundred pictures of 32 to 48 pixels a side, in mixed formats.

    make_digit_pictures(root)        # root/<digit name>/<n>.<png|jpg|bmp|webp|tif|ppm>

Each digit is written with the font that ships with Pillow (``ImageFont.load_default``), its
strokes thickened by 0 to 3 pixels at a 64-pixel size, scaled to 60-90% of the picture's shorter
side, turned by up to ±10°, shifted by up to 3% of the side, and drawn in one random colour over
a background of another random colour with a gentle gradient and a little noise; the two colours
differ in brightness by at least 60 of 255 (either way round: light on dark or dark on light).
Each picture's width and height are drawn in [32, 48], and its format among PNG (RGB, RGBA or
grey), JPEG, BMP, WebP, TIFF and PPM.  An RBF support-vector machine on the grey pixels (32 × 32)
tells the four classes apart about 85% of the time, a logistic regression about 35%.

Used by the tests (tests/test_small_folder.py, tests/test_readme.py) and by
benchmarks/bench_small_folder.py, which measures the trainer's small-folder recipe on it.
Deterministic for a given ``seed``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

#: The formats the pictures are written in, in turn (ImageFolder reads all of them).
FORMATS = ("png", "jpg", "bmp", "webp", "tif", "ppm", "png-rgba", "png-grey", "jpg")
NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


_GLYPHS: dict = {}


def glyph(digit: int, stroke: int) -> np.ndarray:
    """The digit written in Pillow's bundled font at 64 pixels, strokes ``stroke`` pixels
    thicker, cut to its box and centred in a square: (side, side) in [0, 1]."""
    from PIL import Image, ImageDraw, ImageFont

    if (digit, stroke) not in _GLYPHS:
        font = ImageFont.load_default(size=64)
        image = Image.new("L", (96, 96), 0)
        ImageDraw.Draw(image).text((48, 48), str(digit), font=font, fill=255, anchor="mm",
                                   stroke_width=stroke, stroke_fill=255)
        image = image.crop(image.getbbox())
        side = max(image.size)
        square = Image.new("L", (side, side), 0)
        square.paste(image, ((side - image.width) // 2, (side - image.height) // 2))
        _GLYPHS[digit, stroke] = np.asarray(square, dtype=np.float64) / 255.0
    return _GLYPHS[digit, stroke]


def _colours(rng) -> tuple[np.ndarray, np.ndarray]:
    """A foreground and a background colour (RGB in [0, 255]) whose brightness differs by at
    least 60."""
    weights = np.array([0.299, 0.587, 0.114])
    while True:
        fg, bg = rng.uniform(0, 255, (2, 3))
        if abs(float(fg @ weights - bg @ weights)) >= 60:
            return fg, bg


def draw_digit(glyph: np.ndarray, width: int, height: int, rng) -> np.ndarray:
    """One picture: ``glyph`` (side, side) in [0, 1] drawn as the module docstring says ->
    uint8 (height, width, 3)."""
    from PIL import Image

    side = min(width, height)
    size = max(8, int(round(side * rng.uniform(0.6, 0.9))))
    ink = Image.fromarray(np.round(glyph * 255).astype(np.uint8), "L").resize(
        (size, size), Image.BILINEAR)
    ink = ink.rotate(float(rng.uniform(-10, 10)), resample=Image.BILINEAR, expand=True)
    canvas = Image.new("L", (width, height), 0)
    dx, dy = (rng.uniform(-0.03, 0.03, 2) * side).round().astype(int)
    canvas.paste(ink, ((width - ink.width) // 2 + dx, (height - ink.height) // 2 + dy))
    alpha = np.asarray(canvas, dtype=np.float64)[..., None] / 255.0  # (H, W, 1)
    fg, bg = _colours(rng)
    ramp = np.linspace(-1, 1, width)[None, :, None] * rng.uniform(-20, 20, 3)  # (1, W, 3)
    background = np.clip(bg + ramp + rng.normal(0, 6, (height, width, 3)), 0, 255)
    return np.clip(alpha * fg + (1 - alpha) * background, 0, 255).round().astype(np.uint8)


def save_picture(pixels: np.ndarray, path_stem: Path, fmt: str) -> Path:
    """``pixels`` (H, W, 3) uint8 saved as ``fmt`` (one of :data:`FORMATS`)."""
    from PIL import Image

    image = Image.fromarray(pixels, "RGB")
    if fmt == "png-rgba":
        image.putalpha(255)
        fmt = "png"
    elif fmt == "png-grey":
        image = image.convert("L")
        fmt = "png"
    path = path_stem.with_suffix("." + fmt)
    options = {"quality": 90} if fmt in ("jpg", "webp") else {}
    image.save(path, **options)
    return path


def make_digit_pictures(root, classes: int = 4, per_class: int = 90, seed: int = 0,
                        sizes: tuple[int, int] = (32, 48)) -> Path:
    """``classes`` folders (the digits 0, 1, ... by name) of ``per_class`` pictures each under
    ``root``; returns ``root``."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    n = 0
    for digit in range(classes):
        folder = root / NAMES[digit]
        folder.mkdir(parents=True, exist_ok=True)
        for j in range(per_class):
            width, height = rng.integers(sizes[0], sizes[1] + 1, 2)
            pixels = draw_digit(glyph(digit, int(rng.integers(0, 4))), int(width), int(height),
                                rng)
            save_picture(pixels, folder / f"{j:03d}", FORMATS[n % len(FORMATS)])
            n += 1
    return root
