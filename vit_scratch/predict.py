"""Predict the classes of pictures with a trained model, and show where it looked.

    python -m vit_scratch.predict runs/pets cat.jpg dog.png           # a run folder
    python -m vit_scratch.predict runs/pets new_pictures/              # every picture of a folder
    python -m vit_scratch.predict runs/pets/best.safetensors "new/*.jpg"   # a checkpoint, a glob
    python -m vit_scratch.predict runs/pets cat.jpg --attention      # and an attention map each

Prints each picture's top-k classes with their probabilities, and writes them into ``--out``
(default: RUN/predictions, or ``predictions/`` beside a checkpoint file): ``predictions.csv``
(a row per picture: its best class and probability, the top-k, the attention figure, or why it
could not be read) and ``predictions.json``, in place of an earlier call's (whose attention
figures go too; the command says so).  A picture named twice -- a folder and an overlapping
pattern -- is predicted once.  A picture that does not decode is left out with a
warning naming it (``--bad-images skip``, the default) or stops the command, naming every such
picture, before the model is loaded (``--bad-images error``).  A checkpoint written by the
trainer (or by ``vit_scratch.save_checkpoint`` from a model of ``create_model``) records the
model's name, config, preprocessing and class names in its metadata, so the file alone is
enough.

``--attention`` saves ``OUT/<picture>_attention.png``: the picture as the model saw it, and beside
it the same picture under the map the model's interface gives (``--alpha``: how opaque), with a
colour bar, the file and the predicted class in the title.  The map is chosen by what the model
can show, never by its family's name --

* attention rollout (Abnar & Zuidema, 2020) when every layer maps all tokens to all tokens
  (``get_attention_maps`` gives (B, heads, N, N) maps of one size: ViT, DeiT);
* otherwise, when ``get_attention_maps`` offers ``view="keys"`` (factorized attention, which has
  no N × N map: CoaT), the factorized view -- where a layer's key channels pool their values
  from (``plotting.factorized_attention_view``), averaged over heads and channels.  CoaT is a
  pyramid: its scales' grids shrink by half a side each (8 × 8, 4 × 4, 2 × 2, 1 × 1 for the
  small-folder recipe's 32 × 32 pictures), and a 1 × 1 grid shows nothing.  So the figure
  draws every scale whose grid has more than one token a side, side by side, each the last
  layer on that grid (:func:`attention_scales`), and :func:`attention_map` is the deepest of
  them;
* otherwise the last layer of ``get_attention_grids``, averaged over heads: for CaiT its last
  class-attention layer, the class token's weights over the patches.
"""
from __future__ import annotations

import argparse
import csv
import inspect
import json
import warnings
from pathlib import Path

import numpy as np
import torch

from . import run_folder
from .data import open_picture, preprocess


#: The picture files a folder is searched for (torchvision's ``ImageFolder`` reads the same).
PICTURE_SUFFIXES = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def find_pictures(items) -> list[Path]:
    """The picture files that ``items`` name: a file as it is, a folder's pictures (searched
    below it, sorted, by :data:`PICTURE_SUFFIXES`), a glob pattern's matches (``"new/*.jpg"``,
    when the shell did not expand it); each file once, where it was first named (a folder and a
    pattern that overlap, or a file named twice).  A ``ValueError`` for an item that names
    nothing, or when there is no picture in all."""
    import glob

    files = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            found = sorted(f for f in path.rglob("*")
                           if f.is_file() and f.suffix.lower() in PICTURE_SUFFIXES)
            if not found:
                raise ValueError(f"folder {str(path)!r} holds no pictures "
                                 f"({', '.join(PICTURE_SUFFIXES)})")
            files += found
        elif path.is_file():
            files.append(path)
        elif glob.has_magic(str(item)):
            found = sorted(Path(f) for f in glob.glob(str(item), recursive=True)
                           if Path(f).is_file())
            if not found:
                raise ValueError(f"{str(item)!r} matches no file")
            files += found
        else:
            raise ValueError(f"picture {str(item)!r}: no such file or folder")
    if not files:
        raise ValueError("no pictures to predict: name picture files, folders or patterns")
    seen = set()
    return [f for f in files if not (f.resolve() in seen or seen.add(f.resolve()))]


def load_pictures(paths, bad_images: str = "error") -> tuple[list, list, list[tuple[str, str]]]:
    """Decode every picture first, so that bad files are known before the model is loaded:
    ``(pictures, their paths, [(path, why) of those that do not decode])``.  With
    ``bad_images="error"`` those are a ``ValueError`` naming each of them; with ``"skip"``
    they are left out, with a warning naming them."""
    from .data import unreadable_pictures
    from .data.folders import bad_pictures_listed

    if bad_images not in ("error", "skip"):
        raise ValueError(f"--bad-images must be 'error' or 'skip', got {bad_images!r}")
    paths = [Path(p) for p in paths]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"picture {missing[0]!r}: no such file")
    bad = unreadable_pictures(paths)
    skipped = {p for p, _ in bad}
    good = [p for p in paths if str(p) not in skipped]
    if not good:
        raise ValueError(f"no picture could be decoded: {bad_pictures_listed(bad)}")
    if bad:
        listed = bad_pictures_listed(bad)
        if bad_images == "error":
            raise ValueError(f"{len(bad)} picture(s) cannot be decoded: {listed} (pass "
                             f"--bad-images skip to predict the others)")
        warnings.warn(f"left out {len(bad)} picture(s) that cannot be decoded: {listed}",
                      stacklevel=2)
    return [open_picture(p) for p in good], good, bad


@torch.no_grad()
def predict(model, pictures, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each picture (PIL images), the ``top_k`` ``(class name, probability)`` pairs,
    most probable first.  ``model``: from :func:`vit_scratch.run_folder.load_model`."""
    device = next(model.parameters()).device
    batch = torch.stack([torch.from_numpy(preprocess(p, model)) for p in pictures]).to(device)
    probs = model.eval()(batch).float().softmax(-1).cpu()
    k = min(top_k, probs.shape[-1])
    values, indices = probs.topk(k, dim=-1)
    return [[(model.class_names[i], float(v)) for v, i in zip(vs.tolist(), ix.tolist())]
            for vs, ix in zip(values, indices)]


def attention_map(model, images: torch.Tensor) -> tuple[np.ndarray, str]:
    """``(maps (B, gh, gw), what they are)`` for a batch of model inputs, through the model
    interface only (module docstring: rollout, the factorized view, or class attention)."""
    from . import plotting

    try:
        return plotting.attention_rollout_grid(model, images), "attention rollout"
    except ValueError:
        pass
    if "view" in inspect.signature(model.get_attention_maps).parameters:
        maps, label = attention_scales(model, images)[-1]
        return maps, f"factorized attention: where the keys of {label} pool from"
    grids = plotting.attention_grids(model, images)[-1]  # (B, heads, gh, gw)
    return grids.mean(axis=1), "the last layer's class attention"


def attention_scales(model, images: torch.Tensor) -> list[tuple[np.ndarray, str]]:
    """For a model with factorized attention (a pyramid: CoaT), ``[(maps (B, gh, gw), which
    layer)]`` for each of its grids with more than one token a side, coarsest last: the last
    layer on that grid, averaged over heads and channels (``plotting.factorized_attention_view``).
    A model whose every grid is 1 × 1 gives its last layer."""
    from . import plotting

    views = plotting.factorized_attention_view(model, images)  # per layer (B, heads, d, gh, gw)
    last_on_grid = {v.shape[-2:]: i for i, v in enumerate(views)}  # the last layer of each grid
    shown = [i for grid, i in last_on_grid.items() if min(grid) > 1] or [len(views) - 1]
    return [(views[i].mean(axis=(1, 2)),
             f"layer {i + 1} of {len(views)} ({views[i].shape[-2]} × {views[i].shape[-1]} tokens)")
            for i in sorted(shown)]


def save_attention(model, pictures, names, out: Path, predictions,
                   alpha: float = 0.5) -> list[Path]:
    """One figure per picture: the model's input, and beside it the same input under its
    attention map (``plotting.save_attention_figure``)."""
    from . import plotting

    device = next(model.parameters()).device
    batch = torch.stack([torch.from_numpy(preprocess(p, model)) for p in pictures]).to(device)
    maps, what = attention_map(model, batch)
    panels = None
    if "view" in inspect.signature(model.get_attention_maps).parameters:  # a pyramid's scales
        scales = attention_scales(model, batch)
        maps = list(zip(*(m for m, _ in scales)))  # per picture: one map per scale
        panels = [label for _, label in scales]
        what = "factorized attention: where each scale's keys pool from"
    images = plotting.unnormalize(batch.cpu(), model)  # (B, C, H, W) in about [0, 1]
    out.mkdir(parents=True, exist_ok=True)
    written, used = [], set()
    for image, attn, name, top in zip(images, maps, names, predictions):
        stem, n = Path(name).stem, 1
        while stem in used:  # cat/0.png and dog/0.png: 0_attention.png, 0-2_attention.png
            n += 1
            stem = f"{Path(name).stem}-{n}"
        used.add(stem)
        path = out / f"{stem}_attention.png"
        plotting.save_attention_figure(image, list(attn) if panels else attn, path, alpha=alpha,
                                       title=f"{Path(name).name}: {top[0][0]} {top[0][1]:.2f}",
                                       what=what, panel_titles=panels)
        written.append(path)
    return written


def predictions_folder(run, out=None) -> Path:
    """Where predictions go: ``out``, or RUN/predictions (a run folder), or ``predictions/``
    beside a checkpoint file."""
    if out is not None:
        return Path(out)
    run = Path(run)
    return (run if run.is_dir() else run.parent) / run_folder.PREDICTIONS


#: What a call of ``predict`` writes into its folder, besides the attention figures.
PREDICTION_FILES = ("predictions.csv", "predictions.json")


def clear_predictions(folder: Path) -> bool:
    """Remove what an earlier call wrote into ``folder``: predictions.csv, predictions.json
    and the attention figures its predictions.json lists (nothing else: the folder may be one
    of the student's own, ``--out``).  Returns whether there was anything."""
    folder = Path(folder)
    listed = folder / "predictions.json"
    rows = []
    if listed.is_file():
        try:
            rows = json.loads(listed.read_text())
        except ValueError:
            rows = []
    for row in rows if isinstance(rows, list) else []:
        figure = row.get("attention") if isinstance(row, dict) else None
        if isinstance(figure, str) and figure.endswith("_attention.png"):
            (folder / Path(figure).name).unlink(missing_ok=True)
    found = [folder / name for name in PREDICTION_FILES if (folder / name).is_file()]
    for path in found:
        path.unlink()
    return bool(found)


def smoothing_note(folder: Path, classes: int) -> str | None:
    """What label smoothing does to the probabilities, when the run in ``folder`` trained with
    it (its settings.json says so): the targets gave the true class ``1 - ε + ε / classes``,
    so even a sure prediction stays near that; ``None`` otherwise."""
    if not (Path(folder) / run_folder.SETTINGS).is_file():
        return None
    smoothing = run_folder.read_settings(folder)["settings"].get("label_smoothing") or 0.0
    if not 0.0 < smoothing < 1.0:
        return None
    top = 1.0 - smoothing + smoothing / classes
    return (f"the probabilities top out near {top:.2f}: the run trained with label smoothing "
            f"{smoothing:g}, whose targets give the true class 1 - {smoothing:g} + {smoothing:g}"
            f"/{classes} = {top:.2f}, not 1; the order of the classes is what counts")


def write_predictions(rows: list[dict], out: Path) -> None:
    """predictions.csv (a row per picture) and predictions.json."""
    out.mkdir(parents=True, exist_ok=True)
    run_folder.write_json(rows, out / "predictions.json")
    with open(out / "predictions.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["picture", "class", "probability", "top_k", "attention", "error"])
        for row in rows:
            best = row["top"][0] if row["top"] else ("", "")
            writer.writerow([row["picture"], best[0], f"{best[1]:.6f}" if row["top"] else "",
                             "; ".join(f"{c} {p:.4f}" for c, p in row["top"]),
                             row["attention"] or "", row["error"] or ""])


def predict_files(run, pictures, top_k: int = 5, attention: bool = False, out=None,
                  device: str = "cpu", log=print, bad_images: str = "skip",
                  alpha: float = 0.5) -> list[dict]:
    """:func:`predict` for pictures (files, folders, glob patterns: :func:`find_pictures`)
    with the model of ``run`` (a run folder or a checkpoint file); prints one line per picture
    and writes predictions.csv and predictions.json into ``out`` (default:
    :func:`predictions_folder`); ``attention``: also the figures, there.  Returns ``[{"picture",
    "top": [(class, probability), ...], "attention": path or None, "error": None or why}]``, a
    picture that does not decode (``bad_images="skip"``) with an empty ``top`` and its
    ``error``."""
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"--top-k must be a positive integer, got {top_k!r}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"--alpha must be in [0, 1], got {alpha!r}")
    run_folder.check_output_folder(out, "predictions.csv, predictions.json, the attention "
                                        "figures")
    images, names, bad = load_pictures(find_pictures(pictures), bad_images)
    model, _, source = run_folder.open_run(run, device)
    results = predict(model, images, top_k)
    folder = predictions_folder(run, out)
    if clear_predictions(folder):
        log(f"replacing the earlier predictions in {folder} (pass --out DIR to keep them)")
    maps = [None] * len(images)
    if attention:
        maps = save_attention(model, images, names, folder, results, alpha)
    rows = []
    for name, top, path in zip(names, results, maps):
        log(f"{name}: " + ", ".join(f"{c} {p:.3f}" for c, p in top)
            + (f"  (attention: {path})" if path else ""))
        rows.append({"picture": str(name), "top": top, "attention": str(path) if path else None,
                     "error": None})
    rows += [{"picture": p, "top": [], "attention": None, "error": why} for p, why in bad]
    write_predictions(rows, folder)
    note = smoothing_note(source, len(model.class_names))
    if note:
        log(note)
    log(f"-> {folder}")
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.predict", description=__doc__.split("\n\n")[0],
        formatter_class=run_folder.HelpFormatter)
    parser.add_argument("run", metavar="RUN",
                        help="a run folder (its selected checkpoint) or a checkpoint file")
    parser.add_argument("pictures", metavar="PICTURE", nargs="+",
                        help="picture files, folders (every picture below them) or glob "
                             "patterns ('new/*.jpg')")
    parser.add_argument("--top-k", type=int, default=5, metavar="K",
                        help="how many classes to show per picture, the most probable first")
    parser.add_argument("--attention", action="store_true",
                        help="also save each picture beside its attention map into --out")
    parser.add_argument("--alpha", type=float, default=0.5, metavar="A",
                        help="how opaque the attention map is over the picture, in [0, 1]")
    parser.add_argument("--bad-images", choices=("skip", "error"), default="skip",
                        help="pictures that do not decode: 'skip' leaves them out with a "
                             "warning naming them (and a row saying why); 'error' stops, "
                             "naming them")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="where predictions.csv, predictions.json and the attention figures "
                             "go, replacing those of an earlier call (default: RUN/predictions, "
                             "or predictions/ beside a checkpoint file)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        metavar="DEVICE", help="'cpu', 'cuda', 'cuda:N' or 'mps'")
    return parser


def main(argv=None) -> list[dict]:
    return run_folder.run_command(build_parser(), argv, lambda a: predict_files(
        a.run, a.pictures, a.top_k, a.attention, a.out, a.device, bad_images=a.bad_images,
        alpha=a.alpha))


if __name__ == "__main__":
    main()
