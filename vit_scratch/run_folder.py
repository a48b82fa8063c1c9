"""The run folder of ``python -m vit_scratch.train``: its files, written atomically, and what
``--resume`` reads back.

    checkpoint.safetensors  the model weights after the last finished epoch
    trainer_state.pt        what --resume needs: the weights again, the optimizer, the epoch,
                            the random states, the history (tensors and plain containers only,
                            read back with ``torch.load(weights_only=True)``)
    settings.json           the trainer's settings, the model's name and config, the class names
                            and the preprocessing (``pretrained_cfg``)
    metrics.json            written once the run is finished
    curves.png              loss and accuracy per epoch

Every file is written to a temporary name and then renamed, so a crash or Ctrl-C never leaves
half a file, and the checkpoint and the state are always from the same epoch.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import torch

from .models import create_model
from .weights import load_checkpoint, save_checkpoint

CHECKPOINT = "checkpoint.safetensors"
STATE = "trainer_state.pt"
SETTINGS = "settings.json"
METRICS = "metrics.json"
CURVES = "curves.png"
RUN_FILES = (CHECKPOINT, STATE, SETTINGS, METRICS, CURVES)

#: Settings that may change when a run is resumed (they do not change what is computed).
RESUMABLE_CHANGES = ("device", "precision", "compile", "workers", "threads", "progress", "out")


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
        what = "a finished" if state == "finished" else "an unfinished"
        also = ", or --resume to continue it" if state == "unfinished" else ""
        raise ValueError(f"--out {str(out)!r} already holds {what} run; pass --overwrite to "
                         f"replace it{also}, or choose another folder")
    try:  # unwritable folders fail now, not after training
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write_test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"--out {str(out)!r} is not a folder we can write to: {error}") from None
    return state


def remove_run_files(out: Path) -> None:
    """Delete the files of the run in ``out`` (``--overwrite``), nothing else."""
    for name in RUN_FILES:
        (out / name).unlink(missing_ok=True)


def save_atomic(write, path: Path) -> None:
    """``write(tmp)`` to a temporary file next to ``path``, then rename it to ``path``: a crash
    never leaves half a file."""
    tmp = path.with_name(f".tmp-{path.name}")
    write(tmp)
    os.replace(tmp, path)


def write_json(data, path: Path) -> None:
    save_atomic(lambda p: p.write_text(json.dumps(data, indent=2)), path)


# --- random states ------------------------------------------------------------------------------

def rng_states(gens: dict[str, torch.Generator], device: torch.device) -> dict:
    """The states of the run's generators and of PyTorch's global ones (dropout, stochastic
    depth)."""
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


# --- writing and reading a run ----------------------------------------------------------------

def json_ready(value):
    """Tuples as lists, so that a config dict reads the same from JSON."""
    if isinstance(value, tuple):
        return list(value)
    return value


def write_settings(out: Path, settings, model, classes: list[str]) -> None:
    """``settings.json``: the trainer's settings, the model's name and config, the classes and
    the preprocessing."""
    write_json({"settings": asdict(settings),
                "model_config": {k: json_ready(v) for k, v in asdict(model.cfg).items()},
                "classes": classes,
                "pretrained_cfg": {k: json_ready(v) for k, v in model.pretrained_cfg.items()}},
               out / SETTINGS)


def read_settings(out: Path) -> dict:
    return json.loads((out / SETTINGS).read_text())


def save_epoch(out: Path, model, state: dict) -> None:
    """After an epoch: the weights (safetensors) and ``state``, everything ``--resume`` needs
    (with the weights too, so the pair can never be from different epochs)."""
    save_atomic(lambda p: save_checkpoint(model, p), out / CHECKPOINT)
    state = {**state, "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
             "torch": str(torch.__version__)}
    save_atomic(lambda p: torch.save(state, p), out / STATE)


def load_state(out: Path) -> dict:
    """The saved trainer state of the run in ``out`` (tensors and plain containers only)."""
    return torch.load(out / STATE, map_location="cpu", weights_only=True)


def check_same_run(settings, saved: dict, out: Path) -> None:
    """``--resume`` continues the saved run exactly: settings that change what is computed must
    equal the saved ones (the model is checked by loading its checkpoint: mismatched keys)."""
    differ = [f"--{name.replace('_', '-')} {getattr(settings, name)!r} (the run has "
              f"{saved[name]!r})"
              for name in saved
              if name not in RESUMABLE_CHANGES + ("model", "model_kwargs")
              and hasattr(settings, name) and getattr(settings, name) != saved[name]]
    if differ:
        raise ValueError(f"--resume continues the run in {str(out)!r} exactly as it started, but "
                         f"{'; '.join(differ)}; drop those options or start a new run")


def load_run(out, device: str = "cpu"):
    """The trained model of a run folder (``settings.json`` + ``checkpoint.safetensors``), in
    eval mode: ``model = load_run("runs/vit_digits-digits")``."""
    out = Path(out)
    saved = read_settings(out)
    model = create_model(saved["settings"]["model"], **{
        **saved["settings"]["model_kwargs"], "num_classes": saved["model_config"]["num_classes"]})
    load_checkpoint(model, out / CHECKPOINT)
    return model.to(device).eval()
