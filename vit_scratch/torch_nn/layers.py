"""Elementary PyTorch layers of a transformer block: the MLP and stochastic depth; the
initialisation; and how a layer tells whether a learner built it by hand.

LayerNorm, Linear and GELU are PyTorch's own (``nn.LayerNorm(eps=1e-6)``, ``nn.Linear``,
``nn.GELU()`` -- the exact erf form, as in timm; the original JAX ViT used flax's tanh-approximate
default); their NumPy twins are in ``vit_scratch.numpy_nn.layers``.

**Built by hand, or by a model.**  A layer a learner builds on its own (``Mlp(12, 0)``,
``Attention(12, 5)``) checks its arguments, and its inputs at every call (a forward pre-hook,
:func:`check_inputs_by_hand`), with the messages of ``vit_scratch.validation``.  A model
builds its layers inside :func:`layers_from_config`: its config has been validated, so they skip
both, and their ``forward`` methods hold no checks at all (plain tensor code, traceable by
``torch.fx`` and ``torch.compile``, and compiled by TorchScript).

**Gradient checkpointing.**  A model's blocks recompute their activations in the backward pass
instead of keeping them when the model's ``set_grad_checkpointing()`` is on: each block class
runs its residual branches through :func:`recompute_in_backward` (``torch.utils.checkpoint``)
while its ``grad_checkpointing`` flag is set.  Same values and gradients, less memory, one more
forward pass per block.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager

import torch
import torch.utils.checkpoint
from torch import nn

from .. import validation
from ..specs.base import LAYER_NORM_EPS  # noqa: F401 (the token LayerNorms' eps, both rooms)

_FROM_CONFIG = contextvars.ContextVar("vit_scratch_layers_from_config", default=False)


@contextmanager
def layers_from_config():
    """Inside the ``with`` block, layers are built by a model from its validated config: they
    skip the checks of a layer built by hand."""
    token = _FROM_CONFIG.set(True)
    try:
        yield
    finally:
        _FROM_CONFIG.reset(token)


def built_by_hand() -> bool:
    """Whether the layer being built is a learner's own (outside :func:`layers_from_config`)."""
    return not _FROM_CONFIG.get()


def check_args_by_hand(**args) -> None:
    """``validation.check_layer_args(**args)`` for a layer built by hand; nothing for a model's."""
    if built_by_hand():
        validation.check_layer_args(**args)


def mlp_hidden(dim: int, ratio: float) -> int:
    """An MLP's hidden width, ``int(dim * ratio)`` (timm's rounding); checked to be at least one
    unit (``validation.hidden_width``) for a layer built by hand."""
    return validation.hidden_width(dim, ratio) if built_by_hand() else int(dim * ratio)


def _check_call(module: nn.Module, args: tuple, kwargs: dict) -> None:
    module.check_inputs(*args, **kwargs)


def check_inputs_by_hand(module: nn.Module) -> None:
    """A layer built by hand checks its inputs before every call (``module.check_inputs``, as a
    forward pre-hook); a model's layers do not (its images were checked where they entered)."""
    if built_by_hand():
        module.register_forward_pre_hook(_check_call, with_kwargs=True)


class Mlp(nn.Module):
    """fc1 -> GELU -> dropout -> fc2 -> dropout.   (..., C) -> (..., C)"""

    def __init__(self, in_features: int, hidden_features: int, out_features: int | None = None,
                 drop: float = 0.0):
        super().__init__()
        check_args_by_hand(in_features=in_features, hidden_features=hidden_features,
                           out_features=out_features, drop=drop)
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.drop1 = nn.Dropout(drop)
        self.fc2 = nn.Linear(hidden_features, out_features or in_features)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.drop1(self.act(self.fc1(x)))))


class DropPath(nn.Module):
    """Stochastic depth: in training, drop a whole residual branch per sample with probability
    ``p`` (and scale the kept ones by 1/(1-p)); identity in eval.  Has no parameters."""

    def __init__(self, p: float = 0.0):
        super().__init__()
        check_args_by_hand(drop_path=p)
        self.p = float(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        shape = [x.shape[0]] + [1] * (x.ndim - 1)  # one coin per sample
        return x * x.new_empty(shape).bernoulli_(keep).div_(keep)

    def extra_repr(self) -> str:
        return f"p={self.p}"


@torch.no_grad()
def trunc_normal_(tensor: torch.Tensor, std: float = 0.02, bound: float = 2.0) -> torch.Tensor:
    """Fill ``tensor`` with N(0, std²) samples truncated to ±bound·std, in place.

    Redraws the ~5% of samples that fall outside until none do -- the same distribution as
    ``nn.init.trunc_normal_(tensor, std=std, a=-bound*std, b=bound*std)``, many times faster
    (that one inverts the normal CDF for every element).

    The bound is in units of ``std`` (TensorFlow's ``truncated_normal`` convention), which
    narrows the spread to 0.88·std for bound 2.  timm's and PyTorch's ``trunc_normal_(t,
    std=.02)`` take their bounds ``a=-2, b=2`` in absolute units: at std 0.02 that is ±100σ, so
    they never cut (a plain N(0, 0.02²)).  Notebook 01, section 4, compares the two.
    A tensor on the ``meta`` device holds no values and is returned as it is.
    """
    if tensor.is_meta:
        return tensor
    tensor.normal_(0.0, std)
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.flatten()  # a copy if strided
    # the entries outside, in order, redrawn until none is: the draws of a mask over the whole
    # tensor at every round, at the cost of the entries still outside
    redraw = torch.nonzero(flat.abs() > bound * std).squeeze(1)
    while redraw.numel():
        values = flat.new_empty(redraw.numel()).normal_(0.0, std)
        flat[redraw] = values
        redraw = redraw[values.abs() > bound * std]
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


@torch.no_grad()
def init_weights_(module: nn.Module, std: float = 0.02) -> nn.Module:
    """The transformer recipe for every ``nn.Linear`` and ``nn.LayerNorm`` inside ``module``:
    weights N(0, std²) truncated at ±2 std (:func:`trunc_normal_`), zero biases, LayerNorms at
    the identity.  Other layers (convolutions) keep PyTorch's default.  Every family's
    ``reset_parameters`` starts here and then sets its own tokens and embeddings."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return module



def recompute_in_backward(function, *args):
    """``function(*args)``, keeping only ``args`` for the backward pass, which runs ``function``
    again to get what it needs (``torch.utils.checkpoint``, non-reentrant: the recomputation
    replays the same random numbers, so dropout and stochastic depth draw the same masks and the
    gradients are those of the plain call).  The blocks call this while their
    ``grad_checkpointing`` flag is on."""
    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False)


def fx_tracing() -> bool:
    """Whether ``torch.fx`` is tracing symbolically (a traced graph keeps no in-place update
    whose result it does not use, so the few in-place fast paths step aside)."""
    trace = torch.fx._symbolic_trace
    return (getattr(trace, "is_fx_symbolic_tracing", None) or trace.is_fx_tracing)()
