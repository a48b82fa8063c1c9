"""Digits in clutter: offline image classification whose size and difficulty are parameters.

scikit-learn's 1,797 digits are too few and too easy to show what the papers claim (that a
transformer without a CNN's built-in bias needs more data, that attention finds the object).
This generator makes as many labelled canvases as asked from them, deterministically from a
seed, in well under a second per thousand on one CPU core:

* each canvas holds **one digit** (the label), placed uniformly at random, its box recorded;
* optionally **distractors**: whole digits of *other* classes, drawn fainter
  (``distractor_contrast``), never overlapping the true digit (their boxes are recorded too);
* optionally **clutter**: fragments (a quarter of a digit) of random digits, anywhere, at a
  random contrast -- strokes that belong to no digit;
* a background of uniform noise in [0, ``noise``], and a random rotation of each digit up to
  ``rotate`` degrees.

What makes it harder: a larger canvas (the digit is anywhere), more distractors and clutter, a
higher distractor contrast (at 1 the label is ambiguous), more noise and rotation.  What makes
it larger: ``n``.  The pool of source digits is scikit-learn's digits split once by class
(``pool="train"`` or ``"test"``, stratified, fixed by ``split_seed``), so that canvases made
for testing never show a digit that a training canvas shows, however many canvases are drawn.

    >>> world = digits_in_clutter(1000, canvas_size=16, distractors=1, seed=0)
    >>> world.images.shape, world.labels.shape, world.boxes.shape
    ((1000, 1, 16, 16), (1000,), (1000, 4))

:func:`leftmost_digit` makes the same kind of canvases for a task that position decides: two
digits of different classes, labelled by the one further left.

It is synthetic and small: 8×8 strokes enlarged by pixel repetition, one grey channel. It tests
what a model learns about *where* a small object is and what surrounds it, not photographs.
Written by hand with NumPy; scikit-learn supplies the digits and the stratified split.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import validation

#: The knobs and their defaults (``digits_in_clutter``'s keyword arguments).
DEFAULTS = dict(canvas_size=16, scale=1, distractors=0, distractor_contrast=0.5, clutter=0,
                noise=0.1, rotate=0.0, grid=1)


@dataclass
class Clutter:
    """Canvases and what is on them.  ``images`` float32 (N, 1, S, S) in [0, 1]; ``labels`` int64
    (N,); ``boxes`` int64 (N, 4): the true digit's (top, left, height, width) in pixels;
    ``distractor_boxes`` (N, D, 4) and ``distractor_labels`` (N, D) for the D distractors;
    ``settings``: the arguments that made it."""

    images: np.ndarray
    labels: np.ndarray
    boxes: np.ndarray
    distractor_boxes: np.ndarray
    distractor_labels: np.ndarray
    settings: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)


def digit_pool(pool: str = "train", test_fraction: float = 0.2, split_seed: int = 0):
    """The source digits: ``(images (N, 8, 8) float32 in [0, 1], labels (N,) int64)`` of
    scikit-learn's digits, the ``"train"`` or ``"test"`` part of a stratified split (scikit-learn's
    ``train_test_split``, fixed by ``split_seed``)."""
    from ..extras import require

    validation.check_choice(pool, "pool", ("train", "test"))
    _check_pool_split(test_fraction, split_seed)
    datasets = require("sklearn.datasets", "the digits (bundled with scikit-learn)")
    split = require("sklearn.model_selection", "the pool split").train_test_split
    digits = datasets.load_digits()
    index = np.arange(len(digits.target))
    train, test = split(index, test_size=test_fraction, stratify=digits.target,
                        random_state=split_seed)
    chosen = np.sort(train if pool == "train" else test)
    return (digits.images[chosen] / 16.0).astype(np.float32), digits.target[chosen].astype(np.int64)


def _check_canvas(n, canvas_size, scale, distractor_contrast, noise, rotate, grid, seed, pool,
                  test_fraction, split_seed):
    """The arguments both worlds share, checked (a ``ValueError`` naming the argument):
    ``(n, canvas size, digit side, grid, the places a digit's corner may go)``."""
    n = validation.check_int(n, "n", minimum=1)
    size = validation.check_int(canvas_size, "canvas_size", minimum=1)
    side = 8 * validation.check_int(scale, "scale", minimum=1)
    validation.check_float(distractor_contrast, "distractor_contrast", 0.0, 1.0)
    validation.check_float(noise, "noise", 0.0, 1.0)
    validation.check_float(rotate, "rotate", 0.0, 180.0)
    grid = validation.check_int(grid, "grid", minimum=1)
    validation.check_int(seed, "seed", minimum=0)
    validation.check_choice(pool, "pool", ("train", "test"))
    _check_pool_split(test_fraction, split_seed)
    if size < side:
        raise ValueError(f"canvas_size {size} is smaller than the digit ({side} pixels at "
                         f"scale={scale})")
    places = np.arange(0, size - side + 1, grid)  # where a digit's corner may go
    return n, size, side, grid, places


def _check_pool_split(test_fraction, split_seed) -> None:
    """The pool split's arguments: each pool needs digits of every class, so ``test_fraction``
    lies strictly between 0 and 1; ``split_seed`` is a seed, a non-negative int."""
    validation.check_float(test_fraction, "test_fraction", 0.0, 1.0, low_open=True,
                           high_open=True)
    validation.check_int(split_seed, "split_seed", minimum=0)


def digits_in_clutter(n: int, *, canvas_size: int = 16, scale: int = 1, distractors: int = 0,
                      distractor_contrast: float = 0.5, clutter: int = 0, noise: float = 0.1,
                      rotate: float = 0.0, grid: int = 1, pool: str = "train",
                      test_fraction: float = 0.2, split_seed: int = 0, seed: int = 0) -> Clutter:
    """``n`` canvases of ``canvas_size``² pixels, each with one digit of the label (enlarged
    ``scale`` times), ``distractors`` fainter digits of other classes, ``clutter`` digit
    fragments, and noise; see the module's docstring.  ``grid`` > 1 puts the digits' corners
    on multiples of ``grid`` pixels (a ViT's patch grid: every digit then covers whole patches,
    as it would if the patches followed the object).  The labels are balanced (each class
    ``n // 10`` or one more times) and shuffled.  Everything is fixed by ``seed`` (and the pool by
    ``pool``, ``test_fraction``, ``split_seed``): the same arguments give the same canvases."""
    n, size, side, grid, places = _check_canvas(n, canvas_size, scale, distractor_contrast, noise,
                                                rotate, grid, seed, pool, test_fraction, split_seed)
    distractors = validation.check_int(distractors, "distractors", minimum=0)
    clutter = validation.check_int(clutter, "clutter", minimum=0)
    if distractors and places[-1] < side:
        raise ValueError(f"distractors={distractors} need room for two {side}-pixel digits side "
                         f"by side (corners on multiples of grid={grid}), and canvas_size={size} "
                         f"has none")
    settings = dict(n=n, canvas_size=size, scale=scale, distractors=distractors,
                    distractor_contrast=float(distractor_contrast), clutter=clutter,
                    noise=float(noise), rotate=float(rotate), grid=grid, pool=pool,
                    test_fraction=float(test_fraction), split_seed=split_seed, seed=seed)
    digits, digit_labels = digit_pool(pool, test_fraction, split_seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0 if pool == "train" else 1]))
    by_class = [np.flatnonzero(digit_labels == c) for c in range(10)]

    labels = rng.permutation(np.arange(n) % 10).astype(np.int64)  # balanced, shuffled
    canvas = rng.uniform(0.0, noise, size=(n, size, size)).astype(np.float32)

    def draw(classes):  # a random source digit of each class, enlarged and rotated: (n, side, side)
        big = digits[_pick(by_class, classes, rng)].repeat(scale, axis=1).repeat(scale, axis=2)
        return _rotate(big, rng.uniform(-rotate, rotate, size=len(classes))) if rotate else big

    top, left = places[rng.integers(0, len(places), size=(2, n))]
    boxes = np.stack([top, left, np.full(n, side), np.full(n, side)], axis=1).astype(np.int64)
    _paste(canvas, draw(labels), top, left)

    d_boxes = np.zeros((n, distractors, 4), dtype=np.int64)
    d_labels = np.zeros((n, distractors), dtype=np.int64)
    for j in range(distractors):  # one slot at a time, vectorized over the canvases
        other = (labels + rng.integers(1, 10, size=n)) % 10  # any class but the label
        d_top, d_left = _free_positions(top, left, side, places, rng)
        _paste(canvas, distractor_contrast * draw(other), d_top, d_left)
        d_boxes[:, j] = np.stack([d_top, d_left, np.full(n, side), np.full(n, side)], axis=1)
        d_labels[:, j] = other

    piece = side // 2
    for _ in range(clutter):  # a quarter of a random digit, anywhere, at a random contrast
        source = draw(rng.integers(0, 10, size=n))
        r0, c0 = rng.integers(0, side - piece + 1, size=(2, n))
        rows, cols = r0[:, None] + np.arange(piece), c0[:, None] + np.arange(piece)
        fragment = source[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]]
        contrast = rng.uniform(0.3, 1.0, size=(n, 1, 1)).astype(np.float32)
        f_top, f_left = rng.integers(0, size - piece + 1, size=(2, n))
        _paste(canvas, contrast * fragment, f_top, f_left)

    images = np.clip(canvas, 0.0, 1.0)[:, None]
    return Clutter(images, labels, boxes, d_boxes, d_labels, settings)


def leftmost_digit(n: int, *, canvas_size: int = 16, scale: int = 1, min_shift: int = 4,
                   distractor_contrast: float = 1.0, noise: float = 0.1, rotate: float = 0.0,
                   grid: int = 1, pool: str = "train", test_fraction: float = 0.2,
                   split_seed: int = 0, seed: int = 0) -> Clutter:
    """``n`` canvases with two digits of different classes that do not overlap, labelled by the
    digit **further left**: a task that only position decides.  The left digit's left edge is
    at least ``min_shift`` pixels left of the other's, so that "further left" is visible;
    every pair of places that allows (corners on multiples of ``grid``) is equally likely.
    ``boxes`` and ``labels`` are the left digit's, ``distractor_boxes`` and
    ``distractor_labels`` the other's (one per canvas).  Both are drawn at full contrast by
    default; ``distractor_contrast`` < 1 draws the other one fainter, so that brightness also
    tells the label.  The other arguments are :func:`digits_in_clutter`'s: the labels balanced
    and shuffled, everything fixed by ``seed`` and the pool's split.

        >>> world = leftmost_digit(1000, canvas_size=24, seed=0)
        >>> bool((world.boxes[:, 1] + 4 <= world.distractor_boxes[:, 0, 1]).all())
        True
    """
    n, size, side, grid, places = _check_canvas(n, canvas_size, scale, distractor_contrast, noise,
                                                rotate, grid, seed, pool, test_fraction, split_seed)
    min_shift = validation.check_int(min_shift, "min_shift", minimum=1)
    top, left = (a.ravel() for a in np.meshgrid(places, places, indexing="ij"))  # (P,)
    apart = (np.abs(top[:, None] - top[None]) >= side) | (np.abs(left[:, None] - left[None]) >= side)
    first, second = np.nonzero(apart & (left[:, None] + min_shift <= left[None]))  # (pairs,)
    if not len(first):
        raise ValueError(f"canvas_size={size} has no room for two {side}-pixel digits that do not "
                         f"overlap with one at least min_shift={min_shift} pixels left of the "
                         f"other (corners on multiples of grid={grid})")
    settings = dict(n=n, canvas_size=size, scale=scale, min_shift=min_shift,
                    distractor_contrast=float(distractor_contrast), noise=float(noise),
                    rotate=float(rotate), grid=grid, pool=pool, test_fraction=float(test_fraction),
                    split_seed=split_seed, seed=seed, label="the digit further left")
    digits, digit_labels = digit_pool(pool, test_fraction, split_seed)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0 if pool == "train" else 1]))
    by_class = [np.flatnonzero(digit_labels == c) for c in range(10)]

    labels = rng.permutation(np.arange(n) % 10).astype(np.int64)  # balanced, shuffled
    other = (labels + rng.integers(1, 10, size=n)) % 10  # any class but the label
    canvas = rng.uniform(0.0, noise, size=(n, size, size)).astype(np.float32)
    pair = rng.integers(0, len(first), size=n)
    a, b = first[pair], second[pair]  # the left digit's place, the other's

    def draw(classes):  # a random source digit of each class, enlarged and rotated: (n, side, side)
        big = digits[_pick(by_class, classes, rng)].repeat(scale, axis=1).repeat(scale, axis=2)
        return _rotate(big, rng.uniform(-rotate, rotate, size=len(classes))) if rotate else big

    _paste(canvas, draw(labels), top[a], left[a])
    _paste(canvas, distractor_contrast * draw(other), top[b], left[b])
    full = np.full(n, side)
    boxes = np.stack([top[a], left[a], full, full], axis=1).astype(np.int64)
    d_boxes = np.stack([top[b], left[b], full, full], axis=1).astype(np.int64)[:, None]
    images = np.clip(canvas, 0.0, 1.0)[:, None]
    return Clutter(images, labels, boxes, d_boxes, other[:, None].astype(np.int64), settings)


def _pick(by_class, classes, rng) -> np.ndarray:
    """One random index of each requested class's digits (vectorized over the classes)."""
    counts = np.array([len(ix) for ix in by_class])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    flat = np.concatenate(by_class)
    offset = (rng.random(len(classes)) * counts[classes]).astype(np.int64)
    return flat[starts[classes] + offset]


def _paste(canvas, pieces, top, left) -> None:
    """Draw ``pieces`` (n, h, w) onto ``canvas`` (n, S, S) at (top, left), keeping the brighter
    pixel (strokes over noise and over each other)."""
    n, h, w = pieces.shape
    rows = top[:, None, None] + np.arange(h)[None, :, None]  # (n, h, 1)
    cols = left[:, None, None] + np.arange(w)[None, None, :]  # (n, 1, w)
    idx = np.arange(n)[:, None, None]
    canvas[idx, rows, cols] = np.maximum(canvas[idx, rows, cols], pieces)


def _free_positions(top, left, side, places, rng):
    """A uniformly random (top, left) per canvas, out of ``places`` × ``places``, for a
    ``side``-pixel square that does not overlap the square at (``top``, ``left``): every
    position is scored, the overlapping ones are ruled out, and the highest random score among
    the rest wins."""
    cand_t, cand_l = (a.ravel() for a in np.meshgrid(places, places, indexing="ij"))  # (P,)
    overlap = ((np.abs(cand_t[None] - top[:, None]) < side)
               & (np.abs(cand_l[None] - left[:, None]) < side))  # (n, P)
    score = np.where(overlap, -1.0, rng.random(overlap.shape))
    choice = score.argmax(axis=1)
    return cand_t[choice], cand_l[choice]


def _rotate(images, degrees) -> np.ndarray:
    """Rotate each (h, w) image about its centre by its angle (bilinear, zero outside)."""
    n, h, w = images.shape
    theta = np.radians(degrees)[:, None, None]
    ys, xs = np.meshgrid(np.arange(h) - (h - 1) / 2, np.arange(w) - (w - 1) / 2, indexing="ij")
    src_y = np.cos(theta) * ys - np.sin(theta) * xs + (h - 1) / 2  # (n, h, w): where to read
    src_x = np.sin(theta) * ys + np.cos(theta) * xs + (w - 1) / 2
    y0, x0 = np.floor(src_y).astype(np.int64), np.floor(src_x).astype(np.int64)
    fy, fx = src_y - y0, src_x - x0
    padded = np.pad(images, ((0, 0), (1, 1), (1, 1)))  # zeros outside the image
    idx = np.arange(n)[:, None, None]

    def at(y, x):
        return padded[idx, np.clip(y + 1, 0, h + 1), np.clip(x + 1, 0, w + 1)]

    out = ((1 - fy) * (1 - fx) * at(y0, x0) + (1 - fy) * fx * at(y0, x0 + 1)
           + fy * (1 - fx) * at(y0 + 1, x0) + fy * fx * at(y0 + 1, x0 + 1))
    return out.astype(np.float32)


def box_mask(boxes, size: int) -> np.ndarray:
    """(N, 4) boxes -> (N, size, size) float32: 1 inside each box, 0 outside."""
    boxes = np.asarray(boxes)
    r = np.arange(size)
    rows = (r[None] >= boxes[:, :1]) & (r[None] < boxes[:, :1] + boxes[:, 2:3])  # (N, size)
    cols = (r[None] >= boxes[:, 1:2]) & (r[None] < boxes[:, 1:2] + boxes[:, 3:4])
    return (rows[:, :, None] & cols[:, None, :]).astype(np.float32)


#: The set ``python -m vit_scratch.train --data digits_in_clutter`` trains on: the canvas is the
#: model's input size, the digit enlarged ``max(1, size // 24)`` times with its corner on the
#: 4-pixel patch grid of the small models, and one distractor at half contrast.
TRAINER_SET = dict(n_train=8000, n_test=2000, distractors=1, distractor_contrast=0.5, clutter=0,
                   noise=0.1, rotate=0.0, grid=4)
#: The smallest canvas of the trainer's set: two 8-pixel digits side by side.
TRAINER_MIN_SIZE = 16


def trainer_worlds(canvas_size: int, test_fraction: float = 0.2, seed: int = 0):
    """``(train, test)`` :class:`Clutter` sets of the trainer's ``digits_in_clutter``
    (``TRAINER_SET``) on ``canvas_size``² canvases: the training canvases from the pool's
    training digits, the test canvases from its test digits, both fixed by ``seed``."""
    size = validation.check_int(canvas_size, "canvas_size", minimum=1)
    if size < TRAINER_MIN_SIZE:
        raise ValueError(f"digits_in_clutter needs a model input of at least {TRAINER_MIN_SIZE}"
                         f"×{TRAINER_MIN_SIZE} pixels (a digit and a distractor, 8 pixels each, "
                         f"side by side), and this model's input is {size}×{size}: give the "
                         f"model a larger input (e.g. --model-arg img_size={TRAINER_MIN_SIZE})")
    scale = max(1, size // 24)
    knobs = {k: v for k, v in TRAINER_SET.items() if not k.startswith("n_")}
    return tuple(digits_in_clutter(n, canvas_size=size, scale=scale, pool=pool,
                                   test_fraction=test_fraction, split_seed=seed, seed=seed, **knobs)
                 for pool, n in (("train", TRAINER_SET["n_train"]), ("test", TRAINER_SET["n_test"])))


def trainer_splits(canvas_size: int, test_fraction: float = 0.2, seed: int = 0):
    """``((x, y, boxes) train, (x, y, boxes) test)``: :func:`trainer_worlds`' arrays."""
    return tuple((w.images, w.labels, w.boxes)
                 for w in trainer_worlds(canvas_size, test_fraction, seed))
