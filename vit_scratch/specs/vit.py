"""The ViT family's spec: config, state_dict table and registered names.  Torch-free.

Papers:
  An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale -- Dosovitskiy et al.,
  ICLR 2021, https://arxiv.org/abs/2010.11929
  Training data-efficient image transformers & distillation through attention (DeiT) --
  Touvron et al., ICML 2021, https://arxiv.org/abs/2012.12877 (the same architecture; its
  distilled models add a distillation token and a second head, ``distilled=True``)
  DeiT III: Revenge of the ViT -- Touvron, Cord, Jégou, ECCV 2022,
  https://arxiv.org/abs/2204.07118 (the same architecture with LayerScale in every block,
  ``init_values=1e-6``, and no position embedding for the class token, ``no_embed_class=True``)

Rooms: ``vit_scratch.numpy_nn.vit.VisionTransformer`` and ``vit_scratch.torch_nn.vit.VisionTransformer``
(and their subclasses ``VisionTransformerDistilled`` for ``distilled=True``, timm's class names).
Both build their blocks from the config: the residual form (:attr:`ViTConfig.residual`) and where
the position embedding goes are fields, so a variant of the family -- DeiT III -- is registrations
in this file and nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import validation
from .base import (
    DIGITS_CFG,
    IMAGENET_DEFAULT_MEAN,
    IMAGENET_DEFAULT_STD,
    IMAGENET_INCEPTION_MEAN,
    IMAGENET_INCEPTION_STD,
    ConfigMixin,
    ModelTable,
    PatchGridMixin,
)


#: The residual forms of a block, as the CaiT paper compares them (Touvron et al., "Going deeper
#: with Image Transformers", Fig. 1, https://arxiv.org/abs/2103.17239), used by both rooms'
#: ``layerscale`` modules and by ViT's config (:attr:`ViTConfig.residual`):
#: name -> (pre-norm?, scale: None | "scalar" | "channel").
#:   "prenorm"         x + f(LN(x))                    ViT, DeiT
#:   "rezero"          x + α·f(x), α = 0 at init        ReZero / SkipInit: no normalisation
#:   "prenorm_scalar"  x + α·f(LN(x)), α = 0 at init    the scalar with the norm put back
#:   "layerscale"      x + diag(λ)·f(LN(x)), λ = ε      CaiT, DeiT III
RESIDUAL_FORMS = {
    "prenorm": (True, None),
    "rezero": (False, "scalar"),
    "prenorm_scalar": (True, "scalar"),
    "layerscale": (True, "channel"),
}


def check_residual(residual: str) -> tuple[bool, str | None]:
    """``(pre-norm?, scale kind)`` of a residual form; anything else is a ``ValueError``."""
    if residual not in RESIDUAL_FORMS:
        raise ValueError(f"residual must be one of {tuple(RESIDUAL_FORMS)}, got {residual!r}")
    return RESIDUAL_FORMS[residual]


@dataclass(frozen=True)
class ViTConfig(PatchGridMixin, ConfigMixin):
    """Every number that fixes a ViT's architecture; both rooms read it."""

    img_size: int | tuple[int, int] = 224  # (H, W) the position embedding is built for
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000  # 0 -> no head, the model returns the class-token features
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    # DeiT's distillation token: a second learned token beside the class token, read by a
    # second head (head_dist) that learns from a teacher's predictions (training.recipe)
    distilled: bool = False
    # LayerScale's ε: every block's two residual branches scaled per channel by a learned vector
    # that starts at ε, x + diag(λ)·f(LN(x)) (CaiT's form; DeiT III: 1e-6).  None: the plain
    # pre-norm residual x + f(LN(x)) of ViT and DeiT.  timm's ``init_values``.
    init_values: float | None = None
    # True: the class (and distillation) token get no position embedding -- pos_embed covers the
    # patch grid only and is added before the tokens are put in front (DeiT III).  timm's name.
    no_embed_class: bool = False
    # Regularisation for training (identity in eval; the NumPy room trains with stochastic
    # depth only).
    drop_rate: float = 0.0  # dropout on embeddings, attention output and MLP
    attn_drop_rate: float = 0.0  # dropout on attention weights
    drop_path_rate: float = 0.0  # stochastic depth, linearly increasing over blocks

    def validate(self):
        super().validate()  # the patch grid, heads, MLP (PatchGridMixin); in_chans, num_classes
        if self.init_values is not None:
            validation.check_init_values(self.init_values)
        for name in ("drop_rate", "attn_drop_rate", "drop_path_rate"):
            validation.check_probability(getattr(self, name), name)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens: the class token, and the distillation token of a
        distilled model."""
        return 2 if self.distilled else 1

    @property
    def pos_embed_prefix_tokens(self) -> int:
        """Entries of ``pos_embed`` before the patch grid: one per prefix token, or none with
        ``no_embed_class``."""
        return 0 if self.no_embed_class else self.num_prefix_tokens

    @property
    def residual(self) -> str:
        """The blocks' residual form, a name of ``specs.cait.RESIDUAL_FORMS``: ``"layerscale"``
        with ``init_values``, else ``"prenorm"``."""
        return "prenorm" if self.init_values is None else "layerscale"

    def timm_kwargs(self) -> dict:
        """As every family's, without ``distilled``: timm picks DeiT's distilled class by the
        model's name (``vit_scratch.models.timm_name``), not by a keyword."""
        kwargs = super().timm_kwargs()
        kwargs.pop("distilled")
        return kwargs


def vit_param_shapes(cfg: ViTConfig) -> dict[str, tuple[int, ...]]:
    """The ``state_dict`` of a ViT as ``{key: shape}``, in the order PyTorch lists it."""
    C, H, p = cfg.embed_dim, cfg.mlp_hidden, cfg.patch_size
    shapes = {
        "cls_token": (1, 1, C),
        "pos_embed": (1, cfg.pos_embed_prefix_tokens + cfg.num_patches, C),
        **({"dist_token": (1, 1, C)} if cfg.distilled else {}),
        "patch_embed.proj.weight": (C, cfg.in_chans, p, p),
        "patch_embed.proj.bias": (C,),
    }
    block = block_param_shapes(C, H, cfg.qkv_bias, cfg.residual)
    for i in range(cfg.depth):
        shapes.update({f"blocks.{i}.{k}": v for k, v in block.items()})
    shapes["norm.weight"] = (C,)
    shapes["norm.bias"] = (C,)
    shapes.update(head_param_shapes(C, cfg.num_classes))
    if cfg.distilled:
        shapes.update(head_param_shapes(C, cfg.num_classes, "head_dist"))
    return shapes


def block_param_shapes(C: int, hidden: int, qkv_bias: bool = True,
                       residual: str = "prenorm") -> dict[str, tuple[int, ...]]:
    """One block with a residual form of ``specs.cait.RESIDUAL_FORMS`` (timm's ViT keys):
    ``norm1`` (not for "rezero"), ``attn.qkv``, ``attn.proj``, the attention branch's scale
    ``ls1`` (``gamma`` (C,) for LayerScale, ``alpha`` (1,) for the scalar forms), ``norm2``,
    ``mlp``, ``ls2``."""
    norm, kind = check_residual(residual)
    norm_shapes = lambda name: {f"{name}.weight": (C,), f"{name}.bias": (C,)} if norm else {}  # noqa: E731
    scale = {"channel": {"gamma": (C,)}, "scalar": {"alpha": (1,)}, None: {}}[kind]
    return {
        **norm_shapes("norm1"),
        "attn.qkv.weight": (3 * C, C),
        **({"attn.qkv.bias": (3 * C,)} if qkv_bias else {}),
        "attn.proj.weight": (C, C),
        "attn.proj.bias": (C,),
        **{f"ls1.{k}": v for k, v in scale.items()},
        **norm_shapes("norm2"),
        **mlp_param_shapes(C, hidden),
        **{f"ls2.{k}": v for k, v in scale.items()},
    }


def mlp_param_shapes(C: int, hidden: int, prefix: str = "mlp.") -> dict[str, tuple[int, ...]]:
    return {f"{prefix}fc1.weight": (hidden, C), f"{prefix}fc1.bias": (hidden,),
            f"{prefix}fc2.weight": (C, hidden), f"{prefix}fc2.bias": (C,)}


def head_param_shapes(C: int, num_classes: int, name: str = "head") -> dict[str, tuple[int, ...]]:
    return ({f"{name}.weight": (num_classes, C), f"{name}.bias": (num_classes,)} if num_classes
            else {})


# Google's ViT checkpoints (augreg) were trained on inputs scaled to [-1, 1]: mean = std = 0.5.
# DeiT's were trained with ImageNet's mean and std.  Using the wrong pair costs accuracy silently.
_DEIT = dict(mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD)

#: The registered names: name -> default config and the pretrained_cfg of its weights.
MODELS = ModelTable(vit_param_shapes, pretrained_cfg=dict(
    input_size=(3, 224, 224), mean=IMAGENET_INCEPTION_MEAN, std=IMAGENET_INCEPTION_STD,
    crop_pct=0.9, interpolation="bicubic"))


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"))
def vit_tiny_patch16_224() -> ViTConfig:
    """ViT-Ti/16 at 224²: 192 channels, 12 blocks, 3 heads (5.7 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=192, depth=12, num_heads=3)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/vit_small_patch16_224.augreg_in21k_ft_in1k"))
def vit_small_patch16_224() -> ViTConfig:
    """ViT-S/16 at 224²: 384 channels, 12 blocks, 6 heads (22 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=384, depth=12, num_heads=6)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/vit_base_patch16_224.augreg2_in21k_ft_in1k"))
def vit_base_patch16_224() -> ViTConfig:
    """ViT-B/16 at 224²: 768 channels, 12 blocks, 12 heads (86.6 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=768, depth=12, num_heads=12)


@MODELS.register(pretrained_cfg=dict(_DEIT, hf_hub_id="timm/deit_tiny_patch16_224.fb_in1k"))
def deit_tiny_patch16_224() -> ViTConfig:
    """DeiT-Ti: the ViT-Ti/16 architecture, ImageNet normalisation."""
    return ViTConfig(patch_size=16, embed_dim=192, depth=12, num_heads=3)


@MODELS.register(pretrained_cfg=dict(_DEIT, hf_hub_id="timm/deit_small_patch16_224.fb_in1k"))
def deit_small_patch16_224() -> ViTConfig:
    """DeiT-S: the ViT-S/16 architecture, ImageNet normalisation."""
    return ViTConfig(patch_size=16, embed_dim=384, depth=12, num_heads=6)


# DeiT's distilled models: the same architectures with a distillation token and a second head
# (inference averages the two heads); timm's pretrained_cfg names both classifiers.
_DEIT_DISTILLED = dict(_DEIT, fixed_input_size=True, first_conv="patch_embed.proj",
                       classifier=("head", "head_dist"))


@MODELS.register(pretrained_cfg=dict(
    _DEIT_DISTILLED, hf_hub_id="timm/deit_tiny_distilled_patch16_224.fb_in1k"))
def deit_tiny_distilled_patch16_224() -> ViTConfig:
    """DeiT-Ti⚗: DeiT-Ti with a distillation token and head (5.9 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=192, depth=12, num_heads=3, distilled=True)


@MODELS.register(pretrained_cfg=dict(
    _DEIT_DISTILLED, hf_hub_id="timm/deit_small_distilled_patch16_224.fb_in1k"))
def deit_small_distilled_patch16_224() -> ViTConfig:
    """DeiT-S⚗: DeiT-S with a distillation token and head (22.4 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=384, depth=12, num_heads=6, distilled=True)


@MODELS.register(pretrained_cfg=dict(
    _DEIT_DISTILLED, hf_hub_id="timm/deit_base_distilled_patch16_224.fb_in1k"))
def deit_base_distilled_patch16_224() -> ViTConfig:
    """DeiT-B⚗: ViT-B/16 with a distillation token and head (87.3 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=768, depth=12, num_heads=12, distilled=True)


@MODELS.register(pretrained_cfg=dict(
    _DEIT_DISTILLED, input_size=(3, 384, 384), crop_pct=1.0,
    hf_hub_id="timm/deit_base_distilled_patch16_384.fb_in1k"))
def deit_base_distilled_patch16_384() -> ViTConfig:
    """DeiT-B⚗ at 384² (fine-tuned at that resolution): a 24×24 patch grid (87.6 M parameters)."""
    return ViTConfig(img_size=384, patch_size=16, embed_dim=768, depth=12, num_heads=12,
                     distilled=True)


# DeiT III: ViT's architecture with LayerScale in every block (ε = 1e-6) and no position
# embedding for the class token, trained with its own recipe; ImageNet normalisation.  timm's
# names; the tag is that of timm's default weights (ImageNet-1k: ``fb_in1k``; timm's other tag,
# ``fb_in22k_ft_in1k``, names other weights of the same architecture).
_DEIT3 = dict(init_values=1e-6, no_embed_class=True)
_AT_384 = dict(input_size=(3, 384, 384), crop_pct=1.0)


@MODELS.register(pretrained_cfg=dict(_DEIT, hf_hub_id="timm/deit3_small_patch16_224.fb_in1k"))
def deit3_small_patch16_224() -> ViTConfig:
    """DeiT III-S at 224²: 384 channels, 12 blocks, 6 heads, LayerScale (22.1 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=384, depth=12, num_heads=6, **_DEIT3)


@MODELS.register(pretrained_cfg=dict(_DEIT, **_AT_384,
                                     hf_hub_id="timm/deit3_small_patch16_384.fb_in1k"))
def deit3_small_patch16_384() -> ViTConfig:
    """DeiT III-S at 384²: a 24×24 patch grid (22.2 M parameters)."""
    return ViTConfig(img_size=384, patch_size=16, embed_dim=384, depth=12, num_heads=6, **_DEIT3)


@MODELS.register(pretrained_cfg=dict(_DEIT, hf_hub_id="timm/deit3_medium_patch16_224.fb_in1k"))
def deit3_medium_patch16_224() -> ViTConfig:
    """DeiT III-M at 224²: 512 channels, 12 blocks, 8 heads (38.8 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=512, depth=12, num_heads=8, **_DEIT3)


@MODELS.register(pretrained_cfg=dict(_DEIT, hf_hub_id="timm/deit3_base_patch16_224.fb_in1k"))
def deit3_base_patch16_224() -> ViTConfig:
    """DeiT III-B at 224²: 768 channels, 12 blocks, 12 heads (86.6 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=768, depth=12, num_heads=12, **_DEIT3)


@MODELS.register(pretrained_cfg=dict(_DEIT, **_AT_384,
                                     hf_hub_id="timm/deit3_base_patch16_384.fb_in1k"))
def deit3_base_patch16_384() -> ViTConfig:
    """DeiT III-B at 384²: a 24×24 patch grid (86.9 M parameters)."""
    return ViTConfig(img_size=384, patch_size=16, embed_dim=768, depth=12, num_heads=12,
                     **_DEIT3)


@MODELS.register(pretrained_cfg=dict(_DEIT, hf_hub_id="timm/deit3_large_patch16_224.fb_in1k"))
def deit3_large_patch16_224() -> ViTConfig:
    """DeiT III-L at 224²: 1024 channels, 24 blocks, 16 heads (304.4 M parameters)."""
    return ViTConfig(patch_size=16, embed_dim=1024, depth=24, num_heads=16, **_DEIT3)


@MODELS.register(pretrained_cfg=dict(_DEIT, **_AT_384,
                                     hf_hub_id="timm/deit3_large_patch16_384.fb_in1k"))
def deit3_large_patch16_384() -> ViTConfig:
    """DeiT III-L at 384²: a 24×24 patch grid (304.8 M parameters)."""
    return ViTConfig(img_size=384, patch_size=16, embed_dim=1024, depth=24, num_heads=16,
                     **_DEIT3)


@MODELS.register(pretrained_cfg=dict(_DEIT, hf_hub_id="timm/deit3_huge_patch14_224.fb_in1k"))
def deit3_huge_patch14_224() -> ViTConfig:
    """DeiT III-H at 224²: 14×14 patches, 1280 channels, 32 blocks, 16 heads (632.1 M
    parameters)."""
    return ViTConfig(patch_size=14, embed_dim=1280, depth=32, num_heads=16, **_DEIT3)


# Small configurations for the offline data (scikit-learn's 8×8 digits; ``base.DIGITS_CFG``).


@MODELS.register(pretrained_cfg=DIGITS_CFG)
def vit_digits() -> ViTConfig:
    """A small ViT for the 8×8 digits, enlarged to 24×24 (bilinear) and cut into 6×6 patches:
    a 4×4 grid, 64 channels, 4 blocks, 4 heads, stochastic depth 0.2 (138 k parameters).

    The grid is the one 2×2 patches of the original would give, but enlarging first lets each
    patch see a little of its neighbours (interpolation) and keeps the trainer's sub-pixel
    augmentation sharp: 98.8% test accuracy against 96% for 2×2 patches of the 8×8 original,
    with the same trainer command (README, "Training")."""
    return ViTConfig(img_size=24, patch_size=6, in_chans=1, num_classes=10, embed_dim=64, depth=4,
                     num_heads=4, mlp_ratio=2.0, drop_path_rate=0.2)
