"""Training in the NumPy room: the loss and its gradients, AdamW, the learning-rate schedule and
one optimisation step -- the PyTorch trainer's recipe (``vit_scratch.training.recipe``), written
by hand.

    params = trainable_params(model)                       # {key: array}, updated in place
    optimizer = AdamW(params, weight_decay=0.3)            # decay as the PyTorch trainer's groups
    rng = np.random.default_rng(0)                         # stochastic depth's coin flips
    for step, (images, labels) in enumerate(batches):
        lr = lr_at(step, total, warmup, base=1.5e-3)       # warm-up, then cosine
        loss, correct, cross_entropy = train_step(model, optimizer, images, labels, lr,
                                                  label_smoothing=0.1, rng=rng)

What each piece mirrors, so a NumPy run and a PyTorch run of the same recipe take the same steps:

* :func:`loss_and_grads`: ``F.cross_entropy(model(images), labels, label_smoothing=ε)`` and
  ``loss.backward()`` -- the model's ``forward_with_cache`` / ``backward`` and
  ``layers.cross_entropy_forward`` / ``_backward``; with a teacher's labels, the recipe's hard
  distillation (:func:`hard_distillation`) through a distilled model's two heads;
* :class:`AdamW`: ``torch.optim.AdamW`` (Loshchilov & Hutter, "Decoupled Weight Decay
  Regularization", ICLR 2019, https://arxiv.org/abs/1711.05101), the same update in the same
  order of operations;
* :func:`decays`: the trainer's ``param_groups`` rule -- weight decay on tensors of two or more
  dimensions, except the model's own tokens and embeddings;
* ``lr_at``: the trainers' one schedule (``vit_scratch.schedule``), linear warm-up then cosine
  decay to 0.

The NumPy room trains with stochastic depth but no dropout (``backprop.check_trainable``).
"""
from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numpy as np

from .. import checkpoint_checks
from ..schedule import lr_at
from .backprop import Cache, check_backward, trainable_params
from ._fast import split_batch
from .layers import cross_entropy, cross_entropy_backward, cross_entropy_forward

__all__ = ["AdamW", "Step", "decays", "hard_distillation", "loss_and_grads", "lr_at", "train_step",
           "trainable_params"]


def decays(key: str, value: np.ndarray) -> bool:
    """Whether the PyTorch trainer applies weight decay to this parameter: tensors of two or
    more dimensions (weight matrices, kernels), except the model's own tokens and position
    embeddings (``model.no_weight_decay()``: its direct parameters, keys without a dot, e.g.
    ``cls_token``, ``pos_embed``).  Biases, norms and LayerScale vectors have one dimension."""
    return value.ndim >= 2 and "." in key


def check_rate(value, name: str) -> float:
    """A learning rate, weight decay or eps: a finite number >= 0 (NaN, infinite and negative
    values would turn the parameters into NaN or climb the loss)."""
    if isinstance(value, bool) or not (isinstance(value, (int, float, np.floating))
                                       and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _float_dtype(arrays: dict, what: str) -> np.dtype:
    """The one float dtype of ``arrays`` (float32 or float64), or a ``ValueError``."""
    return np.dtype(checkpoint_checks.check_param_dtypes({k: v.dtype.name for k, v in arrays.items()},
                                                         what))


class AdamW:
    """AdamW with decoupled weight decay, updating ``params`` ({key: array}) in place.

    One step with gradient g, learning rate η, weight decay λ (0 for the tensors
    :func:`decays` rules out), step count t:

        θ ← θ · (1 - η·λ)                                     decay, apart from the gradient
        m ← m + (1 - β₁)(g - m),   v ← β₂ v + (1 - β₂) g²      moment estimates
        θ ← θ - (η / (1 - β₁ᵗ)) · m / (√v / √(1 - β₂ᵗ) + ε)     bias-corrected step

    exactly as ``torch.optim.AdamW`` (its single-tensor path) computes it.  ``params`` must be
    all float32 or all float64 (mixed dtypes are refused), writable arrays -- the model's own
    (``backprop.trainable_params(model)``), so the model sees every update.  A key missing from
    a step's gradients is skipped, as PyTorch skips a parameter whose ``grad`` is None.
    """

    def __init__(self, params: dict, lr: float = 1e-3, weight_decay: float = 1e-2,
                 betas=(0.9, 0.999), eps: float = 1e-8, decay=None):
        if not isinstance(params, dict) or not params:
            raise ValueError("params must be a non-empty dict {key: array} "
                             "(backprop.trainable_params(model))")
        for key, value in params.items():
            if not isinstance(value, np.ndarray):
                raise ValueError(f"params[{key!r}] is a {type(value).__name__}, not a NumPy array")
            if not value.flags.writeable:
                raise ValueError(f"params[{key!r}] is read-only; AdamW updates the arrays in "
                                 f"place (copy them first)")
        self.dtype = _float_dtype(params, "AdamW params")
        for name, value in (("lr", lr), ("weight_decay", weight_decay), ("eps", eps)):
            check_rate(value, name)
        if not (len(betas) == 2 and all(0.0 <= b < 1.0 for b in betas)):
            raise ValueError(f"betas must be a pair in [0, 1), got {betas!r}")
        self.params = params
        self.lr, self.weight_decay, self.betas, self.eps = lr, weight_decay, tuple(betas), eps
        decay = decays if decay is None else decay
        self.decay = {k: bool(decay(k, v)) for k, v in params.items()}
        self.steps = 0  # optimisation steps taken
        self.exp_avg = {k: np.zeros_like(v) for k, v in params.items()}
        self.exp_avg_sq = {k: np.zeros_like(v) for k, v in params.items()}
        self.param_steps = {k: 0 for k in params}  # per tensor, as torch's state["step"]

    def step(self, grads: dict, lr: float | None = None) -> None:
        """Update every parameter that has a gradient in ``grads`` ({key: array}, the keys of
        ``params``), with learning rate ``lr`` (default: the one given at construction), checked
        as the constructor checks it, before anything is updated."""
        lr = self.lr if lr is None else check_rate(lr, "lr")
        unknown = [k for k in grads if k not in self.params]
        if unknown:
            raise ValueError(f"AdamW.step: gradients for keys it does not hold: {unknown[:5]}")
        for key, g in grads.items():
            p = self.params[key]
            if g.shape != p.shape or g.dtype != p.dtype:
                raise ValueError(f"AdamW.step: the gradient of {key} has shape {g.shape} "
                                 f"({g.dtype}), the parameter {p.shape} ({p.dtype})")
        beta1, beta2 = self.betas
        for key, g in grads.items():
            p, m, v = self.params[key], self.exp_avg[key], self.exp_avg_sq[key]
            self.param_steps[key] += 1
            t = self.param_steps[key]
            if self.decay[key] and self.weight_decay:
                p *= 1.0 - lr * self.weight_decay
            m += (1.0 - beta1) * (g - m)  # torch: exp_avg.lerp_(grad, 1 - beta1)
            v *= beta2
            v += (1.0 - beta2) * g * g  # torch: addcmul_(grad, grad, value=1 - beta2)
            step_size = lr / (1.0 - beta1 ** t)
            denom = np.sqrt(v) / (1.0 - beta2 ** t) ** 0.5
            denom += self.eps
            p += (-step_size * m) / denom  # torch: addcdiv_(exp_avg, denom, value=-step_size)
        self.steps += 1

    def state_dict(self) -> dict:
        """Everything a resumed run needs: the step counts and both moment estimates."""
        return {"steps": self.steps, "param_steps": dict(self.param_steps),
                "exp_avg": {k: v.copy() for k, v in self.exp_avg.items()},
                "exp_avg_sq": {k: v.copy() for k, v in self.exp_avg_sq.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output (same keys and shapes as ``params``)."""
        for name in ("exp_avg", "exp_avg_sq"):
            if set(state[name]) != set(self.params):
                raise ValueError(f"AdamW state {name} has other keys than params")
            for k, v in state[name].items():
                if np.shape(v) != self.params[k].shape:
                    raise ValueError(f"AdamW state {name}[{k!r}] has shape {np.shape(v)}, the "
                                     f"parameter {self.params[k].shape}")
        self.steps = int(state["steps"])
        self.param_steps = {k: int(state["param_steps"][k]) for k in self.params}
        self.exp_avg = {k: np.array(v, dtype=self.dtype) for k, v in state["exp_avg"].items()}
        self.exp_avg_sq = {k: np.array(v, dtype=self.dtype) for k, v in state["exp_avg_sq"].items()}


def _check_heads(logits, logits_dist) -> None:
    """The two heads of one model: the same images, the same classes."""
    if np.shape(logits_dist) != np.shape(logits):
        raise ValueError(f"logits_dist must have the shape of logits {np.shape(logits)} (the "
                         f"distillation head classifies the same images into the same classes), "
                         f"got shape {np.shape(logits_dist)}")


def hard_distillation(logits: np.ndarray, logits_dist: np.ndarray, labels: np.ndarray,
                      teacher_labels: np.ndarray, label_smoothing: float = 0.0) -> np.ndarray:
    """DeiT's hard distillation (Touvron et al. 2021, §4), the trainer's objective with a
    teacher (``vit_scratch.training.recipe.objective``): the class head learns the labels (with
    label smoothing), the distillation head the teacher's predicted classes,

        loss = ½ · CE(logits, labels, ε) + ½ · CE(logits_dist, teacher_labels)

    logits, logits_dist: (B, num_classes); labels, teacher_labels: (B,) ints.  -> a 0-d array,
    the mean over the batch."""
    _check_heads(logits, logits_dist)
    return (0.5 * cross_entropy(logits, labels, label_smoothing)
            + 0.5 * cross_entropy(logits_dist, teacher_labels))


def hard_distillation_forward(logits, logits_dist, labels, teacher_labels,
                              label_smoothing: float = 0.0):
    """:func:`hard_distillation` -> (loss, cache)."""
    _check_heads(logits, logits_dist)
    ce, c_ce = cross_entropy_forward(logits, labels, label_smoothing)
    ce_dist, c_dist = cross_entropy_forward(logits_dist, teacher_labels)
    loss = 0.5 * ce + 0.5 * ce_dist
    return loss, Cache("hard_distillation", loss, ce=c_ce, ce_dist=c_dist)


def hard_distillation_backward(dloss, cache: Cache):
    """A sum of two halves: each head gets half of ``dloss`` through its own cross-entropy,

        ∂L/∂logits = ½ · (p - t) / B,   ∂L/∂logits_dist = ½ · (p_dist - one_hot(y_t)) / B

    (p: the softmax of each head, t: the smoothed target).  -> (dlogits, dlogits_dist)."""
    dloss = check_backward("hard_distillation", dloss, cache)
    return (cross_entropy_backward(0.5 * dloss, cache.ce),
            cross_entropy_backward(0.5 * dloss, cache.ce_dist))


def loss_and_grads(model, images, labels, label_smoothing: float = 0.0, rng=None,
                   threads: int = 1, teacher_labels=None):
    """The mean cross-entropy (with label smoothing) of a NumPy model on a batch, and its
    gradient with respect to every parameter.

    model: a NumPy model of any family (its ``forward_with_cache`` and ``backward``);
    images: (B, C, H, W); labels: (B,) ints; rng: a ``np.random.Generator`` for stochastic
    depth (training mode), or None (no stochastic depth); threads: split the batch over this
    many threads (``_fast.split_batch``) -- each chunk's loss is a mean over the chunk, so
    its gradient is weighted by its share of the batch, and the chunks' gradients add up to
    the batch's.  The stochastic-depth masks are the same for any number of threads: each
    chunk takes its rows of draws made for the whole batch.  ``teacher_labels`` (B,): a
    teacher's predicted classes for a distilled model in distilled training (its
    ``forward_with_cache`` gives both heads): the loss is :func:`hard_distillation`, and the
    logits returned are the two heads' average, what the model predicts at inference.
    ->  (loss (float), {canonical key: gradient}, logits (B, num_classes))"""
    images = model.prepare_images(images)
    labels = np.asarray(labels)
    B = len(images)
    if labels.shape != (B,):
        raise ValueError(f"labels must have shape (B,) = ({B},) for {B} images, got shape "
                         f"{labels.shape}")
    draws = None if rng is None else _BatchDraws(rng, B)
    distilling = teacher_labels is not None
    if distilling:
        teacher_labels = np.asarray(teacher_labels)
        if teacher_labels.shape != (B,):
            raise ValueError(f"teacher_labels must have shape (B,) = ({B},), got shape "
                             f"{teacher_labels.shape}")
        if not getattr(model, "distilled_training", False):
            raise ValueError(f"teacher_labels need a distilled model in distilled training "
                             f"({model.name}: set_distilled_training(True))")

    def chunk(rows: np.ndarray):
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        logits, cache = model.forward_with_cache(
            images[lo:hi], rng=None if draws is None else draws.rows(lo, hi))
        share = (hi - lo) / B  # the chunk's weight in the batch mean
        if distilling:  # logits: the pair (class head, distillation head)
            loss, c_loss = hard_distillation_forward(*logits, labels[lo:hi],
                                                     teacher_labels[lo:hi], label_smoothing)
            dlogits = list(hard_distillation_backward(share, c_loss))
            logits = (logits[0] + logits[1]) / 2  # the prediction
        else:
            loss, c_loss = cross_entropy_forward(logits, labels[lo:hi], label_smoothing)
            dlogits = cross_entropy_backward(share, c_loss)
        _, grads = model.backward(dlogits, cache)
        return float(loss) * share, grads, logits

    if B == 0:
        raise ValueError("the batch is empty")
    parts = split_batch(chunk, np.arange(B), threads)
    loss = sum(part[0] for part in parts)
    grads = parts[0][1]
    for part in parts[1:]:
        for k, g in part[1].items():
            grads[k] += g
    return loss, grads, np.concatenate([part[2] for part in parts])


class _BatchDraws:
    """Stochastic depth's coin flips, shared by the chunks of a batch: the k-th draw is one
    ``rng.random(B)`` for the whole batch, made once (in order, under a lock), and a chunk
    takes its rows of it (:meth:`rows` -> an object with ``random(n)``, what
    ``layers.drop_path_mask`` calls)."""

    def __init__(self, rng: np.random.Generator, batch: int):
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)) "
                             f"or None, got {type(rng).__name__}")
        self.rng, self.batch, self.draws, self.lock = rng, batch, [], threading.Lock()

    def draw(self, k: int) -> np.ndarray:
        with self.lock:
            while len(self.draws) <= k:
                self.draws.append(self.rng.random(self.batch))
            return self.draws[k]

    def rows(self, lo: int, hi: int):
        return _ChunkDraws(self, lo, hi)


class _ChunkDraws:
    def __init__(self, shared: _BatchDraws, lo: int, hi: int):
        self.shared, self.lo, self.hi, self.count = shared, lo, hi, 0

    def random(self, n: int) -> np.ndarray:
        assert n == self.hi - self.lo
        self.count += 1
        return self.shared.draw(self.count - 1)[self.lo:self.hi]


class Step(NamedTuple):
    """What :func:`train_step` returns, as the PyTorch trainer's ``train_step``."""

    loss: float  # the objective: cross-entropy with label smoothing
    correct: int  # predictions that were right
    cross_entropy: float  # the plain cross-entropy, comparable with the validation loss


def train_step(model, optimizer: AdamW, images, labels, lr: float, label_smoothing: float = 0.0,
               rng=None, threads: int = 1, teacher_labels=None) -> Step:
    """One optimisation step on a batch: forward, loss, backward, AdamW at learning rate ``lr``.
    Returns ``Step(loss, correct, cross_entropy)``, as the PyTorch trainer's ``train_step``.

    A loss or gradient that is not finite stops training with a ``FloatingPointError`` naming
    the step, *before* the update: the weights stay those of the last good step.  A learning
    rate that is NaN, infinite or negative is refused before anything is computed.
    ``teacher_labels``: hard distillation (:func:`loss_and_grads`)."""
    check_rate(lr, "lr")
    loss, grads, logits = loss_and_grads(model, images, labels, label_smoothing, rng, threads,
                                         teacher_labels)
    step = optimizer.steps + 1
    if not math.isfinite(loss):
        raise FloatingPointError(f"the loss is {loss} at step {step}; training stopped before "
                                 f"the update (the weights are those after step {step - 1})")
    bad = [k for k, g in grads.items() if not np.isfinite(g).all()]
    if bad:
        raise FloatingPointError(f"the gradient of {bad[0]} is not finite at step {step} (loss "
                                 f"{loss:.4g}); training stopped before the update")
    optimizer.step(grads, lr)
    labels = np.asarray(labels)
    plain = (loss if label_smoothing == 0 and teacher_labels is None
             else float(cross_entropy(logits, labels)))
    return Step(loss, int((logits.argmax(axis=-1) == labels).sum()), plain)
