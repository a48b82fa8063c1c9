"""The CoaT family's spec: config, state_dict table, shared keys and registered names.  Torch-free.

Paper:
  Co-Scale Conv-Attentional Image Transformers -- Weijian Xu, Yifan Xu, Tyler Chang, Zhuowen Tu,
  ICCV 2021, https://arxiv.org/abs/2104.06399

Rooms: ``vit_scratch.numpy_nn.coat.CoaT`` and ``vit_scratch.torch_nn.coat.CoaT``.

A CoaT has four scales.  Scale 1 cuts the image into ``patch_size``² patches; each later scale
halves the grid again (a 2×2 patch embedding), so the strides are p, 2p, 4p, 8p (4, 8, 16, 32 for
the ImageNet models) and an input must be a multiple of the *total stride* 8p.  Every scale has
its own class token, a stack of *serial blocks* (conv-attention + MLP) and one convolutional
position encoding (CPE) and one convolutional relative position encoding (CRPE) that all its
blocks share.  CoaT-Lite stops there and classifies scale 4's class token.  CoaT adds
``parallel_depth`` *parallel blocks* that update scales 2-4 together, exchanging information
across scales (feature interpolation, or this library's direct cross-layer attention), and
classifies a learned mix of the three class tokens.

Shared modules: the reference registers one module under several names (``cpe2`` is also
``serial_blocks2.0.cpe`` and ``serial_blocks2.1.cpe``; ``parallel_blocks.0.mlp2`` is also
``mlp3`` and ``mlp4``).  ``coat_param_shapes`` lists every key of the state_dict, aliases
included, and ``shared_keys`` says which keys are one tensor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .. import validation
from .base import (DIGITS_CFG, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, ConfigMixin,
                   ModelTable, num_params)
from .vit import head_param_shapes, mlp_param_shapes

NUM_SCALES = 4
LATER_PATCH = 2  # scales 2-4 each halve the previous grid
CPE_WINDOW = 3  # the convolutional position encoding is a depthwise 3×3
PATCH_NORM_EPS = 1e-5  # the patch-embedding LayerNorms, in both rooms (token LayerNorms: 1e-6)
PARALLEL_MODES = ("interpolation", "cross_attention")
DEFAULT_CRPE_WINDOW = {3: 2, 5: 3, 7: 3}  # {window: heads}: 2 heads see 3×3, 3 see 5×5, 3 see 7×7


def _four(value, name: str, kind=int) -> tuple:
    """A per-scale setting as a tuple of 4 (lists from the command line become tuples)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != NUM_SCALES:
        raise ValueError(f"{name} must have one entry per scale ({NUM_SCALES}), got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float) if kind is float else int):
            raise ValueError(f"{name} must hold {NUM_SCALES} {'numbers' if kind is float else 'ints'}, "
                             f"got {value!r}")
        out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class CoaTConfig(ConfigMixin):
    """Every number that fixes a CoaT's architecture; both rooms read it.

    ``img_size`` is the default (and pretrained) input size; both rooms accept any multiple of
    the total stride at call time, since CoaT has no absolute position embedding.
    """

    fixed_input_size = False  # timm's pretrained_cfg key: any multiple of the total stride runs

    img_size: int | tuple[int, int] = 224
    in_chans: int = 3
    num_classes: int = 1000  # 0 -> no head: forward returns the pooled features
    patch_size: int = 4  # scale 1's patch; total stride = 8 · patch_size
    embed_dims: tuple[int, int, int, int] = (64, 128, 320, 512)
    serial_depths: tuple[int, int, int, int] = (2, 2, 2, 2)
    parallel_depth: int = 0  # 0: CoaT-Lite
    num_heads: int = 8  # the same at every scale
    mlp_ratios: tuple[float, float, float, float] = (4, 4, 4, 4)
    qkv_bias: bool = True
    crpe_window: dict = field(default_factory=lambda: dict(DEFAULT_CRPE_WINDOW))  # {window: heads}
    # How the parallel blocks exchange information between scales (CoaT only):
    #   "interpolation"    the reference: resize each scale's attention output to the others' grids
    #   "cross_attention"  direct cross-layer attention (vit_scratch.torch_nn.coscale); same weights
    parallel_mode: str = "interpolation"
    # Regularisation for training (identity in eval; the NumPy room trains with stochastic
    # depth only).
    drop_rate: float = 0.0  # dropout on the pooled features before the head
    proj_drop_rate: float = 0.0  # dropout after the attention projection and in the MLPs
    drop_path_rate: float = 0.0  # stochastic depth, the same rate in every block (as the reference)

    def validate(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen)
        super().validate()  # img_size, in_chans, num_classes (the field types are checked already)
        validation.check_positive(self.patch_size, "patch_size")
        validation.check_positive(self.num_heads, "num_heads")
        set_("embed_dims", _four(self.embed_dims, "embed_dims"))
        set_("serial_depths", _four(self.serial_depths, "serial_depths"))
        set_("mlp_ratios", _four(self.mlp_ratios, "mlp_ratios", kind=float))
        for s, dim in enumerate(self.embed_dims):
            if dim <= 0 or dim % self.num_heads:
                raise ValueError(f"embed_dims[{s}] = {dim} is not divisible by num_heads "
                                 f"{self.num_heads}: each head needs embed_dim / num_heads channels "
                                 f"(embed_dims={self.embed_dims!r})")
        if any(d < 0 for d in self.serial_depths):
            raise ValueError(f"serial_depths must be >= 0, got {self.serial_depths!r}")
        for s, (dim, ratio) in enumerate(zip(self.embed_dims, self.mlp_ratios)):
            validation.hidden_width(dim, ratio, f"mlp_ratios[{s}]")  # positive, >= 1 hidden unit
        validation.check_int(self.parallel_depth, "parallel_depth", minimum=0)
        if self.parallel_depth and not (self.embed_dims[1] == self.embed_dims[2] == self.embed_dims[3]):
            raise ValueError(
                f"parallel_depth={self.parallel_depth} needs equal embed_dims at scales 2-4 (the "
                f"parallel blocks add the scales' outputs and share one MLP), got "
                f"embed_dims={self.embed_dims!r}")
        if self.parallel_depth and not (self.mlp_ratios[1] == self.mlp_ratios[2] == self.mlp_ratios[3]):
            raise ValueError(
                f"parallel_depth={self.parallel_depth} needs equal mlp_ratios at scales 2-4 (one MLP "
                f"is shared by the three scales), got mlp_ratios={self.mlp_ratios!r}")
        validation.check_choice(self.parallel_mode, "parallel_mode", PARALLEL_MODES)
        set_("crpe_window", validation.check_window_heads(self.crpe_window, self.num_heads))
        for name in ("drop_rate", "proj_drop_rate", "drop_path_rate"):
            validation.check_probability(getattr(self, name), name)
        set_("img_size", validation.check_divisible(self.img_size, self.total_stride, "img_size",
                                                self.stride_detail))

    BEHAVIOUR_IN_TIMM = {"parallel_mode": "interpolation"}  # timm's parallel blocks interpolate
    PATCH_SIZE_IN_TIMM = 4  # timm's CoaT sizes the patch embeddings of scales 2-4 for this one

    def timm_kwargs(self) -> dict:
        """:meth:`ConfigMixin.timm_kwargs`; CoaT-Lite has no parallel blocks, so its
        ``parallel_mode`` changes nothing and is left out whatever it holds.  timm's CoaT
        expects scales 2-4 at a quarter, an eighth and a sixteenth of the image (a first patch
        of 4): another ``patch_size`` is a ``ValueError`` (timm has no such model)."""
        if self.patch_size != self.PATCH_SIZE_IN_TIMM:
            raise ValueError(f"patch_size={self.patch_size}: timm has no such model (timm's CoaT "
                             f"sizes scales 2-4 for a first patch of {self.PATCH_SIZE_IN_TIMM})")
        if self.is_lite:
            return ConfigMixin.timm_kwargs(self.replace(parallel_mode="interpolation"))
        return super().timm_kwargs()

    def __hash__(self):  # crpe_window is a dict; hash its items in order
        return hash(tuple((k, tuple(v.items()) if isinstance(v, dict) else v)
                          for k, v in self.__dict__.items()))

    # --- derived numbers ----------------------------------------------------------------------
    @property
    def is_lite(self) -> bool:
        """CoaT-Lite: serial blocks only, the head reads scale 4's class token."""
        return self.parallel_depth == 0

    @property
    def patch_sizes(self) -> tuple[int, int, int, int]:
        return (self.patch_size,) + (LATER_PATCH,) * (NUM_SCALES - 1)

    @property
    def strides(self) -> tuple[int, int, int, int]:
        """Pixels per token at each scale: (p, 2p, 4p, 8p)."""
        return tuple(self.patch_size * LATER_PATCH ** s for s in range(NUM_SCALES))

    @property
    def total_stride(self) -> int:
        return self.strides[-1]

    @property
    def stride_detail(self) -> str:
        return f"patch_size {self.patch_size} × 2 × 2 × 2"

    def grid_sizes(self, img_size=None) -> list[tuple[int, int]]:
        """The (rows, cols) of tokens at each scale for ``img_size`` (default: the config's)."""
        h, w = validation.check_divisible(self.img_size if img_size is None else img_size,
                                      self.total_stride, "image size", self.stride_detail)
        return [(h // s, w // s) for s in self.strides]

    @property
    def head_dims(self) -> tuple[int, ...]:
        return tuple(d // self.num_heads for d in self.embed_dims)

    @property
    def mlp_hiddens(self) -> tuple[int, ...]:
        return tuple(int(d * r) for d, r in zip(self.embed_dims, self.mlp_ratios))

    @property
    def feature_info(self) -> list[dict]:
        """timm's ``feature_info``: the four scales' maps (``coat_feature_info``)."""
        return coat_feature_info(self)

    @property
    def crpe_splits(self) -> list[tuple[int, int]]:
        """``[(window, heads), ...]`` in the order the heads are split."""
        return list(self.crpe_window.items())


# --- the state_dict ---------------------------------------------------------------------------
def crpe_param_shapes(head_dim: int, crpe_window: dict, prefix: str = "") -> dict:
    """One ConvRelPosEnc: a depthwise conv per head group, ``conv_list.i`` for the i-th window."""
    shapes = {}
    for i, (window, heads) in enumerate(crpe_window.items()):
        ch = heads * head_dim
        shapes[f"{prefix}conv_list.{i}.weight"] = (ch, 1, window, window)
        shapes[f"{prefix}conv_list.{i}.bias"] = (ch,)
    return shapes


def conv_attention_param_shapes(C: int, head_dim: int, crpe_window: dict, qkv_bias: bool,
                                prefix: str = "") -> dict:
    """One FactorAttnConvRelPosEnc: ``qkv``, ``proj`` and its (shared) ``crpe``."""
    return {
        f"{prefix}qkv.weight": (3 * C, C),
        **({f"{prefix}qkv.bias": (3 * C,)} if qkv_bias else {}),
        f"{prefix}proj.weight": (C, C),
        f"{prefix}proj.bias": (C,),
        **crpe_param_shapes(head_dim, crpe_window, prefix=f"{prefix}crpe."),
    }


def _norm(prefix: str, C: int) -> dict:
    return {f"{prefix}.weight": (C,), f"{prefix}.bias": (C,)}


def coat_param_shapes(cfg: CoaTConfig) -> dict[str, tuple[int, ...]]:
    """The ``state_dict`` of a CoaT as ``{key: shape}``, in the order PyTorch lists it, aliases
    of shared modules included (see :func:`shared_keys`)."""
    dims, hd, win = cfg.embed_dims, cfg.head_dims, cfg.crpe_window
    shapes = {f"cls_token{s + 1}": (1, 1, dims[s]) for s in range(NUM_SCALES)}
    in_chs = (cfg.in_chans,) + dims[:-1]
    for s in range(NUM_SCALES):
        p = cfg.patch_sizes[s]
        shapes[f"patch_embed{s + 1}.proj.weight"] = (dims[s], in_chs[s], p, p)
        shapes[f"patch_embed{s + 1}.proj.bias"] = (dims[s],)
        shapes.update(_norm(f"patch_embed{s + 1}.norm", dims[s]))
    for s in range(NUM_SCALES):
        shapes[f"cpe{s + 1}.proj.weight"] = (dims[s], 1, CPE_WINDOW, CPE_WINDOW)
        shapes[f"cpe{s + 1}.proj.bias"] = (dims[s],)
    for s in range(NUM_SCALES):
        shapes.update(crpe_param_shapes(hd[s], win, prefix=f"crpe{s + 1}."))
    for s in range(NUM_SCALES):
        C = dims[s]
        for n in range(cfg.serial_depths[s]):
            pre = f"serial_blocks{s + 1}.{n}."
            shapes[pre + "cpe.proj.weight"] = (C, 1, CPE_WINDOW, CPE_WINDOW)
            shapes[pre + "cpe.proj.bias"] = (C,)
            shapes.update(_norm(pre + "norm1", C))
            shapes.update(conv_attention_param_shapes(C, hd[s], win, cfg.qkv_bias,
                                                      prefix=pre + "factoratt_crpe."))
            shapes.update(_norm(pre + "norm2", C))
            shapes.update(mlp_param_shapes(C, cfg.mlp_hiddens[s], prefix=pre + "mlp."))
    for n in range(cfg.parallel_depth):
        pre = f"parallel_blocks.{n}."
        for s in (2, 3, 4):
            shapes.update(_norm(f"{pre}norm1{s}", dims[s - 1]))
        for s in (2, 3, 4):
            shapes.update(conv_attention_param_shapes(dims[s - 1], hd[s - 1], win, cfg.qkv_bias,
                                                      prefix=f"{pre}factoratt_crpe{s}."))
        for s in (2, 3, 4):
            shapes.update(_norm(f"{pre}norm2{s}", dims[s - 1]))
        for s in (2, 3, 4):
            shapes.update(mlp_param_shapes(dims[s - 1], cfg.mlp_hiddens[s - 1], prefix=f"{pre}mlp{s}."))
    if not cfg.is_lite:
        shapes.update(_norm("norm2", dims[1]))
        shapes.update(_norm("norm3", dims[2]))
    shapes.update(_norm("norm4", dims[3]))
    if not cfg.is_lite:
        shapes["aggregate.weight"] = (1, 3, 1)  # Conv1d(3 -> 1, kernel 1) over the class tokens
        shapes["aggregate.bias"] = (1,)
    shapes.update(head_param_shapes(dims[3], cfg.num_classes))
    return shapes


def shared_keys(cfg: CoaTConfig) -> list[list[str]]:
    """Groups of state_dict keys that name one tensor; the first key of each group is the
    canonical one (the module's own name, e.g. ``cpe2.proj.weight``), the rest are aliases.

    * ``cpe{s}`` is every ``serial_blocks{s}.N.cpe`` (and runs before each parallel block);
    * ``crpe{s}`` is every ``serial_blocks{s}.N.factoratt_crpe.crpe`` and
      ``parallel_blocks.N.factoratt_crpe{s}.crpe``;
    * ``parallel_blocks.N.mlp2`` is ``mlp3`` and ``mlp4`` of the same block.
    """
    groups = []
    for s in range(1, NUM_SCALES + 1):
        depth = cfg.serial_depths[s - 1]
        for leaf in ("weight", "bias"):
            groups.append([f"cpe{s}.proj.{leaf}"]
                          + [f"serial_blocks{s}.{n}.cpe.proj.{leaf}" for n in range(depth)])
        for i in range(len(cfg.crpe_window)):
            for leaf in ("weight", "bias"):
                tail = f"crpe.conv_list.{i}.{leaf}"
                group = [f"crpe{s}.conv_list.{i}.{leaf}"]
                group += [f"serial_blocks{s}.{n}.factoratt_crpe.{tail}" for n in range(depth)]
                if s > 1:
                    group += [f"parallel_blocks.{n}.factoratt_crpe{s}.{tail}"
                              for n in range(cfg.parallel_depth)]
                groups.append(group)
    for n in range(cfg.parallel_depth):
        for leaf in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
            groups.append([f"parallel_blocks.{n}.mlp{s}.{leaf}" for s in (2, 3, 4)])
    return [g for g in groups if len(g) > 1]


def unused_keys(cfg: CoaTConfig) -> set[str]:
    """The keys of modules no forward pass uses: a scale without serial blocks leaves its CPE
    and CRPE unused, unless parallel blocks (CoaT, scales 2-4) run them.  They get no gradient
    (PyTorch: ``grad`` None; the NumPy room: no entry), so an optimiser leaves them as they are."""
    keys = set()
    for s in range(1, NUM_SCALES + 1):
        if cfg.serial_depths[s - 1] == 0 and (s == 1 or cfg.is_lite):
            keys |= {f"cpe{s}.proj.weight", f"cpe{s}.proj.bias"}
            keys |= set(crpe_param_shapes(cfg.head_dims[s - 1], cfg.crpe_window, f"crpe{s}."))
    return keys


def coat_feature_info(cfg: CoaTConfig) -> list[dict]:
    """The four per-scale feature maps of ``forward_intermediates`` (timm's ``feature_info``):
    channels, stride in pixels, and the module whose output they are (for CoaT, scales 2-4 are
    taken after the parallel blocks)."""
    return [dict(num_chs=cfg.embed_dims[s], reduction=cfg.strides[s],
                 module="parallel_blocks" if s > 0 and not cfg.is_lite else f"serial_blocks{s + 1}")
            for s in range(NUM_SCALES)]


class CoaTImageSizeMixin:
    """What both rooms' ``CoaT`` models check of a batch of images (they hold ``self.cfg``)."""

    def check_image_size(self, shape) -> None:
        """(B, in_chans, H, W) with H and W any multiple of the total stride: CoaT has no
        position embedding tied to one size (``prepare_images`` calls this)."""
        validation.check_images(shape, self.cfg.in_chans)
        validation.check_divisible(tuple(shape[-2:]), self.cfg.total_stride, "image size",
                                   self.cfg.stride_detail)

    def grid_sizes(self, images) -> list[tuple[int, int]]:
        """The four token grids (rows, cols) of a batch of images that ``prepare_images`` has
        checked."""
        H, W = images.shape[-2:]
        return [(H // s, W // s) for s in self.cfg.strides]


def coat_num_params(cfg: CoaTConfig) -> int:
    """Parameters of the model, each shared tensor counted once (``sum(p.numel() for p in
    model.parameters())``; ``num_params(coat_param_shapes(cfg))`` counts every alias)."""
    shapes = coat_param_shapes(cfg)
    repeated = sum(math.prod(shapes[k]) for g in shared_keys(cfg) for k in g[1:])
    return num_params(shapes) - repeated


#: The registered names: name -> default config and the pretrained_cfg of its weights.
MODELS = ModelTable(coat_param_shapes, pretrained_cfg=dict(
    input_size=(3, 224, 224), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=0.9,
    interpolation="bicubic"))

_LITE_MLP = (8, 8, 4, 4)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/coat_lite_tiny.in1k"))
def coat_lite_tiny() -> CoaTConfig:
    """CoaT-Lite Tiny: dims 64/128/256/320, 2 serial blocks per scale (5.7 M parameters)."""
    return CoaTConfig(embed_dims=(64, 128, 256, 320), serial_depths=(2, 2, 2, 2), mlp_ratios=_LITE_MLP)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/coat_lite_mini.in1k"))
def coat_lite_mini() -> CoaTConfig:
    """CoaT-Lite Mini: dims 64/128/320/512, 2 serial blocks per scale (11.0 M parameters)."""
    return CoaTConfig(embed_dims=(64, 128, 320, 512), serial_depths=(2, 2, 2, 2), mlp_ratios=_LITE_MLP)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/coat_lite_small.in1k"))
def coat_lite_small() -> CoaTConfig:
    """CoaT-Lite Small: dims 64/128/320/512, serial depths 3/4/6/3 (19.8 M parameters)."""
    return CoaTConfig(embed_dims=(64, 128, 320, 512), serial_depths=(3, 4, 6, 3), mlp_ratios=_LITE_MLP)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/coat_lite_medium.in1k"))
def coat_lite_medium() -> CoaTConfig:
    """CoaT-Lite Medium: dims 128/256/320/512, serial depths 3/6/10/8, MLP ratio 4 (44.6 M)."""
    return CoaTConfig(embed_dims=(128, 256, 320, 512), serial_depths=(3, 6, 10, 8))


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/coat_tiny.in1k"))
def coat_tiny() -> CoaTConfig:
    """CoaT Tiny: 152 channels at every scale, 2 serial blocks each, 6 parallel blocks (5.5 M)."""
    return CoaTConfig(embed_dims=(152, 152, 152, 152), serial_depths=(2, 2, 2, 2), parallel_depth=6)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/coat_mini.in1k"))
def coat_mini() -> CoaTConfig:
    """CoaT Mini: dims 152/216/216/216, 2 serial blocks each, 6 parallel blocks (10.3 M)."""
    return CoaTConfig(embed_dims=(152, 216, 216, 216), serial_depths=(2, 2, 2, 2), parallel_depth=6)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/coat_small.in1k"))
def coat_small() -> CoaTConfig:
    """CoaT Small: dims 152/320/320/320, 2 serial blocks each, 6 parallel blocks (21.7 M)."""
    return CoaTConfig(embed_dims=(152, 320, 320, 320), serial_depths=(2, 2, 2, 2), parallel_depth=6)


# Small configurations for the offline data (scikit-learn's 8×8 digits).  patch_size 1 makes the
# total stride 8, so the 8×8 digits enter as they are (scales of 8×8, 4×4, 2×2 and 1×1 tokens)
# and the trainer's ``img_size=8`` works; digits placed on a larger canvas (16, 32, 64, ...) run
# through the same weights, since any multiple of 8 is accepted at call time.
_DIGITS_WINDOWS = {3: 2, 5: 2}  # 4 heads; a 7×7 window would cover the whole 8×8 grid


@MODELS.register(pretrained_cfg=DIGITS_CFG)
def coat_lite_digits() -> CoaTConfig:
    """A small CoaT-Lite for 8×8 digits: patch 1 (grids 8, 4, 2, 1), dims 32/64/96/128, one
    serial block per scale, 4 heads with 3×3 and 5×5 CRPE windows.

    With the trainer's defaults and ``--epochs 20`` (an epoch costs about 1.7× vit_digits', so
    this takes a little less than vit_digits' 40 epochs): 98.9 ± 0.5% over five splits (README, "Training")."""
    return CoaTConfig(img_size=8, patch_size=1, in_chans=1, num_classes=10,
                      embed_dims=(32, 64, 96, 128), serial_depths=(1, 1, 1, 1), num_heads=4,
                      mlp_ratios=(2, 2, 2, 2), crpe_window=dict(_DIGITS_WINDOWS))


@MODELS.register(pretrained_cfg=DIGITS_CFG)
def coat_digits() -> CoaTConfig:
    """A small CoaT for 8×8 digits: patch 1, dims 32/64/64/64, one serial block per scale and
    two parallel blocks (feature interpolation; ``parallel_mode="cross_attention"`` for the
    other co-scale variant, same weights).

    With the trainer's defaults and ``--epochs 12`` (an epoch costs about 2.6× vit_digits'):
    99.0 ± 0.5% over five splits, the best of the four small models (README, "Training")."""
    return CoaTConfig(img_size=8, patch_size=1, in_chans=1, num_classes=10,
                      embed_dims=(32, 64, 64, 64), serial_depths=(1, 1, 1, 1), parallel_depth=2,
                      num_heads=4, mlp_ratios=(2, 2, 2, 2), crpe_window=dict(_DIGITS_WINDOWS))
