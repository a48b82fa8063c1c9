"""Experiment (CaiT, notebooks 04 and 05): the residual forms at depth, and where the class
token joins.

    python benchmarks/exp_cait.py --json benchmarks/results/cait.json
    python benchmarks/exp_cait.py --part depth --depths 6 --seeds 0 --forms prenorm layerscale

CaiT (Touvron et al., "Going deeper with Image Transformers", ICCV 2021) makes two claims, each
measured here in miniature over seeds:

1. **Depth** (its Table 1 and Fig. 3): as a ViT gets deeper, the way each block's branch is added
   to the residual stream decides whether it keeps improving; LayerScale (a learned gain per
   channel, started at a small ε) does best.  Here: notebook 04's ``DeepNarrow`` (scikit-learn's
   8×8 digits in 2×2 patches, width 32, 2 heads) at depths 3 to 24, with each of the four
   residual forms of notebook 04 -- pre-norm, ReZero (scalar α, no norm), the scalar with the
   norm, LayerScale -- trained with a warm-up for the same number of steps; we report the
   validation accuracy of the best epoch, its test accuracy and the training loss reached.
2. **The class token joins late** (its Table 3): CaiT keeps the class token out of the
   self-attention blocks and lets it read the patches in two class-attention blocks at the end.
   Here: ``cait_digits`` at 16×16 in 4×4 patches on digits in clutter, four self-attention
   blocks and two class-attention blocks (``late``), against the same six self-attention blocks
   with the class token among the patch tokens from the first block on (``from_start``, as in
   ViT; the head reads it after the last block).

Both train with the trainer's recipe (``experiment.fit``); one thread per process.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402

FORMS = ("prenorm", "rezero", "prenorm_scalar", "layerscale")  # notebook 04's (a)-(d)
DEPTHS = [3, 6, 12, 24]
DEPTH_RECIPE = dict(steps=400, batch_size=64, lr=1e-3, weight_decay=0.05, warmup=0.1)
CLASS_TOKEN_WORLD = dict(canvas_size=16, scale=1, clutter=2, noise=0.1, rotate=10.0)
CLASS_TOKEN_SIZES = dict(n_train=4000, n_val=1000, n_test=2000)
CLASS_TOKEN_MODEL = dict(img_size=16, patch_size=4, depth=4, depth_token_only=2)
CLASS_TOKEN_RECIPE = dict(epochs=15, batch_size=64, lr=1.5e-3, weight_decay=0.05, warmup=0.1)


# --- 1. depth -----------------------------------------------------------------------------------

def deep_narrow():
    """Notebook 04's ``DeepNarrow`` class (built here so that importing this file needs no
    torch)."""
    import torch
    from torch import nn

    from vit_scratch.torch_nn.layerscale import ResidualBlock, layerscale_init_value

    class DeepNarrow(nn.Module):
        """A deep, narrow ViT for 8×8 digits: 2×2 patches (16 tokens) + a class token, `depth`
        residual blocks of one form, a final LayerNorm and a linear head.  (B, 1, 8, 8) -> (B, 10)"""

        def __init__(self, residual, depth=24, dim=32, heads=2):
            super().__init__()
            self.embed = nn.Linear(4, dim)  # one 2×2 patch -> a token
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(torch.zeros(1, 17, dim))
            eps = layerscale_init_value(depth)
            self.blocks = nn.Sequential(*[ResidualBlock(dim, heads, residual, mlp_ratio=2.0,
                                                        init_values=eps) for _ in range(depth)])
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.head = nn.Linear(dim, 10)
            for m in self.modules():  # ViT's initialisation
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02, a=-0.04, b=0.04)
                    nn.init.zeros_(m.bias)
            nn.init.trunc_normal_(self.pos_embed, std=0.02, a=-0.04, b=0.04)

        def no_weight_decay(self):
            return {"cls_token", "pos_embed"}

        def tokens(self, images):  # (B, 1, 8, 8) -> (B, 17, dim)
            patches = images.unfold(2, 2, 2).unfold(3, 2, 2).reshape(len(images), 16, 4)
            x = self.embed(patches)  # (B, 16, dim)
            return torch.cat([self.cls_token.expand(len(images), -1, -1), x], dim=1) + self.pos_embed

        def forward(self, images):
            return self.head(self.norm(self.blocks(self.tokens(images)))[:, 0])

    return DeepNarrow


def digits_splits(seed: int = 0):
    """scikit-learn's digits: (train, val, test) tensors, the trainer's split (20% test, then 10%
    of the rest for validation, both stratified and fixed by ``seed``)."""
    import torch

    from vit_scratch.data import load_digits, validation_indices

    x_train, y_train, x_test, y_test = load_digits(0.2, seed)
    tr, va = validation_indices(y_train, 0.1, seed)
    t = torch.from_numpy
    return ((t(x_train[tr]), t(y_train[tr])), (t(x_train[va]), t(y_train[va])),
            (t(x_test), t(y_test)))


def run_depth(form: str, depth: int, seed: int, splits=None, log=print, **recipe) -> dict:
    """Train ``DeepNarrow(form, depth)`` with seed ``seed``; its numbers."""
    import torch

    splits = splits or digits_splits()
    torch.manual_seed(seed)
    model = deep_narrow()(form, depth)
    result = experiment.fit(model, *splits, seed=seed, **{**DEPTH_RECIPE, **recipe})
    losses = [h["train_loss"] for h in result["history"]]
    log(f"{experiment.stamp()} {form:15s} depth {depth:2d} seed {seed}: val "
        f"{result['val_accuracy']:.4f} test {result['test_accuracy']:.4f} loss {losses[-1]:.3f} "
        f"({result['cpu_seconds']:.0f} CPU s)", flush=True)
    return {"form": form, "depth": depth, "seed": seed,
            **{k: result[k] for k in ("val_accuracy", "test_accuracy", "selected_epoch", "steps",
                                      "final_train_loss", "cpu_seconds")},
            "train_loss": losses, "val_curve": [h["val_accuracy"] for h in result["history"]]}


# --- 2. where the class token joins -----------------------------------------------------------

def class_token_model(placement: str):
    """``cait_digits`` with CLASS_TOKEN_MODEL: ``"late"`` is CaiT itself; ``"from_start"`` runs
    the class token through ``depth + depth_token_only`` self-attention blocks with the patches
    (and has no class-attention block)."""
    import torch

    import vit_scratch

    cfg = dict(CLASS_TOKEN_MODEL)
    if placement == "late":
        return vit_scratch.create_model("cait_digits", **cfg)
    if placement != "from_start":
        raise ValueError(f"placement must be 'late' or 'from_start', got {placement!r}")
    cfg["depth"] += cfg["depth_token_only"]
    cfg["depth_token_only"] = 1  # the config needs one; it is removed below
    model = vit_scratch.create_model("cait_digits", **cfg)
    model.blocks_token_only = torch.nn.ModuleList()

    def forward_features(images):
        x = model.embed(images)  # (B, N, C)
        x = torch.cat([model.cls_token.expand(len(x), -1, -1), x], dim=1)  # (B, 1 + N, C)
        return model.norm(model.blocks(x))

    model.forward_features = forward_features
    return model


def class_token_data(seed: int):
    import torch

    from vit_scratch.data.clutter import digits_in_clutter

    sizes = CLASS_TOKEN_SIZES

    def part(n, pool, s):
        w = digits_in_clutter(n, pool=pool, seed=s, **CLASS_TOKEN_WORLD)
        return torch.from_numpy(w.images), torch.from_numpy(w.labels)

    return (part(sizes["n_train"], "train", 100 + seed), part(sizes["n_val"], "train", 200 + seed),
            part(sizes["n_test"], "test", 0))


def run_class_token(placement: str, seed: int, data=None, log=print) -> dict:
    import torch

    data = data or class_token_data(seed)
    torch.manual_seed(seed)
    model = class_token_model(placement)
    result = experiment.fit(model, *data, seed=seed, **CLASS_TOKEN_RECIPE)
    params = sum(p.numel() for p in model.parameters())
    log(f"{experiment.stamp()} class token {placement:10s} seed {seed}: val "
        f"{result['val_accuracy']:.4f} test {result['test_accuracy']:.4f} "
        f"({result['cpu_seconds']:.0f} CPU s, {params:,} parameters)", flush=True)
    return {"placement": placement, "seed": seed, "params": params,
            **{k: result[k] for k in ("val_accuracy", "test_accuracy", "selected_epoch",
                                      "final_train_loss", "cpu_seconds")},
            "val_curve": [h["val_accuracy"] for h in result["history"]]}


# --- the summary ------------------------------------------------------------------------------

def summarise_depth(runs: list[dict]) -> dict:
    """{form: {depth: {metric: summary}}}."""
    out = {}
    for form in dict.fromkeys(r["form"] for r in runs):
        out[form] = {}
        for depth in sorted({r["depth"] for r in runs if r["form"] == form}):
            mine = [r for r in runs if r["form"] == form and r["depth"] == depth]
            out[form][str(depth)] = {m: experiment.summary([r[m] for r in mine])
                                     for m in ("val_accuracy", "test_accuracy",
                                               "final_train_loss")}
    return out


def summarise_class_token(runs: list[dict]) -> dict:
    out = {}
    for placement in dict.fromkeys(r["placement"] for r in runs):
        mine = [r for r in runs if r["placement"] == placement]
        out[placement] = {m: experiment.summary([r[m] for r in mine])
                          for m in ("val_accuracy", "test_accuracy", "final_train_loss")}
        out[placement]["params"] = mine[0]["params"]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["depth", "class_token", "both"], default="both")
    parser.add_argument("--depths", type=int, nargs="+", default=DEPTHS)
    parser.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    experiment.one_thread()
    clock = experiment.CpuClock()
    data = experiment.header("cait", argv, {
        "seeds": args.seeds, "depth": {"depths": args.depths, "forms": args.forms,
                                        "model": "DeepNarrow(form, depth, dim=32, heads=2)",
                                        "data": "digits (8×8), the trainer's split",
                                        "recipe": DEPTH_RECIPE},
        "class_token": {"world": CLASS_TOKEN_WORLD, **CLASS_TOKEN_SIZES,
                        "model": {"name": "cait_digits", **CLASS_TOKEN_MODEL},
                        "recipe": CLASS_TOKEN_RECIPE}})
    if args.part in ("depth", "both"):
        splits = digits_splits()
        runs = [run_depth(form, depth, seed, splits) for seed in args.seeds
                for depth in args.depths for form in args.forms]
        data["depth"] = {"summary": summarise_depth(runs), "runs": runs}
        data["depth_cpu_seconds"] = clock.seconds()
    if args.part in ("class_token", "both"):
        start = clock.seconds()
        runs = []
        for seed in args.seeds:
            split = class_token_data(seed)
            runs += [run_class_token(p, seed, split) for p in ("late", "from_start")]
        data["class_token"] = {"summary": summarise_class_token(runs), "runs": runs}
        data["class_token_cpu_seconds"] = clock.seconds() - start
    return experiment.finish(data, clock, args.json)


if __name__ == "__main__":
    main()
