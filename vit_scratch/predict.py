"""Predict the classes of pictures with a trained model, and show where it looked.

    python -m vit_scratch.predict runs/pets cat.jpg dog.png           # a run folder
    python -m vit_scratch.predict runs/pets/best.safetensors *.jpg   # or a checkpoint file alone
    python -m vit_scratch.predict runs/pets cat.jpg --attention      # and an attention map each

Prints each picture's top-k classes with their probabilities.  A checkpoint written by the
trainer (or by ``vit_scratch.save_checkpoint`` from a model of ``create_model``) records the
model's name, config, preprocessing and class names in its metadata, so the file alone is
enough.

``--attention`` saves ``OUT/<picture>_attention.png``: the picture with the map the model's
interface gives, chosen by what the model can show, never by its family's name --

* attention rollout (Abnar & Zuidema, 2020) when every layer maps all tokens to all tokens
  (``get_attention_maps`` gives (B, heads, N, N) maps of one size: ViT, DeiT);
* otherwise, when ``get_attention_maps`` offers ``view="keys"`` (factorized attention, which has
  no N × N map: CoaT), the factorized view -- where the last layer's key channels pool their
  values from (``plotting.factorized_attention_view``), averaged over heads and channels;
* otherwise the last layer of ``get_attention_grids``, averaged over heads: for CaiT its last
  class-attention layer, the class token's weights over the patches.
"""
from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import numpy as np
import torch

from . import run_folder
from .data import open_picture, preprocess


def load_pictures(paths) -> list:
    """Decode every picture first, so that a file that is not a picture stops the command
    before the model is loaded (a ``ValueError`` naming it)."""
    pictures = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"picture {str(path)!r}: no such file")
        pictures.append(open_picture(path))
    return pictures


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
        view = plotting.factorized_attention_view(model, images)[-1]  # (B, heads, d, gh, gw)
        return view.mean(axis=(1, 2)), "factorized attention: where the last layer's keys pool from"
    grids = plotting.attention_grids(model, images)[-1]  # (B, heads, gh, gw)
    return grids.mean(axis=1), "the last layer's class attention"


def save_attention(model, pictures, names, out: Path, predictions) -> list[Path]:
    """One figure per picture: the model's input with its attention map over it."""
    from . import plotting
    from .extras import require

    require("matplotlib", "drawing attention maps (--attention)")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    device = next(model.parameters()).device
    batch = torch.stack([torch.from_numpy(preprocess(p, model)) for p in pictures]).to(device)
    maps, what = attention_map(model, batch)
    images = plotting.unnormalize(batch.cpu(), model)  # (B, C, H, W) in about [0, 1]
    out.mkdir(parents=True, exist_ok=True)
    written, used = [], set()
    for image, attn, name, top in zip(images, maps, names, predictions):
        if image.shape[0] == 1:
            image = image.repeat(3, 0)
        fig = Figure(figsize=(3.2, 3.6))
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        plotting.plot_attention_grid_overlay(image, attn, ax=ax)
        ax.set_title(f"{top[0][0]} {top[0][1]:.2f}\n{what}", fontsize=7)
        stem, n = Path(name).stem, 1
        while stem in used:  # cat/0.png and dog/0.png: 0_attention.png, 0-2_attention.png
            n += 1
            stem = f"{Path(name).stem}-{n}"
        used.add(stem)
        path = out / f"{stem}_attention.png"
        fig.savefig(str(path), dpi=100)
        written.append(path)
    return written


def predict_files(run, pictures, top_k: int = 5, attention: bool = False, out=None,
                  device: str = "cpu", log=print) -> list[dict]:
    """:func:`predict` for picture files with the model of ``run`` (a run folder or a
    checkpoint file); prints one line per picture; ``attention``: also the maps, into ``out``
    (default: ``predictions``).  Returns ``[{"picture", "top": [(class, probability), ...],
    "attention": path or None}]``."""
    if not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"--top-k must be a positive integer, got {top_k!r}")
    images = load_pictures(pictures)  # every picture decodes, before the model is loaded
    model, _, _ = run_folder.open_run(run, device)
    results = predict(model, images, top_k)
    maps = [None] * len(images)
    if attention:
        maps = save_attention(model, images, pictures, Path(out or "predictions"), results)
    rows = []
    for name, top, path in zip(pictures, results, maps):
        log(f"{name}: " + ", ".join(f"{c} {p:.3f}" for c, p in top)
            + (f"  (attention: {path})" if path else ""))
        rows.append({"picture": str(name), "top": top, "attention": str(path) if path else None})
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.predict", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("run", metavar="RUN", help="a run folder or a checkpoint file")
    parser.add_argument("pictures", metavar="PICTURE", nargs="+")
    parser.add_argument("--top-k", type=int, default=5, metavar="K")
    parser.add_argument("--attention", action="store_true",
                        help="save each picture's attention map into --out")
    parser.add_argument("--out", metavar="DIR", default="predictions",
                        help="where --attention's figures go")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser


def main(argv=None) -> list[dict]:
    return run_folder.run_command(build_parser(), argv, lambda a: predict_files(
        a.run, a.pictures, a.top_k, a.attention, a.out, a.device))


if __name__ == "__main__":
    main()
