"""Folders of your own pictures: one subfolder per class (torchvision's ``ImageFolder``), with
``train/``, ``val/`` and ``test/`` subfolders as the split if present; pictures that do not
decode refused or left out, named either way; pictures read without augmentation decoded once
and kept (:class:`KeptPictures`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .augment import ModelTransform
from .splits import stratified_split, validation_split


def _decode(path):
    from PIL import Image

    with open(path, "rb") as f:
        image = Image.open(f)
        image.load()
    return image


def _decode_errors():
    from PIL import Image

    return OSError, SyntaxError, ValueError, Image.DecompressionBombError


def _reason(error: BaseException) -> str:
    """Why a file does not decode, without the path (the messages name it once, beside) and
    without the reader object Pillow puts in its own message (``cannot identify image file
    <_io.BufferedReader name=...>``)."""
    from PIL import UnidentifiedImageError

    if isinstance(error, UnidentifiedImageError):
        return "not a picture format Pillow recognises, or a damaged header"
    return str(error) or type(error).__name__


def open_picture(path):
    """A picture file -> a PIL image, fully decoded now (a truncated or damaged file fails
    here, with a ``ValueError`` naming the file), in its own mode (16-bit greyscale stays
    16-bit).  The loader of the trainer's image folders."""
    try:
        return _decode(path)
    except _decode_errors() as error:
        raise ValueError(f"picture {str(path)!r} cannot be decoded: {_reason(error)}") from None


def unreadable_pictures(paths) -> list[tuple[str, str]]:
    """``(path, reason)`` for every file of ``paths`` that does not decode as a picture."""
    bad = []
    for path in paths:
        try:
            _decode(path)
        except _decode_errors() as error:
            bad.append((str(path), _reason(error)))
    return bad


def bad_pictures_listed(bad: list[tuple[str, str]]) -> str:
    """The first ten ``(path, reason)`` pairs, and how many more, for a message."""
    listed = "; ".join(f"{p} ({reason})" for p, reason in bad[:10])
    return listed + (f"; and {len(bad) - 10} more" if len(bad) > 10 else "")


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

    from ..extras import require

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
        listed = bad_pictures_listed(bad)
        skipped = {p for p, _ in bad}
        kept = [s for s in dataset.samples if s[0] not in skipped]
        if not kept:
            raise ValueError(f"none of the {len(bad)} picture(s) in {str(path)!r} can be "
                             f"decoded (the first, {bad[0][0]}: {bad[0][1]}). Are they "
                             f"pictures (.jpg, .png, ...)?")
        if bad_images == "error":
            raise ValueError(f"{len(bad)} picture(s) in {str(path)!r} cannot be decoded: "
                             f"{listed}. Remove or repair them, or pass --bad-images skip "
                             f"to leave them out")
        classes_kept = {t for _, t in kept}
        emptied = [name for i, name in enumerate(dataset.classes) if i not in classes_kept]
        if emptied:
            raise ValueError(f"class {emptied[0]!r} of {str(path)!r} has no picture that "
                             f"decodes: {listed}")
        warnings.warn(f"left out {len(bad)} picture(s) of {str(path)!r} that cannot be decoded: "
                      f"{listed}", stacklevel=3)
        dataset.samples = kept
        dataset.imgs, dataset.targets = dataset.samples, [t for _, t in dataset.samples]
    return dataset


#: The most memory a folder's kept pictures may take (:class:`KeptPictures`), per process.
KEEP_BYTES = 512 * 2 ** 20


class KeptPictures:
    """A folder of pictures (an ``ImageFolder``) read through a transform without randomness,
    each picture decoded and transformed once, at its first read, and kept in memory for the
    next epochs -- when the whole folder at the model's input size takes at most
    :data:`KEEP_BYTES` (float32), else read from disk every time.  The same items either way.

    Infrastructure: a DataLoader worker keeps its own pictures (the kept ones are not pickled
    into ``spawn`` workers).  ``classes``, ``targets``, ``samples`` and ``transform`` are the
    folder's."""

    def __init__(self, folder):
        import math

        self.folder = folder
        self.classes, self.targets, self.samples = folder.classes, folder.targets, folder.samples
        self.transform = folder.transform
        size = 4 * math.prod(folder.transform.pretrained_cfg["input_size"]) * len(folder)
        self.keeps = size <= KEEP_BYTES
        self.kept = {}

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, index):
        item = self.kept.get(index)
        if item is None:
            item = self.folder[index]
            if self.keeps:
                self.kept[index] = item
        return item

    def __getstate__(self):
        return {**self.__dict__, "kept": {}}


def _kept(folder):
    """``folder`` with its pictures kept after their first read, if its transform draws no
    random numbers."""
    return folder if folder.transform.augments else KeptPictures(folder)


def _with_transform(folder, transform):
    """The same ``ImageFolder`` (the same files, scanned once), read through ``transform``."""
    import copy

    if isinstance(folder, KeptPictures):
        folder = folder.folder
    if folder.transform is transform:
        return folder
    other = copy.copy(folder)
    other.transform = transform
    return other


def plain_pictures(dataset):
    """The same items without the photo augmentation a training split reads them through (a
    folder's ``ModelTransform`` with ``flip``, ``crop_scale`` or ``color_jitter``): what the
    trainer's linear baseline fits.  Any other dataset is returned as it is."""
    from torch.utils.data import Subset

    if isinstance(dataset, Subset):
        inner = plain_pictures(dataset.dataset)
        if inner is dataset.dataset:
            return dataset
        plain = Subset(inner, dataset.indices)
        if hasattr(dataset, "classes"):
            plain.classes = dataset.classes
        return plain
    transform = getattr(dataset, "transform", None)
    if isinstance(transform, ModelTransform) and transform.augments:
        return _with_transform(dataset, ModelTransform(transform.pretrained_cfg))
    return dataset


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
        parts = {name: _kept(_image_folder(path, train_transform if name == "train" else plain,
                                           bad_images)) for name, path in split.items()}
        _same_classes({split[name]: d for name, d in parts.items()})
        if val_fraction is None:
            return parts["train"], parts["test"]
        if "val" in parts:
            return parts["train"], parts["val"], parts["test"]
        train, val = validation_split(parts["train"], val_fraction, seed,
                                      eval_dataset=_kept(_with_transform(parts["train"], plain)))
        return train, val, parts["test"]
    full = _kept(_image_folder(root, plain, bad_images))
    is_test = stratified_split(np.asarray(full.targets), test_fraction, seed)
    if is_test.all() or not is_test.any():
        raise ValueError(f"data folder {str(root)!r} has too few images ({len(full)}) to split "
                         f"into train and test with test_fraction={test_fraction}")
    train = Subset(full if augment is None else _kept(_with_transform(full, train_transform)),
                   np.flatnonzero(~is_test).tolist())
    test = Subset(full, np.flatnonzero(is_test).tolist())
    train.classes = test.classes = full.classes
    if val_fraction is None:
        return train, test
    train, val = validation_split(train, val_fraction, seed,
                                  eval_dataset=Subset(full, train.indices))
    return train, val, test
