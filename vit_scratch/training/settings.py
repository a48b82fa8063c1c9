"""The settings of a training run: :class:`TrainSettings`, one dataclass whose fields carry
their help text (the command line is generated from it: ``vit_scratch.train``), and the checks
that run before anything is built.

Its defaults are the recipe for scikit-learn's 8×8 digits (README, "Training"): 40 epochs of
batches of 32, peak learning rate 1.5e-3, weight decay 0.3, label smoothing 0.1, and a gentle
random affine augmentation (±8°, ±5% shift, ±8% zoom).  It works together with the ``*_digits``
configs, which enlarge the digits (bilinear) before cutting patches -- ``vit_digits`` sees
24×24 images in 6×6 patches: the same 4×4 grid of tokens as 2×2 patches of the original, but
each patch overlaps its neighbours a little and the sub-pixel augmentation stays sharp.  On the
8×8 original the same augmentation blurs and a one-pixel shift moves a digit by an eighth of its
width; there, no augmentation was best (~96%).  Enlarged and augmented: ~98.8%.

:func:`check_settings` checks every setting that can be checked without building anything (the
model and data names, the numbers, the device, what the chosen backend can do) and names the
option and the value; the run folder is checked by ``vit_scratch.run_folder``.
"""
from __future__ import annotations

import argparse
import ast
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .. import distributed
from ..data import check_data
from ..models import MODEL_OPTIONS, create_model, get_config
from ..specs.base import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from .distillation import check_teacher


class SettingsError(ValueError):
    """A setting refused by :func:`check_settings` (an argument error: the command line shows
    its usage with it); any other ``ValueError`` of a run is a runtime error, one line."""


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


#: ``--precision``'s choices.
PRECISIONS = ("auto", "fp32", "bf16", "fp16")


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
    label_smoothing: float = setting(
        0.1, "share of the target spread evenly over all the classes: the true class's target "
        "is 1 - F + F/classes, so the trained model's probabilities top out near it, not near 1 "
        "(0.92 for 5 classes at 0.1)", metavar="F")
    teacher: str | None = setting(
        None, "hard distillation (DeiT): a run folder or checkpoint file of a trained model whose "
        "predictions the student learns, or 'auto': the course's small convnet, trained first "
        "on the same split (the convnet yardstick of --baseline cnn); the loss is 1/2 "
        "CE(class head, labels) + 1/2 CE(distillation head, the teacher's argmax), through "
        "the class head for a model without a distillation token (deit_*_distilled_*, "
        "--model-arg distilled=True have one) (default: none)", metavar="RUN|FILE|auto")
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
    balanced_sampling: bool = setting(
        False, "draw each epoch's training pictures so that every class is seen equally often: "
        "a small class's pictures repeat, a large class's are sub-sampled, and an epoch keeps "
        "its number of pictures (off: every picture once an epoch)")
    select: str = setting(
        "best", "the checkpoint the final test uses: 'best' (the epoch of the best validation "
        "accuracy, saved as best.safetensors) or 'last'", choices=("best", "last"))
    patience: int | None = setting(
        None, "stop after this many epochs without a better validation accuracy (default: "
        "never)", metavar="N")
    baseline: str = setting(
        "linear", "the yardsticks printed beside the model's accuracy and chance (also in "
        "metrics.json): 'linear', scikit-learn's logistic regression on the pixels of the same "
        "training split (seconds; drawn on curves.png too); 'cnn', the course's small convnet "
        "trained on the same split with the same augmentation, epochs and schedule (what a "
        "transformer from scratch has to beat); 'linear,cnn' both; 'none'",
        metavar="NAMES")
    device: str = setting("auto", "'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N' "
                                  "or 'mps'", metavar="DEVICE")
    precision: str = setting(
        "auto", "'auto' (bf16 autocast on a GPU that supports it; fp16 autocast with a gradient "
        "scaler on a GPU that does not, such as a T4 or V100; else fp32), 'fp32', 'bf16', or "
        "'fp16' (autocast, and torch.amp.GradScaler, which scales the loss so that small "
        "gradients do not vanish in fp16 and skips a step whose gradients overflow)",
        choices=PRECISIONS)
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


#: Named starting points for the settings (``--recipe NAME``): what each changes from the
#: defaults, which are the digits recipe.  Options given on the command line (or keywords given
#: to :func:`recipe_settings`) override them.  Measured by benchmarks/bench_small_folder.py.
BASELINES = ("linear", "cnn")


def baselines(text: str) -> tuple[str, ...]:
    """``--baseline``'s yardsticks: ``"linear,cnn"`` -> ``("linear", "cnn")``, ``"none"`` ->
    ``()``; anything else is a ``ValueError`` naming the option and the value."""
    if not isinstance(text, str):
        raise ValueError(f"--baseline must be 'linear', 'cnn', 'linear,cnn' or 'none', got "
                         f"{text!r}")
    names = tuple(n.strip() for n in text.split(","))
    if names == ("none",):
        return ()
    if not names or any(n not in BASELINES for n in names) or len(set(names)) < len(names):
        raise ValueError(f"--baseline must be 'linear', 'cnn', 'linear,cnn' or 'none', got "
                         f"{text!r}")
    return names


RECIPES = {
    "digits": {},
    # A folder of a few hundred pictures: a small CoaT-Lite (its convolutions give the inductive
    # bias a plain ViT lacks at this size) on 32×32 colour pictures cut into 4×4 patches,
    # normalised per channel with ImageNet's mean and std (as timm's models are; the digits'
    # mean 0 and std 1 leave every pixel positive), a gentler learning rate and weight decay,
    # and longer training.
    "small_folder": dict(model="coat_lite_digits",
                         model_kwargs=dict(img_size=32, patch_size=4, in_chans=3,
                                           pretrained_cfg_overlay=dict(
                                               mean=IMAGENET_DEFAULT_MEAN,
                                               std=IMAGENET_DEFAULT_STD)),
                         epochs=100, lr=5e-4, weight_decay=0.05),
}


def recipe_settings(name: str, **changes) -> TrainSettings:
    """The settings of the recipe ``name`` (:data:`RECIPES`), with ``changes`` on top, as
    ``python -m vit_scratch.train --recipe NAME`` with those options: another ``model`` drops
    the recipe's ``model_kwargs`` (they belong to its model); ``model_kwargs`` of the recipe's
    own model add to them."""
    if name not in RECIPES:
        raise SettingsError(f"--recipe must be one of {', '.join(RECIPES)}, got {name!r}")
    base = dict(RECIPES[name])
    if "model" in changes and changes["model"] != base.get("model", TrainSettings.model):
        base.pop("model_kwargs", None)
    if "model_kwargs" in changes:
        changes = {**changes, "model_kwargs": {**base.get("model_kwargs", {}),
                                               **changes["model_kwargs"]}}
    return TrainSettings(**{**base, **changes})


def default_out(settings: TrainSettings) -> str:
    data = settings.data if settings.data in ("digits", "digits_on_canvas") else \
        Path(settings.data).name
    return str(Path("runs") / f"{settings.model}-{data}")


def warmup_epochs(settings: TrainSettings) -> float:
    """``settings.warmup_epochs``, or its default: 2 epochs, or a tenth of the run if that is
    less."""
    if settings.warmup_epochs is None:
        return min(2.0, settings.epochs / 10)
    return settings.warmup_epochs


def build_model(settings: TrainSettings, num_classes: int | None = None):
    """The model of ``settings``; ``num_classes`` (from the data) overrides the name's default."""
    kwargs = dict(settings.model_kwargs)
    if num_classes is not None:
        if kwargs.get("num_classes", num_classes) != num_classes:
            raise ValueError(f"--model-arg num_classes={kwargs['num_classes']} but the data has "
                             f"{num_classes} classes")
        kwargs["num_classes"] = num_classes
    return create_model(settings.model, **kwargs)


# --- the checks ----------------------------------------------------------------------------------

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
    """The autocast dtype (``torch.bfloat16`` or ``torch.float16``) or ``None`` for plain
    fp32.  ``'auto'``: bf16 on a CUDA GPU that supports it, fp16 on one that does not (then
    the runner adds a gradient scaler: :func:`needs_grad_scaler`), fp32 elsewhere; ``'bf16'``
    on a GPU without it is refused.  On the CPU both work, slowly (for tests)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be {', '.join(map(repr, PRECISIONS[:-1]))} or "
                         f"{PRECISIONS[-1]!r}, got {precision!r}")
    if precision == "fp32":
        return None
    if precision == "fp16":
        return torch.float16
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return torch.bfloat16
        if precision == "bf16":
            raise ValueError(f"precision 'bf16' was asked for but {device} does not support it "
                             f"(--precision fp16 trains in fp16 with a gradient scaler)")
        return torch.float16
    return torch.bfloat16 if precision == "bf16" else None  # bf16 on the CPU works, slowly


def needs_grad_scaler(dtype: torch.dtype | None) -> bool:
    """fp16 autocast needs a gradient scaler (``torch.amp.GradScaler``): fp16 holds numbers
    down to about 6e-8, and smaller gradients would become 0; bf16 has fp32's range."""
    return dtype == torch.float16


def precision_name(dtype: torch.dtype | None) -> str:
    """``'fp32'``, ``'bf16'`` or ``'fp16'``: what metrics.json and the log say."""
    return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


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
                                      if k != "num_classes" and k not in MODEL_OPTIONS})
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
    baselines(settings.baseline)
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
    check_teacher(settings)
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
             "--precision": settings.precision in ("bf16", "fp16") and settings.precision,
             "--compile": settings.compile, "--accum-steps": settings.accum_steps != 1 and
             settings.accum_steps, "torchrun": world.size > 1 and f"{world.size} processes"}
    for option, value in asked.items():
        if value:
            raise ValueError(f"--backend numpy runs on the CPU in fp32, in one process, one "
                             f"step per batch; it does not take {option} {value} (drop it, or "
                             f"use --backend torch)")
    cfg = get_config(settings.model, **{k: v for k, v in settings.model_kwargs.items()
                                        if k != "num_classes" and k not in MODEL_OPTIONS})
    rates = {f: getattr(cfg, f) for f in ("drop_rate", "attn_drop_rate", "proj_drop_rate")
             if getattr(cfg, f, 0.0)}
    if rates:
        raise ValueError("--backend numpy trains without dropout (stochastic depth is "
                         "supported), but --model-arg sets "
                         + ", ".join(f"{k}={v}" for k, v in rates.items()))


def check_pretrained(settings: TrainSettings) -> None:
    """``--pretrained``: not with ``--init``, a ``--model`` with published weights, and
    huggingface_hub installed."""
    from .. import hub
    from ..extras import require

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
