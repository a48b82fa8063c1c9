"""Experiment (ViT, notebook 03): test accuracy against the number of training images, for a
small ViT, a small CNN and an SVM, on digits in clutter.

    python benchmarks/exp_vit_data_scaling.py --json benchmarks/results/vit_data_scaling.json
    python benchmarks/exp_vit_data_scaling.py --sizes 500 --seeds 0 --models vit cnn   # a slice

The ViT paper's central finding (Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR
2021, Fig. 3-4): trained on little data, a ViT is behind a ResNet, whose convolutions build in
that nearby pixels belong together and that a pattern means the same wherever it is; as the
pre-training data grows the ViT catches up and then passes it.  Here, in miniature: one 8×8
digit anywhere on a 16×16 canvas with two fragments of other digits as clutter
(``vit_scratch.data.clutter``), and training sets of 500 to 8,000 canvases.  The test set is the same
2,000 canvases for every run, drawn from digits no training canvas shows.

* **ViT**: ``vit_digits`` at 16×16 in 4×4 patches (a 4×4 grid of tokens, 64 channels, 4 blocks).
* **CNN**: three 3×3 convolutions (32, 64, 64 channels, the last two with stride 2), global
  average pooling and a linear head: translation equivariance and locality built in
  (:class:`SmallCNN`, written out again in notebook 03).
* **SVM**: scikit-learn's ``SVC`` with an RBF kernel on the 256 pixels (``gamma="scale"``,
  ``C=10``), the digits baseline of ``bench_digits.py`` moved to the canvases.

Both networks train with the trainer's recipe (``experiment.fit``: AdamW, warm-up, cosine
decay, label smoothing 0.1) for the same number of images seen, ``max(STEPS_MIN, EPOCHS_MIN ·
n / batch)`` batches of 64: small sets get many epochs, large ones at least 12; the epoch with
the best accuracy on 1,000 validation canvases (drawn apart from the training ones) is tested.
Each seed draws its own training canvases and initialisation.  One thread per process.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402

SIZES = [500, 1000, 2000, 4000, 8000]
WORLD = dict(canvas_size=16, scale=1, clutter=2, noise=0.1, rotate=10.0)
N_VAL, N_TEST = 1000, 2000
BATCH, STEPS_MIN, EPOCHS_MIN = 64, 1000, 12
VIT = dict(img_size=16, patch_size=4)  # vit_digits otherwise: 64 channels, 4 blocks, 4 heads


def small_cnn():
    """:class:`SmallCNN`, built here so that importing this file needs no torch."""
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        """Three 3×3 convolutions with ReLU (32, 64, 64 channels; the last two with stride 2),
        global average pooling and a linear head.   (B, 1, 16, 16) -> (B, 10)"""

        def __init__(self, num_classes: int = 10):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
                nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
                nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU())
            self.head = nn.Linear(64, num_classes)

        def forward(self, x):
            return self.head(self.features(x).mean(dim=(2, 3)))

    return SmallCNN


def world(n: int, pool: str, seed: int):
    from vit_scratch.data.clutter import digits_in_clutter

    return digits_in_clutter(n, pool=pool, seed=seed, **WORLD)


def steps_for(n: int) -> int:
    return max(STEPS_MIN, math.ceil(EPOCHS_MIN * n / BATCH))


def run_network(kind: str, n: int, seed: int, test, log=print) -> dict:
    """Train the ViT or the CNN on ``n`` canvases of seed ``seed``; its test accuracy."""
    import torch

    import vit_scratch

    train = world(n, "train", 1000 * seed + n)
    val = world(N_VAL, "train", 10_000 + seed)
    to_t = lambda w: (torch.from_numpy(w.images), torch.from_numpy(w.labels))  # noqa: E731
    torch.manual_seed(seed)
    model = (vit_scratch.create_model("vit_digits", **VIT) if kind == "vit"
             else small_cnn()())
    result = experiment.fit(model, to_t(train), to_t(val), test, steps=steps_for(n),
                            batch_size=BATCH, seed=seed)
    params = sum(p.numel() for p in model.parameters())
    log(f"{experiment.stamp()} {kind:4s} n={n:5d} seed {seed}: test {result['test_accuracy']:.4f} "
        f"(val {result['val_accuracy']:.4f}, {result['epochs']} epochs) "
        f"{result['cpu_seconds']:.0f} CPU s", flush=True)
    return {"model": kind, "n": n, "seed": seed, "params": params,
            **{k: result[k] for k in ("test_accuracy", "val_accuracy", "epochs", "steps",
                                      "selected_epoch", "cpu_seconds")}}


def run_svm(n: int, seed: int, test, log=print) -> dict:
    from sklearn.svm import SVC

    clock = experiment.CpuClock()
    train = world(n, "train", 1000 * seed + n)
    clf = SVC(gamma="scale", C=10).fit(train.images.reshape(n, -1), train.labels)
    accuracy = float((clf.predict(test.images.reshape(len(test), -1)) == test.labels).mean())
    log(f"{experiment.stamp()} svm  n={n:5d} seed {seed}: test {accuracy:.4f}", flush=True)
    return {"model": "svm", "n": n, "seed": seed, "test_accuracy": accuracy,
            "cpu_seconds": clock.seconds()}


def summarise(runs: list[dict]) -> dict:
    """{model: {n: summary of test accuracy}} and where the ViT's curve crosses the others."""
    table = {}
    for r in runs:
        table.setdefault(r["model"], {}).setdefault(r["n"], []).append(r["test_accuracy"])
    curves = {m: {str(n): experiment.summary(v) for n, v in sorted(by_n.items())}
              for m, by_n in table.items()}
    crossings = {}
    if "vit" in curves:
        for other in ("cnn", "svm"):
            if other in curves:
                crossings[other] = crossing(curves["vit"], curves[other])
    return {"curves": curves, "vit_crosses": crossings}


def crossing(vit: dict, other: dict) -> dict:
    """Where the ViT's mean curve goes from below ``other``'s to above it (between two sizes),
    or that it does not."""
    sizes = [n for n in vit if n in other]
    gaps = [vit[n]["mean"] - other[n]["mean"] for n in sizes]
    for (a, ga), (b, gb) in zip(zip(sizes, gaps), zip(sizes[1:], gaps[1:])):
        if ga < 0 <= gb:
            return {"crosses": True, "between": [int(a), int(b)], "gaps": dict(zip(sizes, gaps))}
    return {"crosses": False, "vit_ahead_everywhere": all(g >= 0 for g in gaps),
            "gaps": dict(zip(sizes, gaps))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", default=["vit", "cnn", "svm"],
                        choices=["vit", "cnn", "svm"])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    experiment.one_thread()
    clock = experiment.CpuClock()
    data = experiment.header("vit_data_scaling", argv, {
        "world": WORLD, "sizes": args.sizes, "seeds": args.seeds, "models": args.models,
        "n_val": N_VAL, "n_test": N_TEST, "batch_size": BATCH, "steps_min": STEPS_MIN,
        "epochs_min": EPOCHS_MIN, "vit": {"name": "vit_digits", **VIT},
        "svm": {"gamma": "scale", "C": 10}})
    test = world(N_TEST, "test", 0)
    import torch

    test_t = (torch.from_numpy(test.images), torch.from_numpy(test.labels))
    runs = []
    for seed in args.seeds:
        for n in args.sizes:
            for kind in args.models:
                runs.append(run_svm(n, seed, test) if kind == "svm"
                            else run_network(kind, n, seed, test_t))
    data.update(summarise(runs), runs=runs, cpu_seconds=clock.seconds())
    print(f"CPU time: {data['cpu_seconds']:.0f} s")
    for model, curve in data["curves"].items():
        print(model, "  ".join(f"{n}: {100 * s['mean']:.1f}±{100 * s['std']:.1f}"
                               for n, s in curve.items()))
    if args.json:
        experiment.write(args.json, data)
    return data


if __name__ == "__main__":
    main()
