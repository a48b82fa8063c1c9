"""Train any registered model on offline data -- the course's training command.

    python -m vit_scratch.train --model vit_digits --data digits --epochs 40 --out runs/vit
    python -m vit_scratch.train --model coat_lite_digits --data my_pictures/ --out runs/mine
    python -m vit_scratch.train --out runs/vit --resume         # continue after a crash / Ctrl-C
    python -m vit_scratch.train --help                          # every option, with its default

What it does, in order:

1. **Checks every argument** (model and data names, numbers, the device, the ``--out`` folder)
   before it builds anything, and refuses to write over a run unless ``--overwrite``.
2. Builds the model (``--model``, ``--model-arg key=value``) and the data (``--data``), which
   follows the model: resized to its input size and normalised with its mean and std
   (``vit_scratch.data.make_datasets``); the model gets as many classes as the data has.
3. Trains with a scaled-down DeiT recipe: AdamW with weight decay on the weight matrices only
   (the model names the tokens and embeddings that skip it, ``model.no_weight_decay()``),
   linear warm-up then cosine decay, label smoothing, stochastic depth, and optionally a random
   affine augmentation (``--rotate``, ``--translate``, ``--scale``) -- on a GPU in bf16
   autocast, optionally ``torch.compile``-d.
4. Evaluates on the test split every epoch and saves ``DIR/checkpoint.safetensors`` and
   ``DIR/trainer_state.pt`` (optimizer, schedule position, random states) after every epoch, so
   a crash or Ctrl-C loses at most one epoch and ``--resume`` continues bit for bit.
5. At the end writes ``DIR/metrics.json`` (``test_accuracy``, ``train_seconds``,
   ``cpu_seconds``, ``params``, the per-epoch history) and ``DIR/curves.png``.

The defaults are the recipe for scikit-learn's 8×8 digits (README, "Training"): 40 epochs of
batches of 32, peak learning rate 1.5e-3, weight decay 0.3, label smoothing 0.1, and a gentle
random affine augmentation (±8°, ±5% shift, ±8% zoom).  It works together with the ``*_digits``
configs, which enlarge the digits (bilinear) before cutting patches -- ``vit_digits`` sees
24×24 images in 6×6 patches: the same 4×4 grid of tokens as 2×2 patches of the original, but
each patch overlaps its neighbours a little and the sub-pixel augmentation stays sharp.  On the
8×8 original the same augmentation blurs and a one-pixel shift moves a digit by an eighth of
its width; there, no augmentation was best (~96%).  Enlarged and augmented: ~98.8%.
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from .data import check_data, make_datasets
from .models import create_model, get_config, get_pretrained_cfg
from .weights import CheckpointError, load_checkpoint, read_state_dict, save_checkpoint

# The files of a run folder.
CHECKPOINT = "checkpoint.safetensors"  # the model weights (vit_scratch.load_checkpoint reads it)
STATE = "trainer_state.pt"  # what --resume needs: optimizer, epoch, random states, history
CONFIG = "config.json"  # the TrainConfig, the model's config and the class names
METRICS = "metrics.json"  # written once the run is finished
CURVES = "curves.png"
RUN_FILES = (CHECKPOINT, STATE, CONFIG, METRICS, CURVES)

#: Options that may change when a run is resumed (they do not change what is computed).
RESUMABLE_CHANGES = ("device", "precision", "compile", "workers", "threads", "progress", "out")


@dataclass
class TrainConfig:
    """Everything that fixes a training run.  ``python -m vit_scratch.train --help`` explains
    each field; the defaults are the README's digits command."""

    model: str = "vit_digits"
    model_kwargs: dict = field(default_factory=dict)
    data: str = "digits"
    test_fraction: float = 0.2
    split_seed: int = 0
    epochs: int = 40
    batch_size: int = 32
    lr: float = 1.5e-3
    weight_decay: float = 0.3
    warmup_epochs: float | None = None  # None: min(2, epochs / 10)
    label_smoothing: float = 0.1
    rotate: float = 8.0
    translate: float = 0.05
    scale: float = 0.08
    seed: int = 0
    init: str | None = None
    device: str = "auto"
    precision: str = "auto"
    compile: bool = False
    workers: int = 0
    threads: int = 0
    progress: str = "auto"
    out: str | None = None


HELP = {
    "model": "model to train: any registered name (python -c 'import vit_scratch; "
             "print(vit_scratch.list_models())')",
    "data": "'digits' (scikit-learn's 8×8 digits), 'digits_on_canvas' (the localisation set), or "
            "a folder of images with one subfolder per class (train/ and test/ subfolders, if "
            "present, are the split)",
    "test_fraction": "share of each class held out for testing (when the data has no split)",
    "split_seed": "fixes which images are in the test split",
    "epochs": "passes over the training data",
    "batch_size": "images per optimisation step",
    "lr": "peak learning rate of AdamW, reached after the warm-up",
    "weight_decay": "AdamW weight decay, on weight matrices and kernels only",
    "warmup_epochs": "epochs of linear warm-up before the cosine decay to 0, may be fractional "
                     "(default: 2, or a tenth of --epochs if that is less)",
    "label_smoothing": "share of the target spread over the other classes",
    "rotate": "augmentation: random rotation, up to this many degrees either way (0: off)",
    "translate": "augmentation: random shift, up to this fraction of the image side (0: off)",
    "scale": "augmentation: random zoom by a factor in [1 - scale, 1 + scale] (0: off)",
    "seed": "seeds the initialisation, the data order, the augmentation and dropout",
    "init": "start from the weights in this checkpoint file (fine-tuning); its head is replaced "
            "when the number of classes differs (default: none, train from scratch)",
    "device": "'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N' or 'mps'",
    "precision": "'auto' (bf16 autocast on a GPU that supports it, else fp32), 'fp32' or 'bf16'",
    "compile": "torch.compile the model (GPU only; skipped with a note on the CPU)",
    "workers": "DataLoader worker processes (0: load in the main process)",
    "threads": "CPU threads for PyTorch (0: PyTorch's default, one per core)",
    "progress": "progress bar within each epoch: 'auto' (only when stderr is a terminal), 'on', "
                "'off'",
    "out": "run folder for checkpoint.safetensors, trainer_state.pt, config.json, metrics.json, "
           "curves.png (default: runs/MODEL-DATA)",
}


# --- checking the arguments -------------------------------------------------------------------

def default_out(cfg: TrainConfig) -> str:
    data = cfg.data if cfg.data in ("digits", "digits_on_canvas") else Path(cfg.data).name
    return str(Path("runs") / f"{cfg.model}-{data}")


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


def check_config(cfg: TrainConfig, own_data: bool = False) -> None:
    """Every field of ``cfg`` that can be checked without building anything; a ``ValueError``
    naming the option and the value otherwise.  ``own_data``: the caller brings the datasets
    (``cfg.data`` is then only their name)."""
    get_config(cfg.model)  # unknown names list the known ones
    try:
        get_config(cfg.model, **{k: v for k, v in cfg.model_kwargs.items() if k != "num_classes"})
    except TypeError as error:  # an unknown field: say which option it came from
        raise ValueError(f"--model-arg: {error}") from None
    if not own_data:
        check_data(cfg.data)
    for name in ("epochs", "batch_size"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got "
                             f"{value!r}")
    if not 0.0 < cfg.test_fraction < 1.0:
        raise ValueError(f"--test-fraction must be in (0, 1), got {cfg.test_fraction!r}")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ValueError(f"--lr must be a positive number, got {cfg.lr!r}")
    if not (math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0):
        raise ValueError(f"--weight-decay must be >= 0, got {cfg.weight_decay!r}")
    if not 0.0 <= warmup_epochs(cfg) <= cfg.epochs:
        raise ValueError(f"--warmup-epochs must be in [0, --epochs={cfg.epochs}], got "
                         f"{cfg.warmup_epochs!r}")
    if not 0.0 <= cfg.label_smoothing < 1.0:
        raise ValueError(f"--label-smoothing must be in [0, 1), got {cfg.label_smoothing!r}")
    if not 0.0 <= cfg.rotate <= 180.0:
        raise ValueError(f"--rotate must be in [0, 180] degrees, got {cfg.rotate!r}")
    if not 0.0 <= cfg.translate < 1.0:
        raise ValueError(f"--translate must be in [0, 1) (a fraction of the image side), got "
                         f"{cfg.translate!r}")
    if not 0.0 <= cfg.scale < 1.0:
        raise ValueError(f"--scale must be in [0, 1), got {cfg.scale!r}")
    for name in ("workers", "threads"):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"--{name} must be an integer >= 0, got {value!r}")
    if cfg.progress not in ("auto", "on", "off"):
        raise ValueError(f"--progress must be 'auto', 'on' or 'off', got {cfg.progress!r}")
    resolve_precision(cfg.precision, resolve_device(cfg.device))
    if cfg.init is not None:
        path = Path(cfg.init)
        if not path.is_file():
            raise ValueError(f"--init {cfg.init!r}: no such checkpoint file")


def warmup_epochs(cfg: TrainConfig) -> float:
    """``cfg.warmup_epochs``, or its default: 2 epochs, or a tenth of the run if that is less."""
    return min(2.0, cfg.epochs / 10) if cfg.warmup_epochs is None else cfg.warmup_epochs


def run_state(out: Path) -> str:
    """``'empty'`` (no run files), ``'finished'`` (metrics.json written) or ``'unfinished'``."""
    if (out / METRICS).exists():
        return "finished"
    if any((out / name).exists() for name in (CHECKPOINT, STATE)):
        return "unfinished"
    return "empty"


def check_out(out: Path, resume: bool, overwrite: bool) -> str:
    """Check the run folder before training: it must be a folder we can write to, and it must
    not hold a run unless we resume it or may overwrite it.  Returns its ``run_state``."""
    if out.suffix == ".safetensors" or (out.exists() and not out.is_dir()):
        raise ValueError(f"--out {str(out)!r} must be a folder (the run writes several files "
                         f"into it: {', '.join(RUN_FILES)})")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    state = run_state(out) if out.is_dir() else "empty"
    if resume:
        if state == "empty":
            raise ValueError(f"--resume: {str(out)!r} holds no run to resume ({STATE} missing)")
        if state == "finished":
            raise ValueError(f"--resume: the run in {str(out)!r} is finished (see "
                             f"{out / METRICS}); start a new one with another --out, or "
                             f"--overwrite")
        if not (out / STATE).exists() or not (out / CHECKPOINT).exists():
            raise ValueError(f"--resume: {str(out)!r} lacks {STATE} or {CHECKPOINT}")
    elif state != "empty" and not overwrite:
        raise ValueError(f"--out {str(out)!r} already holds a{' finished' if state == 'finished' else 'n unfinished'} "
                         f"run; pass --overwrite to replace it"
                         f"{', or --resume to continue it' if state == 'unfinished' else ''}, "
                         f"or choose another folder")
    try:  # unwritable folders fail now, not after training
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write_test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"--out {str(out)!r} is not a folder we can write to: {error}") from None
    return state


# --- the pieces of training -------------------------------------------------------------------

def build_model(cfg: TrainConfig, num_classes: int | None = None):
    """The model of ``cfg``; ``num_classes`` (from the data) overrides the name's default."""
    kwargs = dict(cfg.model_kwargs)
    if num_classes is not None:
        if kwargs.get("num_classes", num_classes) != num_classes:
            raise ValueError(f"--model-arg num_classes={kwargs['num_classes']} but the data has "
                             f"{num_classes} classes")
        kwargs["num_classes"] = num_classes
    return create_model(cfg.model, **kwargs)


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


def lr_at(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up to ``base`` over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1.0 + math.cos(math.pi * min(1.0, progress)))


def random_affine(images: torch.Tensor, rotate: float, translate: float, scale: float,
                  gen: torch.Generator) -> torch.Tensor:
    """Rotate by U(-rotate, rotate) degrees, zoom by U(1 - scale, 1 + scale) and shift by
    U(-translate, translate) of the image side, one draw per image; bilinear, edges repeated.

    images (B, C, H, W) -> (B, C, H, W).  The random numbers come from ``gen`` (on the CPU,
    so a run is the same on every device)."""
    if rotate == 0 and translate == 0 and scale == 0:
        return images
    B = images.shape[0]
    u = torch.rand(B, 4, generator=gen, dtype=torch.float32) * 2 - 1  # (B, 4) in [-1, 1)
    angle = u[:, 0] * math.radians(rotate)
    zoom = 1 + u[:, 1] * scale
    shift = u[:, 2:] * translate * 2  # affine_grid's coordinates span 2 per image side
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1),
                         torch.stack([sin, cos, shift[:, 1]], 1)], 1)  # (B, 2, 3)
    return affine(images, theta.to(images.device, images.dtype))


def affine(images: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Resample ``images`` (B, C, H, W) at the affine map ``theta`` (B, 2, 3) of output to input
    coordinates (``F.affine_grid``'s convention, [-1, 1] over the image); edges repeated."""
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border",
                         align_corners=False)


def train_step(model, images, labels, optimizer, label_smoothing: float = 0.0,
               autocast_dtype: torch.dtype | None = None) -> tuple[float, int]:
    """One optimisation step on a batch; returns (loss, number of correct predictions)."""
    with torch.autocast(images.device.type, dtype=autocast_dtype or torch.bfloat16,
                        enabled=autocast_dtype is not None):
        logits = model(images)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item(), (logits.argmax(-1) == labels).sum().item()


@torch.no_grad()
def evaluate(model, loader, device, autocast_dtype: torch.dtype | None = None) -> dict:
    """Mean cross-entropy and accuracy of ``model`` over ``loader``."""
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
    return {"loss": loss_sum / count, "accuracy": correct / count}


def init_from(model, path) -> None:
    """Load the weights of ``path`` into ``model`` for fine-tuning: strictly, except that a head
    for another number of classes is replaced by a fresh one.  Mismatched keys raise
    ``CheckpointError`` naming them."""
    head = model.get_classifier()
    prefix = next((name for name, m in model.named_modules() if m is head), None)
    key = f"{prefix}.weight"
    state = read_state_dict(path)
    n_file = state[key].shape[0] if prefix and key in state and state[key].ndim == 2 else None
    if n_file is not None and n_file != model.num_classes:
        wanted = model.num_classes
        model.reset_classifier(n_file)
        load_checkpoint(model, path)
        model.reset_classifier(wanted)
    else:
        load_checkpoint(model, path)


def class_names(dataset) -> list[str]:
    """``dataset.classes``, or ``["0", ..., str(max label)]`` read from ``.targets`` or from the
    dataset itself."""
    classes = getattr(dataset, "classes", None)
    if classes:
        return [str(c) for c in classes]
    labels = getattr(dataset, "targets", None)
    if labels is None:
        labels = [int(dataset[i][1]) for i in range(len(dataset))]
    return [str(c) for c in range(int(max(int(y) for y in labels)) + 1)]


def _save_atomic(write, path: Path) -> None:
    """Write to a temporary file next to ``path``, then rename: a crash never leaves half a file."""
    tmp = path.with_name(f".tmp-{path.name}")
    write(tmp)
    os.replace(tmp, path)


def rng_states(gens: dict[str, torch.Generator], device: torch.device) -> dict:
    states = {name: g.get_state() for name, g in gens.items()}
    states["torch"] = torch.get_rng_state()
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(states: dict, gens: dict[str, torch.Generator], device: torch.device) -> None:
    for name, g in gens.items():
        g.set_state(states[name])
    torch.set_rng_state(states["torch"])
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"], device)


def _json_ready(value):
    if isinstance(value, tuple):
        return list(value)
    return value


# --- the run ----------------------------------------------------------------------------------

def train(cfg: TrainConfig, resume: bool = False, overwrite: bool = False, log=print,
          on_epoch_end=None, datasets=None) -> dict:
    """Check ``cfg``, build the data and the model, train, save as it goes; returns a dict with
    ``model`` (the trained model), ``history``, ``test_accuracy``, ``train_seconds``,
    ``cpu_seconds``, ``params``, ``out``.

    ``resume=True`` continues the unfinished run in ``cfg.out`` exactly where its last saved
    epoch ended; ``overwrite=True`` replaces a run there.  ``on_epoch_end(epoch, record)`` is
    called after each epoch has been saved.  ``cfg.out=None`` trains without saving.

    ``datasets=(train_set, test_set)``: any PyTorch datasets of ``(image, label)`` pairs, images
    already shaped as the model expects (e.g. torchvision's, with your own transforms); then
    ``cfg.data`` only names them.  The model gets ``len(train_set.classes)`` classes if the
    dataset has ``.classes``, else one more than the largest label."""
    check_config(cfg, own_data=datasets is not None)
    out = Path(cfg.out) if cfg.out is not None else None
    if out is not None:
        replace = check_out(out, resume, overwrite) != "empty" and overwrite
    elif resume:
        raise ValueError("resume needs the run folder (--out)")
    device = resolve_device(cfg.device)
    autocast_dtype = resolve_precision(cfg.precision, device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)

    state, model = None, None
    if resume:  # check the saved run against cfg before building the data
        state = torch.load(out / STATE, map_location="cpu", weights_only=True)
        check_same_run(cfg, state["config"], out)
        saved_classes = json.loads((out / CONFIG).read_text())["classes"]
        model = build_model(cfg, len(saved_classes) or None)
        try:  # a run of another model: CheckpointError naming the mismatched keys
            load_checkpoint(model, out / CHECKPOINT)
        except CheckpointError as error:
            raise CheckpointError(f"--resume: the run in {str(out)!r} was trained with --model "
                                  f"{state['config']['model']} {state['config']['model_kwargs']}"
                                  f", not {cfg.model} {cfg.model_kwargs}: {error}") from None
        model.load_state_dict(state["model"])  # the weights of the last saved epoch

    # The data, shaped as the model's pretrained_cfg says; then the model, with its classes.
    pretrained_cfg = get_pretrained_cfg(cfg.model, **cfg.model_kwargs)
    if datasets is None:
        train_set, test_set = make_datasets(cfg.data, pretrained_cfg, cfg.test_fraction,
                                            cfg.split_seed)
    else:
        train_set, test_set = datasets
    classes = class_names(train_set)
    if resume and classes != saved_classes:
        raise ValueError(f"--resume: the data's classes {classes} are not the run's "
                         f"{saved_classes}")
    if model is None:
        torch.manual_seed(cfg.seed)
        model = build_model(cfg, len(classes) or None)
        if cfg.init is not None:
            init_from(model, cfg.init)
    model.to(device)
    params = count_params(model)

    gens = {"loader": torch.Generator().manual_seed(cfg.seed),
            "augment": torch.Generator().manual_seed(cfg.seed + 1)}
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=cfg.batch_size, shuffle=True, generator=gens["loader"],
        num_workers=cfg.workers, pin_memory=device.type == "cuda")
    test_loader = torch.utils.data.DataLoader(
        test_set, batch_size=max(256, cfg.batch_size), num_workers=cfg.workers)
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.lr)
    steps_per_epoch = len(train_loader)
    total, warmup = cfg.epochs * steps_per_epoch, round(warmup_epochs(cfg) * steps_per_epoch)

    history, first_epoch, train_seconds, cpu_seconds = [], 0, 0.0, 0.0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        set_rng_states(state["rng"], gens, device)
        history, first_epoch = list(state["history"]), int(state["epoch"])
        train_seconds, cpu_seconds = float(state["train_seconds"]), float(state["cpu_seconds"])
        log(f"resuming {out} after epoch {first_epoch}/{cfg.epochs}")

    runner = model
    if cfg.compile:
        if device.type == "cuda":
            runner = torch.compile(model)
        else:
            log("--compile: skipped (torch.compile is used on a GPU only)")
    if out is not None and not resume:
        if replace:  # only now, once everything is set up: the old run's files, nothing else
            for name in RUN_FILES:
                (out / name).unlink(missing_ok=True)
        config = {"train": asdict(cfg), "model_config": {
            k: _json_ready(v) for k, v in asdict(model.cfg).items()}, "classes": classes,
            "pretrained_cfg": {k: _json_ready(v) for k, v in model.pretrained_cfg.items()}}
        (out / CONFIG).write_text(json.dumps(config, indent=2))
    log(f"{cfg.model}: {params:,} parameters, {len(train_set)} train / {len(test_set)} test "
        f"images of {tuple(pretrained_cfg['input_size'])}, {len(classes) or '?'} classes, "
        f"{cfg.epochs} epochs on {device}"
        f"{' (bf16 autocast)' if autocast_dtype is not None else ''}")

    show_bar = cfg.progress == "on" or (cfg.progress == "auto" and sys.stderr.isatty())
    for epoch in range(first_epoch, cfg.epochs):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        runner.train()
        loss_sum, correct, count = 0.0, 0, 0
        step = epoch * steps_per_epoch
        bar = _progress(train_loader, epoch, cfg.epochs, show_bar)
        for images, labels in bar:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            images = random_affine(images, cfg.rotate, cfg.translate, cfg.scale, gens["augment"])
            lr = lr_at(step, total, warmup, cfg.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss, right = train_step(runner, images, labels, optimizer, cfg.label_smoothing,
                                     autocast_dtype)
            loss_sum += loss * len(labels)
            correct += right
            count += len(labels)
            step += 1
            if show_bar:
                bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", refresh=False)
        test = evaluate(runner, test_loader, device, autocast_dtype)
        train_seconds += time.perf_counter() - wall0
        cpu_seconds += time.process_time() - cpu0
        record = {"epoch": epoch + 1, "lr": lr, "train_loss": loss_sum / count,
                  "train_accuracy": correct / count, "test_loss": test["loss"],
                  "test_accuracy": test["accuracy"], "train_seconds": train_seconds}
        history.append(record)
        if out is not None:
            save_run_state(out, model, optimizer, cfg, epoch + 1, history, train_seconds,
                           cpu_seconds, rng_states(gens, device))
        log(f"epoch {epoch + 1:3d}/{cfg.epochs}  loss {record['train_loss']:.4f}  "
            f"train acc {record['train_accuracy']:.4f}  test loss {record['test_loss']:.4f}  "
            f"test acc {record['test_accuracy']:.4f}  ({train_seconds:.0f} s)")
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)

    result = {
        "model": cfg.model, "data": cfg.data, "test_accuracy": history[-1]["test_accuracy"],
        "train_seconds": train_seconds, "cpu_seconds": cpu_seconds, "params": params,
        "epochs": cfg.epochs, "device": str(device),
        "precision": "bf16" if autocast_dtype is not None else "fp32",
        "threads": torch.get_num_threads(), "torch": str(torch.__version__),
        "config": asdict(cfg), "history": history,
    }
    if out is not None:
        from .plotting import save_training_curves

        save_training_curves(history, out / CURVES, title=f"{cfg.model} on {cfg.data}")
        _save_atomic(lambda p: p.write_text(json.dumps(result, indent=2)), out / METRICS)
    log(f"test accuracy {result['test_accuracy']:.4f} after {cfg.epochs} epochs "
        f"({train_seconds:.1f} s wall, {cpu_seconds:.1f} s CPU, {params:,} parameters, "
        f"{device}){f' -> {out}' if out is not None else ''}")
    return {**result, "model": model, "out": out}


def _progress(loader, epoch: int, epochs: int, show: bool):
    if not show:
        return loader
    from tqdm.auto import tqdm

    return tqdm(loader, desc=f"epoch {epoch + 1}/{epochs}", leave=False, unit="batch",
                dynamic_ncols=True)


def save_run_state(out: Path, model, optimizer, cfg: TrainConfig, epoch: int, history: list,
                   train_seconds: float, cpu_seconds: float, rng: dict) -> None:
    """After an epoch: the weights (safetensors) and everything ``--resume`` needs (a
    ``torch.save`` of tensors and plain containers only, read back with ``weights_only=True``;
    it holds the weights too, so the pair can never be from different epochs)."""
    _save_atomic(lambda p: save_checkpoint(model, p), out / CHECKPOINT)
    state = {"epoch": epoch, "config": asdict(cfg), "optimizer": optimizer.state_dict(),
             "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             "rng": rng, "history": history, "train_seconds": train_seconds,
             "cpu_seconds": cpu_seconds, "torch": str(torch.__version__)}
    _save_atomic(lambda p: torch.save(state, p), out / STATE)


def check_same_run(cfg: TrainConfig, saved: dict, out: Path) -> None:
    """``--resume`` continues the saved run exactly: options that change what is computed must
    equal the saved ones (the model is checked by loading its checkpoint: mismatched keys)."""
    differ = [f"--{name.replace('_', '-')} {getattr(cfg, name)!r} (the run has {saved[name]!r})"
              for name in saved
              if name not in RESUMABLE_CHANGES + ("model", "model_kwargs")
              and hasattr(cfg, name) and getattr(cfg, name) != saved[name]]
    if differ:
        raise ValueError(f"--resume continues the run in {str(out)!r} exactly as it started, but "
                         f"{'; '.join(differ)}; drop those options or start a new run")


def load_run(out, device: str = "cpu"):
    """The trained model of a run folder (``config.json`` + ``checkpoint.safetensors``), in
    eval mode: ``model = load_run("runs/vit_digits-digits")``."""
    out = Path(out)
    config = json.loads((out / CONFIG).read_text())
    model = create_model(config["train"]["model"], **{
        **config["train"]["model_kwargs"], "num_classes": config["model_config"]["num_classes"]})
    load_checkpoint(model, out / CHECKPOINT)
    return model.to(device).eval()


# --- the command line -------------------------------------------------------------------------

def parse_model_arg(text: str) -> tuple[str, object]:
    """``"depth=6"`` -> ``("depth", 6)``; values are Python literals, else strings."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--model-arg takes KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` after each option, except where the help text says it itself."""

    def _get_help_string(self, action):
        if action.default is None or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


METAVARS = {"model": "NAME", "data": "NAME|DIR", "init": "FILE", "out": "DIR", "device": "DEVICE",
            "test_fraction": "F", "split_seed": "N", "epochs": "N", "batch_size": "N",
            "lr": "LR", "weight_decay": "WD", "warmup_epochs": "N", "label_smoothing": "F",
            "rotate": "DEG", "translate": "F", "scale": "F", "seed": "N", "workers": "N",
            "threads": "N"}


def build_parser(show_defaults: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.train",
        description="Train a registered model on offline data (scikit-learn's digits, the "
                    "digits-on-canvas localisation set) or on a folder of your own images. "
                    "Saves the run in --out after every epoch; writes metrics.json and "
                    "curves.png at the end.",
        epilog="Example: python -m vit_scratch.train --model vit_digits --data digits "
               "--epochs 40 --out runs/vit_digits\n",
        formatter_class=_HelpFormatter,
        argument_default=None if show_defaults else argparse.SUPPRESS)
    defaults = TrainConfig()
    choices = {"device": None, "precision": ["auto", "fp32", "bf16"],
               "progress": ["auto", "on", "off"]}
    for f in fields(TrainConfig):
        if f.name in ("model_kwargs", "compile"):
            continue
        default = getattr(defaults, f.name)
        kind = {"int": int, "float": float}.get(str(f.type).split(" ")[0], str)
        kwargs = dict(type=kind, help=HELP[f.name], choices=choices.get(f.name),
                      metavar=METAVARS.get(f.name))
        if show_defaults:
            kwargs["default"] = default
        parser.add_argument(f"--{f.name.replace('_', '-')}", **kwargs)
    parser.add_argument("--model-arg", type=parse_model_arg, action="append",
                        metavar="KEY=VALUE",
                        help="override a field of the model's config, repeatable "
                             "(e.g. --model-arg depth=6 --model-arg embed_dim=96)",
                        **({"default": []} if show_defaults else {}))
    parser.add_argument("--compile", action="store_true", help=HELP["compile"],
                        **({"default": False} if show_defaults else {}))
    parser.add_argument("--resume", action="store_true",
                        help="continue the unfinished run in --out from its last saved epoch "
                             "(options not given again are taken from the run)",
                        **({"default": False} if show_defaults else {}))
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run already in --out (otherwise that is an error)",
                        **({"default": False} if show_defaults else {}))
    return parser


def config_from_args(argv) -> tuple[TrainConfig, bool, bool]:
    """argv -> (TrainConfig, resume, overwrite).  With ``--resume``, options not given are
    taken from the run in ``--out``."""
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    given = vars(build_parser(show_defaults=False).parse_args(argv))  # only what was typed
    resume, overwrite = args.pop("resume"), args.pop("overwrite")
    args["model_kwargs"] = dict(args.pop("model_arg"))
    if "model_arg" in given:
        given["model_kwargs"] = dict(given.pop("model_arg"))
    if args["out"] is None:
        args["out"] = default_out(TrainConfig(**args))
    if resume:
        saved_file = Path(args["out"]) / STATE
        if saved_file.exists():
            saved = torch.load(saved_file, map_location="cpu", weights_only=True)["config"]
            saved = {k: v for k, v in saved.items() if k in args}
            args = {**saved, **{k: v for k, v in given.items() if k in args},
                    "out": args["out"]}
    return TrainConfig(**args), resume, overwrite


def main(argv=None) -> dict:
    parser = build_parser()
    out = None
    try:
        cfg, resume, overwrite = config_from_args(argv)
        out = cfg.out
        return train(cfg, resume=resume, overwrite=overwrite)
    except (ValueError, CheckpointError) as error:
        parser.error(str(error))  # usage + the message, exit status 2
    except KeyboardInterrupt:
        if out is not None and (Path(out) / STATE).exists():
            print(f"\ninterrupted: the run in {out} is saved up to its last finished epoch; "
                  f"continue it with: python -m vit_scratch.train --out {out} --resume",
                  file=sys.stderr)
        else:
            print("\ninterrupted before the first epoch was saved", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
