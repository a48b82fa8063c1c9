"""Input checks shared by the NumPy room and the PyTorch room.

Both rooms call the same functions, so a learner gets the same message from either:
a ``ValueError`` that names the parameter and the value, raised before any einsum sees
a wrong shape.  Every function here takes plain Python values (ints, tuples of ints),
never arrays, so it imports neither NumPy nor PyTorch.
"""
from __future__ import annotations

from typing import Sequence


def to_2tuple(value, name: str) -> tuple[int, int]:
    """``224 -> (224, 224)``, ``(224, 160) -> (224, 160)``; anything else is a ``ValueError``."""
    if isinstance(value, int) and not isinstance(value, bool):
        pair = (value, value)
    elif isinstance(value, Sequence) and len(value) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        pair = (int(value[0]), int(value[1]))
    else:
        raise ValueError(f"{name} must be an int or a pair (H, W) of ints, got {value!r}")
    if min(pair) <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return pair


def _show(pair: tuple[int, int]):
    """A square size reads as one number (``225``), a rectangle as a pair (``(224, 160)``)."""
    return pair[0] if pair[0] == pair[1] else pair


def check_positive(value, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def grid_size(img_size, patch_size) -> tuple[int, int]:
    """Number of patches along (H, W); ``ValueError`` unless the image tiles exactly."""
    img = to_2tuple(img_size, "img_size")
    patch = to_2tuple(patch_size, "patch_size")
    if img[0] % patch[0] or img[1] % patch[1]:
        raise ValueError(
            f"image size {_show(img)} is not divisible by patch size {_show(patch)} "
            f"(img_size={img_size!r}, patch_size={patch_size!r})"
        )
    return img[0] // patch[0], img[1] // patch[1]


def head_dim(embed_dim: int, num_heads: int) -> int:
    """Channels per head; ``ValueError`` unless ``embed_dim`` splits evenly into heads."""
    check_positive(embed_dim, "embed_dim")
    check_positive(num_heads, "num_heads")
    if embed_dim % num_heads:
        raise ValueError(
            f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}: "
            f"each head needs embed_dim / num_heads channels"
        )
    return embed_dim // num_heads


def check_images(shape: Sequence[int], in_chans: int | None = None, img_size=None,
                 patch_size=None) -> None:
    """Check a batch of images of ``shape`` (B, C, H, W) before it enters a model.

    ``img_size`` is the size a fixed-size model was built for (its position embedding has
    one entry per patch of that size); ``patch_size`` alone checks only divisibility.
    """
    shape = tuple(int(s) for s in shape)
    if len(shape) != 4:
        raise ValueError(f"images must have shape (B, C, H, W), got shape {shape}")
    _, chans, height, width = shape
    if in_chans is not None and chans != in_chans:
        raise ValueError(
            f"images have {chans} channels but the model expects in_chans={in_chans} "
            f"(got shape {shape})"
        )
    if img_size is not None:
        expected = to_2tuple(img_size, "img_size")
        if (height, width) != expected:
            raise ValueError(
                f"image size {_show((height, width))} does not match the model's "
                f"img_size {_show(expected)}; build the model with img_size=({height}, {width}) "
                f"and load the checkpoint with vit_scratch.load_checkpoint, which resizes the "
                f"position embedding"
            )
    if patch_size is not None:
        grid_size((height, width), patch_size)


def check_mask(mask_shape: Sequence[int], scores_shape: Sequence[int]) -> None:
    """An attention mask must broadcast to the score tensor (B, h, N_q, N_k)."""
    mask_shape, scores_shape = tuple(mask_shape), tuple(scores_shape)
    ok = len(mask_shape) <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(mask_shape[::-1], scores_shape[::-1])
    )
    if not ok:
        raise ValueError(
            f"mask of shape {mask_shape} does not broadcast to the attention scores "
            f"(B, heads, N_q, N_k) = {scores_shape}"
        )


def check_last_dim(shape: Sequence[int], expected: int, name: str) -> None:
    """Token tensors are (..., C); a wrong C is named before a matmul fails on it."""
    if len(shape) == 0 or shape[-1] != expected:
        raise ValueError(f"{name} must have last dimension {expected}, got shape {tuple(shape)}")


def param_mismatch(params: dict, expected: dict[str, tuple[int, ...]]):
    """``(missing, unexpected, misshaped)`` between a parameter dict and ``{key: shape}``;
    misshaped maps each key to ``(got, expected)``."""
    missing = [k for k in expected if k not in params]
    unexpected = [k for k in params if k not in expected]
    misshaped = {
        k: (tuple(params[k].shape), tuple(expected[k]))
        for k in expected
        if k in params and tuple(params[k].shape) != tuple(expected[k])
    }
    return missing, unexpected, misshaped


def check_params(
    params: dict, expected: dict[str, tuple[int, ...]], what: str
) -> None:
    """Compare a parameter dict with the expected ``{key: shape}``; list every problem at once."""
    missing, unexpected, misshaped = param_mismatch(params, expected)
    if missing or unexpected or misshaped:
        raise ValueError(mismatch_message(what, missing, unexpected, misshaped))


def mismatch_message(what: str, missing, unexpected, misshaped: dict) -> str:
    """One readable message for missing, unexpected and mis-shaped keys."""

    def short(keys, limit=12):
        keys = list(keys)
        shown = ", ".join(keys[:limit])
        return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")

    lines = [f"{what} does not match:"]
    if missing:
        lines.append(f"  missing keys ({len(missing)}): {short(missing)}")
    if unexpected:
        lines.append(f"  unexpected keys ({len(unexpected)}): {short(unexpected)}")
    if misshaped:
        items = [f"{k}: got {g}, expected {e}" for k, (g, e) in misshaped.items()]
        lines.append(f"  mis-shaped keys ({len(items)}): {short(items)}")
    return "\n".join(lines)


# --- shared by the model families' configs and modules (added with CaiT) -----------------------


def check_num_classes(value) -> int:
    """``num_classes`` is an int >= 0 (0: no head)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"num_classes must be an int >= 0, got {value!r}")
    return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive_number(value, name: str) -> float:
    """A positive int or float (``mlp_ratio``); NaN is not positive."""
    if not _is_number(value) or not value > 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return value


def check_rate(value, name: str) -> float:
    """A dropout or drop-path probability in [0, 1)."""
    if not _is_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}")
    return value


def check_init_values(value, name: str = "init_values") -> float:
    """LayerScale's initial value ε: a positive number (CaiT: ``layerscale_init_value(depth)``).

    0 is refused on purpose: a LayerScale at 0 gives every weight of its branch a zero gradient
    on the first step (that is ReZero's scalar, ``ScalarGate``), and in timm ``init_values=0``
    silently means "no LayerScale at all"; a negative ε flips the sign of the branch."""
    if not _is_number(value) or not value > 0:
        raise ValueError(
            f"{name} must be a positive number (LayerScale's initial per-channel scale, e.g. "
            f"layerscale_init_value(depth)), got {value!r}")
    return value


def check_class_token(cls_shape: Sequence[int], tokens_shape: Sequence[int]) -> None:
    """A class token (B, 1, C) that joins patch tokens (B, N, C): one token, the same batch,
    the same width."""
    cls_shape, tokens_shape = tuple(cls_shape), tuple(tokens_shape)
    if len(tokens_shape) != 3:
        raise ValueError(f"tokens must have shape (B, N, C), got shape {tokens_shape}")
    if len(cls_shape) != 3 or cls_shape[1] != 1:
        raise ValueError(f"the class token must have shape (B, 1, C), got shape {cls_shape}")
    if cls_shape[2] != tokens_shape[2]:
        raise ValueError(
            f"the class token has width {cls_shape[2]} but the patch tokens have "
            f"{tokens_shape[2]} channels (class token shape {cls_shape}, tokens shape "
            f"{tokens_shape})")
    if cls_shape[0] != tokens_shape[0]:
        raise ValueError(
            f"the class token has batch size {cls_shape[0]} but the patch tokens have "
            f"{tokens_shape[0]} (class token shape {cls_shape}, tokens shape {tokens_shape})")


def check_divisible(size, stride: int, name: str = "img_size", detail: str = "") -> tuple[int, int]:
    """``(H, W)`` if both are multiples of ``stride`` (a multi-scale model's total stride);
    else a ``ValueError`` naming the size, the stride and the nearest sizes that work.

    ``detail`` says where the stride comes from, e.g. ``"patch_size 4 × 2 × 2 × 2"``.
    """
    hw = to_2tuple(size, name)
    check_positive(stride, "stride")
    if hw[0] % stride or hw[1] % stride:
        fix = tuple(max(stride, stride * round(s / stride)) for s in hw)
        why = f" ({detail})" if detail else ""
        raise ValueError(
            f"{name} {_show(hw)} is not divisible by the model's total stride {stride}{why}; "
            f"use a multiple of {stride}, e.g. {_show(fix)}"
        )
    return hw


def check_window_heads(crpe_window, num_heads: int, name: str = "crpe_window") -> dict[int, int]:
    """A ``{window: heads}`` split of the attention heads (CoaT's convolutional relative position
    encoding): odd positive windows, positive head counts that add up to ``num_heads``.
    An int ``w`` means one window for every head, ``{w: num_heads}``.  Returns a new dict in the
    given order (the order decides which heads get which window)."""
    check_positive(num_heads, "num_heads")
    if isinstance(crpe_window, int) and not isinstance(crpe_window, bool):
        crpe_window = {crpe_window: num_heads}
    if not isinstance(crpe_window, dict) or not crpe_window:
        raise ValueError(f"{name} must be a non-empty dict {{window: heads}} or an int window, "
                         f"got {crpe_window!r}")
    for window, heads in crpe_window.items():
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0 or window % 2 == 0:
            raise ValueError(f"{name} has window {window!r}: windows must be odd positive ints "
                             f"(a centred kernel needs a middle tap), got {crpe_window!r}")
        if isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0:
            raise ValueError(f"{name} gives {heads!r} heads to window {window}: head counts must "
                             f"be positive ints, got {crpe_window!r}")
    total = sum(crpe_window.values())
    if total != num_heads:
        raise ValueError(f"{name} {crpe_window!r} splits {total} heads, but num_heads is "
                         f"{num_heads}: the head counts must add up to num_heads")
    return dict(crpe_window)
