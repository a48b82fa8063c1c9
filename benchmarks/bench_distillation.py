"""Experiment (DeiT, notebook 11): distillation from a teacher that knows more than its student.

    python benchmarks/bench_distillation.py --threads 1 --json benchmarks/results/distillation.json
    python benchmarks/bench_distillation.py --seeds 0 --epochs 20 --teacher-epochs 10   # a slice
    python benchmarks/bench_distillation.py --canary                                    # seconds

DeiT (Touvron et al., "Training data-efficient image transformers & distillation through
attention", ICML 2021, https://arxiv.org/abs/2012.12877, §5.2 and Tables 2-3) teaches a ViT with
a convnet that is better than it, and finds the taught student ahead of the same ViT trained on
the labels alone, hard distillation ahead of soft, and a distillation token ahead of distilling
through the class token.  Two things make its teacher useful: it knows more than the student
(a RegNetY, more accurate, with the convolutions' bias towards local patterns), and it labels
the student's *augmented* view -- a random crop that may no longer show the labelled object
gets the teacher's opinion of what it does show.  A teacher that knows only what its student
knows, on views that keep their labels, has nothing to teach.

Here, in miniature, for each seed s (split s of scikit-learn's digits,
``experiment.digits_subsets``): the trainer's test split (359 digits); from the other 1,438, a
validation set of ``N_VAL`` (the teacher's and the students' epoch selection), the students'
training set of ``N_TRAIN`` and the rest.

* **Augmentation** for every model, :func:`out_of_frame`: a rotation of up to ±15°, a zoom
  by up to ±10% and a shift of up to 30% of the side in each direction, the background (0)
  filling in -- a shifted digit can lose a third of its width out of the frame
  (``ink_outside_frame`` in the file measures how much ink the views lose).
* **The teacher** knows more: a small CNN (:class:`SmallCNN`: the view at the digits' own 8×8
  pixels, three convolutions, global average pooling) trained on every training digit but the
  validation set -- the students' ``N_TRAIN`` and the rest, several times the students' data --
  with the same augmentation, for ``TEACHER_EPOCHS``.  PyTorch's default initialisation for its layers (Kaiming-uniform, as
  torchvision's CNNs start).
* **The students**, ``vit_digits`` with the library's initialisation (timm's, which is DeiT's:
  truncated normal, std 0.02, for the tokens and the linear layers), ``EPOCHS`` on the ``N_TRAIN``
  digits, every condition on the same augmented batches (one generator per seed):

  - ``class token``: cross-entropy with the labels (label smoothing 0.1), DeiT's baseline;
  - ``soft distillation``: ``(1 − λ)·CE(Z_s, y) + λ·τ²·KL(ψ(Z_t/τ) ‖ ψ(Z_s/τ))`` through the
    class token, with DeiT's τ = 3 and λ = 0.1 (its §5.2; the KL averaged over the batch, as the
    paper's formula has it);
  - ``hard distillation, distillation token``: DeiT's method, ``distilled=True``,
    ``½·CE(class head, y) + ½·CE(distillation head, y_t)`` with ``y_t`` the teacher's class of the
    augmented view (``vit_scratch.training.recipe.objective``, the trainer's loss);
  - positive control, ``hard distillation, classes swapped``: the same student and loss, taught
    by the same teacher with two classes swapped (``SWAP``: it calls every 3 an 8 and every 8 a
    3), a teacher whose labels differ from the truth on a fifth of the views by design.  If the
    design can see what a teacher does to its student, this student's test accuracy falls.

**Primary contrast**, declared before the run: ``hard distillation, distillation token`` −
``class token``, test accuracy paired by seed, with its t interval (``stats.paired``, n − 1
degrees of freedom).  Secondary, Holm-corrected (``stats.holm``): ``soft distillation`` −
``class token`` and ``hard`` − ``soft``.  The positive control: ``classes swapped`` − ``class
token``.  A contrast whose interval includes zero is reported with the smallest effect the
design would have detected (``stats.detectable_effect``).

**Tuning**, the same budget for every student: its peak learning rate from ``LR_GRID`` (the
teacher's from ``TEACHER_LR_GRID``), chosen by validation accuracy on seed 0 (ties: the lower rate) and kept for every seed (seed 0's run at
that rate is its run); the control keeps hard distillation's rate.  The recipe otherwise is the
trainer's (``experiment.fit``: AdamW, weight decay ``WEIGHT_DECAY`` on matrices and kernels,
warm-up then cosine decay, label smoothing 0.1), batches of ``BATCH``.

Reported per seed and condition: the test accuracy of the epoch with the best validation
accuracy, its agreement with the teacher on the test digits (DeiT's Table 4 asks the same), each
head alone for a distilled student and the cosine similarity of its two tokens after each block
(``token_similarity``, DeiT §4), the selected epoch and the per-epoch training loss and
validation accuracy; per teacher, its test accuracy and how often its class is the label on the
students' augmented training views (``labels_on_views``) and on the plain ones.  ``--canary``
runs the cheapest slice (seed 0, a few epochs, one thread) and prints its numbers; ``--json``
records them in the file for ``tests/test_canaries.py``.  A script, never a test.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import vit_scratch
from vit_scratch.training.recipe import objective

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402  (benchmarks/experiment.py: fit, the results file, canaries)
import stats  # noqa: E402  (benchmarks/stats.py: paired intervals, Holm, verdicts)

STUDENT = "vit_digits"
N_TRAIN, N_VAL = 300, 400
EPOCHS, TEACHER_EPOCHS = 150, 60
BATCH, WEIGHT_DECAY, LABEL_SMOOTHING = 32, 0.05, 0.1
LR_GRID = (5e-4, 1.5e-3)
TEACHER_LR_GRID = (1.5e-3, 4.5e-3)
AUGMENT = {"rotate": 15.0, "zoom": 0.1, "shift": 0.3}
SOFT = {"tau": 3.0, "lam": 0.1}
SWAP = (3, 8)
VIEW_PASSES = 5

CLASS_TOKEN, SOFT_NAME, HARD = ("class token", "soft distillation",
                                "hard distillation, distillation token")
CONTROL = "hard distillation, classes swapped"
#: condition -> (the student's model_kwargs, its loss: None, "soft", "hard" or "swapped")
CONDITIONS = {CLASS_TOKEN: ({}, None), SOFT_NAME: ({}, "soft"),
              HARD: ({"distilled": True}, "hard"), CONTROL: ({"distilled": True}, "swapped")}
PRIMARY = (HARD, CLASS_TOKEN)
SECONDARY = [(SOFT_NAME, CLASS_TOKEN), (HARD, SOFT_NAME)]
POSITIVE_CONTROL = (CONTROL, CLASS_TOKEN)
#: What the design leaves out, and why (recorded in the results file).
NOTES = ("Cut to fit about 15 CPU-minutes on a shared 2-core machine: three seeds (so the "
         "t intervals have 2 degrees of freedom) and a two-rate grid per model; an earlier run of "
         "this script, stopped before it finished, had 4.5e-3 in the students' grid and found it "
         "the worst rate for every student on seed 0's validation split, and 5e-4 the worst for "
         "the teacher.")
CANARY = {"seed": 0, "epochs": 2, "teacher_epochs": 8, "n_train": 100, "lr": 1.5e-3,
          "teacher_lr": 4.5e-3}


class SmallCNN(nn.Module):
    """The teacher: the view averaged down to the digits' own 8×8 pixels (3×3 blocks), three 3×3
    convolutions with ReLU (32, 64, 64 channels, the last two with stride 2: a receptive field
    of 9 pixels, the whole digit), global average pooling and a linear head.
    (B, 1, 24, 24) -> (B, 10)"""

    def __init__(self, num_classes: int = 10, pool: int = 3):
        super().__init__()
        self.pool = pool
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=2, padding=1), nn.ReLU())
        self.head = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.avg_pool2d(x, self.pool)  # (B, 1, 8, 8)
        return self.head(self.features(x).mean(dim=(2, 3)))


# --- the augmentation: digits pushed partly out of the frame ---------------------------------------

def affine_theta(draws: torch.Tensor, frame: float = 1.0) -> torch.Tensor:
    """``draws`` (B, 4) uniform in [0, 1) -> ``F.affine_grid``'s maps (B, 2, 3): rotation, zoom
    and shift as :data:`AUGMENT` bounds them; ``frame`` > 1 draws the same views on a canvas
    ``frame`` times the side (the shift, in that canvas's units, shrinks by ``frame``)."""
    u = draws * 2 - 1  # (B, 4) in [-1, 1)
    angle = u[:, 0] * math.radians(AUGMENT["rotate"])
    zoom = 1 + u[:, 1] * AUGMENT["zoom"]
    shift = u[:, 2:] * AUGMENT["shift"] * 2 / frame  # affine_grid spans 2 per side
    cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
    return torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1),
                        torch.stack([sin, cos, shift[:, 1]], 1)], 1)


def sample(images: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Bilinear resampling of ``images`` (B, C, H, W) at ``theta``, the background (0) outside."""
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def out_of_frame(images: torch.Tensor, gen: torch.Generator | None = None,
                 draws: torch.Tensor | None = None) -> torch.Tensor:
    """One random view of each image (B, C, H, W): rotated, zoomed and shifted so far that part
    of the digit can leave the frame.  The draws (B, 4), uniform in [0, 1), come from ``gen``
    or are given."""
    if draws is None:
        draws = torch.rand(len(images), 4, generator=gen)
    return sample(images, affine_theta(draws))


def ink_outside_frame(images: torch.Tensor, gen: torch.Generator | None = None,
                      draws: torch.Tensor | None = None) -> torch.Tensor:
    """The share of each digit's ink that :func:`out_of_frame`'s view (the same draws, from
    ``gen`` or given) pushes out of the frame: the view drawn on a canvas three times the side,
    whose middle is the view itself; the ink outside the middle over all of it.   (B,)"""
    if draws is None:
        draws = torch.rand(len(images), 4, generator=gen)
    h, w = images.shape[-2:]
    big = sample(F.pad(images, (w, w, h, h)), affine_theta(draws, frame=3.0))  # (B, C, 3H, 3W)
    inside = big[..., h:2 * h, w:2 * w].sum(dim=(1, 2, 3))
    return 1 - inside / big.sum(dim=(1, 2, 3)).clamp_min(1e-12)


# --- the losses -------------------------------------------------------------------------------------

class Teacher:
    """A trained model's logits on a batch, in eval mode, without gradients; ``swap`` (two
    classes) exchanges their logits, so the teacher calls every one the other."""

    def __init__(self, model: nn.Module, swap: tuple[int, int] | None = None):
        self.model, self.swap = model.eval().requires_grad_(False), swap

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        logits = self.model(images)
        if self.swap is not None:
            a, b = self.swap
            logits = logits.clone()
            logits[:, [a, b]] = logits[:, [b, a]]
        return logits


def class_token_loss(model, images, labels):
    return F.cross_entropy(model(images), labels, label_smoothing=LABEL_SMOOTHING)


def soft_loss(teacher: Teacher):
    """DeiT's soft distillation: ``(1 − λ)·CE(Z_s, y) + λ·τ²·KL(ψ(Z_t/τ) ‖ ψ(Z_s/τ))``."""
    tau, lam = SOFT["tau"], SOFT["lam"]

    def loss(model, images, labels):
        z_s, z_t = model(images), teacher(images)
        kl = F.kl_div(F.log_softmax(z_s / tau, dim=-1), F.log_softmax(z_t / tau, dim=-1),
                      reduction="batchmean", log_target=True)
        return ((1 - lam) * F.cross_entropy(z_s, labels, label_smoothing=LABEL_SMOOTHING)
                + lam * tau ** 2 * kl)
    return loss


def hard_loss(teacher: Teacher):
    """DeiT's hard distillation with the distillation token (the trainer's ``objective``)."""

    def loss(model, images, labels):
        teacher_labels = teacher(images).argmax(dim=-1)
        return objective(model(images), labels, LABEL_SMOOTHING, teacher_labels) / len(labels)
    return loss


def student_loss(kind: str | None, teacher: Teacher):
    if kind is None:
        return class_token_loss
    if kind == "soft":
        return soft_loss(teacher)
    return hard_loss(Teacher(teacher.model, SWAP) if kind == "swapped" else teacher)


# --- one model ---------------------------------------------------------------------------------------

def seed_data(seed: int, n_train: int = N_TRAIN) -> dict:
    """The split of seed ``seed`` at the student's input size; ``"teacher"``: the teacher's
    training set, the students' digits and the rest."""
    parts = experiment.digits_subsets(STUDENT, seed, n_train, N_VAL)
    parts["teacher"] = tuple(torch.cat([a, b]) for a, b in zip(parts["train"], parts["rest"]))
    return parts


def train_teacher(data: dict, seed: int, lr: float, epochs: int) -> tuple[nn.Module, dict]:
    torch.manual_seed(seed)
    model = SmallCNN()
    result = experiment.fit(model, data["teacher"], data["val"], data["test"], epochs=epochs,
                            batch_size=BATCH, lr=lr, weight_decay=WEIGHT_DECAY,
                            label_smoothing=LABEL_SMOOTHING, seed=seed, augment=out_of_frame)
    return model, result


def train_student(name: str, data: dict, teacher: Teacher, seed: int, lr: float,
                  epochs: int) -> tuple[nn.Module, dict]:
    kwargs, kind = CONDITIONS[name]
    torch.manual_seed(seed)
    model = vit_scratch.create_model(STUDENT, **kwargs)
    if kwargs.get("distilled"):
        model.set_distilled_training(True)
    result = experiment.fit(model, data["train"], data["val"], data["test"], epochs=epochs,
                            batch_size=BATCH, lr=lr, weight_decay=WEIGHT_DECAY,
                            label_smoothing=LABEL_SMOOTHING, seed=seed, augment=out_of_frame,
                            loss=student_loss(kind, teacher))
    return model, result


@torch.no_grad()
def predictions(model: nn.Module, images: torch.Tensor) -> dict[str, torch.Tensor]:
    """The model's classes, and for a distilled model each head's alone."""
    model.eval()
    out = {"model": model(images).argmax(-1)}
    if hasattr(model, "head_dist"):
        features = model.forward_features(images)
        out["class head"] = model.head(features[:, 0]).argmax(-1)
        out["distillation head"] = model.head_dist(features[:, 1]).argmax(-1)
    return out


@torch.no_grad()
def token_similarity(model: nn.Module, images: torch.Tensor) -> list[float]:
    """The cosine similarity of a distilled student's class and distillation tokens, averaged
    over the images: at the input (the learned tokens plus their positions), then after each
    block (DeiT §4 follows it through the network)."""
    model.eval()
    x = model.embed(images)  # (B, 2 + N, C)
    sims = [F.cosine_similarity(x[:, 0], x[:, 1], dim=-1).mean().item()]
    for block in model.blocks:
        x = block(x)
        sims.append(F.cosine_similarity(x[:, 0], x[:, 1], dim=-1).mean().item())
    return sims


def teacher_numbers(teacher: Teacher, data: dict, seed: int) -> dict:
    """How often the teacher's class is the label on the students' training digits: plain, and
    on ``VIEW_PASSES`` augmented views of each (the views a student is shown); the share of ink
    those views push out of the frame; the same for the control's class-swapping teacher."""
    x, y = data["train"]
    gen, ink_gen = (torch.Generator().manual_seed(10_000 + seed) for _ in range(2))
    views = [out_of_frame(x, gen) for _ in range(VIEW_PASSES)]
    ink = torch.cat([ink_outside_frame(x, ink_gen) for _ in range(VIEW_PASSES)])
    swapped = Teacher(teacher.model, SWAP)
    agree = lambda t, v: float((t(v).argmax(-1) == y).float().mean())  # noqa: E731
    return {"labels_on_plain": agree(teacher, x),
            "labels_on_views": float(np.mean([agree(teacher, v) for v in views])),
            "swapped_labels_on_views": float(np.mean([agree(swapped, v) for v in views])),
            "ink_outside_frame": {"mean": float(ink.mean()),
                                  "share_over_10_percent": float((ink > 0.1).float().mean()),
                                  "share_over_25_percent": float((ink > 0.25).float().mean())}}


def run_record(result: dict, **extra) -> dict:
    keep = ("test_accuracy", "test_loss", "val_accuracy", "selected_epoch", "epochs",
            "final_train_loss", "cpu_seconds")
    return {**{k: result[k] for k in keep}, **extra,
            "train_loss": [round(h["train_loss"], 5) for h in result["history"]],
            "val_accuracy_per_epoch": [round(h["val_accuracy"], 5) for h in result["history"]]}


# --- the experiment ----------------------------------------------------------------------------------

def tune(log=print, epochs: int = EPOCHS, teacher_epochs: int = TEACHER_EPOCHS) -> dict:
    """Seed 0: the teacher at every rate of ``TEACHER_LR_GRID``, every student at every rate of
    ``LR_GRID``; the rate with the best validation accuracy (ties: the lower) and its runs,
    reused as seed 0's."""
    data = seed_data(0)
    grid = {"teacher": {}}
    teachers = {}
    for lr in TEACHER_LR_GRID:
        model, result = train_teacher(data, 0, lr, teacher_epochs)
        teachers[lr] = (model, result)
        grid["teacher"][lr] = result["val_accuracy"]
        log(f"{experiment.stamp()} tune teacher lr {lr:g}: val {result['val_accuracy']:.4f}",
            flush=True)
    teacher_lr = best_rate(grid["teacher"])
    teacher = Teacher(teachers[teacher_lr][0])
    students = {}
    for name in CONDITIONS:
        if name == CONTROL:
            continue
        grid[name] = {}
        for lr in LR_GRID:
            model, result = train_student(name, data, teacher, 0, lr, epochs)
            students[name, lr] = (model, result)
            grid[name][lr] = result["val_accuracy"]
            log(f"{experiment.stamp()} tune {name} lr {lr:g}: val {result['val_accuracy']:.4f}"
                f" (epoch {result['selected_epoch']} of {result['epochs']})", flush=True)
    rates = {name: best_rate(values) for name, values in grid.items()}
    rates[CONTROL] = rates[HARD]
    return {"grid": {k: {str(lr): v for lr, v in g.items()} for k, g in grid.items()},
            "rates": rates, "data": data, "teacher": teachers[teacher_lr],
            "students": {name: students[name, rates[name]] for name in CONDITIONS
                         if name != CONTROL}}


def best_rate(val_by_lr: dict) -> float:
    best = max(val_by_lr.values())
    return min(lr for lr, v in val_by_lr.items() if v == best)


def one_seed(seed: int, rates: dict, epochs: int, teacher_epochs: int, done=None,
             log=print, n_train: int = N_TRAIN) -> dict:
    """Every model of seed ``seed`` at its rate (``done``: seed 0's runs from tuning)."""
    done = done or {}
    data = done.get("data") or seed_data(seed, n_train)
    if "teacher" in done:
        teacher_model, result = done["teacher"]
    else:
        teacher_model, result = train_teacher(data, seed, rates["teacher"], teacher_epochs)
    teacher = Teacher(teacher_model)
    x_test, y_test = data["test"]
    teacher_test = teacher(x_test).argmax(-1)
    out = {"teacher": run_record(result, seed=seed, lr=rates["teacher"],
                                 **teacher_numbers(teacher, data, seed)),
           "students": {}}
    log(f"{experiment.stamp()} seed {seed} teacher: test {result['test_accuracy']:.4f}, label "
        f"on views {out['teacher']['labels_on_views']:.4f}", flush=True)
    for name in CONDITIONS:
        if name in done.get("students", {}):
            model, result = done["students"][name]
        else:
            model, result = train_student(name, data, teacher, seed, rates[name], epochs)
        pred = predictions(model, x_test)
        extra = {f"{head} accuracy": float((pred[head] == y_test).float().mean())
                 for head in ("class head", "distillation head") if head in pred}
        if hasattr(model, "head_dist"):
            extra["token_similarity"] = token_similarity(model, x_test)
        out["students"][name] = run_record(
            result, seed=seed, lr=rates[name],
            agreement_with_teacher=float((pred["model"] == teacher_test).float().mean()),
            **extra)
        log(f"{experiment.stamp()} seed {seed} {name}: test {result['test_accuracy']:.4f} "
            f"(epoch {result['selected_epoch']} of {result['epochs']}), agrees with the "
            f"teacher {out['students'][name]['agreement_with_teacher']:.4f}, "
            f"{result['cpu_seconds']:.0f} CPU s", flush=True)
    out["images"] = {k: len(v[1]) for k, v in data.items()}
    return out


def contrasts(runs: dict) -> dict:
    """The primary contrast, the secondary ones (Holm-corrected) and the positive control, in
    test accuracy paired by seed: each ``stats.paired``'s interval, its verdict and the
    smallest effect the design would have detected."""
    def contrast(a, b):
        interval = stats.paired(stats.by_seed(runs[a], "test_accuracy"),
                                stats.by_seed(runs[b], "test_accuracy"))
        return {"a": a, "b": b, "interval": interval.to_dict(),
                "detectable_effect": stats.detectable_effect(interval.sd, interval.n)
                if interval.n > 1 else None,
                "verdict": stats.verdict(interval, a, b)}

    secondary = {f"{a} - {b}": contrast(a, b) for a, b in SECONDARY}
    rejected = stats.holm({k: v["interval"]["p_value"] for k, v in secondary.items()})
    for key, value in secondary.items():
        value["holm_rejects_zero"] = rejected[key]
    return {"primary": contrast(*PRIMARY), "secondary": secondary,
            "positive_control": contrast(*POSITIVE_CONTROL)}


def summarise(per_seed: list[dict]) -> dict:
    keys = ("test_accuracy", "agreement_with_teacher", "class head accuracy",
            "distillation head accuracy", "selected_epoch", "cpu_seconds")
    runs = {name: [s["students"][name] for s in per_seed] for name in CONDITIONS}
    conditions = {name: {"model_kwargs": CONDITIONS[name][0], "loss": CONDITIONS[name][1],
                         **{k: experiment.summary([r[k] for r in entries])
                            for k in keys if k in entries[0]},
                         "runs": entries}
                  for name, entries in runs.items()}
    teachers = [s["teacher"] for s in per_seed]
    teacher = {k: experiment.summary([t[k] for t in teachers])
               for k in ("test_accuracy", "labels_on_plain", "labels_on_views",
                         "swapped_labels_on_views", "selected_epoch", "cpu_seconds")}
    teacher["ink_outside_frame"] = {
        k: experiment.summary([t["ink_outside_frame"][k] for t in teachers])
        for k in teachers[0]["ink_outside_frame"]}
    out = {"teacher": {**teacher, "runs": teachers}, "conditions": conditions}
    if len(per_seed) > 1:
        out["contrasts"] = contrasts(runs)
    return out


def canary_numbers() -> dict:
    """The cheapest slice: seed 0, ``CANARY``'s digits and epochs, one rate, one thread."""
    c = CANARY
    data = seed_data(c["seed"], c["n_train"])
    teacher_model, result = train_teacher(data, c["seed"], c["teacher_lr"], c["teacher_epochs"])
    teacher = Teacher(teacher_model)
    numbers = {"teacher": {"test_accuracy": result["test_accuracy"],
                           "test_loss": result["test_loss"],
                           "labels_on_views": teacher_numbers(teacher, data, c["seed"])
                           ["labels_on_views"]}}
    for name in CONDITIONS:
        _, result = train_student(name, data, teacher, c["seed"], c["lr"], c["epochs"])
        numbers[name] = {"test_accuracy": result["test_accuracy"],
                         "test_loss": result["test_loss"],
                         "final_train_loss": result["final_train_loss"]}
    return numbers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="the students' epochs")
    parser.add_argument("--teacher-epochs", type=int, default=TEACHER_EPOCHS)
    parser.add_argument("--threads", type=int, default=1, help="PyTorch's CPU threads")
    parser.add_argument("--json", help="write the settings, every run and the contrasts here")
    parser.add_argument("--canary", action="store_true",
                        help="run only the canary slice (seed 0, a few epochs, one thread) and "
                             "print its numbers")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    for name, value in (("--epochs", args.epochs), ("--teacher-epochs", args.teacher_epochs),
                        ("--threads", args.threads)):
        if value < 1:
            parser.error(f"{name} must be at least 1, got {value}")
    if args.canary:
        experiment.one_thread()
        return experiment.print_canary(canary_numbers())
    torch.set_num_threads(args.threads)
    clock = experiment.CpuClock()
    settings = {"student": STUDENT, "teacher": "SmallCNN", "seeds": args.seeds,
                "n_train": N_TRAIN, "n_val": N_VAL, "epochs": args.epochs,
                "teacher_epochs": args.teacher_epochs, "batch_size": BATCH,
                "weight_decay": WEIGHT_DECAY, "label_smoothing": LABEL_SMOOTHING,
                "lr_grid": list(LR_GRID), "teacher_lr_grid": list(TEACHER_LR_GRID),
                "augment": AUGMENT, "soft": SOFT, "swap": list(SWAP),
                "view_passes": VIEW_PASSES,
                "conditions": {k: {"model_kwargs": v[0], "loss": v[1]}
                               for k, v in CONDITIONS.items()},
                "primary": {"a": PRIMARY[0], "b": PRIMARY[1], "metric": "test_accuracy"},
                "secondary": [{"a": a, "b": b} for a, b in SECONDARY],
                "positive_control": {"a": POSITIVE_CONTROL[0], "b": POSITIVE_CONTROL[1]},
                "notes": NOTES}
    data = experiment.header("distillation", argv, settings)
    tuned = tune(epochs=args.epochs, teacher_epochs=args.teacher_epochs)
    rates = tuned["rates"]
    print(f"{experiment.stamp()} rates: {rates}", flush=True)
    per_seed = []
    for seed in args.seeds:
        done = {k: tuned[k] for k in ("data", "teacher", "students")} if seed == 0 else None
        per_seed.append(one_seed(seed, rates, args.epochs, args.teacher_epochs, done))
    data.update({"tuning": {"grid": tuned["grid"], "rates": rates},
                 **summarise(per_seed),
                 "images": per_seed[0]["images"]})
    if args.json:
        experiment.one_thread()
        data["canary"] = experiment.canary_record("bench_distillation.py",
                                                  experiment.print_canary(canary_numbers()))
    experiment.finish(data, clock)
    return experiment.report(data, args.json)


if __name__ == "__main__":
    main()
