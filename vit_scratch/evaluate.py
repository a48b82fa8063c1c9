"""Evaluate a trained model: accuracy, top-k, per-class precision and recall, the confusion
matrix, and the misclassified pictures of each class.

    python -m vit_scratch.evaluate runs/pets                      # the run's own test split
    python -m vit_scratch.evaluate runs/pets --data new_pictures/ # every picture of a folder
    python -m vit_scratch.evaluate runs/pets/best.safetensors --data new_pictures/

RUN is a run folder (the checkpoint its ``--select`` chose) or a checkpoint file alone (its
metadata names the model, the preprocessing and the classes).  ``--data``: a folder with one
subfolder per class, whose pictures are all evaluated, or a built-in data set (``digits``),
whose test split is; without it, the run's own test split (the same ``--test-fraction`` and
``--split-seed``).  The data's classes must be the checkpoint's.

Writes into ``--out`` (a folder; default: RUN/evaluation): ``evaluation.json`` (every number
below), ``per_class.csv`` (precision, recall, F1 and support of each class, then their macro and
weighted averages), ``confusion_matrix.csv`` (rows: true class, columns: predicted),
``confusion_matrix.png``, and ``misclassified.png`` and ``misclassified.csv`` (for each class,
the ``--gallery`` pictures it got wrong that the model found least likely to be what they are,
with the classes it gave them); prints the table and the confusion matrix.  Accuracy, balanced
accuracy (the mean recall: on unbalanced data, what a model that ignores the small classes
cannot fake), top-k accuracy (when the data has more than k classes); a class the model never
predicted is named in a warning (its precision is undefined).

The metrics are scikit-learn's (``confusion_matrix``, ``precision_recall_fscore_support``,
``top_k_accuracy_score``, ``accuracy_score``) and the figure its ``ConfusionMatrixDisplay`` --
infrastructure, not teaching code; the gallery is drawn with matplotlib.
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
    if len(dataset) == 0:
        raise ValueError("no pictures to evaluate: the data set is empty")
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers)
    model.eval()
    probs, labels = [], []
    for images, y in loader:
        probs.append(model(images.to(device)).float().softmax(-1).cpu())
        labels.append(y)
    return torch.cat(probs).numpy(), torch.cat(labels).numpy()


def metrics(probs: np.ndarray, labels: np.ndarray, class_names: list[str],
            top_k: int = 5) -> dict:
    """Accuracy, balanced accuracy (the mean of the per-class recalls), top-k accuracy (only
    when ``top_k`` is below the number of classes: top-n of n classes is always 1; else
    ``top_k`` and ``top_k_accuracy`` are ``None``), per-class precision / recall / F1 / support
    with their macro averages (each class counts the same) and weighted averages (each class
    by its support), the confusion matrix (rows: true class, columns: predicted), and the
    classes that were never predicted (whose precision is undefined: reported as 0, and named
    in ``never_predicted``), with scikit-learn."""
    sk = require("sklearn.metrics", "the evaluation metrics")
    n = len(class_names)
    classes = list(range(n))
    predicted = probs.argmax(1)
    k = top_k if top_k < n else None
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
        "top_k_accuracy": None if k is None else float(sk.accuracy_score(labels, predicted))
        if k == 1 else float(sk.top_k_accuracy_score(labels, probs, k=k, labels=classes)),
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


#: ``--top-k``'s default; left out, without a word, when the data has no more classes.
TOP_K = 5
#: ``--gallery``'s default: the misclassified pictures drawn per class.
GALLERY = 4
#: The gallery draws at most this many classes (those with the most mistakes); the table
#: ``misclassified.csv`` lists them all.
GALLERY_MAX_CLASSES = 20


def evaluate_run(run, data=None, out=None, top_k: int | None = None, device: str = "cpu",
                 batch_size: int = 256, log=print, bad_images: str | None = None,
                 gallery: int = GALLERY) -> dict:
    """Evaluate the model of ``run`` (a run folder or a checkpoint file) on ``data``; write the
    files into ``out`` (default: RUN/evaluation, or beside the checkpoint file) and return the
    numbers (:func:`metrics`, plus ``checkpoint``, ``data`` and ``misclassified``).  A class the
    model never predicted is named in a warning (its precision is undefined, reported as 0).
    ``top_k``: default :data:`TOP_K`, left out when the data has no more classes; a ``top_k``
    given that is not below the number of classes is left out with a warning.  ``gallery``:
    the misclassified pictures drawn per class, the least likely first
    (:func:`misclassified`; 0: none)."""
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"--top-k must be a positive integer, got {top_k!r}")
    if not isinstance(gallery, int) or gallery < 0:
        raise ValueError(f"--gallery must be an integer >= 0, got {gallery!r}")
    if bad_images not in (None, "error", "skip"):
        raise ValueError(f"--bad-images must be 'error' or 'skip', got {bad_images!r}")
    run_folder.check_output_folder(out, "evaluation.json, per_class.csv, ...")
    model, checkpoint, source = run_folder.open_run(run, device)
    dataset = evaluation_data(source, model, data, bad_images)
    probs, labels = predict_dataset(model, dataset, device, batch_size)
    n = len(model.class_names)
    if top_k is not None and top_k >= n:
        warnings.warn(f"--top-k {top_k}: the data has {n} classes, so the true class is always "
                      f"among the top {top_k}; top-k accuracy is left out (give K below {n})",
                      stacklevel=2)
    result = {**metrics(probs, labels, model.class_names, TOP_K if top_k is None else top_k),
              "checkpoint": str(checkpoint), "data": str(data) if data else "the run's test split"}
    result["misclassified"] = misclassified(probs, labels, model.class_names,
                                            picture_names(dataset), gallery)
    if result["never_predicted"]:
        warnings.warn(f"the model never predicted {', '.join(result['never_predicted'])} on "
                      f"these {result['images']} pictures: their precision is undefined "
                      f"(reported as 0)", stacklevel=2)
    out = Path(out) if out is not None else source / run_folder.EVALUATION
    out.mkdir(parents=True, exist_ok=True)
    write_evaluation(result, out)
    if result["misclassified"]:
        save_gallery(result, dataset, model, out / "misclassified.png")
    log(report(result))
    log(f"-> {out}")
    return result


def picture_names(dataset) -> list[str]:
    """Each item's file (a folder's pictures: ``samples``, through any ``Subset``), or
    ``"picture i"`` (its index) where the data set has no files."""
    from torch.utils.data import Subset

    if isinstance(dataset, Subset):
        inner = picture_names(dataset.dataset)
        return [inner[i] for i in dataset.indices]
    samples = getattr(dataset, "samples", None)
    if samples is not None:
        return [str(path) for path, _ in samples]
    return [f"picture {i}" for i in range(len(dataset))]


def misclassified(probs: np.ndarray, labels: np.ndarray, class_names: list[str],
                  names: list[str], per_class: int = GALLERY, top: int = 3) -> list[dict]:
    """The misclassified pictures the model found least likely to be what they are: for each
    true class, up to ``per_class`` of them, by the probability of their true class, lowest
    first (the largest losses, fastai's "top losses").  Each as ``{"index", "picture", "true",
    "true_probability", "top": [(class, probability), ...]}`` with its ``top`` most probable
    classes; classes in their order."""
    if per_class == 0:
        return []
    wrong = np.flatnonzero(probs.argmax(1) != labels)
    p_true = probs[wrong, labels[wrong]]
    wrong = wrong[np.lexsort((p_true, labels[wrong]))]  # by class, then least likely first
    classes = labels[wrong]
    first = np.searchsorted(classes, classes)  # where each class's run starts
    chosen = wrong[np.arange(len(wrong)) - first < per_class]
    best = np.argsort(-probs[chosen], axis=1, kind="stable")[:, :top]
    return [{"index": int(i), "picture": names[i], "true": class_names[labels[i]],
             "true_probability": float(probs[i, labels[i]]),
             "top": [(class_names[c], float(probs[i, c])) for c in row]}
            for i, row in zip(chosen.tolist(), best)]


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
    (out / "misclassified.png").unlink(missing_ok=True)  # an earlier evaluation's
    with open(out / "misclassified.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["picture", "true class", "true class probability", "top classes"])
        for row in result["misclassified"]:
            writer.writerow([row["picture"], row["true"], f"{row['true_probability']:.4f}",
                             "; ".join(f"{c} {p:.4f}" for c, p in row["top"])])
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


def save_gallery(result: dict, dataset, model, path) -> None:
    """``misclassified.png``: a row per class (at most :data:`GALLERY_MAX_CLASSES`, those with
    the most mistakes), its misclassified pictures as the model saw them, the least likely
    first, each titled with the classes the model gave it; skipped with a warning without
    matplotlib."""
    try:
        require("matplotlib", "the gallery of misclassified pictures")
    except ModuleNotFoundError as error:
        warnings.warn(f"{Path(path).name} not drawn: {error}", stacklevel=2)
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from .plotting import show_image, unnormalize

    rows = {}
    for item in result["misclassified"]:
        rows.setdefault(item["true"], []).append(item)
    mistakes = dict(zip(result["classes"], (sum(r) - r[i] for i, r in enumerate(
        result["confusion_matrix"]))))
    shown = sorted(rows, key=lambda c: -mistakes[c])[:GALLERY_MAX_CLASSES]
    shown = [c for c in result["classes"] if c in shown]  # in the classes' order
    columns = max(len(rows[c]) for c in shown)
    fig = Figure(figsize=(1.9 * columns + 0.4, 2.1 * len(shown) + 0.5), layout="constrained")
    FigureCanvasAgg(fig)
    axes = np.asarray(fig.subplots(len(shown), columns, squeeze=False))
    for ax in axes.ravel():
        ax.set_axis_off()
    for r, name in enumerate(shown):
        for c, item in enumerate(rows[name]):
            image = np.clip(unnormalize(dataset[item["index"]][0], model), 0.0, 1.0)
            if image.shape[0] == 1:
                image = image.repeat(3, 0)
            guesses = "\n".join(f"{cls} {p:.2f}" for cls, p in item["top"][:2])
            show_image(image, axes[r, c], f"{Path(item['picture']).name}\n{guesses}\n"
                                          f"(true: {name} {item['true_probability']:.2f})")
            axes[r, c].title.set_fontsize(7)
    more = len(rows) - len(shown)
    fig.suptitle(f"misclassified, least likely first, per true class"
                 f"{f' ({more} more classes in misclassified.csv)' if more else ''}",
                 fontsize=9)
    fig.savefig(str(path), dpi=100)


def confusion_table(result: dict) -> list[str]:
    """The confusion matrix as text: a row per true class, a column per predicted class."""
    names, matrix = result["classes"], result["confusion_matrix"]
    width = max(len(str(v)) for row in matrix for v in row)
    columns = [max(width, len(name)) for name in names]
    corner = "true \\ predicted"
    first = max(len(corner), *(len(name) for name in names))
    lines = [f"{corner:<{first}}  " + "  ".join(
        f"{name:>{w}}" for name, w in zip(names, columns))]
    for name, row in zip(names, matrix):
        lines.append(f"{name:<{first}}  " + "  ".join(
            f"{v:>{w}}" for v, w in zip(row, columns)))
    return lines


#: The confusion matrix is printed for at most this many classes (its CSV file has them all).
PRINTED_CONFUSION_CLASSES = 20


def report(result: dict) -> str:
    """The numbers as a text table: the accuracies, the classes' precision, recall, F1 and
    support with their averages, the confusion matrix, and where the misclassified pictures
    are."""
    width = max(16, *(len(c) for c in result["classes"]))
    top = (f", top-{result['top_k']} {result['top_k_accuracy']:.4f}"
           if result["top_k"] is not None else "")
    lines = [f"accuracy {result['accuracy']:.4f}, balanced accuracy "
             f"{result['balanced_accuracy']:.4f}{top} on {result['images']} pictures "
             f"({result['checkpoint']})",
             f"{'class':<{width}}  precision  recall      f1  support"]
    for row in result["per_class"]:
        lines.append(f"{row['class']:<{width}}  {row['precision']:9.4f}  {row['recall']:6.4f}  "
                     f"{row['f1']:.4f}  {row['support']:7d}")
    for name in ("macro", "weighted"):
        row = result[f"{name}_average"]
        lines.append(f"{name + ' average':<{width}}  {row['precision']:9.4f}  "
                     f"{row['recall']:6.4f}  {row['f1']:.4f}  {result['images']:7d}")
    if len(result["classes"]) <= PRINTED_CONFUSION_CLASSES:
        lines += ["confusion matrix (rows: true class, columns: predicted)",
                  *confusion_table(result)]
    else:
        lines.append(f"confusion matrix of {len(result['classes'])} classes: "
                     f"confusion_matrix.csv and .png")
    if result.get("misclassified"):
        lines.append(f"{len(result['misclassified'])} misclassified pictures, the least likely "
                     f"of each class first: misclassified.png, misclassified.csv")
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
    parser.add_argument("--top-k", type=int, default=None, metavar="K",
                        help=f"top-k accuracy: the true class among the K most probable, given "
                             f"only when the data has more than K classes (default: {TOP_K})")
    parser.add_argument("--gallery", type=int, default=GALLERY, metavar="N",
                        help="misclassified.png and misclassified.csv: for each class, the N "
                             "misclassified pictures the model found least likely to be what "
                             "they are, with the classes it gave them (0: none)")
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
        a.run, a.data, a.out, a.top_k, a.device, a.batch_size, bad_images=a.bad_images,
        gallery=a.gallery))


if __name__ == "__main__":
    main()
