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
from __future__ import annotations

import torch
from torch import nn

from .. import interface
from ..specs.coat import CPE_WINDOW, NUM_SCALES, PATCH_NORM_EPS, CoaTConfig, CoaTImageSizeMixin
from .attention import RecordsAttention
from .base import ModelBase
from .conv_position_encoding import ConvPosEnc, ConvRelPosEnc, _tokens_to_image
from .coscale import ParallelBlock
from .factorized_attention import FactorAttnConvRelPosEnc
from .layers import (LAYER_NORM_EPS, DropPath, Mlp, init_weights_, layers_from_config, mlp_hidden,
                     trunc_normal_)


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

    def forward(self, x: torch.Tensor, size) -> torch.Tensor:
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

    def __init__(self, cfg: CoaTConfig | None = None, **kwargs):
        cfg = CoaTConfig.build(cfg, **kwargs)
        super().__init__(cfg)
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
    def scale_modules(self, s: int):
        """(cls_token, patch_embed, serial_blocks) of scale s (1-4)."""
        return tuple(getattr(self, f"{name}{s}") for name in ("cls_token", "patch_embed", "serial_blocks"))

    def _scales(self, images: torch.Tensor, last: int = 3):
        """Scales 1..last+1 through their serial blocks (then the parallel blocks, when all four
        ran): -> ([x1, x2, x3, x4] tokens before the final norms, their grid sizes)."""
        images = self.prepare_images(images)  # the checks and dtype policy of vit_scratch.validation
        sizes = self.grid_sizes(images)
        B, x, xs = images.shape[0], images, []
        for s in range(last + 1):
            cls, patch_embed, blocks = self.scale_modules(s + 1)
            if s > 0:
                x = _tokens_to_image(xs[-1], sizes[s - 1])  # (B, C, H, W), class token dropped
            tokens = torch.cat([cls.expand(B, -1, -1), patch_embed(x)], dim=1)
            for blk in blocks:
                tokens = blk(tokens, sizes[s])
            xs.append(tokens)
        if not self.cfg.is_lite and last == 3:
            rest = xs[1:]
            for blk in self.parallel_blocks:
                rest = [getattr(self, f"cpe{s}")(x, size) for x, s, size in zip(rest, (2, 3, 4), sizes[1:])]
                rest = blk(rest, sizes[1:])
            xs[1:] = rest
        return xs, sizes

    def _final_norm(self, s: int):
        """Scale s's final norm (0-based), or None (scale 1 never has one; CoaT-Lite only norm4)."""
        if s == 3 or (s > 0 and not self.cfg.is_lite):
            return getattr(self, f"norm{s + 1}")
        return None

    def _features(self, xs):
        if self.cfg.is_lite:
            return self.norm4(xs[3])
        return [self._final_norm(s)(xs[s]) for s in (1, 2, 3)]

    def forward_features(self, images: torch.Tensor):
        """CoaT-Lite: norm4(x4), (B, 1 + H4·W4, C4).  CoaT: [norm2(x2), norm3(x3), norm4(x4)]."""
        return self._features(self._scales(images)[0])

    def pool(self, features) -> torch.Tensor:
        """-> (B, num_features): scale 4's class token (CoaT-Lite), or ``aggregate``'s learned mix
        of the class tokens of scales 2-4 (CoaT)."""
        if self.cfg.is_lite:
            return features[:, 0]
        return self.aggregate(torch.stack([f[:, 0] for f in features], dim=1)).squeeze(1)

    def classify(self, pooled: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Dropout on the pooled features (``drop_rate``), then the head."""
        x = self.head_drop(pooled)
        return x if pre_logits else self.head(x)

    def forward_intermediates(self, images: torch.Tensor, indices=None, norm: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        """Per-scale feature maps for dense tasks: for the scales in ``indices`` (0-3; None: all
        four; n: the last n), the tokens without the class token as (B, C_s, H_s, W_s) maps
        (``output_fmt="NLC"``: (B, H_s·W_s, C_s)).  Scales 2-4 of CoaT are taken after the
        parallel blocks.  ``norm`` applies the scale's final norm where it has one (timm's rule:
        norm4 for CoaT-Lite's scale 4; norm2-4 for CoaT's scales 2-4; scale 1 never).
        Returns ``(forward_features output, maps)``, or the maps alone with
        ``intermediates_only`` (then scales after the last index are skipped when no parallel
        block needs them).

        Compared with timm's ``CoaT.forward_intermediates`` (same maps, same ``norm`` rule, same
        final features -- the tests check it): timm offers only NCHW, takes a ``stop_early`` flag
        (here implied by ``intermediates_only``), returns contiguous copies (here: views of the
        tokens), and runs only at the size it was built for, where this model takes any multiple
        of the total stride."""
        take = interface.resolve_indices(indices, NUM_SCALES, what="scales")
        interface.check_output_fmt(output_fmt)
        early = intermediates_only and (self.cfg.is_lite or take[-1] == 0)
        xs, sizes = self._scales(images, last=take[-1] if early else 3)
        maps = []
        for s in take:
            f = self._final_norm(s)
            y = f(xs[s]) if norm and f is not None else xs[s]
            maps.append(interface.tokens_to_grid(y, sizes[s], self.num_prefix_tokens, output_fmt))
        return maps if intermediates_only else (self._features(xs), maps)

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
