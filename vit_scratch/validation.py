"""Validation at the library's edges: the checks, and the messages a learner reads.

Both rooms call the same functions, so a learner gets the same message from either: a
``ValueError`` that names the parameter, the value and what was expected, raised before any
einsum sees a wrong shape.  The functions take plain Python values (ints, tuples of ints, dtype
*names*), never arrays, so this module imports neither NumPy nor PyTorch.

Where the checks run (the rule): a config validates itself on construction
(``specs/base.py``: every field against its annotation, then the family's ranges);
``create_model``, the public functional entry points, a model's images and checkpoint files are
validated when they come in; inner layers trust their arguments, and a public layer that a
learner may build on its own checks its arguments in one call (:func:`check_layer_args`).

Grouped by what they check:

* **values**: :func:`to_2tuple`, :func:`check_int`, :func:`check_positive`, :func:`check_bool`,
  :func:`check_float`, :func:`check_probability`, :func:`check_choice` -- the building blocks;
* **configs and layer arguments**: :func:`grid_size`, :func:`head_dim`, :func:`hidden_width`,
  :func:`check_init_values`, :func:`check_divisible`, :func:`check_window_heads`,
  :func:`check_layer_args`;
* **images** (one dtype policy for both rooms; see :func:`check_image_dtype`): a model takes
  *floating-point* images, normalised with its mean and std.  float16, bfloat16, float32 and
  float64 images are cast to the model's dtype (the dtype of its parameters); integer (uint8
  0-255 included), bool and complex images are refused.  Non-finite values, and values beyond
  ``MAX_ABS_IMAGE`` (far outside any normalised image, and where float32 LayerNorm starts to
  overflow), are refused too: see :func:`check_image_values` and :func:`check_images`;
* **arrays given to functional entry points**: :func:`check_ndim`, :func:`check_last_dim`,
  :func:`check_tokens`, :func:`check_token_grid`, :func:`check_qkv`, :func:`check_mask_dtype`,
  :func:`check_mask`, :func:`check_class_token`;
* **parameters** (a NumPy model's params, a checkpoint's tensors): :func:`param_mismatch`,
  :func:`check_params`, :func:`check_param_dtypes`, :func:`bad_param_values` and
  :func:`mismatch_message` list every missing, unexpected, mis-shaped and mis-typed key, and
  every key with NaN, infinite or implausible values, at once;
* **checkpoints**: :class:`CheckpointError`, :class:`UnsafeCheckpointError`.
"""
from __future__ import annotations

import math
import numbers
import pickle
from typing import Sequence

# --- values ------------------------------------------------------------------------------------


def describe_value(value, show_type: bool = False) -> str:
    """``'False' (str)``: the value and, where its type is the surprise, the type."""
    if (show_type or isinstance(value, (bool, str)) or value is None
            or not isinstance(value, numbers.Number)):
        return f"{value!r} ({type(value).__name__})"
    return repr(value)


def _is_int(value) -> bool:
    """Python or NumPy integers; never bools (``True`` is an ``int`` in Python)."""
    return isinstance(value, numbers.Integral) and not _is_bool(value)


def _is_bool(value) -> bool:
    return isinstance(value, bool) or (type(value).__name__ in ("bool_", "bool")
                                       and type(value).__module__ == "numpy")


def to_2tuple(value, name: str) -> tuple[int, int]:
    """``224 -> (224, 224)``, ``(224, 160) -> (224, 160)``; anything else is a ``ValueError``."""
    if _is_int(value):
        pair = (int(value), int(value))
    elif (isinstance(value, Sequence) and not isinstance(value, str) and len(value) == 2
          and all(_is_int(v) for v in value)):
        pair = (int(value[0]), int(value[1]))
    else:
        raise ValueError(f"{name} must be an int or a pair (H, W) of ints, got {describe_value(value)}")
    if min(pair) <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return pair


def _show(pair: tuple[int, int]):
    """A square size reads as one number (``225``), a rectangle as a pair (``(224, 160)``)."""
    return pair[0] if pair[0] == pair[1] else pair


def check_int(value, name: str, minimum: int | None = 1, maximum: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (Python or NumPy, not a bool, not ``4.0``)
    in ``[minimum, maximum]``; else a ``ValueError`` naming ``name`` and the value."""
    if minimum == 1 and maximum is None:
        expected = "a positive int"
    elif maximum is None:
        expected = f"an int >= {minimum}" if minimum is not None else "an int"
    else:
        expected = f"an int in [{minimum}, {maximum}]"
    if not _is_int(value):
        raise ValueError(f"{name} must be {expected}, got {describe_value(value, show_type=True)}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    return int(value)


def check_positive(value, name: str) -> int:
    """A positive ``int`` (``ValueError`` otherwise); the shape fields of every config."""
    return check_int(value, name, 1)


def check_bool(value, name: str) -> bool:
    """``True`` or ``False`` (or a NumPy bool).  ``'False'`` is refused: it is a truthy string."""
    if not _is_bool(value):
        raise ValueError(f"{name} must be True or False, got {describe_value(value, show_type=True)}")
    return bool(value)


def check_float(value, name: str, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number (ints accepted; bools, strings, NaN and inf refused) in the
    interval ``[low, high]`` (``(low, ...`` with ``low_open``, ``..., high)`` with ``high_open``).
    Returns it as a Python ``float``."""
    if low == 0 and low_open and high is None:
        kind, interval = "a positive number", "positive"
    elif low is None and high is None:
        kind, interval = "a finite number", "finite"
    else:
        interval = (f"in {'(' if low_open else '['}{'-inf' if low is None else f'{low:g}'}, "
                    f"{'inf' if high is None else f'{high:g}'}{')' if high_open else ']'}")
        kind = f"a number {interval}"
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {kind}, got {describe_value(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    too_low = low is not None and (number <= low if low_open else number < low)
    too_high = high is not None and (number >= high if high_open else number > high)
    if too_low or too_high:
        raise ValueError(f"{name} must be {interval}, got {value!r}")
    return number


def check_probability(value, name: str) -> float:
    """A dropout-like rate in ``[0, 1)`` (1 would drop everything)."""
    return check_float(value, name, 0.0, 1.0, high_open=True)


def check_positive_float(value, name: str) -> float:
    return check_float(value, name, 0.0, None, low_open=True)


def check_choice(value, name: str, choices: Sequence) -> object:
    if value not in tuple(choices):
        raise ValueError(f"{name} must be one of {tuple(choices)!r}, got {describe_value(value)}")
    return value


# --- configs and layer arguments ---------------------------------------------------------------


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


def hidden_width(dim: int, ratio: float, name: str = "mlp_ratio") -> int:
    """``int(dim * ratio)``: the hidden width of an MLP (timm's rounding), at least 1.

    ``mlp_ratio=0.001`` with ``embed_dim=192`` would give a zero-width MLP, which PyTorch builds
    without complaint and which silently turns every MLP into its bias."""
    dim = check_positive(dim, "embed_dim")
    ratio = check_positive_float(ratio, name)
    width = int(dim * ratio)
    if width < 1:
        raise ValueError(
            f"{name}={ratio!r} gives an MLP of int({dim} * {ratio!r}) = {width} hidden units; "
            f"expected {name} >= {1 / dim:.4g} (at least one hidden unit for {dim} channels)"
        )
    return width


def check_init_values(value, name: str = "init_values") -> float:
    """LayerScale's initial value ε: a positive number (CaiT: ``layerscale_init_value(depth)``).

    0 is refused on purpose: a LayerScale at 0 gives every weight of its branch a zero gradient
    on the first step (that is ReZero's scalar, ``ScalarGate``), and in timm ``init_values=0``
    silently means "no LayerScale at all"; a negative ε flips the sign of the branch."""
    if _is_bool(value) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ValueError(
            f"{name} must be a positive number (LayerScale's initial per-channel scale, e.g. "
            f"layerscale_init_value(depth)), got {value!r}")
    return value


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


#: What each argument of a public layer must be (:func:`check_layer_args`): a positive int, a
#: bool, or a dropout-like rate in [0, 1).
LAYER_INT_ARGS = ("dim", "in_features", "hidden_features", "out_features", "embed_dim",
                  "in_chans", "patch_size", "head_chs", "num_heads")
LAYER_BOOL_ARGS = ("qkv_bias", "class_token_in_keys", "antialias")
LAYER_RATE_ARGS = ("drop", "attn_drop", "proj_drop", "drop_path")


def check_layer_args(**args) -> None:
    """The arguments of a public layer (``Attention``, ``Mlp``, ``LayerScale``, ``PatchEmbed``,
    ...), checked in one call, by name, with the messages of the config fields:
    :data:`LAYER_INT_ARGS` positive ints (``dim`` with ``num_heads``: split evenly into heads;
    ``img_size`` with ``patch_size``: tiled exactly), :data:`LAYER_BOOL_ARGS` ``True`` or
    ``False``, :data:`LAYER_RATE_ARGS` in [0, 1), ``init_values`` LayerScale's positive ε,
    ``kernel_size`` an odd positive int (a centred 'same' convolution).  ``None`` means
    "not given".  The models pass checked config values, so this guards a layer a learner
    builds by hand."""
    for name, value in args.items():
        if value is None or (name == "dim" and "num_heads" in args):
            continue  # dim is checked with num_heads, below
        if name in LAYER_INT_ARGS:
            check_positive(value, name)
        elif name in LAYER_BOOL_ARGS:
            check_bool(value, name)
        elif name in LAYER_RATE_ARGS:
            check_probability(value, name)
        elif name == "init_values":
            check_init_values(value)
        elif name == "kernel_size":
            check_positive(value, name)
            if value % 2 == 0:
                raise ValueError(f"kernel_size must be odd (a centred window with 'same' padding "
                                 f"k // 2), got {value}")
        elif name == "img_size":
            to_2tuple(value, name)
        else:
            raise TypeError(f"check_layer_args does not know the argument {name!r}")
    if "num_heads" in args:
        head_dim(args["dim"], args["num_heads"])
    if args.get("img_size") is not None and args.get("patch_size") is not None:
        grid_size(args["img_size"], args["patch_size"])


# --- images: one dtype policy for both rooms -----------------------------------------------------

#: Floating dtypes a model accepts (cast to the model's own dtype on the way in).
IMAGE_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: Larger magnitudes are refused: a normalised image lies within about ±3 (±1e4 leaves room for
#: any sane normalisation), and near 1e19 the float32 LayerNorm variance overflows, after which
#: every image gets the same logits.
MAX_ABS_IMAGE = 1e4


def dtype_name(dtype) -> str:
    """``np.float32`` / ``dtype('float32')`` / ``torch.float32`` -> ``'float32'``."""
    name = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
    return str(name if isinstance(name, str) else dtype).removeprefix("torch.")


def check_image_dtype(dtype, name: str = "images") -> str:
    """The documented input dtype policy, the same in both rooms.

    Models take floating-point images that are already scaled and normalised with the model's
    mean and std (``vit_scratch.data.normalize`` / ``preprocess``).  float16, bfloat16, float32
    and float64 pass (the model casts them to its own dtype).  Everything else is a
    ``ValueError``: a uint8 picture holds 0-255 and would be fed to the model unscaled and
    unnormalised -- a classic silent mistake -- and bool, integer and complex images have no
    meaning for the model either.  Returns the dtype's name.
    """
    kind = dtype_name(dtype)
    if kind in IMAGE_FLOAT_DTYPES:
        return kind
    if kind == "uint8":
        raise ValueError(
            f"{name} have dtype uint8 (0-255 pixels?); the model expects floating-point images "
            f"scaled to [0, 1] and normalised with its mean and std: use "
            f"vit_scratch.data.preprocess(image, model) for a picture, or "
            f"normalize(images / 255.0, model) for a uint8 batch"
        )
    raise ValueError(
        f"{name} have dtype {kind}; the model expects floating-point images "
        f"({', '.join(IMAGE_FLOAT_DTYPES)}) normalised with its mean and std "
        f"(vit_scratch.data.normalize)"
    )


def check_image_values(max_abs: float, name: str = "images") -> None:
    """``max_abs`` = the largest ``|value|`` of a batch (NaN if any value is NaN).

    Refuses NaN, infinities and values beyond ``MAX_ABS_IMAGE``: both rooms would return
    garbage (NaN logits, or -- from about 1e19 on, where the float32 LayerNorm variance
    overflows -- the same logits for every image) without any other sign."""
    if max_abs != max_abs:
        raise ValueError(f"{name} contain NaN; expected finite, normalised values")
    if max_abs == math.inf:
        raise ValueError(f"{name} contain infinite values; expected finite, normalised values")
    if max_abs > MAX_ABS_IMAGE:
        raise ValueError(
            f"{name} reach |value| = {max_abs:.3g}; expected normalised images (about ±3, at most "
            f"±{MAX_ABS_IMAGE:g}): scale them to [0, 1] and normalise with the model's mean and "
            f"std (vit_scratch.data.normalize).  Far beyond that, LayerNorm's variance overflows "
            f"float32 and every image gets the same logits"
        )


def check_images(shape: Sequence[int], in_chans: int | None = None, img_size=None,
                 patch_size=None, dtype=None) -> None:
    """Check a batch of images of ``shape`` (B, C, H, W) before it enters a model.

    ``img_size`` is the size a fixed-size model was built for (its position embedding has
    one entry per patch of that size); ``patch_size`` alone checks only divisibility.  With
    ``dtype``, the dtype policy (:func:`check_image_dtype`) is checked first.
    """
    if dtype is not None:
        check_image_dtype(dtype)
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


# --- arrays given to functional entry points -------------------------------------------------


def check_ndim(shape: Sequence[int], ndim: int | Sequence[int], name: str, layout: str) -> None:
    """``len(shape)`` must be ``ndim`` (or one of them); ``layout`` reads like ``(B, N, C)``."""
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if len(shape) not in allowed:
        raise ValueError(f"{name} must have shape {layout}, got shape {tuple(shape)}")


def check_last_dim(shape: Sequence[int], expected: int, name: str) -> None:
    """Token tensors are (..., C); a wrong C is named before a matmul fails on it."""
    if len(shape) == 0 or shape[-1] != expected:
        raise ValueError(f"{name} must have last dimension {expected}, got shape {tuple(shape)}")


def check_tokens(shape: Sequence[int], channels: int | None, name: str,
                 layout: str = "(B, N, C)", min_tokens: int = 0) -> None:
    """Tokens (B, N, C) with N >= ``min_tokens`` and C = ``channels`` (None: any), in one call:
    a public layer's input check.  ``layout`` is how the message describes the shape."""
    shape = tuple(shape)
    if len(shape) != 3 or shape[1] < min_tokens:
        raise ValueError(f"{name} must have shape {layout}, got shape {shape}")
    if channels is not None:
        check_last_dim(shape, channels, name)


def check_qkv(q_shape: Sequence[int], k_shape: Sequence[int],
              v_shape: Sequence[int] | None = None) -> None:
    """q (..., N_q, d), k (..., N_k, d), v (..., N_k, d_v): the shapes attention needs."""
    q_shape, k_shape = tuple(q_shape), tuple(k_shape)
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if shape is not None and len(shape) < 2:
            raise ValueError(f"{name} must have shape (..., N, d), got shape {tuple(shape)}")
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(f"q and k must have the same last dimension d, got q of shape "
                         f"{q_shape} and k of shape {k_shape}")
    if v_shape is not None and tuple(v_shape)[-2] != k_shape[-2]:
        raise ValueError(f"v must have one row per key (N_k = {k_shape[-2]}), got k of shape "
                         f"{k_shape} and v of shape {tuple(v_shape)}")


def check_token_grid(shape: Sequence[int], size, name: str = "tokens",
                     channels: int | None = None) -> tuple[int, int]:
    """Tokens (B, 1 + H·W, C) -- a class token, then an H×W grid in raster order -- that fit
    ``size`` (H, W) (and have C = ``channels`` unless None); returns (H, W)."""
    H, W = to_2tuple(size, "size")
    shape = tuple(shape)
    if len(shape) != 3 or shape[1] != 1 + H * W:
        raise ValueError(f"{name} of shape {shape} do not fit the grid size {(H, W)}: "
                         f"expected 1 + {H}·{W} = {1 + H * W} tokens")
    if channels is not None:
        check_last_dim(shape, channels, name)
    return H, W


def check_mask_dtype(dtype, name: str = "mask") -> str:
    """A mask is boolean (True = may attend) or additive floating-point (0 or -inf).
    An integer 0/1 mask would be *added* to the scores -- a silent mistake -- so it is refused."""
    kind = dtype_name(dtype)
    if kind == "bool" or kind in IMAGE_FLOAT_DTYPES:
        return kind
    raise ValueError(f"{name} has dtype {kind}; expected a boolean mask (True = may attend) or "
                     f"an additive floating-point mask (0 = keep, -inf = masked)")


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


# --- parameters: a NumPy model's params, a checkpoint's tensors ------------------------------

#: The dtypes the NumPy room computes in (float16/bfloat16 checkpoints: state_dict_to_numpy).
PARAM_FLOAT_DTYPES = ("float32", "float64")
#: Larger parameter magnitudes are refused: no trained weight of these models comes near it,
#: while bytes overwritten in a file read as floats up to ±3e38 (or NaN), and give NaN logits.
MAX_ABS_PARAM = 1e6


def check_param_dtypes(dtypes: dict[str, str], what: str) -> str:
    """The NumPy room's parameter policy: every array is float32, or every array is float64
    (the model computes in that dtype).  ``dtypes`` maps each key to its dtype name.

    int, bool and complex arrays are refused (they would give garbage or complex logits), and
    so is a mix of float32 and float64 (one float64 array would silently turn the whole model
    into float64).  Returns the common dtype's name."""
    bad = {k: d for k, d in dtypes.items() if d not in PARAM_FLOAT_DTYPES}
    if bad:
        raise ValueError(mismatch_message(what, [], [], {}, mistyped={
            k: (d, " or ".join(PARAM_FLOAT_DTYPES)) for k, d in bad.items()}) + (
            "\n  (convert a state_dict with vit_scratch.state_dict_to_numpy, or cast the arrays "
            "with .astype(np.float32))"))
    kinds = sorted(set(dtypes.values()))
    if len(kinds) > 1:
        counts = {d: [k for k, v in dtypes.items() if v == d] for d in kinds}
        fewest = min(counts, key=lambda d: len(counts[d]))
        keys = counts[fewest]
        shown = ", ".join(keys[:8]) + (f", ... ({len(keys) - 8} more)" if len(keys) > 8 else "")
        raise ValueError(
            f"{what} mix dtypes: "
            + ", ".join(f"{len(counts[d])} {d}" for d in kinds)
            + f" arrays ({fewest}: {shown}); expected one dtype for every array (float32 for a "
            f"checkpoint, float64 for precision tests): cast them, e.g. "
            f"{{k: v.astype(np.float32) for k, v in params.items()}}"
        )
    return kinds[0] if kinds else "float32"


def bad_param_values(max_abs: dict[str, float]) -> dict[str, str]:
    """``max_abs`` maps each key to the largest ``|value|`` of its array (NaN if it holds a NaN)
    -> ``{key: what is wrong}`` for the keys that hold NaN, infinities or values beyond
    ``MAX_ABS_PARAM`` (damaged bytes, or a diverged training run)."""
    bad = {}
    for key, m in max_abs.items():
        if m != m:
            bad[key] = "NaN"
        elif m == math.inf:
            bad[key] = "inf"
        elif m > MAX_ABS_PARAM:
            bad[key] = f"|value| up to {m:.3g}"
    return bad


def check_param_values(max_abs: dict[str, float], what: str) -> None:
    """A ``ValueError`` naming every key of :func:`bad_param_values`."""
    bad = bad_param_values(max_abs)
    if bad:
        raise ValueError(mismatch_message(what, [], [], {}, bad_values=bad))


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


def mismatch_message(what: str, missing, unexpected, misshaped: dict,
                     mistyped: dict | None = None, bad_values: dict | None = None) -> str:
    """One readable message for missing, unexpected, mis-shaped and mis-typed keys
    (``mistyped`` maps each key to ``(got dtype, expected)``) and keys with values no model
    can use (``bad_values``: :func:`bad_param_values`)."""

    def short(keys, limit=12):
        keys = list(keys)
        shown = ", ".join(keys[:limit])
        return shown + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")

    structural = missing or unexpected or misshaped or mistyped
    lines = [f"{what} does not match:" if structural else f"{what} holds values no model can use:"]
    if missing:
        lines.append(f"  missing keys ({len(missing)}): {short(missing)}")
    if unexpected:
        lines.append(f"  unexpected keys ({len(unexpected)}): {short(unexpected)}")
    if misshaped:
        items = [f"{k}: got {g}, expected {e}" for k, (g, e) in misshaped.items()]
        lines.append(f"  mis-shaped keys ({len(items)}): {short(items)}")
    if mistyped:
        items = [f"{k}: got {g}, expected {e}" for k, (g, e) in mistyped.items()]
        lines.append(f"  mis-typed keys ({len(items)}): {short(items)}")
    if bad_values:
        items = [f"{k}: {v}" for k, v in bad_values.items()]
        lines.append(f"  keys with non-finite or implausible values ({len(items)}): "
                     f"{short(items)} (expected finite values within ±{MAX_ABS_PARAM:g}: a "
                     f"damaged file, or weights from a run that diverged?)")
    return "\n".join(lines)


# --- checkpoints -----------------------------------------------------------------------------


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or whose keys, shapes or dtypes do not fit the model."""


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A PyTorch file that holds Python objects beyond tensors and plain containers.  vit_scratch
    never unpickles those (that would run code chosen by whoever made the file)."""
