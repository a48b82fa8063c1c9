"""The architecture diagrams, one per model family, drawn by code:

    python docs/diagrams.py        # -> docs/figures/arch_vit.svg, arch_cait.svg, arch_coat.svg

Each diagram follows one ImageNet model of its family (vit_tiny_patch16_224, cait_xxs24_224,
coat_lite_tiny / coat_tiny) and reads every size it prints -- depths, widths, heads, grids,
tokens -- from that model's config in the library, so a diagram cannot disagree with the code.
The files are deterministic (no date, fixed ids): re-running the script changes them only when a
config or this drawing changes.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

import vit_scratch  # noqa: E402

OUT = Path(__file__).resolve().parent / "figures"
COLORS = {  # one colour per kind of step, the same in the three diagrams
    "data": "#eceff1", "embed": "#bbdefb", "attention": "#ffe0b2", "mlp": "#c8e6c9",
    "norm": "#e1bee7", "scale": "#fff9c4", "head": "#ffcdd2", "conv": "#b2dfdb",
}
FONT = 8.5


def new_figure(width: float, height: float):
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width * 10)
    ax.set_ylim(0, height * 10)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def box(ax, x, y, w, h, text, kind="data", size=FONT, bold=False, dashed=False):
    """A rounded box centred at (x, y); returns its (left, right, bottom, top)."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0,rounding_size=1.2",
                                facecolor=COLORS[kind] if kind else "none",
                                edgecolor="#455a64", linewidth=0.9,
                                linestyle="--" if dashed else "-"))
    ax.text(x, y, text, ha="center", va="center", fontsize=size,
            fontweight="bold" if bold else "normal", linespacing=1.25)
    return (x - w / 2, x + w / 2, y - h / 2, y + h / 2)


def frame(ax, left, right, bottom, top, title):
    """A dashed frame around the inside of one repeated block, with its title above."""
    ax.add_patch(FancyBboxPatch((left, bottom), right - left, top - bottom,
                                boxstyle="round,pad=0,rounding_size=1.5", facecolor="#fafafa",
                                edgecolor="#90a4ae", linewidth=0.9, linestyle="--"))
    ax.text(left + 1.5, top - 1.5, title, ha="left", va="top", fontsize=FONT, style="italic")


def arrow(ax, start, end, text=None, curve=0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=9, linewidth=0.9,
                                 color="#37474f", shrinkA=0, shrinkB=0,
                                 connectionstyle=f"arc3,rad={curve}"))
    if text:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 1.6, text, ha="center",
                va="bottom", fontsize=FONT - 1.5, color="#37474f")


def plus(ax, x, y):
    """A residual sum: a circled plus."""
    ax.add_patch(plt.Circle((x, y), 1.4, facecolor="white", edgecolor="#37474f", linewidth=0.9))
    ax.text(x, y - 0.1, "+", ha="center", va="center", fontsize=FONT + 1)


def chain(ax, xs, y, labels=None):
    """Arrows between consecutive boxes given by their (left, right, ...) extents, at height y."""
    for i, (a, b) in enumerate(zip(xs, xs[1:])):
        arrow(ax, (a[1], y), (b[0], y), labels[i] if labels else None)


def residual_row(ax, x0, y, steps, width=12.0, gap=4.0):
    """x -> [steps...] -> (+) with the skip drawn above: one residual branch of a block.

    ``steps``: (text, kind) or (text, kind, width) tuples. Returns the x of the circled plus."""
    extents, x = [], x0 + gap
    for text, kind, *own_width in steps:
        w = own_width[0] if own_width else width
        extents.append(box(ax, x + w / 2, y, w, 5.2, text, kind))
        x += w + gap
    plus_x = x + 1.4
    plus(ax, plus_x, y)
    arrow(ax, (x0, y), (extents[0][0], y))
    chain(ax, extents, y)
    arrow(ax, (extents[-1][1], y), (plus_x - 1.4, y))
    # the skip connection
    ax.plot([x0 + 1, x0 + 1, plus_x, plus_x], [y, y + 4.6, y + 4.6, y + 1.4], color="#37474f",
            linewidth=0.9)
    return plus_x


def save(fig, name: str) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / name
    with plt.rc_context({"svg.hashsalt": "vit-scratch", "svg.fonttype": "none"}):
        fig.savefig(path, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return path


def vit() -> Path:
    cfg = vit_scratch.get_config("vit_tiny_patch16_224")
    (H, W), p, C = cfg.img_size, cfg.patch_size, cfg.embed_dim
    gh, gw = H // p, W // p
    N = gh * gw
    hidden = int(C * cfg.mlp_ratio)
    fig, ax = new_figure(10.6, 4.6)
    y = 36
    steps = [
        box(ax, 7, y, 12, 7, f"image\n({cfg.in_chans}, {H}, {W})"),
        box(ax, 24, y, 16, 7, f"patch embedding\nConv2d {p}×{p}, stride {p}\n→ {gh}×{gw} = {N} tokens", "embed"),
        box(ax, 43, y, 16, 7, f"[class] token first,\n+ position embedding\n({1 + N}, {C})", "embed"),
        box(ax, 61, y, 14, 7, f"block × {cfg.depth}\n({1 + N}, {C})", "attention", bold=True),
        box(ax, 76, y, 9, 7, "LayerNorm", "norm"),
        box(ax, 89, y, 11, 7, f"class token\n({C},)", "data"),
        box(ax, 100.5, y, 8, 7, f"head\n→ {cfg.num_classes}", "head"),
    ]
    chain(ax, steps, y)
    # inside one block: pre-norm, two residual branches
    frame(ax, 4, 102, 2, 26, f"one block (pre-norm): x + MHSA(LN(x)), then x + MLP(LN(x))")
    plus_1 = residual_row(ax, 6, 12, [("LayerNorm", "norm"),
                                       (f"multi-head\nself-attention\n{cfg.num_heads} heads × "
                                        f"{C // cfg.num_heads}", "attention")], width=14)
    plus_2 = residual_row(ax, plus_1 + 1.4, 12, [("LayerNorm", "norm"),
                                                  (f"MLP\n{C} → {hidden} → {C}\nGELU", "mlp")],
                          width=14)
    arrow(ax, (plus_2 + 1.4, 12), (plus_2 + 6, 12))
    arrow(ax, (61, y - 3.5), (61, 26.2))
    return save(fig, "arch_vit.svg")


def cait() -> Path:
    cfg = vit_scratch.get_config("cait_xxs24_224")
    (H, W), p, C = cfg.img_size, cfg.patch_size, cfg.embed_dim
    N = (H // p) * (W // p)
    fig, ax = new_figure(10.6, 6.4)
    y = 55
    steps = [
        box(ax, 7, y, 12, 7, f"image\n({cfg.in_chans}, {H}, {W})"),
        box(ax, 23.5, y, 17, 7, f"patch embedding\n+ position embedding\n({N}, {C}), no class token", "embed"),
        box(ax, 42.5, y, 15, 7, f"self-attention\nblock × {cfg.depth}\n({N}, {C})", "attention", bold=True),
        box(ax, 61, y, 18, 7, f"class-attention\nblock × {cfg.depth_token_only}\n"
                              f"class token ({C},) joins", "attention", bold=True),
        box(ax, 77, y, 9, 7, "LayerNorm", "norm"),
        box(ax, 89, y, 11, 7, f"class token\n({C},)", "data"),
        box(ax, 100.5, y, 8, 7, f"head\n→ {cfg.num_classes}", "head"),
    ]
    chain(ax, steps, y)
    eps = cfg.init_values
    frame(ax, 4, 102, 24.5, 45, f"inside each self-attention block, LayerScale: "
                                 f"x + diag(λ) · f(LN(x)), λ initialised to ε = {eps:g}")
    plus_1 = residual_row(ax, 6, 32, [("LayerNorm", "norm", 10),
                                       (f"talking-heads\nattention\n{cfg.num_heads} heads, mixed",
                                        "attention", 14),
                                       ("× diag(λ₁)", "scale", 9)], gap=3)
    plus_2 = residual_row(ax, plus_1 + 1.4, 32, [("LayerNorm", "norm", 10), ("MLP", "mlp", 8),
                                                  ("× diag(λ₂)", "scale", 9)], gap=3)
    arrow(ax, (plus_2 + 1.4, 32), (plus_2 + 5, 32))
    keys = "[class; patches]" if cfg.class_token_in_keys else "the patches"
    frame(ax, 4, 102, 2, 22.5, f"inside each class-attention block: only the class token is "
                                f"updated; the {N} patch tokens are read, never changed")
    plus_3 = residual_row(ax, 6, 10, [("LayerNorm\nof [class; patches]", "norm", 13),
                                       (f"class attention\nquery: class token\nkeys, values: {keys}",
                                        "attention", 17),
                                       ("× diag(λ₁)", "scale", 9)], gap=3)
    plus_4 = residual_row(ax, plus_3 + 1.4, 10, [("LayerNorm", "norm", 9), ("MLP", "mlp", 7),
                                                  ("× diag(λ₂)", "scale", 9)], gap=3)
    arrow(ax, (plus_4 + 1.4, 10), (plus_4 + 4, 10))
    ax.text(plus_4 + 4.3, 10, "class\ntoken", fontsize=FONT - 1.5, va="center")
    return save(fig, "arch_cait.svg")


def coat() -> Path:
    lite = vit_scratch.get_config("coat_lite_tiny")
    full = vit_scratch.get_config("coat_tiny")
    H, W = lite.img_size
    strides = [lite.patch_size * 2 ** s for s in range(4)]
    fig, ax = new_figure(10.6, 7.2)
    y = 63
    first = box(ax, 6, y, 10, 7, f"image\n({lite.in_chans}, {H}, {W})")
    previous = first
    centres = []
    for s in range(4):
        x = 21 + 15.5 * s
        k = lite.patch_size if s == 0 else 2
        extent = box(ax, x, y, 14, 9,
                     f"scale {s + 1}: patch embed\n{k}×{k}, stride {k} → {H // strides[s]}×{W // strides[s]}\n"
                     f"[class{s + 1}] + serial\nblocks × {lite.serial_depths[s]}", "embed")
        arrow(ax, (previous[1], y), (extent[0], y))
        previous, centres = extent, centres + [x]
    head = box(ax, 96, y, 13, 7, "CoaT-Lite:\nLN, class4 → head", "head")
    arrow(ax, (previous[1], y), (head[0], y))
    ax.text(52, y + 6.5, f"coat_lite_tiny widths {', '.join(map(str, lite.embed_dims))}; "
                         f"coat_tiny {', '.join(map(str, full.embed_dims))}", ha="center",
            fontsize=FONT - 1)
    # CoaT: the parallel blocks on scales 2-4
    par = box(ax, 58.5, 47, 57, 7, f"CoaT only: parallel block × {full.parallel_depth} on scales 2, 3, 4 "
                                 f"(co-scale)\nx_s + Σ resize(attention of scale t → grid of s), "
                                 f"then x_s + MLP(LN(x_s))", "attention", bold=False)
    for x in centres[1:]:
        arrow(ax, (x, y - 4.5), (x, 50.6))
    agg = box(ax, 96, 47, 13, 7, "CoaT: LN₂,₃,₄, classes\n2-4 → aggregate\n(Conv1d) → head", "head")
    arrow(ax, (par[1], 47), (agg[0], 47))
    # inside a serial block
    cfg = lite
    windows = ", ".join(f"{k}×{k}: {h} heads" for k, h in cfg.crpe_window.items())
    frame(ax, 4, 102, 20, 40, "inside each serial block (every scale): conv position encoding, then "
                              "factorized attention with convolutional relative position encoding")
    box(ax, 12, 29, 14, 7, "CPE\nx + depthwise 3×3\nconv on the grid", "conv")
    plus_1 = residual_row(ax, 19, 29, [("LayerNorm", "norm"),
                                        ("factorized attention\nQ (softmax(K)ᵀ V) / √d\n+ CRPE", "attention")],
                          width=15)
    plus_2 = residual_row(ax, plus_1 + 1.4, 29, [("LayerNorm", "norm"), ("MLP", "mlp")],
                          width=10)
    arrow(ax, (plus_2 + 1.4, 29), (plus_2 + 5, 29))
    ax.text(53, 21.5, f"CRPE: Q ∘ depthwise conv(V), windows {windows}; the class token's row "
                      f"is zero", ha="center", fontsize=FONT - 1)
    # the co-scale mechanisms, in words
    frame(ax, 4, 102, 2, 17, "co-scale, two ways (parallel_mode)")
    ax.text(7, 10, "interpolation: each scale's attention output is resized bilinearly to the "
                   "other two grids and added.\n"
                   "cross_attention: each scale's queries attend to its own keys and values and "
                   "to the other scales', resized to its grid;\nthe three conv-attentions are "
                   "summed before the scale's output projection.", fontsize=FONT, va="center", linespacing=1.5)
    return save(fig, "arch_coat.svg")


DIAGRAMS = {"vit": vit, "cait": cait, "coat": coat}


def main() -> list[Path]:
    written = [draw() for draw in DIAGRAMS.values()]
    for path in written:
        print(f"{path.relative_to(OUT.parents[1])} ({path.stat().st_size / 1024:.0f} KiB)")
    return written


if __name__ == "__main__":
    main()
