"""Experiment (notebook 09): does attention find the object?  The share of CaiT's class
attention and of ViT's attention rollout inside the true digit's box, on canvases with a
distractor, against chance, over seeds.

    python benchmarks/exp_attention_localisation.py --json benchmarks/results/attention_localisation.json
    python benchmarks/exp_attention_localisation.py --models cait --seeds 0 --epochs 2   # a slice

The papers draw attention maps over photographs and find them on the object (CaiT its class
attention, the ViT paper its attention rollout).  Here it is measured.  The data is the
trainer's ``digits_in_clutter`` (``vit_scratch.data.clutter.TRAINER_SET``): 24×24 canvases, each
with a digit (the label) and a digit of another class at half the contrast, both on the 4-pixel
patch grid, over faint noise; 8,000 training canvases (a tenth held out for validation) and
2,000 test canvases drawn from digits no training canvas shows.  The true digit's box covers 4
of the 36 patches: a map that ignored where the digit is would put 4/36 of its weight there.

* **CaiT** (``cait_digits``, 4×4 patches, two self-attention and two class-attention blocks):
  the class token's attention over the patches in each class-attention layer
  (``plotting.attention_grids``), averaged over the heads.
* **ViT** (``vit_digits``, 4×4 patches, four blocks): attention rollout of the class token
  through all blocks (``plotting.attention_rollout_grid``), and the class token's raw attention
  in the last block.

For each: the share of the weight inside the true digit's box and inside the distractor's box
(``plotting.share_inside_boxes``), against two baselines: chance (the box's share of the
patches) and *ink* (a map proportional to the pixels' brightness, which any "look at the bright
parts" rule would give), and against the same model untrained.  Each model is trained by the
trainer (``vit_scratch.train.train``, the recipe of ``tools/remake_weights.py``, which also
makes seed 0's checkpoints for notebooks 03 and 09), and must reach 95% test accuracy: the
file records whether it did.  One thread per process.

``--canary`` runs the cheapest slice of the same code: each recipe for one epoch on the first
256 training, 128 validation and 128 test canvases of split 0 (the trainer's loop, its recipe
and augmentation), then the shares on those test canvases; it prints the numbers, which the
results file records (``tests/test_canaries.py`` re-runs it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
MODELS = {"cait": "cait_clutter", "vit": "vit_clutter"}  # the recipes of tools/remake_weights.py
N_MEASURE = 1000  # test canvases the maps are measured on
TARGET = 0.95


def recipe_settings(kind: str, seed: int, epochs: int | None = None, out=None):
    """The recipe's ``TrainSettings`` with ``seed`` (and ``split_seed``) set."""
    import dataclasses

    import remake_weights

    settings = remake_weights.settings_of(MODELS[kind])
    changes = dict(seed=seed, split_seed=seed, out=out, progress="off")
    if epochs is not None:
        changes["epochs"] = epochs
    return dataclasses.replace(settings, **changes)


def test_world(model, seed: int, n: int = N_MEASURE):
    """The first ``n`` test canvases of the trainer's split ``seed``: images shaped for the
    model, labels, true boxes, distractor boxes."""
    import torch

    from vit_scratch.data.clutter import trainer_worlds
    from vit_scratch.data import to_model_input

    size = model.pretrained_cfg["input_size"][-1]
    world = trainer_worlds(size, 0.2, seed)[1]
    x = to_model_input(world.images[:n], model)
    return x, torch.from_numpy(world.labels[:n]), world.boxes[:n], world.distractor_boxes[:n, 0]


def maps(kind: str, model, x) -> dict:
    """{view: (B, gh, gw) maps}: what the model's attention says, per view."""
    from vit_scratch import plotting

    model.eval()
    if kind == "cait":
        grids = plotting.attention_grids(model, x)  # per class-attention layer (B, heads, gh, gw)
        out = {f"class attention, layer {i}": g.mean(1) for i, g in enumerate(grids)}  # from 0
        return out
    rollout = plotting.attention_rollout_grid(model, x)  # (B, gh, gw)
    last = plotting.attention_grids(model, x)[-1].mean(1)  # the class token's row, last block
    return {"rollout": rollout, "class token, last block": last}


def ink_map(x, grid) -> np.ndarray:
    """(B, gh, gw): each patch's share of the image's brightness -- the map of a rule that
    looks at the bright parts."""
    gh, gw = grid
    images = np.asarray(x[:, 0])
    B, H, W = images.shape
    return images.reshape(B, gh, H // gh, gw, W // gw).mean((2, 4))


def shares(grid_maps: np.ndarray, boxes, distractors, size) -> dict:
    """Mean share of each map's weight inside the true box and inside the distractor's box."""
    from vit_scratch import plotting

    inside = plotting.share_inside_boxes(grid_maps[:, None], boxes, size)[:, 0]
    other = plotting.share_inside_boxes(grid_maps[:, None], distractors, size)[:, 0]
    return {"true_box": float(inside.mean()), "distractor_box": float(other.mean()),
            "per_image_true_box": inside}


def measure(kind: str, model, untrained, seed: int) -> dict:
    """Accuracy and the shares of every view, the ink baseline and the untrained control."""
    import torch

    x, y, boxes, distractors = test_world(model, seed)
    size = tuple(model.pretrained_cfg["input_size"][-2:])
    with torch.no_grad():
        accuracy = float((model.eval()(x).argmax(-1) == y).float().mean())
    views = maps(kind, model, x)
    grid = next(iter(views.values())).shape[-2:]
    chance = float((boxes[:, 2] * boxes[:, 3]).mean() / (size[0] * size[1]))
    out = {"measured_on": len(y), "accuracy_measured": accuracy, "chance": chance,
           "ink": {k: v for k, v in shares(ink_map(x, grid), boxes, distractors, size).items()
                   if k != "per_image_true_box"},
           "views": {}, "untrained": {}}
    for view, grid_maps in views.items():
        s = shares(grid_maps, boxes, distractors, size)
        out["views"][view] = {"true_box": s["true_box"], "distractor_box": s["distractor_box"],
                              "ratio_to_chance": s["true_box"] / chance}
    for view, grid_maps in maps(kind, untrained, x).items():
        s = shares(grid_maps, boxes, distractors, size)
        out["untrained"][view] = {"true_box": s["true_box"], "distractor_box": s["distractor_box"]}
    return out


def run(kind: str, seed: int, epochs: int | None = None, keep: Path | None = None,
        log=print) -> dict:
    import torch

    import vit_scratch
    from vit_scratch.train import train

    out = None if keep is None else str(keep / f"{MODELS[kind]}_seed{seed}")
    settings = recipe_settings(kind, seed, epochs, out)
    result = train(settings, overwrite=True, log=lambda *_: None)
    torch.manual_seed(seed)  # the trainer's initialisation, untrained
    untrained = vit_scratch.create_model(settings.model, num_classes=10, **settings.model_kwargs)
    numbers = measure(kind, result["model"], untrained, seed)
    views = "  ".join(f"{v}: {100 * s['true_box']:.0f}% in the box, "
                      f"{100 * s['distractor_box']:.0f}% on the distractor"
                      for v, s in numbers["views"].items())
    log(f"{experiment.stamp()} {kind} seed {seed}: test {result['test_accuracy']:.4f}  {views}  "
        f"(chance {100 * numbers['chance']:.0f}%, ink {100 * numbers['ink']['true_box']:.0f}%; "
        f"{result['cpu_seconds']:.0f} CPU s)", flush=True)
    return {"model": kind, "seed": seed, "test_accuracy": result["test_accuracy"],
            "reached_target": result["test_accuracy"] >= TARGET,
            "selected_epoch": result["selected_epoch"], "epochs": settings.epochs,
            "train_cpu_seconds": result["cpu_seconds"], **numbers}


#: The canary: each recipe for one epoch on the first canvases of split 0.
CANARY = dict(train=256, val=128, test=128, epochs=1)


def canary() -> dict:
    """The canary slice (see the module's docstring): its numbers, printed."""
    from torch.utils.data import Subset

    import vit_scratch
    from vit_scratch.data import make_datasets
    from vit_scratch.train import train

    numbers = {}
    for kind in MODELS:
        settings = recipe_settings(kind, 0, CANARY["epochs"])
        model = vit_scratch.create_model(settings.model, num_classes=10, **settings.model_kwargs)
        splits = make_datasets(settings.data, model, settings.test_fraction, settings.split_seed,
                               val_fraction=settings.val_fraction)
        subsets = tuple(Subset(split, range(CANARY[part]))
                        for split, part in zip(splits, ("train", "val", "test")))
        for subset, split in zip(subsets, splits):
            subset.classes = split.classes
        result = train(settings, overwrite=True, log=lambda *_: None, datasets=subsets)
        x, _, boxes, distractors = test_world(result["model"], 0, CANARY["test"])  # the subset's
        size = tuple(result["model"].pretrained_cfg["input_size"][-2:])
        view, grid_maps = next(iter(maps(kind, result["model"], x).items()))
        numbers[kind] = {"test_accuracy": result["test_accuracy"],
                         "final_train_loss": result["history"][-1]["train_loss"],
                         "true_box": shares(grid_maps, boxes, distractors, size)["true_box"],
                         "view": view}
    return experiment.print_canary(numbers)


def summarise(runs: list[dict]) -> dict:
    out = {}
    for kind in dict.fromkeys(r["model"] for r in runs):
        mine = [r for r in runs if r["model"] == kind]
        entry = {"test_accuracy": experiment.summary([r["test_accuracy"] for r in mine]),
                 "all_reached_target": all(r["reached_target"] for r in mine),
                 "chance": experiment.summary([r["chance"] for r in mine]),
                 "ink_true_box": experiment.summary([r["ink"]["true_box"] for r in mine]),
                 "ink_distractor_box": experiment.summary([r["ink"]["distractor_box"]
                                                           for r in mine]),
                 "views": {}}
        for view in mine[0]["views"]:
            entry["views"][view] = {
                key: experiment.summary([r["views"][view][key] for r in mine])
                for key in ("true_box", "distractor_box", "ratio_to_chance")}
            entry["views"][view]["untrained_true_box"] = experiment.summary(
                [r["untrained"][view]["true_box"] for r in mine])
        out[kind] = entry
    return out


def merge(paths, out=None) -> dict:
    """One results file from several of the same experiment: their runs, summarised again; the
    CPU seconds add up; ``written_by`` lists every part's command."""
    import json

    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    runs = sorted((r for part in parts for r in part["runs"]), key=lambda r: (r["model"], r["seed"]))
    data = dict(parts[0])
    data["written_by"] = " && ".join(part["written_by"] for part in parts)
    commits = sorted({part["commit"] for part in parts})
    data["commit"] = commits[0] if len(commits) == 1 else commits
    data["settings"] = dict(parts[0]["settings"],
                            seeds=sorted({r["seed"] for r in runs}),
                            models={k: v for part in parts for k, v in part["settings"]["models"].items()})
    if any(part.get("canary") != parts[0].get("canary") for part in parts):
        raise ValueError("the parts' canaries differ: they ran different code")
    data.update(summary=summarise(runs), runs=runs,
                cpu_seconds=sum(part["cpu_seconds"] for part in parts))
    if out:
        experiment.write(out, data)
    return data


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=None,
                        help="train for this many epochs instead of the recipe's (a slice)")
    parser.add_argument("--keep-runs", type=Path, default=None, metavar="DIR",
                        help="keep each run's folder here (tools/remake_weights.py --from-run "
                             "copies seed 0's into notebooks/weights/)")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="instead of training: put the runs of these results files (the same "
                             "experiment, other seeds or models, run in parallel processes) into one")
    parser.add_argument("--canary", action="store_true",
                        help="run the canary slice only and print its numbers")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.json)
    experiment.one_thread()
    if args.canary:
        return canary()
    clock = experiment.CpuClock()
    import remake_weights

    data = experiment.header("attention_localisation", argv, {
        "seeds": args.seeds, "models": {k: remake_weights.command_lines(MODELS[k])[-1]
                                        for k in args.models},
        "epochs": args.epochs, "measured_on": N_MEASURE, "target_accuracy": TARGET})
    runs = [run(kind, seed, args.epochs, args.keep_runs) for seed in args.seeds
            for kind in args.models]
    for r in runs:
        r.pop("per_image_true_box", None)
    data.update(summary=summarise(runs), runs=runs)
    data["canary"] = experiment.canary_record("exp_attention_localisation.py", canary())
    return experiment.finish(data, clock, args.json)


if __name__ == "__main__":
    main()
