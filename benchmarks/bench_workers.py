"""Benchmark: the trainer's time per epoch with DataLoader workers started by ``fork`` (Linux's
default) and by ``spawn`` (the default on macOS and Windows), against loading in the main
process (``--workers 0``), on the class project's small folder.

    python benchmarks/bench_workers.py --json benchmarks/results/workers.json
    python benchmarks/bench_workers.py --epochs 5 --repeats 1          # a quick look

A ``spawn`` worker is a fresh Python process: it imports PyTorch and vit_scratch and unpickles
the dataset before it reads its first picture -- seconds, where a ``fork`` worker starts in
milliseconds.  The trainer's training loader keeps its workers for the whole run
(``persistent_workers``), so that cost is paid once, not once per epoch; validation and test
pictures are read in the main process.

The folder is ``tests/digit_pictures.py``'s (4 classes × 90 pictures, seed 0) and the settings
the README's class-project command's (``--recipe small_folder``) with ``--epochs`` epochs, one
PyTorch thread.  Each configuration runs ``--repeats`` times in turn, in this process (the start
method set with ``torch.multiprocessing.set_start_method(..., force=True)`` before each run).
Reported: the mean time per epoch over the run (the first epoch, which starts the workers,
included), the first epoch alone, and the later epochs' mean, from the trainer's own per-epoch
wall times (``train_seconds`` in its history).  Wall times: run it on a quiet machine.  A script,
never a test.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from digit_pictures import make_digit_pictures  # noqa: E402  (tests/digit_pictures.py)

CONFIGS = (("main process", 0, None), ("fork", 2, "fork"), ("spawn", 2, "spawn"))


def epoch_times(history: list[dict]) -> list[float]:
    totals = [0.0] + [h["train_seconds"] for h in history]
    return [b - a for a, b in zip(totals, totals[1:])]


def run_once(folder: Path, workers: int, method: str | None, epochs: int) -> list[float]:
    import torch.multiprocessing as mp

    from vit_scratch.train import main

    if method is not None:
        mp.set_start_method(method, force=True)
    with tempfile.TemporaryDirectory() as out:
        result = main(["--recipe", "small_folder", "--data", str(folder), "--epochs",
                       str(epochs), "--workers", str(workers), "--threads", "1", "--progress",
                       "off", "--baseline", "none", "--out", str(Path(out) / "run")])
    return epoch_times(result["history"])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_digit_pictures(Path(tmp) / "pictures")
        runs = {name: [] for name, _, _ in CONFIGS}
        loads = []
        for repeat in range(args.repeats):
            for name, workers, method in CONFIGS:
                loads.append(os.getloadavg()[0] if hasattr(os, "getloadavg") else None)
                times = run_once(folder, workers, method, args.epochs)
                runs[name].append(times)
                print(f"{name} (repeat {repeat}): {statistics.mean(times):.2f} s per epoch, "
                      f"first {times[0]:.2f} s, later {statistics.mean(times[1:]):.2f} s",
                      flush=True)
    results = {"benchmark": "workers", "description": "DataLoader workers: fork against spawn",
               "script": "benchmarks/bench_workers.py",
            "written_by": "python " + shlex.join(sys.argv), "epochs": args.epochs,
               "repeats": args.repeats, "workers": 2, "threads": 1,
               "python": platform.python_version(), "platform": sys.platform,
               "load_average_at_each_run": loads, "configs": {}}
    for name, workers, method in CONFIGS:
        per_run = runs[name]
        results["configs"][name] = {
            "workers": workers, "start_method": method,
            "seconds_per_epoch": statistics.mean(statistics.mean(t) for t in per_run),
            "first_epoch_seconds": statistics.mean(t[0] for t in per_run),
            "later_epoch_seconds": statistics.mean(statistics.mean(t[1:]) for t in per_run),
            "epoch_seconds": per_run}
    fork, spawn = results["configs"]["fork"], results["configs"]["spawn"]
    results["spawn_over_fork"] = spawn["seconds_per_epoch"] / fork["seconds_per_epoch"]
    results["spawn_over_fork_later_epochs"] = (spawn["later_epoch_seconds"]
                                               / fork["later_epoch_seconds"])
    print(f"spawn / fork, time per epoch: {results['spawn_over_fork']:.2f} "
          f"(later epochs: {results['spawn_over_fork_later_epochs']:.2f})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
