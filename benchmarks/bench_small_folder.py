"""Benchmark: the trainer on a small folder of pictures -- the class project's case -- for several
recipes over three seeds, beside the linear baseline the trainer fits and an SVM on the pixels.

    python benchmarks/bench_small_folder.py --runs /tmp/small_folder_runs \
        --json benchmarks/results/small_folder.json          # every recipe, seeds 0 1 2
    python benchmarks/bench_small_folder.py --recipes small_folder --seeds 0 --runs /tmp/r

The folder is ``tests/digit_pictures.py``'s: 4 classes × 90 pictures of 32 to 48 pixels a side,
digits drawn in random colours on random backgrounds, in mixed formats (PNG, JPEG, BMP, WebP,
TIFF, PPM).  For every seed s the folder is generated with seed s and the trainer runs with
``--seed s --split-seed s``: 20% of each class held out for the test (72 pictures), 10% of the
rest for validation (29), 259 to train on.  Each run is ``python -m vit_scratch.train`` with the
recipe's options (:data:`RECIPES`), on one thread (``--threads 1``), in this process; the CPU
seconds are the trainer's own (``cpu_seconds`` of metrics.json: its epochs).

Beside each run: the trainer's linear baseline (scikit-learn's logistic regression on the same
pixels, ``linear_baseline`` of metrics.json) and an RBF SVM (scikit-learn's ``SVC()``) on the
grey pixels at 32 × 32 of the same split, fitted on the training and validation pictures --
what the student of the class-project issue measured on their own folder (0.875 there).

Each run's metrics go into ``--runs DIR`` (``RECIPE-sSEED.json``; a run already there is not run
again), and the summary over all of them -- mean, spread, min and max over the seeds -- into
``--json``.  A script, never a test.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import tables  # noqa: E402  (benchmarks/tables.py: the pages' table from the results file)
from digit_pictures import make_digit_pictures  # noqa: E402  (tests/digit_pictures.py)

#: name -> (the trainer's options, what the recipe is).  ``small_folder`` is the README's
#: class-project command (``--recipe small_folder``); ``small_folder_vit`` changes its model
#: alone, and ``readme_before`` is the class-project command the README gave before.
RECIPES = {
    "small_folder": (["--recipe", "small_folder"],
                     "--recipe small_folder: CoaT-Lite (coat_lite_digits) on 32×32 colour "
                     "pictures in 4×4 patches, lr 5e-4, weight decay 0.05, 100 epochs, the "
                     "digits' affine augmentation"),
    "small_folder_vit": (["--recipe", "small_folder", "--model", "vit_digits", "--model-arg",
                          "img_size=32", "--model-arg", "patch_size=4", "--model-arg",
                          "in_chans=3"],
                         "the same with a ViT (vit_digits: 4 blocks of 64 channels, 4×4 patches "
                         "of 32×32 colour pictures) instead of CoaT-Lite"),
    "readme_before": (["--model", "vit_tiny_patch16_224", "--model-arg", "img_size=64",
                       "--model-arg", "depth=4", "--epochs", "30", "--batch-size", "16"],
                      "the class-project command the README gave before: ViT-Tiny with 4 "
                      "blocks at 64 pixels and the digits recipe (lr 1.5e-3, weight decay "
                      "0.3), 30 epochs of batches of 16"),
}
FOLDER = dict(classes=4, per_class=90, sizes=[32, 48])


def summary(values) -> dict:
    values = [float(v) for v in values]
    return {"mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def folder_for(seed: int, root: Path) -> Path:
    folder = root / f"pictures-s{seed}"
    if not folder.exists():
        make_digit_pictures(folder, FOLDER["classes"], FOLDER["per_class"], seed,
                            tuple(FOLDER["sizes"]))
    return folder


def svm_accuracy(folder: Path, seed: int) -> float:
    """An RBF SVM on the grey 32 × 32 pixels of the trainer's split of ``folder`` (fitted on its
    training and validation pictures), scored on the test pictures."""
    import numpy as np
    from sklearn.svm import SVC

    from vit_scratch.data import make_datasets

    grey = dict(input_size=(1, 32, 32), mean=(0.0,), std=(1.0,), crop_pct=1.0,
                interpolation="bilinear")
    train, val, test = make_datasets(str(folder), grey, 0.2, seed, val_fraction=0.1)

    def arrays(*datasets):
        items = [d[i] for d in datasets for i in range(len(d))]
        return (np.stack([x.numpy().ravel() for x, _ in items]),
                np.array([int(y) for _, y in items]))

    x, y = arrays(train, val)
    xt, yt = arrays(test)
    return float((SVC().fit(x, y).predict(xt) == yt).mean())


def run_one(name: str, seed: int, runs: Path) -> dict:
    """One recipe on one seed's folder, through the trainer's command line."""
    import torch

    from vit_scratch.train import main

    argv, _ = RECIPES[name]
    folder = folder_for(seed, runs)
    out = runs / f"{name}-s{seed}"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    start = time.perf_counter()
    result = main([*argv, "--data", str(folder), "--seed", str(seed), "--split-seed", str(seed),
                   "--threads", "1", "--progress", "off", "--out", str(out), "--overwrite"])
    record = {
        "recipe": name, "seed": seed, "test_accuracy": result["test_accuracy"],
        "best_val_accuracy": result["best_val_accuracy"],
        "selected_epoch": result["selected_epoch"], "epochs_done": result["epochs_done"],
        "train_seconds": result["train_seconds"], "cpu_seconds": result["cpu_seconds"],
        "wall_seconds": time.perf_counter() - start, "params": result["params"],
        "images": result["images"], "chance": result["chance"],
        "linear_baseline": result["linear_baseline"], "svm_test_accuracy":
            svm_accuracy(folder, seed), "load_average_at_start": load,
        "torch": torch.__version__}
    (runs / f"{name}-s{seed}.json").write_text(json.dumps(record, indent=2))
    return record


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def summarise(names, seeds, runs: Path) -> dict:
    recipes = {}
    for name in names:
        records = [json.loads((runs / f"{name}-s{s}.json").read_text()) for s in seeds
                   if (runs / f"{name}-s{s}.json").exists()]
        if not records:
            continue
        argv, description = RECIPES[name]
        recipes[name] = {
            "options": " ".join(argv), "description": description,
            "test_accuracy": summary(r["test_accuracy"] for r in records),
            "best_val_accuracy": summary(r["best_val_accuracy"] for r in records),
            "cpu_seconds": summary(r["cpu_seconds"] for r in records),
            "train_seconds": summary(r["train_seconds"] for r in records),
            "linear_baseline_test_accuracy": summary(
                r["linear_baseline"]["test_accuracy"] for r in records),
            "svm_test_accuracy": summary(r["svm_test_accuracy"] for r in records),
            "runs": records}
    return {"benchmark": "small_folder",
            "description": "the trainer's recipes on a small folder of pictures",
            "script": "benchmarks/bench_small_folder.py",
            "written_by": "python " + shlex.join(sys.argv), "commit": git_commit(),
            "folder": {**FOLDER, "generator": "tests/digit_pictures.py"}, "seeds": list(seeds),
            "threads": 1, "python": platform.python_version(), "machine": platform.machine(),
            "cores": os.cpu_count(), "recipes": recipes}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", choices=tuple(RECIPES), default=list(RECIPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--runs", required=True, type=Path,
                        help="folder for the generated pictures and each run's metrics")
    parser.add_argument("--json", type=Path, help="write the summary here")
    args = parser.parse_args(argv)
    args.runs.mkdir(parents=True, exist_ok=True)
    for name in args.recipes:
        for seed in args.seeds:
            if not (args.runs / f"{name}-s{seed}.json").exists():
                record = run_one(name, seed, args.runs)
                print(f"{name} seed {seed}: test {record['test_accuracy']:.4f}, "
                      f"{record['cpu_seconds']:.0f} CPU s, linear baseline "
                      f"{record['linear_baseline']['test_accuracy']:.4f}, SVM "
                      f"{record['svm_test_accuracy']:.4f}", flush=True)
    results = summarise(args.recipes, args.seeds, args.runs)
    print(tables.small_folder_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":
    main()
