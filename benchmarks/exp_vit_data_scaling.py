"""Experiment (ViT, notebook 03): test accuracy against the number of training images, for a
small ViT, a small CNN and an SVM, on two tasks: one where the CNN's built-in assumptions help
and one where they hurt.

    python benchmarks/exp_vit_data_scaling.py --json benchmarks/results/vit_data_scaling.json
    python benchmarks/exp_vit_data_scaling.py --tasks clutter --sizes 500 --seeds 0 --lrs 1.5e-3   # a slice
    python benchmarks/exp_vit_data_scaling.py --canary                                  # the canary slice

The ViT paper's central finding (Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR
2021, Fig. 3-4): trained on little data, a ViT is behind a ResNet, whose convolutions build in
that nearby pixels belong together and that a pattern means the same wherever it is; as the
pre-training data grows the ViT catches up and then passes it.  In miniature, two tasks
(``vit_scratch.data.clutter``), each a separate experiment:

* **clutter**: one 8×8 digit anywhere on a 16×16 canvas (turned by up to 10°), two fragments of
  other digits as clutter, faint noise; the label is the digit.  A CNN's assumptions fit it.
* **relational**: two full-contrast digits of different classes anywhere on a 24×24 canvas,
  labelled by the one further left (``leftmost_digit``).  A CNN that pools globally over a
  small receptive field cannot compare where two digits are; attention over all patches, with
  position embeddings, can.

The models:

* **ViT**: ``vit_digits`` (64 channels, 4 blocks of 4 heads) at the canvas size, a 4×4 grid of
  patches on both (4×4 pixels at 16×16, ``vit_digits``' own 6×6 at 24×24), with the library's
  initialisation, which is timm's and the ViT reference's (trunc-normal 0.02).
* **CNN**: three 3×3 convolutions (32, 64, 64 channels, the last two with stride 2), global
  average pooling and a linear head (:class:`SmallCNN`, written out again in notebook 03), with
  PyTorch's default initialisation (He-style uniform, as convolutional networks use).
* **SVM**: scikit-learn's ``SVC`` with an RBF kernel on the pixels (``gamma="scale"``,
  ``C=10``), the digits baseline of ``bench_digits.py`` moved to the canvases.

Both networks train with ``experiment.fit``: AdamW, weight decay 0.05 on the weight matrices
and kernels, a 10% linear warm-up then cosine decay, label smoothing 0.1, batches of 64, **no
augmentation**, for the **same number of steps at every size** (``STEPS``, per task); the epoch
with the best accuracy on 1,000 validation canvases (drawn apart from the training ones) is
tested once.  Tuning: each network's learning rate is the best of ``LR_GRID`` on seed 0's
validation canvases at ``TUNE_SIZE`` training canvases, per task, the same grid for both.  Each
seed draws its own pool split (``split_seed``), training, validation and test canvases (2,000
test canvases from digits no training canvas shows).  One thread per process.

What is reported (``stats``): per size, the ViT minus the CNN (and minus the SVM) paired by
seed, a t interval with seeds − 1 degrees of freedom, Holm-corrected over the sizes; where the
curves cross, from the intervals' signs in both directions (``stats.crossings``); and the slope
of log test error against log training size (``stats.log_slope``) per seed and model.

* **Primary contrast, clutter**: the ViT's slope minus the CNN's, paired by seed: does the
  ViT's error fall faster with data (the paper's "catches up")?
* **Primary contrast, relational**: the ViT minus the CNN at the largest size.
* **Positive controls**: each task is the other's.  On the relational task the CNN's pooling
  cannot learn the rule, so its curve flattens while the ViT's falls: a slope difference that
  the same design (sizes, seeds, steps) must detect.  On the clutter task the CNN's bias fits,
  so it must be ahead at the small sizes.
* **Under-training check**: at the largest size, seed 0, a network whose best validation epoch
  is its last is trained again for twice the steps; the file records what that gains.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402
import stats  # noqa: E402

TASKS = {
    "clutter": dict(maker="digits_in_clutter", size=16,
                    world=dict(canvas_size=16, scale=1, clutter=2, noise=0.1, rotate=10.0)),
    "relational": dict(maker="leftmost_digit", size=24,
                       world=dict(canvas_size=24, min_shift=4, noise=0.1)),
}
SIZES = [500, 2000, 8000]
STEPS = {"clutter": 2000, "relational": 1600}  # batches of 64, the same at every size
N_VAL, N_TEST = 1000, 2000
BATCH = 64
RECIPE = dict(weight_decay=0.05, label_smoothing=0.1, warmup=0.1)
LR_GRID = (5e-4, 1.5e-3, 4.5e-3)
TUNE_SIZE = 2000
VAL_SEED = 10_000  # the validation canvases of seed s are drawn with seed VAL_SEED + s
VIT = {16: dict(patch_size=4), 24: {}}  # by canvas: 16 tokens each (vit_digits: 6×6 patches at 24)
SVM = dict(gamma="scale", C=10)
NETWORKS = ("vit", "cnn")
NAMES = {"vit": "the ViT", "cnn": "the CNN", "svm": "the SVM"}


def _first_up(text: str) -> str:
    return text[:1].upper() + text[1:]
PRIMARY = {"clutter": "the ViT's slope of log error against log n, minus the CNN's",
           "relational": "the ViT minus the CNN at the largest size"}

#: The canary: the same code on a few canvases for a few steps, one seed.
CANARY = dict(n=256, n_val=128, n_test=256, steps=10, lr=1.5e-3)


def small_cnn():
    """:class:`SmallCNN`, built here so that importing this file needs no torch."""
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        """Three 3×3 convolutions with ReLU (32, 64, 64 channels; the last two with stride 2),
        global average pooling and a linear head.   (B, 1, H, W) -> (B, 10)"""

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


def world(task: str, n: int, pool: str, seed: int, split_seed: int = 0):
    """``n`` canvases of ``task`` from ``pool``'s digits (a ``Clutter``)."""
    from vit_scratch.data import clutter

    spec = TASKS[task]
    return getattr(clutter, spec["maker"])(n, pool=pool, seed=seed, split_seed=split_seed,
                                           **spec["world"])


def canvases(task: str, n: int, seed: int, n_val: int = N_VAL, n_test: int = N_TEST):
    """Seed ``seed``'s (train, val, test) canvases: its own pool split and draws."""
    return (world(task, n, "train", 1000 * seed + n, seed),
            world(task, n_val, "train", VAL_SEED + seed, seed),
            world(task, n_test, "test", seed, seed))


def tensors(w):
    import torch

    return torch.from_numpy(w.images), torch.from_numpy(w.labels)


def build(kind: str, task: str):
    """The ViT or the CNN for ``task``'s canvas, initialised as its own papers do."""
    import vit_scratch

    if kind == "vit":
        size = TASKS[task]["size"]
        return vit_scratch.create_model("vit_digits", img_size=size, **VIT[size])
    return small_cnn()()


def run_network(task: str, kind: str, n: int, seed: int, lr: float, steps: int | None = None,
                log=print, data=None) -> dict:
    """Train the ViT or the CNN on ``n`` canvases of seed ``seed``: its numbers and curves."""
    import torch

    train, val, test = data or canvases(task, n, seed)
    torch.manual_seed(seed)
    model = build(kind, task)
    result = experiment.fit(model, tensors(train), tensors(val), tensors(test),
                            steps=steps or STEPS[task], batch_size=BATCH, lr=lr, seed=seed,
                            **RECIPE)
    log(f"{experiment.stamp()} {task} {kind:3s} n={n:5d} lr {lr:g} seed {seed}: test "
        f"{result['test_accuracy']:.4f} (val {result['val_accuracy']:.4f}, epoch "
        f"{result['selected_epoch']}/{result['epochs']}) {result['cpu_seconds']:.0f} CPU s",
        flush=True)
    return {"task": task, "model": kind, "n": n, "seed": seed, "lr": lr,
            "params": sum(p.numel() for p in model.parameters()),
            **{k: result[k] for k in ("test_accuracy", "val_accuracy", "epochs", "steps",
                                      "selected_epoch", "final_train_loss", "cpu_seconds")},
            "val_curve": [h["val_accuracy"] for h in result["history"]],
            "train_loss_curve": [h["train_loss"] for h in result["history"]]}


def run_svm(task: str, n: int, seed: int, log=print, data=None) -> dict:
    from sklearn.svm import SVC

    clock = experiment.CpuClock()
    train, _, test = data or canvases(task, n, seed)
    clf = SVC(**SVM).fit(train.images.reshape(len(train), -1), train.labels)
    accuracy = float((clf.predict(test.images.reshape(len(test), -1)) == test.labels).mean())
    log(f"{experiment.stamp()} {task} svm n={n:5d} seed {seed}: test {accuracy:.4f}", flush=True)
    return {"task": task, "model": "svm", "n": n, "seed": seed, "test_accuracy": accuracy,
            "cpu_seconds": clock.seconds()}


def tune(task: str, lrs, log=print) -> tuple[dict, list]:
    """Each network's learning rate on ``task``: the best validation accuracy of ``lrs`` at
    ``TUNE_SIZE`` canvases, seed 0 (ties: the smaller rate).  ({model: lr}, the runs)."""
    data = canvases(task, TUNE_SIZE, 0)
    runs = [run_network(task, kind, TUNE_SIZE, 0, lr, log=log, data=data)
            for kind in NETWORKS for lr in lrs]
    chosen = {kind: max((r for r in runs if r["model"] == kind),
                        key=lambda r: (r["val_accuracy"], -r["lr"]))["lr"] for kind in NETWORKS}
    return chosen, runs


# --- what the runs say ----------------------------------------------------------------------------

def curves(runs: list[dict]) -> dict:
    """{model: {n: summary of the test accuracy}}."""
    table = {}
    for r in runs:
        table.setdefault(r["model"], {}).setdefault(r["n"], []).append(r["test_accuracy"])
    return {m: {str(n): experiment.summary(v) for n, v in sorted(by_n.items())}
            for m, by_n in table.items()}


def slopes(runs: list[dict], model: str) -> dict:
    """{seed: slope of log test error against log n} of ``model``'s runs."""
    out = {}
    for seed in sorted({r["seed"] for r in runs if r["model"] == model}):
        mine = sorted((r["n"], 1 - r["test_accuracy"]) for r in runs
                      if r["model"] == model and r["seed"] == seed)
        if len(mine) >= 2:
            out[seed] = stats.log_slope([n for n, _ in mine], [e for _, e in mine])
    return out


def _interval(a: dict, b: dict) -> dict:
    iv = stats.paired(a, b)
    return {"interval": iv.to_dict(),
            "detectable_effect": stats.detectable_effect(iv.sd, iv.n) if iv.sd > 0 else 0.0}


def compare(runs: list[dict], a: str, b: str, task: str) -> dict:
    """``a`` against ``b`` over the sizes: the paired interval at each size (Holm-corrected over
    the sizes), the crossings of the intervals' signs, and the verdict at each size."""
    sizes = sorted({r["n"] for r in runs if r["model"] == a} & {r["n"] for r in runs
                                                               if r["model"] == b})
    at = {}
    for n in sizes:
        iv = stats.paired(stats.by_seed(runs, "test_accuracy", model=a, n=n),
                          stats.by_seed(runs, "test_accuracy", model=b, n=n))
        at[str(n)] = {"interval": iv.to_dict(),
                      "detectable_effect": stats.detectable_effect(iv.sd, iv.n) if iv.sd > 0
                      else 0.0,
                      "verdict": _first_up(stats.verdict(iv, NAMES[a], NAMES[b]))}
    rejected = stats.holm({n: v["interval"]["p_value"] for n, v in at.items()})
    signs = []
    for n, v in at.items():
        v["holm_rejected"] = rejected[n]
        iv = stats.Interval.from_dict(v["interval"])
        signs.append(iv.sign() if rejected[n] else 0)
    return {"a": a, "b": b, "sizes": sizes, "at": at, "signs": signs,
            "crossings": [dict(c, between=list(c["between"]))
                          for c in stats.crossings(sizes, signs)],
            "sentence": _first_up(stats.crossing_sentence(sizes, signs, NAMES[a], NAMES[b],
                                                          x_name="training canvases"))}


def slope_verdict(iv, detectable: float) -> str:
    """What the interval of the ViT's slope minus the CNN's says (log error against log n: the
    more negative, the faster the error falls as the data grows)."""
    text = f"the ViT's slope minus the CNN's is {iv.format(2, '')}"
    if iv.sign() < 0:
        return f"The ViT's error falls faster with data than the CNN's: {text}."
    if iv.sign() > 0:
        return f"The ViT's error falls more slowly with data than the CNN's: {text}."
    return (f"No difference between the ViT's and the CNN's slopes was detected: {text}; this "
            f"design would have detected a difference of about {detectable:.2f}.")


def summarise(runs: list[dict], task: str) -> dict:
    """Everything the page and the notebook read about one task."""
    out = {"curves": curves(runs), "slopes": {}, "comparisons": {}}
    for model in dict.fromkeys(r["model"] for r in runs):
        per_seed = slopes(runs, model)
        if len(per_seed) >= 2:
            iv = stats.t_interval(list(per_seed.values()))
            out["slopes"][model] = {"per_seed": {str(s): v for s, v in per_seed.items()},
                                    "interval": iv.to_dict()}
    for other in ("cnn", "svm"):
        if {"vit", other} <= {r["model"] for r in runs} and len({r["seed"] for r in runs}) > 1:
            out["comparisons"][other] = compare(runs, "vit", other, task)
    if {"vit", "cnn"} <= set(out["slopes"]):
        d = _interval(slopes(runs, "vit"), slopes(runs, "cnn"))
        d["verdict"] = slope_verdict(stats.Interval.from_dict(d["interval"]),
                                     d["detectable_effect"])
        out["slope_difference"] = d
    if "cnn" in out["comparisons"]:
        largest = str(out["comparisons"]["cnn"]["sizes"][-1])
        out["primary"] = (out.get("slope_difference") if task == "clutter"
                          else dict(out["comparisons"]["cnn"]["at"][largest], n=int(largest)))
        if out["primary"] is not None:
            out["primary"] = dict(out["primary"], contrast=PRIMARY[task])
    return out


def longer_check(task: str, chosen: dict, runs: list[dict], n: int, log=print) -> dict:
    """The under-training check at the largest size ``n``, seed 0: a network whose validation
    accuracy peaked before its last epoch is not under-trained (``selected_last`` False); one
    that selected its last epoch is trained again for twice the steps, and the file records
    what that gains."""
    out = {}
    for kind in NETWORKS:
        base = next(r for r in runs if r["model"] == kind and r["n"] == n and r["seed"] == 0)
        out[kind] = {"selected_epoch": base["selected_epoch"], "epochs": base["epochs"],
                     "selected_last": base["selected_epoch"] == base["epochs"]}
        if not out[kind]["selected_last"]:
            continue
        long = run_network(task, kind, n, 0, chosen[kind], 2 * STEPS[task], log)
        out[kind]["twice_the_steps"] = {
            "steps": long["steps"], "test_accuracy": long["test_accuracy"],
            "val_accuracy": long["val_accuracy"], "selected_epoch": long["selected_epoch"],
            "epochs": long["epochs"], "gain_test": long["test_accuracy"] - base["test_accuracy"],
            "gain_val": long["val_accuracy"] - base["val_accuracy"],
            "cpu_seconds": long["cpu_seconds"], "val_curve": long["val_curve"],
            "train_loss_curve": long["train_loss_curve"]}
    return out


def run_task(task: str, sizes, seeds, models, lrs, log=print, check_longer=True,
             chosen=None) -> dict:
    """One task over sizes and seeds.  With ``chosen`` ({network: lr}, picked from the grid in an
    earlier run of this code) the grid is not run again."""
    clock = experiment.CpuClock()
    if chosen:
        grid = []
    else:
        chosen, grid = tune(task, lrs, log) if set(NETWORKS) & set(models) else ({}, [])
    runs = []
    for seed in seeds:
        for n in sizes:
            data = canvases(task, n, seed)
            for kind in models:
                if kind == "svm":
                    runs.append(run_svm(task, n, seed, log, data))
                    continue
                reused = next((r for r in grid if r["model"] == kind and r["lr"] == chosen[kind]
                               and n == TUNE_SIZE and seed == 0), None)
                runs.append(reused or run_network(task, kind, n, seed, chosen[kind], log=log,
                                                  data=data))
    out = {"chosen_lr": chosen,
           "lr_grid": [{k: r[k] for k in ("model", "lr", "val_accuracy", "test_accuracy",
                                          "selected_epoch", "epochs")} for r in grid],
           **summarise(runs, task), "runs": runs}
    if check_longer and set(NETWORKS) <= set(models) and 0 in seeds:
        out["longer"] = longer_check(task, chosen, runs, max(sizes), log)
    out["cpu_seconds"] = clock.seconds()
    return out


def canary(log=lambda *a, **k: None) -> dict:
    """The canary slice: each network on a few canvases of each task for a few steps, and the
    SVM, seed 0; the numbers printed."""
    numbers = {}
    for task in TASKS:
        data = canvases(task, CANARY["n"], 0, CANARY["n_val"], CANARY["n_test"])
        for kind in NETWORKS:
            r = run_network(task, kind, CANARY["n"], 0, CANARY["lr"], CANARY["steps"], log, data)
            numbers[f"{task}_{kind}"] = {k: r[k] for k in ("val_accuracy", "test_accuracy",
                                                           "final_train_loss")}
        numbers[f"{task}_svm"] = run_svm(task, CANARY["n"], 0, log, data)["test_accuracy"]
    return experiment.print_canary(numbers)


def merge(paths, out=None, notes=None) -> dict:
    """One results file from several runs of this script on different tasks (run in parallel
    processes): their tasks side by side, each task's summary computed again from its runs, the
    CPU seconds added, ``written_by`` listing every part's command; the parts' canaries must
    agree."""
    import json

    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    data = dict(parts[0])
    data["written_by"] = " && ".join(part["written_by"] for part in parts)
    commits = sorted({part["commit"] for part in parts})
    data["commit"] = commits[0] if len(commits) == 1 else commits
    data["tasks"] = {task: dict(entry, **summarise(entry["runs"], task))
                     for part in parts for task, entry in part["tasks"].items()}
    data["settings"] = dict(parts[0]["settings"], tasks={
        task: spec for part in parts for task, spec in part["settings"]["tasks"].items()
        if task in part["tasks"]})
    if any(part["canary"] != parts[0]["canary"] for part in parts):
        raise ValueError("the parts' canaries differ: they ran different code")
    data["cpu_seconds"] = sum(part["cpu_seconds"] for part in parts)
    if notes:
        data["notes"] = notes
    if out:
        experiment.write(out, data)
    return data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", default=["vit", "cnn", "svm"],
                        choices=["vit", "cnn", "svm"])
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LR_GRID),
                        help="the learning-rate grid (tried at TUNE_SIZE, seed 0)")
    parser.add_argument("--no-longer", action="store_true",
                        help="skip the under-training check (twice the steps at the largest size)")
    parser.add_argument("--chosen", nargs="+", metavar="NETWORK=LR",
                        help="skip the grid: each network's rate, chosen from the grid in an "
                             "earlier run of this code (say where in --lr-note)")
    parser.add_argument("--lr-note", help="where the --chosen rates come from (recorded)")
    parser.add_argument("--canary", action="store_true",
                        help="run the canary slice only and print its numbers")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="instead of training: put the tasks of these results files (run in "
                             "parallel processes) into one")
    parser.add_argument("--notes", help="recorded in the file: what this run of the design "
                                        "leaves out, and why")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.json, args.notes)
    experiment.one_thread()
    if args.canary:
        return canary()
    clock = experiment.CpuClock()
    data = experiment.header("vit_data_scaling", argv, {
        "tasks": {task: TASKS[task] for task in args.tasks}, "sizes": args.sizes, "seeds": args.seeds, "models": args.models,
        "steps": STEPS, "n_val": N_VAL, "n_test": N_TEST, "batch_size": BATCH, "recipe": RECIPE,
        "augmentation": None, "lr_grid": args.lrs, "tune_size": TUNE_SIZE, "val_seed": VAL_SEED,
        "vit": {"name": "vit_digits", "by_canvas": VIT}, "svm": SVM, "primary": PRIMARY})
    if args.notes:
        data["notes"] = args.notes
    chosen = None
    if args.chosen:
        chosen = experiment.chosen_rates(args.chosen, [m for m in NETWORKS if m in args.models],
                                         "--chosen")
    data["tasks"] = {task: run_task(task, args.sizes, args.seeds, args.models, args.lrs,
                                    check_longer=not args.no_longer, chosen=chosen)
                     for task in args.tasks}
    if chosen:
        for part in data["tasks"].values():
            part["lr_choice"] = args.lr_note
    for task, part in data["tasks"].items():
        for model, curve in part["curves"].items():
            print(task, model, "  ".join(f"{n}: {100 * s['mean']:.1f}±{100 * s['std']:.1f}"
                                         for n, s in curve.items()))
    data["canary"] = experiment.canary_record("exp_vit_data_scaling.py", canary())
    return experiment.finish(data, clock, args.json)


if __name__ == "__main__":
    main()
