"""Benchmark: the small models on scikit-learn's digits, over several random seeds, beside an SVC.

    python benchmarks/bench_digits.py                                  # every *_digits model, 5 random seeds
    python benchmarks/bench_digits.py --models vit_digits --seeds 0 1 --threads 2
    python benchmarks/bench_digits.py --threads 1 --train-arg coat_lite_digits:epochs=16 \
        --train-arg coat_digits:epochs=12 --json benchmarks/results/digits.json --markdown
    python benchmarks/bench_digits.py --canary                         # the file's canary, seconds

The last line writes ``benchmarks/results/digits.json``, the one source of the digits numbers that
README.md, docs/ and notebook 09 show (``python benchmarks/tables.py benchmarks/results/digits.json``
prints the README's table from it).

For every seed s the model is trained with ``--seed s --split-seed s`` and otherwise the
trainer's defaults -- exactly ``python -m vit_scratch.train --model NAME --data digits --seed s
--split-seed s``: 20% of each class held out for the test (``stratified_split(labels, 0.2, s)``),
10% of each class of the rest for validation, which selects the epoch whose weights are tested,
once, at the end.  The baseline is scikit-learn's ``SVC(gamma=0.001, C=10)`` (an RBF kernel on
the 64 raw pixel counts 0..16, the scale gamma=0.001 suits) on the same test splits; its
hyperparameters are fixed, so it selects nothing and fits all the other images (training and
validation).

Reports mean ± standard deviation (over the random seeds, ddof=1) of the test accuracy, its
difference to the SVC on the same split, the training wall time and the CPU time (user + system of
the process, all threads): wall time depends on what else runs on the machine, CPU time much less.
``--train-arg FIELD=VALUE`` changes a trainer default for every model, ``--train-arg
MODEL:FIELD=VALUE`` for one.

``--canary`` runs the cheapest slice of the same command (``CANARY``: the README's
``coat_lite_digits`` -- or the ``--models`` given, with their ``--train-arg`` changes -- for one
epoch through the trainer, its augmentation, recipe and selection, on split 0, one thread; and
the SVC on split 0; about 8 CPU seconds) and prints its numbers;
``--json`` records the same slice's numbers in the file (``canary``), and
``tests/test_canaries.py`` re-runs it, so the file cannot outlive a change to the trainer or the
models unnoticed.  A script, never a test.
"""
from __future__ import annotations

import argparse
import ast
import os
import shlex
import sys
import time
from pathlib import Path

import torch

import vit_scratch
from vit_scratch.data import stratified_split
from vit_scratch.train import TrainSettings, train

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402  (benchmarks/experiment.py: the results file)
import tables  # noqa: E402  (benchmarks/tables.py: the README's table from the results file)
from experiment import git_commit, summary  # noqa: E402  (benchmarks/experiment.py)


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


#: The canary's slice: models, their epochs, the seed (the split), one thread.
CANARY = {"models": {"coat_lite_digits": 1}, "seed": 0}


def canary_numbers(models: list[str] | None = None, changes: dict | None = None) -> dict:
    """The canary slice's numbers: per model (``CANARY``'s, or ``models`` with their trainer
    ``changes``, for one epoch each) the test accuracy and the epoch's training loss, training
    accuracy and validation loss (the trainer's history), and the SVC's accuracy."""
    models = models or list(CANARY["models"])
    numbers = {}
    for name in models:
        fields = {**(changes or {}).get(name, {}), "epochs": CANARY["models"].get(name, 1)}
        result = train(TrainSettings(model=name, data="digits", seed=CANARY["seed"],
                                     split_seed=CANARY["seed"], device="cpu", threads=1,
                                     progress="off", out=None, **fields), log=lambda *_: None)
        last = result["history"][-1]
        numbers[name] = {"test_accuracy": result["test_accuracy"],
                         **{k: last[k] for k in ("train_loss", "train_accuracy", "val_loss")}}
    numbers["svc"] = {"test_accuracy": svc_accuracy(CANARY["seed"])[0]}
    return numbers


def canary_argv(args) -> list[str]:
    """The options of ``--canary`` that re-run this command's slice: its models and its trainer
    changes but the epochs."""
    argv = ["--canary"] + (["--models", *args.models] if args.models else [])
    for item in args.train_arg:
        if item.partition("=")[0].rpartition(":")[2] != "epochs":
            argv += ["--train-arg", item]
    return argv


def train_changes(items: list[str], models: list[str]) -> dict[str, dict]:
    """``[MODEL:]FIELD=VALUE`` items -> {model: {field: value}}, typed as TrainSettings's fields."""
    changes = {name: {} for name in models}
    for item in items:
        head, _, value = item.partition("=")
        target, _, key = head.rpartition(":")
        if not hasattr(TrainSettings(), key):
            raise SystemExit(f"--train-arg {item!r}: TrainSettings has no field {key!r}")
        if target and target not in changes:
            raise SystemExit(f"--train-arg {item!r}: {target!r} is not among the models "
                             f"{', '.join(models)}")
        kind = type(getattr(TrainSettings(), key))
        for name in [target] if target else models:
            changes[name][key] = kind(value) if kind in (int, float) else typed(value)
    return changes


def typed(value: str):
    """A field without a number as its default (``patience``, ``warmup_epochs``: None) gets the
    Python literal the text spells (``5``, ``0.5``, ``None``), or the text."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=None,
                        help="registered names (default: every name ending in _digits)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for PyTorch, the trainer's --threads (0: its default, "
                             "the cores the machine has free)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--train-arg", action="append", default=[],
                        metavar="[MODEL:]FIELD=VALUE",
                        help="change a trainer default for every model, or for one (e.g. "
                             "epochs=20, coat_digits:epochs=12)")
    parser.add_argument("--json", help="write the summary and every run's numbers to this file "
                                       "(benchmarks/results/digits.json is the one the README shows)")
    parser.add_argument("--markdown", action="store_true", help="print the README's table")
    parser.add_argument("--canary", action="store_true",
                        help="run only the canary slice (coat_lite_digits, or --models with their "
                             "--train-arg changes, for one epoch on split 0, one thread) and "
                             "print its numbers")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.canary:
        return experiment.print_canary(canary_numbers(args.models, train_changes(
            args.train_arg, args.models or list(CANARY["models"]))))
    models = args.models or vit_scratch.list_models("*_digits")
    changes = train_changes(args.train_arg, models)
    commit = git_commit()  # the code that runs, before it does
    load_start = os.getloadavg()[0]

    svc_runs = []
    for seed in args.seeds:
        accuracy, cpu = svc_accuracy(seed)
        svc_runs.append({"seed": seed, "test_accuracy": accuracy, "cpu_seconds": cpu})
        print(f"svc          seed {seed}: {accuracy:.4f}", flush=True)
    results = {}
    for name in models:
        runs = []
        for seed, svc in zip(args.seeds, svc_runs):
            cfg = TrainSettings(model=name, data="digits", seed=seed, split_seed=seed,
                                device=args.device, threads=args.threads, progress="off",
                                out=None, **changes[name])
            result = train(cfg, log=lambda *_: None)
            runs.append({"seed": seed, "split_seed": seed}
                        | {k: result[k] for k in ("test_accuracy", "best_val_accuracy",
                                                  "selected_epoch", "epochs_done", "images",
                                                  "train_seconds", "cpu_seconds", "params")}
                        | {"vs_svc": result["test_accuracy"] - svc["test_accuracy"]})
            print(f"{name:<12} seed {seed}: {result['test_accuracy']:.4f}  "
                  f"{result['train_seconds']:.1f} s wall  {result['cpu_seconds']:.1f} s CPU",
                  flush=True)
        results[name] = {
            "train_changes": changes[name],
            "epochs": changes[name].get("epochs", TrainSettings().epochs),
            "params": runs[0]["params"],
            **{key: summary([r[key] for r in runs])
               for key in ("test_accuracy", "vs_svc", "train_seconds", "cpu_seconds")},
            "runs": runs,
        }
    data = {
        "benchmark": "digits",
        "written_by": "python benchmarks/bench_digits.py " + shlex.join(
            sys.argv[1:] if argv is None else argv),
        "commit": commit,
        "load_average": {"start": load_start, "end": os.getloadavg()[0]},  # a busy machine's
        # CPU seconds are higher than an idle one's; its accuracies are the same
        "settings": {"seeds": args.seeds, "threads": args.threads or torch.get_num_threads(),
                     "device": args.device, "torch": str(torch.__version__),
                     "test_fraction": 0.2, "val_fraction": TrainSettings().val_fraction,
                     "select": TrainSettings().select},
        "models": results,
        "svc": {key: summary([r[key] for r in svc_runs])
                for key in ("test_accuracy", "cpu_seconds")} | {"runs": svc_runs},
    }
    if args.json:
        numbers = canary_numbers(args.models, changes) if args.models else canary_numbers()
        data["canary"] = experiment.canary_record("bench_digits.py",
                                                  experiment.print_canary(numbers),
                                                  argv=canary_argv(args))
    print()
    if args.markdown:
        print(tables.digits_table(data))
    else:
        for name, entry in results.items():
            print(f"{name:<18} {tables.percent(entry['test_accuracy']):<18} "
                  f"{entry['cpu_seconds']['mean']:6.1f} ± {entry['cpu_seconds']['std']:.1f} s CPU")
        print(f"{'svc':<18} {tables.percent(data['svc']['test_accuracy'])}")
    print(f"\n{len(args.seeds)} seeds ({', '.join(map(str, args.seeds))}), torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread(s), device {args.device}")
    if args.json:
        experiment.write(args.json, data)
    return data


if __name__ == "__main__":
    main()
