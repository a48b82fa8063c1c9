"""What a model's accuracy is measured against: chance, a linear baseline on the pixels of the
same split, a small convnet trained on the same split -- and the warning when training accuracy
stays at chance.

    chance              the share of the most common class among the training labels
    linear_baseline     scikit-learn's logistic regression on the pixels, in seconds
    convnet_baseline    the course's small convnet (``training.convnet``), trained as the model
                        is: the same split, augmentation, epochs, batches and schedule
    not_learning        the warning when training accuracy stays near chance, naming what to try
    small_validation    the warning for a validation split too small to pick an epoch by

A transformer trained from scratch on a few hundred pictures can learn less than a straight line
through their pixels; the linear baseline says whether it did.  A small convnet says what a
model with a convnet's inductive biases learns from the same pictures in the same epochs: the
bar a transformer trained from scratch has to clear, and the teacher of ``--teacher auto``.  Both
are fitted on the same training split the model trains on (the linear baseline without
augmentation), scored on the same validation and test splits, and printed, written to
``metrics.json`` and (the linear one) drawn on ``curves.png`` beside the model's numbers.
Infrastructure: scikit-learn (``StandardScaler``, ``LogisticRegression``), not teaching code.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F

#: The baseline fits on at most this many training pictures (drawn at random, seed 0), so that
#: it takes seconds on a large folder too; its pixels are pooled to at most this many a side.
BASELINE_MAX_TRAIN = 5000
BASELINE_MAX_SIDE = 32
#: ...and stops after this many L-BFGS iterations: a bound on its time on a large folder (the
#: pixels of a few hundred pictures are separable, and the fit would go on sharpening a
#: boundary that already separates them).
BASELINE_MAX_ITER = 100
#: ``--baseline``: the yardsticks it can name.
#: The convnet yardstick's AdamW: its own learning rate and weight decay (what suits a small
#: convnet with BatchNorm); everything else is the run's.
CONVNET_LR = 2e-3
CONVNET_WEIGHT_DECAY = 0.05
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
    """Logistic regression (scikit-learn, on standardised pixels, one thread, at most
    ``BASELINE_MAX_ITER`` L-BFGS iterations) fitted on the training split's pictures and scored
    on the validation and test splits: ``{"val_accuracy", "test_accuracy", "train_images",
    "features", "iterations", "seconds"}``.  ``train_set`` should be the training split without
    augmentation."""
    from ..extras import require

    require("sklearn", "the linear baseline")
    import warnings

    from sklearn.exceptions import ConvergenceWarning
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
        classifier = make_pipeline(StandardScaler(),
                                   LogisticRegression(max_iter=BASELINE_MAX_ITER))
        iterations = 0
        if len(np.unique(y)) > 1:
            with warnings.catch_warnings():  # the iteration cap is the point, not a failure
                warnings.simplefilter("ignore", ConvergenceWarning)
                classifier.fit(x, y)
            iterations = int(np.max(classifier[-1].n_iter_))
        scores = {}
        for name, dataset in (("val", val_set), ("test", test_set)):
            xs, ys = _pixels(dataset)
            guess = classifier.predict(xs) if len(np.unique(y)) > 1 else np.full(len(ys), y[0])
            scores[f"{name}_accuracy"] = float((guess == ys).mean()) if len(ys) else 0.0
    return {**scores, "train_images": int(len(y)), "features": int(x.shape[1]),
            "iterations": iterations, "seconds": time.perf_counter() - start}


def convnet_baseline(train_set, val_loader, test_loader, settings, num_classes: int,
                     input_cfg: dict, device, log=print):
    """The course's small convnet (``training.convnet.SmallConvNet``) trained as the run's
    model is: on ``train_set`` (the training split, with the run's photo augmentation) in the
    same batches, the same affine augmentation per picture, the same epochs, warm-up, cosine
    schedule and label smoothing, by the same ``train_epoch`` and ``TorchRunner`` -- with its
    own AdamW learning rate and weight decay (``CONVNET_LR``, ``CONVNET_WEIGHT_DECAY``), in
    this process alone.  The epoch of the best validation accuracy (ties: the later) is
    tested once.  Returns ``(numbers, model)``: ``{"val_accuracy", "test_accuracy",
    "selected_epoch", "params", "seconds", "cpu_seconds"}`` and the selected convnet, in eval
    mode, with ``pretrained_cfg`` = ``input_cfg`` (the run's input: the teacher of
    ``--teacher auto`` sees the student's batch as it is).  The global random state is left as
    it was: the run's own model trains the same with or without it."""
    import copy
    from dataclasses import replace

    from .. import distributed
    from ..data import SeededSamples
    from .convnet import SmallConvNet
    from .recipe import count_params, train_epoch
    from .runners import TorchRunner

    start, cpu_start = time.perf_counter(), time.process_time()
    one = distributed.World()
    cnn_settings = replace(settings, lr=CONVNET_LR, weight_decay=CONVNET_WEIGHT_DECAY,
                           teacher=None, accum_steps=1, compile=False, backend="torch")
    batches = distributed.BatchShares(len(train_set), settings.batch_size, one, settings.seed)
    loader = torch.utils.data.DataLoader(SeededSamples(train_set, settings.seed),
                                         batch_sampler=batches, num_workers=settings.workers,
                                         persistent_workers=settings.workers > 0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        model = SmallConvNet(num_classes, in_chans=input_cfg["input_size"][0]).to(device)
        runner = TorchRunner(model, cnn_settings, len(loader), world=one, device=device,
                             log=log)
        best = (-1.0, None, 0)
        for epoch in range(settings.epochs):
            batches.set_epoch(epoch)
            train_epoch(runner, loader, cnn_settings, epoch, one, device, len(train_set))
            val = runner.evaluate(val_loader)["accuracy"]
            if val >= best[0]:
                best = (val, copy.deepcopy(model.state_dict()), epoch + 1)
    model.load_state_dict(best[1])
    test = runner.evaluate(test_loader)["accuracy"]
    model.eval().requires_grad_(False)
    model.pretrained_cfg = dict(input_cfg, architecture="SmallConvNet")
    numbers = {"val_accuracy": best[0], "test_accuracy": test, "selected_epoch": best[2],
               "params": count_params(model), "seconds": time.perf_counter() - start,
               "cpu_seconds": time.process_time() - cpu_start}
    return numbers, model


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


#: A validation split smaller than this makes the best epoch a noisy pick: a warning says so.
SMALL_VALIDATION = 100


def small_validation(val_images: int, train_images: int, carved: bool) -> str | None:
    """The warning for a validation split of fewer than :data:`SMALL_VALIDATION` pictures: one
    picture moves its accuracy by ``100 / val_images`` points, so the epoch it selects is partly
    chosen by chance and its accuracy overstates the test's.  It names the ``--val-fraction``
    that would hold out about that many (``carved``: the split is held out of the training
    pictures), or ``--select last``."""
    if val_images >= SMALL_VALIDATION:
        return None
    text = (f"warning: the validation split has {val_images} pictures: one picture moves its "
            f"accuracy by {100 / val_images:.1f} points, so the best epoch is partly picked by "
            f"chance and its validation accuracy overstates the test's")
    pool = val_images + train_images
    share = math.ceil(SMALL_VALIDATION / pool / 0.05 - 1e-9) * 0.05
    if carved and share <= 0.5:
        return (f"{text}; --val-fraction {share:.2f} holds out about {round(share * pool)} of "
                f"the {pool} training pictures, or --select last tests the last epoch instead")
    return (f"{text}; more validation pictures would help, or --select last tests the last "
            f"epoch instead")
