"""Who computes each step: the two backends of the trainer, behind one interface.

``--backend torch`` is :class:`TorchRunner` (PyTorch's autograd and ``torch.optim.AdamW``, on any
device, under torchrun in several processes); ``--backend numpy`` is :class:`NumpyRunner` (the
NumPy room's hand-written backward passes and AdamW, on the CPU in fp32).  The loop
(``training.loop``) never asks which one it has; both answer::

    Runner.compute_device(settings)   the device the steps run on
    Runner(model, settings, steps, state=None, world=World(), device=cpu, log=print,
           teacher=None)
        model      the PyTorch model of the run: its weights are the ones kept and saved
        steps      optimisation steps per epoch (the schedule's length)
        state      the saved trainer state of a resumed run (the optimiser's state is restored)
        teacher    the loop's ``distillation.Teacher`` (``--teacher``), else loaded here
    runner.train()                    training mode for the epoch
    runner.seed(seed)                 the epoch's seed for the runner's own random streams
    runner.step(images, labels, counted, divisor)
                                      one optimisation step at ``runner.lr``, then the
                                      schedule's step -> ``Step(loss, correct, cross_entropy)``
                                      (``recipe.train_step``: the counted images, the divisor
                                      of a share of a global batch)
    runner.evaluate(loader)           {"loss", "accuracy", "count"}, added up over processes
    runner.push(model)                the runner's weights into ``model`` (before saving)
    runner.pull(model)                ``model``'s weights into the runner (the selected epoch's)
    runner.optimizer                  its ``state_dict()`` goes into ``trainer_state.pt``
    runner.scaler                     fp16's ``torch.amp.GradScaler`` or None: its
                                      ``state_dict()`` goes into ``trainer_state.pt`` too
    runner.autocast_dtype, runner.label   for the log line (``None`` / ``" in NumPy"``)
    runner.teacher                    ``--teacher``'s model (``distillation.Teacher``) or None:
                                      with one, every step is hard distillation

A run is the same for both: the settings, data loaders, augmentation, progress bar, validation,
run folder and ``--resume``; PyTorch stays the NumPy backend's data pipeline and checkpoint
writer.  The NumPy backend's images and labels cross into NumPy per batch; its stochastic depth
draws from a NumPy generator seeded per epoch like PyTorch's; its BLAS runs on one thread
(threadpoolctl, a scikit-learn dependency) while ``--threads`` split each batch
(``numpy_nn._fast.split_batch``): BLAS threads spinning on busy cores would only burn CPU time.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from .. import distributed
from ..schedule import LrSchedule
from .distillation import load_teacher
from .recipe import evaluate_everywhere, lr_schedule, param_groups, train_step
from .settings import needs_grad_scaler, resolve_device, resolve_precision, warmup_epochs


def _schedule_steps(settings, steps: int, state) -> dict:
    """The schedule's length, warm-up and the steps already taken (a resumed run), in steps."""
    done = int(state["epoch"]) * steps if state is not None else 0
    return dict(total=settings.epochs * steps, warmup=round(warmup_epochs(settings) * steps),
                done=done)


class TorchRunner:
    """PyTorch computes each step: autograd, ``torch.optim.AdamW`` on ``recipe.param_groups``,
    PyTorch's schedulers (``recipe.lr_schedule``), bf16 or fp16 autocast where ``--precision``
    asks for it (fp16 with ``torch.amp.GradScaler``, whose state a resumed run restores); the
    model wrapped in ``DistributedDataParallel`` under torchrun, and ``torch.compile``-d
    on a GPU with ``--compile``.  Evaluation runs on the model itself (under DDP: each
    process's share, added up; no gradient averaging needed)."""

    label = ""

    @staticmethod
    def compute_device(settings) -> torch.device:
        return resolve_device(settings.device)

    def __init__(self, model, settings, steps: int, state=None,
                 world: distributed.World = distributed.World(), device=None, log=print,
                 teacher=None):
        self.settings, self.device = settings, torch.device("cpu") if device is None else device
        self.autocast_dtype = resolve_precision(settings.precision, self.device)
        self.optimizer = torch.optim.AdamW(param_groups(model, settings.weight_decay),
                                           lr=settings.lr)
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scaler = None
        if needs_grad_scaler(self.autocast_dtype):
            self.scaler = torch.amp.GradScaler(self.device.type)
            if state is not None and state.get("grad_scaler"):  # a run that trained in fp16
                self.scaler.load_state_dict(state["grad_scaler"])
        self.schedule = lr_schedule(self.optimizer, **_schedule_steps(settings, steps, state))
        self.teacher = teacher if teacher is not None else load_teacher(settings, model,
                                                                         self.device, log)
        if self.teacher is not None and getattr(model.cfg, "distilled", False):
            model.set_distilled_training(True)  # training mode: both heads' logits
        self.trainer = self.evaluator = model
        if world.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            # a class token's gradient is a slice of a larger one: DDP copies it into its
            # bucket and says so once; a note on speed for its developers, not an error
            warnings.filterwarnings("ignore", message="Grad strides do not match bucket view",
                                    category=UserWarning)
            self.trainer = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if settings.compile:
            if self.device.type == "cuda":
                self.trainer = torch.compile(self.trainer)
                self.evaluator = self.trainer if world.size == 1 else model
            else:
                log("--compile: skipped (torch.compile is used on a GPU only)")

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def train(self) -> None:
        self.trainer.train()

    def seed(self, seed: int) -> None:
        """Nothing: PyTorch's global generator, which the loop seeds, draws dropout and
        stochastic depth."""

    def step(self, images: torch.Tensor, labels: torch.Tensor, counted=None, divisor=None):
        s = self.settings
        step = train_step(self.trainer, images, labels, self.optimizer, s.label_smoothing,
                          self.autocast_dtype, s.accum_steps, counted, divisor, self.teacher,
                          self.scaler)
        self.schedule.step()
        return step

    def evaluate(self, loader) -> dict:
        return evaluate_everywhere(self.evaluator, loader, self.device, self.autocast_dtype)

    def push(self, model) -> None:
        """Nothing: the runner trains ``model`` itself."""

    def pull(self, model) -> None:
        """Nothing: the runner evaluates ``model`` itself."""


class NumpyRunner:
    """The NumPy room computes each step: the model's ``forward_with_cache`` and ``backward``,
    AdamW and the loss of ``numpy_nn.training`` (``train_step``), on float copies of the
    PyTorch model's weights (no shared memory; :meth:`push` and :meth:`pull` copy them across),
    the schedule ``vit_scratch.schedule.LrSchedule`` (``lr_at``'s curve, as PyTorch's
    schedulers).  ``runner(images)`` gives the logits (evaluation: no stochastic depth).

    With ``--teacher``, the NumPy student learns through both heads
    (``numpy_nn.training.hard_distillation``) and the teacher stays a PyTorch model, run on the
    CPU under ``no_grad``: it only predicts classes, so which room computes its forward changes
    nothing the student learns, any model the library can load can teach (its weights are read
    as the trainer reads every checkpoint), and PyTorch's forward is the faster one -- the
    NumPy backend already keeps PyTorch for its data pipeline and checkpoints."""

    label = " in NumPy"
    autocast_dtype = scaler = None

    @staticmethod
    def compute_device(settings) -> torch.device:
        return torch.device("cpu")

    def __init__(self, model, settings, steps: int, state=None,
                 world: distributed.World = distributed.World(), device=None, log=print,
                 teacher=None):
        from threadpoolctl import ThreadpoolController

        from ..models import build_numpy_model, lookup
        from ..numpy_nn.backprop import check_trainable

        params = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
        family, spec = lookup(settings.model)
        self.model = build_numpy_model(family, spec, model.cfg, params)  # model's checked cfg
        check_trainable(self.model, np.random.default_rng(0))
        self.teacher = teacher if teacher is not None else load_teacher(
            settings, model, torch.device("cpu"), log)  # PyTorch, on the CPU
        if self.teacher is not None:
            self.model.set_distilled_training(True)  # forward_with_cache: both heads' logits
        self.settings, self.training = settings, True
        self.rng = np.random.default_rng(0)
        self.blas = ThreadpoolController()
        self.optimizer = NumpyAdamW(self.model, settings.lr, settings.weight_decay)
        if state is not None:
            self.optimizer.load_state_dict(state["optimizer"])
        self.schedule = LrSchedule(self.optimizer, **_schedule_steps(settings, steps, state))

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def train(self) -> "NumpyRunner":
        self.training = True
        return self

    def eval(self) -> "NumpyRunner":
        self.training = False
        return self

    def seed(self, seed: int) -> None:
        """Seed stochastic depth's coin flips (the loop seeds each epoch)."""
        self.rng = np.random.default_rng(seed)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        """The logits of a batch (evaluation: no stochastic depth)."""
        with self.blas.limit(limits=1, user_api="blas"):
            return torch.from_numpy(self.model(images.detach().cpu().numpy()))

    def step(self, images: torch.Tensor, labels: torch.Tensor, counted=None, divisor=None):
        """One training step in NumPy at :attr:`lr`, then the schedule's step; a loss or
        gradient that is not finite raises ``FloatingPointError`` naming the step, before the
        update.  (One process: every image of a batch counts, ``counted`` and ``divisor`` are
        the batch's own.)"""
        from ..numpy_nn import training

        targets = None if self.teacher is None else self.teacher(images).numpy()
        with self.blas.limit(limits=1, user_api="blas"):
            step = training.train_step(
                self.model, self.optimizer.adamw, images.detach().cpu().numpy(),
                labels.detach().cpu().numpy(), self.lr, self.settings.label_smoothing,
                rng=self.rng if self.training else None,
                threads=max(1, torch.get_num_threads()), teacher_labels=targets)
        self.schedule.step()
        return step

    def evaluate(self, loader) -> dict:
        return evaluate_everywhere(self, loader, torch.device("cpu"))

    def push(self, model) -> None:
        """Copy the NumPy weights into the PyTorch ``model`` (``load_state_dict`` copies)."""
        model.load_state_dict({k: torch.from_numpy(self.model.params[k])
                               for k in model.state_dict()})

    def pull(self, model) -> None:
        """Copy the PyTorch ``model``'s weights into the NumPy params, in place (the optimiser
        keeps updating the same arrays)."""
        for k, v in model.state_dict().items():
            self.model.params[k][...] = v.detach().cpu().numpy()


class NumpyAdamW:
    """``numpy_nn.training.AdamW`` on a NumPy model's parameters (weight decay on the tensors
    ``training.decays`` picks: the PyTorch recipe's ``param_groups``), with the optimiser
    surface the trainer uses: a ``param_groups[0]["lr"]`` that ``LrSchedule`` sets each step,
    and a ``state_dict`` of tensors that ``trainer_state.pt`` stores
    (``torch.load(weights_only=True)`` reads tensors, not NumPy arrays)."""

    def __init__(self, numpy_model, lr: float, weight_decay: float):
        from ..numpy_nn import training

        self.adamw = training.AdamW(training.trainable_params(numpy_model), lr=lr,
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


#: ``--backend`` -> its runner.
RUNNERS = {"torch": TorchRunner, "numpy": NumpyRunner}
