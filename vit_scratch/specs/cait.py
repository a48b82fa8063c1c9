"""The CaiT family's spec: config, LayerScale's depth rule, state_dict table and registered names.
Torch-free and NumPy-free.

Paper:
  Going deeper with Image Transformers -- Touvron, Cord, Sablayrolles, Synnaeve, Jégou,
  ICCV 2021, https://arxiv.org/abs/2103.17239

CaiT changes two things in ViT:

* **LayerScale**: each residual branch is multiplied by a learned per-channel vector λ
  (``gamma_1``, ``gamma_2``), initialised at a small ε that depends on the depth
  (:func:`layerscale_init_value`), so a deep stack starts close to the identity;
* **class attention**: the class token joins late.  ``depth`` self-attention blocks
  (talking-heads attention) work on the patch tokens only, then ``depth_token_only``
  class-attention blocks let the class token read the frozen patch tokens.

Rooms: ``vit_scratch.numpy_nn.cait.Cait`` and ``vit_scratch.torch_nn.cait.Cait``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import validation
from .base import (DIGITS_CFG, IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD, ConfigMixin,
                   ModelTable, PatchGridMixin)
# the residual forms the paper compares are those of the ViT family's blocks; re-exported here
from .vit import RESIDUAL_FORMS, check_residual, head_param_shapes, mlp_param_shapes  # noqa: F401

#: The CaiT paper's initial LayerScale value by depth: (largest depth, ε).
LAYERSCALE_RULE = ((18, 0.1), (24, 1e-5))
LAYERSCALE_DEEPER = 1e-6


def layerscale_init_value(depth: int) -> float:
    """The initial LayerScale value ε for a network of ``depth`` blocks, as the CaiT paper
    sets it: 0.1 up to depth 18, 1e-5 up to depth 24, 1e-6 beyond.

    The deeper the stack, the smaller each residual branch starts, so that the sum of all
    branches stays small next to the input at initialisation.  (The released checkpoints
    deviate once: ``cait_xxs36`` was trained with 1e-5; the registered names keep the values
    of the releases.)
    """
    validation.check_positive(depth, "depth")
    for max_depth, eps in LAYERSCALE_RULE:
        if depth <= max_depth:
            return eps
    return LAYERSCALE_DEEPER


@dataclass(frozen=True)
class CaitConfig(PatchGridMixin, ConfigMixin):
    """Every number that fixes a CaiT's architecture; both rooms read it."""

    img_size: int | tuple[int, int] = 224  # (H, W) the position embedding is built for
    patch_size: int = 16
    in_chans: int = 3
    num_classes: int = 1000  # 0 -> no head, the model returns the class token's features
    embed_dim: int = 192
    depth: int = 24  # self-attention blocks, on the patch tokens only
    depth_token_only: int = 2  # class-attention blocks, which update the class token only
    num_heads: int = 4
    mlp_ratio: float = 4.0
    mlp_ratio_token_only: float = 4.0  # MLP width of the class-attention blocks
    qkv_bias: bool = True
    # LayerScale's initial value ε for every gamma; None -> layerscale_init_value(depth)
    init_values: float | None = None
    # The paper's ablation: False leaves the class token out of the class-attention keys (and
    # so out of its values); it then attends to the patch tokens only.  Same parameters.
    class_token_in_keys: bool = True
    # Regularisation for training (identity in eval; the NumPy room trains with stochastic
    # depth only).  As in the official CaiT code, dropout and stochastic depth act in the
    # self-attention stage only, and the drop-path rate is the same in every block.
    drop_rate: float = 0.0  # dropout on the embedded patches, attention outputs and MLPs
    attn_drop_rate: float = 0.0  # dropout on the self-attention weights
    drop_path_rate: float = 0.0  # stochastic depth of each self-attention block

    def validate(self):
        super().validate()  # the patch grid, heads, MLP (PatchGridMixin); in_chans, num_classes
        if self.depth_token_only < 1:
            raise ValueError(
                f"depth_token_only must be an int >= 1 (CaiT needs at least one class-attention "
                f"block to read the patch tokens into the class token), got "
                f"{self.depth_token_only!r}")
        validation.hidden_width(self.embed_dim, self.mlp_ratio_token_only, "mlp_ratio_token_only")
        if self.init_values is not None:
            validation.check_init_values(self.init_values)
        for name in ("drop_rate", "attn_drop_rate", "drop_path_rate"):
            validation.check_probability(getattr(self, name), name)

    BEHAVIOUR_IN_TIMM = {"class_token_in_keys": True}  # timm's class attention reads it too

    def timm_kwargs(self) -> dict:
        """:meth:`ConfigMixin.timm_kwargs`, with ``init_values`` resolved (timm's class takes a
        number, not the depth rule)."""
        return {**super().timm_kwargs(), "init_values": self.layer_scale_init}

    @property
    def layer_scale_init(self) -> float:
        """The ε every LayerScale vector starts at: ``init_values``, or the paper's rule."""
        return layerscale_init_value(self.depth) if self.init_values is None else self.init_values

    @property
    def mlp_hidden_token_only(self) -> int:
        return validation.hidden_width(self.embed_dim, self.mlp_ratio_token_only,
                                   "mlp_ratio_token_only")


def layerscale_block_param_shapes(C: int, hidden: int, num_heads: int, qkv_bias: bool = True,
                                  talking_heads: bool = True) -> dict[str, tuple[int, ...]]:
    """A self-attention block with LayerScale (``gamma_1``, ``gamma_2``: the block's own
    parameters come first in a state_dict), talking-heads attention (``proj_l``, ``proj_w``)."""
    shapes = {
        "gamma_1": (C,),
        "gamma_2": (C,),
        "norm1.weight": (C,),
        "norm1.bias": (C,),
        "attn.qkv.weight": (3 * C, C),
        **({"attn.qkv.bias": (3 * C,)} if qkv_bias else {}),
        "attn.proj.weight": (C, C),
        "attn.proj.bias": (C,),
    }
    if talking_heads:
        h = num_heads
        shapes.update({"attn.proj_l.weight": (h, h), "attn.proj_l.bias": (h,),
                       "attn.proj_w.weight": (h, h), "attn.proj_w.bias": (h,)})
    shapes.update({"norm2.weight": (C,), "norm2.bias": (C,), **mlp_param_shapes(C, hidden)})
    return shapes


def class_attention_block_param_shapes(C: int, hidden: int,
                                       qkv_bias: bool = True) -> dict[str, tuple[int, ...]]:
    """A class-attention block: separate ``q``, ``k``, ``v`` projections (the query is
    computed for the class token only), LayerScale on both branches."""
    bias = lambda name: {f"attn.{name}.bias": (C,)} if qkv_bias else {}  # noqa: E731
    return {
        "gamma_1": (C,),
        "gamma_2": (C,),
        "norm1.weight": (C,),
        "norm1.bias": (C,),
        "attn.q.weight": (C, C), **bias("q"),
        "attn.k.weight": (C, C), **bias("k"),
        "attn.v.weight": (C, C), **bias("v"),
        "attn.proj.weight": (C, C),
        "attn.proj.bias": (C,),
        "norm2.weight": (C,),
        "norm2.bias": (C,),
        **mlp_param_shapes(C, hidden),
    }


def cait_param_shapes(cfg: CaitConfig) -> dict[str, tuple[int, ...]]:
    """The ``state_dict`` of a CaiT as ``{key: shape}``, in the order PyTorch lists it (timm's
    keys).  ``pos_embed`` covers the patch tokens only: the class token has no position."""
    C, p = cfg.embed_dim, cfg.patch_size
    shapes = {
        "cls_token": (1, 1, C),
        "pos_embed": (1, cfg.num_patches, C),
        "patch_embed.proj.weight": (C, cfg.in_chans, p, p),
        "patch_embed.proj.bias": (C,),
    }
    sa = layerscale_block_param_shapes(C, cfg.mlp_hidden, cfg.num_heads, cfg.qkv_bias)
    for i in range(cfg.depth):
        shapes.update({f"blocks.{i}.{k}": v for k, v in sa.items()})
    ca = class_attention_block_param_shapes(C, cfg.mlp_hidden_token_only, cfg.qkv_bias)
    for i in range(cfg.depth_token_only):
        shapes.update({f"blocks_token_only.{i}.{k}": v for k, v in ca.items()})
    shapes["norm.weight"] = (C,)
    shapes["norm.bias"] = (C,)
    shapes.update(head_param_shapes(C, cfg.num_classes))
    return shapes


#: The registered names: name -> default config and the pretrained_cfg of its weights (the
#: official CaiT checkpoints: ImageNet normalisation, no crop margin, bicubic resizing).
MODELS = ModelTable(cait_param_shapes, pretrained_cfg=dict(
    input_size=(3, 224, 224), mean=IMAGENET_DEFAULT_MEAN, std=IMAGENET_DEFAULT_STD, crop_pct=1.0,
    interpolation="bicubic"))

_AT_384 = dict(input_size=(3, 384, 384))


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/cait_xxs24_224.fb_dist_in1k"))
def cait_xxs24_224() -> CaitConfig:
    """CaiT-XXS24 at 224²: 192 channels, 24 + 2 blocks, 4 heads (12.0 M parameters)."""
    return CaitConfig(patch_size=16, embed_dim=192, depth=24, num_heads=4, init_values=1e-5)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/cait_xxs36_224.fb_dist_in1k"))
def cait_xxs36_224() -> CaitConfig:
    """CaiT-XXS36 at 224²: 192 channels, 36 + 2 blocks, 4 heads (17.3 M parameters).
    Released with LayerScale ε = 1e-5 (the paper's rule would give 1e-6 at depth 36)."""
    return CaitConfig(patch_size=16, embed_dim=192, depth=36, num_heads=4, init_values=1e-5)


@MODELS.register(pretrained_cfg=dict(_AT_384, hf_hub_id="timm/cait_xs24_384.fb_dist_in1k"))
def cait_xs24_384() -> CaitConfig:
    """CaiT-XS24 at 384²: 288 channels, 24 + 2 blocks, 6 heads (26.7 M parameters)."""
    return CaitConfig(img_size=384, patch_size=16, embed_dim=288, depth=24, num_heads=6,
                      init_values=1e-5)


@MODELS.register(pretrained_cfg=dict(hf_hub_id="timm/cait_s24_224.fb_dist_in1k"))
def cait_s24_224() -> CaitConfig:
    """CaiT-S24 at 224²: 384 channels, 24 + 2 blocks, 8 heads (46.9 M parameters)."""
    return CaitConfig(patch_size=16, embed_dim=384, depth=24, num_heads=8, init_values=1e-5)


@MODELS.register(pretrained_cfg=dict(_AT_384, hf_hub_id="timm/cait_s24_384.fb_dist_in1k"))
def cait_s24_384() -> CaitConfig:
    """CaiT-S24 at 384²: 384 channels, 24 + 2 blocks, 8 heads (47.1 M parameters)."""
    return CaitConfig(img_size=384, patch_size=16, embed_dim=384, depth=24, num_heads=8,
                      init_values=1e-5)


@MODELS.register(pretrained_cfg=dict(_AT_384, hf_hub_id="timm/cait_s36_384.fb_dist_in1k"))
def cait_s36_384() -> CaitConfig:
    """CaiT-S36 at 384²: 384 channels, 36 + 2 blocks, 8 heads (68.4 M parameters)."""
    return CaitConfig(img_size=384, patch_size=16, embed_dim=384, depth=36, num_heads=8,
                      init_values=1e-6)


@MODELS.register(pretrained_cfg=DIGITS_CFG)
def cait_digits() -> CaitConfig:
    """A small CaiT for the 8×8 digits, enlarged to 24×24 and cut into 6×6 patches (a 4×4
    grid, as ``vit_digits``): 64 channels, 3 self-attention + 2 class-attention blocks, 4 heads,
    LayerScale by the depth rule (ε = 0.1), stochastic depth 0.1 in every self-attention block
    (the mean of vit_digits' 0 → 0.2 ramp).  Three blocks, not six: with talking heads a block
    costs more than ViT's, and three train in the same time as vit_digits' four."""
    return CaitConfig(img_size=24, patch_size=6, in_chans=1, num_classes=10, embed_dim=64,
                      depth=3, depth_token_only=2, num_heads=4, mlp_ratio=2.0,
                      mlp_ratio_token_only=2.0, drop_path_rate=0.1)
