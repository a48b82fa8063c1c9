"""Figures and the arrays behind them: patch grids, position-embedding similarity, attention.

Two kinds of functions:

* **arrays** from a model, through the model interface only (``get_attention_maps``,
  ``get_attention_grids``, ``pos_embed``), so they work for every family and in both rooms
  (a PyTorch model is run under ``torch.no_grad()``, results come back as NumPy arrays):
  ``attention_grids`` (every attention layer's readout on the patch grid: ViT's class-token
  rows, CaiT's class-attention maps), ``attention_rollout_grid`` (ViT), ``pos_embed_similarity``,
  ``factorized_attention_view`` (CoaT's key distributions), ``share_inside_boxes``;
* **figures**: every drawing function takes arrays (C, H, W images, (N, N) similarity,
  (heads, gh, gw) maps) and an optional matplotlib ``ax``, and returns the axes (or the figure)
  so a notebook can add titles.

Images are drawn as given: pass them in [0, 1] (``unnormalize`` undoes a model's mean/std).
"""
from __future__ import annotations

import inspect
from contextlib import nullcontext

import numpy as np
from einops import rearrange


def _axes(ax, figsize=(4, 4)):
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=figsize)
    return ax


def to_hwc(img: np.ndarray) -> np.ndarray:
    """(C, H, W) in [0, 1] -> (H, W, C) clipped, ready for ``imshow``."""
    return np.clip(np.asarray(img).transpose(1, 2, 0), 0.0, 1.0)


def show_image(img: np.ndarray, ax=None, title: str | None = None):
    ax = _axes(ax)
    ax.imshow(to_hwc(img))
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax


def draw_patch_grid(img: np.ndarray, patch_size: int, ax=None, title: str | None = None,
                    numbers: bool = False, color: str = "white"):
    """The image with the patch boundaries drawn on top (and each patch's raster index)."""
    ax = show_image(img, ax, title)
    _, h, w = img.shape
    for y in range(0, h + 1, patch_size):
        ax.axhline(y - 0.5, color=color, lw=0.8)
    for x in range(0, w + 1, patch_size):
        ax.axvline(x - 0.5, color=color, lw=0.8)
    if numbers:
        gw = w // patch_size
        for i in range(0, (h // patch_size) * gw):
            r, c = divmod(i, gw)
            ax.text((c + 0.5) * patch_size, (r + 0.5) * patch_size, str(i), color=color,
                    ha="center", va="center", fontsize=6)
    return ax


def patch_mosaic(patches: np.ndarray, grid, patch_size: int, gap: int = 2) -> np.ndarray:
    """Flattened patches (N, C·P·P) back into a picture with a gap between patches, as the
    (H', W', C) array ``imshow`` takes -- shows what the model actually receives."""
    gh, gw = grid
    tiles = rearrange(patches, "(gh gw) (c p1 p2) -> gh gw p1 p2 c", gh=gh, gw=gw,
                      p1=patch_size, p2=patch_size)
    tiles = np.pad(tiles, ((0, 0), (0, 0), (0, gap), (0, gap), (0, 0)), constant_values=1.0)
    return np.clip(rearrange(tiles, "gh gw p1 p2 c -> (gh p1) (gw p2) c"), 0.0, 1.0)


def similarity_mosaic(sim: np.ndarray, grid, gap: int = 1) -> np.ndarray:
    """(N, N) similarities -> one (gh·(gh+gap), gw·(gw+gap)) image: the tile at (r, c) is the
    similarity of patch (r, c)'s embedding with every patch, drawn on the patch grid (the
    figure of the ViT paper, Figure 7 (center), as one image instead of N subplots)."""
    gh, gw = grid
    tiles = rearrange(np.asarray(sim), "(r c) (y x) -> r c y x", r=gh, c=gw, y=gh, x=gw)
    tiles = np.pad(tiles, ((0, 0), (0, 0), (0, gap), (0, gap)), constant_values=np.nan)
    return rearrange(tiles, "r c y x -> (r y) (c x)")


def plot_similarity_grid(sim: np.ndarray, grid, ax=None, title: str | None = None,
                         vmin: float | None = -1.0, vmax: float | None = 1.0):
    """The similarity mosaic with a colour scale; ``vmin=None`` stretches it to the data
    (sin-cos similarities all lie in about [0.65, 1])."""
    ax = _axes(ax, figsize=(5, 5))
    image = ax.imshow(similarity_mosaic(sim, grid), cmap="viridis", vmin=vmin, vmax=vmax)
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return ax, image


def upsample_map(attn_map: np.ndarray, patch_size: int) -> np.ndarray:
    """(gh, gw) -> (gh·P, gw·P): one value per pixel, constant over each patch."""
    return np.kron(attn_map, np.ones((patch_size, patch_size), dtype=attn_map.dtype))


def plot_attention_overlay(img: np.ndarray, attn_map: np.ndarray, patch_size: int, ax=None,
                           title: str | None = None, alpha: float = 0.6, cmap: str = "inferno",
                           vmin: float | None = None, vmax: float | None = None):
    """An attention map over the patch grid (gh, gw), drawn over the image it came from.
    The colours stretch to the map's range unless ``vmin``/``vmax`` fix them (e.g. 0 and 1
    to compare maps on one scale)."""
    attn_map = np.asarray(attn_map, dtype=np.float32)
    _check_map_fits(attn_map, np.shape(img), patch_size)
    ax = show_image(img, ax, title)
    ax.imshow(upsample_map(attn_map, patch_size), cmap=cmap, alpha=alpha, vmin=vmin, vmax=vmax)
    return ax


def _check_map_fits(attn_map: np.ndarray, img_shape, patch_size: int) -> None:
    """A (gh, gw) map of patch_size² patches must cover a (C, H, W) image exactly."""
    if attn_map.ndim != 2 or len(img_shape) != 3:
        raise ValueError(f"expected a (gh, gw) map over a (C, H, W) image, got a map of shape "
                         f"{attn_map.shape} and an image of shape {tuple(img_shape)}")
    covered = (attn_map.shape[0] * patch_size, attn_map.shape[1] * patch_size)
    if covered != tuple(img_shape[1:]):
        raise ValueError(
            f"a {attn_map.shape[0]}×{attn_map.shape[1]} map of {patch_size}×{patch_size} patches "
            f"covers {covered[0]}×{covered[1]} pixels, but the image is {img_shape[1]}×"
            f"{img_shape[2]}: pass the image the map was computed from (or its patch_size)")


def upsample_to(attn_map: np.ndarray, size) -> np.ndarray:
    """(..., gh, gw) -> (..., H, W): each cell repeated over the H/gh × W/gw pixels it covers
    (H, W must be multiples of gh, gw)."""
    attn_map = np.asarray(attn_map)
    gh, gw = attn_map.shape[-2:]
    H, W = size
    if H % gh or W % gw:
        raise ValueError(f"a {gh}×{gw} map does not tile a {H}×{W} image")
    return attn_map.repeat(H // gh, axis=-2).repeat(W // gw, axis=-1)


# --- arrays from a model (any family, either room) --------------------------------------------

def to_numpy(x) -> np.ndarray:
    """A tensor (any device, any float dtype) or an array -> a NumPy array (float32 for
    reduced-precision tensors)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if x.is_floating_point() and x.element_size() < 4:
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def _no_grad(model):
    """``torch.no_grad()`` for a PyTorch model, nothing for a NumPy one."""
    if hasattr(model, "parameters") and hasattr(model, "train"):
        import torch

        return torch.no_grad()
    return nullcontext()


def _as_input(model, images):
    """NumPy images for a NumPy model; a tensor on the model's device for a PyTorch one."""
    if hasattr(model, "parameters") and hasattr(model, "train"):
        import torch

        param = next(model.parameters())
        return torch.as_tensor(np.asarray(images) if not hasattr(images, "detach") else images,
                               dtype=param.dtype).to(param.device)
    return to_numpy(images)


def attention_grids(model, images) -> list[np.ndarray]:
    """Where each attention layer's readout looks: one (B, heads, gh, gw) array per layer, from
    ``model.get_attention_grids``.  ViT: every block's class-token row; CaiT: the class-attention
    layers; CoaT: each scale's map on that scale's grid (the family documents it).

    When every layer has the same shape, ``np.stack(attention_grids(m, x), 1)`` gives
    (B, layers, heads, gh, gw)."""
    with _no_grad(model):
        return [to_numpy(g) for g in model.get_attention_grids(_as_input(model, images))]


def attention_rollout_grid(model, images, head_fusion: str = "mean") -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, "Quantifying Attention Flow in Transformers", 2020,
    https://arxiv.org/abs/2005.00928) of a model whose attention maps are all token-to-token
    (B, heads, N, N) with the same N, as ViT's: the class token's row of the rolled-out
    matrix on the patch grid, (B, gh, gw); each row sums to 1 over all N tokens before the
    prefix tokens are dropped."""
    from .numpy_nn.attention import attention_rollout

    with _no_grad(model):
        maps = [to_numpy(m) for m in model.get_attention_maps(_as_input(model, images))]
    shapes = {m.shape for m in maps}
    if len(shapes) != 1 or maps[0].ndim != 4 or maps[0].shape[-1] != maps[0].shape[-2]:
        raise ValueError(f"attention rollout needs every layer to map all N tokens to all N "
                         f"tokens (B, heads, N, N), as ViT's do; this model's maps have shapes "
                         f"{sorted(shapes)} -- use attention_grids for its per-layer maps")
    rollout = attention_rollout(maps, head_fusion)  # (B, N, N)
    grid = model.patch_embed.grid_size if hasattr(model, "patch_embed") else model.cfg.grid_size
    prefix = model.num_prefix_tokens
    return rearrange(rollout[:, 0, prefix:], "b (gh gw) -> b gh gw", gh=grid[0], gw=grid[1])


def pos_embed_similarity(model) -> tuple[np.ndarray, tuple[int, int]]:
    """Cosine similarity between the learned position embeddings of every pair of patches, as
    in the ViT paper's Figure 7 (center): ``(sim (N, N), grid (gh, gw))``, ready for
    ``plot_similarity_grid``.  The prefix entries (a class token's position, ViT) are left out.
    Models without a learned ``pos_embed`` (CoaT encodes position with convolutions) raise a
    ``ValueError``."""
    if hasattr(model, "state_dict"):
        pe = getattr(model, "pos_embed", None)
    else:  # the NumPy room keeps its weights in .params
        pe = getattr(model, "params", {}).get("pos_embed")
    if pe is None:
        raise ValueError(f"{type(model).__name__} has no learned pos_embed (its position "
                         f"information comes from elsewhere, e.g. convolutions)")
    grid = model.patch_embed.grid_size if hasattr(model, "patch_embed") else model.cfg.grid_size
    e = to_numpy(pe).astype(np.float64)[0]  # (prefix + gh·gw, C)
    e = e[len(e) - grid[0] * grid[1]:]  # the grid's entries: ViT's class-token entry dropped
    e = e / np.linalg.norm(e, axis=-1, keepdims=True)
    return e @ e.T, tuple(grid)


def box_masks(boxes, size) -> np.ndarray:
    """Boxes (B, 4) as (top, left, height, width) in pixels -> boolean masks (B, H, W)."""
    boxes = np.asarray(boxes)
    H, W = size
    rows, cols = np.arange(H), np.arange(W)
    top, left, h, w = (boxes[:, i, None] for i in range(4))
    inside_r = (rows >= top) & (rows < top + h)  # (B, H)
    inside_c = (cols >= left) & (cols < left + w)  # (B, W)
    return inside_r[:, :, None] & inside_c[:, None, :]


def share_inside_boxes(maps, boxes, size) -> np.ndarray:
    """The share of attention that falls inside each image's box.

    maps (B, ..., gh, gw) non-negative (e.g. class-attention grids), boxes (B, 4) as (top, left,
    height, width) in pixels of an image of ``size`` (H, W).  Each cell's weight is spread evenly
    over its pixels, so a box that cuts a patch gets its covered part.  Returns (B, ...).
    Compare with the box's own share of the image, ``h·w / (H·W)``: attention that ignored
    where the digit is would score about that."""
    maps = np.asarray(maps, dtype=np.float64)
    H, W = size
    gh, gw = maps.shape[-2:]
    per_pixel = upsample_to(maps, (H, W)) / ((H // gh) * (W // gw))  # mass per pixel
    mask = box_masks(boxes, (H, W)).reshape((len(maps),) + (1,) * (maps.ndim - 3) + (H, W))
    inside = (per_pixel * mask).sum(axis=(-2, -1))
    return inside / maps.sum(axis=(-2, -1))


def factorized_attention_view(model, images) -> list[np.ndarray]:
    """What CoaT's factorized attention (Xu et al., "Co-Scale Conv-Attentional Image
    Transformers", https://arxiv.org/abs/2104.06399) lets us draw.  It has no N × N map: each
    head computes softmax(K)ᵀ V, a d × d summary, where softmax(K) normalises every key channel
    over the N tokens.  So each key channel is a distribution over the image -- the places whose
    values it gathers into the summary.

    Returns, per factorized-attention layer, (B, heads, d, gh, gw): softmax(K) of every channel on
    its scale's token grid (from ``model.get_attention_maps(images, view="keys")``; the class
    token's own entry is left out, so each map sums to a little less than 1).  Averaged over the
    d channels it is ``model.get_attention_grids(images, view="keys")``."""
    if "view" not in inspect.signature(model.get_attention_maps).parameters:
        raise ValueError(
            f"factorized_attention_view draws factorized attention (a softmax of the keys over "
            f"the tokens); {type(model).__name__}'s attention maps are softmax weights over the "
            f"tokens: draw them with attention_grids (or attention_rollout_grid)")
    x = _as_input(model, images)
    with _no_grad(model):
        keys = [to_numpy(k) for k in model.get_attention_maps(x, view="keys")]  # (B, h, N, d)
        grids = [to_numpy(g).shape[-2:] for g in model.get_attention_grids(x, view="class")]
    return [rearrange(k[:, :, k.shape[2] - gh * gw:], "b h (gh gw) d -> b h d gh gw", gh=gh, gw=gw)
            for k, (gh, gw) in zip(keys, grids)]


def unnormalize(images, config) -> np.ndarray:
    """Undo ``normalize``: (C, H, W) or (B, C, H, W) -> pixels in about [0, 1], for drawing.
    ``config``: a model, a registered name or a ``pretrained_cfg``."""
    from .data import resolve_pretrained_cfg

    cfg = resolve_pretrained_cfg(config)
    shape = (-1, 1, 1)
    images = to_numpy(images)
    return (images * np.reshape(cfg["std"], shape) + np.reshape(cfg["mean"], shape)).astype(
        np.float32)


# --- figures from those arrays ----------------------------------------------------------------

def plot_attention_grid_overlay(img: np.ndarray, attn_map: np.ndarray, ax=None,
                                title: str | None = None, alpha: float = 0.6,
                                cmap: str = "inferno", vmin=None, vmax=None):
    """``plot_attention_overlay`` for a map on any grid that tiles the image: (gh, gw) over
    (C, H, W), each cell drawn over the pixels it covers."""
    ax = show_image(img, ax, title)
    ax.imshow(upsample_to(np.asarray(attn_map, dtype=np.float32), img.shape[-2:]), cmap=cmap,
              alpha=alpha, vmin=vmin, vmax=vmax)
    return ax


def save_attention_figure(image: np.ndarray, attn_map, path, title: str = "",
                          what: str = "", alpha: float = 0.5, cmap: str = "inferno",
                          panel_titles=None):
    """A PNG file of two panels: ``image`` (C, H, W in [0, 1]) as the model saw it, and the same
    image under ``attn_map`` (gh, gw) with opacity ``alpha``, its colour bar beside it;
    ``title`` above (the file and the predicted class), ``what`` the map is below it.  Drawn
    without pyplot (safe in scripts and threads); returns the figure.

    ``attn_map`` may be a list of maps on several grids (a pyramid's scales): then one panel
    each, side by side after the picture, each with its own colour bar and its
    ``panel_titles`` entry."""
    from .extras import require

    require("matplotlib", "drawing attention maps")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    image = np.asarray(image)
    if image.shape[0] == 1:
        image = image.repeat(3, 0)
    maps = list(attn_map) if isinstance(attn_map, (list, tuple)) else [attn_map]
    names = list(panel_titles) if panel_titles else [f"attention (opacity {alpha:g})"]
    fig = Figure(figsize=(3.0 * (1 + len(maps)), 3.4), layout="constrained")
    FigureCanvasAgg(fig)
    left, *rights = fig.subplots(1, 1 + len(maps))
    show_image(image, left, "the picture, as the model sees it")
    left.title.set_fontsize(9)
    for right, grid, name in zip(rights, maps, names):
        plot_attention_grid_overlay(image, grid, ax=right, alpha=alpha, cmap=cmap)
        right.set_title(name, fontsize=9)
        fig.colorbar(right.images[-1], ax=right, shrink=0.8, label="attention weight")
    fig.suptitle("\n".join(t for t in (title, what) if t), fontsize=9)
    fig.savefig(str(path), dpi=100)
    return fig


def plot_layer_head_maps(img: np.ndarray, maps: np.ndarray, boxes=None, title: str | None = None,
                         layer_names=None, size: float = 1.4, colorbar: bool = False,
                         vmin: float | None = None, vmax: float | None = None):
    """A figure of (layers, heads, gh, gw) maps over one image: a row per layer, a column per
    head, plus a last column with the heads' mean; ``boxes`` (4,) draws the object's box.

    Each panel stretches its colours to its own range, unless ``colorbar=True``: then every
    panel shares one scale, ``vmin`` to ``vmax`` (by default 0 and the largest value drawn), and
    the figure gets its colour bar.  Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    if isinstance(maps, (list, tuple)) and len({np.shape(m) for m in maps}) > 1:
        grids = ", ".join(f"{np.shape(m)[-2]}×{np.shape(m)[-1]}" for m in maps)
        raise ValueError(f"maps must be one (layers, heads, gh, gw) array on one grid; these "
                         f"layers lie on different grids ({grids}), the scales of a multi-scale "
                         f"model: draw each grid with its own call")
    maps = np.asarray(maps)
    if maps.ndim != 4:
        raise ValueError(f"maps must have shape (layers, heads, gh, gw), got shape {maps.shape}")
    layers, heads = maps.shape[:2]
    if colorbar:
        vmin = 0.0 if vmin is None else vmin
        vmax = float(maps.max()) if vmax is None else vmax
    fig, axes = plt.subplots(layers, heads + 1, figsize=(size * (heads + 1) + (1.0 if colorbar else 0.0),
                                                         size * layers),
                             squeeze=False, layout="constrained" if colorbar else None)
    for i in range(layers):
        for j in range(heads + 1):
            m = maps[i, j] if j < heads else maps[i].mean(0)
            ax = plot_attention_grid_overlay(img, m, ax=axes[i, j], vmin=vmin, vmax=vmax)
            if boxes is not None:
                top, left, h, w = boxes
                ax.add_patch(Rectangle((left - 0.5, top - 0.5), w, h, fill=False, color="cyan",
                                       lw=1))
            if i == 0:
                ax.set_title(f"head {j}" if j < heads else "mean", fontsize=8)
        name = layer_names[i] if layer_names is not None else f"layer {i}"
        axes[i, 0].text(-0.1, 0.5, name, transform=axes[i, 0].transAxes, rotation=90,
                        ha="right", va="center", fontsize=8)
    if colorbar:
        fig.colorbar(axes[0, 0].images[-1], ax=axes, shrink=0.9, label="attention weight")
    if title:
        fig.suptitle(title, fontsize=9)
    if not colorbar:
        fig.tight_layout()
    return fig


def plot_training_curves(history: list[dict], axes=None, title: str | None = None,
                         selected_epoch: int | None = None, test_accuracy: float | None = None,
                         label_smoothing: float | None = None, chance: float | None = None,
                         baseline: float | None = None, stopped_early: str | None = None):
    """Loss and accuracy per epoch from the trainer's history (dicts with ``epoch``,
    ``train_cross_entropy``, ``val_loss``, ``train_accuracy``, ``val_accuracy``).

    Both losses are the plain cross-entropy, so they share an honest axis (the trainer
    minimises it with label smoothing ``label_smoothing``, which the axis label states); the
    training curves are measured on augmented batches in training mode.  Epoch ticks are
    integers, the legend sits below the panels, and ``selected_epoch`` (the checkpoint the test
    used) is marked, with ``test_accuracy`` in the title.  The accuracy panel draws ``chance``
    (always answering the most common class) and ``baseline`` (the linear baseline's validation
    accuracy) as horizontal lines; ``stopped_early`` (a note) is said in the title.  ``axes``:
    two matplotlib axes, or None for a new figure.  Returns the two axes."""
    if axes is None:
        from .extras import require

        plt = require("matplotlib.pyplot", "drawing the training curves")
        _, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    _draw_curves(history, axes, title, selected_epoch, test_accuracy, label_smoothing, chance,
                 baseline, stopped_early)
    return axes


def _draw_curves(history, axes, title, selected_epoch, test_accuracy, label_smoothing,
                 chance=None, baseline=None, stopped_early=None):
    from matplotlib.ticker import MaxNLocator

    epochs = [h["epoch"] for h in history]
    loss_ax, acc_ax = axes
    series = (("train (augmented)", "train_cross_entropy", "train_accuracy", "C0"),
              ("validation", "val_loss", "val_accuracy", "C1"))
    for label, loss_key, acc_key, color in series:
        loss_ax.plot(epochs, [h[loss_key] for h in history], color=color, label=label)
        acc_ax.plot(epochs, [h[acc_key] for h in history], color=color, label=label)
    loss_ax.set_ylabel("cross-entropy")
    acc_ax.set_ylabel("accuracy")
    lines = [(chance, "chance", "0.35", "--"), (baseline, "linear baseline (validation)", "C2",
                                                 "-.")]
    for value, label, color, style in lines:
        if value is not None:
            acc_ax.axhline(value, color=color, linestyle=style, lw=1,
                           label=f"{label} {value:.2f}")
            loss_ax.plot([], [], color=color, linestyle=style, lw=1, label=f"{label} {value:.2f}")
    drawn = [min(h["val_accuracy"], h["train_accuracy"]) for h in history]
    drawn += [v for v, *_ in lines if v is not None]
    acc_ax.set_ylim(max(0.0, min(drawn) - 0.05), 1.0)
    for ax in axes:
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    best = max(history, key=lambda h: (h["val_accuracy"], -h["val_loss"]))
    summary = f"best validation {best['val_accuracy']:.4f} (epoch {best['epoch']})"
    if selected_epoch is not None:
        chosen = history[[h["epoch"] for h in history].index(selected_epoch)]
        for ax in axes:
            ax.axvline(selected_epoch, color="0.5", linestyle=":", lw=1,
                       label=f"tested: epoch {selected_epoch}")
        acc_ax.plot([selected_epoch], [chosen["val_accuracy"]], "o", color="C1", ms=5)
        if test_accuracy is not None:
            summary += f"; test {test_accuracy:.4f} (epoch {selected_epoch})"
    if stopped_early:
        summary += f"\n{stopped_early}"
    acc_ax.set_title(summary, fontsize=8)
    note = (f"both without label smoothing (trained with {label_smoothing:g})"
            if label_smoothing else "")
    loss_ax.set_title("\n".join(t for t in (title, note) if t), fontsize=8)
    handles, labels = loss_ax.get_legend_handles_labels()
    figure = loss_ax.figure
    figure.legend(handles, labels, loc="lower center", ncol=min(len(labels), 3), fontsize=8,
                  frameon=False)
    figure.subplots_adjust(bottom=0.3 if len(labels) > 3 else 0.26, top=0.84, wspace=0.3)


def save_training_curves(history: list[dict], path, title: str | None = None, **marks) -> None:
    """``plot_training_curves`` into a PNG file, without pyplot (safe in scripts and threads);
    ``marks``: ``selected_epoch``, ``test_accuracy``, ``label_smoothing``, ``chance``,
    ``baseline``, ``stopped_early``."""
    from .extras import require

    require("matplotlib", "drawing the training curves")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.0))
    FigureCanvasAgg(fig)
    _draw_curves(history, fig.subplots(1, 2), title, marks.get("selected_epoch"),
                 marks.get("test_accuracy"), marks.get("label_smoothing"), marks.get("chance"),
                 marks.get("baseline"), marks.get("stopped_early"))
    fig.savefig(str(path), dpi=80)
