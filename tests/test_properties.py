"""Property-based tests (hypothesis) of the validation at the edges, over every registered name
and both rooms.

For random bad configs, images, NumPy params and checkpoint files, each test asserts one of two
outcomes, and nothing else:

* a ``ValueError`` (``CheckpointError`` for files) whose message names the offending parameter
  (the field, ``images``, the parameter's key, the file), or
* a result equal to the correct one (the same config, the same logits, the same weights).

A third outcome -- a silently different result, or an error from deep inside NumPy, PyTorch or
einops -- fails the test.  Models are small (one block, 32×32 images; ``helpers.small_kwargs``)
and examples are bounded and derandomized, so the suite is reproducible and fits CI.  A family
that registers new names is covered without editing this file.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import pickle
import types
import typing

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vit_scratch
from helpers import max_abs_diff, small_kwargs, small_pair
from vit_scratch import CheckpointError
from vit_scratch.numpy_nn import attention as np_attn
from vit_scratch.models import lookup
from vit_scratch.numpy_nn import layers as np_layers
from vit_scratch.torch_nn import attention as t_attn
from vit_scratch.weights import UnsafeCheckpointError

NAMES = vit_scratch.list_models()


def bounded(n: int):
    """``n`` examples, the same ones on every run (derandomized), no per-example deadline."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@functools.lru_cache(maxsize=None)
def pair(name: str):
    """A small PyTorch model of ``name`` (random weights, eval) and its NumPy twin."""
    return small_pair(name, seed=0)


@functools.lru_cache(maxsize=None)
def aliases(name: str) -> frozenset:
    """Keys that name a tensor shared with other keys (CoaT): dropping one loses nothing, the
    model's structure fills it back in."""
    family, spec = lookup(name)
    shared_keys = family.numpy_class().shared_keys  # the spec's groups, or None
    if shared_keys is None:
        return frozenset()
    groups = shared_keys(spec.config(**small_kwargs(name)))
    return frozenset(k for g in groups if len(g) > 1 for k in g)


def mentions(message: str, value) -> bool:
    """The message shows the value (or, for a sequence, one of its items)."""
    shown = {repr(value), str(value)}
    if isinstance(value, (tuple, list)):
        shown |= {repr(v) for v in value} | {repr(tuple(value))}
    return any(s in message for s in shown)


# --- configs -------------------------------------------------------------------------------------

BAD_SCALARS = {
    bool: [st.sampled_from(["False", "True", "0", "no", ""]), st.sampled_from([0, 1, 2]),
           st.just(None), st.sampled_from([0.0, 1.0])],
    int: [st.sampled_from(["4", "64", "", "abc"]), st.booleans(), st.just(None),
          st.floats(allow_nan=True, allow_infinity=True).filter(lambda v: v != 0),
          st.integers(-10_000, -1), st.sampled_from([2.0, 16.0])],
    float: [st.sampled_from(["0.1", "4", "nan"]), st.booleans(), st.just(None),
            st.sampled_from([math.nan, math.inf, -math.inf]),
            st.floats(-1e6, -1e-6)],
    str: [st.integers(-3, 3), st.booleans(), st.just(None), st.just(b"bytes")],
}


def bad_values(tp) -> st.SearchStrategy:
    """Values that no field annotated ``tp`` accepts (with ranges shared by every family:
    sizes, rates and ratios are never negative)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in BAD_SCALARS:
        return st.one_of(*BAD_SCALARS[tp])
    if origin in (typing.Union, types.UnionType):
        if set(args) == {int, tuple[int, int]}:  # img_size
            return st.one_of(
                st.sampled_from(["224", "", None, 2.5, True, (224, 224, 3), (32,), (32, "32"),
                                 (32.0, 32.0), [32, None]]),
                st.integers(-512, 0), st.tuples(st.integers(-64, 0), st.integers(1, 64)))
        arms = [a for a in args if a is not type(None)]
        return st.one_of(*[bad_values(a) for a in arms]).filter(
            lambda v: not (v is None and type(None) in args))
    if origin is tuple:
        return st.one_of(st.sampled_from(["(1, 2)", None, 3, (1, "2"), (1.5,), ((1,),)]),
                         st.lists(st.integers(-10, -1), min_size=1, max_size=4).map(tuple))
    return st.nothing()


def config_fields(name: str):
    cfg_cls = type(vit_scratch.get_config(name))
    hints = typing.get_type_hints(cfg_cls)
    return [(f.name, hints[f.name]) for f in dataclasses.fields(cfg_cls)
            if not bad_values(hints[f.name]).is_empty]


@st.composite
def bad_config(draw):
    name = draw(st.sampled_from(NAMES))
    field, tp = draw(st.sampled_from(config_fields(name)))
    return name, field, draw(bad_values(tp))


@bounded(200)
@given(bad_config())
def test_bad_config_values_are_named_in_both_rooms(case):
    name, field, value = case
    for build in (lambda: vit_scratch.get_config(name, **{field: value}),
                  lambda: vit_scratch.create_numpy_model(name, {}, **{field: value}),
                  lambda: vit_scratch.create_model(name, **{field: value})):
        with pytest.raises(ValueError) as info:
            build()
        message = str(info.value)
        assert field in message, message
        assert mentions(message, value) or "divisible" in message, message


def equivalent(value) -> st.SearchStrategy:
    """Other spellings of a valid value that must mean the same (NumPy scalars, lists)."""
    if isinstance(value, bool):
        return st.just(np.bool_(value))
    if isinstance(value, int):
        return st.sampled_from([np.int64(value), np.int32(value), np.uint16(value)])
    if isinstance(value, float):
        return st.sampled_from([np.float64(value), np.float32(value)] if
                               float(np.float32(value)) == value else [np.float64(value)])
    if isinstance(value, tuple):
        return st.just(list(value))
    return st.nothing()


@bounded(60)
@given(st.data())
def test_equivalent_config_values_give_the_same_config(data):
    name = data.draw(st.sampled_from(NAMES))
    default = vit_scratch.get_config(name)
    field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(default)]))
    value = getattr(default, field)
    other = data.draw(equivalent(value))
    cfg = vit_scratch.get_config(name, **{field: other})
    assert cfg == default and type(getattr(cfg, field)) is type(value)


# --- images --------------------------------------------------------------------------------------

FLOATS = ["float16", "bfloat16", "float32", "float64"]
NON_FLOATS = ["uint8", "int8", "int32", "int64", "bool", "complex64"]
ENTRY_POINTS = ["__call__", "forward_features", "forward_intermediates", "get_attention_maps"]


def _cast(x: np.ndarray, dtype: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # NaN/1e30 into ints or float16: garbage
        return x.astype(dtype)  # by design (the dtype check refuses them first)


def _to_torch(x: np.ndarray, dtype: str) -> torch.Tensor:
    x = _cast(x, "float32" if dtype == "bfloat16" else dtype)
    return torch.from_numpy(np.ascontiguousarray(x)).to(getattr(torch, dtype))


def _outputs_equal(a, b) -> bool:
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_outputs_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return np.array_equal(a, b)


@st.composite
def image_case(draw):
    name = draw(st.sampled_from(NAMES))
    room = draw(st.sampled_from(["torch", "numpy"]))
    dtype = draw(st.sampled_from(FLOATS + NON_FLOATS if room == "torch" else
                                 [d for d in FLOATS + NON_FLOATS if d != "bfloat16"]))
    shape_change = draw(st.sampled_from(["none", "none", "none", "no batch", "extra dim",
                                         "channels", "height", "width"]))
    values = draw(st.sampled_from(["normal", "normal", "normal", "nan", "inf", "huge", "large"]))
    entry = draw(st.sampled_from(ENTRY_POINTS))
    seed = draw(st.integers(0, 2**16))
    return name, room, dtype, shape_change, values, entry, seed


@bounded(200)
@given(image_case())
def test_images_give_a_named_error_or_the_cast_result(case):
    name, room, dtype, shape_change, values, entry, seed = case
    model, np_model = pair(name)
    c, h, w = model.pretrained_cfg["input_size"]
    patch = model.cfg.patch_size if hasattr(model.cfg, "patch_size") else 8
    shape = {"none": (2, c, h, w), "no batch": (c, h, w), "extra dim": (1, 2, c, h, w),
             "channels": (2, c + 1, h, w), "height": (2, c, h + patch, w),
             "width": (2, c, h, w + 1)}[shape_change]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if values != "normal":
        flat = x.reshape(-1)
        where = rng.integers(0, flat.size)
        flat[where] = {"nan": math.nan, "inf": -math.inf, "large": 9e3,
                       "huge": 10.0 ** rng.uniform(4.5, 30)}[values]
    if dtype in ("uint8", "bool"):
        x = np.abs(x) * (200 if dtype == "uint8" else 1)
    # 10^4.5 and up is beyond validation.MAX_ABS_IMAGE (in float16 it may even become inf)
    bad = dtype in NON_FLOATS or shape_change != "none" or values in ("nan", "inf", "huge")
    if room == "torch":
        run, xin = getattr(model, entry), _to_torch(x, dtype)
    else:
        run, xin = getattr(np_model, entry), _cast(x, dtype)
    if bad:
        with pytest.raises(ValueError) as info, torch.no_grad():
            run(xin)
        message = str(info.value)
        assert "image" in message, message
        if dtype in NON_FLOATS:
            assert f"dtype {dtype}" in message, message
        return
    with torch.no_grad():
        got = run(xin)
        expected = run(xin.float() if room == "torch" else xin.astype(np.float32))
    assert _outputs_equal(got, expected)


# --- NumPy params --------------------------------------------------------------------------------

PARAM_MUTATIONS = ["drop", "extra", "unsqueeze", "int32", "int64", "bool", "complex64", "float16",
                   "float64 one", "float64 all", "None", "list", "tensor", "params None",
                   "params list"]


@bounded(120)
@given(st.sampled_from(NAMES), st.sampled_from(PARAM_MUTATIONS), st.integers(0, 10_000))
def test_numpy_params_give_a_named_error_or_the_right_model(name, mutation, pick):
    model, np_model = pair(name)
    params = dict(np_model.params)
    key = sorted(params)[pick % len(params)]
    v = params[key]
    named = key
    if mutation == "drop":
        del params[key]
    elif mutation == "extra":
        named = key + ".extra"
        params[named] = v
    elif mutation == "unsqueeze":
        params[key] = v[None]
    elif mutation in ("int32", "int64", "bool", "complex64", "float16"):
        params[key] = v.astype(mutation)
    elif mutation == "float64 one":
        params[key] = v.astype(np.float64)
    elif mutation == "float64 all":
        params = {k: a.astype(np.float64) for k, a in params.items()}
    elif mutation == "None":
        params[key] = None
    elif mutation == "list":
        params[key] = v.tolist()  # NumPy reads it back as float64: one float64 array
    elif mutation == "tensor":
        params[key] = torch.from_numpy(v)
    elif mutation == "params None":
        params, named = None, "params"
    elif mutation == "params list":
        params, named = list(params.values()), "params"
    kwargs = small_kwargs(name)
    if mutation == "drop" and key in aliases(name):  # filled in from its shared tensor
        assert vit_scratch.create_numpy_model(name, params, **kwargs).params.keys() == \
            np_model.params.keys()
        return
    if mutation == "float64 all":  # the one valid case: a float64 model, the same logits
        m64 = vit_scratch.create_numpy_model(name, params, **kwargs)
        c, h, w = model.pretrained_cfg["input_size"]
        x = np.random.default_rng(pick).standard_normal((2, c, h, w)).astype(np.float32)
        assert m64.dtype == np.float64 and m64(x).dtype == np.float64
        assert max_abs_diff(m64(x), np_model(x)) < 1e-4
        return
    try:
        built = vit_scratch.create_numpy_model(name, params, **kwargs)
    except ValueError as err:
        assert named in str(err), str(err)
        return
    # the one other valid case: an alias of a shared tensor given with the tensor's own values
    # (as a list, in another dtype): every alias is the shared array itself, so the same model
    assert named in aliases(name), (mutation, named)
    c, h, w = model.pretrained_cfg["input_size"]
    x = np.random.default_rng(pick).standard_normal((2, c, h, w)).astype(np.float32)
    assert max_abs_diff(built(x), np_model(x)) == 0.0


# --- checkpoint files ----------------------------------------------------------------------------

FORMATS = ["safetensors", "torch", "torch legacy", "npz"]
SUFFIXES = [".safetensors", ".pth", ".pt", ".bin", ".ckpt", ".npz", ""]
WRAPPERS = ["none", "model", "state_dict", "model+extras"]
PREFIXES = ["", "module.", "_orig_mod.", "module._orig_mod."]
CONTENT = ["intact", "intact", "float16", "bfloat16", "drop", "extra", "rename", "unsqueeze",
           "int", "bool"]
DAMAGE = ["none", "none", "none", "empty", "truncate", "junk head"]


def _write(path, sd: dict, fmt: str, wrapper: str, prefix: str) -> None:
    sd = {prefix + k: v for k, v in sd.items()}
    if fmt == "safetensors" or fmt == "npz":
        wrapper = "none"  # flat formats
    obj = {"none": sd, "model": {"model": sd}, "state_dict": {"state_dict": sd},
           "model+extras": {"model": sd, "epoch": 3, "lr": 1e-3}}[wrapper]
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in obj.items()}, str(path))
    elif fmt == "npz":
        with open(path, "wb") as f:  # np.savez would add ".npz" to a path without it
            np.savez(f, **{k: v.float().numpy() if v.dtype == torch.bfloat16 else v.numpy()
                           for k, v in obj.items()})
    else:
        torch.save(obj, path, _use_new_zipfile_serialization=(fmt == "torch"))


@st.composite
def checkpoint_case(draw):
    return dict(name=draw(st.sampled_from(NAMES)), fmt=draw(st.sampled_from(FORMATS)),
                suffix=draw(st.sampled_from(SUFFIXES)), wrapper=draw(st.sampled_from(WRAPPERS)),
                prefix=draw(st.sampled_from(PREFIXES)), content=draw(st.sampled_from(CONTENT)),
                damage=draw(st.sampled_from(DAMAGE)), pick=draw(st.integers(0, 10_000)),
                cut=draw(st.floats(0.0, 0.99)))


@functools.lru_cache(maxsize=None)
def load_target(name: str):
    return vit_scratch.create_model(name, **small_kwargs(name))


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


@bounded(100)
@given(case=checkpoint_case())
def test_checkpoint_files_give_a_named_error_or_the_same_weights(ckpt_dir, case):
    model, _ = pair(case["name"])
    source = {k: v.detach().clone() for k, v in model.state_dict().items()}
    sd = dict(source)
    key = sorted(sd)[case["pick"] % len(sd)]
    content, named = case["content"], key
    if content == "float16" or content == "bfloat16":
        sd = {k: v.to(getattr(torch, content)) for k, v in sd.items()}
    elif content == "drop":
        del sd[key]
    elif content == "extra":
        named = "extra." + key
        sd[named] = sd[key].clone()
    elif content == "rename":  # the new name is unexpected (and the old one missing)
        named = key.replace(".", "_", 1) + "_x"
        sd[named] = sd.pop(key)
    elif content == "unsqueeze":
        sd[key] = sd[key][None]
    elif content == "int":
        sd[key] = (sd[key] * 100).round().to(torch.int32)
    elif content == "bool":
        sd[key] = sd[key] > 0
    path = ckpt_dir / f"ckpt{case['suffix']}"
    _write(path, sd, case["fmt"], case["wrapper"], case["prefix"])
    data = path.read_bytes()
    if case["damage"] == "empty":
        path.write_bytes(b"")
    elif case["damage"] == "truncate":
        path.write_bytes(data[:int(case["cut"] * len(data))])
    elif case["damage"] == "junk head":
        rng = np.random.default_rng(case["pick"])
        path.write_bytes(rng.integers(0, 256, 16, dtype=np.uint8).tobytes() + data[16:])

    target = load_target(case["name"])  # a strict load sets every weight: reuse is safe
    if case["damage"] != "none":
        with pytest.raises(CheckpointError) as info:
            vit_scratch.load_checkpoint(target, path)
        assert str(path) in str(info.value), str(info.value)
        assert not isinstance(info.value, UnsafeCheckpointError)  # damaged is not unsafe
        return
    if content == "drop" and key in aliases(case["name"]):
        content = "intact"  # an alias of a shared tensor: load_checkpoint fills it back in
    if content in ("drop", "extra", "rename", "unsqueeze", "int", "bool"):
        with pytest.raises(CheckpointError) as info:
            vit_scratch.load_checkpoint(target, path)
        assert named in str(info.value), str(info.value)
        return
    vit_scratch.load_checkpoint(target, path)
    expected = source if content == "intact" else {
        k: v.to(getattr(torch, content)).float() for k, v in source.items()}
    for k, v in target.state_dict().items():
        assert torch.equal(v, expected[k]), k
    # the NumPy room reads the same file into the same model
    params = vit_scratch.state_dict_to_numpy(vit_scratch.read_state_dict(path))
    np_model = vit_scratch.create_numpy_model(case["name"], params, **small_kwargs(case["name"]))
    for k, v in np_model.params.items():
        np.testing.assert_array_equal(v, expected[k].numpy())


def test_unsafe_pickles_stay_refused_in_every_wrapper(ckpt_dir):
    class Payload:
        def __reduce__(self):
            return (exec, ("raise SystemExit('ran')",))

    for obj in ({"model": {"w": torch.zeros(1)}, "x": Payload()}, {"state_dict": Payload()},
                [Payload()], Payload()):
        path = ckpt_dir / "evil.pth"
        torch.save(obj, path)
        with pytest.raises(pickle.UnpicklingError) as info:
            vit_scratch.read_state_dict(path)
        assert "weights_only=False" not in str(info.value)


# --- NumPy functions on their own ----------------------------------------------------------------

@bounded(60)
@given(st.integers(1, 5), st.integers(1, 7), st.integers(0, 2**16), st.floats(0.0, 1.0))
def test_softmax_with_masked_entries(rows, cols, seed, p_masked):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * 10
    x[rng.random((rows, cols)) < p_masked] = -np.inf
    y = np_layers.softmax(x)
    for r in range(rows):
        keep = np.isfinite(x[r])
        expected = np.zeros(cols)
        if keep.any():
            e = np.exp(x[r, keep] - x[r, keep].max())
            expected[keep] = e / e.sum()
        np.testing.assert_allclose(y[r], expected, rtol=1e-12, atol=0)


@bounded(40)
@given(st.integers(1, 40), st.integers(1, 40), st.sampled_from(["C", "F", "T", "strided"]),
       st.sampled_from([np.float32, np.float64]), st.integers(0, 2**16))
def test_gelu_is_the_same_for_any_memory_layout(rows, cols, layout, dtype, seed):
    base = np.random.default_rng(seed).standard_normal((rows, 2 * cols)).astype(dtype) * 3
    x = {"C": base[:, :cols].copy(), "F": np.asfortranarray(base[:, :cols]),
         "T": base[:, :cols].T.copy().T, "strided": base[:, ::2]}[layout]
    expected = np_layers.gelu(np.ascontiguousarray(x))
    np.testing.assert_array_equal(np_layers.gelu(x), expected)
    out = np.empty_like(x)  # keeps x's layout
    np_layers.gelu(x, out=out)
    np.testing.assert_array_equal(out, expected)


@st.composite
def mask_shapes(draw):
    scores = (2, 3, 4, 5)
    ndim = draw(st.integers(1, 6))
    shape = []
    for i in range(ndim):
        target = scores[len(scores) - ndim + i] if ndim - i <= 4 else 1
        shape.append(draw(st.sampled_from([target, 1, target + 1])))
    dtype = draw(st.sampled_from(["bool", "float64", "int64"]))
    return tuple(shape), dtype


@bounded(60)
@given(mask_shapes(), st.integers(0, 2**16))
def test_masks_give_a_named_error_or_the_broadcast_result_in_both_rooms(case, seed):
    mask_shape, dtype = case
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, 3, n, 6)) for n in (4, 5, 5))
    mask = rng.random(mask_shape) < 0.7 if dtype != "float64" else \
        np.where(rng.random(mask_shape) < 0.7, 0.0, -np.inf)
    mask = mask.astype(dtype)
    fits = len(mask_shape) <= 4 and all(m in (1, s) for m, s in zip(mask_shape[::-1], (5, 4, 3, 2)))
    tq, tk, tv, tmask = map(torch.from_numpy, (q, k, v, mask))
    calls = [lambda: np_attn.scaled_dot_product_attention(q, k, v, mask=mask),
             lambda: t_attn.scaled_dot_product_attention(tq, tk, tv, mask=tmask),
             lambda: t_attn.scaled_dot_product_attention(tq, tk, tv, mask=tmask,
                                                         return_attention=True)[0]]
    if not fits or dtype == "int64":
        for call in calls:
            with pytest.raises(ValueError) as info:
                call()
            assert "mask" in str(info.value)
        return
    full = np.broadcast_to(mask, (2, 3, 4, 5))
    expected = np_attn.scaled_dot_product_attention(q, k, v, mask=full.copy())
    for call in calls:
        assert max_abs_diff(call(), expected) < 1e-12
