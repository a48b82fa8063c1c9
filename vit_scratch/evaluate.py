"""Evaluate a trained model: accuracy, top-k, per-class precision and recall, the confusion
matrix.

    python -m vit_scratch.evaluate runs/pets                      # the run's own test split
    python -m vit_scratch.evaluate runs/pets --data new_pictures/ # every picture of a folder
    python -m vit_scratch.evaluate runs/pets/best.safetensors --data new_pictures/

RUN is a run folder (its selected checkpoint, ``--checkpoint`` to choose) or a checkpoint file
alone (its metadata names the model, the preprocessing and the classes).  ``--data``: a folder
with one subfolder per class, whose pictures are all evaluated, or a built-in data set
(``digits``), whose test split is; without it, the run's own test split (the same
``--test-fraction`` and ``--split-seed``).  The data's classes must be the checkpoint's.

Writes into ``--out`` (default: RUN/evaluation): ``evaluation.json`` (every number below),
``per_class.csv`` (precision, recall, F1 and support of each class, then their macro and weighted
averages), ``confusion_matrix.csv`` (rows: true class, columns: predicted) and
``confusion_matrix.png``; prints the table.  Accuracy, balanced accuracy (the mean recall: on
unbalanced data, what a model that ignores the small classes cannot fake), top-k accuracy; a
class the model never predicted is named in a warning (its precision is undefined).

The metrics are scikit-learn's (``confusion_matrix``, ``precision_recall_fscore_support``,
``top_k_accuracy_score``, ``accuracy_score``) and the figure its ``ConfusionMatrixDisplay`` --
infrastructure, not teaching code.
"""
from __future__ import annotations

import argparse
import csv
import warnings
from pathlib import Path

import numpy as np
import torch

from . import run_folder
from .data import DATASETS, image_folder, make_datasets
from .extras import require


@torch.no_grad()
def predict_dataset(model, dataset, device="cpu", batch_size: int = 256,
                    workers: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(probabilities (N, classes), labels (N,))`` of ``model`` over a dataset of
    ``(image, label)``."""
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    model.eval()
    probs, labels = [], []
    for images, y in loader:
        probs.append(model(images.to(device)).float().softmax(-1).cpu())
        labels.append(y)
    return torch.cat(probs).numpy(), torch.cat(labels).numpy()


def metrics(probs: np.ndarray, labels: np.ndarray, class_names: list[str],
            top_k: int = 5) -> dict:
    """Accuracy, balanced accuracy (the mean of the per-class recalls), top-k accuracy,
    per-class precision / recall / F1 / support with their macro averages (each class counts
    the same) and weighted averages (each class by its support), the confusion matrix (rows:
    true class, columns: predicted), and the classes that were never predicted (whose precision
    is undefined: reported as 0, and named in ``never_predicted``), with scikit-learn."""
    sk = require("sklearn.metrics", "the evaluation metrics")
    n = len(class_names)
    classes = list(range(n))
    predicted = probs.argmax(1)
    k = max(1, min(top_k, n - 1))  # top-n would always be 1
    precision, recall, f1, support = sk.precision_recall_fscore_support(
        labels, predicted, labels=classes, zero_division=0)
    averages = {}
    for average in ("macro", "weighted"):
        p, r, f, _ = sk.precision_recall_fscore_support(labels, predicted, labels=classes,
                                                        average=average, zero_division=0)
        averages[average] = {"precision": float(p), "recall": float(r), "f1": float(f)}
    present = support > 0
    counts = np.bincount(predicted, minlength=n)
    return {
        "images": int(len(labels)),
        "accuracy": float(sk.accuracy_score(labels, predicted)),
        "balanced_accuracy": float(recall[present].mean()) if present.any() else 0.0,
        "top_k": k,
        "top_k_accuracy": float(sk.top_k_accuracy_score(labels, probs, k=k, labels=classes))
        if k > 1 else float(sk.accuracy_score(labels, predicted)),
        "per_class": [{"class": name, "precision": float(p), "recall": float(r), "f1": float(f),
                       "support": int(s)}
                      for name, p, r, f, s in zip(class_names, precision, recall, f1, support)],
        "macro_average": averages["macro"],
        "weighted_average": averages["weighted"],
        "never_predicted": [name for name, c in zip(class_names, counts) if c == 0],
        "confusion_matrix": sk.confusion_matrix(labels, predicted, labels=classes).tolist(),
        "classes": list(class_names),
    }


def evaluation_data(source: Path, model, data=None, bad_images: str | None = None):
    """The dataset to evaluate: ``data`` a folder (all its pictures) or a built-in name (its
    test split), or without ``data`` the run's own test split.  Its classes must be the
    model's.  ``bad_images``: pictures that do not decode, ``'error'`` or ``'skip'`` (default:
    the run's own setting, else ``'error'``)."""
    saved = run_folder.read_settings(source) if (source / run_folder.SETTINGS).exists() \
        else None
    s = saved["settings"] if saved else {"test_fraction": 0.2, "split_seed": 0}
    bad_images = bad_images or s.get("bad_images", "error")
    if data is None:
        if saved is None:
            raise ValueError(f"{str(source)!r} is a checkpoint file alone: say which pictures "
                             f"to evaluate with --data")
        data = s["data"]
        if data not in DATASETS and not Path(data).is_dir():
            raise ValueError(f"the run's data {data!r} is not here: pass --data")
        dataset = make_datasets(data, model, s["test_fraction"], s["split_seed"],
                                bad_images=bad_images)[-1]
    elif str(data) in DATASETS:
        dataset = make_datasets(str(data), model, s["test_fraction"], s["split_seed"])[-1]
    elif Path(data).is_dir():
        dataset = image_folder(data, model, bad_images)
    else:
        raise ValueError(f"--data {str(data)!r}: not a built-in data set ({', '.join(DATASETS)}) "
                         f"and not a folder")
    classes = [str(c) for c in dataset.classes]
    if classes != list(model.class_names):
        raise ValueError(f"the data's classes {classes} are not the checkpoint's "
                         f"{list(model.class_names)}: evaluate on pictures of the classes the "
                         f"model was trained on (one subfolder per class, the same names)")
    return dataset


def evaluate_run(run, data=None, out=None, top_k: int = 5, device: str = "cpu",
                 batch_size: int = 256, log=print, bad_images: str | None = None) -> dict:
    """Evaluate the model of ``run`` (a run folder or a checkpoint file) on ``data``; write the
    files into ``out`` (default: RUN/evaluation, or beside the checkpoint file) and return the
    numbers (:func:`metrics`, plus ``checkpoint`` and ``data``).  A class the model never
    predicted is named in a warning (its precision is undefined, reported as 0)."""
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"--top-k must be a positive integer, got {top_k!r}")
    if bad_images not in (None, "error", "skip"):
        raise ValueError(f"--bad-images must be 'error' or 'skip', got {bad_images!r}")
    model, checkpoint, source = run_folder.open_run(run, device)
    dataset = evaluation_data(source, model, data, bad_images)
    probs, labels = predict_dataset(model, dataset, device, batch_size)
    result = {**metrics(probs, labels, model.class_names, top_k),
              "checkpoint": str(checkpoint), "data": str(data) if data else "the run's test split"}
    if result["never_predicted"]:
        warnings.warn(f"the model never predicted {', '.join(result['never_predicted'])} on "
                      f"these {result['images']} pictures: their precision is undefined "
                      f"(reported as 0)", stacklevel=2)
    out = Path(out) if out is not None else source / run_folder.EVALUATION
    out.mkdir(parents=True, exist_ok=True)
    write_evaluation(result, out)
    log(report(result))
    log(f"-> {out}")
    return result


def write_evaluation(result: dict, out: Path) -> None:
    """evaluation.json, per_class.csv, confusion_matrix.csv and confusion_matrix.png."""
    run_folder.write_json(result, out / "evaluation.json")
    with open(out / "per_class.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["class", "precision", "recall", "f1", "support"])
        writer.writeheader()
        writer.writerows(result["per_class"])
        for name in ("macro", "weighted"):
            writer.writerow({"class": f"{name} average", **result[f"{name}_average"],
                             "support": result["images"]})
    with open(out / "confusion_matrix.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["true \\ predicted", *result["classes"]])
        for name, row in zip(result["classes"], result["confusion_matrix"]):
            writer.writerow([name, *row])
    try:
        save_confusion_matrix(result, out / "confusion_matrix.png")
    except ModuleNotFoundError as error:
        import warnings

        warnings.warn(f"confusion_matrix.png not drawn: {error}", stacklevel=2)


def save_confusion_matrix(result: dict, path) -> None:
    """scikit-learn's ``ConfusionMatrixDisplay`` into a PNG file (without pyplot)."""
    display = require("sklearn.metrics", "the confusion-matrix figure").ConfusionMatrixDisplay
    require("matplotlib", "the confusion-matrix figure")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(result["classes"])
    fig = Figure(figsize=(2.5 + 0.45 * n, 2 + 0.45 * n))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    display(np.asarray(result["confusion_matrix"]), display_labels=result["classes"]).plot(
        ax=ax, colorbar=False, xticks_rotation=45 if n > 6 else "horizontal")
    ax.set_title(f"accuracy {result['accuracy']:.4f} on {result['images']} pictures",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(str(path), dpi=100)


def report(result: dict) -> str:
    """The numbers as a text table."""
    width = max(16, *(len(c) for c in result["classes"]))
    lines = [f"accuracy {result['accuracy']:.4f}, balanced accuracy "
             f"{result['balanced_accuracy']:.4f}, top-{result['top_k']} "
             f"{result['top_k_accuracy']:.4f} on {result['images']} pictures "
             f"({result['checkpoint']})",
             f"{'class':<{width}}  precision  recall      f1  support"]
    for row in result["per_class"]:
        lines.append(f"{row['class']:<{width}}  {row['precision']:9.4f}  {row['recall']:6.4f}  "
                     f"{row['f1']:.4f}  {row['support']:7d}")
    for name in ("macro", "weighted"):
        row = result[f"{name}_average"]
        lines.append(f"{name + ' average':<{width}}  {row['precision']:9.4f}  "
                     f"{row['recall']:6.4f}  {row['f1']:.4f}  {result['images']:7d}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.evaluate", description=__doc__.split("\n\n")[0],
        formatter_class=run_folder.HelpFormatter)
    parser.add_argument("run", metavar="RUN",
                        help="a run folder (its selected checkpoint) or a checkpoint file")
    parser.add_argument("--data", metavar="NAME|DIR", default=None,
                        help="a folder of class subfolders (all its pictures) or a built-in data "
                             "set (its test split) (default: the run's own test split)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="where the files go (default: RUN/evaluation, or beside a "
                             "checkpoint file)")
    parser.add_argument("--top-k", type=int, default=5, metavar="K",
                        help="top-k accuracy: the true class among the K most probable (K is "
                             "kept below the number of classes)")
    parser.add_argument("--bad-images", choices=("error", "skip"), default=None,
                        help="pictures that do not decode: 'error' refuses them, naming them; "
                             "'skip' leaves them out with a warning naming them (default: the "
                             "run's own setting, else 'error')")
    parser.add_argument("--batch-size", type=int, default=256, metavar="N",
                        help="pictures per forward pass")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        metavar="DEVICE", help="'cpu', 'cuda', 'cuda:N' or 'mps'")
    return parser


def main(argv=None) -> dict:
    return run_folder.run_command(build_parser(), argv, lambda a: evaluate_run(
        a.run, a.data, a.out, a.top_k, a.device, a.batch_size, bad_images=a.bad_images))


if __name__ == "__main__":
    main()
