"""What every model family's spec is made of.  Torch-free and NumPy-free.

A *family* (ViT, CaiT, CoaT, ...) is three files:

    vit_scratch/specs/<family>.py       config dataclass, {key: shape} table, registered names
    vit_scratch/numpy_nn/<family>.py    the NumPy model class
    vit_scratch/torch_nn/<family>.py    the PyTorch model class, with the same class name

plus one line in the factory's table (``vit_scratch.models.FAMILIES``).  The spec module
declares its registered names in a :class:`ModelTable` (``MODELS``), next to its config class;
the trainer, checkpoints and plots never learn a family's name.

Every family's config is a frozen dataclass that has at least the fields ``img_size``,
``in_chans`` and ``num_classes`` (the trainer sets those from the data) and mixes in
:class:`ConfigMixin` for ``replace`` and validation: ``ConfigMixin.__post_init__`` checks every
field against its type annotation (:func:`check_config_fields`: ``qkv_bias='False'``,
``depth=2.0``, ``mlp_ratio=float('nan')`` are ``ValueError``s naming the field), then calls the
family's ``validate()`` for ranges and consistency (written with the helpers of
``vit_scratch.validation``).  A family config defines ``validate``, not ``__post_init__``.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Callable, Sequence

from .. import validation

# Normalisation constants of the reference checkpoints (timm's names for them).
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)  # DeiT, CaiT, CoaT
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
IMAGENET_INCEPTION_MEAN = (0.5, 0.5, 0.5)  # Google's ViT (augreg) checkpoints
IMAGENET_INCEPTION_STD = (0.5, 0.5, 0.5)

#: The fields a config must have so the factory and the trainer can treat every family alike.
COMMON_FIELDS = ("img_size", "in_chans", "num_classes")


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


# --- the config machinery: every field checked against its annotation ------------------------


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
        return validation.check_bool(value, name)
    if tp is int:
        return validation.check_int(value, name, minimum=None)
    if tp is float:
        return validation.check_float(value, name)
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{name} must be a str, got {validation.describe_value(value)}")
        return value
    if tp is type(None):
        if value is not None:
            raise ValueError(f"{name} must be None, got {validation.describe_value(value)}")
        return None
    if origin is typing.Literal:
        return validation.check_choice(value, name, args)
    if origin is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            raise ValueError(f"{name} must be {describe_type(tp)}, "
                             f"got {validation.describe_value(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            items = [(v, args[0]) for v in value]
        elif len(args) != len(value):
            raise ValueError(f"{name} must be {describe_type(tp)}, "
                             f"got {validation.describe_value(value)}")
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
                         f"got {validation.describe_value(value)}")
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


class ConfigMixin:
    """Validation and ``replace(**changes)`` for a frozen config dataclass.

    On construction every field is checked against its annotation (and NumPy scalars become
    Python ones), then ``validate()`` -- the family's ranges -- runs.  Unknown names given to
    ``replace`` are a ``TypeError``."""

    def __post_init__(self):
        check_config_fields(self)
        self.validate()

    def validate(self) -> None:
        """Ranges and consistency of the family's fields; raise ``ValueError`` naming the field.
        The common fields are checked here; a family extends this (calling ``super()``)."""
        validation.to_2tuple(self.img_size, "img_size")
        validation.check_positive(self.in_chans, "in_chans")
        validation.check_int(self.num_classes, "num_classes", minimum=0)

    def replace(self, **changes):
        return dataclasses.replace(self, **check_fields(type(self), changes))

    @classmethod
    def build(cls, cfg=None, **kwargs):
        """What a model class does with its arguments: ``cfg`` with ``kwargs`` replaced, or a
        new config from ``kwargs`` alone (``Cait(embed_dim=192, depth=24)``)."""
        return cls(**check_fields(cls, kwargs)) if cfg is None else cfg.replace(**kwargs)


class PatchGridMixin:
    """Derived sizes of a single-scale, patch-based config (ViT, CaiT): it needs the fields
    ``img_size``, ``patch_size``, ``embed_dim``, ``num_heads`` and ``mlp_ratio``."""

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patches along (H, W)."""
        return validation.grid_size(self.img_size, self.patch_size)

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid_size
        return gh * gw

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        return validation.hidden_width(self.embed_dim, self.mlp_ratio)  # int(embed_dim * mlp_ratio), >= 1


def num_params(shapes: dict[str, tuple[int, ...]]) -> int:
    """Total number of parameters of a ``{key: shape}`` table (e.g. ``vit_param_shapes(cfg)``).

    Keys that name one shared tensor (CoaT) count once per key here; a family whose table has
    such aliases says so in its ``shared_keys``."""
    return sum(math.prod(shape) for shape in shapes.values())


@dataclass(frozen=True)
class ModelSpec:
    """A registered name: its default config and what its weights expect (``pretrained_cfg``:
    ``input_size``, ``mean``, ``std``, ``crop_pct``, ``interpolation``; for a name timm publishes
    weights of, ``hf_hub_id``: their Hugging Face Hub repository, as timm names it)."""

    name: str
    default_config: Callable  # () -> config
    pretrained_cfg: dict
    doc: str = ""

    def config(self, **kwargs):
        """The default config with ``kwargs`` overriding its fields (unknown ones: ``TypeError``)."""
        return self.default_config().replace(**kwargs)

    def pretrained_cfg_for(self, cfg) -> dict:
        """The name's pretrained_cfg, with ``input_size`` and ``num_classes`` those of ``cfg``
        (a fixed-size model accepts exactly that input)."""
        h, w = cfg.img_size if isinstance(cfg.img_size, tuple) else (cfg.img_size,) * 2
        return {**self.pretrained_cfg, "architecture": self.name,
                "input_size": (cfg.in_chans, h, w), "num_classes": cfg.num_classes}


class ModelTable(dict):
    """A family's registered names, ``{name: ModelSpec}``, declared in its spec module next to
    its config class, in the style of timm's ``@register_model``::

        MODELS = ModelTable(cait_param_shapes, pretrained_cfg=dict(mean=..., std=..., ...))

        @MODELS.register
        def cait_xxs24_224() -> CaitConfig:
            "CaiT-XXS24 at 224²."
            return CaitConfig(embed_dim=192, depth=24, num_heads=4, init_values=1e-5)

    The decorated function returns the name's default config; ``@MODELS.register(pretrained_cfg=
    ...)`` adds what that name's weights expect on top of the family's defaults.
    ``param_shapes`` is the family's ``{state_dict key: shape}`` table (cfg -> table), which
    tells a checkpoint of this family from another's (``vit_scratch.models``).
    """

    def __init__(self, param_shapes: Callable, pretrained_cfg: dict):
        super().__init__()
        self.param_shapes = param_shapes
        self.pretrained_cfg = dict(pretrained_cfg)

    def register(self, fn: Callable | None = None, *, pretrained_cfg: dict | None = None):
        """Decorator: register ``fn`` (-> default config) under its own name."""

        def decorate(fn):
            if fn.__name__ in self:
                raise ValueError(f"model name {fn.__name__!r} is registered twice")
            self[fn.__name__] = ModelSpec(fn.__name__, fn,
                                          {**self.pretrained_cfg, **(pretrained_cfg or {})},
                                          (fn.__doc__ or "").strip())
            return fn

        return decorate if fn is None else decorate(fn)
