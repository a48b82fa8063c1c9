"""Helpers shared by the tests: a randomized timm oracle next to our model, and diffs."""
from __future__ import annotations

import numpy as np
import torch

import vit_scratch
from vit_scratch.models import lookup


def timm_names() -> list[str]:
    """Our registered names that timm also has (the ``*_digits`` configs are ours alone)."""
    import timm

    known = set(timm.list_models())
    return [n for n in vit_scratch.list_models() if n in known]


def make_pair(name: str, seed: int = 0, **kwargs):
    """timm's model with every parameter randomized, and ours loaded from its state_dict
    with strict=True.  Both in eval mode."""
    import timm

    oracle = timm.create_model(name, pretrained=False, **kwargs).eval()
    vit_scratch.randomize_weights_(oracle, seed=seed)
    ours = vit_scratch.create_model(name, **kwargs).eval()
    ours.load_state_dict(oracle.state_dict(), strict=True)
    return oracle, ours


def check_logits_match_timm(name: str, oracle, ours, x: torch.Tensor, param_shapes: dict, *,
                            min_scale: float, torch_tol: float, numpy_tol: float,
                            relative: bool = False, **numpy_kwargs) -> None:
    """The timm-parity checks every family runs on a ``make_pair``: the same keys in the same
    order, the spec's ``{key: shape}`` table, non-trivial logits (max |logit| > ``min_scale``),
    and our PyTorch and NumPy (float32) logits within the tolerances -- absolute, or relative to
    the largest logit with ``relative=True``.  ``numpy_kwargs`` go to ``create_numpy_model``."""
    assert list(ours.state_dict()) == list(oracle.state_dict())  # same keys, same order
    assert {k: tuple(v.shape) for k, v in ours.state_dict().items()} == param_shapes
    with torch.no_grad():
        expected = oracle(x)
        got = ours(x)
    scale = expected.abs().max().item()
    assert scale > min_scale  # random weights give non-trivial logits
    norm = scale if relative else 1.0
    assert max_abs_diff(got, expected) / norm <= torch_tol
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(oracle.state_dict()), **numpy_kwargs)
    np_logits = np_model(x.numpy())
    assert np_logits.dtype == np.float32
    assert max_abs_diff(np_logits, expected) / norm <= numpy_tol


def max_abs_diff(a, b) -> float:
    """Largest absolute difference; lists/tuples (CoaT's per-scale features) are compared
    element by element and must have the same length."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        assert isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)), (type(a), type(b))
        assert len(a) == len(b) > 0, (len(a), len(b))
        return max(max_abs_diff(x, y) for x, y in zip(a, b))
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    b = b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max())


# --- small models of every family, for tests that run many examples ----------------------------

#: Per family (its spec module's name): config overrides (or cfg -> overrides) that make a model
#: small and fast while keeping the family's structure.  A family missing here falls back to
#: ``img_size=64``.
SMALL_OVERRIDES = {
    "vit": dict(depth=1, img_size=32),
    "cait": dict(depth=1, depth_token_only=1, img_size=32),
    # one block per scale; CoaT (not Lite) keeps one parallel block
    "coat": lambda cfg: dict(serial_depths=(1, 1, 1, 1), img_size=64,
                             parallel_depth=min(cfg.parallel_depth, 1)),
}


def family_of(name: str) -> str:
    """The short name of ``name``'s spec module: ``"vit"``, ``"cait"``, ``"coat"``."""
    return lookup(name)[0].spec.__name__.rsplit(".", 1)[-1]


def small_kwargs(name: str) -> dict:
    """Overrides that build a small, fast model of ``name`` (a smaller image and fewer blocks);
    the digits configs (8×8, 24×24) keep their size, which their patch size divides."""
    cfg = vit_scratch.get_config(name)
    small = SMALL_OVERRIDES.get(family_of(name), {})
    kwargs = dict(small(cfg) if callable(small) else small)
    if max(cfg.img_size) <= 32:        # the *_digits configs are small already: their own size
        kwargs.pop("img_size", None)
    else:
        kwargs.setdefault("img_size", 64)
    return kwargs


def one_name_per_family() -> list[str]:
    """The first registered name of every family (for tests too slow to run on every name)."""
    seen = {}
    for name in vit_scratch.list_models():
        seen.setdefault(family_of(name), name)
    return sorted(seen.values())


def small_pair(name: str, seed: int = 0):
    """A small PyTorch model of ``name`` with random weights (eval mode) and the NumPy model with
    the same weights."""
    model = vit_scratch.create_model(name, **small_kwargs(name)).eval()
    vit_scratch.randomize_weights_(model, seed=seed)
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(model.state_dict()), **small_kwargs(name))
    return model, np_model
