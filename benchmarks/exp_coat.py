"""Experiment (CoaT, notebooks 07 and 08): the two convolutional position encodings on and off,
on a task that only position decides; and the two ways the parallel blocks exchange scales.

    python benchmarks/exp_coat.py --json benchmarks/results/coat.json
    python benchmarks/exp_coat.py --part positions --seeds 0 --lrs 1.5e-3   # a slice
    python benchmarks/exp_coat.py --merge positions.json parallel.json --json coat.json
    python benchmarks/exp_coat.py --canary                                 # the canary slice

CoaT (Xu et al., "Co-Scale Conv-Attentional Image Transformers", ICCV 2021) gives factorized
attention two position encodings: the convolutional relative position encoding inside the
attention (CRPE, ``q ⊙ dwconv(v)``) and the convolutional position encoding before each block
(CPE, ``x + dwconv(x)``).  Its ablation trains with each on and off and finds both useful.

**positions.**  ``coat_lite_digits`` at ``img_size=16``, patch 1: its four grids are 16², 8², 4²
and 2² tokens, and its head reads the mean of the last grid's four tokens (``global_pool="avg"``,
which timm's CoaT offers too; from the class token, whose attention starts near zero, models
trained from scratch at this size sat at chance for hundreds of steps in trial runs, whatever
their encodings).  Without CRPE and CPE nothing in the model knows *which* 8 × 8 quarter of the
canvas a token comes from: the stride-2 patch embeddings see where things are inside a quarter,
attention is blind to order, so the model gives the same output when the quarters are swapped
(notebook 07 checks it).  The task (``vit_scratch.data.clutter.leftmost_digit``): two full-contrast digits of
different classes on a 16 × 16 canvas, labelled by the one further left (its left edge at
least 4 pixels left of the other's).  "Without" an encoding is exact: its convolution weights
and biases are set to zero and frozen, so ``q ⊙ conv(v)`` is 0 and ``x + conv(x)`` is ``x``,
the same function as a block that never had it.

* **Primary contrast** (declared before the runs): CRPE + CPE minus neither, test accuracy on
  the left-digit task, paired by seed (``stats.paired``: a t interval with seeds − 1 degrees of
  freedom).  Secondary, Holm-corrected: what each encoding adds beside the other, and each
  alone against neither.
* **Positive control**: the test canvases whose digits sit in different halves (side by side),
  where swapping the halves swaps the label: there a model without either encoding is right on
  at most half of them, whatever it learns, so a design that works must show a large gap.
* **Negative control**: the same canvases with the other digit at half contrast
  (``distractor_contrast=0.5``), so that brightness tells the label and position is not needed:
  CRPE + CPE against neither should be level.  It shows that the primary gap comes from
  position, not from the parameters that switching off freezes.

Each seed draws its own pool split (``split_seed``) and its own canvases: 4,000 for training and
1,000 for validation from the pool's training digits, 2,000 for the test from its test digits.
Training: ``experiment.fit`` (AdamW, weight decay 0.05 on the matrices and kernels, a 10%
linear warm-up then cosine decay, label smoothing 0.1, batches of 64, no augmentation: the
data is generated, so it is simply more canvases), the same number of steps for every variant;
the epoch with the best validation accuracy is tested once.  Initialisation: the library's,
which is timm's and the CoaT reference's (trunc-normal 0.02 Linears, PyTorch's default
convolutions), for every variant.  Tuning: each variant's learning rate is the best of
``LR_GRID`` on seed 0's validation canvases of the left-digit task, the same grid for all; the
negative control uses the rates chosen there.

**parallel** (exploratory: no positive control, so a null here only bounds the difference).
``coat_digits`` (two parallel blocks) on scikit-learn's digits with the reference's feature
interpolation between scales against this library's direct cross-layer attention
(``parallel_mode="cross_attention"``, notebook 08), with the trainer's recipe and augmentation
for the digits recipe's 12 epochs (AdamW at 1.5e-3, weight decay 0.3, two epochs of warm-up,
label smoothing 0.1, the random affine of ``vit_scratch.data.random_affine`` at the trainer's
defaults), each seed on its own split (20% test, a tenth of the rest for validation).

One thread per process.  ``--canary`` runs the cheapest slice of the same code (a few steps on
a few canvases, one seed) and prints its numbers; the results file records them
(``tests/test_canaries.py`` re-runs it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402
import stats  # noqa: E402

VARIANTS = {"both": (True, True), "no_crpe": (False, True), "no_cpe": (True, False),
            "none": (False, False)}  # (CRPE, CPE)
NAMES = {"both": "CRPE + CPE", "no_crpe": "CPE only", "no_cpe": "CRPE only", "none": "neither"}
WORLD = dict(canvas_size=16, min_shift=4, noise=0.1)
TASKS = {"left": dict(distractor_contrast=1.0),       # only position tells the label
         "brighter": dict(distractor_contrast=0.5)}   # the negative control: brightness tells it too
CONTROL_VARIANTS = ("both", "none")
SIZES = dict(train=4000, val=1000, test=2000)
VAL_SEED = 1000  # the validation canvases of seed s are drawn with seed VAL_SEED + s
POSITIONS = dict(model="coat_lite_digits", model_args={"img_size": 16, "global_pool": "avg"},
                 steps=400, batch_size=64, weight_decay=0.05, label_smoothing=0.1, warmup=0.1)
LR_GRID = (7.5e-4, 1.5e-3)
PRIMARY = {"task": "left", "a": "both", "b": "none"}
SECONDARY = {"CRPE beside CPE": ("both", "no_crpe"), "CPE beside CRPE": ("both", "no_cpe"),
             "CPE alone": ("no_crpe", "none"), "CRPE alone": ("no_cpe", "none")}

PARALLEL = dict(model="coat_digits", epochs=12, modes=("interpolation", "cross_attention"))
RECIPE = dict(batch_size=32, lr=1.5e-3, weight_decay=0.3, label_smoothing=0.1)
AUGMENT = dict(rotate=8.0, translate=0.05, scale=0.08)  # the trainer's defaults

#: The canary: the same code on a few canvases for a few steps, one seed.
CANARY = dict(sizes=dict(train=256, val=128, test=256), steps=12, lr=1.5e-3, parallel_steps=6)


def switch_off(model, crpe: bool = True, cpe: bool = True) -> int:
    """Set the CRPE (``crpe=False``) and/or CPE (``cpe=False``) convolutions of a CoaT to zero
    and freeze them; returns how many parameters that takes out of training."""
    import torch

    frozen = 0
    for name, module in model.named_children():
        if (name.startswith("crpe") and not crpe) or (name.startswith("cpe") and not cpe):
            for p in module.parameters():
                with torch.no_grad():
                    p.zero_()
                p.requires_grad_(False)
                frozen += p.numel()
    return frozen


def canvases(task: str, n: int, pool: str, seed: int, split_seed: int):
    """``n`` canvases of ``task`` (a :class:`~vit_scratch.data.clutter.Clutter`)."""
    from vit_scratch.data.clutter import leftmost_digit

    return leftmost_digit(n, pool=pool, seed=seed, split_seed=split_seed, **WORLD, **TASKS[task])


def position_data(task: str, seed: int, sizes: dict = SIZES):
    """Seed ``seed``'s (train, val, test) canvases of ``task``, on its own pool split."""
    return (canvases(task, sizes["train"], "train", seed, seed),
            canvases(task, sizes["val"], "train", VAL_SEED + seed, seed),
            canvases(task, sizes["test"], "test", seed, seed))


def side_by_side(world):
    """(N,) bool: the canvases whose digits sit in different halves (left edges 8 pixels or
    more apart), where swapping the halves swaps the label."""
    import numpy as np

    return np.abs(world.distractor_boxes[:, 0, 1] - world.boxes[:, 1]) >= 8


def tensors(world):
    import torch

    return torch.from_numpy(world.images), torch.from_numpy(world.labels)


def run_positions(task: str, variant: str, seed: int, lr: float, log=print, steps=None,
                  sizes: dict = SIZES) -> dict:
    """Train ``coat_lite_digits`` at 16 × 16 with ``variant``'s encodings on ``task``."""
    import torch

    import vit_scratch

    train, val, test = position_data(task, seed, sizes)
    torch.manual_seed(seed)
    model = vit_scratch.create_model(POSITIONS["model"], **POSITIONS["model_args"])
    crpe, cpe = VARIANTS[variant]
    frozen = switch_off(model, crpe, cpe)
    recipe = {k: POSITIONS[k] for k in ("batch_size", "weight_decay", "label_smoothing", "warmup")}
    result = experiment.fit(model, tensors(train), tensors(val), tensors(test),
                            steps=steps or POSITIONS["steps"], lr=lr, seed=seed, **recipe)
    model.eval()
    x, y = tensors(test)
    with torch.no_grad():
        right = (model(x).argmax(-1) == y).numpy()
    apart = side_by_side(test)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log(f"{experiment.stamp()} {task} {variant} lr {lr:g} seed {seed}: val "
        f"{result['val_accuracy']:.4f} test {result['test_accuracy']:.4f} (side by side "
        f"{right[apart].mean():.4f}, stacked {right[~apart].mean():.4f}; epoch "
        f"{result['selected_epoch']}/{result['epochs']}, {result['cpu_seconds']:.0f} CPU s)",
        flush=True)
    return {"task": task, "variant": variant, "crpe": crpe, "cpe": cpe, "seed": seed, "lr": lr,
            "trained_params": trained, "frozen_params": frozen,
            **{k: result[k] for k in ("val_accuracy", "test_accuracy", "test_loss", "epochs",
                                      "steps", "selected_epoch", "final_train_loss",
                                      "cpu_seconds")},
            "test_accuracy_side_by_side": float(right[apart].mean()),
            "test_accuracy_stacked": float(right[~apart].mean()),
            "share_side_by_side": float(apart.mean()),
            "val_curve": [h["val_accuracy"] for h in result["history"]],
            "train_loss_curve": [h["train_loss"] for h in result["history"]]}


def digits(model, seed: int):
    """The trainer's digits split ``seed``, shaped for ``model``: (train, val, test) tensors."""
    from vit_scratch.data import make_datasets

    train, val, test = make_datasets("digits", model, 0.2, seed, val_fraction=0.1)
    return train.tensors, val.tensors, test.tensors


def augment(images, gen):
    from vit_scratch.data import random_affine

    return random_affine(images, AUGMENT["rotate"], AUGMENT["translate"], AUGMENT["scale"], gen)


def run_parallel(mode: str, seed: int, log=print, steps=None) -> dict:
    """Train ``coat_digits`` with ``parallel_mode=mode`` on the digits split ``seed``."""
    import torch

    import vit_scratch

    torch.manual_seed(seed)
    model = vit_scratch.create_model(PARALLEL["model"], parallel_mode=mode)
    epochs = PARALLEL["epochs"]
    result = experiment.fit(model, *digits(model, seed), epochs=epochs, steps=steps,
                            warmup=min(2.0, epochs / 10) / epochs, seed=seed, augment=augment,
                            **RECIPE)
    log(f"{experiment.stamp()} {PARALLEL['model']} {mode} seed {seed}: val "
        f"{result['val_accuracy']:.4f} test {result['test_accuracy']:.4f} "
        f"({result['cpu_seconds']:.0f} CPU s)", flush=True)
    return {"parallel_mode": mode, "seed": seed,
            "trained_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
            **{k: result[k] for k in ("val_accuracy", "test_accuracy", "test_loss",
                                      "selected_epoch", "final_train_loss", "cpu_seconds")},
            "val_curve": [h["val_accuracy"] for h in result["history"]]}


# --- what the runs say ----------------------------------------------------------------------------

def summarise(runs: list[dict], key: str) -> dict:
    out = {}
    for name in dict.fromkeys(r[key] for r in runs):
        mine = [r for r in runs if r[key] == name]
        out[name] = {m: experiment.summary([r[m] for r in mine]) for m in
                     ("val_accuracy", "test_accuracy", "test_loss", "final_train_loss",
                      "test_accuracy_side_by_side", "test_accuracy_stacked") if m in mine[0]}
        out[name]["trained_params"] = mine[0]["trained_params"]
        out[name]["selected_epoch"] = experiment.summary([r["selected_epoch"] for r in mine])
        if "lr" in mine[0]:
            out[name]["lr"] = mine[0]["lr"]
    return out


def _first_up(text: str) -> str:
    return text[:1].upper() + text[1:]


def contrast(runs: list[dict], a: str, b: str, metric: str = "test_accuracy", key: str = "variant",
             **where) -> dict:
    """``a − b`` of ``metric`` paired by seed: its interval, the smallest effect the design
    detects, and the sentence the interval allows."""
    iv = stats.paired(stats.by_seed(runs, metric, **{key: a}, **where),
                      stats.by_seed(runs, metric, **{key: b}, **where))
    names = {**NAMES, "interpolation": "feature interpolation",
             "cross_attention": "cross-layer attention"}
    return {"a": a, "b": b, "metric": metric, "interval": iv.to_dict(),
            "detectable_effect": stats.detectable_effect(iv.sd, iv.n) if iv.sd > 0 else 0.0,
            "verdict": _first_up(stats.verdict(iv, names.get(a, a), names.get(b, b)))}


def position_contrasts(runs: list[dict]) -> dict:
    main = [r for r in runs if r["task"] == PRIMARY["task"]]
    variants = {r["variant"] for r in main}
    out = {"primary": contrast(main, PRIMARY["a"], PRIMARY["b"])}
    out["positive_control"] = contrast(main, PRIMARY["a"], PRIMARY["b"],
                                       "test_accuracy_side_by_side")
    out["positive_control"]["b_at_most"] = 0.5  # what neither can reach on those canvases
    out["stacked"] = contrast(main, PRIMARY["a"], PRIMARY["b"], "test_accuracy_stacked")
    secondary = {name: contrast(main, a, b) for name, (a, b) in SECONDARY.items()
                 if {a, b} <= variants}
    rejected = stats.holm({k: v["interval"]["p_value"] for k, v in secondary.items()})
    for name, c in secondary.items():
        c["holm_rejected"] = rejected[name]
    out["secondary"] = secondary
    control = [r for r in runs if r["task"] == "brighter"]
    if control:
        out["negative_control"] = contrast(control, *CONTROL_VARIANTS)
    return out


def tune(seed: int, variants, lrs, log=print, steps=None, sizes=SIZES) -> tuple[dict, list]:
    """Each variant's learning rate: the best validation accuracy of ``lrs`` on seed ``seed``'s
    left-digit task (ties: the smaller rate).  Returns ({variant: lr}, the runs)."""
    runs = [run_positions(PRIMARY["task"], v, seed, lr, log, steps, sizes)
            for v in variants for lr in lrs]
    chosen = {}
    for v in variants:
        mine = [r for r in runs if r["variant"] == v]
        chosen[v] = max(mine, key=lambda r: (r["val_accuracy"], -r["lr"]))["lr"]
    return chosen, runs


def run_positions_part(seeds, variants, lrs, log=print, steps=None, sizes=SIZES, chosen=None,
                       tasks=tuple(TASKS)) -> dict:
    """The positions experiment: the grid on seed ``seeds[0]``, then every seed and task.  With
    ``chosen`` ({variant: lr}, picked from the grid in an earlier run of this code) the grid is
    not run again: every seed trains at the chosen rates."""
    if chosen:
        grid, runs = [], []
        first = seeds
    else:
        chosen, grid = tune(seeds[0], variants, lrs, log, steps, sizes)
        runs = [r for r in grid if r["lr"] == chosen[r["variant"]]]
        first = seeds[1:]
    runs += [run_positions("left", v, s, chosen[v], log, steps, sizes)
             for s in first for v in variants]
    if "brighter" in tasks:
        runs += [run_positions("brighter", v, s, chosen[v], log, steps, sizes)
                 for s in seeds for v in CONTROL_VARIANTS if v in variants]
    out = {"chosen_lr": chosen,
           "lr_grid": [{k: r[k] for k in ("variant", "lr", "val_accuracy", "test_accuracy",
                                          "selected_epoch")} for r in grid],
           "summary": {task: summarise([r for r in runs if r["task"] == task], "variant")
                       for task in TASKS if any(r["task"] == task for r in runs)},
           "runs": runs}
    if len(seeds) > 1:
        out["contrasts"] = position_contrasts(runs)
    return out


def run_parallel_part(seeds, log=print, steps=None) -> dict:
    runs = [run_parallel(m, s, log, steps) for s in seeds for m in PARALLEL["modes"]]
    out = {"summary": summarise(runs, "parallel_mode"), "runs": runs}
    if len(seeds) > 1:
        out["contrast"] = contrast(runs, *PARALLEL["modes"], key="parallel_mode")
    return out


def canary(log=lambda *a, **k: None) -> dict:
    """The canary slice: both encodings and neither on a few left-digit canvases for a few
    steps, and the parallel model for a few steps, seed 0; the numbers printed."""
    numbers = {}
    for v in CONTROL_VARIANTS:
        r = run_positions("left", v, 0, CANARY["lr"], log, CANARY["steps"], CANARY["sizes"])
        numbers[f"positions_{v}"] = {k: r[k] for k in ("val_accuracy", "test_accuracy",
                                                       "final_train_loss")}
    r = run_parallel(PARALLEL["modes"][0], 0, log, CANARY["parallel_steps"])
    numbers["parallel"] = {k: r[k] for k in ("val_accuracy", "test_accuracy",
                                             "final_train_loss")}
    return experiment.print_canary(numbers)


def merge(paths, out=None) -> dict:
    """One results file from the two parts run in parallel processes (``--part positions`` and
    ``--part parallel``): each part's runs, their summaries and contrasts computed again, the CPU
    seconds added, ``written_by`` listing both commands; the parts' canaries must agree."""
    import json

    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    data = dict(parts[0])
    data["written_by"] = " && ".join(part["written_by"] for part in parts)
    commits = sorted({part["commit"] for part in parts})
    data["commit"] = commits[0] if len(commits) == 1 else commits
    for part in parts:
        for key in ("positions", "positions_cpu_seconds", "parallel", "parallel_cpu_seconds"):
            if key in part:
                data[key] = part[key]
    if any(part["canary"] != parts[0]["canary"] for part in parts):
        raise ValueError("the parts' canaries differ: they ran different code")
    if "positions" in data:
        runs = data["positions"]["runs"]
        data["positions"] = dict(data["positions"], summary={
            task: summarise([r for r in runs if r["task"] == task], "variant")
            for task in TASKS if any(r["task"] == task for r in runs)},
            contrasts=position_contrasts(runs))
    if "parallel" in data:
        runs = data["parallel"]["runs"]
        data["parallel"] = dict(data["parallel"], summary=summarise(runs, "parallel_mode"),
                                contrast=contrast(runs, *PARALLEL["modes"], key="parallel_mode"))
    data["cpu_seconds"] = sum(part["cpu_seconds"] for part in parts)
    if out:
        experiment.write(out, data)
    return data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["positions", "parallel", "both"], default="both")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--lrs", type=float, nargs="+", default=list(LR_GRID),
                        help="the learning-rate grid (tried on the first seed)")
    parser.add_argument("--chosen", nargs="+", metavar="VARIANT=LR",
                        help="skip the grid: each variant's rate, chosen from the grid in an "
                             "earlier run of this code (say where in --lr-note)")
    parser.add_argument("--lr-note", help="where the --chosen rates come from (recorded)")
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS),
                        help="left: the experiment; brighter: its negative control")
    parser.add_argument("--canary", action="store_true",
                        help="run the canary slice only and print its numbers")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="instead of training: put the parts of these results files (run in "
                             "parallel processes) into one")
    parser.add_argument("--notes", help="recorded in the file: what this run of the design "
                                        "leaves out, and why")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.json)
    experiment.one_thread()
    if args.canary:
        return canary()
    clock = experiment.CpuClock()
    data = experiment.header("coat", argv, {
        "seeds": args.seeds, "world": WORLD, "tasks": TASKS, "sizes": SIZES,
        "val_seed": VAL_SEED, "positions": {**POSITIONS, "variants": {
            v: dict(zip(("crpe", "cpe"), VARIANTS[v])) for v in args.variants}},
        "lr_grid": args.lrs, "primary": PRIMARY, "secondary": SECONDARY,
        "control_variants": list(CONTROL_VARIANTS),
        "parallel": {**PARALLEL, "modes": list(PARALLEL["modes"]), "recipe": RECIPE,
                     "augment": AUGMENT}})
    if args.notes:
        data["notes"] = args.notes
    chosen = (experiment.chosen_rates(args.chosen, args.variants, "--chosen") if args.chosen
              else None)
    if args.part in ("positions", "both"):
        data["positions"] = run_positions_part(args.seeds, args.variants, args.lrs,
                                               chosen=chosen, tasks=args.tasks)
        if chosen:
            data["positions"]["lr_choice"] = args.lr_note
        data["positions_cpu_seconds"] = clock.seconds()
    if args.part in ("parallel", "both"):
        start = clock.seconds()
        data["parallel"] = run_parallel_part(args.seeds)
        data["parallel_cpu_seconds"] = clock.seconds() - start
    data["canary"] = experiment.canary_record("exp_coat.py", canary())
    return experiment.finish(data, clock, args.json)


if __name__ == "__main__":
    main()
