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
``per_class.csv`` (precision, recall, F1 and support of each class), ``confusion_matrix.csv``
(rows: true class, columns: predicted) and ``confusion_matrix.png``; prints the table.

The metrics are scikit-learn's (``confusion_matrix``, ``precision_recall_fscore_support``,
``top_k_accuracy_score``) and the figure its ``ConfusionMatrixDisplay`` -- infrastructure, not
teaching code.
"""
from __future__ import annotations

import argparse
import csv
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
    """Accuracy, top-k accuracy, per-class precision / recall / F1 / support and the confusion
    matrix (rows: true class, columns: predicted), with scikit-learn."""
    sk = require("sklearn.metrics", "the evaluation metrics")
    n = len(class_names)
    classes = list(range(n))
    predicted = probs.argmax(1)
    k = max(1, min(top_k, n - 1))  # top-n would always be 1
    precision, recall, f1, support = sk.precision_recall_fscore_support(
        labels, predicted, labels=classes, zero_division=0)
    return {
        "images": int(len(labels)),
        "accuracy": float(sk.accuracy_score(labels, predicted)),
        "top_k": k,
        "top_k_accuracy": float(sk.top_k_accuracy_score(labels, probs, k=k, labels=classes))
        if k > 1 else float(sk.accuracy_score(labels, predicted)),
        "per_class": [{"class": name, "precision": float(p), "recall": float(r), "f1": float(f),
                       "support": int(s)}
                      for name, p, r, f, s in zip(class_names, precision, recall, f1, support)],
        "confusion_matrix": sk.confusion_matrix(labels, predicted, labels=classes).tolist(),
        "classes": list(class_names),
    }


def evaluation_data(source: Path, model, data=None):
    """The dataset to evaluate: ``data`` a folder (all its pictures) or a built-in name (its
    test split), or without ``data`` the run's own test split.  Its classes must be the
    model's."""
    saved = run_folder.read_settings(source) if (source / run_folder.SETTINGS).exists() \
        else None
    if data is None:
        if saved is None:
            raise ValueError(f"{str(source)!r} is a checkpoint file alone: say which pictures "
                             f"to evaluate with --data")
        s = saved["settings"]
        data = s["data"]
        if data not in DATASETS and not Path(data).is_dir():
            raise ValueError(f"the run's data {data!r} is not here: pass --data")
        dataset = make_datasets(data, model, s["test_fraction"], s["split_seed"],
                                bad_images=s.get("bad_images", "error"))[-1]
    elif str(data) in DATASETS:
        s = saved["settings"] if saved else {"test_fraction": 0.2, "split_seed": 0}
        dataset = make_datasets(str(data), model, s["test_fraction"], s["split_seed"])[-1]
    elif Path(data).is_dir():
        dataset = image_folder(data, model)
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
                 batch_size: int = 256, log=print) -> dict:
    """Evaluate the model of ``run`` (a run folder or a checkpoint file) on ``data``; write the
    files into ``out`` (default: RUN/evaluation, or beside the checkpoint file) and return the
    numbers (:func:`metrics`, plus ``checkpoint`` and ``data``)."""
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"--top-k must be a positive integer, got {top_k!r}")
    model, checkpoint, source = run_folder.open_run(run, device)
    dataset = evaluation_data(source, model, data)
    probs, labels = predict_dataset(model, dataset, device, batch_size)
    result = {**metrics(probs, labels, model.class_names, top_k),
              "checkpoint": str(checkpoint), "data": str(data) if data else "the run's test split"}
    out = Path(out) if out is not None else source / "evaluation"
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
    width = max(8, *(len(c) for c in result["classes"]))
    lines = [f"accuracy {result['accuracy']:.4f}, top-{result['top_k']} "
             f"{result['top_k_accuracy']:.4f} on {result['images']} pictures "
             f"({result['checkpoint']})",
             f"{'class':<{width}}  precision  recall     f1  support"]
    for row in result["per_class"]:
        lines.append(f"{row['class']:<{width}}  {row['precision']:9.4f}  {row['recall']:6.4f}  "
                     f"{row['f1']:.4f}  {row['support']:7d}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.evaluate", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("run", metavar="RUN", help="a run folder or a checkpoint file")
    parser.add_argument("--data", metavar="NAME|DIR", default=None,
                        help="a folder of class subfolders (all its pictures) or a built-in data "
                             "set (its test split); default: the run's own test split")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="where the files go (default: RUN/evaluation)")
    parser.add_argument("--top-k", type=int, default=5, metavar="K",
                        help="top-k accuracy (K below the number of classes)")
    parser.add_argument("--batch-size", type=int, default=256, metavar="N")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser


def main(argv=None) -> dict:
    return run_folder.run_command(build_parser(), argv, lambda a: evaluate_run(
        a.run, a.data, a.out, a.top_k, a.device, a.batch_size))


if __name__ == "__main__":
    main()
