"""Benchmark: the small models on scikit-learn's digits, over several random seeds, beside an SVC.

    python benchmarks/bench_digits.py                                  # every *_digits model, 5 random seeds
    python benchmarks/bench_digits.py --models vit_digits --seeds 0 1 --threads 2
    python benchmarks/bench_digits.py --json digits.json --markdown    # the README's table

For every seed s the train/test split is ``load_digits(seed=s)`` (stratified, 20% of each class
held out) and the model is trained with ``--seed s --split-seed s`` and otherwise the trainer's
defaults -- exactly ``python -m vit_scratch.train --model NAME --data digits --seed s
--split-seed s``.  The baseline is scikit-learn's ``SVC(gamma=0.001, C=10)`` (an RBF kernel on
the 64 raw pixel counts 0..16, the scale gamma=0.001 suits) on the same splits.

Reports mean ± standard deviation (over the random seeds, ddof=1) of the test accuracy, the
training wall time and the CPU time (user + system of the process, all threads): wall time
depends on what else runs on the machine, CPU time much less.  A script, never a test.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

import vit_scratch
from vit_scratch.data import stratified_split
from vit_scratch.train import TrainConfig, train


def svc_accuracy(seed: int, test_fraction: float = 0.2) -> tuple[float, float]:
    """(test accuracy, CPU seconds) of SVC(gamma=0.001, C=10) on ``load_digits``' split."""
    from sklearn.datasets import load_digits
    from sklearn.svm import SVC

    digits = load_digits()
    x, y = digits.data, digits.target  # (1797, 64) pixel counts 0..16
    test = stratified_split(y, test_fraction, seed)
    start = time.process_time()
    clf = SVC(gamma=0.001, C=10).fit(x[~test], y[~test])
    accuracy = float((clf.predict(x[test]) == y[test]).mean())
    return accuracy, time.process_time() - start


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=None,
                        help="registered names (default: every name ending in _digits)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for PyTorch (0: PyTorch's default)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--train-arg", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a trainer default for every run (e.g. epochs=20)")
    parser.add_argument("--json", help="write every run's numbers to this file")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    models = args.models or vit_scratch.list_models("*_digits")
    changes = {}
    for item in args.train_arg:
        key, _, value = item.partition("=")
        kind = type(getattr(TrainConfig(), key))
        changes[key] = kind(value) if kind in (int, float) else value

    runs = {"svc": []}
    for seed in args.seeds:
        accuracy, cpu = svc_accuracy(seed)
        runs["svc"].append({"seed": seed, "test_accuracy": accuracy, "cpu_seconds": cpu,
                            "train_seconds": cpu})
        print(f"svc          seed {seed}: {accuracy:.4f}", flush=True)
    for name in models:
        runs[name] = []
        for seed in args.seeds:
            cfg = TrainConfig(model=name, data="digits", seed=seed, split_seed=seed,
                              device=args.device, progress="off", out=None, **changes)
            result = train(cfg, log=lambda *_: None)
            runs[name].append({k: result[k] for k in ("test_accuracy", "train_seconds",
                                                        "cpu_seconds", "params")}
                              | {"seed": seed})
            print(f"{name:<12} seed {seed}: {result['test_accuracy']:.4f}  "
                  f"{result['train_seconds']:.1f} s wall  {result['cpu_seconds']:.1f} s CPU",
                  flush=True)

    rows = []
    for name, results in runs.items():
        acc = summary([r["test_accuracy"] for r in results])
        wall = summary([r["train_seconds"] for r in results])
        cpu = summary([r["cpu_seconds"] for r in results])
        params = results[0].get("params", "")
        rows.append((name, params, acc, wall, cpu))
    header = ("model", "params", "test accuracy", "train s (wall)", "train s (CPU)")
    print()
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
    for name, params, acc, wall, cpu in rows:
        cells = (name, f"{params:,}" if params else "--",
                 f"{100 * acc[0]:.2f} ± {100 * acc[1]:.2f} %", f"{wall[0]:.1f} ± {wall[1]:.1f}",
                 f"{cpu[0]:.1f} ± {cpu[1]:.1f}")
        print(("| " + " | ".join(cells) + " |") if args.markdown else "  ".join(
            f"{c:<22}" for c in cells))
    print(f"\n{len(args.seeds)} seeds ({', '.join(map(str, args.seeds))}), torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread(s), device {args.device}")
    if args.json:
        meta = {"seeds": args.seeds, "threads": torch.get_num_threads(),
                "torch": str(torch.__version__), "train_changes": changes}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "runs": runs}, f, indent=2)
    return runs


if __name__ == "__main__":
    main()
