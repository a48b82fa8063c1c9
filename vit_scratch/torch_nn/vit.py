"""The Vision Transformer in PyTorch (Dosovitskiy et al. 2020; DeiT has the same architecture).

    tokens = [cls; patch_embed(images)] + pos_embed            # (B, 1 + N, C)
    for each block:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    logits = head(norm(x)[:, 0])                               # (B, num_classes)

The config opens the family to its variants.  With ``init_values`` every block is LayerScale's
form, ``x = x + diag(λ)·attn(norm1(x))`` (the blocks are ``layerscale.Block``, also named
``ResidualBlock``); with ``no_embed_class`` the position embedding covers the patch grid
only and is added before the class token is put in front.  DeiT III is both:

    tokens = [cls; patch_embed(images) + pos_embed]            # (B, 1 + N, C)

DeiT's distilled models (``VisionTransformerDistilled``, ``distilled=True``) add a second
learned token and a second head:

    tokens = [cls; dist; patch_embed(images)] + pos_embed      # (B, 2 + N, C)
    x = norm(blocks(tokens))
    logits = (head(x[:, 0]) + head_dist(x[:, 1])) / 2          # inference: the two heads' average

Parameter names follow timm (``blocks.3.attn.qkv.weight``, ``blocks.3.ls1.gamma``), so timm's
state_dict loads strictly.
"""
from __future__ import annotations

import torch
from torch import nn

from .. import validation
from ..specs.vit import ViTConfig
from .base import ModelBase
from .layers import LAYER_NORM_EPS, init_weights_, layers_from_config, trunc_normal_
from .layerscale import Block, LayerScale, ScalarGate
from .patch_embed import PatchEmbed


class VisionTransformer(ModelBase):
    """ViT / DeiT.  ``VisionTransformer(ViTConfig(...))`` or ``VisionTransformer(embed_dim=192, ...)``.

    forward(images (B, C, H, W)) -> logits (B, num_classes)
    forward_features -> final-normed tokens (B, 1 + N, C)
    get_attention_maps -> per block, the full weights (B, heads, 1 + N, 1 + N); row 0 is where
    the class token looks.  forward_intermediates, prune_intermediate_layers,
    set_input_size, dynamic_img_size and the rest of the interface: ``torch_nn.base``,
    ``vit_scratch.interface``.
    """

    num_prefix_tokens = 1  # the class token
    pos_embed_prefix_tokens = 1  # ... which has a position embedding of its own

    def __init__(self, cfg: ViTConfig | None = None, **kwargs):
        cfg = ViTConfig.build(cfg, **kwargs)
        if cfg.distilled != isinstance(self, VisionTransformerDistilled):
            raise ValueError(f"distilled={cfg.distilled} is built by "
                             f"{self.class_for(cfg).__name__}, not {type(self).__name__} "
                             f"(vit_scratch.create_model picks the class)")
        super().__init__(cfg)
        self.pos_embed_prefix_tokens = cfg.pos_embed_prefix_tokens  # 0 with no_embed_class
        self.no_embed_class = cfg.no_embed_class
        with layers_from_config():  # validated: the layers skip a hand-built layer's checks
            C = cfg.embed_dim
            self.num_features = self.embed_dim = C
            self.patch_embed = PatchEmbed(cfg.img_size, cfg.patch_size, cfg.in_chans, C)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
            self.pos_embed = nn.Parameter(  # an entry for each prefix token, then the grid
                torch.zeros(1, cfg.pos_embed_prefix_tokens + self.patch_embed.num_patches, C))
            self.pos_drop = nn.Dropout(cfg.drop_rate)
            # deeper, more (on the CPU: a model built on the meta device needs the numbers)
            drop_path = torch.linspace(0, cfg.drop_path_rate, cfg.depth, device="cpu").tolist()
            self.blocks = nn.Sequential(*[
                Block(C, cfg.num_heads, cfg.residual, cfg.mlp_ratio, cfg.qkv_bias,
                      init_values=cfg.init_values, drop=cfg.drop_rate,
                      attn_drop=cfg.attn_drop_rate, drop_path=drop_path[i])
                for i in range(cfg.depth)
            ])
            self.norm, self.head = nn.LayerNorm(C, eps=LAYER_NORM_EPS), self.make_head(C)
        VisionTransformer.reset_parameters(self)  # what this class built (a subclass adds more)

    @classmethod
    def class_for(cls, cfg: ViTConfig) -> type:
        """The class that builds ``cfg``: ``VisionTransformerDistilled`` for ``distilled=True``."""
        return VisionTransformerDistilled if cfg.distilled else VisionTransformer

    @torch.no_grad()
    def reset_parameters(self):
        """Initialisation for training from scratch: std 0.02 for Linear weights and the position
        embedding, truncated at ±2 std (so their spread is 0.88 × 0.02); zero biases; LayerNorm =
        identity; a class token near zero; LayerScale vectors at ``init_values``.

        The references differ in the truncation: timm (and so DeiT) calls ``trunc_normal_(std=.02)``
        with absolute bounds ±2, which never cut at this std; the original JAX ViT draws the
        position embedding from an untruncated normal(0.02) and the Linear weights Xavier-uniform.
        See :func:`vit_scratch.torch_nn.layers.trunc_normal_` and notebook 01, section 4."""
        trunc_normal_(self.pos_embed, std=0.02)
        nn.init.normal_(self.cls_token, std=1e-6)
        init_weights_(self)
        for m in self.modules():
            if isinstance(m, (LayerScale, ScalarGate)):
                m.reset_parameters()

    def prefix_tokens(self, batch: int) -> torch.Tensor:
        """The tokens put in front of the patches: (B, 1, C), the class token."""
        return self.cls_token.expand(batch, -1, -1)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, prefix + N, C): patches, the prefix tokens in front, positions
        added -- to every token, or with ``no_embed_class`` to the patches before the prefix
        tokens join."""
        images = self.prepare_images(images)  # checked once
        x = self.patch_embed.embed(images)  # (B, N, C)
        prefix = self.prefix_tokens(x.shape[0])  # (B, prefix, C)
        pos = self.position_embedding(images)  # (1, [prefix +] N, C)
        if self.no_embed_class:
            return self.pos_drop(torch.cat([prefix, x + pos], dim=1))
        return self.pos_drop(torch.cat([prefix, x], dim=1) + pos)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        return self.norm(self.run_blocks(self.embed(images)))  # (B, 1 + N, C)


class VisionTransformerDistilled(VisionTransformer):
    """DeiT's distilled ViT (Touvron et al., ICML 2021, §4): a distillation token beside the
    class token, and a second head, ``head_dist``, on it.  Both tokens attend to everything in
    every block; the class head learns from the labels, the distillation head from a teacher's
    predictions (hard distillation: ``vit_scratch.training.recipe.objective``).

    forward(images) -> logits (B, num_classes): the average of the two heads; in training mode
    after ``set_distilled_training(True)``, the pair ``(class head, distillation head)``
    forward_features -> final-normed tokens (B, 2 + N, C): the class token, the distillation
    token, then the patches
    forward_head(features, pre_logits=True) -> the two tokens' average (B, C)
    get_classifier() -> ``(head, head_dist)``, as timm's
    """

    num_prefix_tokens = 2  # the class token and the distillation token
    pos_embed_prefix_tokens = 2  # ... each with a position embedding

    def __init__(self, cfg: ViTConfig | None = None, **kwargs):
        if cfg is None:
            kwargs.setdefault("distilled", True)  # VisionTransformerDistilled(embed_dim=192, ...)
        super().__init__(cfg, **kwargs)  # pos_embed with cfg.num_prefix_tokens = 2 entries
        C = self.embed_dim
        self.dist_token = nn.Parameter(torch.zeros(1, 1, C))
        with layers_from_config():
            self.head_dist = self.make_head(C)
        self.distilled_training = False  # set_distilled_training(True) to train with a teacher
        self.reset_distillation_parameters()

    @torch.no_grad()
    def reset_distillation_parameters(self):
        """The distillation token N(0, 0.02²) (truncated at ±2 std, as the position embedding),
        the distillation head as every Linear (``init_weights_``)."""
        trunc_normal_(self.dist_token, std=0.02)
        init_weights_(self.head_dist)

    @torch.no_grad()
    def reset_parameters(self):
        super().reset_parameters()
        self.reset_distillation_parameters()

    def set_distilled_training(self, enable: bool = True) -> None:
        """timm's switch: with it on, the model in training mode returns both heads' logits
        (for the distillation loss); off, or in eval mode, their average."""
        self.distilled_training = validation.check_bool(enable, "enable")

    def prefix_tokens(self, batch: int) -> torch.Tensor:
        """The tokens put in front of the patches: (B, 2, C), the class and distillation
        tokens."""
        return torch.cat([self.cls_token.expand(batch, -1, -1),
                          self.dist_token.expand(batch, -1, -1)], dim=1)

    def get_classifier(self) -> tuple[nn.Module, nn.Module]:
        return self.head, self.head_dist

    def reset_classifier(self, num_classes: int, global_pool=None) -> None:
        """New class and distillation heads with ``num_classes`` outputs (0: none)."""
        super().reset_classifier(num_classes, global_pool)  # checks, self.head, the config
        like = next(self.parameters())
        head_dist = self.make_head(self.num_features).to(like.device, like.dtype)
        init_weights_(head_dist)
        self.head_dist = head_dist.train(self.training)

    def pool(self, features: torch.Tensor) -> torch.Tensor:
        """forward_features' output -> (B, 2, num_features): the class and distillation tokens."""
        return features[:, :2]

    def classify(self, pooled: torch.Tensor, pre_logits: bool = False):
        """Each token its head; the pair in distilled training, else their average."""
        if pre_logits or not self.num_classes:
            return pooled.mean(dim=1)  # (B, C): what both heads read, averaged
        logits, logits_dist = self.head(pooled[:, 0]), self.head_dist(pooled[:, 1])
        if self.distilled_training and self.training and not torch.jit.is_scripting():
            return logits, logits_dist
        return (logits + logits_dist) / 2
