"""The interface every NumPy model of the library answers, written once.

A family's NumPy model subclasses :class:`ModelBase`, sets ``param_shapes`` (its spec's
``{key: shape}`` table; ``shared_keys`` too if some keys name one tensor, as in CoaT) and
provides ``forward_features``, ``forward_intermediates`` and ``get_attention_maps``, each starting
with ``images = self.prepare_images(images)`` (the input checks and dtype policy of
``vit_scratch.validation``, the same as the PyTorch room's).  Attribute and method names are
those of the PyTorch room (``vit_scratch.interface``).  Its params are checked once, here: keys,
shapes, one floating dtype, finite values (``vit_scratch.checkpoint_checks``); images once per
call, in ``prepare_images``; nothing else in a forward pass is checked again.  For learning, each family's class adds
``forward_with_cache`` and ``backward`` (the pattern of ``numpy_nn.backprop``); the weight-decay
rule is ``numpy_nn.training.decays``.  There is no classifier reset.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import checkpoint_checks, interface, validation
from .layers import _linear


def as_params(params, what: str) -> dict[str, np.ndarray]:
    """``params`` as ``{key: ndarray}``, or a ``ValueError`` saying what it is instead."""
    advice = ("a dict of NumPy arrays keyed like the PyTorch state_dict "
              "(vit_scratch.state_dict_to_numpy(model.state_dict()))")
    if not isinstance(params, Mapping):
        raise ValueError(f"{what} must be {advice}, got {type(params).__name__}")
    out = {}
    for key, value in params.items():
        if not isinstance(key, str):
            raise ValueError(f"{what} must be keyed by str, got the key {key!r}")
        if type(value).__module__.startswith("torch"):
            raise ValueError(f"{what}[{key!r}] is a {type(value).__name__}; expected {advice}")
        try:
            out[key] = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{what}[{key!r}] is not an array ({err}); expected {advice}") from None
    return out


class ModelBase:
    """A forward pass in NumPy, driven by ``params``: ``{state_dict key: array}``.

    Everything is computed in the params' dtype: every array float32 (a checkpoint) or every
    array float64 (the precision tests); anything else is refused
    (``checkpoint_checks.check_param_dtypes``).
    Images follow the same policy as in the PyTorch room (``prepare_images``)."""

    param_shapes = None  # cfg -> {key: shape}: the family spec's table
    shared_keys = None  # cfg -> groups of keys that are one tensor (None: every key is its own)
    num_prefix_tokens = 1

    def __init__(self, cfg, params: dict, name: str | None = None):
        name = name or type(self).__name__
        what = f"params for {name}"
        params = as_params(params, what)
        if type(self).shared_keys is not None:
            params = fill_shared_keys(params, type(self).shared_keys(cfg), what)
        checkpoint_checks.check_params(params, type(self).param_shapes(cfg), what)
        dtype = checkpoint_checks.check_param_dtypes({k: v.dtype.name for k, v in params.items()},
                                                     what)
        checkpoint_checks.check_param_values(
            {k: float(np.abs(v).max()) if v.size else 0.0 for k, v in params.items()}, what)
        self.cfg = cfg
        self.name = name
        self.params = params
        self.dtype = np.dtype(dtype)
        self.num_classes = cfg.num_classes
        self.pretrained_cfg: dict = {}  # set by vit_scratch.create_numpy_model

    @classmethod
    def class_for(cls, cfg) -> type:
        """The class that builds ``cfg``: this one.  A family with a subclass for some configs
        (ViT's distilled models) overrides it; the factory (``vit_scratch.models``) asks it."""
        return cls

    def check_image_size(self, shape) -> None:
        """(B, C, H, W) with C = ``in_chans`` and (H, W) = ``img_size``: a position embedding
        fixes the size.  A family that takes other sizes (CoaT: any multiple of its stride)
        overrides this, in both rooms."""
        validation.check_images(shape, self.cfg.in_chans, self.cfg.img_size)

    def prepare_images(self, images) -> np.ndarray:
        """Check a batch (B, C, H, W) before it enters the model and cast it to the model's dtype.

        The policy of ``vit_scratch.validation``, the same as the PyTorch room's: floating-point
        images (float16, float32, float64) are cast to the params' dtype; integer (uint8
        included), bool and complex images are refused, and so are NaN, infinite and huge
        (> ``validation.MAX_ABS_IMAGE``) values.  A torch tensor is refused too (``.numpy()`` it)."""
        if type(images).__module__.startswith("torch"):
            raise ValueError(f"images is a {type(images).__name__}; the NumPy model takes NumPy "
                             f"arrays: images.detach().cpu().numpy()")
        images = np.asarray(images)
        validation.check_image_dtype(images.dtype)
        self.check_image_size(images.shape)
        if images.size:
            validation.check_image_values(float(np.abs(images).max()))
        return images.astype(self.dtype, copy=False)

    def pool(self, features: np.ndarray) -> np.ndarray:
        """forward_features' output -> (B, num_features): the class token."""
        return features[:, 0]

    def forward_head(self, features: np.ndarray, pre_logits: bool = False) -> np.ndarray:
        """Pool, then classify: (B, num_classes), or (B, num_features) with ``pre_logits`` or
        without a head.  ``features`` come from the caller: their width is checked."""
        interface.check_flags(pre_logits=pre_logits)
        x = self.pool(features)
        validation.check_last_dim(x.shape, self.num_features, "pooled features")
        return self.classify(x, pre_logits)

    def classify(self, pooled: np.ndarray, pre_logits: bool = False) -> np.ndarray:
        """The head on pooled features (B, num_features), unchecked."""
        if pre_logits or not self.num_classes:
            return pooled
        return _linear(pooled, self.params["head.weight"], self.params["head.bias"])

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.classify(self.pool(self.forward_features(images)))

    forward = __call__

    def get_intermediate_layers(self, images, n=1, reshape: bool = False, norm: bool = False):
        interface.check_flags(reshape=reshape)
        return tuple(self.forward_intermediates(images, indices=n, norm=norm,
                                                output_fmt="NCHW" if reshape else "NLC",
                                                intermediates_only=True))

    def attention_grid(self, weights: np.ndarray) -> np.ndarray:
        """One layer's weights -> (B, heads, gh, gw): where the class token looks."""
        return interface.readout_grid(weights, self.cfg.grid_size, self.num_prefix_tokens)

    def get_attention_grids(self, images: np.ndarray) -> list[np.ndarray]:
        """Per attention layer, (B, heads, gh, gw) on the patch grid, ready to draw."""
        return [self.attention_grid(w) for w in self.get_attention_maps(images)]


def fill_shared_keys(params: dict, groups, what: str = "params") -> dict:
    """Fill in the aliases of shared tensors: for each group of keys that name one tensor,
    every key gets the *same* array (the first one given), so a state_dict with its aliases
    (``model.state_dict()``) and one without (a de-duplicated checkpoint file) both work, and
    an in-place update of the tensor (training) reaches every name.  Aliases given with
    different values are a ``ValueError``."""
    params = dict(params)
    for group in groups:
        present = [k for k in group if k in params]
        if not present:
            continue  # the shape check reports the missing keys
        first = params[present[0]]
        for k in present[1:]:
            if params[k] is not first and (params[k].shape != first.shape
                                           or not np.array_equal(params[k], first)):
                raise ValueError(f"{what}: {k} and {present[0]} name one shared tensor but hold "
                                 f"different values")
        for k in group:
            params[k] = first
    return params
