"""CaiT in PyTorch (Touvron et al., "Going deeper with Image Transformers", ICCV 2021,
https://arxiv.org/abs/2103.17239).

    x   = patch_embed(images) + pos_embed                      # (B, N, C): no class token yet
    for each of `depth` blocks:  x = LayerScaleBlock(x)        # talking-heads self-attention
    cls = cls_token                                            # (B, 1, C): joins only now
    for each of `depth_token_only` blocks:  cls = LayerScaleBlockClassAttn(x, cls)
    logits = head(norm([cls; x])[:, 0])                        # (B, num_classes)

Parameter names follow timm (``blocks.3.gamma_1``, ``blocks_token_only.0.attn.q.weight``), so
timm's and the official CaiT state_dicts load strictly.
"""
from __future__ import annotations

import torch
from torch import nn

from .. import interface
from ..specs.cait import CaitConfig
from .base import ModelBase
from .class_attention import ClassAttention, LayerScaleBlockClassAttn
from .layers import LAYER_NORM_EPS, init_weights_, layers_from_config, trunc_normal_
from .layerscale import LayerScaleBlock
from .patch_embed import PatchEmbed


class Cait(ModelBase):
    """CaiT.  ``Cait(CaitConfig(...))`` or ``Cait(embed_dim=192, depth=24, ...)``.

    forward(images (B, C, H, W)) -> logits (B, num_classes)
    forward_features -> final-normed tokens (B, 1 + N, C): the class token, then the patches
    get_attention_maps -> per class-attention block, the class token's weights (B, heads, 1, 1 + N)
        (column 0: the class token itself, columns 1: the patches in raster order;
        (B, heads, 1, N) with ``class_token_in_keys=False``); rows sum to 1
    get_attention_grids -> per class-attention block, (B, heads, gh, gw)
    forward_intermediates -> the self-attention blocks' outputs: patch tokens only (timm's
        semantics: the class token does not exist yet there)
    The rest of the interface: ``torch_nn.base``, ``vit_scratch.interface``.
    """

    num_prefix_tokens = 1  # the class token, in front of the patches in forward_features
    pos_embed_prefix_tokens = 0  # ... which has no position embedding: pos_embed is the grid only

    def __init__(self, cfg: CaitConfig | None = None, **kwargs):
        cfg = CaitConfig.build(cfg, **kwargs)
        super().__init__(cfg)
        with layers_from_config():  # validated: the layers skip a hand-built layer's checks
            C, eps = cfg.embed_dim, cfg.layer_scale_init
            self.num_features = self.embed_dim = C
            self.patch_embed = PatchEmbed(cfg.img_size, cfg.patch_size, cfg.in_chans, C)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
            self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches, C))
            self.pos_drop = nn.Dropout(cfg.drop_rate)
            self.blocks = nn.Sequential(*[
                LayerScaleBlock(C, cfg.num_heads, cfg.mlp_ratio, cfg.qkv_bias, init_values=eps,
                                talking_heads=True, drop=cfg.drop_rate, attn_drop=cfg.attn_drop_rate,
                                drop_path=cfg.drop_path_rate)
                for _ in range(cfg.depth)
            ])
            self.blocks_token_only = nn.ModuleList([
                LayerScaleBlockClassAttn(C, cfg.num_heads, cfg.mlp_ratio_token_only, cfg.qkv_bias,
                                         init_values=eps, class_token_in_keys=cfg.class_token_in_keys)
                for _ in range(cfg.depth_token_only)
            ])
            self.norm, self.head = nn.LayerNorm(C, eps=LAYER_NORM_EPS), self.make_head(C)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """Initialisation for training from scratch (the CaiT recipe): normal with std 0.02,
        truncated at ±2 std, for Linear weights (the talking-heads maps included), the class
        token and the position embedding; zero biases; LayerNorm = identity; every LayerScale
        vector at ``cfg.layer_scale_init``."""
        trunc_normal_(self.pos_embed, std=0.02)
        trunc_normal_(self.cls_token, std=0.02)
        init_weights_(self)
        for blk in [*self.blocks, *self.blocks_token_only]:
            blk.gamma_1.fill_(self.cfg.layer_scale_init)
            blk.gamma_2.fill_(self.cfg.layer_scale_init)

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> patch tokens with their positions (B, N, C)."""
        images = self.prepare_images(images)  # checked once
        return self.pos_drop(self.patch_embed.embed(images) + self.position_embedding(images))

    def forward_class_attention(self, x: torch.Tensor) -> torch.Tensor:
        """The class-attention stage: patch tokens (B, N, C) -> [cls; x] (B, 1 + N, C).
        Only the class token changes; ``x`` is returned as it came."""
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, C)
        for blk in self.blocks_token_only:
            cls = blk(x, cls)
        return torch.cat([cls, x], dim=1)

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        x = self.run_blocks(self.embed(images))  # (B, N, C)
        return self.after_blocks(x)  # (B, 1 + N, C)

    def after_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """The class-attention stage, then the final norm: (B, N, C) -> (B, 1 + N, C).  (A
        model pruned by ``prune_intermediate_layers`` has no class-attention stage left: the
        norm alone.)"""
        if self.blocks_token_only is not None:
            x = self.forward_class_attention(x)
        return self.norm(x)

    # forward_intermediates (``torch_nn.base``): the self-attention blocks' outputs, patch tokens
    # only (timm's semantics: the class token does not exist yet there)
    @property
    def block_prefix_tokens(self) -> int:
        return 0

    def prune_head(self) -> None:
        """No class token, no class-attention stage, no pooling, no classifier: the model ends
        at the self-attention blocks (``prune_intermediate_layers``)."""
        self.blocks_token_only = None
        self.cls_token = None
        self.num_prefix_tokens = 0
        self.reset_classifier(0, "")

    def group_matcher(self, coarse: bool = False) -> dict:
        """timm's format: the embedding, the self-attention blocks, the class-attention blocks,
        the final norm; the head last (``torch_nn.base``)."""
        groups = super().group_matcher(coarse)
        norm = groups["blocks"].pop()  # the final norm joins the last class-attention block
        token_only = r"^blocks_token_only" if coarse else r"^blocks_token_only\.(\d+)"
        return dict(groups, blocks_token_only=[(token_only, None), norm])

    def attention_modules(self) -> list[nn.Module]:
        """The class-attention layers, in order: what ``get_attention_maps`` returns.  (The
        talking-heads layers record too, when asked directly; their weights are not a
        distribution over the image.)"""
        if self.blocks_token_only is None:
            return []
        return [m for m in self.blocks_token_only.modules() if isinstance(m, ClassAttention)]

    def attention_grid(self, weights: torch.Tensor) -> torch.Tensor:
        """(B, heads, 1, [1 +] N) -> (B, heads, gh, gw): the class token's weights on the grid."""
        return interface.readout_grid(weights, self.patch_embed.grid_size,
                                      1 if self.cfg.class_token_in_keys else 0)

    def get_attention_maps(self, images: torch.Tensor) -> list[torch.Tensor]:
        """One tensor per class-attention block: (B, heads, 1, 1 + N), the class token's
        weights over [itself, patch 0, ..., patch N-1] (rows sum to 1); (B, heads, 1, N)
        with ``class_token_in_keys=False``.  Only the class-attention layers leave their fused
        path, and only for this call."""
        return super().get_attention_maps(images)
