"""The run folder of ``python -m vit_scratch.train``: its files, written atomically, what
``--resume`` reads back, and the trained model a run folder or a checkpoint file holds
(:func:`open_run`, for the commands that read a run: ``evaluate``, ``predict``).

    checkpoint.safetensors  the weights after the last finished epoch
    best.safetensors        the weights of the epoch with the best validation accuracy
    trainer_state.pt        what --resume needs: the weights again, the optimizer (and fp16's
                            gradient scaler), the epoch, the history, the best epoch (tensors and
                            plain containers only, read back with
                            ``torch.load(weights_only=True)``; a damaged one is named)
    settings.json           the trainer's settings, the model's name and config, the class names
                            and the preprocessing (``pretrained_cfg``)
    metrics.csv             one row per epoch, appended as the run goes (a crash keeps them)
    metrics.json            written once the run is finished: the test result of the selected
                            checkpoint, the times, the history
    curves.png              loss and accuracy per epoch (drawn after metrics.json)

Every file is written to a temporary name and then renamed, so a crash or Ctrl-C never leaves
half a file, and the checkpoint and the state are always from the same epoch.  Both
checkpoints record the model's name, config, preprocessing and class names in their
safetensors metadata, so either file alone is enough to predict (:func:`load_model`).

The random streams need no saving: the trainer derives them from ``--seed``, the epoch and the
process's rank at the start of every epoch, so a resumed run continues bit for bit (with the
same number of processes) from the state of its last finished epoch.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import warnings
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch

from .models import create_model
from .weights import (DATA_CONFIG_KEYS, CheckpointError, load_checkpoint, read_model_info,
                      save_checkpoint)

CHECKPOINT = "checkpoint.safetensors"
BEST = "best.safetensors"
STATE = "trainer_state.pt"
SETTINGS = "settings.json"
METRICS_CSV = "metrics.csv"
METRICS = "metrics.json"
CURVES = "curves.png"
RUN_FILES = (CHECKPOINT, BEST, STATE, SETTINGS, METRICS_CSV, METRICS, CURVES)
#: Where ``evaluate``, ``predict`` and ``export`` write by default, inside the run folder.
EVALUATION = "evaluation"
PREDICTIONS = "predictions"
EXPORT = "export"
RUN_FOLDERS = (EVALUATION, PREDICTIONS, EXPORT)

#: Settings that may change when a run is resumed: they do not change what is computed
#: (``accum_steps`` only up to float rounding), or only what happens after the last epoch
#: (``epochs``, which must then exceed the epochs done; ``patience``; ``select``).
RESUMABLE_CHANGES = ("device", "precision", "compile", "workers", "threads", "progress", "out",
                     "accum_steps", "epochs", "patience", "select", "baseline")

#: The columns of metrics.csv, one row per epoch.
CSV_COLUMNS = ("epoch", "lr", "train_loss", "train_cross_entropy", "train_accuracy", "val_loss",
               "val_accuracy", "train_seconds")


def run_state(out: Path) -> str:
    """``'empty'`` (no run files), ``'finished'`` (metrics.json written) or ``'unfinished'``."""
    if (out / METRICS).exists():
        return "finished"
    if any((out / name).exists() for name in (CHECKPOINT, STATE)):
        return "unfinished"
    return "empty"


def check_out(out: Path, resume: bool, overwrite: bool) -> str:
    """Check the run folder before training: it must be a folder we can write to, and it must
    not hold a run unless we resume it or may overwrite it.  Returns its ``run_state`` (the
    trainer decides whether a finished run can be extended: :func:`check_resume`)."""
    if out.suffix == ".safetensors" or (out.exists() and not out.is_dir()):
        raise ValueError(f"--out {str(out)!r} must be a folder (the run writes several files "
                         f"into it: {', '.join(RUN_FILES)})")
    if resume and overwrite:
        raise ValueError("--resume and --overwrite exclude each other")
    state = run_state(out) if out.is_dir() else "empty"
    if resume:
        if state == "empty":
            raise ValueError(f"--resume: {str(out)!r} holds no run to resume ({STATE} missing)")
        if not (out / STATE).exists() or not (out / CHECKPOINT).exists():
            raise ValueError(f"--resume: {str(out)!r} lacks {STATE} or {CHECKPOINT}")
    elif state != "empty" and not overwrite:
        what = "a finished" if state == "finished" else "an unfinished"
        also = ", or --resume to continue it" if state == "unfinished" else ""
        raise ValueError(f"--out {str(out)!r} already holds {what} run; pass --overwrite to "
                         f"replace it{also}, or choose another folder")
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        # unwritable folders fail now, not after training; the folder itself is made only once
        # the data and the model are ready (the trainer's set-up), so a refused run leaves none
        why = "read-only" if existing.is_dir() else "not a folder"
        raise ValueError(f"--out {str(out)!r} is not a folder we can write to: "
                         f"{str(existing)!r} is {why}")
    return state


def check_resume(settings, state: dict, out: Path) -> bool:
    """``--resume`` continues the saved run exactly: settings that change what is computed must
    equal the saved ones (the model is checked by loading its checkpoint: mismatched keys).  A
    finished run is extended when ``--epochs`` asks for more than it planned.  Returns whether
    this resume extends a finished run."""
    saved = state["settings"]
    differ = [f"--{name.replace('_', '-')} {getattr(settings, name)!r} (the run has "
              f"{saved[name]!r})"
              for name in saved
              if name not in RESUMABLE_CHANGES + ("model", "model_kwargs")
              and hasattr(settings, name) and getattr(settings, name) != saved[name]]
    if differ:
        raise ValueError(f"--resume continues the run in {str(out)!r} exactly as it started, but "
                         f"{'; '.join(differ)}; drop those options or start a new run")
    done = int(state["epoch"])
    if state.get("finished"):
        if settings.epochs <= saved["epochs"]:
            raise ValueError(f"--resume: the run in {str(out)!r} is finished ({done} epochs of "
                             f"{saved['epochs']}, see {out / METRICS}); pass --epochs N with N "
                             f"> {saved['epochs']} to train it further, start a new one with "
                             f"another --out, or --overwrite")
        return True
    if settings.epochs <= done:
        raise ValueError(f"--epochs {settings.epochs}: the run in {str(out)!r} has done {done} "
                         f"epochs already; ask for more")
    return False


def remove_run_files(out: Path) -> None:
    """Delete the files of the run in ``out`` and what the commands that read it wrote there
    (``--overwrite``), nothing else."""
    import shutil

    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)
    for name in RUN_FOLDERS:
        if (out / name).is_dir():
            shutil.rmtree(out / name)


def save_atomic(write, path: Path) -> None:
    """``write(tmp)`` to a temporary file next to ``path``, then rename it to ``path``: a crash
    never leaves half a file."""
    tmp = path.with_name(f".tmp-{path.name}")
    write(tmp)
    os.replace(tmp, path)


def write_json(data, path: Path) -> None:
    save_atomic(lambda p: p.write_text(json.dumps(data, indent=2)), path)


def json_ready(value):
    """Tuples as lists, so that a config dict reads the same from JSON."""
    if isinstance(value, tuple):
        return list(value)
    return value


# --- writing a run ------------------------------------------------------------------------------

def write_settings(out: Path, settings, model, classes: list[str]) -> None:
    """``settings.json``: the trainer's settings, the model's name and config, the classes and
    the preprocessing."""
    write_json({"settings": asdict(settings),
                "model_config": {k: json_ready(v) for k, v in asdict(model.cfg).items()},
                "classes": classes,
                "pretrained_cfg": {k: json_ready(v) for k, v in model.pretrained_cfg.items()}},
               out / SETTINGS)


def read_settings(out: Path) -> dict:
    """The run's settings.json; a damaged one is a ``ValueError`` naming the file and what is
    wrong."""
    path = Path(out) / SETTINGS
    try:
        saved = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{str(path)!r} is damaged: not JSON ({error})") from None
    missing = [key for key in ("settings", "model_config", "classes")
               if not isinstance(saved, dict) or key not in saved]
    if missing or not isinstance(saved["settings"], dict) or "model" not in saved["settings"]:
        what = ", ".join(missing) if missing else "settings.model"
        raise ValueError(f"{str(path)!r} is damaged: it lacks {what} (the trainer writes them "
                         f"all at the start of a run)")
    return saved


def save_weights(out: Path, name: str, model, classes: list[str]) -> None:
    """A checkpoint of the run (``CHECKPOINT`` or ``BEST``), with the class names."""
    save_atomic(lambda p: save_checkpoint(model, p, class_names=classes), out / name)


def save_state(out: Path, model, state: dict) -> None:
    """``state`` (everything ``--resume`` needs) with the model's weights, so that the state and
    the checkpoint of an epoch can never be from different epochs."""
    state = {**state, "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             "torch": str(torch.__version__)}
    save_atomic(lambda p: torch.save(state, p), out / STATE)


#: What ``trainer_state.pt`` holds (``training.progress.RunProgress.save``), and their types.
STATE_KEYS = {"epoch": int, "settings": dict, "optimizer": dict, "history": list,
              "train_seconds": float, "cpu_seconds": float, "best_epoch": int, "classes": list,
              "model": dict}


def load_state(out: Path) -> dict:
    """The saved trainer state of the run in ``out`` (tensors and plain containers only).  A
    file that ``torch.load(weights_only=True)`` cannot read, or that lacks what ``--resume``
    needs, is a ``CheckpointError`` naming it and what to do instead."""
    path = Path(out) / STATE
    instead = (f"its weights after the last saved epoch are in {str(Path(out) / CHECKPOINT)!r}: "
               f"start a new run from them with --init {Path(out) / CHECKPOINT} and another "
               f"--out, or start again with --overwrite")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 -- every reader's error: the file is damaged
        text = str(error).strip()
        why = ("not a file torch.save wrote, or one that holds more than tensors and plain "
               "containers" if "Weights only load failed" in text
               else f"{type(error).__name__}: {text.split('. ')[0].splitlines()[0][:160]}"
               if text else type(error).__name__)
        raise CheckpointError(f"{str(path)!r} is damaged: torch.load cannot read it ({why}); "
                              f"{instead}") from None
    wrong = [f"{key} (a {kind.__name__})" for key, kind in STATE_KEYS.items()
             if not isinstance(state, dict) or not isinstance(state.get(key), kind)
             and not (kind is float and isinstance(state.get(key), int))]
    if wrong:
        raise CheckpointError(f"{str(path)!r} is damaged: it lacks {', '.join(wrong)}; "
                              f"{instead}")
    if state["epoch"] != len(state["history"]) or not 1 <= state["best_epoch"] <= state["epoch"]:
        raise CheckpointError(f"{str(path)!r} is damaged: its epoch {state['epoch']}, best "
                              f"epoch {state['best_epoch']} and history of "
                              f"{len(state['history'])} epochs disagree; {instead}")
    return state


def append_metrics_row(out: Path, record: dict) -> None:
    """One epoch's row of metrics.csv (the header first, in a new file)."""
    path = out / METRICS_CSV
    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(record)


def write_metrics_csv(out: Path, history: list[dict]) -> None:
    """metrics.csv from the history (on resume: the state is the reference, so a row written
    after the last saved state is dropped)."""
    def write(path):
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(history)

    save_atomic(write, out / METRICS_CSV)


# --- reading a model back ---------------------------------------------------------------------

def selected_checkpoint(out: Path) -> Path:
    """The checkpoint file the run selected (``--select``: ``best.safetensors`` or
    ``checkpoint.safetensors``, as settings.json says; without settings.json, the best if it is
    there); a ``ValueError`` if the folder holds none, or if the selected one is missing (the
    other is never taken instead: it holds another epoch)."""
    out = Path(out)
    if (out / SETTINGS).exists():
        select = read_settings(out)["settings"].get("select", "best")
        chosen, other = (BEST, CHECKPOINT) if select == "best" else (CHECKPOINT, BEST)
        if (out / chosen).is_file():
            return out / chosen
        if (out / other).is_file():
            raise ValueError(f"run folder {str(out)!r} selects {chosen} (--select {select}), "
                             f"which is missing; {other} holds another epoch: pass "
                             f"{str(out / other)!r} to use it")
    else:
        for name in (BEST, CHECKPOINT):
            if (out / name).is_file():
                return out / name
    raise ValueError(f"run folder {str(out)!r} holds no checkpoint ({BEST} or {CHECKPOINT}): "
                     f"has its first epoch finished?")


def load_model(path, device="cpu"):
    """The trained model of a run folder (its selected checkpoint) or of a checkpoint file
    alone, in eval mode, with ``model.class_names``: the model's name, config and class names
    come from the file's metadata (``save_checkpoint``), or from the run's settings.json.  Class
    names that do not match the model's head are a ``CheckpointError`` naming the file.

        model = load_model("runs/pets")                     # or "runs/pets/best.safetensors"
    """
    path = Path(path)
    if path.is_dir():
        path = selected_checkpoint(path)
    elif not path.is_file():
        raise ValueError(f"{str(path)!r} is neither a run folder nor a checkpoint file")
    info = read_model_info(path)
    if info["model_name"] is None and (path.parent / SETTINGS).is_file():
        saved = read_settings(path.parent)
        info = {"model_name": saved["settings"]["model"],
                "model_config": {**saved["settings"].get("model_kwargs", {}),
                                 "num_classes": len(saved["classes"])},
                "class_names": info["class_names"] or saved["classes"]}
    if info["model_name"] is None:
        raise CheckpointError(f"checkpoint file {str(path)!r} does not record its model (no "
                              f"'model_name' in its metadata: it was not saved by "
                              f"vit_scratch.save_checkpoint from a model of create_model); "
                              f"build the model yourself and use vit_scratch.load_checkpoint")
    preprocessing = {k: v for k, v in (info.get("pretrained_cfg") or {}).items()
                     if k in DATA_CONFIG_KEYS}  # as recorded (a pretrained_cfg_overlay's too)
    try:
        model = create_model(info["model_name"], **info["model_config"],
                             pretrained_cfg_overlay=preprocessing)
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"checkpoint file {str(path)!r}: its metadata does not describe "
                              f"a model ({error})") from None
    load_checkpoint(model, path)
    names = info["class_names"] or [str(c) for c in range(model.num_classes)]
    if len(names) != model.num_classes or not all(isinstance(n, str) for n in names):
        raise CheckpointError(f"checkpoint file {str(path)!r}: its metadata lists "
                              f"{len(names)} class names for a head of {model.num_classes} "
                              f"classes ({names[:12]})")
    model.class_names = list(names)
    return model.to(device).eval()


def settings_mismatch(checkpoint: Path, folder: Path) -> str | None:
    """A warning when the checkpoint file in a run folder is not of the model the run's
    settings.json trained (a file copied from another run), naming both; ``None`` when they
    agree or there is nothing to compare."""
    if not (folder / SETTINGS).is_file():
        return None
    info = read_model_info(checkpoint)
    if info["model_name"] is None:
        return None
    saved = read_settings(folder)
    name, config = saved["settings"]["model"], saved["model_config"]
    if info["model_name"] == name and (info["model_config"] is None or json.dumps(
            info["model_config"], sort_keys=True) == json.dumps(config, sort_keys=True)):
        return None
    differ = ""
    if info["model_name"] == name and info["model_config"]:
        own = json.loads(json.dumps(info["model_config"]))  # as settings.json has it
        fields = [f"{k}={own.get(k)!r} instead of {v!r}" for k, v in config.items()
                  if own.get(k) != v]
        differ = f" ({'; '.join(fields[:4])})"
    return (f"{str(checkpoint)!r} holds a {info['model_name']}, but the run in {str(folder)!r} "
            f"trained a {name}{differ} (settings.json): using the file's own model, "
            f"{info['model_name']}")


def open_run(run, device="cpu"):
    """``(model, checkpoint, folder)`` of ``run``, a run folder or a checkpoint file: the
    trained model (:func:`load_model`), the checkpoint file it came from (a folder's selected
    one) and the folder holding it (where the run's settings.json is, if any).  A
    ``ValueError`` when ``run`` is neither."""
    run = Path(run)
    if not run.exists():
        raise ValueError(f"{str(run)!r}: no such run folder or checkpoint file")
    checkpoint = selected_checkpoint(run) if run.is_dir() else run
    folder = run if run.is_dir() else run.parent
    model = load_model(checkpoint, device)
    mismatch = settings_mismatch(checkpoint, folder)
    if mismatch:
        warnings.warn(mismatch, stacklevel=2)
    return model, checkpoint, folder


def check_output_folder(out, files: str) -> None:
    """``--out`` of the commands that read a run (``evaluate``, ``predict``): a folder, or
    nothing yet; a file there (or in its path) is a ``ValueError`` naming ``--out``, before
    anything is computed.  ``files``: what the command writes, for the message."""
    if out is None:
        return
    out = Path(out)
    existing = next(p for p in (out, *out.absolute().parents) if p.exists())
    if not existing.is_dir():
        where = "is a file" if existing == out else f"is inside the file {str(existing)!r}"
        raise ValueError(f"--out {str(out)!r} {where}; the command writes a folder of files "
                         f"({files}): choose a folder")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """The commands' help: ``(default: ...)`` after each option, except where the help text
    says its default itself (or there is none)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default is None or "default:" in text or "default " in text:
            return action.help
        return super()._get_help_string(action)


#: The errors a command reports in one line, without a traceback: bad data, a bad checkpoint,
#: a missing file or folder, a missing optional package (its message names the extra).
RUNTIME_ERRORS = (ValueError, CheckpointError, OSError, ImportError)


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (``OSError``s name their file)."""
    text = str(error) or type(error).__name__
    if isinstance(error, OSError) and error.filename and str(error.filename) not in text:
        text = f"{text}: {error.filename}"
    return " ".join(text.split())


@contextmanager
def command_warnings(prog: str):
    """Inside a command: each warning printed as one line, ``PROG: warning: ...``, on stderr
    (not Python's ``file:line: UserWarning`` form)."""
    import sys

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{prog}: warning: {one_line(message)}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def run_command(parser, argv, command):
    """A command that reads a run (``evaluate``, ``predict``): ``command(args)`` on the parsed
    ``argv``.  An argument error prints the usage and the message (argparse's own); a runtime
    error one line, ``PROG: error: ...``; both exit with status 2, without a traceback."""
    import sys

    args = parser.parse_args(argv)
    try:
        with command_warnings(parser.prog):
            return command(args)
    except RUNTIME_ERRORS as error:
        print(f"{parser.prog}: error: {one_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
