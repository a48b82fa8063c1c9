"""Helpers shared by the tests: a randomized timm oracle next to our model, small and float64
models of every family, and diffs."""
from __future__ import annotations

import re
from functools import partial

import numpy as np
import torch
from torch import nn

import vit_scratch
from vit_scratch.models import lookup
from vit_scratch.specs.base import num_params


def timm_names() -> list[str]:
    """Our registered names that timm also has (the ``*_digits`` configs are ours alone)."""
    import timm

    known = set(timm.list_models())
    return [n for n in vit_scratch.list_models() if n in known]


def timm_twin(name: str, **kwargs):
    """timm's model of ``name`` (random weights).  For our own names (the ``*_digits`` configs)
    timm has no entry: its class of the same family -- the same class name as ours -- is built
    through the family's first timm name with every field of our config that the class takes."""
    import importlib
    import inspect

    import timm

    if name in timm.list_models():
        return timm.create_model(name, pretrained=False, **kwargs)
    family, _ = lookup(name)
    cfg = vit_scratch.get_config(name, **kwargs)
    base = next(n for n in family.spec.MODELS if n in set(timm.list_models()))
    module = importlib.import_module(timm.models.model_entrypoint(base).__module__)
    takes = inspect.signature(getattr(module, family.numpy_class().__name__).__init__).parameters
    # the config's fields that timm's class takes (CaiT's init_values: the depth rule's value);
    # not cfg.timm_kwargs(), which refuses CoaT's first patch of 1 (the grids are set below)
    fields = {f: getattr(cfg, f) for f in takes if hasattr(cfg, f)}
    if "init_values" in fields and fields["init_values"] is None and hasattr(
            cfg, "layer_scale_init"):
        fields["init_values"] = cfg.layer_scale_init
    model = timm.create_model(base, pretrained=False, **fields)
    if hasattr(model, "patch_embed4"):  # timm's CoaT sizes scales 2-4 for patch 4: give it ours
        for s, (h, w) in enumerate(cfg.grid_sizes(), start=1):
            embed = getattr(model, f"patch_embed{s}")
            embed.grid_size, embed.num_patches = (h, w), h * w
            embed.img_size = (h * embed.patch_size[0], w * embed.patch_size[1])
    return model


def make_pair(name: str, seed: int = 0, **kwargs):
    """timm's model with every parameter randomized, and ours loaded from its state_dict
    with strict=True.  Both in eval mode.  Every registered name has a timm twin
    (:func:`timm_twin`)."""
    oracle = timm_twin(name, **kwargs).eval()
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
    the digits configs (8×8, 24×24) keep their size, which their patch size divides.  A smaller
    image is a whole number of patches (28 for 14×14 patches)."""
    cfg = vit_scratch.get_config(name)
    small = SMALL_OVERRIDES.get(family_of(name), {})
    kwargs = dict(small(cfg) if callable(small) else small)
    if max(cfg.img_size) <= 32:        # the *_digits configs are small already: their own size
        kwargs.pop("img_size", None)
    else:
        kwargs.setdefault("img_size", 64)
        patch = getattr(cfg, "patch_size", 1)
        kwargs["img_size"] = max(patch, kwargs["img_size"] // patch * patch)
    return kwargs


def _smallest(key) -> list[str]:
    """The registered name with the fewest parameters of each group of names that share
    ``key(name)``, sorted."""
    groups: dict = {}
    for name in vit_scratch.list_models():
        _, spec = lookup(name)
        groups.setdefault(key(name), []).append((num_params(spec.param_shapes(spec.default)), name))
    return sorted(min(group)[1] for group in groups.values())


def one_name_per_family() -> list[str]:
    """The smallest registered name of every family (for tests too slow to run on every name):
    a new family is covered the moment it registers a name."""
    return _smallest(family_of)


def layout(name: str) -> frozenset:
    """The keys of ``name``'s state_dict without their block indices: names with one layout are
    one architecture at different sizes; a variant of a family (DeiT's distilled models,
    DeiT III) has a layout of its own."""
    _, spec = lookup(name)
    return frozenset(re.sub(r"\.\d+(?=\.)", ".#", k) for k in spec.param_shapes(spec.default))


def one_name_per_variant() -> list[str]:
    """The smallest registered name of every variant of every family (every state_dict layout:
    ViT, DeiT distilled, DeiT III, CaiT, CoaT-Lite, CoaT): a new variant is covered the moment
    it registers a name."""
    return _smallest(lambda name: (family_of(name), layout(name)))


def small_pair(name: str, seed: int = 0):
    """A small PyTorch model of ``name`` with random weights (eval mode) and the NumPy model with
    the same weights."""
    model = vit_scratch.create_model(name, **small_kwargs(name)).eval()
    vit_scratch.randomize_weights_(model, seed=seed)
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(model.state_dict()), **small_kwargs(name))
    return model, np_model


# --- float64 modules and models, for the NumPy-vs-PyTorch and per-family tests ------------------

F64 = 1e-12  # NumPy vs PyTorch in float64: "near machine precision" for sums of a few hundred terms
TORCH_TOL = 1e-5  # ours vs timm, float32 logits
NUMPY_TOL = 1e-4  # NumPy (float32) vs timm
LN = partial(nn.LayerNorm, eps=1e-6)  # timm's norm_layer for the blocks built on their own

#: A small CaiT with every part: 3 self-attention and 2 class-attention blocks, 4 heads.
CAIT_SMALL = dict(img_size=32, patch_size=8, embed_dim=24, depth=3, depth_token_only=2,
                  num_heads=4, num_classes=5, init_values=0.1)
#: A small CoaT with every feature: 4 scales, 2 parallel blocks, the default 8-head CRPE split.
COAT_SMALL = dict(img_size=64, embed_dims=(16, 32, 32, 32), serial_depths=(1, 2, 1, 1),
                  parallel_depth=2, mlp_ratios=(2, 3, 3, 3), num_classes=7)


def t64(a) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def np_params(module) -> dict:
    """A module's state_dict as arrays, in the module's own dtype."""
    return {k: v.detach().numpy() for k, v in module.state_dict().items()}


def params64(module) -> dict:
    return vit_scratch.state_dict_to_numpy(module.state_dict(), dtype=np.float64)


def random64(module, seed: int = 0, std: float = 0.2):
    """A float64 module in eval mode with every parameter random (LayerScale included)."""
    return vit_scratch.randomize_weights_(module.double().eval(), seed=seed, std=std)


def random_tokens(rng, *shape) -> np.ndarray:
    return rng.standard_normal(shape)


def float64_model(name: str = "coat_digits", seed: int = 0, **kwargs):
    """The PyTorch model ``name`` in float64, eval mode, every parameter random."""
    model = vit_scratch.create_model(name, **kwargs).double().eval()
    return vit_scratch.randomize_weights_(model, seed=seed, std=0.2)


def numpy_twin(model, name: str = "coat_digits", **kwargs):
    """The NumPy model ``name`` with ``model``'s weights (in their dtype)."""
    return vit_scratch.create_numpy_model(name, np_params(model), **kwargs)


def conv_attention64(dim: int = 24, heads: int = 8, window=None, seed: int = 2):
    """CoaT's conv-attention module on its own, float64, random weights."""
    from vit_scratch.torch_nn.factorized_attention import FactorAttnConvRelPosEnc

    att = FactorAttnConvRelPosEnc(dim, heads, qkv_bias=True, crpe_window=window).double().eval()
    return vit_scratch.randomize_weights_(att, seed=seed, std=0.3)


def class_attention_numpy(u, p, heads, in_keys, return_attention=False):
    """NumPy class attention with a ``ClassAttention``'s parameters ``p``."""
    from vit_scratch.numpy_nn import class_attention as np_ca

    return np_ca.class_attention(u, p["q.weight"], p["q.bias"], p["k.weight"], p["k.bias"],
                                 p["v.weight"], p["v.bias"], p["proj.weight"], p["proj.bias"],
                                 heads, class_token_in_keys=in_keys,
                                 return_attention=return_attention)
