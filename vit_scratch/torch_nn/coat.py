"""CoaT and CoaT-Lite in PyTorch (Xu, Xu, Chang, Tu, "Co-Scale Conv-Attentional Image
Transformers", ICCV 2021, https://arxiv.org/abs/2104.06399).

    for scale s = 1..4:                                   (strides p, 2p, 4p, 8p)
        tokens = [cls_s; LayerNorm(patch_embed_s(grid of scale s-1, or the image))]
        for each serial block:  x = cpe_s(x);  x = x + conv_att(norm1(x));  x = x + mlp(norm2(x))
    CoaT only, for each parallel block:  x_s = cpe_s(x_s) (s = 2..4);  x2, x3, x4 = parallel(x2, x3, x4)
    CoaT-Lite: logits = head(norm4(x4)[:, 0])
    CoaT:      logits = head(aggregate([norm2(x2)[:, 0], norm3(x3)[:, 0], norm4(x4)[:, 0]]))

Parameter names follow timm, *including its module sharing*: ``cpe{s}`` and ``crpe{s}`` are the
very modules inside every block of scale s, and a parallel block's ``mlp2``/``mlp3``/``mlp4`` are
one MLP -- so timm's state_dict (which lists each shared tensor under all its names) loads
strictly, and so do the files of ``vit_scratch.save_checkpoint`` into timm (they list every
name too).

Beyond the reference: any input whose sides are multiples of the total stride (32 for the
ImageNet models) runs without rebuilding the model (there is no absolute position embedding);
``forward_intermediates`` returns the four scales' (B, C, H, W) maps for dense tasks; and
``get_attention_maps``/``get_attention_grids`` draw factorized attention, which never forms an
N×N matrix (``vit_scratch.interface.factorized_attention_map``).
"""
from typing import List, Tuple

import torch
from torch import nn

from .. import interface
from ..specs.coat import CPE_WINDOW, NUM_SCALES, PATCH_NORM_EPS, CoaTConfig, CoaTImageSizeMixin
from .attention import RecordsAttention
from .base import MATCH_PREVIOUS, ModelBase
from .conv_position_encoding import ConvPosEnc, ConvRelPosEnc, _tokens_to_image
from .coscale import ParallelBlock
from .factorized_attention import FactorAttnConvRelPosEnc
from .layers import (LAYER_NORM_EPS, DropPath, Mlp, init_weights_, layers_from_config, mlp_hidden,
                     recompute_in_backward, trunc_normal_)


class ScalePatchEmbed(nn.Module):
    """Patch embedding of one scale: Conv2d(kernel = stride = P) -> tokens -> LayerNorm(eps 1e-5).

    (B, C, H, W) -> (B, (H/P)·(W/P), E).  Any H, W divisible by P (the model checks sizes once).
    """

    def __init__(self, patch_size: int, in_chans: int, embed_dim: int):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.LayerNorm(embed_dim, eps=PATCH_NORM_EPS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(x).flatten(2).transpose(1, 2))


class SerialBlock(nn.Module):
    """CPE, then conv-attention and MLP (pre-norm, residual).   (B, 1 + H·W, C), size -> same.

    ``shared_cpe``/``shared_crpe``: the scale's modules, shared by all its blocks."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True,
                 proj_drop: float = 0.0, drop_path: float = 0.0, shared_cpe: ConvPosEnc | None = None,
                 shared_crpe: ConvRelPosEnc | None = None):
        super().__init__()
        self.cpe = shared_cpe if shared_cpe is not None else ConvPosEnc(dim, CPE_WINDOW)
        self.norm1 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.factoratt_crpe = FactorAttnConvRelPosEnc(dim, num_heads, qkv_bias=qkv_bias,
                                                      proj_drop=proj_drop, shared_crpe=shared_crpe)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim, eps=LAYER_NORM_EPS)
        self.mlp = Mlp(dim, mlp_hidden(dim, mlp_ratio), drop=proj_drop)
        self.grad_checkpointing = False  # the model's set_grad_checkpointing switches it

    def forward(self, x: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
        if not torch.jit.is_scripting() and self.grad_checkpointing:
            return recompute_in_backward(self.residuals, x, size)  # recomputed in the backward pass
        return self.residuals(x, size)

    def residuals(self, x: torch.Tensor, size: Tuple[int, int]) -> torch.Tensor:
        """CPE, then x + conv_att(norm1(x)), then x + mlp(norm2(x))."""
        x = self.cpe(x, size)
        x = x + self.drop_path(self.factoratt_crpe(self.norm1(x), size))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class CoaT(CoaTImageSizeMixin, ModelBase):
    """CoaT / CoaT-Lite.  ``CoaT(CoaTConfig(...))`` or ``CoaT(embed_dims=(...), ...)``.

    forward(images (B, C, H, W)) -> logits (B, num_classes); H, W any multiples of the total stride
    forward_features -> CoaT-Lite: norm4(x4), (B, 1 + H4·W4, C4);
                        CoaT: [norm2(x2), norm3(x3), norm4(x4)], what ``forward_head`` pools
    forward_intermediates -> the four scales' (B, C_s, H_s, W_s) maps (scales 2-4 after the
                        parallel blocks)
    get_attention_maps(images, view="class"|"keys") / get_attention_grids: see
                        ``vit_scratch.interface.factorized_attention_map``
    """

    num_prefix_tokens = 1  # each scale's class token
    global_pools = ("token", "avg")  # a class token per scale, or each scale's mean; then mixed
    default_out_indices = 4  # features_only: the four scales

    def __init__(self, cfg: CoaTConfig | None = None, **kwargs):
        cfg = CoaTConfig.build(cfg, **kwargs)
        super().__init__(cfg)
        self.dynamic_img_size = True  # no position embedding: any multiple of the total stride
        self.strides = cfg.strides
        with layers_from_config():  # validated: the layers skip a hand-built layer's checks
            dims, heads = cfg.embed_dims, cfg.num_heads
            self.num_features = self.embed_dim = dims[-1]
            self.embed_dims = dims
            in_chs = (cfg.in_chans,) + dims[:-1]
            scales = range(1, NUM_SCALES + 1)
            for s in scales:
                setattr(self, f"cls_token{s}", nn.Parameter(torch.zeros(1, 1, dims[s - 1])))
            for s in scales:
                setattr(self, f"patch_embed{s}",
                        ScalePatchEmbed(cfg.patch_sizes[s - 1], in_chs[s - 1], dims[s - 1]))
            for s in scales:  # one CPE and one CRPE per scale, shared by all its blocks
                setattr(self, f"cpe{s}", ConvPosEnc(dims[s - 1], CPE_WINDOW))
            for s in scales:
                setattr(self, f"crpe{s}", ConvRelPosEnc(cfg.head_dims[s - 1], heads, cfg.crpe_window))
            common = dict(num_heads=heads, qkv_bias=cfg.qkv_bias, proj_drop=cfg.proj_drop_rate,
                          drop_path=cfg.drop_path_rate)
            for s in scales:
                setattr(self, f"serial_blocks{s}", nn.ModuleList(
                    SerialBlock(dims[s - 1], mlp_ratio=cfg.mlp_ratios[s - 1], **common,
                                shared_cpe=getattr(self, f"cpe{s}"), shared_crpe=getattr(self, f"crpe{s}"))
                    for _ in range(cfg.serial_depths[s - 1])))
            # CoaT-Lite has no parallel blocks, no norm2/norm3 and no aggregate (None)
            self.parallel_blocks = self.norm2 = self.norm3 = self.aggregate = None
            if not cfg.is_lite:
                crpes = [getattr(self, f"crpe{s}") for s in scales]
                self.parallel_blocks = nn.ModuleList(
                    ParallelBlock(dims, mlp_ratios=cfg.mlp_ratios, shared_crpes=crpes,
                                  mode=cfg.parallel_mode, **common)
                    for _ in range(cfg.parallel_depth))
                self.norm2 = nn.LayerNorm(dims[1], eps=LAYER_NORM_EPS)
                self.norm3 = nn.LayerNorm(dims[2], eps=LAYER_NORM_EPS)
            self.norm4 = nn.LayerNorm(dims[3], eps=LAYER_NORM_EPS)
            if not cfg.is_lite:  # mixes the class tokens of scales 2-4: (B, 3, C) -> (B, 1, C)
                self.aggregate = nn.Conv1d(3, 1, kernel_size=1)
            self.head_drop = nn.Dropout(cfg.drop_rate)
            self.head = self.make_head(dims[3])
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """Initialisation for training from scratch (the reference's): truncated normal with
        std 0.02 for the class tokens and Linear weights, zero Linear biases, LayerNorm =
        identity; convolutions keep PyTorch's default (Kaiming-uniform) initialisation."""
        for s in range(1, NUM_SCALES + 1):
            trunc_normal_(getattr(self, f"cls_token{s}"), std=0.02)
        init_weights_(self)

    # --- the forward pass ---------------------------------------------------------------------
    # Written out scale by scale (the modules' names are timm's, one per scale), so that
    # TorchScript compiles it; a scale's modules are None once prune_intermediate_layers has
    # removed it.
    def token_grids(self, images: torch.Tensor) -> List[Tuple[int, int]]:
        """The four token grids (rows, cols) of a batch of images (checked by prepare_images)."""
        H, W = images.shape[-2], images.shape[-1]
        return [(H // s, W // s) for s in self.strides]

    def _scales(self, images: torch.Tensor, last: int = 3) -> List[torch.Tensor]:
        """Scales 1..last+1 (those the model has) through their serial blocks, then -- when all
        four ran -- the parallel blocks: the tokens [x1, x2, ...] before the final norms."""
        images = self.prepare_images(images)  # the checks and dtype policy of vit_scratch.validation
        sizes = self.token_grids(images)
        x = _with_class_token(self.patch_embed1(images), self.cls_token1)
        for blk1 in self.serial_blocks1:
            x = blk1(x, sizes[0])
        xs = [x]
        if self.patch_embed2 is not None and last >= 1:
            x = _with_class_token(self.patch_embed2(_tokens_to_image(x, sizes[0])), self.cls_token2)
            for blk2 in self.serial_blocks2:
                x = blk2(x, sizes[1])
            xs.append(x)
        if self.patch_embed3 is not None and last >= 2 and len(xs) == 2:
            x = _with_class_token(self.patch_embed3(_tokens_to_image(x, sizes[1])), self.cls_token3)
            for blk3 in self.serial_blocks3:
                x = blk3(x, sizes[2])
            xs.append(x)
        if self.patch_embed4 is not None and last >= 3 and len(xs) == 3:
            x = _with_class_token(self.patch_embed4(_tokens_to_image(x, sizes[2])), self.cls_token4)
            for blk4 in self.serial_blocks4:
                x = blk4(x, sizes[3])
            xs.append(x)
        if self.parallel_blocks is not None and len(xs) == 4:
            rest = [xs[1], xs[2], xs[3]]
            for blk in self.parallel_blocks:  # each scale's CPE, then the parallel block
                rest = [self.cpe2(rest[0], sizes[1]), self.cpe3(rest[1], sizes[2]),
                        self.cpe4(rest[2], sizes[3])]
                rest = blk(rest, sizes[1:])
            xs = [xs[0]] + rest
        return xs

    def _final_features(self, xs: List[torch.Tensor]) -> List[torch.Tensor]:
        """[x1, ...] -> what the head reads, as a list: [norm4(x4)] (CoaT-Lite),
        [norm2(x2), norm3(x3), norm4(x4)] (CoaT), or the last scale's tokens as they are when
        scales are missing (stopped early, or pruned)."""
        if len(xs) < 4:
            return [xs[-1]]
        if self.norm2 is None or self.norm3 is None:
            return [self.norm4(xs[3])]
        return [self.norm2(xs[1]), self.norm3(xs[2]), self.norm4(xs[3])]

    def _features(self, xs: List[torch.Tensor]):
        feats = self._final_features(xs)
        return feats if self.parallel_blocks is not None and len(xs) == 4 else feats[0]

    def forward_features(self, images: torch.Tensor):
        """CoaT-Lite: norm4(x4), (B, 1 + H4·W4, C4).  CoaT: [norm2(x2), norm3(x3), norm4(x4)]."""
        return self._features(self._scales(images))

    def _pooled(self, feats: List[torch.Tensor]) -> torch.Tensor:
        """``_final_features`` -> (B, num_features): scale 4's class token (CoaT-Lite), or
        ``aggregate``'s learned mix of the class tokens of scales 2-4 (CoaT); with
        ``global_pool="avg"`` the means of the image tokens instead of the class tokens."""
        if self.aggregate is not None and len(feats) == 3:
            if self.global_pool == "avg":
                tokens = [f[:, 1:].mean(dim=1) for f in feats]
            else:
                tokens = [f[:, 0] for f in feats]
            return self.aggregate(torch.stack(tokens, dim=1)).squeeze(1)  # (B, 3, C) -> (B, C)
        x = feats[-1]
        return x[:, 1:].mean(dim=1) if self.global_pool == "avg" else x[:, 0]

    def pool(self, features) -> torch.Tensor:
        """forward_features' output -> (B, num_features) (see ``_pooled``)."""
        return self._pooled(features if isinstance(features, (list, tuple)) else [features])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classify(self._pooled(self._final_features(self._scales(images))))

    def classify(self, pooled: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Dropout on the pooled features (``drop_rate``), then the head."""
        x = self.head_drop(pooled)
        return x if pre_logits else self.head(x)

    def _final_norms(self) -> list:
        """Each scale's final norm, or None (scale 1 never has one; CoaT-Lite only norm4)."""
        return [None, self.norm2, self.norm3, self.norm4]

    def forward_intermediates(self, images: torch.Tensor, indices=None,
                              return_prefix_tokens: bool = False, norm: bool = False,
                              stop_early: bool = False, output_fmt: str = "NCHW",
                              intermediates_only: bool = False, output_dict: bool = False):
        """Per-scale feature maps for dense tasks: for the scales in ``indices`` (0-3; None: all
        four; n: the last n), the tokens without the class token as (B, C_s, H_s, W_s) maps
        (``output_fmt="NLC"``: (B, H_s·W_s, C_s)).  Scales 2-4 of CoaT are taken after the
        parallel blocks.  ``norm`` applies the scale's final norm where it has one (timm's rule:
        norm4 for CoaT-Lite's scale 4; norm2-4 for CoaT's scales 2-4; scale 1 never).
        Returns ``(forward_features output, maps)``, the maps alone with
        ``intermediates_only``, or a dict with ``output_dict``; ``return_prefix_tokens`` pairs
        each map with its scale's class token (see ``torch_nn.base``).  ``stop_early``
        (implied by ``intermediates_only``) skips the scales after the last index when no
        parallel block needs them; the final features are then the last scale's tokens.

        Compared with timm's ``CoaT.forward_intermediates`` (same maps, same ``norm`` rule, same
        final features -- the tests check it): timm offers only NCHW, returns contiguous copies
        (here: views of the tokens), and runs only at the size it was built for, where this
        model takes any multiple of the total stride."""
        take = interface.resolve_indices(indices, len(self.feature_info), what="scales")
        interface.check_output_fmt(output_fmt)
        interface.check_flags(return_prefix_tokens=return_prefix_tokens, norm=norm,
                              stop_early=stop_early, intermediates_only=intermediates_only,
                              output_dict=output_dict)
        early = (stop_early or intermediates_only) and (self.parallel_blocks is None
                                                        or take[-1] == 0)
        xs = self._scales(images, last=take[-1] if early else 3)
        sizes = self.token_grids(images)
        maps, prefixes = [], []
        for s in take:
            f = self._final_norms()[s]
            y = f(xs[s]) if norm and f is not None else xs[s]
            maps.append(interface.tokens_to_grid(y, sizes[s], self.num_prefix_tokens, output_fmt))
            prefixes.append(y[:, :self.num_prefix_tokens])
        final = None if intermediates_only else self._features(xs)
        return interface.intermediates_result(
            final, maps, prefixes if return_prefix_tokens else None, output_dict)

    def prune_intermediate_layers(self, indices=1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """Drop what ``forward_intermediates(indices=...)`` does not need (timm's rule): the
        scales after the last index -- unless parallel blocks, which need all four, are kept
        for a later index --, the final norms with ``prune_norm`` (and always when the output
        ends before scale 4), the head and ``aggregate`` with ``prune_head`` or when the output
        no longer ends at scale 4 (``num_features`` is then the last kept scale's width).
        Returns the indices, counted from scale 1."""
        interface.check_flags(prune_norm=prune_norm, prune_head=prune_head)
        take = interface.resolve_indices(indices, len(self.feature_info), what="scales")
        last = take[-1]
        if self.parallel_blocks is None or last == 0:
            for s in range(last + 2, NUM_SCALES + 1):
                for name in ("cls_token", "patch_embed", "cpe", "crpe", "serial_blocks"):
                    setattr(self, f"{name}{s}", None)
            self.parallel_blocks = None
            self.feature_info = self.feature_info[:last + 1]
            prune_norm = prune_norm or last < NUM_SCALES - 1
        ends_early = self.parallel_blocks is None and last < NUM_SCALES - 1
        if prune_norm:
            for name in ("norm2", "norm3", "norm4"):
                if getattr(self, name) is not None:
                    setattr(self, name, nn.Identity())
        if ends_early:
            self.num_features = self.feature_info[last]["num_chs"]
        if prune_head or ends_early:
            self.aggregate = None  # part of the head: mixes the class tokens of scales 2-4
            self.reset_classifier(0)
        return take

    def group_matcher(self, coarse: bool = False) -> dict:
        """timm's format (see ``torch_nn.base``): per scale its embedding (class token, patch
        embedding, CPE, CRPE) then its serial blocks; the parallel blocks, with the final norms
        and ``aggregate`` in the last block's group; the head last.  timm's groups."""
        each = "" if coarse else r"\.(\d+)"
        groups = {}
        for s in range(1, NUM_SCALES + 1):
            groups[f"stem{s}"] = rf"^(?:cls_token{s}|patch_embed{s}|cpe{s}|crpe{s})\b"
            groups[f"serial_blocks{s}"] = rf"^serial_blocks{s}" + each
        groups["parallel_blocks"] = [(r"^parallel_blocks" + each, None),
                                     (r"^(?:norm\d|aggregate)", (MATCH_PREVIOUS,))]
        return groups

    # --- attention maps -----------------------------------------------------------------------
    def attention_modules(self) -> list[RecordsAttention]:
        """The factorized-attention layers in forward order: the serial blocks of scales 1-4,
        then each parallel block's scales 2-4."""
        return super().attention_modules()

    def get_attention_maps(self, images: torch.Tensor, view: str = "class") -> list[torch.Tensor]:
        """One tensor per factorized-attention layer: ``view="class"`` (B, h, 1, N), the class
        token's implicit attention row d^-½ q_cls softmax(K)ᵀ (its output is exactly this row
        times V); ``view="keys"`` (B, h, N, d), softmax(K) over the tokens.  In the
        cross-attention variant, the within-scale term."""
        interface.check_attention_view(view)
        return [interface.factorized_attention_map(r.key_softmax, r.class_query, view)
                for r in self.recorded_attention(images)]

    def get_attention_grids(self, images: torch.Tensor, view: str = "class") -> list[torch.Tensor]:
        """One (B, h, H_s, W_s) grid per factorized-attention layer, on its scale's token grid,
        ready to draw over the image (``view`` as in ``get_attention_maps``)."""
        interface.check_attention_view(view)
        return [interface.factorized_attention_grid(
                    interface.factorized_attention_map(r.key_softmax, r.class_query, view),
                    r.size, view)
                for r in self.recorded_attention(images)]

    # --- checkpoints --------------------------------------------------------------------------
    def adapt_state_dict(self, state_dict: dict, pos_embed_grid=None) -> dict:
        """Make a CoaT checkpoint fit: the official release carries final norms the model never
        uses (``norm1.*`` always; ``norm2.*``, ``norm3.*`` in CoaT-Lite), which are dropped, as
        timm's checkpoint filter does.  Aliases of shared modules are filled in by
        ``vit_scratch.load_checkpoint``.  ``pos_embed_grid`` is ignored: CoaT has no position
        embedding to resize."""
        unused = ("norm1.",) + (("norm2.", "norm3.", "aggregate.") if self.cfg.is_lite else ())
        return {k: v for k, v in state_dict.items() if not k.startswith(unused)}


def _with_class_token(tokens: torch.Tensor, cls_token: torch.Tensor) -> torch.Tensor:
    """(B, N, C) tokens -> (B, 1 + N, C) with the class token in front."""
    return torch.cat([cls_token.expand(tokens.shape[0], -1, -1), tokens], dim=1)
