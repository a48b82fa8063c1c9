"""The interface every NumPy model of the library answers, written once.

A family's NumPy model subclasses :class:`ModelBase`, sets ``param_shapes`` (its spec's
``{key: shape}`` table; ``shared_keys`` too if some keys name one tensor, as in CoaT) and provides ``forward_features``, ``forward_intermediates`` and
``get_attention_maps``.  Attribute and method names are those of the PyTorch room
(``vit_scratch.interface``); the NumPy room is inference only, so it has no classifier reset
and no weight-decay list.
"""
from __future__ import annotations

import numpy as np

from .. import checks, interface
from .layers import linear


class ModelBase:
    """A forward pass in NumPy, driven by ``params``: ``{state_dict key: array}``.

    Everything is computed in the params' floating dtype (float32 for a checkpoint, float64 for
    the precision tests)."""

    param_shapes = None  # cfg -> {key: shape}: the family spec's table
    shared_keys = None  # cfg -> groups of keys that are one tensor (None: every key is its own)
    num_prefix_tokens = 1

    def __init__(self, cfg, params: dict, name: str | None = None):
        name = name or type(self).__name__
        params = {k: np.asarray(v) for k, v in params.items()}
        if type(self).shared_keys is not None:
            params = fill_shared_keys(params, type(self).shared_keys(cfg), f"params for {name}")
        checks.check_params(params, type(self).param_shapes(cfg), f"params for {name}")
        self.cfg = cfg
        self.name = name
        self.params = params
        self.dtype = np.result_type(*params.values(), np.float32)
        self.num_classes = cfg.num_classes
        self.pretrained_cfg: dict = {}  # set by vit_scratch.create_numpy_model

    def pool(self, features: np.ndarray) -> np.ndarray:
        """forward_features' output -> (B, num_features): the class token."""
        return features[:, 0]

    def forward_head(self, features: np.ndarray, pre_logits: bool = False) -> np.ndarray:
        """Pool, then classify: (B, num_classes), or (B, num_features) with ``pre_logits`` or
        without a head."""
        x = self.pool(features)
        if pre_logits or not self.num_classes:
            return x
        return linear(x, self.params["head.weight"], self.params["head.bias"])

    def __call__(self, images: np.ndarray) -> np.ndarray:
        return self.forward_head(self.forward_features(images))

    forward = __call__

    def get_intermediate_layers(self, images, n=1, reshape: bool = False, norm: bool = False):
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
    every key missing from ``params`` gets the array of a key that is there.  So a state_dict
    with its aliases (``model.state_dict()``) and one without (a de-duplicated checkpoint file)
    both work.  Aliases given with different values are a ``ValueError``."""
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
            params.setdefault(k, first)
    return params
