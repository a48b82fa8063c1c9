"""Issue 10, class by class: every public entry point answers bad input clearly, in both rooms.

Each test names the class of failure it covers (the numbering of issue 10).  The property-based
suite (``test_properties.py``) draws many more cases over every registered name; the cases here
are the ones the issue lists, pinned with their exact messages.
"""
import math
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import vit_scratch
from helpers import max_abs_diff, one_name_per_family, small_pair
from vit_scratch import CheckpointError, load_checkpoint, save_checkpoint, validation
from vit_scratch.data import normalize
from vit_scratch.models import lookup
from vit_scratch.numpy_nn import attention as np_attn
from vit_scratch.numpy_nn import layers as np_layers
from vit_scratch.numpy_nn import patch_embed as np_pe
from vit_scratch.torch_nn import attention as t_attn
from vit_scratch.torch_nn.layers import DropPath, Mlp
from vit_scratch.torch_nn.patch_embed import PatchEmbed
from vit_scratch.weights import UnsafeCheckpointError

FAMILY_NAMES = one_name_per_family()
TINY = "vit_tiny_patch16_224"
SMALL = dict(img_size=32, depth=2)


def both_rooms(name=TINY, **kwargs):
    """Build ``name`` in both rooms (random weights); config errors must come from either."""
    model = vit_scratch.create_model(name, **kwargs)
    params = vit_scratch.state_dict_to_numpy(model.state_dict())
    return model, vit_scratch.create_numpy_model(name, params, **kwargs)


@pytest.fixture(scope="module")
def tiny():
    model = vit_scratch.create_model(TINY, **SMALL).eval()
    vit_scratch.randomize_weights_(model, seed=0)
    np_model = vit_scratch.create_numpy_model(
        TINY, vit_scratch.state_dict_to_numpy(model.state_dict()), **SMALL)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model, np_model, x


# --- 1. config values of the wrong type or range -----------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    (dict(qkv_bias="False"), "qkv_bias must be True or False, got 'False' (str)"),
    (dict(qkv_bias=0), "qkv_bias must be True or False, got 0 (int)"),
    (dict(mlp_ratio=0.001), "mlp_ratio=0.001 gives an MLP of int(192 * 0.001) = 0 hidden units; "
                            "expected mlp_ratio >= 0.005208"),
    (dict(mlp_ratio=float("nan")), "mlp_ratio must be a finite number, got nan"),
    (dict(mlp_ratio=float("inf")), "mlp_ratio must be a finite number, got inf"),
    (dict(mlp_ratio=-2.0), "mlp_ratio must be positive, got -2.0"),
    (dict(drop_rate=float("nan")), "drop_rate must be a finite number, got nan"),
    (dict(embed_dim="192"), "embed_dim must be an int, got '192' (str)"),
    (dict(depth=True), "depth must be an int, got True (bool)"),
    (dict(num_heads=3.0), "num_heads must be an int, got 3.0 (float)"),
    (dict(img_size="224"), "img_size must be an int or a pair of ints, got '224' (str)"),
    (dict(num_classes=None), "num_classes must be an int, got None (NoneType)"),
    (dict(in_chans=0), "in_chans must be a positive int, got 0"),
])
def test_config_values_are_checked_in_both_rooms(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_model(TINY, **kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_numpy_model(TINY, {}, **kwargs)  # the config is checked first
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.get_config(TINY).replace(**kwargs)


def test_numpy_scalars_are_ordinary_config_values():
    """The equal-result side: NumPy ints, floats and bools mean what they say."""
    cfg = vit_scratch.get_config(TINY, embed_dim=np.int64(96), qkv_bias=np.bool_(False),
                                 mlp_ratio=np.float32(2.0), img_size=[32, 48])
    assert cfg == vit_scratch.get_config(TINY, embed_dim=96, qkv_bias=False, mlp_ratio=2.0,
                                         img_size=(32, 48))
    assert type(cfg.embed_dim) is int and type(cfg.qkv_bias) is bool
    model = vit_scratch.create_model(TINY, img_size=32, depth=1, qkv_bias=np.bool_(False))
    assert model.blocks[0].attn.qkv.bias is None  # 'False' as a string would have given a bias


def test_every_family_checks_its_config_fields():
    """Every family's config goes through ConfigMixin (type checks) and validate() (ranges)."""
    import dataclasses

    for name in FAMILY_NAMES:
        cfg_cls = type(vit_scratch.get_config(name))
        assert "__post_init__" not in vars(cfg_cls), (
            f"{cfg_cls.__name__} overrides __post_init__: define validate() instead, so the "
            f"shared field checks run")
        for field in dataclasses.fields(cfg_cls):
            with pytest.raises(ValueError, match=re.escape(field.name)):
                vit_scratch.get_config(name, **{field.name: "nonsense"})


def test_torch_modules_on_their_own_check_their_arguments():
    with pytest.raises(ValueError, match=re.escape("qkv_bias must be True or False, got 'False'")):
        t_attn.Attention(12, 3, qkv_bias="False")
    with pytest.raises(ValueError, match="hidden_features must be a positive int, got 0"):
        Mlp(12, 0)
    with pytest.raises(ValueError, match=re.escape("drop_path must be in [0, 1), got 1.5")):
        DropPath(1.5)
    with pytest.raises(ValueError, match="patch_size must be a positive int, got '16' \\(str\\)"):
        PatchEmbed(32, "16", 3, 8)
    with pytest.raises(ValueError, match="num_classes must be an int >= 0, got '5' \\(str\\)"):
        vit_scratch.create_model(TINY, **SMALL).reset_classifier("5")


# --- 2. one input dtype policy in both rooms ---------------------------------------------------

@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64", "bool", "complex64"])
def test_non_float_images_are_refused_in_both_rooms(tiny, dtype):
    model, np_model, x = tiny
    x_np = (x.numpy() * 100).clip(0, 255).astype(dtype)
    if dtype == "uint8":
        message = ("images have dtype uint8 (0-255 pixels?); the model expects floating-point "
                   "images scaled to [0, 1] and normalised with its mean and std")
    else:
        message = f"images have dtype {dtype}; the model expects floating-point images"
    with pytest.raises(ValueError, match=re.escape(message)):
        np_model(x_np)
    with pytest.raises(ValueError, match=re.escape(message)):
        model(torch.from_numpy(x_np))
    with pytest.raises(ValueError, match=re.escape(message)):  # the layers on their own, too
        model.patch_embed(torch.from_numpy(x_np))
    with pytest.raises(ValueError, match=re.escape(message)):
        np_pe.patch_embed(x_np, np_model.params["patch_embed.proj.weight"],
                          np_model.params["patch_embed.proj.bias"])
    if dtype == "uint8":
        with pytest.raises(ValueError, match=re.escape(message)):
            normalize(x_np, model)  # it would have returned values near 400


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_float_images_are_cast_to_the_model_dtype_in_both_rooms(tiny, dtype):
    """The policy's other half: any float works, and equals the model's own dtype's result."""
    model, np_model, x = tiny
    xt = x.to(getattr(torch, dtype))
    with torch.no_grad():
        got, expected = model(xt), model(xt.float())
    assert got.dtype == torch.float32 and torch.equal(got, expected)
    if dtype != "bfloat16":  # NumPy has no bfloat16
        x_np = xt.numpy()
        assert np_model(x_np).dtype == np.float32
        np.testing.assert_array_equal(np_model(x_np), np_model(x_np.astype(np.float32)))
    # a float64 model takes float32 images the same way
    model64 = vit_scratch.create_model(TINY, **SMALL).double().eval()
    with torch.no_grad():
        assert model64(x).dtype == torch.float64


def test_images_of_the_wrong_container(tiny):
    model, np_model, x = tiny
    with pytest.raises(ValueError, match=re.escape(
            "images must be a torch.Tensor of shape (B, C, H, W), got ndarray; use "
            "torch.from_numpy(images)")):
        model(x.numpy())
    with pytest.raises(ValueError, match=re.escape(
            "images is a Tensor; the NumPy model takes NumPy arrays")):
        np_model(x)


# --- 3. NumPy params ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_params(tiny):
    return tiny[1].params


@pytest.mark.parametrize("dtype", ["int64", "bool", "complex64", "float16"])
def test_params_of_a_non_float_dtype_are_refused(tiny_params, dtype):
    params = dict(tiny_params)
    params["blocks.1.mlp.fc1.weight"] = params["blocks.1.mlp.fc1.weight"].astype(dtype)
    message = (f"mis-typed keys (1): blocks.1.mlp.fc1.weight: got {dtype}, expected float32 or "
               f"float64")
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_numpy_model(TINY, params, **SMALL)


def test_one_float64_array_does_not_promote_the_model(tiny_params):
    params = dict(tiny_params)
    params["pos_embed"] = params["pos_embed"].astype(np.float64)
    with pytest.raises(ValueError, match=re.escape(
            "params for vit_tiny_patch16_224 mix dtypes: 31 float32, 1 float64 arrays "
            "(float64: pos_embed); expected one dtype for every array")):
        vit_scratch.create_numpy_model(TINY, params, **SMALL)
    # all float64 is a float64 model (the precision tests' mode)
    params64 = {k: v.astype(np.float64) for k, v in tiny_params.items()}
    assert vit_scratch.create_numpy_model(TINY, params64, **SMALL).dtype == np.float64


@pytest.mark.parametrize("params,got", [(None, "NoneType"), ([1, 2], "list"),
                                        ("params.npz", "str")])
def test_params_that_are_not_a_dict(params, got):
    message = (f"params for {TINY} must be a dict of NumPy arrays keyed like the PyTorch "
               f"state_dict (vit_scratch.state_dict_to_numpy(model.state_dict())), got {got}")
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_numpy_model(TINY, params, **SMALL)


def test_params_holding_torch_tensors(tiny):
    model = tiny[0]
    with pytest.raises(ValueError, match=re.escape(
            "params for vit_tiny_patch16_224['cls_token'] is a Parameter; expected a dict of "
            "NumPy arrays")):
        vit_scratch.create_numpy_model(TINY, dict(model.named_parameters()), **SMALL)


# --- 4. checkpoints ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def source():
    model = vit_scratch.create_model(TINY, **SMALL).eval()
    return vit_scratch.randomize_weights_(model, seed=1)


def _same_weights(a, b):
    sd = b.state_dict()
    return all(torch.equal(v, sd[k]) for k, v in a.state_dict().items())


def test_empty_file_and_folder(tmp_path):
    (tmp_path / "empty.pth").write_bytes(b"")
    with pytest.raises(CheckpointError, match=re.escape("empty.pth' is empty (0 bytes)")):
        load_checkpoint(vit_scratch.create_model(TINY, **SMALL), tmp_path / "empty.pth")
    folder = tmp_path / "hub_download"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"x")
    (folder / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match=re.escape(
            "hub_download' is a folder, not a file; it holds model.safetensors: pass one of "
            "those files")):
        load_checkpoint(vit_scratch.create_model(TINY, **SMALL), folder)


def test_format_comes_from_the_bytes_not_the_name(tmp_path, source):
    """A safetensors file named .pth, and a torch file named .safetensors, both load."""
    save_checkpoint(source, tmp_path / "real.safetensors")
    (tmp_path / "named.pth").write_bytes((tmp_path / "real.safetensors").read_bytes())
    save_checkpoint(source, tmp_path / "real.pth")
    (tmp_path / "named.safetensors").write_bytes((tmp_path / "real.pth").read_bytes())
    for path in ("named.pth", "named.safetensors"):
        loaded = load_checkpoint(vit_scratch.create_model(TINY, **SMALL), tmp_path / path)
        assert _same_weights(loaded, source)
    np.savez(tmp_path / "weights.npz", **vit_scratch.state_dict_to_numpy(source.state_dict()))
    assert _same_weights(load_checkpoint(vit_scratch.create_model(TINY, **SMALL),
                                         tmp_path / "weights.npz"), source)


def test_damaged_files_are_named_as_such(tmp_path, source):
    save_checkpoint(source, tmp_path / "ok.safetensors")
    save_checkpoint(source, tmp_path / "ok.pth")
    cases = {
        "cut.safetensors": ((tmp_path / "ok.safetensors").read_bytes()[:5000],
                            "is a damaged safetensors file"),
        "head.safetensors": ((tmp_path / "ok.safetensors").read_bytes()[:100],
                             "looks like a truncated safetensors file"),
        "cut.pth": ((tmp_path / "ok.pth").read_bytes()[:5000], "damaged or truncated zip"),
        "lfs.pth": (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1\n",
                    "is a Git LFS pointer, not the weights"),
        "page.pth": (b"<!DOCTYPE html><html>Not found</html>", "is an HTML or XML page"),
        "junk.bin": (bytes(range(7, 200)), "neither safetensors, nor a PyTorch file"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(CheckpointError, match=re.escape(message)):
            vit_scratch.read_state_dict(tmp_path / name)


class _Payload:
    def __reduce__(self):
        return (print, ("this would have run",))


def test_unsafe_pickles_are_refused_without_advising_weights_only_false(tmp_path):
    path = tmp_path / "full.pth"
    torch.save({"model": {"w": torch.zeros(1)}, "extra": _Payload()}, path)
    with pytest.raises(UnsafeCheckpointError) as info:
        vit_scratch.read_state_dict(path)
    message = str(info.value)
    assert "holds Python objects besides tensors" in message
    assert "(the first of them: print)" in message  # what the payload would have called
    assert "weights_only=False" not in message and "weights_only` set to `False" not in message
    assert isinstance(info.value, CheckpointError)


def test_training_checkpoint_with_argparse_args_loads(tmp_path, source):
    """DeiT-style training checkpoints keep the run's ``args`` (an argparse.Namespace)."""
    import argparse

    path = tmp_path / "train.pth"
    torch.save({"model": source.state_dict(), "args": argparse.Namespace(lr=1e-3), "epoch": 3},
               path)
    assert _same_weights(load_checkpoint(vit_scratch.create_model(TINY, **SMALL), path), source)


def test_integer_checkpoint_is_refused_or_skipped_with_a_warning(tmp_path, source):
    sd = {k: v.clone() for k, v in source.state_dict().items()}
    sd["pos_embed"] = (sd["pos_embed"] * 100).round().to(torch.int32)
    sd["blocks.0.norm1.weight"] = sd["blocks.0.norm1.weight"] > 1
    path = tmp_path / "int.safetensors"
    save_checkpoint(sd, path)
    target = vit_scratch.create_model(TINY, **SMALL)
    with pytest.raises(CheckpointError, match=re.escape(
            "mis-typed keys (2): pos_embed: got int32, expected a floating-point dtype, "
            "blocks.0.norm1.weight: got bool")):
        load_checkpoint(target, path)
    before = target.pos_embed.detach().clone()
    with pytest.warns(UserWarning, match="mis-typed keys"):
        load_checkpoint(target, path, strict=False)
    assert torch.equal(target.pos_embed, before)  # skipped, not cast
    assert torch.equal(target.blocks[1].attn.qkv.weight, source.blocks[1].attn.qkv.weight)


def _pos_embed_names() -> list[str]:
    """Per family with a learned position embedding, its first name trained at 224²."""
    chosen = {}
    for name in vit_scratch.list_models():
        family, spec = lookup(name)
        cfg = spec.config()
        if cfg.img_size == (224, 224) and "pos_embed" in family.spec.MODELS.param_shapes(cfg):
            chosen.setdefault(family.spec.__name__, name)
    return sorted(chosen.values())


POS_EMBED_NAMES = _pos_embed_names()


def _rect(name, img_size, seed):
    model = vit_scratch.create_model(name, img_size=img_size, **_one_block(name))
    return vit_scratch.randomize_weights_(model, seed=seed)


def _one_block(name):
    cfg = vit_scratch.get_config(name)
    return {k: 1 for k in ("depth", "depth_token_only") if hasattr(cfg, k)}


@pytest.mark.parametrize("name", POS_EMBED_NAMES)
def test_non_square_position_grid(tmp_path, name):
    """A 224×160 checkpoint (a 14×10 grid) into a 224 model: our own files record their grid;
    a foreign file needs pos_embed_grid, which load_checkpoint really has."""
    from timm.layers import resample_abs_pos_embed

    rect = _rect(name, (224, 160), seed=2)
    prefix = rect.pos_embed_prefix_tokens
    expected = resample_abs_pos_embed(rect.pos_embed.detach(), [14, 14], [14, 10],
                                      num_prefix_tokens=prefix)
    square = lambda: vit_scratch.create_model(name, **_one_block(name))  # noqa: E731
    save_checkpoint(rect, tmp_path / "ours.safetensors")  # records pos_embed_grid = 14,10
    loaded = load_checkpoint(square(), tmp_path / "ours.safetensors")
    assert max_abs_diff(loaded.pos_embed, expected) <= 1e-6

    torch.save(rect.state_dict(), tmp_path / "foreign.pth")  # no record of the grid
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(square(), tmp_path / "foreign.pth")
    message = str(info.value)
    assert "not a square grid" in message and "pass pos_embed_grid=(rows, cols) to " \
        "vit_scratch.load_checkpoint" in message and "(14, 10)" in message
    assert "old_grid" not in message
    loaded = load_checkpoint(square(), tmp_path / "foreign.pth", pos_embed_grid=(14, 10))
    assert max_abs_diff(loaded.pos_embed, expected) <= 1e-6
    with pytest.raises(CheckpointError, match=re.escape(
            "pos_embed_grid=(12, 12) holds 144 positions, but the checkpoint's pos_embed has 140")):
        load_checkpoint(square(), tmp_path / "foreign.pth", pos_embed_grid=12)


@pytest.mark.parametrize("name", POS_EMBED_NAMES)
def test_transposed_grid_is_resized_not_loaded_as_is(tmp_path, name):
    """14×10 and 10×14 have the same number of positions: only the recorded grid tells them
    apart, and the positions must be resampled, not copied."""
    from timm.layers import resample_abs_pos_embed

    wide = _rect(name, (224, 160), seed=3)
    save_checkpoint(wide, tmp_path / "wide.safetensors")
    tall = load_checkpoint(vit_scratch.create_model(name, img_size=(160, 224), **_one_block(name)),
                           tmp_path / "wide.safetensors")
    expected = resample_abs_pos_embed(wide.pos_embed.detach(), [10, 14], [14, 10],
                                      num_prefix_tokens=wide.pos_embed_prefix_tokens)
    assert max_abs_diff(tall.pos_embed, expected) <= 1e-6
    assert not torch.equal(tall.pos_embed, wide.pos_embed)


def test_compiled_model_prefix_is_not_saved_and_is_stripped_on_load(tmp_path, source):
    compiled = torch.compile(source, backend="eager")  # the wrapper only; nothing is traced
    assert all(k.startswith("_orig_mod.") for k in compiled.state_dict())
    save_checkpoint(compiled, tmp_path / "c.safetensors")
    stored = vit_scratch.read_state_dict(tmp_path / "c.safetensors")
    assert set(stored) == set(source.state_dict())
    # a file written by hand from a compiled model's state_dict still loads ...
    torch.save(compiled.state_dict(), tmp_path / "raw.pth")
    assert _same_weights(load_checkpoint(vit_scratch.create_model(TINY, **SMALL),
                                         tmp_path / "raw.pth"), source)
    # ... and so does a file loaded into a compiled model
    target = torch.compile(vit_scratch.create_model(TINY, **SMALL), backend="eager")
    assert load_checkpoint(target, tmp_path / "c.safetensors") is target
    assert _same_weights(target._orig_mod, source)
    save_checkpoint(compiled.state_dict(), tmp_path / "sd.safetensors")  # a dict: stripped too
    assert set(vit_scratch.read_state_dict(tmp_path / "sd.safetensors")) == set(stored)


def test_load_checkpoint_arguments(tmp_path, source):
    save_checkpoint(source, tmp_path / "ok.safetensors")
    _, np_model = small_pair(TINY)
    with pytest.raises(ValueError, match="model must be a torch.nn.Module, got VisionTransformer; "
                                         "for the NumPy room"):
        load_checkpoint(np_model, tmp_path / "ok.safetensors")
    with pytest.raises(ValueError, match="strict must be True or False, got 'no' \\(str\\)"):
        load_checkpoint(source, tmp_path / "ok.safetensors", strict="no")
    with pytest.raises(ValueError, match="path must be a str or a path, got OrderedDict"):
        vit_scratch.read_state_dict(source.state_dict())


# --- 5. NumPy functions on their own -----------------------------------------------------------

def test_softmax_all_masked_row_gives_zero_weights():
    x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "invalid value" RuntimeWarning either
        y = np_layers.softmax(x)
    np.testing.assert_array_equal(y, [[0.0, 0.0, 0.0], [0.5, 0.0, 0.5]])
    np.testing.assert_array_equal(np_layers.softmax(x, axis=0)[:, 1], [0.0, 0.0])
    inplace = x.copy()
    np_layers.softmax(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, y)


def test_gelu_any_memory_order():
    rng = np.random.default_rng(0)
    x = np.asfortranarray(rng.standard_normal((64, 33)).astype(np.float32))
    expected = np_layers.gelu(np.ascontiguousarray(x))
    np.testing.assert_array_equal(np_layers.gelu(x), expected)
    np.testing.assert_array_equal(np_layers.gelu(x[:, ::2]), expected[:, ::2])  # strided view
    inplace = x.copy(order="F")
    np_layers.gelu(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, expected)
    with pytest.raises(ValueError, match=re.escape("gelu: out must be an array of x's shape (64, 33)")):
        np_layers.gelu(x, out=np.empty((3,), np.float32))


@pytest.mark.parametrize("call,message", [
    (lambda: np_layers.linear(np.ones((2, 4)), np.ones(4)),
     "linear weight must have shape (C_out, C_in), got shape (4,)"),
    (lambda: np_layers.linear(np.ones((2, 4)), np.ones((3, 5))),
     "linear input must have last dimension 5, got shape (2, 4)"),
    (lambda: np_layers.linear(np.ones((2, 4)), np.ones((3, 4)), np.ones(4)),
     "linear bias must have last dimension 3, got shape (4,)"),
    (lambda: np_layers.layer_norm(np.ones((2, 4)), np.ones(4), np.ones(3)),
     "layer_norm bias must have last dimension 4, got shape (3,)"),
    (lambda: np_layers.layer_norm(np.ones((2, 4)), np.ones((1, 4)), np.ones(4)),
     "layer_norm weight must have shape (C,), got shape (1, 4)"),
    (lambda: np_attn.scaled_dot_product_attention(np.ones((2, 5, 4)), np.ones((2, 5, 3)),
                                                  np.ones((2, 5, 4))),
     "q and k must have the same last dimension d, got q of shape (2, 5, 4) and k of shape "
     "(2, 5, 3)"),
    (lambda: np_attn.scaled_dot_product_attention(np.ones((2, 5, 4)), np.ones((2, 5, 4)),
                                                  np.ones((2, 6, 4))),
     "v must have one row per key (N_k = 5), got k of shape (2, 5, 4) and v of shape (2, 6, 4)"),
    (lambda: np_attn.split_heads(np.ones((5, 12)), 3), "x must have shape (B, N, h·d), got shape (5, 12)"),
    (lambda: np_attn.merge_heads(np.ones((5, 12))), "x must have shape (B, h, N, d), got shape (5, 12)"),
    (lambda: np_attn.multi_head_attention(np.ones((1, 5, 12)), np.ones((12, 12)), None,
                                          np.ones((12, 12)), np.ones(12), 3),
     "qkv_weight must have shape (36, 12) for x with C = 12, got shape (12, 12)"),
    (lambda: np_attn.scaled_dot_product_attention(np.ones((1, 2, 2)), np.ones((1, 2, 2)),
                                                  np.ones((1, 2, 2)), mask=np.ones((2, 2), int)),
     "mask has dtype int64; expected a boolean mask (True = may attend) or an additive"),
    (lambda: np_attn.attention_rollout([np.ones((1, 2, 3, 4))]),
     "attn_maps[0] must have shape (B, h, N, N) with the same N in every block, got shape (1, 2, 3, 4)"),
    (lambda: np_pe.add_class_token(np.ones((2, 4, 6)), np.ones((1, 6))),
     "cls_token must have shape (1, 1, C) = (1, 1, 6), got shape (1, 6)"),
    (lambda: np_pe.patch_embed(np.ones((1, 3, 8, 8), np.float32), np.ones((4, 3, 2, 3)), np.ones(4)),
     "patch_embed weight must have square patches (E, C, P, P), got shape (4, 3, 2, 3)"),
    (lambda: np_pe.patchify(np.ones((1, 3, 8, 8)), 0), "patch_size must be a positive int, got 0"),
    (lambda: np_pe.sincos_pos_embed_2d(6, (2, 2)), "embed_dim 6 must be divisible by 4"),
])
def test_numpy_functions_name_wrong_shapes(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_torch_attention_functions_name_wrong_shapes():
    q = torch.ones(2, 5, 4)
    with pytest.raises(ValueError, match="q and k must have the same last dimension d"):
        t_attn.scaled_dot_product_attention(q, torch.ones(2, 5, 3), q)
    with pytest.raises(ValueError, match=re.escape("v must have one row per key (N_k = 5)")):
        t_attn.scaled_dot_product_attention(q, q, torch.ones(2, 6, 4))
    with pytest.raises(ValueError, match="mask has dtype int64"):
        t_attn.scaled_dot_product_attention(q, q, q, mask=torch.ones(5, 5, dtype=torch.long))


# --- 7. extreme inputs -------------------------------------------------------------------------

@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("value,message", [
    (1e19, "images reach |value| = 1e+19; expected normalised images"),
    (2e4, "images reach |value| = 2e+04"),
    (float("nan"), "images contain NaN"),
    (float("inf"), "images contain infinite values"),
])
def test_extreme_images_are_refused_in_both_rooms(name, value, message):
    model, np_model = small_pair(name)
    c, h, w = model.pretrained_cfg["input_size"]
    x = torch.zeros(2, c, h, w)
    x[1, 0, 0, 0] = value  # one pixel of one image is enough
    with pytest.raises(ValueError, match=re.escape(message)):
        model(x)
    with pytest.raises(ValueError, match=re.escape(message)):
        np_model(x.numpy())


def test_without_the_check_float32_layer_norm_overflows():
    """Why the models refuse 1e19: LayerNorm's variance overflows and every token comes out as
    the bias (PyTorch, silently).  The NumPy layer_norm on its own says so instead."""
    x = torch.tensor([[1e19, -1e19, 3e19, 0.0], [2e19, -1e19, 0.0, 5e18]])
    ln = nn.LayerNorm(4, eps=1e-6)
    assert torch.equal(ln(x)[0], ln(x)[1])  # two different tokens, the same output
    with pytest.raises(ValueError, match=re.escape(
            "layer_norm input reaches |value| = 3e+19: the variance of a token overflows float32")):
        np_layers.layer_norm(x.numpy(), np.ones(4, np.float32), np.zeros(4, np.float32))
    y = np_layers.layer_norm(x.double().numpy(), np.ones(4), np.zeros(4))  # float64 is fine
    assert max_abs_diff(y, nn.functional.layer_norm(x.double(), (4,), eps=1e-6)) < 1e-12
    assert math.isclose(validation.MAX_ABS_IMAGE, 1e4)


# --- the helpers around the models -------------------------------------------------------------

def test_weight_helpers_check_their_arguments(source):
    with pytest.raises(ValueError, match="seed must be an int >= 0, got 'a' \\(str\\)"):
        vit_scratch.randomize_weights_(nn.Linear(2, 2), seed="a")
    with pytest.raises(ValueError, match="std must be a finite number, got nan"):
        vit_scratch.randomize_weights_(nn.Linear(2, 2), std=float("nan"))
    with pytest.raises(ValueError, match="state_dict must be a dict of tensors"):
        vit_scratch.state_dict_to_numpy([torch.zeros(1)])
    with pytest.raises(ValueError, match="state_dict\\['w'\\] is a ndarray, not a tensor"):
        vit_scratch.state_dict_to_numpy({"w": np.zeros(1)})
    # a compiled model's state_dict converts under the model's own names
    compiled = torch.compile(source, backend="eager")
    assert set(vit_scratch.state_dict_to_numpy(compiled.state_dict())) == set(source.state_dict())
    assert set(vit_scratch.state_dict_to_numpy(compiled)) == set(source.state_dict())


def test_resize_pos_embed_arguments():
    pe = torch.randn(1, 1 + 16, 8)
    with pytest.raises(ValueError, match="mode must be one of"):
        vit_scratch.resize_pos_embed(pe, (6, 6), mode="lanczos")
    nearest = vit_scratch.resize_pos_embed(pe, (8, 8), mode="nearest")  # antialias: n/a, not an error
    grid = pe[0, 1:].reshape(4, 4, 8)
    assert torch.equal(nearest[0, 1:].reshape(8, 8, 8)[::2, ::2], grid)


# --- checkpoints that would load wrong -----------------------------------------------------------

def _digits(name, seed=0):
    return vit_scratch.randomize_weights_(vit_scratch.create_model(name), seed=seed).eval()


@pytest.mark.parametrize("name,key", [("cait_digits", "blocks.1.gamma_2"),
                                      ("coat_digits", "cls_token4"), ("vit_digits", "pos_embed")])
def test_nan_parameters_are_refused_in_both_rooms(tmp_path, name, key):
    sd = {k: v.clone() for k, v in _digits(name).state_dict().items()}
    sd[key].view(-1)[1] = float("nan")
    save_checkpoint(sd, tmp_path / "nan.safetensors")
    message = f"keys with non-finite or implausible values (1): {key}: NaN"
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_checkpoint(vit_scratch.create_model(name), tmp_path / "nan.safetensors")
    target = vit_scratch.create_model(name)
    before = dict(target.named_parameters())[key].detach().clone()
    with pytest.warns(UserWarning, match=re.escape(message)):
        load_checkpoint(target, tmp_path / "nan.safetensors", strict=False)  # skipped, not loaded
    assert torch.equal(dict(target.named_parameters())[key], before)
    with pytest.raises(ValueError, match=re.escape(f"params for {name} holds values no model can "
                                                   f"use:\n  {message}")):
        vit_scratch.create_numpy_model(name, vit_scratch.state_dict_to_numpy(sd))


def test_overwritten_bytes_are_refused(tmp_path):
    """Bytes overwritten inside a tensor read as floats far beyond any weight (or NaN)."""
    path = tmp_path / "ok.safetensors"
    save_checkpoint(_digits("cait_digits"), path)
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little")
    import json

    start, _ = json.loads(data[8:8 + header])["pos_embed"]["data_offsets"]
    at = 8 + header + start + 64
    data[at:at + 16] = b"\xff\xff\x7f\x7f" * 4  # float32 3.4e38 (little-endian), four times
    (tmp_path / "hit.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=re.escape(
            "keys with non-finite or implausible values (1): pos_embed: |value| up to 3.4e+38")):
        load_checkpoint(vit_scratch.create_model("cait_digits"), tmp_path / "hit.safetensors")


def test_shared_tensor_with_different_values_is_refused_in_both_rooms(tmp_path):
    sd = {k: v.clone() for k, v in _digits("coat_lite_digits").state_dict().items()}
    sd["serial_blocks2.0.cpe.proj.weight"] += 1.0  # an alias of cpe2.proj.weight
    torch.save(sd, tmp_path / "alias.pth")
    with pytest.raises(CheckpointError, match=re.escape(
            "serial_blocks2.0.cpe.proj.weight and cpe2.proj.weight name one shared tensor of CoaT "
            "but hold different values")):
        load_checkpoint(vit_scratch.create_model("coat_lite_digits"), tmp_path / "alias.pth")
    with pytest.raises(ValueError, match=re.escape(
            "serial_blocks2.0.cpe.proj.weight and cpe2.proj.weight name one shared tensor but "
            "hold different values")):
        vit_scratch.create_numpy_model("coat_lite_digits", vit_scratch.state_dict_to_numpy(sd))


@pytest.mark.parametrize("source,target", [("cait_digits", "coat_digits"),
                                           ("coat_lite_digits", "cait_digits"),
                                           ("vit_digits", "cait_digits"),
                                           ("cait_digits", "vit_digits")])
def test_another_familys_checkpoint_is_named(tmp_path, source, target):
    from vit_scratch.models import family_name, lookup

    path = tmp_path / f"{source}.safetensors"
    save_checkpoint(_digits(source), path)
    message = (f"the keys and shapes are those of a {family_name(lookup(source)[0])} ({source}), "
               f"but the model is a {family_name(lookup(target)[0])}; build "
               f"vit_scratch.create_model('{source}') for these weights")
    with pytest.raises(CheckpointError, match=re.escape(message)):
        load_checkpoint(vit_scratch.create_model(target), path)
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_numpy_model(target, vit_scratch.state_dict_to_numpy(
            vit_scratch.read_state_dict(path)))
    from vit_scratch.train import init_from  # the trainer's --init goes through the same check

    with pytest.raises(CheckpointError, match=re.escape(message)):
        init_from(vit_scratch.create_model(target), path)


def test_damaged_grid_metadata(tmp_path):
    from safetensors.torch import save_file

    sd = {k: v.contiguous() for k, v in _digits("vit_digits").state_dict().items()}
    save_file(sd, str(tmp_path / "text.safetensors"), metadata={"pos_embed_grid": "four,4"})
    with pytest.raises(CheckpointError, match=re.escape(
            "records pos_embed_grid='four,4' in its metadata, which is not 'rows,cols' (two "
            "positive ints): damaged metadata")):
        load_checkpoint(vit_scratch.create_model("vit_digits"), tmp_path / "text.safetensors")
    save_file(sd, str(tmp_path / "count.safetensors"), metadata={"pos_embed_grid": "3,3"})
    with pytest.raises(CheckpointError, match=re.escape(
            "records pos_embed_grid=(3, 3) in its metadata, which does not fit its own pos_embed: "
            "damaged metadata?")):
        load_checkpoint(vit_scratch.create_model("vit_digits"), tmp_path / "count.safetensors")


def test_a_transposed_grid_is_refused_where_the_file_records_its_grid(tmp_path):
    """From the tensor alone, 3×4 and 4×3 are the same 12 positions: resize_pos_embed resamples
    either reading without complaint (documented).  A file saved by save_checkpoint records
    its grid, so there a contradicting pos_embed_grid is refused and none is needed."""
    pe = torch.randn(1, 1 + 12, 8, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(resize_pos_embed_(pe, (6, 8), (3, 4)), resize_pos_embed_(pe, (6, 8), (4, 3)))
    wide = vit_scratch.create_model("vit_digits", img_size=(18, 24))  # a 3×4 grid
    save_checkpoint(wide, tmp_path / "wide.safetensors")
    with pytest.raises(CheckpointError, match=re.escape(
            "pos_embed_grid=(4, 3) contradicts the grid (3, 4) that checkpoint")):
        load_checkpoint(vit_scratch.create_model("vit_digits"), tmp_path / "wide.safetensors",
                        pos_embed_grid=(4, 3))
    loaded = load_checkpoint(vit_scratch.create_model("vit_digits"), tmp_path / "wide.safetensors")
    expected = resize_pos_embed_(wide.pos_embed.detach(), (4, 4), (3, 4))
    assert torch.equal(loaded.pos_embed.detach(), expected)


def resize_pos_embed_(pe, new, old):
    return vit_scratch.resize_pos_embed(pe, new, old_grid=old)


def test_pickle_payloads_are_reported_as_unsafe_not_damaged(tmp_path):
    import os
    import pickle

    class Payload:
        def __reduce__(self):
            return (os.system, ("echo this would have run",))

    for name, protocol in (("p0.pth", 0), ("p2.pth", 2), ("p4.pkl", 4)):
        with open(tmp_path / name, "wb") as f:
            pickle.dump({"model": Payload()}, f, protocol=protocol)
        with pytest.raises(UnsafeCheckpointError) as info:
            vit_scratch.read_state_dict(tmp_path / name)
        message = str(info.value)
        assert "never" in message and ("system" in message or "safe unpickler" in message), message
        assert "damaged" not in message and "truncated" not in message
        assert "weights_only` set to `False" not in message and "weights_only=False" not in message


def test_saving_into_a_missing_folder_names_the_folder(tmp_path):
    model = _digits("vit_digits")
    for name in ("x.safetensors", "x.pth"):
        with pytest.raises(FileNotFoundError, match=re.escape(
                f"the folder '{tmp_path / 'runs'}' does not exist")):
            save_checkpoint(model, tmp_path / "runs" / name)


# --- empty batches, and the NumPy functions on their own -----------------------------------------

@pytest.mark.parametrize("name", FAMILY_NAMES + ["coat_digits"])
def test_an_empty_batch_gives_empty_logits_in_both_rooms(name):
    model, np_model = small_pair(name)
    c, h, w = model.pretrained_cfg["input_size"]
    with torch.no_grad():
        assert model(torch.zeros(0, c, h, w)).shape == (0, model.num_classes)
    assert np_model(np.zeros((0, c, h, w), np.float32)).shape == (0, model.num_classes)


def test_numpy_attention_with_an_empty_batch():
    x = np.zeros((0, 5, 12), np.float32)
    w, b = np.ones((12, 12), np.float32), np.ones(12, np.float32)
    out, attn = np_attn.multi_head_attention(x, np.ones((36, 12), np.float32), None, w, b, 3,
                                             return_attention=True)
    assert out.shape == (0, 5, 12) and attn.shape == (0, 3, 5, 5)
    from vit_scratch.numpy_nn import class_attention as np_ca

    assert np_ca.class_attention(x, w, None, w, None, w, None, w, b, 3).shape == (0, 1, 12)


def test_softmax_of_an_empty_axis_and_into_an_integer_array():
    assert np_layers.softmax(np.zeros((2, 0))).shape == (2, 0)
    assert torch.zeros(2, 0).softmax(-1).shape == (2, 0)  # the same as PyTorch
    with pytest.raises(ValueError, match=re.escape(
            "softmax: out must be a floating-point array (the weights are fractions), got dtype "
            "int64")):
        np_layers.softmax(np.zeros((2, 3)), out=np.zeros((2, 3), np.int64))


def test_linear_with_integer_arrays_computes_in_float64():
    x, w, b = np.arange(8).reshape(2, 4), np.arange(12).reshape(3, 4), np.array([0.5, 1.0, 2.0])
    y = np_layers.linear(x, w, b)
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, x.astype(float) @ w.T.astype(float) + b)
    assert np_layers.linear(x > 3, w > 5).dtype == np.float64


def test_even_kernel_is_refused_when_the_layer_is_built():
    from vit_scratch.torch_nn.conv_position_encoding import ConvPosEnc

    with pytest.raises(ValueError, match=re.escape("kernel_size must be odd (a centred window "
                                                   "with 'same' padding k // 2), got 4")):
        ConvPosEnc(8, 4)
    assert ConvPosEnc(8, 5).proj.weight.shape == (8, 1, 5, 5)


# --- figures for the wrong model or the wrong image ----------------------------------------------

def test_plot_helpers_name_what_does_not_fit():
    import matplotlib

    matplotlib.use("Agg")
    from vit_scratch import plotting

    with pytest.raises(ValueError, match=re.escape(
            "a 16×16 map of 16×16 patches covers 256×256 pixels, but the image is 64×64")):
        plotting.plot_attention_overlay(np.zeros((3, 64, 64)), np.zeros((16, 16)), 16)
    for name in ("vit_digits", "cait_digits"):
        model = vit_scratch.create_model(name).eval()
        with pytest.raises(ValueError, match=re.escape(
                f"factorized_attention_view draws factorized attention (a softmax of the keys over "
                f"the tokens); {type(model).__name__}'s attention maps are softmax weights")):
            plotting.factorized_attention_view(model, np.zeros((1, 1, 24, 24), np.float32))
    coat = vit_scratch.create_model("coat_lite_digits").eval()
    grids = plotting.attention_grids(coat, np.zeros((1, 1, 8, 8), np.float32))
    with pytest.raises(ValueError, match=re.escape(
            "these layers lie on different grids (8×8, 4×4, 2×2, 1×1)")):
        plotting.plot_layer_head_maps(np.zeros((1, 8, 8)), [g[0] for g in grids])
