"""The interface every PyTorch model of the library answers (timm's), written once.

A family's model subclasses :class:`ModelBase` and provides ``forward_features`` (and, for a
multi-stage family, ``forward_intermediates`` and ``prune_intermediate_layers``), starting with
``images = self.prepare_images(images)`` (the input checks and the dtype policy of
``vit_scratch.validation``, the same as the NumPy room's); it inherits the rest (see
``vit_scratch.interface``):

    get_classifier(), reset_classifier(n, global_pool), forward_head(x, pre_logits=False),
    forward(x), no_weight_decay(), group_matcher(), set_grad_checkpointing(),
    get_intermediate_layers(...), get_attention_maps(x), get_attention_grids(x),
    adapt_state_dict(state_dict), set_input_size(img_size)

and, for a single-stage family (``embed``, ``blocks``, ``norm``: ViT, CaiT),
``forward_intermediates`` and ``prune_intermediate_layers``.

Attention maps: attention modules mix in ``RecordsAttention``.  ``get_attention_maps`` switches
recording on for one forward pass (they then compute their weights explicitly and keep them)
and off again, so the normal forward keeps its fused kernels and the models pass no flag through
their blocks.  (ViT's ``Block`` used on its own still returns its weights with
``return_attention=True``, like the NumPy ``block``.)

Compiled and traced: ``torch.jit.script(model)`` compiles ``forward`` (the checks of
``prepare_images`` and the eager-only branches -- attention recording, gradient checkpointing --
are left out of the compiled code: ``torch.jit.is_scripting()``), and ``torch.fx`` traces it
(``prepare_images`` sees a ``Proxy`` and passes it on unchecked).  A compiled or traced model
takes images of its own dtype.
"""
import re
import warnings
from contextlib import contextmanager

import torch
from torch import nn

from .. import interface, validation
from ..checkpoint_checks import CheckpointError
from .attention import RecordsAttention
from .layers import recompute_in_backward, trunc_normal_
from .patch_embed import _resize_pos_embed, resize_pos_embed, square_grid


#: timm's group_matcher suffix that puts a match in the group before it (``MATCH_PREV_GROUP``).
MATCH_PREVIOUS = 99999


class UnsupportedPool(ValueError, AssertionError):
    """A ``global_pool`` the model cannot take: a ``ValueError`` (how this library refuses a bad
    argument) that is also an ``AssertionError`` (how timm's models refuse a pool), so code
    written against either catches it."""


def tracing() -> bool:
    """Whether the forward pass is being traced or compiled rather than run: by
    ``torch.compile`` or ``torch.export`` (and the ONNX exporter built on it, ``dynamo=True``),
    where sizes may be symbolic, or by ``torch.jit.trace`` (and the TorchScript-based ONNX
    exporter, ``dynamo=False``), where they are tensors that record how they are used.  A check
    that reads the values of the images is then left out: there are no values to read, only the
    example's, and the exported model would not repeat the check."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()


def image_shape(images: torch.Tensor) -> tuple:
    """``images.shape`` for the input checks.  Under ``torch.jit.trace`` the sizes are tensors
    that record their use in the graph; the checks read the example's sizes as ints instead,
    which records nothing (the tracer's warning that a size became a constant is about such
    reads, and is silenced for them).  Under ``torch.export`` the batch stays symbolic: the
    checks never read it (``validation.check_images``)."""
    if not torch.jit.is_tracing():
        return tuple(images.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        return tuple(int(size) for size in images.shape)


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
    #: what ``global_pool`` may be: the class token, the mean of the patch tokens, or no pooling
    #: (``forward`` then returns ``forward_features``' tokens)
    global_pools = ("token", "avg", "")
    #: ``features_only=True``: which of ``forward_intermediates``' maps by default (timm's: an
    #: int n is the last n)
    default_out_indices = 3
    __jit_unused_properties__ = ["default_cfg"]  # a dict of mixed values: not for TorchScript

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.num_classes = cfg.num_classes
        self.in_chans = cfg.in_chans
        # instance attributes (TorchScript reads these), which pruning may change
        self.num_prefix_tokens = type(self).num_prefix_tokens
        self.pos_embed_prefix_tokens = type(self).pos_embed_prefix_tokens
        self.global_pool = "token"
        self.grad_checkpointing = False
        self.dynamic_img_size = False  # True: any multiple of the patch size, pos_embed resized
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

    @property
    def head_hidden_size(self) -> int:
        """Width of what the classifier reads (``forward_head(pre_logits=True)``): no pre-logits
        layer here, so ``num_features``."""
        return self.num_features

    # --- the input ------------------------------------------------------------------------------
    def check_image_size(self, shape) -> None:
        """(B, C, H, W) with C = ``in_chans`` and (H, W) = ``img_size``: a position embedding
        fixes the size (with ``dynamic_img_size``: any multiple of the patch size).  A family
        that takes other sizes (CoaT: any multiple of its stride) overrides this, in both rooms."""
        if self.dynamic_img_size:
            validation.check_images(shape, self.cfg.in_chans, patch_size=self.cfg.patch_size)
        else:
            validation.check_images(shape, self.cfg.in_chans, self.cfg.img_size)

    def prepare_images(self, images: torch.Tensor) -> torch.Tensor:
        """Check a batch (B, C, H, W) before it enters the model and cast it to the model's dtype.

        The policy is ``vit_scratch.validation``' (the NumPy room applies the same): floating-point
        images (float16, bfloat16, float32, float64) are cast to the dtype of the parameters;
        integer (uint8 included), bool and complex images are refused, and so are NaN, infinite
        and huge (> ``validation.MAX_ABS_IMAGE``) values.  The value check runs on CPU tensors
        only: on a GPU it would read a number back and make the host wait for the device on
        every forward, so there only the dtype and shape are checked.  While ``torch.compile``,
        ``torch.export`` or ``torch.jit.trace`` (and so either ONNX exporter) trace the model,
        the example's dtype, channels and size are checked but not its values, and the batch
        size is left free (:func:`tracing`, :func:`image_shape`); ``torch.fx`` passes its
        ``Proxy`` through unchecked, and TorchScript compiles none of it.
        """
        if not torch.jit.is_scripting():  # compiled: the images go in as they are
            images = self.checked_images(images)
        return images

    def checked_images(self, images):
        """``prepare_images``' checks and cast (eager PyTorch; a torch.fx ``Proxy`` passes)."""
        if isinstance(images, torch.fx.Proxy):  # torch.fx traces the model: nothing to check
            return images
        if not isinstance(images, torch.Tensor):
            hint = "; use torch.from_numpy(images)" if type(images).__module__ == "numpy" else ""
            raise ValueError(f"images must be a torch.Tensor of shape (B, C, H, W), got "
                             f"{type(images).__name__}{hint}")
        validation.check_image_dtype(images.dtype)
        self.check_image_size(image_shape(images))
        like = next(self.parameters())
        if images.device != like.device:
            raise ValueError(f"images are on {images.device} but the model is on {like.device}; "
                             f"move them with images.to({str(like.device)!r})")
        if not tracing() and images.device.type == "cpu" and images.numel():
            with torch.no_grad():
                validation.check_image_values(float(images.abs().amax()))
        return images.to(like.dtype)

    def position_embedding(self, images: torch.Tensor) -> torch.Tensor:
        """``pos_embed`` for the patch grid of ``images``: as it is, or -- with
        ``dynamic_img_size`` -- resized to that grid (bicubic, as ``resize_pos_embed``)."""
        if not self.dynamic_img_size:
            return self.pos_embed
        p = self.patch_embed.patch_size
        grid = (images.shape[-2] // p, images.shape[-1] // p)
        return _resize_pos_embed(self.pos_embed, grid, self.patch_embed.grid_size,
                                 self.pos_embed_prefix_tokens)

    def set_dynamic_img_size(self, enable: bool = True) -> None:
        """Take any image size that the patches tile (``pos_embed`` resized on every forward),
        or only ``img_size`` again.  timm's ``dynamic_img_size``."""
        enable = validation.check_bool(enable, "dynamic_img_size")
        if getattr(self, "pos_embed", None) is None:
            if not enable:
                raise ValueError(f"{type(self).__name__} has no position embedding: it takes "
                                 f"any size its strides tile, so dynamic_img_size=False is not "
                                 f"possible")
            return
        self.dynamic_img_size = enable
        if self.pretrained_cfg:
            self.pretrained_cfg = {**self.pretrained_cfg, "fixed_input_size": not enable}

    def set_input_size(self, img_size=None, patch_size=None) -> None:
        """Rebuild for another input size: ``img_size`` becomes the config's, and a position
        embedding is resized to the new patch grid (bicubic, as ``resize_pos_embed``), keeping
        its ``requires_grad``.  ``patch_size`` can only stay what it is."""
        if patch_size is not None and validation.to_2tuple(patch_size, "patch_size") != \
                validation.to_2tuple(self.cfg.patch_size, "patch_size"):
            raise ValueError(f"set_input_size changes the image size only; patch_size="
                             f"{patch_size!r} differs from the model's {self.cfg.patch_size}")
        if img_size is None:
            return
        cfg = self.cfg.replace(img_size=img_size)  # validated: the patches (strides) tile it
        embed = getattr(self, "patch_embed", None)
        if embed is not None:
            old_grid = embed.grid_size
            embed.set_img_size(cfg.img_size)
            pos = getattr(self, "pos_embed", None)
            if pos is not None and embed.grid_size != old_grid:
                with torch.no_grad():
                    resized = _resize_pos_embed(pos, embed.grid_size, old_grid,
                                                self.pos_embed_prefix_tokens)
                self.pos_embed = nn.Parameter(resized, requires_grad=pos.requires_grad)
        self.cfg = cfg
        if self.pretrained_cfg:
            h, w = validation.to_2tuple(cfg.img_size, "img_size")
            self.pretrained_cfg = {**self.pretrained_cfg, "input_size": (cfg.in_chans, h, w)}

    # --- the classifier ------------------------------------------------------------------------
    def get_classifier(self) -> nn.Module:
        return self.head

    def check_global_pool(self, global_pool) -> str:
        """``global_pool`` if this model can pool that way, else :class:`UnsupportedPool`."""
        if not isinstance(global_pool, str) or global_pool not in self.global_pools:
            raise UnsupportedPool(f"global_pool must be one of {self.global_pools} for "
                                  f"{type(self).__name__}, got {global_pool!r}")
        if global_pool == "token" and not self.num_prefix_tokens:
            raise UnsupportedPool("global_pool='token' needs a class token, and this model has "
                                  "none left (prune_intermediate_layers removed it); use 'avg' "
                                  "or ''")
        return global_pool

    def reset_classifier(self, num_classes: int, global_pool=None) -> None:
        """A new head with ``num_classes`` outputs (0: no head), e.g. for fine-tuning, on the
        model's device and dtype and in its train/eval mode.  ``global_pool`` (``None``: keep
        the current one) is how the features are pooled: ``"token"`` (the class token),
        ``"avg"`` (the mean of the patch tokens) or ``""`` (none: ``forward`` returns tokens)."""
        num_classes = validation.check_int(num_classes, "num_classes", minimum=0)
        if global_pool is not None:
            self.global_pool = self.check_global_pool(global_pool)
        self.cfg = self.cfg.replace(num_classes=num_classes)  # validates num_classes
        self.num_classes = num_classes
        like = next(self.parameters())
        head = self.make_head(self.num_features).to(like.device, like.dtype)
        if num_classes:
            trunc_normal_(head.weight, std=0.02)
            nn.init.zeros_(head.bias)
        self.head = head.train(self.training)
        if self.pretrained_cfg:
            self.pretrained_cfg = {**self.pretrained_cfg, "num_classes": num_classes}

    def pool(self, features: torch.Tensor) -> torch.Tensor:
        """forward_features' output -> (B, num_features), as ``global_pool`` says: the class
        token, or the mean of the patch tokens; ``""`` passes the tokens on."""
        if self.global_pool == "avg":
            return features[:, self.num_prefix_tokens:].mean(dim=1)
        if self.global_pool == "token":
            return features[:, 0]
        return features

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Pool, then classify; ``features`` come from the caller: their width is checked."""
        interface.check_flags(pre_logits=pre_logits)
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

    # --- training -------------------------------------------------------------------------------
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them
        (``torch.utils.checkpoint``): the same gradients for less memory and one more forward
        pass per block.  Eager PyTorch only (TorchScript compiles the plain forward)."""
        enable = validation.check_bool(enable, "enable")
        self.grad_checkpointing = enable
        for m in self.modules():
            if m is not self and hasattr(m, "grad_checkpointing"):
                m.grad_checkpointing = enable  # blocks that checkpoint themselves (CoaT's)

    def group_matcher(self, coarse: bool = False) -> dict:
        """The parameters in groups from input to output, in timm's format, for layer-wise
        learning-rate decay (``timm.models.group_parameters`` reads it): group name -> a regex,
        or a list of ``(regex, suffix)``, where a captured number orders the blocks within the
        group and the suffix ``(MATCH_PREVIOUS,)`` puts a match in the group before it.  Here:
        the embedding (the model's own tokens and position embedding, ``patch_embed``), each
        block (all of them as one group with ``coarse``) with the final norm in the last block's
        group; unmatched parameters (the head) come last.  The same groups as timm's ViT."""
        return dict(stem=self.stem_pattern(["patch_embed"]),
                    blocks=[(r"^blocks" if coarse else r"^blocks\.(\d+)", None),
                            (r"^norm", (MATCH_PREVIOUS,))])

    def stem_pattern(self, modules) -> str:
        """A regex for the model's own parameters (tokens, position embeddings) and ``modules``."""
        names = [n for n, _ in self.named_parameters(recurse=False)] + list(modules)
        return r"^(?:" + "|".join(re.escape(n) for n in names) + r")\b"

    # --- a single-stage model: embed, blocks, norm (ViT, CaiT) ---------------------------------
    @property
    def block_prefix_tokens(self) -> int:
        """Tokens before the patch tokens while the blocks run (CaiT: none, its class token
        joins after them)."""
        return self.num_prefix_tokens

    def run_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """``self.blocks`` on the tokens; with gradient checkpointing each block is recomputed
        in the backward pass."""
        if not torch.jit.is_scripting() and self.grad_checkpointing:
            for blk in self.blocks:
                x = recompute_in_backward(blk, x)
            return x
        return self.blocks(x)

    def after_blocks(self, x: torch.Tensor) -> torch.Tensor:
        """The blocks' output -> ``forward_features``' (ViT: the final norm)."""
        return self.norm(x)

    def forward_intermediates(self, images, indices=None, return_prefix_tokens: bool = False,
                              norm: bool = False, stop_early: bool = False,
                              output_fmt: str = "NCHW", intermediates_only: bool = False,
                              output_dict: bool = False):
        """The outputs of the blocks in ``indices`` (None: all; n: the last n; a list), the
        prefix tokens dropped, as (B, C, gh, gw) maps (``output_fmt="NLC"``: (B, N, C) tokens),
        each through the final norm if ``norm``.  Returns ``(final features, maps)``, the maps
        alone with ``intermediates_only``, or a dict with ``output_dict`` (timm's keys:
        ``image_intermediates``, ``image_features``, ``image_intermediates_prefix``).
        ``return_prefix_tokens`` pairs each map with its (B, prefix, C) prefix tokens.
        ``stop_early`` (implied by ``intermediates_only``) skips the blocks after the last
        index; the final features are then those of the last block run."""
        take = interface.resolve_indices(indices, len(self.blocks))
        interface.check_output_fmt(output_fmt)
        interface.check_flags(return_prefix_tokens=return_prefix_tokens, norm=norm,
                              stop_early=stop_early, intermediates_only=intermediates_only,
                              output_dict=output_dict)
        x = self.embed(images)  # checks the images
        p = self.patch_embed.patch_size
        grid = (images.shape[-2] // p, images.shape[-1] // p)
        last = take[-1] if stop_early or intermediates_only else len(self.blocks) - 1
        prefix = self.block_prefix_tokens
        maps, prefixes = [], []
        for i in range(last + 1):
            blk = self.blocks[i]
            x = recompute_in_backward(blk, x) if self.grad_checkpointing else blk(x)
            if i in take:
                y = self.norm(x) if norm else x
                maps.append(interface.tokens_to_grid(y, grid, prefix, output_fmt))
                prefixes.append(y[:, :prefix])
        final = None if intermediates_only else self.after_blocks(x)
        return interface.intermediates_result(
            final, maps, prefixes if return_prefix_tokens and prefix else None, output_dict)

    def prune_intermediate_layers(self, indices=1, prune_norm: bool = False,
                                  prune_head: bool = True) -> list[int]:
        """Drop what ``forward_intermediates(indices=...)`` does not need: the blocks after the
        last index; the final norm with ``prune_norm``; the head and pooling with ``prune_head``
        (``forward`` then returns ``forward_features``' tokens).  Returns the indices, counted
        from the first block.  A pruned model is a feature extractor: its ``cfg`` stays the
        one it was built from."""
        interface.check_flags(prune_norm=prune_norm, prune_head=prune_head)
        take = interface.resolve_indices(indices, len(self.blocks))
        self.blocks = self.blocks[:take[-1] + 1]
        self.feature_info = self.feature_info[:len(self.blocks)]
        if prune_norm:
            self.norm = nn.Identity()
        if prune_head:
            self.prune_head()
        return take

    def prune_head(self) -> None:
        """No pooling, no classifier (``prune_intermediate_layers``)."""
        self.reset_classifier(0, "")

    def get_intermediate_layers(self, images, n=1, reshape: bool = False, norm: bool = False):
        """timm's older API: the outputs of the last ``n`` blocks (or of blocks ``n`` if a
        list), (B, N, C) tokens without the class token, or (B, C, gh, gw) with ``reshape``."""
        interface.check_flags(reshape=reshape)
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
