"""Benchmark: stochastic depth on a deep, narrow ViT on scikit-learn's digits, over several
random seeds.

    python benchmarks/bench_drop_path.py                                # 4 rates × 5 seeds
    python benchmarks/bench_drop_path.py --rates 0 0.3 --seeds 0 --epochs 4
    python benchmarks/bench_drop_path.py --threads 1 --json benchmarks/results/drop_path.json

The last line writes ``benchmarks/results/drop_path.json``, the one source of the numbers
notebook 11 shows.  The model is ``vit_digits`` made deep and narrow -- 12 blocks of 32 channels
(2 heads of 16), instead of 4 blocks of 64 -- trained with the trainer's digits recipe
(``--seed s --split-seed s``, 40 epochs, label smoothing, the affine augmentation) at each
``drop_path_rate`` p_L: block l of L (l = 0 .. L-1) drops its two residual branches with
probability l/(L-1) · p_L, per sample (Huang et al., "Deep Networks with Stochastic Depth",
ECCV 2016, the linear decay rule, as timm and DeiT space it).

Reported per rate: the test accuracy of the checkpoint the validation split selects, the
training accuracy and plain cross-entropy of the last epoch (on augmented images, with the
branches dropped: the regulariser at work), the expected number of residual branches a sample
runs through in training, and the CPU time.  ``paired`` holds each rate's per-seed difference to
rate 0 (the same split and initialisation seed).  Mean ± standard deviation over the seeds
(ddof=1).  A script, never a test.
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

from vit_scratch.train import TrainSettings, train

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402  (benchmarks/experiment.py: the results file)

MODEL = "vit_digits"
DEEP_NARROW = dict(depth=12, embed_dim=32, num_heads=2)


def summary(values: list[float]) -> dict:
    return {"mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0}


def expected_branches(rate: float, depth: int) -> float:
    """Residual branches a sample runs through in training, in expectation: two per block,
    each kept with probability 1 - l/(L-1) · p_L."""
    return float(2 * (1 - np.linspace(0, rate, depth)).sum())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", nargs="+", type=float, default=[0.0, 0.1, 0.2, 0.3],
                        help="drop_path_rate p_L: the last block's drop probability")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--epochs", type=int, default=TrainSettings().epochs)
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for PyTorch, the trainer's --threads (0: its default)")
    parser.add_argument("--json", help="write the summary and every run's numbers to this file")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)

    runs = {rate: [] for rate in args.rates}
    for seed in args.seeds:
        for rate in args.rates:
            kwargs = dict(DEEP_NARROW, drop_path_rate=rate)
            result = train(TrainSettings(model=MODEL, model_kwargs=kwargs, data="digits",
                                         epochs=args.epochs, seed=seed, split_seed=seed,
                                         device="cpu", threads=args.threads, progress="off",
                                         out=None), log=lambda *_: None)
            last = result["history"][-1]
            runs[rate].append({"seed": seed, "test_accuracy": result["test_accuracy"],
                               "last_train_accuracy": last["train_accuracy"],
                               "last_train_cross_entropy": last["train_cross_entropy"],
                               "best_val_accuracy": result["best_val_accuracy"],
                               "cpu_seconds": result["cpu_seconds"], "params": result["params"]})
            print(f"drop_path_rate {rate:<4} seed {seed}: test {result['test_accuracy']:.4f}  "
                  f"last train acc {last['train_accuracy']:.4f}  "
                  f"{result['cpu_seconds']:.1f} s CPU", flush=True)

    keys = ("test_accuracy", "last_train_accuracy", "last_train_cross_entropy",
            "best_val_accuracy", "cpu_seconds")
    depth = DEEP_NARROW["depth"]
    rates = {str(rate): {"drop_path_rate": rate,
                         "expected_branches": expected_branches(rate, depth),
                         **{k: summary([r[k] for r in entries]) for k in keys},
                         "runs": entries}
             for rate, entries in runs.items()}
    base = args.rates[0]
    paired = {}
    for rate in args.rates[1:]:
        diffs = [a["test_accuracy"] - b["test_accuracy"] for a, b in zip(runs[rate], runs[base])]
        paired[f"test_accuracy: {rate} - {base}"] = {**summary(diffs), "per_seed": diffs}
    data = {
        "benchmark": "drop_path",
        "written_by": "python benchmarks/bench_drop_path.py " + shlex.join(
            sys.argv[1:] if argv is None else argv),
        "settings": {"model": MODEL, "model_kwargs": DEEP_NARROW, "epochs": args.epochs,
                     "seeds": args.seeds, "threads": args.threads or torch.get_num_threads(),
                     "device": "cpu", "torch": str(torch.__version__), "data": "digits",
                     "params": runs[base][0]["params"]},
        "rates": rates,
        "paired": paired,
    }
    return experiment.report(data, args.json)


if __name__ == "__main__":
    main()
