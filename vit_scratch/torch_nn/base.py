"""The interface every PyTorch model of the library answers (timm's), written once.

A family's model subclasses :class:`ModelBase` and provides ``forward_features`` and
``forward_intermediates``, each starting with ``images = self.prepare_images(images)`` (the
input checks and the dtype policy of ``vit_scratch.validation``, the same as the NumPy room's); it
inherits the rest (see ``vit_scratch.interface``):

    get_classifier(), reset_classifier(n), forward_head(x, pre_logits=False), forward(x),
    no_weight_decay(), get_intermediate_layers(...), get_attention_maps(x),
    get_attention_grids(x), adapt_state_dict(state_dict)

Attention maps: attention modules mix in ``RecordsAttention``.  ``get_attention_maps`` switches
recording on for one forward pass (they then compute their weights explicitly and keep them)
and off again, so the normal forward keeps its fused kernels and the models pass no flag through
their blocks.  (ViT's ``Block`` used on its own still returns its weights with
``return_attention=True``, like the NumPy ``block``.)
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from .. import interface, validation
from ..checkpoint_checks import CheckpointError
from .attention import RecordsAttention
from .layers import trunc_normal_
from .patch_embed import resize_pos_embed, square_grid


@contextmanager
def recording_attention(modules):
    """Switch attention recording on for ``modules`` inside the ``with`` block, then off."""
    for m in modules:
        m.record_attention, m.recorded = True, None
    try:
        yield modules
    finally:
        for m in modules:
            m.record_attention = False


class ModelBase(nn.Module):
    """What every model of the library answers; see ``vit_scratch.interface``."""

    num_prefix_tokens = 1  # class token(s) in front of the patch tokens of forward_features
    pos_embed_prefix_tokens = 1  # pos_embed entries before the patch grid (CaiT: 0)

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.num_classes = cfg.num_classes
        self.feature_info = cfg.feature_info  # what forward_intermediates returns (timm's)
        self.pretrained_cfg: dict = {}  # set by vit_scratch.create_model for a registered name

    @classmethod
    def class_for(cls, cfg) -> type:
        """The class that builds ``cfg``: this one.  A family with a subclass for some configs
        (ViT's distilled models) overrides it; the factory (``vit_scratch.models``) asks it."""
        return cls

    @property
    def default_cfg(self) -> dict:  # timm's older name for pretrained_cfg
        return self.pretrained_cfg

    # --- the input ------------------------------------------------------------------------------
    def check_image_size(self, shape) -> None:
        """(B, C, H, W) with C = ``in_chans`` and (H, W) = ``img_size``: a position embedding
        fixes the size.  A family that takes other sizes (CoaT: any multiple of its stride)
        overrides this, in both rooms."""
        validation.check_images(shape, self.cfg.in_chans, self.cfg.img_size)

    def prepare_images(self, images: torch.Tensor) -> torch.Tensor:
        """Check a batch (B, C, H, W) before it enters the model and cast it to the model's dtype.

        The policy is ``vit_scratch.validation``' (the NumPy room applies the same): floating-point
        images (float16, bfloat16, float32, float64) are cast to the dtype of the parameters;
        integer (uint8 included), bool and complex images are refused, and so are NaN, infinite
        and huge (> ``validation.MAX_ABS_IMAGE``) values.  The value check runs on CPU tensors
        only: on a GPU it would read a number back and make the host wait for the device on
        every forward, so there only the dtype and shape are checked.  It is also skipped while
        ``torch.compile`` or ``torch.fx`` traces the model.
        """
        if isinstance(images, torch.fx.Proxy):  # torch.fx traces the model: nothing to check
            return images
        if not isinstance(images, torch.Tensor):
            hint = "; use torch.from_numpy(images)" if type(images).__module__ == "numpy" else ""
            raise ValueError(f"images must be a torch.Tensor of shape (B, C, H, W), got "
                             f"{type(images).__name__}{hint}")
        validation.check_image_dtype(images.dtype)
        self.check_image_size(images.shape)
        like = next(self.parameters())
        if images.device != like.device:
            raise ValueError(f"images are on {images.device} but the model is on {like.device}; "
                             f"move them with images.to({str(like.device)!r})")
        if images.numel() and images.device.type == "cpu" and not torch.compiler.is_compiling():
            with torch.no_grad():
                validation.check_image_values(float(images.abs().amax()))
        return images.to(like.dtype)

    # --- the classifier ------------------------------------------------------------------------
    def get_classifier(self) -> nn.Module:
        return self.head

    def reset_classifier(self, num_classes: int, global_pool=None) -> None:
        """A new head with ``num_classes`` outputs (0: no head), e.g. for fine-tuning.
        ``global_pool`` is accepted for timm compatibility; only token pooling is supported."""
        if global_pool not in (None, "token"):
            raise ValueError(f"global_pool must be None or 'token', got {global_pool!r}")
        num_classes = validation.check_int(num_classes, "num_classes", minimum=0)
        self.cfg = self.cfg.replace(num_classes=num_classes)  # validates num_classes
        self.num_classes = num_classes
        like = next(self.parameters())
        head = self.make_head(self.num_features).to(like.device, like.dtype)
        if num_classes:
            trunc_normal_(head.weight, std=0.02)
            nn.init.zeros_(head.bias)
        self.head = head
        if self.pretrained_cfg:
            self.pretrained_cfg = {**self.pretrained_cfg, "num_classes": num_classes}

    def pool(self, features: torch.Tensor) -> torch.Tensor:
        """forward_features' output -> (B, num_features): the class token."""
        return features[:, 0]

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pool, then classify; ``features`` come from the caller: their width is checked."""
        x = self.pool(features)
        validation.check_last_dim(x.shape, self.num_features, "pooled features")
        return self.classify(x, pre_logits)

    def classify(self, pooled: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """The head on pooled features (B, num_features), unchecked."""
        return pooled if pre_logits else self.head(pooled)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.classify(self.pool(self.forward_features(images)))

    def make_head(self, dim: int) -> nn.Module:
        """The classifier on ``dim`` pooled features: ``num_classes`` outputs, or none
        (``nn.Identity``) for ``num_classes=0``."""
        return nn.Linear(dim, self.num_classes) if self.num_classes else nn.Identity()

    def no_weight_decay(self) -> set[str]:
        """Parameters that skip weight decay beyond biases and norms: the model's own tokens
        and position embeddings (its direct parameters, not those of its layers)."""
        return {name for name, _ in self.named_parameters(recurse=False)}

    # --- features for dense tasks -------------------------------------------------------------
    def forward_intermediates(self, images, indices=None, norm: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False):
        raise NotImplementedError

    def block_maps(self, images, indices, norm: bool, output_fmt: str, stop_early: bool,
                   prefix_tokens: int):
        """A single-stage model's intermediates (``self.embed``, ``self.blocks``, ``self.norm``):
        ``(tokens after the last block run, maps)``, the maps the outputs of the blocks in
        ``indices`` (through the final norm if ``norm``) with ``prefix_tokens`` dropped;
        ``stop_early`` skips the blocks after the last index."""
        take = interface.resolve_indices(indices, len(self.blocks))
        interface.check_output_fmt(output_fmt)
        x, maps = self.embed(images), []
        last = take[-1] if stop_early else len(self.blocks) - 1
        for i, blk in enumerate(self.blocks[:last + 1]):
            x = blk(x)
            if i in take:
                y = self.norm(x) if norm else x
                maps.append(interface.tokens_to_grid(y, self.patch_embed.grid_size, prefix_tokens,
                                                     output_fmt))
        return x, maps

    def get_intermediate_layers(self, images, n=1, reshape: bool = False, norm: bool = False):
        """timm's older API: the outputs of the last ``n`` blocks (or of blocks ``n`` if a
        list), (B, N, C) tokens without the class token, or (B, C, gh, gw) with ``reshape``."""
        return tuple(self.forward_intermediates(images, indices=n, norm=norm,
                                                output_fmt="NCHW" if reshape else "NLC",
                                                intermediates_only=True))

    # --- attention maps -----------------------------------------------------------------------
    def attention_modules(self) -> list[nn.Module]:
        """The attention layers whose weights ``get_attention_maps`` returns, in forward order."""
        return [m for m in self.modules() if isinstance(m, RecordsAttention)]

    def recorded_attention(self, images: torch.Tensor) -> list:
        """Run ``forward_features`` once with recording on, and return what each of
        ``attention_modules()`` kept (then forget it, so no graph or tensor stays alive)."""
        modules = self.attention_modules()
        with recording_attention(modules):
            self.forward_features(images)
            records = [m.recorded for m in modules]
        for m in modules:
            m.recorded = None
        return records

    def get_attention_maps(self, images: torch.Tensor) -> list[torch.Tensor]:
        """One tensor of attention weights per attention layer (the family documents the shape).
        Computed explicitly for this call only; the normal forward stays fused."""
        return self.recorded_attention(images)

    def attention_grid(self, weights: torch.Tensor) -> torch.Tensor:
        """One layer's weights -> (B, heads, gh, gw): where the class token looks."""
        return interface.readout_grid(weights, self.patch_embed.grid_size, self.num_prefix_tokens)

    def get_attention_grids(self, images: torch.Tensor) -> list[torch.Tensor]:
        """Per attention layer, (B, heads, gh, gw) on the patch grid, ready to draw over the input."""
        return [self.attention_grid(w) for w in self.get_attention_maps(images)]

    # --- checkpoints --------------------------------------------------------------------------
    def adapt_state_dict(self, state_dict: dict, pos_embed_grid=None) -> dict:
        """Make a checkpoint fit this model: resize a position embedding trained on another
        patch grid to ours (``vit_scratch.load_checkpoint`` calls this).

        ``pos_embed_grid=(rows, cols)`` is the grid the checkpoint was trained on; without it a
        square grid is assumed (timm's convention), and a non-square one must be given."""
        own = getattr(self, "pos_embed", None)
        pe = state_dict.get("pos_embed")
        if not (isinstance(own, torch.Tensor) and isinstance(pe, torch.Tensor) and pe.ndim == 3
                and pe.shape[0] == 1 and pe.shape[-1] == own.shape[-1]):
            return state_dict  # nothing to resize (a mismatch is reported by load_checkpoint)
        prefix = self.pos_embed_prefix_tokens
        n = pe.shape[1] - prefix
        new_grid = self.patch_embed.grid_size
        if pos_embed_grid is None:
            if pe.shape == own.shape:
                return state_dict
            pos_embed_grid = square_grid(n)
            if pos_embed_grid is None:
                pairs = [(r, n // r) for r in range(1, n + 1) if n % r == 0 and
                         max(r, n // r) <= 8 * min(r, n // r)]
                raise CheckpointError(
                    f"the checkpoint's pos_embed has {n} grid positions (after {prefix} prefix "
                    f"token(s)), which is not a square grid, and the file does not record its "
                    f"grid; pass pos_embed_grid=(rows, cols) to vit_scratch.load_checkpoint: the "
                    f"img_size / patch_size it was trained at, one of {pairs}")
        pos_embed_grid = validation.to_2tuple(pos_embed_grid, "pos_embed_grid")
        if pos_embed_grid[0] * pos_embed_grid[1] != n:
            raise CheckpointError(
                f"pos_embed_grid={pos_embed_grid} holds {pos_embed_grid[0] * pos_embed_grid[1]} "
                f"positions, but the checkpoint's pos_embed has {n} (after {prefix} prefix "
                f"token(s))")
        if pos_embed_grid == tuple(new_grid):
            return state_dict
        state_dict = dict(state_dict)
        state_dict["pos_embed"] = resize_pos_embed(pe, new_grid, old_grid=pos_embed_grid,
                                                   num_prefix_tokens=prefix)
        return state_dict
