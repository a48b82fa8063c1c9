"""The learning-rate curve of both trainers (PyTorch's and the NumPy room's), in one torch-free
function: linear warm-up to the peak, then cosine decay to 0 (the DeiT recipe; Touvron et al.,
"Training data-efficient image transformers & distillation through attention", ICML 2021,
https://arxiv.org/abs/2012.12877; the cosine from Loshchilov & Hutter, "SGDR: Stochastic
Gradient Descent with Warm Restarts", ICLR 2017, https://arxiv.org/abs/1608.03983).

    lr = lr_at(step, total, warmup, base)      # step 0, 1, ..., total - 1

:class:`LrSchedule` sets it on an optimiser's ``param_groups`` once per step, as PyTorch's
schedulers do (the NumPy backend's schedule; the PyTorch backend's is
``training.recipe.lr_schedule``, PyTorch's own schedulers, tested equal to this curve).
"""
from __future__ import annotations

import math

__all__ = ["LrSchedule", "lr_at"]


def lr_at(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up to ``base`` over ``warmup`` steps, then cosine decay to 0 at ``total``:

        lr = base · (step + 1) / warmup                          step < warmup
        lr = base · ½ (1 + cos(π · (step - warmup) / (total - warmup)))   after"""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1.0 + math.cos(math.pi * min(1.0, progress)))


class LrSchedule:
    """:func:`lr_at`'s curve on an optimiser with ``param_groups`` (dicts with an ``"lr"``):
    the learning rate of step ``done`` is set now, and :meth:`step` moves to the next one.
    ``done``: the steps already taken (a resumed run)."""

    def __init__(self, optimizer, total: int, warmup: int, done: int = 0):
        self.optimizer, self.total, self.warmup = optimizer, total, warmup
        self.base = [group["lr"] for group in optimizer.param_groups]
        self.done = done
        self._set()

    def _set(self) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base):
            group["lr"] = lr_at(self.done, self.total, self.warmup, base)

    def step(self) -> None:
        self.done += 1
        self._set()
