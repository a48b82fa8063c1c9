"""Benchmark: the trainer's recipes for a small folder of pictures -- the class project's case --
on four kinds of folder over three seeds, beside the course's small convnet and a linear
baseline trained on the same splits.

    python benchmarks/bench_small_folder.py --runs /tmp/small_folder_runs \
        --json benchmarks/results/small_folder.json     # the default recipes, every folder and seed
    python benchmarks/bench_small_folder.py --runs /tmp/r --folders shapes --recipes photo --seeds 0
    python benchmarks/bench_small_folder.py --canary            # a few seconds: the canary slice

The folders, made offline once (seed 0) and kept fixed:

* ``photos``, ``textures``: crops of photographs scikit-image ships (``tests/photo_pictures.py``):
  five colour photographs, and four grey surfaces; 40-300 pixels, JPEG, PNG, RGBA and grey,
  classes of unequal size;
* ``shapes``: four drawn shapes in random colours (``tests/photo_pictures.py``);
* ``digits``: digits in random colours on random backgrounds (``tests/digit_pictures.py``: 4
  classes × 90 pictures of 32-48 pixels, mixed formats).

For every seed s the trainer runs with ``--seed s --split-seed s``: the seed draws the split
(20% of each class for the test, 10% of the rest for validation) and the run.  Each run is
``python -m vit_scratch.train`` with the recipe's options (:data:`RECIPES`; by default the
README's command and the same without its per-channel normalisation), on one thread
(``--threads 1``), in this process; the CPU seconds are the trainer's own (``cpu_seconds`` of
metrics.json: its epochs), the convnet's its own.  Every run prints the trainer's linear baseline
(scikit-learn's logistic regression on the same pixels); the README command's runs also train
the convnet yardstick (``--baseline linear,cnn``: the course's small convnet,
``vit_scratch/training/convnet.py``, with the same split, augmentation, epochs and schedule).
The primary contrast, per folder: the README's command minus the same without normalisation,
paired by seed (``stats.paired``); each recipe's paired difference from the convnet beside it.

Each run's metrics go into ``--runs DIR`` (``FOLDER-RECIPE-sSEED.json``; a run already there is
not run again), and the summary -- per folder and recipe, the mean, spread, min and max over
the seeds, and each recipe's paired difference from the convnet (``stats.paired``, a t interval
over the seeds) -- into ``--json``, with the canary (``--canary``: the ``shapes`` folder at
half its size, seed 0, two epochs of the ``distilled`` recipe, which runs both yardsticks and
the teacher) that tests/test_canaries.py re-runs.  ``--summary-only`` summarises the runs
already in ``--runs`` (several processes can share the runs folder, one per ``--folders``).
A script, never a test.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402  (benchmarks/experiment.py)
import stats  # noqa: E402  (benchmarks/stats.py)

#: The README's command; the candidates below are it plus one change each.
SMALL_FOLDER = ["--recipe", "small_folder"]
PHOTO = ["--flip", "--crop-scale", "0.5"]
#: The recipe as it was before it normalised per channel: every pixel in [0, 1], mean 0 and
#: std 1 (the digits' data config).
UNNORMALISED = ["--model-arg", "pretrained_cfg_overlay={'mean': (0.0, 0.0, 0.0), "
                               "'std': (1.0, 1.0, 1.0)}"]
#: name -> (the trainer's options, what the recipe is).
RECIPES = {
    "small_folder": (SMALL_FOLDER, "the README's command, --recipe small_folder: CoaT-Lite "
                                   "(coat_lite_digits) on 32×32 colour pictures in 4×4 patches, "
                                   "normalised with ImageNet's mean and std, lr 5e-4, weight "
                                   "decay 0.05, 100 epochs, the digits' affine augmentation"),
    "unnormalised": (SMALL_FOLDER + UNNORMALISED,
                     "the same without the per-channel normalisation (pixels in [0, 1]: mean 0, "
                     "std 1)"),
    "photo": (SMALL_FOLDER + PHOTO, "the same with the photo augmentation: random horizontal "
                                    "flip and a random resized crop keeping 50-100% of the "
                                    "area"),
    "distilled": (SMALL_FOLDER + PHOTO + ["--teacher", "auto", "--baseline", "linear,cnn"],
                  "the same, distilled from the small convnet the trainer trains first on the "
                  "same split (--teacher auto): half the loss from the labels, half from the "
                  "convnet's predicted classes, through CoaT-Lite's class head"),
}
#: The recipes run by default: the README's command, and the same without normalisation (the
#: primary contrast: small_folder - unnormalised, paired by seed, per folder).
DEFAULT_RECIPES = ("small_folder", "unnormalised")
#: The README's command also trains the convnet yardstick (``--baseline linear,cnn``: the same
#: split, augmentation, epochs and schedule), once per folder and seed.
YARDSTICK_RECIPE = "small_folder"
PRIMARY = ("small_folder", "unnormalised")
FOLDERS = ("photos", "textures", "shapes", "digits")
#: The canary: this folder, at this share of its size, this recipe, these epochs.
CANARY = dict(folder="shapes", scale=0.5, recipe="distilled", epochs=2, seed=0)


def make_folder(kind: str, root: Path, scale: float = 1.0) -> Path:
    """The folder ``kind`` under ``root`` (made once; seed 0)."""
    folder = root / (kind if scale == 1.0 else f"{kind}-x{scale:g}")
    if not folder.exists():
        if kind == "digits":
            from digit_pictures import make_digit_pictures

            make_digit_pictures(folder, classes=4, per_class=max(3, round(90 * scale)), seed=0)
        else:
            from photo_pictures import make_photo_pictures

            make_photo_pictures(folder, kind, seed=0, scale=scale)
    return folder


def train_run(folder: Path, recipe: str, seed: int, out: Path, extra=()) -> dict:
    """One run of the trainer's command line on ``folder`` (the yardstick recipe with the
    convnet beside it)."""
    from vit_scratch.train import main

    argv, _ = RECIPES[recipe]
    return main([*argv, "--data", str(folder), "--seed", str(seed), "--split-seed", str(seed),
                 "--threads", "1", "--progress", "off", "--out", str(out), "--overwrite",
                 *(["--baseline", "linear,cnn"] if recipe == YARDSTICK_RECIPE else []), *extra])


def run_one(kind: str, recipe: str, seed: int, runs: Path) -> dict:
    """One recipe on one folder and seed; its record is written to ``runs``."""
    import torch

    folder = make_folder(kind, runs)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    start = time.perf_counter()
    result = train_run(folder, recipe, seed, runs / f"{kind}-{recipe}-s{seed}")
    record = {
        "folder": kind, "recipe": recipe, "seed": seed, "test_accuracy": result["test_accuracy"],
        "best_val_accuracy": result["best_val_accuracy"],
        "selected_epoch": result["selected_epoch"], "epochs_done": result["epochs_done"],
        "train_seconds": result["train_seconds"], "cpu_seconds": result["cpu_seconds"],
        "wall_seconds": time.perf_counter() - start, "params": result["params"],
        "images": result["images"], "chance": result["chance"],
        "linear_baseline": result["linear_baseline"],
        "convnet_baseline": result["convnet_baseline"], "load_average_at_start": load,
        "torch": torch.__version__}
    (runs / f"{kind}-{recipe}-s{seed}.json").write_text(json.dumps(record, indent=2))
    return record


def summarise(folders, names, seeds, runs: Path) -> dict:
    """Per folder: each recipe's accuracy over the seeds, the baselines, and the paired
    difference from the convnet yardstick."""
    table = {}
    for kind in folders:
        records = {name: [json.loads((runs / f"{kind}-{name}-s{s}.json").read_text())
                          for s in seeds if (runs / f"{kind}-{name}-s{s}.json").exists()]
                   for name in names}
        records = {n: r for n, r in records.items() if r}
        convnet = {r["seed"]: r["convnet_baseline"]["test_accuracy"] for rs in records.values()
                   for r in rs if r["convnet_baseline"]}
        entry = {"images": next(iter(records.values()))[0]["images"] if records else None,
                 "convnet": experiment.summary(convnet.values()) if convnet else None,
                 "convnet_cpu_seconds": experiment.summary(
                     r["convnet_baseline"]["cpu_seconds"] for rs in records.values() for r in rs
                     if r["convnet_baseline"]) if convnet else None,
                 "linear": experiment.summary(
                     r["linear_baseline"]["test_accuracy"] for r in next(iter(records.values())))
                 if records else None, "recipes": {}}
        for name, rs in records.items():
            acc = {r["seed"]: r["test_accuracy"] for r in rs}
            row = {"test_accuracy": experiment.summary(acc.values()),
                   "cpu_seconds": experiment.summary(r["cpu_seconds"] for r in rs),
                   "seeds": sorted(acc)}
            if convnet and set(acc) == set(convnet) and len(acc) > 1:
                row["minus_convnet"] = stats.paired(acc, convnet).to_dict()
            entry["recipes"][name] = row
        a, b = (entry["recipes"].get(n) for n in PRIMARY)
        if a and b and a["seeds"] == b["seeds"] and len(a["seeds"]) > 1:
            pair = [{r["seed"]: r["test_accuracy"] for r in records[n]} for n in PRIMARY]
            entry["primary"] = {"contrast": f"{PRIMARY[0]} - {PRIMARY[1]}",
                                **stats.paired(*pair).to_dict()}
        entry["runs"] = [r for rs in records.values() for r in rs]
        table[kind] = entry
    worst = {name: min(table[k]["recipes"][name]["test_accuracy"]["mean"] for k in folders
                       if name in table[k]["recipes"])
             for name in names if all(name in table[k]["recipes"] for k in folders)}
    return {"folders": table, "worst_folder_mean": worst,
            "best_by_worst_folder": max(worst, key=worst.get) if worst else None}


def canary() -> dict:
    """The canary slice: :data:`CANARY`'s run, its numbers printed on the canary line."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = make_folder(CANARY["folder"], Path(tmp), CANARY["scale"])
        result = train_run(folder, CANARY["recipe"], CANARY["seed"], Path(tmp) / "run",
                           ["--epochs", str(CANARY["epochs"])])
    numbers = {"test_accuracy": result["test_accuracy"],
               "train_loss": [round(h["train_loss"], 6) for h in result["history"]],
               "val_accuracy": [h["val_accuracy"] for h in result["history"]],
               "linear_test_accuracy": result["linear_baseline"]["test_accuracy"],
               "convnet_test_accuracy": result["convnet_baseline"]["test_accuracy"]}
    return experiment.print_canary(numbers)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", nargs="+", choices=tuple(RECIPES),
                        default=list(DEFAULT_RECIPES))
    parser.add_argument("--folders", nargs="+", choices=FOLDERS, default=list(FOLDERS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--runs", type=Path,
                        help="folder for the generated pictures and each run's metrics")
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--canary", action="store_true",
                        help="run the canary slice alone and print its numbers")
    parser.add_argument("--summary-only", action="store_true",
                        help="summarise the runs already in --runs, running none")
    args = parser.parse_args(argv)
    experiment.one_thread()
    if args.canary:
        return canary()
    if args.runs is None:
        parser.error("--runs DIR is needed (or --canary)")
    clock = experiment.CpuClock()
    args.runs.mkdir(parents=True, exist_ok=True)
    for seed in [] if args.summary_only else args.seeds:  # each seed on everything, in turn
        for kind in args.folders:
            for name in args.recipes:
                if not (args.runs / f"{kind}-{name}-s{seed}.json").exists():
                    r = run_one(kind, name, seed, args.runs)
                    cnn = r["convnet_baseline"]
                    print(f"{experiment.stamp()} {kind} {name} seed {seed}: test "
                          f"{r['test_accuracy']:.4f}, {r['cpu_seconds']:.0f} CPU s, linear "
                          f"{r['linear_baseline']['test_accuracy']:.4f}"
                          + (f", convnet {cnn['test_accuracy']:.4f}" if cnn else ""), flush=True)
    data = experiment.header("small_folder", argv, {
        "folders": list(args.folders), "recipes": {n: {"options": shlex.join(RECIPES[n][0]),
                                                       "description": RECIPES[n][1]}
                                                   for n in args.recipes},
        "seeds": list(args.seeds), "threads": 1})
    data.update(summarise(args.folders, args.recipes, args.seeds, args.runs))
    if args.json:
        data["canary"] = experiment.canary_record("bench_small_folder.py", canary())
    return experiment.report(experiment.finish(data, clock), args.json)


if __name__ == "__main__":
    main()
