"""The run so far, as the loop keeps it: the history, the epochs done, the best epoch (and its
weights, in memory and in best.safetensors), patience, the time spent; saved into the run
folder after every epoch (``vit_scratch.run_folder``) and restored on ``--resume``.
"""
from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from .. import distributed, run_folder
from ..run_folder import BEST, CHECKPOINT, STATE
from ..weights import load_checkpoint
from .settings import TrainSettings, build_model


class RunProgress:
    """The run so far: the history, the epochs done, the best epoch (and its weights, in memory
    and in best.safetensors), the time spent; saved after every epoch, restored on resume."""

    def __init__(self):
        self.history, self.epoch, self.train_seconds, self.cpu_seconds = [], 0, 0.0, 0.0
        self.best_epoch, self.best_val_accuracy, self.best_val_loss = 0, -1.0, math.inf
        self.best_weights, self.patience_from = None, 0

    @classmethod
    def start(cls, state, settings, out, world, device, log) -> "RunProgress":
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

    def save(self, out: Path, model, optimizer, settings, classes, improved: bool,
             scaler=None) -> None:
        """The epoch's files: the checkpoint (and best.safetensors when it improved), the state
        for --resume (with fp16's gradient scaler, ``scaler``, if there is one), a row of
        metrics.csv."""
        run_folder.save_weights(out, CHECKPOINT, model, classes)
        if improved:
            run_folder.save_weights(out, BEST, model, classes)
        state = {
            "epoch": self.epoch, "settings": asdict(settings),
            "optimizer": optimizer.state_dict(), "history": self.history,
            "train_seconds": self.train_seconds, "cpu_seconds": self.cpu_seconds,
            "best_epoch": self.best_epoch, "patience_from": self.patience_from,
            "classes": classes, "finished": False,
            "grad_scaler": scaler.state_dict() if scaler is not None else None}
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


def _best_weights(out: Path, settings: TrainSettings, num_classes: int) -> dict | None:
    """The weights of best.safetensors as a state_dict (aliases filled in by loading them into
    a model), or ``None`` without the file or when the last epoch is selected."""
    if settings.select != "best" or not (out / BEST).exists():
        return None
    model = build_model(settings, num_classes)
    load_checkpoint(model, out / BEST)
    return model.state_dict()


def plural(n: int, word: str) -> str:
    """``1 epoch``, ``2 epochs``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def duration(seconds: float) -> str:
    """``4.2 s``, ``42 s``, ``12 min``, ``2.5 h``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def epoch_times(walls: list[float], in_all: float, epochs_left: int) -> str:
    """The end of an epoch's log line: its own wall time, the run's so far, and the time left
    if each epoch still to come takes the median of this session's epochs (the median: a first
    epoch that starts the loader's workers says little about the others)."""
    left = f", about {duration(epochs_left * float(np.median(walls)))} left" if epochs_left \
        else ""
    return f"{walls[-1]:.1f} s, {duration(in_all)} in all{left}"
