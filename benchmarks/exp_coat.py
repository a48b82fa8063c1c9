"""Experiment (CoaT, notebooks 07 and 08): the two convolutional position encodings on and off,
and the two ways the parallel blocks exchange scales.

    python benchmarks/exp_coat.py --json benchmarks/results/coat.json
    python benchmarks/exp_coat.py --part positions --variants both none --seeds 0   # a slice

CoaT (Xu et al., "Co-Scale Conv-Attentional Image Transformers", ICCV 2021) gives factorized
attention two position encodings: the convolutional relative position encoding inside the
attention (CRPE, ``q ⊙ dwconv(v)``) and the convolutional position encoding before each block
(CPE, ``x + dwconv(x)``).  Its ablation trains with each on and off.  In miniature, over seeds:

1. **positions**: ``coat_lite_digits`` on scikit-learn's digits with both encodings, without
   CRPE, without CPE and without either.  "Without" is exact: the encoding's convolution weights
   and biases are set to zero and frozen, so ``q ⊙ conv(v)`` is 0 and ``x + conv(x)`` is ``x``
   -- the same function as a block that never had it, and no library switch is needed.
2. **parallel**: ``coat_digits`` (two parallel blocks) with the reference's feature
   interpolation between scales against this library's direct cross-layer attention
   (``parallel_mode="cross_attention"``, notebook 08), trained for the digits recipe's 12 epochs.

Both train with the trainer's recipe and augmentation (``experiment.fit``: AdamW at 1.5e-3,
weight decay 0.3 on the matrices, two epochs of warm-up then cosine decay, label smoothing 0.1,
the random affine of ``vit_scratch.data.random_affine`` at the trainer's defaults), on the
trainer's split (20% test, 10% of the rest for validation; the best validation epoch is
tested).  One thread per process.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402

VARIANTS = {"both": (True, True), "no_crpe": (False, True), "no_cpe": (True, False),
            "none": (False, False)}  # (CRPE, CPE)
POSITIONS = dict(model="coat_lite_digits", epochs=16)
PARALLEL = dict(model="coat_digits", epochs=12, modes=("interpolation", "cross_attention"))
RECIPE = dict(batch_size=32, lr=1.5e-3, weight_decay=0.3, label_smoothing=0.1)
AUGMENT = dict(rotate=8.0, translate=0.05, scale=0.08)  # the trainer's defaults


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


def digits(model, seed: int = 0):
    """The trainer's digits split, shaped for ``model``: (train, val, test) tensors."""
    from vit_scratch.data import make_datasets

    train, val, test = make_datasets("digits", model, 0.2, seed, val_fraction=0.1)
    return train.tensors, val.tensors, test.tensors


def augment(images, gen):
    from vit_scratch.data import random_affine

    return random_affine(images, AUGMENT["rotate"], AUGMENT["translate"], AUGMENT["scale"], gen)


def run(model_name: str, epochs: int, seed: int, log=print, crpe=True, cpe=True, **model_args):
    import torch

    import vit_scratch

    torch.manual_seed(seed)
    model = vit_scratch.create_model(model_name, **model_args)
    frozen = switch_off(model, crpe, cpe)
    result = experiment.fit(model, *digits(model), epochs=epochs, warmup=min(2.0, epochs / 10)
                            / epochs, seed=seed, augment=augment, **RECIPE)
    trained = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()
                  if p.requires_grad)
    log(f"{experiment.stamp()} {model_name} {model_args or ''} crpe={crpe} cpe={cpe} seed {seed}: "
        f"val {result['val_accuracy']:.4f} test {result['test_accuracy']:.4f} "
        f"({result['cpu_seconds']:.0f} CPU s)", flush=True)
    return {"seed": seed, "trained_params": trained, "frozen_params": frozen,
            **{k: result[k] for k in ("val_accuracy", "test_accuracy", "test_loss",
                                      "selected_epoch", "final_train_loss", "cpu_seconds")},
            "val_curve": [h["val_accuracy"] for h in result["history"]]}


def run_positions(variant: str, seed: int, log=print) -> dict:
    crpe, cpe = VARIANTS[variant]
    return {"variant": variant, "crpe": crpe, "cpe": cpe,
            **run(POSITIONS["model"], POSITIONS["epochs"], seed, log, crpe=crpe, cpe=cpe)}


def run_parallel(mode: str, seed: int, log=print) -> dict:
    return {"parallel_mode": mode,
            **run(PARALLEL["model"], PARALLEL["epochs"], seed, log, parallel_mode=mode)}


def summarise(runs: list[dict], key: str) -> dict:
    out = {}
    for name in dict.fromkeys(r[key] for r in runs):
        mine = [r for r in runs if r[key] == name]
        out[name] = {m: experiment.summary([r[m] for r in mine])
                     for m in ("val_accuracy", "test_accuracy", "test_loss", "final_train_loss")}
        out[name]["trained_params"] = mine[0]["trained_params"]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["positions", "parallel", "both"], default="both")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    experiment.one_thread()
    clock = experiment.CpuClock()
    data = experiment.header("coat", argv, {
        "seeds": args.seeds, "data": "digits (8×8), the trainer's split and augmentation",
        "recipe": RECIPE, "augment": AUGMENT,
        "positions": {**POSITIONS, "variants": {v: dict(zip(("crpe", "cpe"), VARIANTS[v]))
                                                for v in args.variants}},
        "parallel": {**PARALLEL, "modes": list(PARALLEL["modes"])}})
    if args.part in ("positions", "both"):
        runs = [run_positions(v, s) for s in args.seeds for v in args.variants]
        data["positions"] = {"summary": summarise(runs, "variant"), "runs": runs}
        data["positions_cpu_seconds"] = clock.seconds()
    if args.part in ("parallel", "both"):
        start = clock.seconds()
        runs = [run_parallel(m, s) for s in args.seeds for m in PARALLEL["modes"]]
        data["parallel"] = {"summary": summarise(runs, "parallel_mode"), "runs": runs}
        data["parallel_cpu_seconds"] = clock.seconds() - start
    return experiment.finish(data, clock, args.json)


if __name__ == "__main__":
    main()
