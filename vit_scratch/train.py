"""Train any registered model on offline data -- the course's training command.

    python -m vit_scratch.train --model coat_lite_digits --data digits --epochs 16 --out runs/lite
    python -m vit_scratch.train --model coat_lite_digits --data my_pictures/ --out runs/mine
    python -m vit_scratch.train --out runs/lite --resume            # after a crash or Ctrl-C
    python -m vit_scratch.train --out runs/lite --resume --epochs 24   # extend a finished run
    torchrun --standalone --nproc_per_node 2 -m vit_scratch.train ...  # several processes
    python -m vit_scratch.train --help                  # every option, with its default

``train(settings)`` reads top to bottom: set-up, the loop, save.

1. **Set-up.**  Every setting is checked (model and data names, numbers, the device, the
   ``--out`` folder) before anything is built, and a run is never written over unless
   ``--overwrite``.  The model (``--model``, ``--model-arg key=value``) gets as many classes as
   the data has; the data follows the model: resized to its input size and normalised with its
   mean and std (``vit_scratch.data.make_datasets``).  ``--val-fraction`` of each class of the
   training split is held out for validation (stratified).
2. **The loop.**  A scaled-down DeiT recipe: AdamW with weight decay on the weight matrices only
   (the model names the tokens and embeddings that skip it, ``model.no_weight_decay()``),
   linear warm-up then cosine decay, label smoothing, stochastic depth, and optionally a random
   affine augmentation (``--rotate``, ``--translate``, ``--scale``;
   ``vit_scratch.data.random_affine``) and, for photos, flips, random resized crops and colour
   jitter (torchvision's transforms v2) -- on a GPU in bf16 autocast, optionally
   ``torch.compile``-d; under ``torchrun`` in several processes
   (``vit_scratch.distributed``).  After every epoch the validation split is evaluated, the
   best epoch kept (``--patience`` stops early), and the run folder
   (``vit_scratch.run_folder``) gets the weights and everything ``--resume`` needs.
3. **Save.**  The test split is evaluated once, on the checkpoint ``--select`` chooses (the
   best validation accuracy, or the last epoch); then ``metrics.json`` and ``curves.png``.

``--backend numpy`` runs the same loop with every step computed by the NumPy room -- its
hand-written backward passes and AdamW (``vit_scratch.numpy_backend``) -- and writes the same
run folder: PyTorch stays the data pipeline and the checkpoint writer.

Which is which: the recipe (``param_groups``, ``lr_at`` (``vit_scratch.schedule``),
``train_step``, ``evaluate``, the affine augmentation) is written here by hand, to be read; the infrastructure comes from the
libraries of its field -- ``torch.utils.data`` (loaders, ``DistributedSampler``),
``torch.distributed`` and ``DistributedDataParallel``, torchvision's ``ImageFolder`` and
transforms v2, scikit-learn's stratified split and metrics, tqdm, matplotlib.  The schedule is
``lr_at`` rather than ``torch.optim.lr_scheduler``: PyTorch's ``LinearLR`` + ``CosineAnnealingLR``
chained with ``SequentialLR`` give the same curve only up to the off-by-one of their step
counts, and one formula that is set per step is easier to read and to resume.

The settings are one dataclass, :class:`TrainSettings`: each field carries its help text, and
the command line is generated from it.  Its defaults are the recipe for scikit-learn's 8×8
digits (README, "Training"): 40 epochs of batches of 32, peak learning rate 1.5e-3, weight decay
0.3, label smoothing 0.1, and a gentle random affine augmentation (±8°, ±5% shift, ±8% zoom).
It works together with the ``*_digits`` configs, which enlarge the digits (bilinear) before
cutting patches -- ``vit_digits`` sees 24×24 images in 6×6 patches: the same 4×4 grid of tokens
as 2×2 patches of the original, but each patch overlaps its neighbours a little and the
sub-pixel augmentation stays sharp.  On the 8×8 original the same augmentation blurs and a
one-pixel shift moves a digit by an eighth of its width; there, no augmentation was best
(~96%).  Enlarged and augmented: ~98.8%.
"""
from __future__ import annotations

import os

if __name__ == "__main__":  # the command line: set before PyTorch starts its OpenMP threads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (see auto_threads)

import argparse
import ast
import math
import sys
import time
import typing
import warnings
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from . import distributed, run_folder
from .data import (ModelTransform, check_data, data_classes, make_datasets, random_affine,
                   validation_split)
from .models import create_model, get_config
from .run_folder import BEST, CHECKPOINT, CURVES, METRICS, STATE
from .schedule import LrSchedule, lr_at  # noqa: F401 (lr_at: the curve lr_schedule follows)
from .weights import CheckpointError, load_checkpoint, load_pretrained


def parse_model_arg(text: str) -> tuple[str, object]:
    """``"depth=6"`` -> ``("depth", 6)``; values are Python literals, else strings."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--model-arg takes KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def setting(default, help: str, *, metavar: str | None = None, choices=None,
            flag: str | None = None, parse=None):
    """A field of :class:`TrainSettings` with what its command-line option needs: the help
    text, and optionally the metavar, the choices, another flag than ``--field-name`` and a
    parser of one value (``parse``; the option is then repeatable and collects a dict)."""
    metadata = {"help": help, "metavar": metavar, "choices": choices, "flag": flag,
                "parse": parse}
    if default is dict:
        return field(default_factory=dict, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class TrainSettings:
    """Everything that fixes a training run; ``python -m vit_scratch.train --help`` lists the
    same fields as options.  The defaults are the README's digits recipe."""

    model: str = setting(
        "vit_digits", "model to train: any registered name (python -c 'import vit_scratch; "
        "print(vit_scratch.list_models())')", metavar="NAME")
    model_kwargs: dict = setting(
        dict, "override a field of the model's config, repeatable (e.g. --model-arg depth=6 "
        "--model-arg embed_dim=96)", flag="--model-arg", metavar="KEY=VALUE",
        parse=parse_model_arg)
    init: str | None = setting(
        None, "start from the weights in this checkpoint file (fine-tuning); its head is "
        "replaced when the number of classes differs (default: none, train from scratch)",
        metavar="FILE")
    pretrained: bool = setting(
        False, "start from the weights timm publishes for --model, fetched from the Hugging Face "
        "Hub once and then cached (the [hub] extra); their head is replaced when the number of "
        "classes differs")
    data: str = setting(
        "digits", "'digits' (scikit-learn's 8×8 digits), 'digits_on_canvas' (the localisation "
        "set), or a folder of pictures with one subfolder per class (train/ and test/ "
        "subfolders, and val/, if present, are the split)", metavar="NAME|DIR")
    test_fraction: float = setting(
        0.2, "share of each class held out for testing (when the data has no split)",
        metavar="F")
    val_fraction: float = setting(
        0.1, "share of each class of the training split held out for validation: it selects "
        "the checkpoint (--select) and stops early (--patience); the test split is used once, "
        "at the end", metavar="F")
    split_seed: int = setting(0, "fixes which images are in the test and validation splits",
                              metavar="N")
    bad_images: str = setting(
        "error", "pictures of a folder that do not decode: 'error' refuses them before "
        "training, naming them; 'skip' leaves them out with a warning naming them",
        choices=("error", "skip"))
    epochs: int = setting(40, "passes over the training data", metavar="N")
    batch_size: int = setting(
        32, "images per optimisation step, in all (several processes under torchrun share "
        "each batch)", metavar="N")
    accum_steps: int = setting(
        1, "split each process's share of a batch into this many parts whose gradients add up "
        "(the same step with less memory)", metavar="N")
    lr: float = setting(1.5e-3, "peak learning rate of AdamW, reached after the warm-up",
                        metavar="LR")
    weight_decay: float = setting(0.3, "AdamW weight decay, on weight matrices and kernels only",
                                  metavar="WD")
    warmup_epochs: float | None = setting(
        None, "epochs of linear warm-up before the cosine decay to 0, may be fractional "
        "(default: 2, or a tenth of --epochs if that is less)", metavar="N")
    label_smoothing: float = setting(0.1, "share of the target spread over the other classes",
                                     metavar="F")
    rotate: float = setting(8.0, "augmentation: random rotation, up to this many degrees either "
                                 "way (0: off)", metavar="DEG")
    translate: float = setting(0.05, "augmentation: random shift, up to this fraction of the "
                                     "image side (0: off)", metavar="F")
    scale: float = setting(0.08, "augmentation: random zoom by a factor in [1 - scale, "
                                 "1 + scale] (0: off)", metavar="F")
    flip: bool = setting(False, "augmentation for folders of photos: random horizontal flip")
    crop_scale: float = setting(
        0.0, "augmentation for folders of photos: random resized crop keeping a share in "
        "[F, 1] of the picture's area, instead of the centre crop (0: off)", metavar="F")
    color_jitter: float = setting(
        0.0, "augmentation for folders of photos: random brightness, contrast and saturation "
        "by a factor in [1 - F, 1 + F] (0: off)", metavar="F")
    seed: int = setting(0, "seeds the initialisation, the data order, the augmentation and "
                           "dropout", metavar="N")
    select: str = setting(
        "best", "the checkpoint the final test uses: 'best' (the epoch of the best validation "
        "accuracy, saved as best.safetensors) or 'last'", choices=("best", "last"))
    patience: int | None = setting(
        None, "stop after this many epochs without a better validation accuracy (default: "
        "never)", metavar="N")
    device: str = setting("auto", "'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N' "
                                  "or 'mps'", metavar="DEVICE")
    precision: str = setting("auto", "'auto' (bf16 autocast on a GPU that supports it, else "
                                     "fp32), 'fp32' or 'bf16'", choices=("auto", "fp32", "bf16"))
    compile: bool = setting(False, "torch.compile the model (GPU only; skipped with a note on "
                                   "the CPU)")
    backend: str = setting(
        "torch", "who computes each step: 'torch' (PyTorch's autograd and AdamW) or 'numpy' (the "
        "NumPy room's backward passes and AdamW, on the CPU in fp32; vit_scratch.numpy_backend)",
        choices=("torch", "numpy"))
    workers: int = setting(0, "DataLoader worker processes (0: load in the main process)",
                           metavar="N")
    threads: int = setting(
        0, "CPU threads for PyTorch (default 0: this machine's cores shared among its training "
        "processes; fewer on busy cores unless OpenMP threads wait passively, as this command "
        "sets them to)", metavar="N")
    progress: str = setting("auto", "progress bar within each epoch: 'auto' (only when stderr is "
                                    "a terminal), 'on', 'off'", choices=("auto", "on", "off"))
    out: str | None = setting(
        None, "run folder for checkpoint.safetensors, best.safetensors, trainer_state.pt, "
        "settings.json, metrics.csv, metrics.json, curves.png (default: runs/MODEL-DATA)",
        metavar="DIR")


# --- checking the settings ----------------------------------------------------------------------

def default_out(settings: TrainSettings) -> str:
    data = settings.data if settings.data in ("digits", "digits_on_canvas") else \
        Path(settings.data).name
    return str(Path("runs") / f"{settings.model}-{data}")


def resolve_device(device: str) -> torch.device:
    """``'auto'`` -> cuda if available else cpu; a device that is not there is a ``ValueError``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got "
                         f"{device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} was asked for but no CUDA GPU is available "
                             f"(use --device cpu or --device auto)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: there are {torch.cuda.device_count()} GPU(s)")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError("device 'mps' was asked for but is not available")
    elif dev.type != "cpu":
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
    return dev


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype (``torch.bfloat16``) or ``None`` for plain fp32."""
    if precision not in ("auto", "fp32", "bf16"):
        raise ValueError(f"precision must be 'auto', 'fp32' or 'bf16', got {precision!r}")
    if precision == "fp32":
        return None
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16
        if precision == "bf16":
            raise ValueError(f"precision 'bf16' was asked for but {device} does not support it")
        return None
    return torch.bfloat16 if precision == "bf16" else None  # bf16 on the CPU works, slowly


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_settings(settings: TrainSettings, own_data: bool = False,
                   world: distributed.World = distributed.World()) -> None:
    """Every setting that can be checked without building anything; a ``ValueError`` naming
    the option and the value otherwise.  ``own_data``: the caller brings the datasets
    (``settings.data`` is then only their name); ``world``: the processes torchrun started."""
    get_config(settings.model)  # unknown names list the known ones
    try:
        get_config(settings.model, **{k: v for k, v in settings.model_kwargs.items()
                                      if k != "num_classes"})
    except TypeError as error:  # an unknown field: say which option it came from
        raise ValueError(f"--model-arg: {error}") from None
    if not own_data:
        check_data(settings.data)
    for name in ("epochs", "batch_size", "accum_steps"):
        value = getattr(settings, name)
        if not _positive_int(value):
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got "
                             f"{value!r}")
    if settings.patience is not None and not _positive_int(settings.patience):
        raise ValueError(f"--patience must be a positive integer (epochs without a better "
                         f"validation accuracy), got {settings.patience!r}")
    for name in ("test_fraction", "val_fraction"):
        value = getattr(settings, name)
        if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
            raise ValueError(f"--{name.replace('_', '-')} must be in (0, 1), got {value!r}")
    if settings.select not in ("best", "last"):
        raise ValueError(f"--select must be 'best' or 'last', got {settings.select!r}")
    if settings.bad_images not in ("error", "skip"):
        raise ValueError(f"--bad-images must be 'error' or 'skip', got {settings.bad_images!r}")
    if not (math.isfinite(settings.lr) and settings.lr > 0):
        raise ValueError(f"--lr must be a positive number, got {settings.lr!r}")
    if not (math.isfinite(settings.weight_decay) and settings.weight_decay >= 0):
        raise ValueError(f"--weight-decay must be >= 0, got {settings.weight_decay!r}")
    if not 0.0 <= warmup_epochs(settings) <= settings.epochs:
        raise ValueError(f"--warmup-epochs must be in [0, --epochs={settings.epochs}], got "
                         f"{settings.warmup_epochs!r}")
    if not 0.0 <= settings.label_smoothing < 1.0:
        raise ValueError(f"--label-smoothing must be in [0, 1), got {settings.label_smoothing!r}")
    if not 0.0 <= settings.rotate <= 180.0:
        raise ValueError(f"--rotate must be in [0, 180] degrees, got {settings.rotate!r}")
    if not 0.0 <= settings.translate < 1.0:
        raise ValueError(f"--translate must be in [0, 1) (a fraction of the image side), got "
                         f"{settings.translate!r}")
    if not 0.0 <= settings.scale < 1.0:
        raise ValueError(f"--scale must be in [0, 1), got {settings.scale!r}")
    if not 0.0 <= settings.crop_scale <= 1.0:
        raise ValueError(f"--crop-scale must be in [0, 1] (a share of the picture's area; 0: "
                         f"off), got {settings.crop_scale!r}")
    if not 0.0 <= settings.color_jitter <= 1.0:
        raise ValueError(f"--color-jitter must be in [0, 1], got {settings.color_jitter!r}")
    for name in ("workers", "threads"):
        value = getattr(settings, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"--{name} must be an integer >= 0, got {value!r}")
    if settings.progress not in ("auto", "on", "off"):
        raise ValueError(f"--progress must be 'auto', 'on' or 'off', got {settings.progress!r}")
    if settings.backend not in ("torch", "numpy"):
        raise ValueError(f"--backend must be 'torch' or 'numpy', got {settings.backend!r}")
    if settings.backend == "numpy":
        check_numpy_backend(settings, world)
    device = resolve_device(settings.device)
    resolve_precision(settings.precision, device)
    if settings.init is not None and not Path(settings.init).is_file():
        raise ValueError(f"--init {settings.init!r}: no such checkpoint file")
    if settings.pretrained:
        check_pretrained(settings)
    if world.size > 1:
        if device.type == "mps":
            raise ValueError("--device mps: torchrun's process group needs the CPU or CUDA GPUs")
        if settings.batch_size % world.size:
            raise ValueError(f"--batch-size {settings.batch_size} is not divisible by the "
                             f"{world.size} processes torchrun started: each process takes an "
                             f"equal share of every batch (use a multiple of {world.size})")
    share = settings.batch_size // world.size
    if settings.accum_steps > share:
        raise ValueError(f"--accum-steps {settings.accum_steps} splits each process's "
                         f"{share} images of a batch into more parts than images")


def check_numpy_backend(settings: TrainSettings, world: distributed.World) -> None:
    """``--backend numpy`` computes in NumPy on the CPU, in fp32, in one process, without
    dropout: options that ask for anything else are refused before anything runs."""
    asked = {"--device": settings.device not in ("auto", "cpu") and settings.device,
             "--precision": settings.precision == "bf16" and "bf16",
             "--compile": settings.compile, "--accum-steps": settings.accum_steps != 1 and
             settings.accum_steps, "torchrun": world.size > 1 and f"{world.size} processes"}
    for option, value in asked.items():
        if value:
            raise ValueError(f"--backend numpy runs on the CPU in fp32, in one process, one "
                             f"step per batch; it does not take {option} {value} (drop it, or "
                             f"use --backend torch)")
    cfg = get_config(settings.model, **{k: v for k, v in settings.model_kwargs.items()
                                        if k != "num_classes"})
    rates = {f: getattr(cfg, f) for f in ("drop_rate", "attn_drop_rate", "proj_drop_rate")
             if getattr(cfg, f, 0.0)}
    if rates:
        raise ValueError("--backend numpy trains without dropout (stochastic depth is "
                         "supported), but --model-arg sets "
                         + ", ".join(f"{k}={v}" for k, v in rates.items()))


def warmup_epochs(settings: TrainSettings) -> float:
    """``settings.warmup_epochs``, or its default: 2 epochs, or a tenth of the run if that is
    less."""
    if settings.warmup_epochs is None:
        return min(2.0, settings.epochs / 10)
    return settings.warmup_epochs


def check_pretrained(settings: TrainSettings) -> None:
    """``--pretrained``: not with ``--init``, a ``--model`` with published weights, and
    huggingface_hub installed."""
    from . import hub
    from .extras import require

    if settings.init is not None:
        raise ValueError(f"--pretrained and --init {settings.init!r} both say where the weights "
                         f"come from: give one")
    if settings.model not in hub.pretrained_names():
        raise ValueError(f"--pretrained: --model {settings.model} has no published weights; "
                         f"these names have: {', '.join(hub.pretrained_names())} (or start from "
                         f"a file of your own with --init FILE)")
    require("huggingface_hub", "--pretrained (weights from the Hugging Face Hub)")


def auto_threads(world: distributed.World = distributed.World(), own: int = 0) -> int:
    """The default ``--threads``: this machine's cores (those this process may run on) shared
    among the training processes torchrun started on it -- all of them when PyTorch's OpenMP
    threads wait passively (``OMP_WAIT_POLICY=PASSIVE``, which ``python -m vit_scratch.train``
    sets unless the environment says otherwise), else no more than the cores the other running
    programs leave free: the 1-minute load average, less the ``own`` threads this process has
    been running.  Chosen again at the start of every epoch.

    Why: on cores that other programs also use, OpenMP threads that spin while they wait for
    each other collapse -- one epoch of the README's digits command took more than 420 s with
    two spinning threads, 47 s with one, and 17 s with two passive ones (docs/training.md, "A
    busy machine")."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    share = max(1, cores // world.local_size)
    if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        return share
    others = (os.getloadavg()[0] - own) if hasattr(os, "getloadavg") else 0.0
    free = max(1, math.floor(cores - max(0.0, others) + 0.5))
    return min(share, free)


# --- the pieces of training -------------------------------------------------------------------

def build_model(settings: TrainSettings, num_classes: int | None = None):
    """The model of ``settings``; ``num_classes`` (from the data) overrides the name's default."""
    kwargs = dict(settings.model_kwargs)
    if num_classes is not None:
        if kwargs.get("num_classes", num_classes) != num_classes:
            raise ValueError(f"--model-arg num_classes={kwargs['num_classes']} but the data has "
                             f"{num_classes} classes")
        kwargs["num_classes"] = num_classes
    return create_model(settings.model, **kwargs)


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
    """:func:`lr_at`'s curve as PyTorch's schedulers (``torch.optim.lr_scheduler``):
    ``LinearLR`` for the warm-up, then ``CosineAnnealingLR``, chained by ``SequentialLR``; the
    same learning rates as ``lr_at`` to float rounding (tested).  Stepped ``done`` times: where
    a resumed run stopped (the schedule's length may have changed: ``--resume --epochs N``)."""
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


def train_step(model, images, labels, optimizer, label_smoothing: float = 0.0,
               autocast_dtype: torch.dtype | None = None, accum_steps: int = 1) -> Step:
    """One optimisation step on a batch: the mean loss over its images, its gradient, AdamW.

    ``accum_steps`` > 1 splits the batch into that many parts and adds their gradients up
    (each part's summed loss over the batch's image count) before the one step: the same step
    with less memory.  Under DDP, only the last part's backward averages the gradients of the
    processes (``no_sync`` before)."""
    n = len(labels)
    parts = [(x, y) for x, y in zip(images.tensor_split(accum_steps),
                                    labels.tensor_split(accum_steps)) if len(y)]
    optimizer.zero_grad(set_to_none=True)
    loss_sum, ce_sum, correct = 0.0, 0.0, 0
    for i, (x, y) in enumerate(parts):
        last = i == len(parts) - 1
        with (nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()):
            with torch.autocast(x.device.type, dtype=autocast_dtype or torch.bfloat16,
                                enabled=autocast_dtype is not None):
                logits = model(x)
            logits = logits if logits.dtype == torch.float64 else logits.float()  # bf16 -> fp32
            loss = F.cross_entropy(logits, y, label_smoothing=label_smoothing,
                                   reduction="sum") / n
            loss.backward()
        loss_sum += loss.item()
        with torch.no_grad():
            ce_sum += F.cross_entropy(logits, y, reduction="sum").item() / n
            correct += (logits.argmax(-1) == y).sum().item()
    optimizer.step()
    return Step(loss_sum, correct, ce_sum)


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


def init_from(model, path) -> None:
    """Load the weights of ``path`` into ``model`` for fine-tuning: strictly, except that a head
    for another number of classes is replaced by a fresh one (``weights.load_pretrained``).
    Mismatched keys raise ``CheckpointError`` naming them."""
    load_pretrained(model, path)


def class_names(dataset) -> list[str]:
    """``dataset.classes``, or ``["0", ..., str(max label)]`` read from ``.targets`` or from the
    dataset itself."""
    classes = getattr(dataset, "classes", None)
    if classes:
        return [str(c) for c in classes]
    from .data import dataset_labels

    return [str(c) for c in range(int(dataset_labels(dataset).max()) + 1)]


def epoch_seeds(seed: int, epoch: int, rank: int) -> tuple[int, int]:
    """Two seeds for one epoch of one process (PyTorch's global generator -- dropout, stochastic
    depth, the loader's workers -- and the augmentation's), drawn from ``(seed, epoch, rank)``
    by NumPy's ``SeedSequence``: a resumed run needs no saved random state."""
    a, b = np.random.SeedSequence([seed, epoch, rank]).generate_state(2)
    return int(a), int(b)


def _progress(loader, epoch: int, epochs: int, show: bool):
    if not show:
        return loader
    from .extras import require

    tqdm = require("tqdm.auto", "the progress bar (--progress)").tqdm
    return tqdm(loader, desc=f"epoch {epoch + 1}/{epochs}", leave=False, unit="batch",
                dynamic_ncols=True)


def _quiet(*_):
    pass


# --- the run ----------------------------------------------------------------------------------

def train(settings: TrainSettings, resume: bool = False, overwrite: bool = False, log=print,
          on_epoch_end=None, datasets=None) -> dict:
    """Check ``settings``, build the model and the data, train, select, test, save as it goes;
    returns a dict with ``model`` (the selected model), ``history``, ``test_accuracy``,
    ``selected_epoch``, ``train_seconds``, ``cpu_seconds``, ``params``, ``out``.

    ``resume=True`` continues the run in ``settings.out`` exactly where its last saved epoch
    ended (or extends a finished run to more ``epochs``); ``overwrite=True`` replaces a run
    there.  ``on_epoch_end(epoch, record)`` is called after each epoch has been saved.
    ``settings.out=None`` trains without saving.

    ``datasets=(train_set, test_set)`` or ``(train_set, val_set, test_set)``: any PyTorch
    datasets of ``(image, label)`` pairs, images already shaped as the model expects (e.g.
    torchvision's, with your own transforms); then ``settings.data`` only names them, and
    without a validation set, ``--val-fraction`` of the training set is held out.  The model
    gets ``len(train_set.classes)`` classes if the dataset has ``.classes``, else one more than
    the largest label.

    Under ``torchrun`` (``vit_scratch.distributed``) every process calls this: they join the
    process group, and rank 0 alone logs and writes."""
    world = distributed.world_from_env()
    check_settings(settings, own_data=datasets is not None, world=world)
    device = distributed.device_for(world, resolve_device(
        "cpu" if settings.backend == "numpy" else settings.device))
    joined = distributed.join(world, device)
    try:
        return _train(settings, resume, overwrite, log if world.main else _quiet, on_epoch_end,
                      datasets, world, device)
    finally:
        distributed.leave(joined)


def _train(settings, resume, overwrite, log, on_epoch_end, datasets, world, device) -> dict:
    # --- set-up: the run folder, the model, the data, the optimizer and its schedule
    out, state = _open_run_folder(settings, resume, overwrite, world, device)
    autocast_dtype = resolve_precision(settings.precision, device)
    torch.set_num_threads(settings.threads or auto_threads(world))
    model, classes = _model_for_the_data(settings, datasets, state, out)
    run = _Progress.start(state, settings, out, world, device, log)
    train_set, val_set, test_set = _datasets(settings, model, datasets)
    share = settings.batch_size // world.size  # each process's part of a batch
    sampler = distributed.train_sampler(train_set, world, settings.seed)
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=share, sampler=sampler, num_workers=settings.workers,
        pin_memory=device.type == "cuda")
    val_loader, test_loader = (torch.utils.data.DataLoader(
        distributed.shard(d, world), batch_size=max(256, share), num_workers=settings.workers)
        for d in (val_set, test_set))
    model.to(device)
    steps = len(train_loader)  # per epoch
    if settings.backend == "numpy":
        runner, optimizer, schedule = _numpy_runner(model, settings, len(classes), state,
                                                    steps, run.epoch)
        evaluator = runner
    else:
        optimizer = torch.optim.AdamW(param_groups(model, settings.weight_decay), lr=settings.lr)
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
        schedule = lr_schedule(optimizer, settings.epochs * steps,
                               round(warmup_epochs(settings) * steps), done=run.epoch * steps)
        runner, evaluator = _runners(model, settings, device, world, log)
    if out is not None and world.main:
        _write_run_start(out, settings, model, classes, run, overwrite and state is None)
    log(f"{settings.model}: {count_params(model):,} parameters, {len(train_set)} train / "
        f"{len(val_set)} validation / {len(test_set)} test images of "
        f"{tuple(model.pretrained_cfg['input_size'])}, {len(classes)} classes, "
        f"{settings.epochs} epochs on {device}"
        f"{f' × {world.size} processes' if world.size > 1 else ''}"
        f"{' (bf16 autocast)' if autocast_dtype is not None else ''}"
        f"{' in NumPy' if settings.backend == 'numpy' else ''}, "
        f"{torch.get_num_threads()} thread(s)")

    # --- the loop: train an epoch, validate, keep the best, save
    show_bar = world.main and (settings.progress == "on" or (
        settings.progress == "auto" and sys.stderr.isatty()))
    first_epoch = run.epoch
    for epoch in range(first_epoch, settings.epochs):
        if run.out_of_patience(settings.patience):
            log(f"stopping early: no better validation accuracy for {settings.patience} epochs")
            break
        if not settings.threads and epoch > first_epoch:  # the machine got busier or quieter
            torch.set_num_threads(auto_threads(world, own=torch.get_num_threads()))
        wall0, cpu0 = time.perf_counter(), time.process_time()
        sampler.set_epoch(epoch)
        record = train_epoch(runner, _progress(train_loader, epoch, settings.epochs, show_bar),
                             optimizer, schedule, settings, epoch, world, device, autocast_dtype)
        val = evaluate_everywhere(evaluator, val_loader, device, autocast_dtype)
        record.update(val_loss=val["loss"], val_accuracy=val["accuracy"])
        if settings.backend == "numpy":
            runner.push(model)  # the weights that are kept and saved are the model's
        improved = run.add(record, model, time.perf_counter() - wall0,
                           time.process_time() - cpu0)
        if out is not None and world.main:
            run.save(out, model, optimizer, settings, classes, improved)
        log(f"epoch {epoch + 1:3d}/{settings.epochs}  loss {record['train_loss']:.4f}  "
            f"train acc {record['train_accuracy']:.4f}  val loss {record['val_loss']:.4f}  "
            f"val acc {record['val_accuracy']:.4f}{'  best' if improved else ''}  "
            f"({run.train_seconds:.0f} s)")
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)

    # --- save: test the selected checkpoint once, write metrics.json, then draw
    selected_epoch = run.select(model, settings.select)
    if settings.backend == "numpy":
        runner.pull(model)
    test = evaluate_everywhere(evaluator, test_loader, device, autocast_dtype)
    result = {
        "model": settings.model, "data": settings.data, "classes": classes,
        "test_accuracy": test["accuracy"], "test_loss": test["loss"],
        "select": settings.select, "selected_epoch": selected_epoch,
        "best_epoch": run.best_epoch, "best_val_accuracy": run.best_val_accuracy,
        "epochs_done": run.epoch, "stopped_early": run.epoch < settings.epochs,
        "train_seconds": run.train_seconds, "cpu_seconds": run.cpu_seconds,
        "params": count_params(model),
        "images": {"train": len(train_set), "val": len(val_set), "test": len(test_set)},
        "device": str(device), "processes": world.size,
        "precision": "bf16" if autocast_dtype is not None else "fp32",
        "threads": torch.get_num_threads(), "torch": str(torch.__version__),
        "settings": asdict(settings), "history": run.history}
    if out is not None and world.main:
        run_folder.write_json(result, out / METRICS)
        run.finish(out)
        _draw_curves(run.history, out, settings, result)
    log(f"test accuracy {test['accuracy']:.4f} ({settings.select} checkpoint: epoch "
        f"{selected_epoch}, validation accuracy "
        f"{run.history[selected_epoch - 1]['val_accuracy']:.4f}) after {run.epoch} epochs "
        f"({run.train_seconds:.1f} s wall, {run.cpu_seconds:.1f} s CPU, {device})"
        f"{f' -> {out}' if out is not None else ''}")
    return {**result, "model": model, "out": out}


def train_epoch(runner, batches, optimizer, schedule, settings: TrainSettings, epoch: int,
                world, device, autocast_dtype=None) -> dict:
    """One pass over this process's share of the training data: the augmentation, a
    :func:`train_step` per batch and the schedule's step; returns the epoch's record (loss,
    plain cross-entropy and accuracy, added up over all processes, and the last learning
    rate).  Its random streams start from ``(seed, epoch, rank)`` (:func:`epoch_seeds`)."""
    torch_seed, augment_seed = epoch_seeds(settings.seed, epoch, world.rank)
    torch.manual_seed(torch_seed)  # dropout, stochastic depth, the loader's workers
    if settings.backend == "numpy":
        runner.manual_seed(torch_seed)  # NumPy's stochastic depth
    augment = torch.Generator().manual_seed(augment_seed)
    runner.train()
    sums = np.zeros(4)  # loss, cross-entropy (both summed over images), correct, images
    for images, labels in batches:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        images = random_affine(images, settings.rotate, settings.translate, settings.scale,
                               augment)
        lr = optimizer.param_groups[0]["lr"]
        if settings.backend == "numpy":
            step = runner.step(images, labels, optimizer, settings.label_smoothing)
        else:
            step = train_step(runner, images, labels, optimizer, settings.label_smoothing,
                              autocast_dtype, settings.accum_steps)
        schedule.step()
        sums += (step.loss * len(labels), step.cross_entropy * len(labels), step.correct,
                 len(labels))
        if hasattr(batches, "set_postfix"):  # the progress bar
            batches.set_postfix(loss=f"{step.loss:.3f}", lr=f"{lr:.2e}", refresh=False)
    loss, cross_entropy, correct, count = distributed.sum_over_processes(sums.tolist(), device)
    return {"epoch": epoch + 1, "lr": lr, "train_loss": loss / count,
            "train_cross_entropy": cross_entropy / count, "train_accuracy": correct / count}


class _Progress:
    """The run so far: the history, the epochs done, the best epoch (and its weights, in memory
    and in best.safetensors), the time spent; saved after every epoch, restored on resume."""

    def __init__(self):
        self.history, self.epoch, self.train_seconds, self.cpu_seconds = [], 0, 0.0, 0.0
        self.best_epoch, self.best_val_accuracy, self.best_val_loss = 0, -1.0, math.inf
        self.best_weights, self.patience_from = None, 0

    @classmethod
    def start(cls, state, settings, out, world, device, log) -> "_Progress":
        """A new run, or the saved one (with its best epoch's weights, read by rank 0 from
        best.safetensors and sent to every process)."""
        run = cls()
        if state is None:
            return run
        run.history, run.epoch = list(state["history"]), int(state["epoch"])
        run.train_seconds, run.cpu_seconds = float(state["train_seconds"]), float(
            state["cpu_seconds"])
        run.best_epoch = int(state["best_epoch"])
        best = run.history[run.best_epoch - 1]
        run.best_val_accuracy, run.best_val_loss = best["val_accuracy"], best["val_loss"]
        run.best_weights = distributed.broadcast(
            _best_weights(out, settings, len(state["classes"])) if world.main else None, device)
        run.patience_from = int(state.get("patience_from", 0))
        if state.get("finished"):  # extended: the new epochs get their own patience
            run.patience_from = run.epoch
            log(f"extending the finished run after epoch {run.epoch} to {settings.epochs} "
                f"epochs (the learning rate follows the longer schedule)")
        else:
            log(f"resuming after epoch {run.epoch}/{settings.epochs}")
        return run

    def add(self, record: dict, model, wall: float, cpu: float) -> bool:
        """Record an epoch; returns whether its validation accuracy is the best so far (ties:
        the lower validation loss)."""
        self.train_seconds += wall
        self.cpu_seconds += cpu
        record["train_seconds"] = self.train_seconds
        self.history.append(record)
        self.epoch = record["epoch"]
        better = (record["val_accuracy"], -record["val_loss"]) > (self.best_val_accuracy,
                                                                   -self.best_val_loss)
        if better:
            self.best_epoch = self.epoch
            self.best_val_accuracy, self.best_val_loss = record["val_accuracy"], record[
                "val_loss"]
            self.best_weights = {k: v.detach().to("cpu", copy=True)
                                 for k, v in model.state_dict().items()}
        return better

    def out_of_patience(self, patience: int | None) -> bool:
        return patience is not None and self.epoch - max(self.best_epoch,
                                                         self.patience_from) >= patience

    def save(self, out: Path, model, optimizer, settings, classes, improved: bool) -> None:
        """The epoch's files: the checkpoint (and best.safetensors when it improved), the state
        for --resume, a row of metrics.csv."""
        run_folder.save_weights(out, CHECKPOINT, model, classes)
        if improved:
            run_folder.save_weights(out, BEST, model, classes)
        state = {
            "epoch": self.epoch, "settings": asdict(settings),
            "optimizer": optimizer.state_dict(), "history": self.history,
            "train_seconds": self.train_seconds, "cpu_seconds": self.cpu_seconds,
            "best_epoch": self.best_epoch, "patience_from": self.patience_from,
            "classes": classes, "finished": False}
        run_folder.save_state(out, model, state)
        run_folder.append_metrics_row(out, self.history[-1])

    def select(self, model, select: str) -> int:
        """Load the weights the final test uses into ``model``; returns their epoch."""
        if select == "best" and self.best_weights is not None:
            model.load_state_dict(self.best_weights)
            return self.best_epoch
        return self.epoch

    @staticmethod
    def finish(out: Path) -> None:
        """Mark the saved state finished (``--resume`` then extends, with more ``--epochs``)."""
        if (out / STATE).exists():
            state = run_folder.load_state(out)
            run_folder.save_atomic(lambda p: torch.save({**state, "finished": True}, p),
                                   out / STATE)


def _open_run_folder(settings, resume, overwrite, world, device):
    """``(out, state)``: the checked run folder (``None`` without ``--out``) and, resuming, its
    saved state.  Rank 0 alone checks and reads the folder; the others get its verdict and the
    state, so that every process stops on an error and resumes from the same epoch."""
    out = Path(settings.out) if settings.out is not None else None
    if out is None:
        if resume:
            raise ValueError("resume needs the run folder (--out)")
        return None, None
    error, state = None, None
    if world.main:
        try:
            run_folder.check_out(out, resume, overwrite)
            if resume:
                state = run_folder.load_state(out)
                run_folder.check_resume(settings, state, out)
        except (ValueError, CheckpointError) as caught:
            error = caught
    verdict = distributed.same_everywhere(None if error is None else str(error), device)
    if error is not None:
        raise error
    if verdict is not None:
        raise ValueError(verdict)
    return out, distributed.broadcast(state, device)


def _model_for_the_data(settings: TrainSettings, datasets, state: dict | None, out: Path | None):
    """The model, with as many classes as the data has, and the class names.  Resuming: the
    run's model with its saved weights, after checking that the data has the run's classes."""
    classes = class_names(datasets[0]) if datasets is not None else data_classes(settings.data)
    if state is None:
        start = settings.init
        if settings.pretrained:  # fetched (or found in the cache) before anything is built
            from . import hub

            start = hub.download(settings.model, option="--pretrained")
        torch.manual_seed(settings.seed)
        model = build_model(settings, len(classes))
        if start is not None:
            init_from(model, start)
        return model, classes
    saved = state["settings"]
    model = build_model(settings, len(state["classes"]))
    own, weights = model.state_dict(), state["model"]
    mismatch = {"missing": [k for k in own if k not in weights],
                "unexpected": [k for k in weights if k not in own],
                "mis-shaped": [k for k in own if k in weights and own[k].shape != weights[k].shape]}
    if any(mismatch.values()):  # a run of another model
        listed = "; ".join(f"{what}: {', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''}"
                           for what, keys in mismatch.items() if keys)
        raise CheckpointError(f"--resume: the run in {str(out)!r} was trained with --model "
                              f"{saved['model']} {saved['model_kwargs']}, not {settings.model} "
                              f"{settings.model_kwargs}; its weights do not fit ({listed})")
    model.load_state_dict(weights)
    if classes != state["classes"]:
        raise ValueError(f"--resume: the data's classes {classes} are not the run's "
                         f"{state['classes']}")
    return model, classes


def _best_weights(out: Path, settings: TrainSettings, num_classes: int) -> dict | None:
    """The weights of best.safetensors as a state_dict (aliases filled in by loading them into
    a model), or ``None`` without the file or when the last epoch is selected."""
    if settings.select != "best" or not (out / BEST).exists():
        return None
    model = build_model(settings, num_classes)
    load_checkpoint(model, out / BEST)
    return model.state_dict()


def _datasets(settings: TrainSettings, model, datasets):
    """``(train, val, test)``: the data shaped for the model, or the caller's datasets, with
    ``--val-fraction`` of the training split held out when there is no validation set."""
    if datasets is not None:
        if len(datasets) == 3:
            return tuple(datasets)
        train_set, test_set = datasets
        return (*validation_split(train_set, settings.val_fraction, settings.split_seed),
                test_set)
    augment = ModelTransform(model, settings.flip, settings.crop_scale, settings.color_jitter)
    return make_datasets(settings.data, model, settings.test_fraction, settings.split_seed,
                         val_fraction=settings.val_fraction, bad_images=settings.bad_images,
                         augment=augment if augment.augments else None)


def _runners(model, settings: TrainSettings, device, world, log):
    """``(runner, evaluator)``: the model that trains (wrapped in DDP with several processes,
    ``torch.compile``-d on a GPU with ``--compile``) and the one that evaluates each process's
    share (the model itself under DDP: evaluation needs no gradient averaging)."""
    runner = model
    if world.size > 1:
        from torch.nn.parallel import DistributedDataParallel

        runner = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    if settings.compile:
        if device.type == "cuda":
            runner = torch.compile(runner)
        else:
            log("--compile: skipped (torch.compile is used on a GPU only)")
    return runner, (model if world.size > 1 else runner)


def _numpy_runner(model, settings: TrainSettings, num_classes: int, state, steps: int,
                  epochs_done: int):
    """``(runner, optimizer, schedule)`` of ``--backend numpy`` (``vit_scratch.numpy_backend``):
    the NumPy twin of ``model`` (copies of its weights), its AdamW (restored when resuming)
    and ``lr_at``'s schedule on it."""
    from .numpy_backend import NumpyAdamW, NumpyRunner

    kwargs = {**settings.model_kwargs, "num_classes": num_classes}
    runner = NumpyRunner(model, settings.model, kwargs, threads=torch.get_num_threads)
    optimizer = NumpyAdamW(runner, settings.lr, settings.weight_decay)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
    schedule = LrSchedule(optimizer, settings.epochs * steps,
                          round(warmup_epochs(settings) * steps), done=epochs_done * steps)
    return runner, optimizer, schedule


def _write_run_start(out: Path, settings, model, classes, run, replace: bool) -> None:
    """Once everything is set up: the old run's files gone (``--overwrite``), settings.json,
    and metrics.csv as the saved history has it (a resumed run)."""
    if replace:
        run_folder.remove_run_files(out)
    run_folder.write_settings(out, settings, model, classes)
    if run.history:
        run_folder.write_metrics_csv(out, run.history)


def _draw_curves(history, out: Path, settings, result) -> None:
    """curves.png; skipped with a warning when matplotlib is missing or the figure fails -- a
    finished run keeps its files either way (metrics.json is written before)."""
    try:
        from .plotting import save_training_curves

        save_training_curves(history, out / CURVES, title=f"{settings.model} on {settings.data}",
                             selected_epoch=result["selected_epoch"],
                             test_accuracy=result["test_accuracy"],
                             label_smoothing=settings.label_smoothing)
    except Exception as error:  # noqa: BLE001 -- a figure never costs a run its results
        warnings.warn(f"{CURVES} not drawn ({type(error).__name__}: {error}); the run's other "
                      f"files are complete", stacklevel=2)


# --- the command line -------------------------------------------------------------------------

class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` after each option, except where the help text says it itself."""

    def _get_help_string(self, action):
        if action.default is None or "default:" in (action.help or "") or \
                "default " in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser(show_defaults: bool = True) -> argparse.ArgumentParser:
    """The command line, generated from :class:`TrainSettings` (one option per field), plus
    ``--resume`` and ``--overwrite``.  ``show_defaults=False``: options not given are absent
    from the parsed namespace (how ``--resume`` tells what was typed)."""
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.train",
        description="Train a registered model on offline data (scikit-learn's digits, the "
                    "digits-on-canvas localisation set) or on a folder of your own pictures. "
                    "Holds out a validation split, saves the run in --out after every epoch, "
                    "tests the selected checkpoint once at the end, and writes metrics.json "
                    "and curves.png.  Under torchrun, several processes share each batch.",
        epilog="Example: python -m vit_scratch.train --model coat_lite_digits --data digits "
               "--epochs 16 --out runs/coat_lite_digits\n",
        formatter_class=_HelpFormatter,
        argument_default=None if show_defaults else argparse.SUPPRESS)
    types = typing.get_type_hints(TrainSettings)
    defaults = TrainSettings()

    def default(value):
        return {"default": value} if show_defaults else {}

    for f in fields(TrainSettings):
        meta = f.metadata
        flag = meta["flag"] or f"--{f.name.replace('_', '-')}"
        value = getattr(defaults, f.name)
        if meta["parse"] is not None:  # KEY=VALUE pairs, repeatable
            parser.add_argument(flag, dest=f.name, type=meta["parse"], action="append",
                                metavar=meta["metavar"], help=meta["help"], **default([]))
        elif types[f.name] is bool:
            parser.add_argument(flag, dest=f.name, action="store_true", help=meta["help"],
                                **default(value))
        else:
            kind = next((t for t in (int, float) if t in typing.get_args(types[f.name])
                         or types[f.name] is t), str)
            parser.add_argument(flag, dest=f.name, type=kind, metavar=meta["metavar"],
                                choices=meta["choices"], help=meta["help"], **default(value))
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its last saved epoch (options not "
                             "given again are taken from the run); with --epochs N, extend a "
                             "finished run to N epochs", **default(False))
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run already in --out (otherwise that is an error)",
                        **default(False))
    return parser


def settings_from_args(argv) -> tuple[TrainSettings, bool, bool]:
    """argv -> (TrainSettings, resume, overwrite).  With ``--resume``, options not given are
    taken from the run in ``--out``."""
    args = vars(build_parser().parse_args(argv))
    given = vars(build_parser(show_defaults=False).parse_args(argv))  # only what was typed
    resume, overwrite = args.pop("resume"), args.pop("overwrite")
    for parsed in (args, given):
        if "model_kwargs" in parsed:
            parsed["model_kwargs"] = dict(parsed["model_kwargs"])
    if args["out"] is None:
        args["out"] = default_out(TrainSettings(**args))
    if resume:
        settings_file = Path(args["out"]) / run_folder.SETTINGS
        if settings_file.exists():
            saved = run_folder.read_settings(Path(args["out"]))["settings"]
            saved = {k: v for k, v in saved.items() if k in args}
            args = {**saved, **{k: v for k, v in given.items() if k in args},
                    "out": args["out"]}
    return TrainSettings(**args), resume, overwrite


def main(argv=None) -> dict:
    parser = build_parser()
    world = distributed.world_from_env()
    out = None
    try:
        settings, resume, overwrite = settings_from_args(argv)
        out = settings.out
        return train(settings, resume=resume, overwrite=overwrite)
    except (ValueError, CheckpointError) as error:
        if not world.main:  # rank 0 says it
            raise SystemExit(2) from None
        parser.error(str(error))  # usage + the message, exit status 2
    except FloatingPointError as error:  # a loss or gradient that is not finite (NumPy backend)
        if world.main:
            print(f"error: {error}; the run folder keeps the last finished epoch", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        if world.main:
            if out is not None and (Path(out) / STATE).exists():
                print(f"\ninterrupted: the run in {out} is saved up to its last finished "
                      f"epoch; continue it with: python -m vit_scratch.train --out {out} "
                      f"--resume", file=sys.stderr)
            else:
                print("\ninterrupted before the first epoch was saved", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
