"""Benchmark: DeiT's hard distillation on scikit-learn's digits -- the same student trained with
and without a teacher, over several random seeds.

    python benchmarks/bench_distillation.py                          # 5 seeds, about 20 CPU minutes
    python benchmarks/bench_distillation.py --seeds 0 --student-epochs 4 --teacher-epochs 4
    python benchmarks/bench_distillation.py --threads 1 --json benchmarks/results/distillation.json

The last line writes ``benchmarks/results/distillation.json``, the one source of the numbers
notebook 11 shows.  For every seed s, with ``--seed s --split-seed s`` and otherwise the trainer's
defaults (the digits recipe: 20% of each class held out for the test, 10% of the rest for
validation, which selects the epoch whose weights are tested once):

* the teacher: ``coat_lite_digits`` (convolutions in its patch embeddings and position
  encodings), trained first on the same split -- it never sees the test images;
* ``class token``: ``vit_digits`` as the course trains it, labels only;
* ``distillation token, labels only``: ``vit_digits --model-arg distilled=True``, the same
  student with the distillation token and head, trained on the labels alone (both heads learn
  the labels through their average);
* ``distillation token + teacher``: the same, ``--teacher`` the seed's teacher: hard
  distillation, ½ · CE(class head, labels) + ½ · CE(distillation head, teacher's argmax).

For each teacher also ``labels_on_training_views``: how often its predicted class is the label
on the student's augmented training images, as the trainer shows them to it -- where that is
near 1, the distillation head's targets are nearly the labels.

Reported per condition: test accuracy, its agreement with the teacher (the share of test images
where the student predicts what the teacher predicts: DeiT's Table 4 asks the same), and the CPU
time (user + system of the process, all threads); for the distilled students also each head
alone (DeiT's Table 3) and, per run, the cosine similarity of the class and distillation tokens
at the input and after each block (``token_similarity``, averaged over the test images).
``paired`` holds the per-seed differences between the conditions (the same split, the same
initialisation seed).  Mean ± standard deviation over the seeds (ddof=1).  A script, never a
test.
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from vit_scratch.data import make_datasets
from vit_scratch.run_folder import load_model
from vit_scratch.train import TrainSettings, train

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402  (benchmarks/experiment.py: the results file)

TEACHER = "coat_lite_digits"
STUDENT = "vit_digits"
#: condition -> (model_kwargs, uses the teacher)
CONDITIONS = {
    "class token": ({}, False),
    "distillation token, labels only": ({"distilled": True}, False),
    "distillation token + teacher": ({"distilled": True}, True),
}


def summary(values: list[float]) -> dict:
    return {"mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0}


@torch.no_grad()
def test_predictions(model, seed: int) -> dict[str, np.ndarray]:
    """The model's predicted classes on the seed's test split (in its own preprocessing), and
    for a distilled model each head's alone; ``"labels"``: the truth."""
    _, test_set = make_datasets("digits", model, 0.2, seed)
    images, labels = test_set.tensors
    model.eval()
    out = {"labels": labels.numpy(), "model": model(images).argmax(-1).numpy()}
    if hasattr(model, "head_dist"):
        features = model.forward_features(images)
        out["class head"] = model.head(features[:, 0]).argmax(-1).numpy()
        out["distillation head"] = model.head_dist(features[:, 1]).argmax(-1).numpy()
        out["token similarity"] = token_similarity(model, images)
    return out


@torch.no_grad()
def token_similarity(model, images) -> list[float]:
    """The cosine similarity of the class and distillation tokens, averaged over the images: at
    the input (the learned tokens plus their positions), then after each block (DeiT §4 follows
    it through the network)."""
    x = model.embed(images)  # (B, 2 + N, C)
    sims = [torch.nn.functional.cosine_similarity(x[:, 0], x[:, 1], dim=-1).mean().item()]
    for block in model.blocks:
        x = block(x)
        sims.append(torch.nn.functional.cosine_similarity(x[:, 0], x[:, 1], dim=-1).mean().item())
    return sims


@torch.no_grad()
def teacher_on_training_views(folder: Path, seed: int, passes: int = 3) -> float:
    """How often the teacher's class is the label on the student's training images as the
    trainer feeds them: augmented (the trainer's ``random_affine``), seen through the teacher's
    preprocessing (``distillation.Teacher``); over ``passes`` random augmentations.  Where it is
    near 1, hard distillation gives the distillation head nearly the labels themselves."""
    from vit_scratch import create_model
    from vit_scratch.data import random_affine
    from vit_scratch.training.distillation import Teacher

    student = create_model(STUDENT, distilled=True)
    teacher = Teacher(load_model(folder), student.pretrained_cfg)
    train_set, _, _ = make_datasets("digits", student, 0.2, seed, val_fraction=0.1)
    images, labels = train_set.tensors
    s, g = TrainSettings(), torch.Generator().manual_seed(seed)
    hits = [(teacher(random_affine(images, s.rotate, s.translate, s.scale, g)) == labels)
            .float().mean().item() for _ in range(passes)]
    return float(np.mean(hits))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--teacher-epochs", type=int, default=20,
                        help="the teacher's epochs (bench_digits.py's for coat_lite_digits)")
    parser.add_argument("--student-epochs", type=int, default=TrainSettings().epochs)
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads for PyTorch, the trainer's --threads (0: its default)")
    parser.add_argument("--json", help="write the summary and every run's numbers to this file")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    common = dict(data="digits", device="cpu", threads=args.threads, progress="off")

    teacher_runs, runs = [], {name: [] for name in CONDITIONS}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            folder = Path(tmp) / f"teacher-{seed}"
            result = train(TrainSettings(model=TEACHER, epochs=args.teacher_epochs, seed=seed,
                                         split_seed=seed, out=str(folder), **common),
                           log=lambda *_: None)
            teacher = test_predictions(load_model(folder), seed)
            on_views = teacher_on_training_views(folder, seed)
            teacher_runs.append({"seed": seed, "test_accuracy": result["test_accuracy"],
                                 "labels_on_training_views": on_views,
                                 "cpu_seconds": result["cpu_seconds"]})
            print(f"{'teacher ' + TEACHER:<34} seed {seed}: {result['test_accuracy']:.4f}  "
                  f"{result['cpu_seconds']:.1f} s CPU", flush=True)
            for name, (kwargs, taught) in CONDITIONS.items():
                result = train(TrainSettings(
                    model=STUDENT, model_kwargs=dict(kwargs), epochs=args.student_epochs,
                    seed=seed, split_seed=seed, out=None,
                    teacher=str(folder) if taught else None, **common), log=lambda *_: None)
                pred = test_predictions(result["model"], seed)
                assert np.array_equal(pred["labels"], teacher["labels"])  # the same test images
                run = {"seed": seed, "test_accuracy": result["test_accuracy"],
                       "agreement_with_teacher": float((pred["model"] == teacher["model"]).mean()),
                       "cpu_seconds": result["cpu_seconds"], "params": result["params"]}
                for head in ("class head", "distillation head"):
                    if head in pred:
                        run[f"{head} accuracy"] = float((pred[head] == pred["labels"]).mean())
                if "token similarity" in pred:
                    run["token_similarity"] = pred["token similarity"]
                runs[name].append(run)
                print(f"{name:<34} seed {seed}: {run['test_accuracy']:.4f}  agrees with the "
                      f"teacher on {run['agreement_with_teacher']:.4f}  "
                      f"{run['cpu_seconds']:.1f} s CPU", flush=True)

    def keys(entries):
        return [k for k in entries[0] if k not in ("seed", "params", "token_similarity")]

    conditions = {name: {"model": STUDENT, "model_kwargs": CONDITIONS[name][0],
                         "teacher": CONDITIONS[name][1], "params": entries[0]["params"],
                         **{k: summary([r[k] for r in entries]) for k in keys(entries)},
                         "runs": entries}
                  for name, entries in runs.items()}
    names = list(CONDITIONS)
    paired = {}
    for a, b in [(names[2], names[1]), (names[2], names[0]), (names[1], names[0])]:
        for key in ("test_accuracy", "agreement_with_teacher"):
            diffs = [x[key] - y[key] for x, y in zip(runs[a], runs[b])]
            paired[f"{key}: {a} - {b}"] = {**summary(diffs), "per_seed": diffs}
    data = {
        "benchmark": "distillation",
        "written_by": "python benchmarks/bench_distillation.py " + shlex.join(
            sys.argv[1:] if argv is None else argv),
        "settings": {"seeds": args.seeds, "threads": args.threads or torch.get_num_threads(),
                     "device": "cpu", "torch": str(torch.__version__), "data": "digits",
                     "test_fraction": 0.2, "teacher": {"model": TEACHER,
                                                       "epochs": args.teacher_epochs},
                     "student": {"model": STUDENT, "epochs": args.student_epochs}},
        "teacher": {**{k: summary([r[k] for r in teacher_runs])
                       for k in ("test_accuracy", "labels_on_training_views", "cpu_seconds")},
                    "runs": teacher_runs},
        "conditions": conditions,
        "paired": paired,
    }
    return experiment.report(data, args.json)


if __name__ == "__main__":
    main()
