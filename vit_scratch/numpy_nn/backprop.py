"""Backpropagation's shared pieces: the :class:`Cache` a forward pass keeps for its backward
pass, and the bookkeeping of whole-model gradients.

The NumPy room learns with one pattern, CS231n's (Stanford CS231n, "Convolutional Neural
Networks for Visual Recognition", assignment 2, ``layers.py``; https://cs231n.github.io/)::

    out, cache = f_forward(x, weight, ...)     # the output, and what the backward needs
    dx, dweight, ... = f_backward(dout, cache) # dout = ∂L/∂out  ->  ∂L/∂x, ∂L/∂weight, ...

* ``f_forward`` computes ``out`` with the plain forward functions: a leaf (``linear``,
  ``layer_norm``, ``gelu``, ``softmax``, ...) calls ``f`` itself and keeps its inputs; a composite
  (an attention, a block, a model) runs the same steps as ``f`` through its parts' ``_forward``
  functions and keeps their caches.  The tests check that every ``f_forward`` returns ``f``'s
  output, so the two can never drift apart.
* ``f_backward`` returns the gradient of every array argument of ``f``, in ``f``'s argument
  order (``None`` for an absent bias); the gradient of a dict of parameters is a dict with the
  same keys.  Its docstring states the formula it implements.
* A cache knows which function made it and the shape and dtype of that function's output, so
  ``f_backward`` refuses a cache from another function, and a ``dout`` whose shape or dtype is
  not the output's, with an error that names both.

No autodiff tape: each backward is written by hand, next to its forward, in the module where the
forward lives (``layers.linear_backward`` beside ``layers.linear``).
"""
from __future__ import annotations

import numpy as np


def _shapes(out):
    """An output's shape, or the tuple of shapes of a list of outputs (CoaT's scales)."""
    if isinstance(out, (list, tuple)):
        return tuple(np.shape(o) for o in out)
    return np.shape(out)


def _dtypes(out):
    if isinstance(out, (list, tuple)):
        return tuple(np.asarray(o).dtype for o in out)
    return np.asarray(out).dtype


class Cache:
    """The record of one forward call: ``op`` (the forward's name), the output's shape and
    dtype, and the arrays and settings the backward needs, as attributes.

    ``Cache("linear", out, x=x, weight=weight)`` -> ``cache.x``, ``cache.weight``."""

    def __init__(self, op: str, out, /, **saved):
        self.op = op
        self.out_shape = _shapes(out)
        self.out_dtype = _dtypes(out)
        self.__dict__.update(saved)

    def __repr__(self) -> str:
        return f"Cache({self.op}, out shape {self.out_shape}, {self.out_dtype})"


def check_backward(op: str, dout, cache):
    """``dout`` as an array once it fits ``cache``: the cache must come from ``{op}_forward`` and
    ``dout`` must have that forward output's shape and dtype; otherwise a ``ValueError`` naming
    both.  A list of outputs (CoaT's scales) takes a list of gradients, one per output."""
    if not isinstance(cache, Cache):
        raise ValueError(f"{op}_backward: cache must be the Cache that {op}_forward returned, "
                         f"got {type(cache).__name__}")
    if cache.op != op:
        raise ValueError(f"{op}_backward was given the cache of {cache.op}_forward (its output "
                         f"had shape {cache.out_shape}); pass the cache {op}_forward returned")
    if type(dout).__module__.startswith("torch"):
        raise ValueError(f"{op}_backward: dout is a {type(dout).__name__}; the NumPy room takes "
                         f"NumPy arrays")
    shapes = cache.out_shape
    if isinstance(shapes, tuple) and shapes and isinstance(shapes[0], tuple):  # a list of outputs
        if not isinstance(dout, (list, tuple)) or len(dout) != len(cache.out_shape):
            raise ValueError(f"{op}_backward: dout must be a list of {len(cache.out_shape)} "
                             f"arrays of shapes {cache.out_shape}, got {_describe(dout)}")
        return [_check_one(op, d, s, t) for d, s, t in zip(dout, cache.out_shape, cache.out_dtype)]
    return _check_one(op, dout, cache.out_shape, cache.out_dtype)


def _check_one(op: str, dout, shape, dtype) -> np.ndarray:
    if shape == () and isinstance(dout, (int, float, np.generic)) and not isinstance(dout, bool):
        return np.asarray(dout, dtype=dtype)  # the gradient of a scalar loss: a plain number
    if not isinstance(dout, np.ndarray):
        raise ValueError(f"{op}_backward: dout must be an array of shape {shape} ({dtype}), "
                         f"got {_describe(dout)}")
    if dout.shape != shape or dout.dtype != dtype:
        raise ValueError(f"{op}_backward: dout has shape {dout.shape} and dtype {dout.dtype}, "
                         f"but {op}_forward's output had shape {shape} and dtype {dtype}; "
                         f"dout must be the gradient of that output (and the cache from the same "
                         f"call)")
    return dout


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} ({value.dtype})"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} items"
    return type(value).__name__


# --- whole models -------------------------------------------------------------------------------
# A model's ``forward_with_cache(images, rng=None) -> (logits, cache)`` and
# ``backward(dlogits, cache) -> (dimages, {key: gradient})`` use these.


def alias_keys(model) -> dict[str, str]:
    """``{alias: canonical key}`` for the keys that name a shared tensor (CoaT's shared CPE,
    CRPE and parallel MLP; the first key of each of the spec's ``shared_keys`` groups is the
    canonical one, the name PyTorch's ``named_parameters()`` gives); empty for other models."""
    groups = type(model).shared_keys(model.cfg) if type(model).shared_keys is not None else []
    return {alias: group[0] for group in groups for alias in group[1:]}


def trainable_params(model) -> dict[str, np.ndarray]:
    """The model's parameters, each tensor once, under its canonical key (aliases left out),
    in state_dict order: what an optimiser updates, in place."""
    aliases = alias_keys(model)
    return {k: v for k, v in model.params.items() if k not in aliases}


def model_gradients(model, grads: dict, unused=()) -> dict[str, np.ndarray]:
    """Per-use gradients ``{state_dict key: gradient}`` -> one gradient per tensor: a shared
    tensor's gradient is the sum over all its uses (every alias), given under its canonical
    key; the aliases do not appear.  In :func:`trainable_params`' order.

    ``unused``: the keys the model's config leaves out of every forward pass (a CoaT scale
    without serial blocks); they get no gradient, as in PyTorch (``grad`` None), and AdamW
    skips them.  Any other parameter without a gradient is an error: it would never learn."""
    aliases = alias_keys(model)
    out: dict[str, np.ndarray] = {}
    for key, g in grads.items():
        key = aliases.get(key, key)
        out[key] = out[key] + g if key in out else g
    order = [k for k in trainable_params(model) if k not in unused]
    missing = [k for k in order if k not in out]
    if missing:
        raise RuntimeError(f"{model.name}.backward produced no gradient for {missing}")
    return {k: out[k] for k in order}


def check_trainable(model, rng) -> None:
    """The NumPy room trains with stochastic depth but without dropout: in training mode
    (``rng`` given) every dropout rate of the config must be 0, and the model needs a head."""
    if not model.num_classes:
        raise ValueError(f"{model.name} has no classification head (num_classes=0): there are "
                         f"no logits to train")
    if rng is None:
        return
    if not callable(getattr(rng, "random", None)):
        raise ValueError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)) "
                         f"or None, got {type(rng).__name__}")
    rates = {f: getattr(model.cfg, f) for f in ("drop_rate", "attn_drop_rate", "proj_drop_rate")
             if getattr(model.cfg, f, 0.0)}
    if rates:
        raise ValueError(f"the NumPy room trains without dropout, but {model.name} has "
                         + ", ".join(f"{k}={v}" for k, v in rates.items())
                         + "; set them to 0 (stochastic depth, drop_path_rate, is supported)")
