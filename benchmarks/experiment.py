"""What every experiment script of benchmarks/ shares: the summary over seeds, the commit of
the code that ran, the CPU time, and the results file.

An experiment is a script that trains and measures over at least three seeds and writes one
JSON file into ``benchmarks/results/`` with ``--json``: its settings, every run, the mean and
spread over the seeds, the git commit and the CPU seconds.  Pages and notebooks read their
numbers from that file (docs/maintainers.md, "Numbers from one source").
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_commit() -> str | None:
    """The commit of the code that ran (``None`` outside a git checkout); a ``+`` marks
    uncommitted changes to tracked files."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+" if dirty else "")


def summary(values) -> dict:
    """``{"mean", "std", "min", "max", "n"}`` of a list of numbers (std with ddof=1; 0 for one)."""
    values = [float(v) for v in values]
    return {"mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def one_thread() -> None:
    """Run PyTorch (and the BLAS under NumPy) on one thread: experiments run as one-thread
    processes, so that their CPU seconds are those of one idle core."""
    import torch

    torch.set_num_threads(1)


class CpuClock:
    """CPU seconds (user + system, this process and its finished children) since it started."""

    def __init__(self):
        self.start = self._now()

    @staticmethod
    def _now() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def seconds(self) -> float:
        return self._now() - self.start


def header(name: str, argv, settings: dict) -> dict:
    """The fields every results file starts with."""
    import numpy
    import torch

    return {"benchmark": name,
            "written_by": f"python {Path(sys.argv[0]).as_posix() if argv is None else name} "
                          + shlex.join(sys.argv[1:] if argv is None else argv),
            "commit": git_commit(),
            "machine": {"python": platform.python_version(), "torch": torch.__version__,
                        "numpy": numpy.__version__, "cpus": os.cpu_count(),
                        "threads": torch.get_num_threads(),
                        "load_average_at_start": os.getloadavg()[0]},
            "settings": settings}


def write(path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}", flush=True)


def finish(data: dict, clock: "CpuClock", path=None) -> dict:
    """The end of an experiment: its total CPU seconds into ``data``, printed, and the results
    file written to ``path`` (none without)."""
    data["cpu_seconds"] = clock.seconds()
    print(f"CPU time: {data['cpu_seconds']:.0f} s")
    if path:
        write(path, data)
    return data


def report(data: dict, path=None) -> dict:
    """The end of a benchmark over seeds: its table (``tables.py``, by ``data["benchmark"]``)
    printed, and the results file written to ``path`` (none without)."""
    import tables  # benchmarks/tables.py, beside this file

    print()
    print(tables.TABLES[data["benchmark"]](data))
    if path:
        write(path, data)
    return data


# --- canaries: the cheapest slice of a results file's own command, re-run by a test ---------------

#: The line a script prints after its canary slice: this prefix, then the numbers as JSON.
CANARY_PREFIX = "CANARY "


def canary_record(script: str, numbers: dict, argv=("--canary",)) -> dict:
    """What a results file records as its canary: the command that re-runs the slice (run from
    the repository root, one thread) and the exact numbers it gave.  ``tests/test_canaries.py``
    runs every file's canary and compares the numbers exactly, so a change to the library's
    numerics fails CI until the file is measured again."""
    return {"command": f"python benchmarks/{script} " + shlex.join(argv),
            "numbers": json.loads(json.dumps(numbers))}


def print_canary(numbers: dict) -> dict:
    """Print a canary's numbers on one line (the line the test reads); return them."""
    print(CANARY_PREFIX + json.dumps(numbers, sort_keys=True), flush=True)
    return numbers


def read_canary(stdout: str) -> dict:
    """The numbers of the last canary line in a script's output."""
    lines = [line for line in stdout.splitlines() if line.startswith(CANARY_PREFIX)]
    if not lines:
        raise ValueError("the command printed no canary line (" + CANARY_PREFIX.strip() + " ...)")
    return json.loads(lines[-1][len(CANARY_PREFIX):])


def stamp() -> str:
    return time.strftime("%H:%M:%S")


# --- training, the trainer's recipe in a small explicit loop -------------------------------------

def param_groups(model, weight_decay: float) -> list[dict]:
    """The trainer's AdamW groups (``vit_scratch.train.param_groups``): weight decay on weight
    matrices and kernels only; for a model without ``no_weight_decay()`` (a CNN), nothing else
    is skipped."""
    from vit_scratch.train import param_groups as trainer_groups

    if hasattr(model, "no_weight_decay"):
        return trainer_groups(model, weight_decay)
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    rest = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": rest, "weight_decay": 0.0}]


def accuracy_and_loss(model, x, y, batch_size: int = 500) -> tuple[float, float]:
    """Accuracy and mean cross-entropy of ``model`` on tensors ``x`` (N, C, H, W), ``y`` (N,)."""
    import torch
    import torch.nn.functional as F

    model.eval()
    correct, loss = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(y), batch_size):
            logits = model(x[i:i + batch_size])
            correct += int((logits.argmax(-1) == y[i:i + batch_size]).sum())
            loss += float(F.cross_entropy(logits, y[i:i + batch_size], reduction="sum"))
    return correct / len(y), loss / len(y)


def fit(model, train, val, test=None, *, epochs: int = 10, steps: int | None = None,
        batch_size: int = 64, lr: float = 1.5e-3, weight_decay: float = 0.05,
        warmup: float = 0.1, label_smoothing: float = 0.1, seed: int = 0, augment=None,
        select: str = "best", loss=None) -> dict:
    """Train ``model`` on ``train = (x, y)`` tensors with the trainer's recipe (AdamW, weight
    decay on matrices only, linear warm-up over a ``warmup`` share of the steps then cosine
    decay, label smoothing), evaluating on ``val`` after every epoch; ``steps`` (if given)
    replaces ``epochs`` by that many batches, the epochs then being as many as they take.  The
    weights of the best validation epoch (``select="best"``; ties: the later) or of the last are
    tested once on ``test``.  ``augment(images, generator)``, if given, changes each batch.
    ``loss(model, images, labels)``, if given, replaces the batch's loss (the mean cross-entropy
    with ``label_smoothing``), e.g. a distillation loss with a teacher on the same augmented
    images.  Returns the history and the numbers; the model keeps the selected weights."""
    import copy
    import math

    import torch
    import torch.nn.functional as F

    from vit_scratch.schedule import LrSchedule

    x, y = train
    per_epoch = math.ceil(len(y) / batch_size)
    total = steps if steps is not None else epochs * per_epoch
    epochs = math.ceil(total / per_epoch)
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay), lr=lr)
    schedule = LrSchedule(optimizer, total, round(warmup * total))
    gen = torch.Generator().manual_seed(seed)
    history, best_acc, best_state, best_epoch, done = [], -1.0, None, 0, 0
    clock = CpuClock()
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(y), generator=gen)
        loss_sum, seen = 0.0, 0
        for idx in order.split(batch_size):
            if done == total:
                break
            images = x[idx] if augment is None else augment(x[idx], gen)
            if loss is None:
                batch_loss = F.cross_entropy(model(images), y[idx], label_smoothing=label_smoothing)
            else:
                batch_loss = loss(model, images, y[idx])
            optimizer.zero_grad(set_to_none=True)
            batch_loss.backward()
            optimizer.step()
            schedule.step()
            loss_sum, seen, done = loss_sum + batch_loss.item() * len(idx), seen + len(idx), done + 1
        val_acc, val_loss = accuracy_and_loss(model, *val)
        history.append({"epoch": epoch + 1, "steps": done, "train_loss": loss_sum / max(1, seen),
                        "val_accuracy": val_acc, "val_loss": val_loss})
        if select == "last" or val_acc >= best_acc:
            best_acc = val_acc
            best_state = copy.deepcopy(model.state_dict())
            best_epoch = epoch + 1
    model.load_state_dict(best_state)
    result = {"epochs": epochs, "steps": total, "selected_epoch": best_epoch,
              "val_accuracy": history[best_epoch - 1]["val_accuracy"],
              "final_train_loss": history[-1]["train_loss"], "history": history,
              "cpu_seconds": clock.seconds()}
    if test is not None:
        result["test_accuracy"], result["test_loss"] = accuracy_and_loss(model, *test)
    return result


def chosen_rates(pairs, names, parameter: str) -> dict:
    """``["both=1.5e-3", ...]`` -> ``{"both": 0.0015, ...}``, one for each of ``names``."""
    out = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            out[name] = float(value)
        except ValueError:
            raise SystemExit(f"{parameter} takes NAME=LR, got {pair!r}") from None
    if set(out) != set(names):
        raise SystemExit(f"{parameter} must give a rate for each of {sorted(names)}, got "
                         f"{sorted(out)}")
    return out


# --- data: scikit-learn's digits cut into a small training set, a validation set and the rest -----

def digits_subsets(model, seed: int, n_train: int, n_val: int) -> dict:
    """Split ``seed`` of scikit-learn's digits for ``model`` (images at its input size): the
    trainer's test split (``stratified_split(labels, 0.2, seed)``, 359 digits) and, from the other
    1,438, a validation set of about ``n_val`` digits, a training set of about ``n_train`` and the
    ``rest``, each drawn per class (``stratified_split``, fixed by ``seed``).  Returns ``{"train",
    "val", "rest", "test"}``, each a pair of tensors (images (N, C, H, W), labels (N,))."""
    import numpy as np

    from vit_scratch.data import make_datasets, stratified_split

    pool, test = (d.tensors for d in make_datasets("digits", model, 0.2, seed))
    x, y = pool
    if not (0 < n_train and 0 < n_val and n_train + n_val < len(y)):
        raise ValueError(f"n_train={n_train} and n_val={n_val} must be positive and leave some of "
                         f"the {len(y)} training digits")
    val = stratified_split(y.numpy(), n_val / len(y), 1000 + seed)
    others = np.flatnonzero(~val)
    train = np.zeros(len(y), dtype=bool)
    train[others[stratified_split(y.numpy()[others], n_train / len(others), 2000 + seed)]] = True
    rest = ~val & ~train
    return {"train": (x[train], y[train]), "val": (x[val], y[val]), "rest": (x[rest], y[rest]),
            "test": tuple(test)}
