"""Helpers shared by the tests: a randomized timm oracle next to our model, and diffs."""
from __future__ import annotations

import numpy as np
import torch

import vit_scratch


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
