"""What a model's accuracy is measured against: chance, and a linear baseline on the pixels of
the same split -- and the warning when training accuracy stays at chance.

    chance              the share of the most common class among the training labels
    linear_baseline     scikit-learn's logistic regression on the pixels, in seconds
    not_learning        the warning when training accuracy stays near chance, naming what to try

A transformer trained from scratch on a few hundred pictures can learn less than a straight line
through their pixels; the baseline says whether it did.  It is fitted on the same training split
the model trains on (without augmentation), scored on the same validation and test splits, and
printed, written to ``metrics.json`` and drawn on ``curves.png`` beside the model's numbers.
Infrastructure: scikit-learn (``StandardScaler``, ``LogisticRegression``), not teaching code.
"""
from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

#: The baseline fits on at most this many training pictures (drawn at random, seed 0), so that
#: it takes seconds on a large folder too; its pixels are pooled to at most this many a side.
BASELINE_MAX_TRAIN = 5000
BASELINE_MAX_SIDE = 32
#: When a training accuracy near chance is worth a warning: after this share of the epochs,
#: and at least this many (a transformer from scratch may sit at chance for a few epochs).
NOT_LEARNING_SHARE = 0.2
NOT_LEARNING_EPOCHS = 5
#: "Near chance": less than this share of the way from chance to 1.
NOT_LEARNING_MARGIN = 0.1


def chance(labels, num_classes: int) -> float:
    """The accuracy of always answering the most common class of ``labels`` (1 / classes for a
    balanced split)."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=num_classes)
    return float(counts.max() / max(1, counts.sum()))


def _pixels(dataset, indices=None) -> tuple[np.ndarray, np.ndarray]:
    """``(features (N, F), labels (N,))``: each image as the model gets it, average-pooled to at
    most ``BASELINE_MAX_SIDE`` pixels a side, flattened."""
    from torch.utils.data import DataLoader, Subset

    if indices is not None:
        dataset = Subset(dataset, indices.tolist())
    feats, labels = [], []
    for images, y in DataLoader(dataset, batch_size=256):
        images = images.float()
        if max(images.shape[-2:]) > BASELINE_MAX_SIDE:
            side = [min(s, BASELINE_MAX_SIDE) for s in images.shape[-2:]]
            images = F.adaptive_avg_pool2d(images, side)
        feats.append(images.flatten(1).numpy())
        labels.append(np.asarray(y))
    return np.concatenate(feats), np.concatenate(labels)


def linear_baseline(train_set, val_set, test_set) -> dict:
    """Logistic regression (scikit-learn, on standardised pixels, one thread) fitted on the
    training split's pictures and scored on the validation and test splits:
    ``{"val_accuracy", "test_accuracy", "train_images", "features", "seconds"}``.
    ``train_set`` should be the training split without augmentation."""
    from ..extras import require

    require("sklearn", "the linear baseline")
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    start = time.perf_counter()
    indices = None
    if len(train_set) > BASELINE_MAX_TRAIN:
        indices = np.sort(np.random.default_rng(0).choice(len(train_set), BASELINE_MAX_TRAIN,
                                                          replace=False))
    with torch.random.fork_rng(devices=[]), threadpool_limits(1):
        torch.manual_seed(0)
        x, y = _pixels(train_set, indices)
        classifier = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        if len(np.unique(y)) > 1:
            classifier.fit(x, y)
        scores = {}
        for name, dataset in (("val", val_set), ("test", test_set)):
            xs, ys = _pixels(dataset)
            guess = classifier.predict(xs) if len(np.unique(y)) > 1 else np.full(len(ys), y[0])
            scores[f"{name}_accuracy"] = float((guess == ys).mean()) if len(ys) else 0.0
    return {**scores, "train_images": int(len(y)), "features": int(x.shape[1]),
            "seconds": time.perf_counter() - start}


def not_learning(history: list[dict], chance_level: float, baseline: dict | None,
                 settings) -> str | None:
    """The warning, once a fifth of the epochs have passed (``NOT_LEARNING_SHARE``, at least
    ``NOT_LEARNING_EPOCHS``) and the best training accuracy so far is still near chance (less
    than ``NOT_LEARNING_MARGIN`` of the way to 1); ``None`` otherwise.  It names what to try:
    the small-folder recipe (unless ``settings`` are it already), a lower learning rate,
    pretrained weights."""
    from .settings import RECIPES

    if len(history) != max(NOT_LEARNING_EPOCHS, round(NOT_LEARNING_SHARE * settings.epochs)):
        return None
    best = max(h["train_accuracy"] for h in history)
    if best > chance_level + NOT_LEARNING_MARGIN * (1 - chance_level):
        return None
    line = (f" (the linear baseline reaches {baseline['val_accuracy']:.2f} on the validation "
            f"pictures)" if baseline else "")
    small = RECIPES["small_folder"]
    tries = [f"a lower --lr than {settings.lr:g}",
             "pretrained weights (--pretrained or --init FILE)"]
    if any(getattr(settings, k) != v for k, v in small.items() if k != "model_kwargs"):
        tries.insert(0, "the small-folder recipe (--recipe small_folder: a CoaT-Lite in small "
                        "patches, a gentler learning rate, longer training)")
    return (f"warning: after {len(history)} epochs the training accuracy is {best:.2f}, near "
            f"chance ({chance_level:.2f}): the model is not learning{line}. Try "
            f"{', '.join(tries[:-1])} or {tries[-1]}")
