"""The data: offline pictures and data sets, preprocessing that follows the model, the split,
image folders, and the augmentation of a batch."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from vit_scratch.data import (
    IMAGENET_MEAN, IMAGENET_STD, affine, normalize, random_affine, sample_image,
)


@pytest.mark.parametrize("size", [224, (96, 160)])
def test_sample_image(size):
    img = sample_image(size)
    h, w = (size, size) if isinstance(size, int) else size
    assert img.shape == (3, h, w) and img.dtype == np.float32
    assert 0.0 <= img.min() and img.max() <= 1.0 and img.std() > 0.1  # a real picture


def test_normalize():
    img = np.ones((2, 3, 4, 4), dtype=np.float32) * np.reshape(IMAGENET_MEAN, (3, 1, 1))
    np.testing.assert_allclose(normalize(img, mean=IMAGENET_MEAN, std=IMAGENET_STD), 0.0, atol=1e-7)
    one_std = np.reshape(IMAGENET_MEAN, (3, 1, 1)) + np.reshape(IMAGENET_STD, (3, 1, 1))
    np.testing.assert_allclose(normalize(np.broadcast_to(one_std, (3, 2, 2)), "deit_tiny_patch16_224"),
                               1.0, rtol=1e-6)


def test_normalize_has_no_silent_default():
    img = np.zeros((3, 4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="normalize needs the model's mean and std"):
        normalize(img)
    # vit_* weights expect [-1, 1] inputs, deit_* ImageNet's statistics: not the same numbers
    assert normalize(img, "vit_tiny_patch16_224").min() == -1.0
    assert normalize(img, "deit_tiny_patch16_224").min() < -2.0


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "deit_tiny_patch16_224"])
def test_preprocess_equals_timm_eval_transform(name):
    """Ours follows the model's pretrained_cfg exactly as timm's own evaluation transform does."""
    timm = pytest.importorskip("timm")
    from matplotlib import cbook
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    import vit_scratch
    from vit_scratch.data import preprocess

    image = Image.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB")
    model = vit_scratch.create_model(name)
    oracle = timm.create_model(name)
    expected = create_transform(**resolve_data_config(model=oracle))(image).numpy()
    got = preprocess(image, model)
    assert got.shape == expected.shape == (3, 224, 224)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_digits_on_canvas_places_each_digit_in_its_box():
    from vit_scratch.data import digits_on_canvas, load_digits

    x_tr, y_tr, b_tr, x_te, y_te, b_te = digits_on_canvas(canvas_size=24, scale=2, noise=0.1)
    digits_tr, labels_tr, _, labels_te = load_digits()
    assert x_tr.shape == (len(labels_tr), 1, 24, 24) and x_tr.dtype == np.float32
    np.testing.assert_array_equal(y_tr, labels_tr)
    np.testing.assert_array_equal(y_te, labels_te)
    assert (b_tr[:, 2:] == 16).all() and b_tr[:, :2].min() >= 0 and b_tr[:, :2].max() <= 8
    assert len(np.unique(b_tr[:, :2], axis=0)) > 50  # the places vary
    for i in (0, 7, 300):
        top, left, h, w = b_tr[i]
        window = x_tr[i, 0, top:top + h, left:left + w]
        big = np.kron(digits_tr[i, 0], np.ones((2, 2), dtype=np.float32))
        np.testing.assert_array_equal(window, np.maximum(window, big))  # the digit is on top
        np.testing.assert_allclose(window[big > 0.1], big[big > 0.1])
        outside = x_tr[i, 0].copy()
        outside[top:top + h, left:left + w] = 0
        assert outside.max() <= 0.1  # only noise outside the box
    with pytest.raises(ValueError, match="canvas_size 12 is smaller than the digit"):
        digits_on_canvas(canvas_size=12, scale=2)


DIGITS16 = dict(input_size=(1, 16, 16), mean=(0.5,), std=(0.25,), interpolation="bilinear",
                crop_pct=1.0)


def test_digits_datasets_are_resized_normalised_and_split():
    import torch
    import torch.nn.functional as F

    import vit_scratch
    from vit_scratch.data import load_digits, make_datasets

    train, test = make_datasets("digits", DIGITS16)
    x_tr, y_tr, x_te, y_te = load_digits()
    assert len(train) == len(y_tr) == 1438 and len(test) == len(y_te) == 359
    assert train.classes == [str(d) for d in range(10)]
    image, label = train[5]
    assert image.shape == (1, 16, 16) and image.dtype == torch.float32 and label == y_tr[5]
    expected = F.interpolate(torch.from_numpy(x_te), size=(16, 16), mode="bilinear",
                             align_corners=False)
    torch.testing.assert_close(test.tensors[0] * 0.25 + 0.5, expected)  # resized, then (x-m)/s
    np.testing.assert_array_equal(test.tensors[1].numpy(), y_te)
    rgb_cfg = dict(vit_scratch.get_pretrained_cfg("vit_tiny_patch16_224"), input_size=(3, 24, 24))
    rgb, _ = make_datasets("digits", rgb_cfg, test_fraction=0.5, seed=3)
    assert rgb.tensors[0].shape == (899, 3, 24, 24)  # grey -> 3 channels, 8 -> 24
    assert torch.equal(rgb.tensors[0][:, 0], rgb.tensors[0][:, 2])
    other, _ = make_datasets("digits", DIGITS16, seed=1)
    assert not torch.equal(other.tensors[1], train.tensors[1])  # another split


def test_canvas_datasets_keep_the_boxes():
    from vit_scratch.data import make_datasets

    cfg = dict(DIGITS16, input_size=(1, 24, 24), mean=(0.0,), std=(1.0,))
    train, test = make_datasets("digits_on_canvas", cfg)
    assert train.tensors[0].shape == (1438, 1, 24, 24) and test.boxes.shape == (359, 4)
    top, left, h, w = test.boxes[3]
    image = test.tensors[0][3, 0].numpy()
    assert (h, w) == (8, 8) and image[top:top + h, left:left + w].max() > 0.5
    outside = image.copy()
    outside[top:top + h, left:left + w] = 0
    assert outside.max() <= 0.1  # only noise outside the box


def make_image_folder(root, classes=("cat", "dog"), per_class=5, size=(12, 10), split=False):
    """A tiny folder of PNGs, one subfolder per class: class i is brighter than class i-1."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for part in (("train", "test") if split else ("",)):
        for i, name in enumerate(classes):
            folder = root / part / name
            folder.mkdir(parents=True)
            for j in range(per_class):
                pixels = np.clip(rng.normal(60 + 120 * i, 20, size + (3,)), 0, 255)
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{j}.png")
    return root


def test_image_folder_datasets(tmp_path):
    import torch

    from vit_scratch.data import make_datasets

    root = make_image_folder(tmp_path / "pets")
    train, test = make_datasets(str(root), DIGITS16)
    assert train.classes == test.classes == ["cat", "dog"]
    assert len(train) == 8 and len(test) == 2  # 20% of each class held out
    assert sorted(int(test[i][1]) for i in range(2)) == [0, 1]
    image, label = train[0]
    assert image.shape == (1, 16, 16) and image.dtype == torch.float32
    assert abs(float(image.mean()) * 0.25 + 0.5 - 60 / 255) < 0.05  # grey, then normalised
    split = make_image_folder(tmp_path / "split", per_class=2, split=True)
    train, test = make_datasets(str(split), "vit_tiny_patch16_224")
    assert len(train) == len(test) == 4 and train[0][0].shape == (3, 224, 224)
    (tmp_path / "empty" / "only").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no images in class subfolders"):
        make_datasets(str(tmp_path / "empty"), DIGITS16)


class CountedReads:
    """An ``ImageFolder``'s loader that counts the pictures it decodes."""

    def __init__(self, loader):
        self.loader, self.reads = loader, 0

    def __call__(self, path):
        self.reads += 1
        return self.loader(path)


def folder_of(dataset):
    """The ``ImageFolder`` under a split (``Subset``) and its ``KeptPictures``, if any."""
    from torch.utils.data import Subset

    while isinstance(dataset, Subset) or hasattr(dataset, "kept"):
        dataset = dataset.dataset if isinstance(dataset, Subset) else dataset.folder
    return dataset


@pytest.mark.parametrize("split", [False, True])
def test_pictures_without_augmentation_are_decoded_once(tmp_path, monkeypatch, split):
    """Pictures read without augmentation are decoded once and kept: a second epoch decodes
    nothing and reads the same tensors; with augmentation the training split is decoded at
    every read (each epoch draws other transforms); over the memory budget nothing is kept;
    a pickled copy (a ``spawn`` worker's) starts empty."""
    import pickle

    from vit_scratch.data import ModelTransform, folders, image_folder_datasets

    root = make_image_folder(tmp_path / "pets", per_class=6, split=split)

    def reads_over_two_epochs(augment=None):
        parts = image_folder_datasets(root, DIGITS16, val_fraction=0.25, augment=augment)
        counters = {}
        for part in parts:
            inner = folder_of(part)
            counters.setdefault(id(inner), CountedReads(inner.loader))
            inner.loader = counters[id(inner)]
        epochs = [[part[i][0] for part in parts for i in range(len(part))] for _ in range(2)]
        return sum(c.reads for c in counters.values()), epochs, parts

    reads, (first, second), parts = reads_over_two_epochs()
    n = sum(len(part) for part in parts)
    assert reads == n and all(a is b for a, b in zip(first, second))
    monkeypatch.setattr(folders, "KEEP_BYTES", 0)
    reads, (again, _), _ = reads_over_two_epochs()
    assert reads == 2 * n and all(torch.equal(a, b) for a, b in zip(first, again))
    monkeypatch.undo()
    reads, _, (train, *_) = reads_over_two_epochs(ModelTransform(DIGITS16, flip=True))
    assert reads == n + len(train)  # the training split twice, the others once
    kept = parts[1]  # the validation split: Subsets of the kept folder
    while not hasattr(kept, "kept"):
        kept = kept.dataset
    assert len(kept.kept) > 0 and pickle.loads(pickle.dumps(kept)).kept == {}
    training_page = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    assert f"fits in {folders.KEEP_BYTES // 2 ** 20} MiB (float32)" in " ".join(training_page.split())


def test_unknown_data_lists_the_known_ones():
    from vit_scratch.data import make_datasets

    with pytest.raises(ValueError, match="unknown data 'cifar10'.*digits, digits_on_canvas"):
        make_datasets("cifar10", DIGITS16)


def test_digits_split_is_stratified_and_fixed():
    from vit_scratch.data import load_digits, stratified_split

    x_train, y_train, x_test, y_test = load_digits()
    assert x_train.shape[1:] == (1, 8, 8) and x_train.dtype == np.float32
    assert len(y_train) + len(y_test) == 1797
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    counts = np.bincount(y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20% of each class (~180 per class)
    np.testing.assert_array_equal(load_digits()[3], y_test)  # fixed by the seed
    assert not np.array_equal(load_digits(seed=1)[3], y_test)
    labels = np.repeat(np.arange(3), [10, 20, 5])
    test = stratified_split(labels, 0.2, seed=0)
    assert [int(test[labels == c].sum()) for c in range(3)] == [2, 4, 1]
    with pytest.raises(ValueError, match="test_fraction must be in"):
        stratified_split(labels, 1.0)


def test_affine_shift_by_one_pixel_is_exact():
    """affine_grid spans 2 units per side: a shift of 2/W is one whole pixel, edges repeated."""
    images = torch.arange(2 * 1 * 4 * 5, dtype=torch.float32).reshape(2, 1, 4, 5)
    theta = torch.tensor([[1.0, 0.0, 2 / 5], [0.0, 1.0, 0.0]]).expand(2, 2, 3)
    shifted = affine(images, theta)  # output pixel x reads input x + 1
    torch.testing.assert_close(shifted[..., :-1], images[..., 1:])
    torch.testing.assert_close(shifted[..., -1], images[..., -1])  # the edge, repeated
    gen = torch.Generator().manual_seed(0)
    assert random_affine(images, 0, 0, 0, gen) is images  # off: untouched
    moved = random_affine(images, 10, 0.1, 0.1, gen)
    assert moved.shape == images.shape and not torch.equal(moved, images)


# --- pictures with more than 8 bits, pictures that do not decode ---------------------------------

def test_a_16_bit_greyscale_png_keeps_its_range(tmp_path):
    """A full 16-bit ramp is read as 0..1, not clipped at 255 (which turned 97% of it white)."""
    from PIL import Image

    from vit_scratch.data import preprocess

    ramp = np.linspace(0, 65535, 64 * 64).round().astype(np.uint16).reshape(64, 64)
    Image.fromarray(ramp).save(tmp_path / "ramp.png")
    image = Image.open(tmp_path / "ramp.png")
    assert image.mode.startswith("I")  # Pillow reads it as 16-bit
    grey = dict(DIGITS16, input_size=(1, 64, 64), mean=(0.0,), std=(1.0,), crop_pct=1.0)
    got = preprocess(image, grey)[0]  # (64, 64) in [0, 1]
    np.testing.assert_allclose(got, ramp / 65535.0, atol=1e-6)  # same size: the pixels as read
    assert (got > 0.999).mean() < 0.01
    rgb = preprocess(ramp, dict(grey, input_size=(3, 32, 32)))  # a uint16 array, resized
    assert rgb.shape == (3, 32, 32) and np.array_equal(rgb[0], rgb[2])
    assert 0.45 < rgb.mean() < 0.55 and rgb.min() < 0.05 and rgb.max() > 0.95


def test_pictures_that_do_not_decode_are_refused_or_left_out(tmp_path):
    from PIL import Image

    from vit_scratch.data import make_datasets

    root = make_image_folder(tmp_path / "pets", per_class=6)
    photo = np.random.default_rng(0).integers(0, 255, (40, 40, 3)).astype(np.uint8)
    Image.fromarray(photo).save(root / "dog" / "photo.jpg", quality=90)
    truncated = root / "dog" / "photo.jpg"
    truncated.write_bytes(truncated.read_bytes()[:300])
    with pytest.raises(ValueError, match=r"1 picture\(s\) in .* cannot be decoded: .*photo\.jpg"):
        make_datasets(str(root), DIGITS16)
    with pytest.warns(UserWarning, match=r"left out 1 picture.*photo\.jpg"):
        train, test = make_datasets(str(root), DIGITS16, bad_images="skip")
    assert len(train) + len(test) == 12
    assert all(str(truncated) != path for path, _ in train.dataset.samples)


def test_a_bad_picture_is_named_once_with_a_reason_and_no_reader_object(tmp_path):
    """A text file named .png: the message names the path once and says why in words, not
    with the file object Pillow's own message holds (``<_io.BufferedReader name=...>``);
    the advice fits any command (leave them out), not only training."""
    from vit_scratch.data import make_datasets, open_picture

    root = make_image_folder(tmp_path / "pets", per_class=6)
    fake = root / "cat" / "notes.png"
    fake.write_text("not a picture")
    with pytest.raises(ValueError) as info:
        make_datasets(str(root), DIGITS16)
    text = str(info.value)
    assert "BufferedReader" not in text and text.count(str(fake)) == 1
    assert f"{fake} (not a picture format Pillow recognises" in text
    assert "--bad-images skip to leave them out" in text
    with pytest.raises(ValueError, match=r"notes\.png' cannot be decoded: not a picture format"):
        open_picture(fake)


def test_a_folder_or_a_class_without_one_good_picture_is_refused_with_skip(tmp_path):
    """--bad-images skip leaves nothing to work with: said at once, not as an empty split or a
    class the model can never see."""
    from vit_scratch.data import image_folder, make_datasets

    root = make_image_folder(tmp_path / "pets", per_class=3)
    for picture in (root / "dog").glob("*.png"):
        picture.write_bytes(b"broken")
    with pytest.raises(ValueError, match=r"class 'dog' of .* has no picture that decodes"):
        make_datasets(str(root), DIGITS16, bad_images="skip")
    for picture in (root / "cat").glob("*.png"):
        picture.write_bytes(b"broken")
    for bad_images in ("skip", "error"):
        with pytest.raises(ValueError, match=r"none of the 6 picture\(s\) in .* can be decoded"):
            image_folder(root, DIGITS16, bad_images)


# --- the validation split -------------------------------------------------------------------------

def test_validation_split_is_stratified_and_fixed():
    from vit_scratch.data import make_datasets, validation_indices

    labels = np.repeat(np.arange(3), [40, 20, 10])
    train, val = validation_indices(labels, 0.2, seed=0)
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(70))
    assert np.bincount(labels[val]).tolist() == [8, 4, 2]  # every class in proportion
    assert np.array_equal(validation_indices(labels, 0.2, seed=0)[1], val)
    assert not np.array_equal(validation_indices(labels, 0.2, seed=1)[1], val)
    with pytest.raises(ValueError, match=r"--val-fraction must be in \(0, 1\), got 1.0"):
        validation_indices(labels, 1.0)
    tr, va, te = make_datasets("digits_on_canvas", dict(DIGITS16, input_size=(1, 24, 24)),
                               val_fraction=0.1)
    assert (len(tr), len(va), len(te)) == (1294, 144, 359)
    assert tr.classes == va.classes and va.boxes.shape == (144, 4)  # the boxes follow the split


def test_folder_layouts(tmp_path):
    """class folders (split here), train/ + test/ (validation carved from train/), train/ +
    val/ + test/ (all three given), train/ + val/ (ImageNet's: val/ is the test split)."""
    from vit_scratch.data import data_classes, make_datasets

    flat = make_image_folder(tmp_path / "flat", per_class=10)
    assert [len(d) for d in make_datasets(str(flat), DIGITS16, val_fraction=0.25)] == [12, 4, 4]
    two = make_image_folder(tmp_path / "two", per_class=4, split=True)
    assert [len(d) for d in make_datasets(str(two), DIGITS16, val_fraction=0.25)] == [6, 2, 8]
    make_image_folder(tmp_path / "three" / "val", per_class=1)
    for part in ("train", "test"):
        make_image_folder(tmp_path / "three" / part, per_class=3)
    train, val, test = make_datasets(str(tmp_path / "three"), DIGITS16, val_fraction=0.5)
    assert (len(train), len(val), len(test)) == (6, 2, 6)
    assert data_classes(str(tmp_path / "three")) == train.classes == ["cat", "dog"]
    imagenet = tmp_path / "imagenet"
    make_image_folder(imagenet / "train", per_class=4)
    make_image_folder(imagenet / "val", per_class=2)
    assert [len(d) for d in make_datasets(str(imagenet), DIGITS16)] == [8, 4]


# --- transforms: picklable, augmentation from torchvision ------------------------------------------

def test_model_transform_augments_with_torchvision_and_pickles(tmp_path):
    import pickle

    from PIL import Image

    from vit_scratch.data import ModelTransform, preprocess

    picture = Image.fromarray(
        np.random.default_rng(0).integers(0, 255, (30, 40, 3)).astype(np.uint8))
    pcfg = dict(DIGITS16, input_size=(3, 16, 16), mean=(0.5,) * 3, std=(0.25,) * 3)
    plain = ModelTransform(pcfg)
    np.testing.assert_array_equal(plain(picture).numpy(), preprocess(picture, pcfg))
    flip = pickle.loads(pickle.dumps(ModelTransform(pcfg, flip=True)))
    torch.manual_seed(0)
    outs = [flip(picture) for _ in range(8)]
    flipped = [torch.equal(o, plain(picture).flip(-1)) for o in outs]
    unflipped = [torch.equal(o, plain(picture)) for o in outs]
    assert all(a or b for a, b in zip(flipped, unflipped)) and any(flipped) and any(unflipped)
    for extra in (dict(crop_scale=0.3), dict(color_jitter=0.5)):
        torch.manual_seed(0)
        out = pickle.loads(pickle.dumps(ModelTransform(pcfg, **extra)))(picture)
        assert out.shape == (3, 16, 16) and not torch.allclose(out, plain(picture))


def test_workers_started_with_spawn_load_a_folder(tmp_path):
    """--workers under 'spawn' (the default start method on macOS and Windows): the datasets and
    their transforms pickle, and the workers give the same batches as the main process."""
    from vit_scratch.data import ModelTransform, make_datasets

    root = make_image_folder(tmp_path / "pets", per_class=6)
    train, test = make_datasets(str(root), DIGITS16,
                                augment=ModelTransform(DIGITS16, color_jitter=0.1))
    both = torch.utils.data.ConcatDataset([test, train])  # plain, then augmented
    loader = torch.utils.data.DataLoader(both, batch_size=1, num_workers=2,
                                         multiprocessing_context="spawn")
    batches = list(loader)
    assert len(batches) == len(test) + len(train) == 12
    for (x, y), i in zip(batches, range(len(test))):  # the plain ones: as in the main process
        x0, y0 = test[i]
        assert torch.equal(x[0], x0) and int(y) == y0
    assert all(x.shape == (1, 1, 16, 16) for x, _ in batches)


def test_a_missing_extra_is_named(monkeypatch):
    from vit_scratch.data import load_digits

    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ModuleNotFoundError, match=r"the digits data set .* needs scikit-learn, "
                                                  r"which is not installed: pip install -e "
                                                  r"'\.\[train\]'"):
        load_digits()
