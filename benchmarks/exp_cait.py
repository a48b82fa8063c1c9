"""Experiments (CaiT, notebooks 04 and 05): the residual forms at depth, and where the class
token joins; each form and each placement on fair ground.

    python benchmarks/exp_cait.py --json benchmarks/results/cait.json
    python benchmarks/exp_cait.py --part depth --json benchmarks/results/cait.json    # one part
    python benchmarks/exp_cait.py --canary                                            # its slice

CaiT (Touvron et al., "Going deeper with Image Transformers", ICCV 2021,
https://arxiv.org/abs/2103.17239) makes two claims; each is one experiment here, in miniature,
over seeds, with a primary contrast declared below before it runs and a positive control (a
variant where the mechanism is known to matter, which shows that the design can see an effect).

1. **The residual forms at depth** (its Table 1 and Fig. 3).  Notebook 04's ``DeepNarrow``
   (scikit-learn's 8×8 digits in 2×2 patches, width 32, 2 heads) at depths 3, 12 and 24 with
   the residual forms of notebook 04: pre-norm, ReZero (α, no norm), the scalar α with the norm,
   LayerScale; all four at depth 3, all but the scalar α at 12 and 24 (``FORMS_AT_DEPTH``; cut to
   fit the CPU budget, see ``NOTES``).  Each form starts from its own paper's initialisation (:func:`initialise`):
   pre-norm, α with the norm and LayerScale as timm's ViT and CaiT (Linears N(0, 0.02²), the
   patch embedding at PyTorch's default, as timm leaves its convolution); ReZero as its authors'
   Transformer (Bachlechner et al., "ReZero is All You Need: Fast Convergence at Large Depth",
   2020, https://arxiv.org/abs/2003.04887: https://github.com/majumderb/rezero builds on
   PyTorch's ``nn.Transformer``, which initialises every weight matrix Xavier-uniform).  Each
   form gets, at depths 3 and 12, its learning rate from ``DEPTH_LR_GRID``, chosen on the first
   seed's validation split, then runs the other seeds at it; at depth 24, which has no grid of
   its own (``RATE_FROM_DEPTH``), every seed runs at the rate chosen at 12; each seed has its own split of the
   digits.  Every run gets the same 400 steps.

   *Primary contrast*: LayerScale − pre-norm, test accuracy at depth 12, paired by seed.  The
   other form-against-LayerScale contrasts are reported with Holm's correction; "ReZero above
   chance" is tested at each depth it runs (Holm over the depths).
   *Positive control*: LayerScale − pre-norm at depth 12 with tiny tokens (``init=
   "small_tokens"``: the patch embedding at N(0, 0.02²) too, notebook 04's section 3), where
   pre-norm's branches drown the residual stream at initialisation and LayerScale's do not.

2. **The class token joins late** (its Table 3).  ``cait_digits`` at 16×16 in 4×4 patches on
   digits in clutter: four self-attention blocks and two class-attention blocks (``late``, CaiT)
   against six self-attention blocks with the class token among the patches from the first
   (``from_start``, ViT's way).  Both routes to the image are equally open: the talking-heads
   maps ``proj_l`` and ``proj_w`` start at the identity (the heads then start as plain
   multi-head attention).  Each placement gets its learning rate from ``CLASS_TOKEN_LR_GRID``
   on the first seed's validation canvases; three seeds, each with its own canvases.

   *Primary contrast*: late − from_start, test accuracy, paired by seed.
   *Positive control*: ``from_start`` at the identity against ``from_start`` with timm's
   talking-heads initialisation (N(0, 0.02²) maps, which shrink every attention output; in
   ``from_start`` they are the class token's only route to the image), at from_start's rate.

Both train with the trainer's recipe in ``experiment.fit`` (AdamW, weight decay on the matrices,
warm-up then cosine decay, label smoothing 0.1; no augmentation), one thread per process; the
tables give the test accuracy of the epoch selected on the validation split.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402
import stats  # noqa: E402

FORMS = ("prenorm", "rezero", "prenorm_scalar", "layerscale")  # notebook 04's (a)-(d)
#: Each residual form's own paper's initialisation (:func:`initialise`).
INIT_OF_FORM = {"prenorm": "timm", "rezero": "xavier", "prenorm_scalar": "timm",
                "layerscale": "timm"}
INITS = ("timm", "xavier", "small_tokens")
DEPTHS = [3, 12, 24]
SEEDS = [0, 1, 2]
DEPTH_RECIPE = dict(steps=400, batch_size=64, weight_decay=0.05, warmup=0.1)
#: The learning rates each form tries at each depth on the first seed (a rate at which one form
#: trains best can leave another at chance, and a deep stack's best rate can starve a shallow one).
DEPTH_LR_GRID = (1e-3, 1e-2)
#: The forms run at each depth (all of :data:`FORMS` where a depth is not listed), cut to fit the
#: CPU budget: at 12 and 24, the primary pair and ReZero.
FORMS_AT_DEPTH = {12: ("prenorm", "rezero", "layerscale"), 24: ("prenorm", "rezero", "layerscale")}
#: Depths with no grid of their own, to fit the CPU budget: each form runs there, on every seed, at
#: the rate chosen for it at the depth named.
RATE_FROM_DEPTH = {24: 12}
DEPTH_PRIMARY = dict(a="layerscale", b="prenorm", depth=12)
DEPTH_CONTROL = dict(init="small_tokens", forms=("layerscale", "prenorm"), depth=12)
CHANCE = 0.1

PLACEMENTS = ("late", "from_start")
TALKING_HEADS = ("identity", "timm")
CLASS_TOKEN_WORLD = dict(canvas_size=16, scale=1, clutter=2, noise=0.1, rotate=10.0)
CLASS_TOKEN_SIZES = dict(n_train=2000, n_val=1000, n_test=2000)
CLASS_TOKEN_MODEL = dict(img_size=16, patch_size=4, depth=4, depth_token_only=2)
CLASS_TOKEN_RECIPE = dict(epochs=20, batch_size=64, weight_decay=0.05, warmup=0.1)
CLASS_TOKEN_LR_GRID = (7.5e-4, 1.5e-3)  # the trainer's 1.5e-3 and half of it
CLASS_TOKEN_SEEDS = [0, 1, 2]
CLASS_TOKEN_PRIMARY = dict(a="late", b="from_start")
CLASS_TOKEN_CONTROL = dict(placement="from_start", talking_heads="timm")

#: What the results file says of its own design (recorded as its "notes").
NOTES = ("The design is cut to fit about 20 CPU-minutes on the shared, loaded 2-core machine: "
         "two learning rates per grid (the depths: 1e-3 and 1e-2; the class token: 7.5e-4 and "
         "1.5e-3), chosen on the first seed only; grids at depths 3 and 12 only (the primary "
         "contrast is at depth 12, declared before any depth-12 run; depth 24 was added after, "
         "as exploratory, each form at the rate chosen for it at 12, with no grid of its own); "
         "all four residual forms at depth 3, no α-with-norm at depths 12 and 24; 2,000 training canvases for the class "
         "token (not 4,000); three seeds in each experiment; 400 steps per depth run and 20 "
         "epochs per class-token run, the same for every variant, with no longer-budget run, "
         "so a form still improving at its last step is not given more (the training-loss "
         "curves are in the runs).")

#: The canary: the cheapest slice of the full command (seed 0, the grid's first learning rate,
#: a few steps, small data).
CANARY = dict(depth=3, steps=40, forms=("rezero", "layerscale"), epochs=1,
              sizes=dict(n_train=400, n_val=200, n_test=200))


# --- 1. the residual forms at depth -------------------------------------------------------------

def deep_narrow():
    """Notebook 04's ``DeepNarrow`` class (built here so that importing this file needs no
    torch)."""
    import torch
    from torch import nn

    from vit_scratch.torch_nn.layerscale import ResidualBlock, layerscale_init_value

    class DeepNarrow(nn.Module):
        """A deep, narrow ViT for 8×8 digits: 2×2 patches (16 tokens) + a class token, `depth`
        residual blocks of one form, a final LayerNorm and a linear head.  (B, 1, 8, 8) -> (B, 10)
        ``init``: one of :data:`INITS` (:func:`initialise`)."""

        def __init__(self, residual, depth=24, dim=32, heads=2, init="timm"):
            super().__init__()
            self.embed = nn.Linear(4, dim)  # one 2×2 patch -> a token
            self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
            self.pos_embed = nn.Parameter(torch.zeros(1, 17, dim))
            eps = layerscale_init_value(depth)
            self.blocks = nn.Sequential(*[ResidualBlock(dim, heads, residual, mlp_ratio=2.0,
                                                        init_values=eps) for _ in range(depth)])
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.head = nn.Linear(dim, 10)
            initialise(self, init)

        def no_weight_decay(self):
            return {"cls_token", "pos_embed"}

        def tokens(self, images):  # (B, 1, 8, 8) -> (B, 17, dim)
            patches = images.unfold(2, 2, 2).unfold(3, 2, 2).reshape(len(images), 16, 4)
            x = self.embed(patches)  # (B, 16, dim)
            return torch.cat([self.cls_token.expand(len(images), -1, -1), x], dim=1) + self.pos_embed

        def forward(self, images):
            return self.head(self.norm(self.blocks(self.tokens(images)))[:, 0])

    return DeepNarrow


def initialise(model, init: str):
    """Set ``DeepNarrow``'s parameters as one paper does (in place; returns ``model``):

    * ``"timm"``, timm's ViT and CaiT: every Linear of the blocks and the head N(0, 0.02²)
      truncated at ±2 std, zero biases; the patch embedding at PyTorch's default,
      U(±1/√fan_in) (timm's patch embedding is a convolution, which its initialisation leaves
      at PyTorch's default; a 2×2 convolution and this ``nn.Linear(4, dim)`` have the same);
      the position embedding N(0, 0.02²) truncated, the class token N(0, 1e-6²);
    * ``"xavier"``, ReZero's authors' Transformer: every Linear, the embedding included,
      Xavier-uniform, zero biases; the tokens as timm's;
    * ``"small_tokens"``: as ``"timm"``, but the patch embedding N(0, 0.02²) like every other
      Linear, so the tokens start tiny (notebook 04, section 3): the positive control's setting.

    LayerNorms start at the identity; ε, α = 0 are the blocks' own."""
    import torch
    from torch import nn

    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    def linear(m, xavier: bool):
        if xavier:
            nn.init.xavier_uniform_(m.weight)
        else:
            nn.init.trunc_normal_(m.weight, std=0.02, a=-0.04, b=0.04)
        nn.init.zeros_(m.bias)

    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear) and name != "embed":
                linear(m, init == "xavier")
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.trunc_normal_(model.pos_embed, std=0.02, a=-0.04, b=0.04)
        nn.init.normal_(model.cls_token, std=1e-6)
        # the embedding last, so that with one seed the three differ in the embedding alone
        # (the blocks and tokens of "timm" and "small_tokens" are the same numbers)
        if init == "timm":
            model.embed.reset_parameters()  # PyTorch's default: U(±1/√fan_in), bias too
        else:
            linear(model.embed, init == "xavier")
    return model


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


def run_depth(form: str, depth: int, seed: int, lr: float, splits=None, init: str | None = None,
              log=print, **recipe) -> dict:
    """Train ``DeepNarrow(form, depth)`` from ``init`` (the form's own by default) with seed
    ``seed`` on seed ``seed``'s split; its numbers and curves."""
    import torch

    init = init or INIT_OF_FORM[form]
    splits = splits or digits_splits(seed)
    torch.manual_seed(seed)
    model = deep_narrow()(form, depth, init=init)
    result = experiment.fit(model, *splits, seed=seed, lr=lr, **{**DEPTH_RECIPE, **recipe})
    losses = [h["train_loss"] for h in result["history"]]
    log(f"{experiment.stamp()} {form:15s} {init:12s} depth {depth:2d} seed {seed} lr {lr:g}: "
        f"val {result['val_accuracy']:.4f} test {result['test_accuracy']:.4f} loss "
        f"{losses[-1]:.3f} ({result['cpu_seconds']:.0f} CPU s)", flush=True)
    return {"form": form, "init": init, "depth": depth, "seed": seed, "lr": lr,
            **{k: result[k] for k in ("val_accuracy", "test_accuracy", "selected_epoch", "epochs",
                                      "steps", "final_train_loss", "cpu_seconds")},
            "train_loss": losses, "val_curve": [h["val_accuracy"] for h in result["history"]]}


def choose_lr(runs: list[dict], grid, **where) -> tuple[float, dict]:
    """The learning rate of ``grid`` whose runs matching ``where`` have the highest mean
    validation accuracy (ties: the smaller rate), and that mean for each rate."""
    means = {}
    for lr in grid:
        mine = [r["val_accuracy"] for r in runs
                if r["lr"] == lr and all(r.get(k) == v for k, v in where.items())]
        if not mine:
            raise ValueError(f"no run with lr={lr} matches {where}")
        means[lr] = sum(mine) / len(mine)
    best = max(grid, key=lambda lr: (means[lr], -lr))
    return best, {f"{lr:g}": m for lr, m in means.items()}


def contrast(runs, a: dict, b: dict, metric: str = "test_accuracy") -> dict:
    """``a − b`` paired by seed (``a``/``b``: the fields that pick each side's runs): the
    interval (:func:`stats.paired`) and what each seed gave."""
    left, right = stats.by_seed(runs, metric, **a), stats.by_seed(runs, metric, **b)
    interval = stats.paired(left, right)
    return {"a": a, "b": b, "metric": metric, "interval": interval.to_dict(),
            "detectable": stats.detectable_effect(interval.sd, interval.n),
            "per_seed": {str(s): left[s] - right[s] for s in sorted(left)}}


def analyse_depth(runs: list[dict], lrs: dict, depths) -> dict:
    """The primary contrast, the Holm-corrected secondary ones, ReZero against chance at each
    depth and the positive control, from the runs at each form's chosen learning rate."""
    chosen = [r for r in runs if r["lr"] == lrs[r["form"]][str(r["depth"])]
              and r["init"] == INIT_OF_FORM[r["form"]]]
    p = DEPTH_PRIMARY
    primary = contrast(chosen, dict(form=p["a"], depth=p["depth"]),
                       dict(form=p["b"], depth=p["depth"]))
    secondary = {}
    for depth in depths:
        for form in forms_at(depth):
            if form == "layerscale" or (form == p["b"] and depth == p["depth"]):
                continue
            secondary[f"layerscale − {form} @ {depth}"] = contrast(
                chosen, dict(form="layerscale", depth=depth), dict(form=form, depth=depth))
    rejected = stats.holm({k: c["interval"]["p_value"] for k, c in secondary.items()})
    for k in secondary:
        secondary[k]["holm_rejected"] = rejected[k]
    above = {}
    for depth in (d for d in depths if "rezero" in forms_at(d)):
        accs = stats.by_seed(chosen, "test_accuracy", form="rezero", depth=depth)
        above[str(depth)] = {"interval": stats.t_interval(
            [accs[s] - CHANCE for s in sorted(accs)]).to_dict()}
    rejected = stats.holm({d: a["interval"]["p_value"] for d, a in above.items()})
    for d in above:
        above[d]["holm_rejected"] = rejected[d]
    c = DEPTH_CONTROL
    control_runs = [r for r in runs if r["init"] == c["init"]]
    control = contrast(control_runs, dict(form=c["forms"][0], depth=c["depth"]),
                       dict(form=c["forms"][1], depth=c["depth"])) if control_runs else None
    return {"primary": primary, "secondary_holm": secondary, "rezero_above_chance": above,
            "positive_control": control}


def summarise_depth(runs: list[dict], lrs: dict) -> dict:
    """{form: {depth: {metric: summary}}} over the seeds, at each form's rate chosen for the
    depth and its own initialisation."""
    out = {}
    for form in FORMS:
        mine = [r for r in runs if r["form"] == form and r["init"] == INIT_OF_FORM[form]
                and r["lr"] == lrs.get(form, {}).get(str(r["depth"]))]
        if not mine:
            continue
        out[form] = {}
        for depth in sorted({r["depth"] for r in mine}):
            these = [r for r in mine if r["depth"] == depth]
            out[form][str(depth)] = {m: experiment.summary([r[m] for r in these])
                                     for m in ("test_accuracy", "val_accuracy",
                                               "final_train_loss", "selected_epoch")}
    return out


def forms_at(depth: int) -> tuple:
    """The residual forms the experiment runs at ``depth`` (:data:`FORMS_AT_DEPTH`)."""
    return FORMS_AT_DEPTH.get(depth, FORMS)


class RunLog:
    """The finished runs of a command, one JSON line each in ``path`` (``--runs``), so that a
    stopped command, run again, resumes where it stopped: a run whose arguments are already in
    the file is read back instead of trained again (the runs are deterministic)."""

    def __init__(self, path=None):
        self.path = Path(path) if path else None
        self.done = {}
        if self.path and self.path.is_file():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                entry = json.loads(line)
                self.done[entry["key"]] = entry["run"]

    def __call__(self, fn, key: dict, **rest):
        """``fn(**key, **rest)``, or its earlier result for the same ``key``."""
        k = json.dumps({"function": fn.__name__, **key}, sort_keys=True)
        if k not in self.done:
            self.done[k] = fn(**key, **rest)
            if self.path:
                with self.path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": k, "run": self.done[k]}) + "\n")
        return self.done[k]


def depth_experiment(depths, seeds, log=print, runlog=None) -> dict:
    """Part 1: the learning-rate search on the first seed at every depth, the other seeds at the
    chosen rates, the positive control, and what they say."""
    runlog = runlog or RunLog()
    tune_seed = seeds[0]
    splits = {seed: digits_splits(seed) for seed in seeds}

    def run(form, d, seed, lr, **key):
        return runlog(run_depth, dict(form=form, depth=d, seed=seed, lr=lr, **key),
                      splits=splits[seed], log=log)

    tuned = [d for d in sorted(depths) if d not in RATE_FROM_DEPTH]
    for d in depths:
        if d in RATE_FROM_DEPTH and RATE_FROM_DEPTH[d] not in depths:
            raise ValueError(f"depth {d} takes its rates from depth {RATE_FROM_DEPTH[d]}, which "
                             f"is not among the depths {depths}")
    runs = [run(form, d, tune_seed, lr)
            for d in tuned for form in forms_at(d) for lr in DEPTH_LR_GRID]
    lrs = {form: {} for form in FORMS}
    search = {form: {} for form in FORMS}
    for d in tuned:
        for form in forms_at(d):
            lrs[form][str(d)], search[form][str(d)] = choose_lr(
                runs, DEPTH_LR_GRID, form=form, depth=d, seed=tune_seed)
    for d in sorted(set(depths) - set(tuned)):
        for form in forms_at(d):
            lrs[form][str(d)] = lrs[form][str(RATE_FROM_DEPTH[d])]
    log(f"learning rates chosen on seed {tune_seed}'s validation split: {lrs}", flush=True)
    for seed in seeds:
        runs += [run(form, d, seed, lrs[form][str(d)]) for d in sorted(depths)
                 for form in forms_at(d) if seed != tune_seed or d not in tuned]
    c = DEPTH_CONTROL
    runs += [run(form, c["depth"], seed, lrs[form][str(c["depth"])], init=c["init"])
             for seed in seeds for form in c["forms"]]
    return {"lr_search": search, "lr": lrs, "summary": summarise_depth(runs, lrs),
            **analyse_depth(runs, lrs, depths), "runs": runs}


# --- 2. where the class token joins ---------------------------------------------------------------

def class_token_model(placement: str, talking_heads: str = "identity"):
    """``cait_digits`` with CLASS_TOKEN_MODEL: ``"late"`` is CaiT itself; ``"from_start"`` runs
    the class token through ``depth + depth_token_only`` self-attention blocks with the patches
    (and has no class-attention block).  ``talking_heads="identity"`` starts every
    talking-heads map (``proj_l``, ``proj_w``) at the identity with zero bias, so that the heads
    start as plain multi-head attention; ``"timm"`` keeps timm's N(0, 0.02²)."""
    import torch

    import vit_scratch

    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if talking_heads not in TALKING_HEADS:
        raise ValueError(f"talking_heads must be one of {TALKING_HEADS}, got {talking_heads!r}")
    cfg = dict(CLASS_TOKEN_MODEL)
    if placement == "from_start":
        cfg["depth"] += cfg["depth_token_only"]
        cfg["depth_token_only"] = 1  # the config needs one; it is removed below
    model = vit_scratch.create_model("cait_digits", **cfg)
    if talking_heads == "identity":
        with torch.no_grad():
            for block in model.blocks:
                for mix in (block.attn.proj_l, block.attn.proj_w):
                    torch.nn.init.eye_(mix.weight)
                    torch.nn.init.zeros_(mix.bias)
    if placement == "late":
        return model
    model.blocks_token_only = torch.nn.ModuleList()

    def forward_features(images):
        x = model.embed(images)  # (B, N, C)
        x = torch.cat([model.cls_token.expand(len(x), -1, -1), x], dim=1)  # (B, 1 + N, C)
        return model.norm(model.blocks(x))

    model.forward_features = forward_features
    return model


def class_token_data(seed: int, **sizes):
    """Seed ``seed``'s canvases: (train, val, test) tensors, each part its own draw (training
    and validation from the training digits, test from the test digits); ``sizes`` replaces
    some of CLASS_TOKEN_SIZES."""
    import torch

    from vit_scratch.data.clutter import digits_in_clutter

    sizes = {**CLASS_TOKEN_SIZES, **sizes}

    def part(n, pool, s):
        w = digits_in_clutter(n, pool=pool, seed=s, **CLASS_TOKEN_WORLD)
        return torch.from_numpy(w.images), torch.from_numpy(w.labels)

    return (part(sizes["n_train"], "train", 100 + seed),
            part(sizes["n_val"], "train", 200 + seed), part(sizes["n_test"], "test", 300 + seed))


def run_class_token(placement: str, seed: int, lr: float, data=None,
                    talking_heads: str = "identity", log=print, **recipe) -> dict:
    import torch

    data = data or class_token_data(seed)
    torch.manual_seed(seed)
    model = class_token_model(placement, talking_heads)
    result = experiment.fit(model, *data, seed=seed, lr=lr, **{**CLASS_TOKEN_RECIPE, **recipe})
    params = sum(p.numel() for p in model.parameters())
    losses = [h["train_loss"] for h in result["history"]]
    log(f"{experiment.stamp()} class token {placement:10s} talking heads {talking_heads:8s} "
        f"seed {seed} lr {lr:g}: val {result['val_accuracy']:.4f} test "
        f"{result['test_accuracy']:.4f} ({result['cpu_seconds']:.0f} CPU s, {params:,} "
        f"parameters)", flush=True)
    return {"placement": placement, "talking_heads": talking_heads, "seed": seed, "lr": lr,
            "params": params,
            **{k: result[k] for k in ("val_accuracy", "test_accuracy", "selected_epoch", "epochs",
                                      "final_train_loss", "cpu_seconds")},
            "train_loss": losses, "val_curve": [h["val_accuracy"] for h in result["history"]]}


def summarise_class_token(runs: list[dict], lrs: dict) -> dict:
    """{variant: {metric: summary, "params", "lr"}}: the placements at the identity and the
    control, each at the rate it ran with over the seeds."""
    out = {}
    c = CLASS_TOKEN_CONTROL
    for name, where in (("late", dict(placement="late", talking_heads="identity")),
                        ("from_start", dict(placement="from_start", talking_heads="identity")),
                        ("from_start_timm_talking_heads", dict(placement=c["placement"],
                                                               talking_heads=c["talking_heads"]))):
        lr = lrs[where["placement"]]
        mine = [r for r in runs if r["lr"] == lr and all(r[k] == v for k, v in where.items())]
        if not mine:
            continue
        out[name] = {m: experiment.summary([r[m] for r in mine])
                     for m in ("test_accuracy", "val_accuracy", "final_train_loss",
                               "selected_epoch")}
        out[name].update(params=mine[0]["params"], lr=lr, **where)
    return out


def class_token_experiment(seeds, log=print, runlog=None) -> dict:
    """Part 2: the learning-rate search on the first seed, the other seeds at the chosen
    rates, the positive control on every seed, and the contrasts."""
    runlog = runlog or RunLog()
    tune_seed = seeds[0]
    data = class_token_data(tune_seed)

    def run(placement, seed, lr, data, talking_heads="identity"):
        return runlog(run_class_token,
                      dict(placement=placement, seed=seed, lr=lr, talking_heads=talking_heads),
                      data=data, log=log)

    runs = [run(p, tune_seed, lr, data)
            for p in PLACEMENTS for lr in CLASS_TOKEN_LR_GRID]
    lrs, search = {}, {}
    for p in PLACEMENTS:
        lrs[p], search[p] = choose_lr(runs, CLASS_TOKEN_LR_GRID, placement=p, seed=tune_seed)
    log(f"learning rates chosen on seed {tune_seed}'s validation canvases: {lrs}", flush=True)
    c = CLASS_TOKEN_CONTROL
    for seed in seeds:
        data = class_token_data(seed) if seed != tune_seed else data
        if seed != tune_seed:
            runs += [run(p, seed, lrs[p], data) for p in PLACEMENTS]
        runs.append(run(c["placement"], seed, lrs[c["placement"]], data,
                        talking_heads=c["talking_heads"]))
    chosen = [r for r in runs if r["lr"] == lrs[r["placement"]]]
    p = CLASS_TOKEN_PRIMARY
    identity = dict(talking_heads="identity")
    return {"lr_search": search, "lr": lrs, "summary": summarise_class_token(runs, lrs),
            "primary": contrast(chosen, dict(placement=p["a"], **identity),
                                dict(placement=p["b"], **identity)),
            "positive_control": contrast(chosen, dict(placement=c["placement"], **identity),
                                         dict(placement=c["placement"],
                                              talking_heads=c["talking_heads"])),
            "runs": runs}


# --- the canary, the verdicts, the command -------------------------------------------------------

def canary(log=print) -> dict:
    """The cheapest slice of the full command, one thread: seed 0 at the grid's first rate, a
    few steps of the two forms that start from different initialisations at the smallest depth,
    and one epoch of both placements on a few canvases.  Its numbers, printed on the canary
    line; ``--json`` records them, ``tests/test_canaries.py`` compares them exactly."""
    numbers = {}
    splits = digits_splits(0)
    for form in CANARY["forms"]:
        r = run_depth(form, CANARY["depth"], 0, DEPTH_LR_GRID[0], splits, log=log,
                      steps=CANARY["steps"])
        numbers[f"{form}_depth{CANARY['depth']}"] = {
            k: r[k] for k in ("val_accuracy", "test_accuracy", "final_train_loss")}
    data = class_token_data(0, **CANARY["sizes"])
    for placement in PLACEMENTS:
        r = run_class_token(placement, 0, CLASS_TOKEN_LR_GRID[0], data, log=log,
                            epochs=CANARY["epochs"])
        numbers[f"class_token_{placement}"] = {
            k: r[k] for k in ("val_accuracy", "test_accuracy", "final_train_loss")}
    return experiment.print_canary(numbers)


def verdicts(data: dict) -> dict:
    """The sentences the pages show, from the intervals (:func:`stats.verdict`)."""
    names = {"layerscale": "LayerScale", "prenorm": "pre-norm", "late": "the late class token",
             "from_start": "the class token from the start"}
    out = {}
    if "depth" in data:
        d = data["depth"]
        iv = stats.Interval.from_dict(d["primary"]["interval"])
        out["depth"] = stats.verdict(iv, names[DEPTH_PRIMARY["a"]], names[DEPTH_PRIMARY["b"]])
        if d.get("positive_control"):
            iv = stats.Interval.from_dict(d["positive_control"]["interval"])
            out["depth_control"] = stats.verdict(iv, "LayerScale with tiny tokens",
                                                 "pre-norm with tiny tokens")
    if "class_token" in data:
        c = data["class_token"]
        iv = stats.Interval.from_dict(c["primary"]["interval"])
        out["class_token"] = stats.verdict(iv, names["late"], names["from_start"])
        iv = stats.Interval.from_dict(c["positive_control"]["interval"])
        out["class_token_control"] = stats.verdict(
            iv, "The class token from the start with talking heads at the identity",
            "the same with timm's talking-heads initialisation")
    return out


FULL_COMMAND = "python benchmarks/exp_cait.py --json benchmarks/results/cait.json"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["depth", "class_token", "both"], default="both",
                        help="run one experiment; with --json, the file's other part is kept")
    parser.add_argument("--depths", type=int, nargs="+", default=DEPTHS)
    parser.add_argument("--seeds", type=int, nargs="+",
                        help=f"the seeds of both parts (default {SEEDS} for the depths, "
                             f"{CLASS_TOKEN_SEEDS} for the class token); the first one's "
                             f"validation split chooses the learning rates")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--runs", metavar="FILE",
                        help="keep each finished run here (one JSON line); run again with the "
                             "same constants, the command resumes where it stopped")
    parser.add_argument("--canary", action="store_true",
                        help="run only the canary slice and print its numbers")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="write --json from the parts of these files (each written by "
                             "--part, e.g. by two processes at once) instead of running them")
    args = parser.parse_args(argv)
    experiment.one_thread()
    if args.canary:
        canary()
        return None
    if args.seeds is not None and len(set(args.seeds)) < 2:
        parser.error(f"--seeds needs at least 2 different seeds for a paired interval, got "
                     f"{args.seeds}")
    if min(args.depths) < 1 or DEPTH_PRIMARY["depth"] not in args.depths:
        parser.error(f"--depths must be positive and include the primary contrast's depth "
                     f"{DEPTH_PRIMARY['depth']}, got {args.depths}")
    depth_seeds, token_seeds = args.seeds or SEEDS, args.seeds or CLASS_TOKEN_SEEDS
    clock = experiment.CpuClock()
    old = {}
    if args.merge:
        for path in args.merge:
            found = json.loads(Path(path).read_text(encoding="utf-8"))
            for part in ("depth", "class_token"):
                if part in found:  # a later file's part replaces an earlier one's
                    old[part] = found[part]
                    old.setdefault("settings", {})[part] = found["settings"][part]
        args.part = "none"
    elif args.json and args.part != "both" and Path(args.json).is_file():
        old = json.loads(Path(args.json).read_text(encoding="utf-8"))
    data = experiment.header("cait", argv, {
        "depth": {"seeds": depth_seeds, "depths": args.depths, "forms": list(FORMS),
                  "init": INIT_OF_FORM, "lr_grid": list(DEPTH_LR_GRID),
                  "model": "DeepNarrow(form, depth, dim=32, heads=2)",
                  "data": "digits (8×8), the trainer's split of each seed",
                  "forms_at_depth": {str(d): list(forms_at(d)) for d in args.depths},
                  "rate_from_depth": {str(d): s for d, s in RATE_FROM_DEPTH.items()
                                      if d in args.depths},
                  "recipe": DEPTH_RECIPE, "primary": DEPTH_PRIMARY, "control": DEPTH_CONTROL},
        "class_token": {"seeds": token_seeds, "world": CLASS_TOKEN_WORLD, **CLASS_TOKEN_SIZES,
                        "model": {"name": "cait_digits", **CLASS_TOKEN_MODEL},
                        "talking_heads": "identity", "lr_grid": list(CLASS_TOKEN_LR_GRID),
                        "recipe": CLASS_TOKEN_RECIPE, "primary": CLASS_TOKEN_PRIMARY,
                        "control": CLASS_TOKEN_CONTROL}})
    data["notes"] = NOTES
    command = data["written_by"]
    if args.part != "both":
        data["written_by"] = FULL_COMMAND  # what makes the whole file; each part says what ran it
    runlog = RunLog(args.runs)
    parts = {"depth": lambda: depth_experiment(args.depths, depth_seeds, runlog=runlog),
             "class_token": lambda: class_token_experiment(token_seeds, runlog=runlog)}
    for part, run_part in parts.items():
        if args.part in (part, "both"):
            start = clock.seconds()
            data[part] = {"command": command, "commit": data["commit"],
                          "load_average_at_start": data["machine"]["load_average_at_start"],
                          **run_part()}
            data[part]["cpu_seconds"] = clock.seconds() - start
        elif part in old:
            data[part] = old[part]
            data["settings"][part] = old["settings"][part]
    data["verdicts"] = verdicts(data)
    for line in data["verdicts"].values():
        print(line)
    if args.json:
        data["canary"] = experiment.canary_record("exp_cait.py", canary(log=lambda *a, **k: None))
    return experiment.finish(data, clock, args.json)


if __name__ == "__main__":
    main()
