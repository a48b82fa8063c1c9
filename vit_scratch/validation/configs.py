"""Checks of configs and of the arguments of a layer built by hand.

* **field types**: :func:`check_config_fields` checks every field of a config dataclass against
  its type annotation (``qkv_bias='False'``, ``depth=2.0``, ``mlp_ratio=float('nan')`` are
  ``ValueError`` s naming the field); ``ConfigMixin.__post_init__`` (``specs/base.py``) calls it
  for every family, before the family's own ranges (``validate()``).  :func:`check_fields`
  refuses a keyword that is not a field (a ``TypeError`` listing the fields);
* **sizes and ranges** the families' ``validate()`` use: :func:`grid_size`, :func:`head_dim`,
  :func:`hidden_width`, :func:`check_init_values`, :func:`check_divisible`,
  :func:`check_window_heads`;
* **a layer built by hand** (``Attention``, ``Mlp``, ``LayerScale``, ``PatchEmbed``, ...):
  :func:`check_layer_args`, its arguments in one call.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import types
import typing
from typing import Sequence

from .values import (_is_bool, _show, check_bool, check_choice, check_float, check_int,
                     check_positive, check_positive_float, check_probability, describe_value,
                     to_2tuple)

# --- field types: every field checked against its annotation ----------------------------------


def check_fields(cls, kwargs: dict) -> dict:
    """``kwargs`` if every key is a field of the dataclass ``cls``; else a ``TypeError``
    listing the fields it knows."""
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise TypeError(
            f"unknown argument(s) {', '.join(map(repr, unknown))} for {cls.__name__}; "
            f"known: {', '.join(known)}"
        )
    return kwargs



def describe_type(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return "True or False"
    if tp is int:
        return "an int"
    if tp is float:
        return "a finite number"
    if tp is str:
        return "a str"
    if tp is type(None):
        return "None"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a tuple of {describe_type(args[0]).removeprefix('an ').removeprefix('a ')}s"
        if len(set(args)) == 1 and args[0] in (int, float):
            what = describe_type(args[0]).removeprefix("an ").removeprefix("a ") + "s"
            return f"a pair of {what}" if len(args) == 2 else f"a tuple of {len(args)} {what}"
        return f"a tuple ({', '.join(describe_type(a) for a in args)})"
    if origin is typing.Literal:
        return f"one of {args!r}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args)
    return getattr(tp, "__name__", str(tp))


class _Unchecked(Exception):
    """An annotation this layer does not know: the family's ``validate()`` checks the field."""


def check_value(value, tp, name: str):
    """``value`` checked against the annotation ``tp`` (and normalised: NumPy scalars become
    Python ones, lists become tuples).  Annotations it does not know pass unchecked."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is bool:
        return check_bool(value, name)
    if tp is int:
        return check_int(value, name, minimum=None)
    if tp is float:
        return check_float(value, name)
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a str, got {describe_value(value)}")
        return value
    if tp is type(None):
        if value is not None:
            raise ValueError(f"{name} must be None, got {describe_value(value)}")
        return None
    if origin is typing.Literal:
        return check_choice(value, name, args)
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ValueError(f"{name} must be {describe_type(tp)}, "
                             f"got {describe_value(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            items = [(v, args[0]) for v in value]
        elif len(args) != len(value):
            raise ValueError(f"{name} must be {describe_type(tp)}, "
                             f"got {describe_value(value)}")
        else:
            items = list(zip(value, args))
        return tuple(check_value(v, a, f"{name}[{i}]") for i, (v, a) in enumerate(items))
    if origin in (typing.Union, types.UnionType):
        for arm in args:  # the first arm that accepts the value wins
            try:
                return check_value(value, arm, name)
            except ValueError:
                continue
        raise ValueError(f"{name} must be {describe_type(tp)}, "
                         f"got {describe_value(value)}")
    raise _Unchecked(tp)


@functools.lru_cache(maxsize=None)
def _type_hints(cls) -> dict:
    return typing.get_type_hints(cls)


def check_config_fields(cfg) -> None:
    """Check every field of the config dataclass ``cfg`` against its type annotation, in place
    (a frozen dataclass is updated with ``object.__setattr__``).  ``ConfigMixin.__post_init__``
    calls this for every family, before the family's own ranges (``validate()``)."""
    hints = _type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        try:
            checked = check_value(value, hints.get(f.name, typing.Any), f.name)
        except _Unchecked:
            continue
        if checked is not value:
            object.__setattr__(cfg, f.name, checked)


# --- sizes and ranges of the families' fields -----------------------------------------------


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


# --- the arguments of a layer built by hand ----------------------------------------------------

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
