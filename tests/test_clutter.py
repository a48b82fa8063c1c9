"""Digits in clutter (vit_scratch.data.clutter): deterministic from a seed, balanced, a box around
every true digit, distractors that never cover it, and knobs that do what they say."""
from __future__ import annotations

import numpy as np
import pytest

from vit_scratch.data.clutter import (TRAINER_SET, box_mask, digit_pool, digits_in_clutter,
                                      leftmost_digit, trainer_worlds)


def test_the_same_arguments_give_the_same_canvases_and_a_new_seed_others():
    kw = dict(canvas_size=24, distractors=2, clutter=2, rotate=10.0)
    a, b = digits_in_clutter(300, seed=3, **kw), digits_in_clutter(300, seed=3, **kw)
    for field in ("images", "labels", "boxes", "distractor_boxes", "distractor_labels"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    c = digits_in_clutter(300, seed=4, **kw)
    assert not np.array_equal(a.images, c.images)
    assert a.settings == dict(b.settings) and a.settings["seed"] == 3


def test_shapes_types_range_and_balanced_labels():
    world = digits_in_clutter(1003, canvas_size=20, scale=2, distractors=0, clutter=1, seed=0)
    assert world.images.shape == (1003, 1, 20, 20) and world.images.dtype == np.float32
    assert world.labels.shape == (1003,) and world.labels.dtype == np.int64
    assert world.boxes.shape == (1003, 4) and world.distractor_boxes.shape == (1003, 0, 4)
    assert 0.0 <= world.images.min() and world.images.max() <= 1.0
    counts = np.bincount(world.labels, minlength=10)
    assert counts.sum() == 1003 and counts.max() - counts.min() <= 1  # 100 or 101 of each
    assert (world.boxes[:, 2:] == 16).all()  # scale 2: 16-pixel digits


@pytest.mark.parametrize("pool", ["train", "test"])
def test_every_box_holds_a_digit_of_its_label_from_its_pool_and_nothing_else_is_drawn(pool):
    world = digits_in_clutter(200, canvas_size=16, noise=0.0, pool=pool, seed=1)
    digits, labels = digit_pool(pool)
    inside = box_mask(world.boxes, 16).astype(bool)
    for image, label, box, mask in zip(world.images[:, 0], world.labels, world.boxes, inside):
        top, left, h, w = box
        patch = image[top:top + h, left:left + w]
        same = np.abs(digits[labels == label] - patch).max(axis=(1, 2)) < 1e-6
        assert same.any(), "the box holds a digit of the label's class from the pool"
        assert (image[~mask] == 0).all(), "with noise 0 and no clutter, nothing outside the box"


def test_train_and_test_pools_split_the_digits_by_class():
    train, train_labels = digit_pool("train")
    test, test_labels = digit_pool("test")
    assert len(train) + len(test) == 1797
    assert abs(len(test) / 1797 - 0.2) < 0.01
    for c in range(10):  # stratified: each class split in the same proportion
        share = (test_labels == c).sum() / ((test_labels == c).sum() + (train_labels == c).sum())
        assert abs(share - 0.2) < 0.02


def test_distractors_are_other_classes_fainter_and_never_cover_the_digit():
    world = digits_in_clutter(400, canvas_size=24, distractors=2, distractor_contrast=0.4,
                              noise=0.0, seed=2)
    assert world.distractor_boxes.shape == (400, 2, 4)
    assert (world.distractor_labels != world.labels[:, None]).all()
    true = box_mask(world.boxes, 24).astype(bool)
    for j in range(2):
        other = box_mask(world.distractor_boxes[:, j], 24).astype(bool)
        assert not (true & other).any(), "a distractor never overlaps the true digit"
        outside = world.images[:, 0][other & ~true]
        assert outside.max() <= 0.4 + 1e-6, "a distractor is drawn at distractor_contrast"


def test_grid_puts_every_digit_on_the_patch_grid():
    world = digits_in_clutter(300, canvas_size=24, distractors=1, grid=4, seed=5)
    assert (world.boxes[:, :2] % 4 == 0).all()
    assert (world.distractor_boxes[:, :, :2] % 4 == 0).all()


def ink_outside_the_boxes(world) -> float:
    keep = 1 - box_mask(world.boxes, world.images.shape[-1])
    return float((world.images[:, 0] * keep).mean())


def test_the_knobs_do_what_they_say():
    base = dict(canvas_size=16, noise=0.0, seed=0)
    plain = digits_in_clutter(500, **base)
    cluttered = digits_in_clutter(500, clutter=3, **base)
    assert ink_outside_the_boxes(cluttered) > ink_outside_the_boxes(plain) + 0.01  # clutter
    noisy = digits_in_clutter(500, **{**base, "noise": 0.2})
    background = noisy.images[:, 0][box_mask(noisy.boxes, 16) == 0]
    assert abs(background.mean() - 0.1) < 0.01  # uniform noise in [0, 0.2]
    rotated = digits_in_clutter(500, rotate=30.0, **base)
    assert np.array_equal(rotated.labels, plain.labels) and not np.allclose(rotated.images,
                                                                             plain.images)
    big = digits_in_clutter(500, canvas_size=32, noise=0.0, seed=0)
    share = lambda w: (w.boxes[:, 2] * w.boxes[:, 3]).mean() / w.images.shape[-1] ** 2  # noqa: E731
    assert share(big) == pytest.approx(share(plain) / 4)  # a larger canvas: a smaller box


def test_harder_settings_are_harder_for_a_simple_classifier():
    """Difficulty, measured: a nearest-centroid classifier on the pixels (scikit-learn) does
    worse on a large canvas with clutter and a bright distractor than on a digit that fills
    its canvas."""
    from sklearn.neighbors import NearestCentroid

    def accuracy(**kw):
        train = digits_in_clutter(1500, seed=0, **kw)
        test = digits_in_clutter(500, pool="test", seed=0, **kw)
        clf = NearestCentroid().fit(train.images.reshape(1500, -1), train.labels)
        return (clf.predict(test.images.reshape(500, -1)) == test.labels).mean()

    easy = accuracy(canvas_size=8)
    hard = accuracy(canvas_size=16, distractors=1, distractor_contrast=0.9, clutter=3)
    assert easy > 0.8 and hard < easy - 0.3


def test_train_and_test_canvases_come_from_independent_random_streams():
    """The same seed and size in the two pools: other labels, places and noise at every index
    (one shared stream would repeat them, index by index)."""
    kw = dict(canvas_size=24, distractors=1, clutter=1, seed=0)
    for make in (digits_in_clutter, leftmost_digit):
        args = kw if make is digits_in_clutter else dict(canvas_size=24, seed=0)
        train, test = make(500, pool="train", **args), make(500, pool="test", **args)
        assert (train.labels == test.labels).mean() < 0.3, "labels repeat index by index"
        assert (train.boxes == test.boxes).all(axis=1).mean() < 0.1, "places repeat"
        corner = (train.boxes[:, :2] > 2).all(axis=1) & (test.boxes[:, :2] > 2).all(axis=1) & (
            train.distractor_boxes[:, 0, :2] > 2).all(axis=1) & (
            test.distractor_boxes[:, 0, :2] > 2).all(axis=1)
        background = train.images[corner, 0, 0, 0], test.images[corner, 0, 0, 0]
        assert not np.allclose(*background), "the noise repeats"


def test_bad_arguments_name_the_parameter():
    for kwargs, words in [(dict(n=0), "n"), (dict(canvas_size=6), "canvas_size 6"),
                          (dict(distractors=1, canvas_size=12), "distractors=1"),
                          (dict(noise=1.5), "noise"), (dict(rotate=-1.0), "rotate"),
                          (dict(grid=0), "grid"), (dict(pool="val"), "pool"),
                          (dict(distractor_contrast=2.0), "distractor_contrast"),
                          (dict(test_fraction=0.0), r"test_fraction must be in \(0, 1\), got 0.0"),
                          (dict(test_fraction=1.0), r"test_fraction must be in \(0, 1\), got 1.0"),
                          (dict(split_seed=-1), "split_seed must be an int >= 0, got -1")]:
        n = kwargs.pop("n", 10)
        with pytest.raises(ValueError, match=words):
            digits_in_clutter(n, **kwargs)
    for bad, words in [(dict(test_fraction=0.0), "test_fraction"), (dict(split_seed=-1), "split_seed"),
                       (dict(min_shift=0), "min_shift"),
                       (dict(canvas_size=16, min_shift=9), "min_shift=9")]:
        with pytest.raises(ValueError, match=words):
            leftmost_digit(10, **bad)
    with pytest.raises(ValueError, match="split_seed"):
        digit_pool("train", 0.2, -1)


def test_the_trainer_set_asks_for_an_input_of_at_least_16_pixels():
    with pytest.raises(ValueError, match=r"at least 16×16 pixels .* input is 8×8: .*img_size=16"):
        trainer_worlds(8)
    from vit_scratch.data import make_datasets

    with pytest.raises(ValueError, match="img_size=16"):
        make_datasets("digits_in_clutter", "coat_lite_digits")


@pytest.mark.parametrize("size, grid", [(16, 1), (24, 1), (16, 8)])
def test_leftmost_digit_labels_the_digit_further_left(size, grid):
    world = leftmost_digit(600, canvas_size=size, grid=grid, noise=0.0, seed=1)
    left, other = world.boxes, world.distractor_boxes[:, 0]
    assert (left[:, 1] + 4 <= other[:, 1]).all(), "the label's digit is at least 4 pixels further left"
    assert ((np.abs(left[:, 0] - other[:, 0]) >= 8) | (np.abs(left[:, 1] - other[:, 1]) >= 8)).all()
    assert (world.distractor_labels[:, 0] != world.labels).all()
    assert (np.bincount(world.labels, minlength=10) == 60).all()
    assert (left[:, :2] % grid == 0).all() and (other[:, :2] % grid == 0).all()
    digits, labels = digit_pool("train")
    for image, label, o_label, box, o_box in zip(world.images[:50, 0], world.labels,
                                                   world.distractor_labels[:, 0], left, other):
        for cls, (t, l, h, w) in ((label, box), (o_label, o_box)):  # both drawn at full contrast
            assert (np.abs(digits[labels == cls] - image[t:t + h, l:l + w]).max(axis=(1, 2))
                    < 1e-6).any()
    if grid == 8:  # the quadrants: the left digit in the left half, the other in the right
        assert (left[:, 1] == 0).all() and (other[:, 1] == 8).all()


def test_leftmost_digit_spreads_over_every_allowed_pair_of_places():
    world = leftmost_digit(4000, canvas_size=16, seed=2)
    pairs = {tuple(p) for p in np.c_[world.boxes[:, :2], world.distractor_boxes[:, 0, :2]]}
    assert len(pairs) == 81 + 2 * 14  # side by side: 9 × 9 tops; stacked: 14 pairs of lefts, two orders
    faint = leftmost_digit(300, canvas_size=16, distractor_contrast=0.5, noise=0.0, seed=2)
    inside = box_mask(faint.distractor_boxes[:, 0], 16).astype(bool)
    assert faint.images[:, 0][inside].max() <= 0.5 + 1e-6
    again = leftmost_digit(300, canvas_size=16, distractor_contrast=0.5, noise=0.0, seed=2)
    np.testing.assert_array_equal(faint.images, again.images)


def test_the_trainer_trains_on_it_with_its_boxes():
    from vit_scratch.data import check_data, data_classes, make_datasets

    assert check_data("digits_in_clutter") == "digits_in_clutter"
    assert data_classes("digits_in_clutter") == [str(d) for d in range(10)]
    train, val, test = make_datasets("digits_in_clutter", "cait_digits", val_fraction=0.1)
    assert len(train) + len(val) == TRAINER_SET["n_train"] and len(test) == TRAINER_SET["n_test"]
    images, labels = test.tensors
    assert images.shape == (TRAINER_SET["n_test"], 1, 24, 24) and test.boxes.shape == (
        TRAINER_SET["n_test"], 4)
    assert train.boxes.shape == (len(train), 4) and (test.boxes[:, :2] % 4 == 0).all()
