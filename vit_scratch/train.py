"""Train any registered model on offline data -- the course's training command.

    python -m vit_scratch.train --model vit_digits --data digits --epochs 40 --out runs/vit
    python -m vit_scratch.train --model coat_lite_digits --data my_pictures/ --out runs/mine
    python -m vit_scratch.train --out runs/vit --resume         # continue after a crash / Ctrl-C
    python -m vit_scratch.train --help                          # every option, with its default

``train(settings)`` reads top to bottom: set-up, the loop, save.

1. **Set-up.**  Every setting is checked (model and data names, numbers, the device, the
   ``--out`` folder) before anything is built, and a run is never written over unless
   ``--overwrite``.  The model (``--model``, ``--model-arg key=value``) gets as many classes as
   the data has; the data follows the model: resized to its input size and normalised with its
   mean and std (``vit_scratch.data.make_datasets``).
2. **The loop.**  A scaled-down DeiT recipe: AdamW with weight decay on the weight matrices only
   (the model names the tokens and embeddings that skip it, ``model.no_weight_decay()``),
   linear warm-up then cosine decay, label smoothing, stochastic depth, and optionally a random
   affine augmentation (``--rotate``, ``--translate``, ``--scale``;
   ``vit_scratch.data.random_affine``) -- on a GPU in bf16 autocast, optionally
   ``torch.compile``-d.  The test split is evaluated after every epoch.
3. **Save.**  After every epoch the run folder (``vit_scratch.run_folder``) gets the weights and
   everything ``--resume`` needs, so a crash or Ctrl-C loses at most one epoch and ``--resume``
   continues bit for bit; at the end ``metrics.json`` and ``curves.png``.

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

import argparse
import ast
import math
import sys
import time
import typing
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F

from . import run_folder
from .data import check_data, data_classes, make_datasets, random_affine
from .models import create_model, get_config
from .run_folder import CHECKPOINT, CURVES, METRICS, STATE
from .weights import CheckpointError, load_checkpoint, read_state_dict


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
    same fields as options.  The defaults are the README's digits command."""

    model: str = setting(
        "vit_digits", "model to train: any registered name (python -c 'import vit_scratch; "
        "print(vit_scratch.list_models())')", metavar="NAME")
    model_kwargs: dict = setting(
        dict, "override a field of the model's config, repeatable (e.g. --model-arg depth=6 "
        "--model-arg embed_dim=96)", flag="--model-arg", metavar="KEY=VALUE",
        parse=parse_model_arg)
    data: str = setting(
        "digits", "'digits' (scikit-learn's 8×8 digits), 'digits_on_canvas' (the localisation "
        "set), or a folder of images with one subfolder per class (train/ and test/ subfolders, "
        "if present, are the split)", metavar="NAME|DIR")
    test_fraction: float = setting(
        0.2, "share of each class held out for testing (when the data has no split)",
        metavar="F")
    split_seed: int = setting(0, "fixes which images are in the test split", metavar="N")
    epochs: int = setting(40, "passes over the training data", metavar="N")
    batch_size: int = setting(32, "images per optimisation step", metavar="N")
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
    seed: int = setting(0, "seeds the initialisation, the data order, the augmentation and "
                           "dropout", metavar="N")
    init: str | None = setting(
        None, "start from the weights in this checkpoint file (fine-tuning); its head is "
        "replaced when the number of classes differs (default: none, train from scratch)",
        metavar="FILE")
    device: str = setting("auto", "'auto' (cuda if available, else cpu), 'cpu', 'cuda', 'cuda:N' "
                                  "or 'mps'", metavar="DEVICE")
    precision: str = setting("auto", "'auto' (bf16 autocast on a GPU that supports it, else "
                                     "fp32), 'fp32' or 'bf16'", choices=("auto", "fp32", "bf16"))
    compile: bool = setting(False, "torch.compile the model (GPU only; skipped with a note on "
                                   "the CPU)")
    workers: int = setting(0, "DataLoader worker processes (0: load in the main process)",
                           metavar="N")
    threads: int = setting(0, "CPU threads for PyTorch (0: PyTorch's default, one per core)",
                           metavar="N")
    progress: str = setting("auto", "progress bar within each epoch: 'auto' (only when stderr is "
                                    "a terminal), 'on', 'off'", choices=("auto", "on", "off"))
    out: str | None = setting(
        None, "run folder for checkpoint.safetensors, trainer_state.pt, settings.json, "
        "metrics.json, curves.png (default: runs/MODEL-DATA)", metavar="DIR")


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


def check_settings(settings: TrainSettings, own_data: bool = False) -> None:
    """Every setting that can be checked without building anything; a ``ValueError`` naming
    the option and the value otherwise.  ``own_data``: the caller brings the datasets
    (``settings.data`` is then only their name)."""
    get_config(settings.model)  # unknown names list the known ones
    try:
        get_config(settings.model, **{k: v for k, v in settings.model_kwargs.items()
                                      if k != "num_classes"})
    except TypeError as error:  # an unknown field: say which option it came from
        raise ValueError(f"--model-arg: {error}") from None
    if not own_data:
        check_data(settings.data)
    for name in ("epochs", "batch_size"):
        value = getattr(settings, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got "
                             f"{value!r}")
    if not 0.0 < settings.test_fraction < 1.0:
        raise ValueError(f"--test-fraction must be in (0, 1), got {settings.test_fraction!r}")
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
    for name in ("workers", "threads"):
        value = getattr(settings, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"--{name} must be an integer >= 0, got {value!r}")
    if settings.progress not in ("auto", "on", "off"):
        raise ValueError(f"--progress must be 'auto', 'on' or 'off', got {settings.progress!r}")
    resolve_precision(settings.precision, resolve_device(settings.device))
    if settings.init is not None and not Path(settings.init).is_file():
        raise ValueError(f"--init {settings.init!r}: no such checkpoint file")


def warmup_epochs(settings: TrainSettings) -> float:
    """``settings.warmup_epochs``, or its default: 2 epochs, or a tenth of the run if that is
    less."""
    if settings.warmup_epochs is None:
        return min(2.0, settings.epochs / 10)
    return settings.warmup_epochs


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


def lr_at(step: int, total: int, warmup: int, base: float) -> float:
    """Linear warm-up to ``base`` over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * base * (1.0 + math.cos(math.pi * min(1.0, progress)))


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


def _progress(loader, epoch: int, epochs: int, show: bool):
    if not show:
        return loader
    from tqdm.auto import tqdm

    return tqdm(loader, desc=f"epoch {epoch + 1}/{epochs}", leave=False, unit="batch",
                dynamic_ncols=True)


# --- the run ----------------------------------------------------------------------------------

def train(settings: TrainSettings, resume: bool = False, overwrite: bool = False, log=print,
          on_epoch_end=None, datasets=None) -> dict:
    """Check ``settings``, build the model and the data, train, save as it goes; returns a dict
    with ``model`` (the trained model), ``history``, ``test_accuracy``, ``train_seconds``,
    ``cpu_seconds``, ``params``, ``out``.

    ``resume=True`` continues the unfinished run in ``settings.out`` exactly where its last
    saved epoch ended; ``overwrite=True`` replaces a run there.  ``on_epoch_end(epoch, record)``
    is called after each epoch has been saved.  ``settings.out=None`` trains without saving.

    ``datasets=(train_set, test_set)``: any PyTorch datasets of ``(image, label)`` pairs, images
    already shaped as the model expects (e.g. torchvision's, with your own transforms); then
    ``settings.data`` only names them.  The model gets ``len(train_set.classes)`` classes if the
    dataset has ``.classes``, else one more than the largest label."""
    # --- set-up: check everything, then build the model, the data and the optimizer
    check_settings(settings, own_data=datasets is not None)
    out = Path(settings.out) if settings.out is not None else None
    replace = False
    if out is not None:
        replace = run_folder.check_out(out, resume, overwrite) != "empty" and overwrite
    elif resume:
        raise ValueError("resume needs the run folder (--out)")
    device = resolve_device(settings.device)
    autocast_dtype = resolve_precision(settings.precision, device)
    if settings.threads:
        torch.set_num_threads(settings.threads)

    state = run_folder.load_state(out) if resume else None
    model, classes = _model_for_the_data(settings, datasets, state, out)
    if datasets is None:
        train_set, test_set = make_datasets(settings.data, model, settings.test_fraction,
                                            settings.split_seed)
    else:
        train_set, test_set = datasets
    model.to(device)
    params = count_params(model)

    gens = {"loader": torch.Generator().manual_seed(settings.seed),
            "augment": torch.Generator().manual_seed(settings.seed + 1)}
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=settings.batch_size, shuffle=True, generator=gens["loader"],
        num_workers=settings.workers, pin_memory=device.type == "cuda")
    test_loader = torch.utils.data.DataLoader(
        test_set, batch_size=max(256, settings.batch_size), num_workers=settings.workers)
    optimizer = torch.optim.AdamW(param_groups(model, settings.weight_decay), lr=settings.lr)
    steps_per_epoch = len(train_loader)
    total_steps = settings.epochs * steps_per_epoch
    warmup_steps = round(warmup_epochs(settings) * steps_per_epoch)

    history, first_epoch, train_seconds, cpu_seconds = [], 0, 0.0, 0.0
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        run_folder.set_rng_states(state["rng"], gens, device)
        history, first_epoch = list(state["history"]), int(state["epoch"])
        train_seconds, cpu_seconds = float(state["train_seconds"]), float(state["cpu_seconds"])
        log(f"resuming {out} after epoch {first_epoch}/{settings.epochs}")

    runner = model
    if settings.compile:
        if device.type == "cuda":
            runner = torch.compile(model)
        else:
            log("--compile: skipped (torch.compile is used on a GPU only)")
    if out is not None and not resume:
        if replace:  # only now, once everything is set up: the old run's files, nothing else
            run_folder.remove_run_files(out)
        run_folder.write_settings(out, settings, model, classes)
    log(f"{settings.model}: {params:,} parameters, {len(train_set)} train / {len(test_set)} "
        f"test images of {tuple(model.pretrained_cfg['input_size'])}, "
        f"{len(classes) or '?'} classes, {settings.epochs} epochs on {device}"
        f"{' (bf16 autocast)' if autocast_dtype is not None else ''}")

    # --- the loop: one pass over the training data, then the test split, then save
    show_bar = settings.progress == "on" or (settings.progress == "auto" and sys.stderr.isatty())
    for epoch in range(first_epoch, settings.epochs):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        runner.train()
        loss_sum, correct, count = 0.0, 0, 0
        step = epoch * steps_per_epoch
        bar = _progress(train_loader, epoch, settings.epochs, show_bar)
        for images, labels in bar:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            images = random_affine(images, settings.rotate, settings.translate, settings.scale,
                                   gens["augment"])
            lr = lr_at(step, total_steps, warmup_steps, settings.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss, right = train_step(runner, images, labels, optimizer, settings.label_smoothing,
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
            run_folder.save_epoch(out, model, {
                "epoch": epoch + 1, "settings": asdict(settings),
                "optimizer": optimizer.state_dict(), "rng": run_folder.rng_states(gens, device),
                "history": history, "train_seconds": train_seconds, "cpu_seconds": cpu_seconds})
        log(f"epoch {epoch + 1:3d}/{settings.epochs}  loss {record['train_loss']:.4f}  "
            f"train acc {record['train_accuracy']:.4f}  test loss {record['test_loss']:.4f}  "
            f"test acc {record['test_accuracy']:.4f}  ({train_seconds:.0f} s)")
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)

    # --- save: metrics.json, then the figure
    result = {
        "model": settings.model, "data": settings.data,
        "test_accuracy": history[-1]["test_accuracy"],
        "train_seconds": train_seconds, "cpu_seconds": cpu_seconds, "params": params,
        "epochs": settings.epochs, "device": str(device),
        "precision": "bf16" if autocast_dtype is not None else "fp32",
        "threads": torch.get_num_threads(), "torch": str(torch.__version__),
        "settings": asdict(settings), "history": history,
    }
    if out is not None:
        run_folder.write_json(result, out / METRICS)
        from .plotting import save_training_curves

        save_training_curves(history, out / CURVES, title=f"{settings.model} on {settings.data}")
    log(f"test accuracy {result['test_accuracy']:.4f} after {settings.epochs} epochs "
        f"({train_seconds:.1f} s wall, {cpu_seconds:.1f} s CPU, {params:,} parameters, "
        f"{device}){f' -> {out}' if out is not None else ''}")
    return {**result, "model": model, "out": out}


def _model_for_the_data(settings: TrainSettings, datasets, state: dict | None, out: Path | None):
    """The model, with as many classes as the data has, and the class names.  Resuming: the
    run's model with its saved weights, after checking that the data has the run's classes."""
    classes = class_names(datasets[0]) if datasets is not None else data_classes(settings.data)
    if state is None:
        torch.manual_seed(settings.seed)
        model = build_model(settings, len(classes) or None)
        if settings.init is not None:
            init_from(model, settings.init)
        return model, classes
    saved = state["settings"]
    run_folder.check_same_run(settings, saved, out)
    saved_classes = run_folder.read_settings(out)["classes"]
    model = build_model(settings, len(saved_classes) or None)
    try:  # a run of another model: CheckpointError naming the mismatched keys
        load_checkpoint(model, out / CHECKPOINT)
    except CheckpointError as error:
        raise CheckpointError(f"--resume: the run in {str(out)!r} was trained with --model "
                              f"{saved['model']} {saved['model_kwargs']}, not {settings.model} "
                              f"{settings.model_kwargs}: {error}") from None
    if classes != saved_classes:
        raise ValueError(f"--resume: the data's classes {classes} are not the run's "
                         f"{saved_classes}")
    model.load_state_dict(state["model"])  # the weights of the last saved epoch
    return model, classes


# --- the command line -------------------------------------------------------------------------

class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: ...)`` after each option, except where the help text says it itself."""

    def _get_help_string(self, action):
        if action.default is None or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


def build_parser(show_defaults: bool = True) -> argparse.ArgumentParser:
    """The command line, generated from :class:`TrainSettings` (one option per field), plus
    ``--resume`` and ``--overwrite``.  ``show_defaults=False``: options not given are absent
    from the parsed namespace (how ``--resume`` tells what was typed)."""
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
                        help="continue the unfinished run in --out from its last saved epoch "
                             "(options not given again are taken from the run)",
                        **default(False))
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
        state_file = Path(args["out"]) / STATE
        if state_file.exists():
            saved = torch.load(state_file, map_location="cpu", weights_only=True)["settings"]
            saved = {k: v for k, v in saved.items() if k in args}
            args = {**saved, **{k: v for k, v in given.items() if k in args},
                    "out": args["out"]}
    return TrainSettings(**args), resume, overwrite


def main(argv=None) -> dict:
    parser = build_parser()
    out = None
    try:
        settings, resume, overwrite = settings_from_args(argv)
        out = settings.out
        return train(settings, resume=resume, overwrite=overwrite)
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
