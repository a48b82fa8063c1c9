"""A model as a backbone of feature maps, for dense tasks (timm's ``features_only``).

    backbone = vit_scratch.create_model("coat_lite_tiny", features_only=True)   # the four scales
    maps = backbone(images)                       # [(B, C_s, H_s, W_s), ...], strides 4 to 32
    backbone.feature_info.channels(), backbone.feature_info.reduction()
    vit_scratch.create_model("vit_small_patch16_224", features_only=True, out_indices=(3, 7, 11))

:class:`FeatureGetter` is timm's ``FeatureGetterNet`` (``feature_cls="getter"``): it calls the
model's ``forward_intermediates(..., intermediates_only=True)``, after dropping what those maps do
not need (``prune_intermediate_layers``: later blocks, the head, and the final norm unless
``norm=True``).  Every family of the library answers ``forward_intermediates``, so every name
can be a backbone.  Infrastructure around the models, written to timm's interface.
"""
from __future__ import annotations

from torch import nn

from .. import interface


class FeatureInfo:
    """What each of a backbone's maps is: ``num_chs`` (channels), ``reduction`` (stride in
    pixels) and ``module`` (whose output it is), for the maps at ``out_indices`` of the model's
    ``feature_info`` list -- timm's ``FeatureInfo`` (``channels()``, ``reduction()``,
    ``module_name()``, ``get_dicts()``; ``info[i]`` and ``len`` over the model's whole list)."""

    def __init__(self, info: list[dict], out_indices):
        self.info = [dict(entry) for entry in info]
        self.out_indices = tuple(out_indices)

    def get(self, key: str, idx=None):
        """``key`` of the maps at ``out_indices`` (a list), or of map ``idx`` of the model's
        list (an int, or a list of them)."""
        if idx is None:
            return [self.info[i][key] for i in self.out_indices]
        if isinstance(idx, (list, tuple)):
            return [self.info[i][key] for i in idx]
        return self.info[idx][key]

    def get_dicts(self, keys=None, idx=None) -> list[dict] | dict:
        """The entries (only ``keys`` if given) of the maps at ``out_indices``, or at ``idx``."""
        pick = lambda d: dict(d) if keys is None else {k: d[k] for k in keys}  # noqa: E731
        if idx is None:
            return [pick(self.info[i]) for i in self.out_indices]
        if isinstance(idx, (list, tuple)):
            return [pick(self.info[i]) for i in idx]
        return pick(self.info[idx])

    def channels(self, idx=None):
        return self.get("num_chs", idx)

    def reduction(self, idx=None):
        return self.get("reduction", idx)

    def module_name(self, idx=None):
        return self.get("module", idx)

    def __getitem__(self, item):
        return self.info[item]

    def __len__(self) -> int:
        return len(self.info)

    def __repr__(self) -> str:
        return f"FeatureInfo(channels={self.channels()}, reduction={self.reduction()})"


class FeatureGetter(nn.Module):
    """``model`` as a backbone: ``forward(images)`` -> the list of its feature maps at
    ``out_indices`` (None: the family's ``default_out_indices``, timm's choice -- the last three
    blocks of ViT and CaiT, CoaT's four scales; an int n: the last n; a list of indices),
    in ``output_fmt`` (``"NCHW"`` maps, or ``"NLC"`` tokens), through the final norm if ``norm``.

    With ``prune`` (the default) the model loses what these maps do not need; ``out_indices``
    are then counted from the first block (negative ones resolved).  ``feature_info`` describes
    the maps (:class:`FeatureInfo`); ``pretrained_cfg`` is the model's.  The state_dict keys
    are the model's under ``model.`` (timm's).  Eager PyTorch: ``forward_intermediates`` is not
    compiled by TorchScript."""

    def __init__(self, model: nn.Module, out_indices=None, norm: bool = False,
                 prune: bool = True, output_fmt: str = "NCHW"):
        super().__init__()
        interface.check_output_fmt(output_fmt)
        interface.check_flags(norm=norm, prune=prune)
        if out_indices is None:
            out_indices = model.default_out_indices
        out_indices = interface.resolve_indices(out_indices, len(model.feature_info),
                                                what="feature maps", name="out_indices")
        if prune:
            out_indices = model.prune_intermediate_layers(out_indices, prune_norm=not norm)
        self.model = model
        self.out_indices = tuple(out_indices)
        self.norm = norm
        self.output_fmt = output_fmt
        self.feature_info = FeatureInfo(model.feature_info, self.out_indices)
        self.pretrained_cfg = dict(getattr(model, "pretrained_cfg", {}) or {})

    @property
    def default_cfg(self) -> dict:  # timm's older name for pretrained_cfg
        return self.pretrained_cfg

    def forward(self, images):
        return self.model.forward_intermediates(images, indices=list(self.out_indices),
                                                norm=self.norm, output_fmt=self.output_fmt,
                                                intermediates_only=True)

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """The model's gradient checkpointing (its blocks recomputed in the backward pass)."""
        self.model.set_grad_checkpointing(enable)
