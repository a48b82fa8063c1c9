"""The trainer's NumPy backend: ``python -m vit_scratch.train --backend numpy ...``.

The run is the PyTorch trainer's (``vit_scratch.train``): the same settings, data loaders,
augmentation, progress bar, validation, run folder and ``--resume``.  Only the arithmetic
moves to the NumPy room: every forward, backward and AdamW step is ``vit_scratch.numpy_nn``'s
(``numpy_nn.training.train_step``), on float copies of the PyTorch model's weights.

* :class:`NumpyRunner` stands where the trainer's ``runner`` stands: ``runner(images)`` gives
  the logits (evaluation), :meth:`NumpyRunner.step` one training step.  Its NumPy model's
  params are copies of the PyTorch model's state_dict (no shared memory); :meth:`push` writes
  them back into the PyTorch model before anything is saved or compared (so the checkpoint
  files and the best epoch's weights are the usual ones, loadable by both rooms), and
  :meth:`pull` reads them from it (the selected epoch's weights, before the test).
* :class:`NumpyAdamW` is ``numpy_nn.training.AdamW`` behind the surface the trainer uses: a
  ``param_groups[0]["lr"]`` that ``vit_scratch.schedule.LrSchedule`` sets each step, and a
  ``state_dict`` of tensors that ``trainer_state.pt`` stores (``torch.load(weights_only=True)``
  reads tensors, not NumPy arrays).

The images and labels come from PyTorch's loaders (infrastructure) and cross into NumPy per
batch.  Stochastic depth draws from a NumPy generator seeded per epoch like PyTorch's.  BLAS
runs on one thread (threadpoolctl, a scikit-learn dependency): the trainer's ``--threads`` split
each batch instead (``numpy_nn._fast.split_batch``), and BLAS threads that spin on busy cores
would only burn CPU time.
"""
from __future__ import annotations

import numpy as np
import torch
from threadpoolctl import ThreadpoolController

from .models import create_numpy_model
from .numpy_nn import training
from .numpy_nn.backprop import check_trainable, trainable_params

__all__ = ["NumpyAdamW", "NumpyRunner"]


class NumpyRunner:
    """A NumPy model that trains in place of the PyTorch ``model`` it was copied from.

    ``name`` and ``kwargs``: what built ``model`` (``create_model(name, **kwargs)``);
    ``threads``: a callable giving how many threads split each batch (read at every step, as
    the trainer changes its thread count between epochs)."""

    def __init__(self, model: torch.nn.Module, name: str, kwargs: dict, threads=lambda: 1):
        params = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
        self.model = create_numpy_model(name, params, **kwargs)
        check_trainable(self.model, np.random.default_rng(0))
        self.threads = threads
        self.training = True
        self.rng = np.random.default_rng(0)
        self.blas = ThreadpoolController()

    def train(self) -> "NumpyRunner":
        self.training = True
        return self

    def eval(self) -> "NumpyRunner":
        self.training = False
        return self

    def manual_seed(self, seed: int) -> None:
        """Seed stochastic depth's coin flips (the trainer seeds each epoch)."""
        self.rng = np.random.default_rng(seed)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """The logits of a batch (evaluation: no stochastic depth)."""
        with self.blas.limit(limits=1, user_api="blas"):
            return torch.from_numpy(self.model(images.detach().cpu().numpy()))

    def step(self, images: torch.Tensor, labels: torch.Tensor, optimizer: "NumpyAdamW",
             label_smoothing: float = 0.0) -> training.Step:
        """One training step in NumPy at the learning rate ``optimizer.param_groups[0]``
        holds; a loss or gradient that is not finite raises ``FloatingPointError`` naming the
        step, before the update."""
        with self.blas.limit(limits=1, user_api="blas"):
            return training.train_step(
                self.model, optimizer.adamw, images.detach().cpu().numpy(),
                labels.detach().cpu().numpy(), optimizer.param_groups[0]["lr"],
                label_smoothing, rng=self.rng if self.training else None,
                threads=max(1, int(self.threads())))

    def push(self, model: torch.nn.Module) -> None:
        """Copy the NumPy weights into the PyTorch ``model`` (``load_state_dict`` copies)."""
        model.load_state_dict({k: torch.from_numpy(self.model.params[k])
                               for k in model.state_dict()})

    def pull(self, model: torch.nn.Module) -> None:
        """Copy the PyTorch ``model``'s weights into the NumPy params, in place (the optimiser
        keeps updating the same arrays)."""
        for k, v in model.state_dict().items():
            self.model.params[k][...] = v.detach().cpu().numpy()


class NumpyAdamW:
    """``numpy_nn.training.AdamW`` on a :class:`NumpyRunner`'s parameters (weight decay on the
    tensors ``training.decays`` picks: the PyTorch trainer's ``param_groups``), with the
    optimiser surface the trainer uses."""

    def __init__(self, runner: NumpyRunner, lr: float, weight_decay: float):
        self.adamw = training.AdamW(trainable_params(runner.model), lr=lr,
                                    weight_decay=weight_decay)
        self.param_groups = [{"lr": lr}]

    def state_dict(self) -> dict:
        """AdamW's state with tensors for arrays (what ``trainer_state.pt`` can hold)."""
        state = self.adamw.state_dict()
        for name in ("exp_avg", "exp_avg_sq"):
            state[name] = {k: torch.from_numpy(v) for k, v in state[name].items()}
        return {"numpy_adamw": state}

    def load_state_dict(self, state: dict) -> None:
        if "numpy_adamw" not in state:
            raise ValueError("--resume: the run's optimiser state is PyTorch's, not the NumPy "
                             "backend's (resume it with --backend torch)")
        state = dict(state["numpy_adamw"])
        for name in ("exp_avg", "exp_avg_sq"):
            state[name] = {k: v.numpy() for k, v in state[name].items()}
        self.adamw.load_state_dict(state)
