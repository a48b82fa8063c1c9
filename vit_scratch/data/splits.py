"""Splits: the stratified test split (written by hand), the validation split (scikit-learn's
``train_test_split``, stratified) and the labels of a dataset, read without its images.
"""
from __future__ import annotations

import numpy as np


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


def _tensor_dataset(images, labels, classes, **attributes):
    import torch
    from torch.utils.data import TensorDataset

    dataset = TensorDataset(images, torch.as_tensor(labels, dtype=torch.int64))
    if classes is not None:
        dataset.classes = list(classes)
    for key, value in attributes.items():
        setattr(dataset, key, value)
    return dataset


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
    from ..extras import require

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
    except ValueError as error:  # fewer validation (or training) items than classes
        n_val = int(np.ceil(val_fraction * len(labels)))
        short, advice = (("training", "lower") if len(labels) - n_val < len(present) else
                         ("validation", "raise"))
        raise ValueError(f"--val-fraction {val_fraction} of {len(labels)} training pictures "
                         f"leaves {n_val} for validation and {len(labels) - n_val} for "
                         f"training: too few {short} pictures for the {len(present)} classes "
                         f"({error}); {advice} --val-fraction") from None
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
