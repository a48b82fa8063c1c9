"""The recipe: what one optimisation step does, and how a model is evaluated -- a scaled-down
DeiT recipe (Touvron et al., "Training data-efficient image transformers & distillation through
attention", ICML 2021, https://arxiv.org/abs/2012.12877), written by hand to be read.

    param_groups     AdamW's groups: weight decay on weight matrices and kernels only
    lr_schedule      linear warm-up, then cosine decay to 0 (``vit_scratch.schedule.lr_at``'s
                     curve, as PyTorch's schedulers)
    objective        the loss a step minimises: cross-entropy with label smoothing, and with a
                     teacher, DeiT's hard distillation through the distillation head
    train_step       forward, the objective, backward (gradient accumulation, DDP), AdamW
    evaluate         mean cross-entropy and accuracy over a loader (added up over processes)
    epoch_seed       each epoch's dropout and stochastic depth, from (seed, epoch, rank)

Stochastic depth and dropout are the model's (its config); the augmentation is
``vit_scratch.data.random_affine``, applied by the loop, seeded per picture.  This is the PyTorch
backend's recipe; the NumPy backend computes the same step with the NumPy room
(``numpy_nn.training``), behind the same runner interface (``training.runners``).  Infrastructure: ``torch.optim.AdamW`` and its
schedulers, ``torch.distributed`` (``vit_scratch.distributed``).
"""
from __future__ import annotations

import warnings
from contextlib import nullcontext
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from .. import distributed
from ..data import affine_draws, random_affine


def count_params(model) -> int:
    """Parameters of ``model``, each tensor counted once (CoaT registers some twice)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def param_groups(model, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on weight matrices and kernels only -- not on biases, norms,
    LayerScale vectors, or the tokens and embeddings the model lists in ``no_weight_decay()``."""
    skip = model.no_weight_decay()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and name not in skip else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def lr_schedule(optimizer, total: int, warmup: int, done: int = 0):
    """``vit_scratch.schedule.lr_at``'s curve as PyTorch's schedulers
    (``torch.optim.lr_scheduler``): ``LinearLR`` for the warm-up, then ``CosineAnnealingLR``,
    chained by ``SequentialLR``; the same learning rates as ``lr_at`` to float rounding
    (tested).  Stepped ``done`` times: where a resumed run stopped (the schedule's length may
    have changed: ``--resume --epochs N``)."""
    from torch.optim import lr_scheduler

    cosine = lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, total - warmup))
    schedule = cosine
    if warmup > 0:
        ramp = lr_scheduler.LinearLR(optimizer, start_factor=1 / warmup, end_factor=1.0,
                                     total_iters=max(1, warmup - 1))
        schedule = lr_scheduler.SequentialLR(optimizer, [ramp, cosine], milestones=[warmup])
    with warnings.catch_warnings():  # stepping without optimizer steps, on purpose
        warnings.simplefilter("ignore", UserWarning)
        for _ in range(done):
            schedule.step()
    return schedule


class Step(NamedTuple):
    """What :func:`train_step` returns, for one process's share of the batch."""

    loss: float  # the objective: cross-entropy with label smoothing
    correct: int  # predictions that were right
    cross_entropy: float  # the plain cross-entropy, comparable with the validation loss


def objective(logits, labels: torch.Tensor, label_smoothing: float = 0.0,
              teacher_labels: torch.Tensor | None = None):
    """The loss a step minimises, summed over the images of ``logits`` (B, num_classes):
    cross-entropy with label smoothing.  :func:`train_step` divides it by the batch's image
    count, so that the parts of an accumulated batch add up to the batch's mean.

    With ``teacher_labels`` (B,), the teacher's predicted classes (``training.distillation``),
    ``logits`` is a distilled model's pair (class head, distillation head) and the loss is DeiT's
    hard distillation (Touvron et al. 2021, §4):

        ½ · CE(class head, labels, label smoothing) + ½ · CE(distillation head, teacher_labels)

    -- the smoothing on the true labels only, as DeiT's code does.  A student without a
    distillation token gives one tensor of logits, which learns both targets (DeiT's hard
    distillation on the class token alone, its Table 8):

        ½ · CE(logits, labels, label smoothing) + ½ · CE(logits, teacher_labels)"""
    if teacher_labels is None:
        return F.cross_entropy(logits, labels, label_smoothing=label_smoothing, reduction="sum")
    cls_logits, dist_logits = logits if isinstance(logits, tuple) else (logits, logits)
    return (0.5 * F.cross_entropy(cls_logits, labels, label_smoothing=label_smoothing,
                                  reduction="sum")
            + 0.5 * F.cross_entropy(dist_logits, teacher_labels, reduction="sum"))


def _rows(logits, keep):
    """``logits[keep]``, for each head when the model returns two (distilled training)."""
    if isinstance(logits, tuple):
        return tuple(t[keep] for t in logits)
    return logits[keep]


def _fp32(logits):
    """bf16 logits (one tensor, or a distilled model's pair) as fp32; fp64 stays."""
    if isinstance(logits, tuple):
        return tuple(_fp32(t) for t in logits)
    return logits if logits.dtype == torch.float64 else logits.float()


def train_step(model, images, labels, optimizer, label_smoothing: float = 0.0,
               autocast_dtype: torch.dtype | None = None, accum_steps: int = 1,
               counted: torch.Tensor | None = None, divisor: float | None = None,
               teacher=None, scaler=None) -> Step:
    """One optimisation step on a batch: the mean loss over its images, its gradient, AdamW.

    ``accum_steps`` > 1 splits the batch into that many parts and adds their gradients up
    (each part's summed loss over the batch's image count) before the one step: the same step
    with less memory.  Under DDP, only the last part's backward averages the gradients of the
    processes (``no_sync`` before).

    Under DDP each process holds its share of a global batch, and DDP averages the processes'
    gradients: so that the step is the global batch's mean, each share's summed loss is divided
    by ``divisor`` = the global batch's image count / the number of processes (default: this
    batch's image count).  ``counted`` (B,) bool marks the images the step counts; a stand-in
    for an empty share (``distributed.BatchShares``) counts none, adds nothing to the loss and
    still takes part in the gradient exchange.  The returned ``Step`` is over the counted
    images (zeros when there are none).

    ``teacher``: images -> the teacher's classes (``distillation.Teacher``): the objective is
    then hard distillation.  For a model in distilled training (it returns both heads) the
    accuracy and plain cross-entropy are those of the two heads' average, what the model
    predicts at inference.

    ``scaler``: a ``torch.amp.GradScaler``, for fp16 autocast: each part's loss is multiplied
    by its scale before the backward pass (so that small gradients survive in fp16), and
    ``scaler.step`` divides the gradients by it again before AdamW's step -- or skips the step
    when a gradient overflowed, and lowers the scale (``scaler.update``)."""
    n_counted = len(labels) if counted is None else int(counted.sum())
    divisor = max(1, n_counted) if divisor is None else divisor
    counted = torch.ones_like(labels, dtype=torch.bool) if counted is None else counted
    parts = [(x, y, c) for x, y, c in zip(images.tensor_split(accum_steps),
                                          labels.tensor_split(accum_steps),
                                          counted.tensor_split(accum_steps)) if len(y)]
    optimizer.zero_grad(set_to_none=True)
    loss_sum, ce_sum, correct = 0.0, 0.0, 0
    for i, (x, y, c) in enumerate(parts):
        last = i == len(parts) - 1
        with (nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()):
            with torch.autocast(x.device.type, dtype=autocast_dtype or torch.bfloat16,
                                enabled=autocast_dtype is not None):
                targets = None if teacher is None else teacher(x)  # eval mode, no_grad
                logits = _fp32(model(x))  # bf16 -> fp32
            logits, y = _rows(logits, c), y[c]
            targets = None if targets is None else targets[c]
            loss = objective(logits, y, label_smoothing, targets) / divisor
            (loss if scaler is None else scaler.scale(loss)).backward()
        loss_sum += loss.item() * divisor
        with torch.no_grad():
            prediction = (logits[0] + logits[1]) / 2 if isinstance(logits, tuple) else logits
            ce_sum += F.cross_entropy(prediction, y, reduction="sum").item()
            correct += (prediction.argmax(-1) == y).sum().item()
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)  # unscales the gradients; skipped if one is not finite
        scaler.update()
    mean = max(1, n_counted)
    return Step(loss_sum / mean, correct, ce_sum / mean)


@torch.no_grad()
def evaluate(model, loader, device, autocast_dtype: torch.dtype | None = None) -> dict:
    """Mean cross-entropy and accuracy of ``model`` over ``loader``, and the image count."""
    model.eval()
    loss_sum, correct, count = 0.0, 0, 0
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        with torch.autocast(device.type, dtype=autocast_dtype or torch.bfloat16,
                            enabled=autocast_dtype is not None):
            logits = model(images).float()
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(-1) == labels).sum().item()
        count += len(labels)
    return {"loss": loss_sum / max(1, count), "accuracy": correct / max(1, count),
            "count": count}


def evaluate_everywhere(model, loader, device, autocast_dtype=None) -> dict:
    """:func:`evaluate` of this process's share, added up over all processes."""
    part = evaluate(model, loader, device, autocast_dtype)
    loss_sum, correct, count = distributed.sum_over_processes(
        [part["loss"] * part["count"], part["accuracy"] * part["count"], part["count"]], device)
    return {"loss": loss_sum / max(1, count), "accuracy": round(correct) / max(1, count),
            "count": round(count)}


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """The seed of PyTorch's global generator for one epoch of one process -- dropout and
    stochastic depth, which each process draws for its own share of a batch -- drawn from
    ``(seed, epoch, rank)`` by NumPy's ``SeedSequence``: a resumed run needs no saved random
    state.  (The augmentation is seeded per picture: ``vit_scratch.data.SeededSamples``.)"""
    return int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1)[0])


def train_epoch(runner, batches, settings, epoch: int, world, device,
                images_in_all: int) -> dict:
    """One pass over this process's share of the training data (``batches``: a loader over
    ``SeededSamples`` with ``distributed.BatchShares``): the augmentation and a step of the
    runner per batch; returns the epoch's record (loss, plain cross-entropy and accuracy, added
    up over all processes, each image counted once, and the last learning rate).

    Every picture's augmentation is seeded by ``(seed, epoch, index)``
    (``data.affine_draws``, ``data.SeededSamples``), so any number of processes augments it the
    same way; dropout and stochastic depth draw from PyTorch's global generator, seeded by
    ``(seed, epoch, rank)`` (``recipe.epoch_seed``)."""
    torch.manual_seed(epoch_seed(settings.seed, epoch, world.rank))
    runner.seed(epoch_seed(settings.seed, epoch, world.rank))  # the NumPy room's own streams
    runner.train()
    sums = np.zeros(4)  # loss, cross-entropy (both summed over images), correct, images
    for step_index, (images, labels, indices, counted) in enumerate(batches):
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        images = random_affine(images, settings.rotate, settings.translate, settings.scale,
                               draws=affine_draws(settings.seed, epoch, indices))
        batch_images = min(settings.batch_size,
                           images_in_all - step_index * settings.batch_size)
        lr = runner.lr
        step = runner.step(images, labels, counted.to(device),
                           batch_images / world.size if world.size > 1 else None)
        n = int(counted.sum())
        sums += (step.loss * n, step.cross_entropy * n, step.correct, n)
        if hasattr(batches, "set_postfix"):  # the progress bar
            batches.set_postfix(loss=f"{step.loss:.3f}", lr=f"{lr:.2e}", refresh=False)
    loss, cross_entropy, correct, count = distributed.sum_over_processes(sums.tolist(), device)
    return {"epoch": epoch + 1, "lr": lr, "train_loss": loss / count,
            "train_cross_entropy": cross_entropy / count, "train_accuracy": correct / count}
