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
field against its type annotation (``validation.check_config_fields``: ``qkv_bias='False'``,
``depth=2.0``, ``mlp_ratio=float('nan')`` are ``ValueError``s naming the field), then calls the
family's ``validate()`` for ranges and consistency (written with the helpers of
``vit_scratch.validation``).  A family config defines ``validate``, not ``__post_init__``.
A config is built -- and so validated -- once per ``create_model``: a model class takes the
config it is given as it is (:meth:`ConfigMixin.build`), and a registered name builds its
default config once (:attr:`ModelSpec.default`).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Callable

from .. import validation

# Normalisation constants of the reference checkpoints (timm's names for them).
IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)  # DeiT, CaiT, CoaT
IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)
IMAGENET_INCEPTION_MEAN = (0.5, 0.5, 0.5)  # Google's ViT (augreg) checkpoints
IMAGENET_INCEPTION_STD = (0.5, 0.5, 0.5)

#: The fields a config must have so the factory and the trainer can treat every family alike.
COMMON_FIELDS = ("img_size", "in_chans", "num_classes")

#: The token LayerNorms of ViT, CaiT and CoaT (timm's eps for them), in both rooms.
LAYER_NORM_EPS = 1e-6

#: What the small ``*_digits`` configs expect: scikit-learn's 8×8 digits, values in [0, 1].
#: ``input_size`` follows the config's img_size (:meth:`ModelSpec.pretrained_cfg_for`), so the
#: trainer resizes the digits to whatever img_size a run uses.
DIGITS_CFG = dict(input_size=(1, 8, 8), mean=(0.0,), std=(1.0,), crop_pct=1.0,
                  interpolation="bilinear")

#: The licence of the weights timm publishes for our shared names (timm's ``pretrained_cfg``
#: says ``apache-2.0`` for each), and of the weights this project trains (its own licence).
PUBLISHED_WEIGHTS_LICENSE = "apache-2.0"
OWN_WEIGHTS_LICENSE = "mit"


class ConfigMixin:
    """Validation and ``replace(**changes)`` for a frozen config dataclass.

    On construction every field is checked against its annotation (and NumPy scalars become
    Python ones), then ``validate()`` -- the family's ranges -- runs.  Unknown names given to
    ``replace`` are a ``TypeError``."""

    def __post_init__(self):
        validation.check_config_fields(self)
        self.validate()

    def validate(self) -> None:
        """Ranges and consistency of the family's fields; raise ``ValueError`` naming the field.
        The common fields are checked here; a family extends this (calling ``super()``)."""
        validation.to_2tuple(self.img_size, "img_size")
        validation.check_positive(self.in_chans, "in_chans")
        validation.check_int(self.num_classes, "num_classes", minimum=0)

    def replace(self, **changes):
        return dataclasses.replace(self, **validation.check_fields(type(self), changes))

    #: Fields of ours that timm's model class does not take, each with the value that is
    #: timm's behaviour (a family lists its own; see :meth:`timm_kwargs`).
    BEHAVIOUR_IN_TIMM: dict = {}

    def timm_kwargs(self) -> dict:
        """The config as keyword arguments of timm's model class, which ``timm.create_model``
        passes on: every field, except those timm's class does not take (``BEHAVIOUR_IN_TIMM``).
        Those must hold timm's behaviour; otherwise timm has no such model, and this is a
        ``ValueError`` that says so."""
        kwargs = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, timm_value in self.BEHAVIOUR_IN_TIMM.items():
            value = kwargs.pop(name)
            if value != timm_value:
                raise ValueError(
                    f"{name}={value!r}: timm has no such model (timm's "
                    f"{type(self).__name__.removesuffix('Config')} always behaves as "
                    f"{name}={timm_value!r}, and takes no {name} argument)")
        return kwargs

    @property
    def feature_info(self) -> list[dict]:
        """timm's ``feature_info`` of the models: the maps ``forward_intermediates`` returns
        (channels, stride, module); a family lists its own."""
        return []

    @classmethod
    def build(cls, cfg=None, **kwargs):
        """What a model class does with its arguments: ``cfg`` as it is (a config checked itself
        when it was built), ``cfg`` with ``kwargs`` replaced, or a new config from ``kwargs``
        alone (``Cait(embed_dim=192, depth=24)``)."""
        if cfg is None:
            return cls(**validation.check_fields(cls, kwargs))
        if not isinstance(cfg, cls):
            raise ValueError(f"cfg must be a {cls.__name__}, got {type(cfg).__name__}")
        return cfg.replace(**kwargs) if kwargs else cfg


class PatchGridMixin:
    """Checks and derived sizes of a single-scale, patch-based config (ViT, CaiT): it needs the
    fields ``img_size``, ``patch_size``, ``depth``, ``embed_dim``, ``num_heads`` and
    ``mlp_ratio``.  Mixed in before :class:`ConfigMixin`."""

    #: A position embedding of one patch grid: the model takes ``img_size`` only (unless it is
    #: built with ``dynamic_img_size``).  timm's ``pretrained_cfg["fixed_input_size"]``.
    fixed_input_size = True

    def validate(self) -> None:
        """The image tiles into patches, the heads split the channels, the MLP has a hidden
        unit; then the common fields (``ConfigMixin``)."""
        validation.check_positive(self.patch_size, "patch_size")
        validation.grid_size(self.img_size, self.patch_size)  # the error shows img_size as given
        object.__setattr__(self, "img_size", validation.to_2tuple(self.img_size, "img_size"))
        super().validate()  # in_chans, num_classes
        validation.check_positive(self.depth, "depth")
        validation.head_dim(self.embed_dim, self.num_heads)
        validation.hidden_width(self.embed_dim, self.mlp_ratio, "mlp_ratio")  # >= 1 hidden unit

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

    @property
    def feature_info(self) -> list[dict]:
        """timm's ``feature_info``: every block's output, ``embed_dim`` channels at the patch
        stride (what ``forward_intermediates`` returns)."""
        return [dict(num_chs=self.embed_dim, reduction=self.patch_size, module=f"blocks.{i}")
                for i in range(self.depth)]


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
    param_shapes: Callable | None = None  # the family's cfg -> {state_dict key: shape} table

    @functools.cached_property
    def default(self):
        """The name's default config, built once."""
        return self.default_config()

    @property
    def tag(self) -> str:
        """The tag of the name's published weights, timm's ``name.tag`` (``"fb_in1k"`` for
        ``timm/deit_tiny_patch16_224.fb_in1k``); "" for a name without published weights."""
        hub_id = self.pretrained_cfg.get("hf_hub_id") or ""
        return hub_id.split("/")[-1].partition(".")[2]

    @functools.cached_property
    def layer_names(self) -> dict:
        """timm's ``first_conv`` (the module of the first convolution's weight, the one that
        sees the image channels) and ``classifier`` (the head's modules), read from the
        family's {key: shape} table of the default config."""
        shapes = self.param_shapes(self.default) if self.param_shapes else {}
        module = lambda key: key.rsplit(".", 1)[0]  # noqa: E731
        convs = [module(k) for k, v in shapes.items() if k.endswith(".weight") and len(v) == 4]
        heads = tuple(module(k) for k, v in shapes.items()
                      if k.startswith("head") and k.endswith(".weight") and len(v) == 2)
        return dict(first_conv=convs[0] if convs else None,
                    classifier=heads[0] if len(heads) == 1 else (heads or "head"))

    def config(self, **kwargs):
        """The default config with ``kwargs`` overriding its fields (unknown ones: ``TypeError``):
        a new config, built and validated once."""
        return self.default.replace(**kwargs)

    def pretrained_cfg_for(self, cfg) -> dict:
        """The name's pretrained_cfg, with ``input_size`` and ``num_classes`` those of ``cfg``
        (a fixed-size model accepts exactly that input), and the rest of timm's keys:
        ``fixed_input_size`` (the family's), ``first_conv``, ``classifier``, ``pool_size``
        (None: the features are tokens, not a map), ``crop_mode``, ``tag`` and ``license``; a
        single ``mean``/``std`` value is repeated for each of ``cfg.in_chans`` channels."""
        h, w = cfg.img_size if isinstance(cfg.img_size, tuple) else (cfg.img_size,) * 2
        published = bool(self.pretrained_cfg.get("hf_hub_id"))
        # one mean and std for every channel (the *_digits names) is given once per channel
        per_channel = {k: tuple(v) * cfg.in_chans for k, v in self.pretrained_cfg.items()
                       if k in ("mean", "std") and len(v) == 1}
        return {"fixed_input_size": getattr(cfg, "fixed_input_size", True), **self.layer_names,
                "pool_size": None, "crop_mode": "center", "tag": self.tag,
                "license": PUBLISHED_WEIGHTS_LICENSE if published else OWN_WEIGHTS_LICENSE,
                **self.pretrained_cfg, **per_channel, "architecture": self.name,
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
                                          (fn.__doc__ or "").strip(), self.param_shapes)
            return fn

        return decorate if fn is None else decorate(fn)
