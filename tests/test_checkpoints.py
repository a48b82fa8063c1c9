"""Checkpoint files: formats read from their bytes, wrappers and prefixes, round trips, shared
tensors, position grids, and every file that would load wrong refused with the keys named.
"""
import pickle
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import vit_scratch
from helpers import make_pair, max_abs_diff, small_kwargs, small_pair
from vit_scratch import CheckpointError, load_checkpoint, resize_pos_embed, save_checkpoint
from vit_scratch.models import lookup
from vit_scratch.weights import UnsafeCheckpointError


# --- reading and writing ---------------------------------------------------------------------------


TINY = "vit_tiny_patch16_224"


SMALL = dict(img_size=32, depth=2)


@pytest.fixture(scope="module")
def source():
    model = vit_scratch.create_model(TINY, **SMALL).eval()
    return vit_scratch.randomize_weights_(model, seed=1)


def _same_weights(a, b):
    sd = b.state_dict()
    return all(torch.equal(v, sd[k]) for k, v in a.state_dict().items())


def _official_style(sd):
    """How the official DeiT/CaiT releases ship: {'model': sd} saved from a DDP-wrapped model."""
    return {"model": {f"module.{k}": v for k, v in sd.items()}, "epoch": 300}


@pytest.mark.parametrize("suffix,wrap", [(".safetensors", False), (".pth", False),
                                         (".pth", True), (".bin", True)])
def test_checkpoint_round_trip(tmp_path, suffix, wrap):
    source, _ = make_pair("vit_tiny_patch16_224", seed=5, img_size=32, depth=2, num_classes=3)
    path = tmp_path / f"ckpt{suffix}"
    if wrap:
        torch.save(_official_style(source.state_dict()), path)
    else:
        save_checkpoint(source, path)
    loaded = load_checkpoint(vit_scratch.create_model("vit_tiny_patch16_224", img_size=32,
                                                      depth=2, num_classes=3), path)
    for k, v in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k


def test_torch_load_is_weights_only(tmp_path):
    """A .pth that would run code when unpickled is refused, not executed."""
    path = tmp_path / "evil.pth"
    torch.save({"model": {"w": torch.zeros(1)}, "payload": _Exploding()}, path)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(nn.Linear(1, 1), path)
    assert not _Exploding.ran


class _Exploding:
    ran = False

    def __reduce__(self):
        return (_Exploding._run, ())

    @staticmethod
    def _run():
        _Exploding.ran = True
        return None


def test_mismatch_lists_missing_unexpected_and_misshaped(tmp_path):
    source = vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, num_classes=3)
    sd = dict(source.state_dict())
    del sd["norm.bias"]  # missing
    sd["extra.weight"] = torch.zeros(2)  # unexpected
    path = tmp_path / "bad.safetensors"
    save_checkpoint(sd, path)
    target = vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, num_classes=5)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(target, path)
    message = str(info.value)
    assert "missing keys (1): norm.bias" in message
    assert "unexpected keys (1): extra.weight" in message
    assert "head.weight: got (3, 192), expected (5, 192)" in message
    assert "head.bias: got (3,), expected (5,)" in message


def test_non_strict_load_keeps_the_rest(tmp_path):
    """Fine-tuning recipe: an ImageNet-style checkpoint into a 10-class model."""
    source, _ = make_pair("vit_tiny_patch16_224", seed=6, img_size=32, depth=4)
    path = tmp_path / "in1k.safetensors"
    save_checkpoint(source, path)
    target = vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, depth=4, num_classes=10)
    head_before = target.head.weight.clone()
    with pytest.warns(UserWarning, match="head.weight: got \\(1000, 192\\), expected \\(10, 192\\)"):
        load_checkpoint(target, path, strict=False)
    assert torch.equal(target.blocks[3].attn.qkv.weight, source.blocks[3].attn.qkv.weight)
    assert torch.equal(target.head.weight, head_before)


class _Shared(nn.Module):
    """A module registered under two names, as CoaT registers its conv position encodings."""

    def __init__(self):
        super().__init__()
        self.cpe = nn.Linear(3, 3)
        self.block = nn.Module()
        self.block.cpe = self.cpe
        self.head = nn.Linear(3, 2)


def test_shared_modules_save_every_name_and_load_back(tmp_path):
    src = _Shared()
    nn.init.normal_(src.cpe.weight)
    path = tmp_path / "shared.safetensors"
    save_checkpoint(src, path)  # plain safetensors.save_file would refuse the shared tensors
    stored = vit_scratch.read_state_dict(path)
    assert set(stored) == set(src.state_dict())  # the alias block.cpe.* too, as a copy
    assert torch.equal(stored["block.cpe.weight"], src.cpe.weight)
    dst = load_checkpoint(_Shared(), path)
    assert torch.equal(dst.block.cpe.weight, src.cpe.weight)
    assert dst.block.cpe is dst.cpe


def test_checkpoint_errors(tmp_path):
    # The format comes from the file's bytes, not its suffix: a missing file is
    # reported as missing, a file of unknown bytes as what it is not.
    with pytest.raises(FileNotFoundError, match="x.npz' does not exist"):
        load_checkpoint(nn.Linear(1, 1), tmp_path / "x.npz")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="neither safetensors, nor a PyTorch file"):
        load_checkpoint(nn.Linear(1, 1), tmp_path / "notes.txt")
    path = tmp_path / "list.pth"
    torch.save([torch.zeros(1)], path)
    with pytest.raises(CheckpointError, match="not a state_dict"):
        load_checkpoint(nn.Linear(1, 1), path)


@pytest.mark.parametrize("prefix", ["", "module."])
def test_state_dict_wrapper_is_unwrapped(tmp_path, prefix):
    """Mutant: a ``{"state_dict": ...}`` wrapper (timm's train.py, PyTorch Lightning) that is not
    unwrapped; only ``{"model": ...}`` was tested."""
    source = vit_scratch.randomize_weights_(
        vit_scratch.create_model(TINY, img_size=32, depth=1, num_classes=3), seed=4)
    path = tmp_path / "train_state.pth"
    torch.save({"state_dict": {prefix + k: v for k, v in source.state_dict().items()},
                "epoch": 7, "arch": TINY}, path)
    target = vit_scratch.create_model(TINY, img_size=32, depth=1, num_classes=3)
    load_checkpoint(target, path)
    for k, v in source.state_dict().items():
        assert torch.equal(target.state_dict()[k], v), k
    assert set(vit_scratch.read_state_dict(path)) == set(source.state_dict())


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


@pytest.mark.parametrize("name", ["coat_lite_tiny", "coat_tiny"])
def test_safetensors_round_trip_with_shared_tensors(tmp_path, name):
    from safetensors import safe_open

    kwargs = dict(small_kwargs(name), num_classes=5)  # one block per scale (and parallel block)
    _, source = make_pair(name, seed=2, **kwargs)  # ours, with timm's weights
    path = tmp_path / f"{name}.safetensors"
    vit_scratch.save_checkpoint(source, path)  # safetensors alone refuses shared memory
    with safe_open(str(path), "pt") as f:
        stored = set(f.keys())
    sd = source.state_dict()
    assert stored == set(sd) and len({t.data_ptr() for t in sd.values()}) < len(sd)  # aliases
    fresh = vit_scratch.create_model(name, **kwargs).eval()
    vit_scratch.load_checkpoint(fresh, path)
    for k, v in sd.items():
        assert torch.equal(fresh.state_dict()[k], v), k
    assert fresh.serial_blocks2[0].cpe is fresh.cpe2  # loading kept the sharing
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(fresh(x), source(x))
    # the file drives the NumPy room too
    file_params = vit_scratch.state_dict_to_numpy(vit_scratch.read_state_dict(path))
    np_model = vit_scratch.create_numpy_model(name, file_params, **kwargs)
    with torch.no_grad():
        assert max_abs_diff(np_model(x.numpy()), source(x)) < 1e-4
    # a file that stores each shared tensor once (safetensors' save_model writes such files)
    # loads in both rooms: the aliases are filled in
    from safetensors.torch import save_file

    aliases = {k for group in lookup(name)[0].spec.shared_keys(source.cfg) for k in group[1:]}
    save_file({k: v.clone() for k, v in sd.items() if k not in aliases}, tmp_path / "once.st")
    once = vit_scratch.load_checkpoint(vit_scratch.create_model(name, **kwargs).eval(),
                                       tmp_path / "once.st")
    np_once = vit_scratch.create_numpy_model(
        name, {k: v for k, v in file_params.items() if k not in aliases}, **kwargs)
    with torch.no_grad():
        assert torch.equal(once(x), source(x))
        assert max_abs_diff(np_once(x.numpy()), source(x)) < 1e-4


def test_official_checkpoint_with_unused_norms_loads(tmp_path):
    """The official CoaT-Lite release carries norm1/norm2/norm3 that the model never uses."""
    source, _ = make_pair("coat_lite_tiny", seed=4, img_size=32, serial_depths=(1, 1, 1, 1))
    sd = dict(source.state_dict())
    for n in ("norm1", "norm2", "norm3"):
        sd[f"{n}.weight"], sd[f"{n}.bias"] = torch.ones(320), torch.zeros(320)
    torch.save({"model": sd}, tmp_path / "official.pth")
    fresh = vit_scratch.load_checkpoint(vit_scratch.create_model(
        "coat_lite_tiny", img_size=32, serial_depths=(1, 1, 1, 1)), tmp_path / "official.pth")
    assert torch.equal(fresh.norm4.weight, source.norm4.weight)


# --- position grids --------------------------------------------------------------------------------


def test_resize_pos_embed_identity_and_numpy():
    pe = np.random.default_rng(0).standard_normal((1, 1 + 16, 8)).astype(np.float32)
    same = resize_pos_embed(pe, (4, 4))
    assert isinstance(same, np.ndarray)
    np.testing.assert_array_equal(same, pe)
    bigger = resize_pos_embed(pe, (8, 8))
    assert isinstance(bigger, np.ndarray) and bigger.shape == (1, 65, 8)
    # a constant grid stays constant under interpolation (the weights sum to 1)
    const = np.ones((1, 1 + 16, 8), dtype=np.float32)
    np.testing.assert_allclose(resize_pos_embed(const, (6, 10)), 1.0, atol=1e-6)
    with pytest.raises(ValueError, match="not a square grid"):
        resize_pos_embed(np.zeros((1, 1 + 12, 8)), (4, 4))


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


@pytest.mark.parametrize("recorded", [True, False])
def test_a_distillation_token_on_one_side_only_is_named(tmp_path, recorded):
    """A distilled checkpoint for a plain model, or the reverse: the message names DeiT's
    distillation token and the setting that builds the other model -- not the position grid
    the file records (it differs by that token alone), whether the file records it or not (a
    file of timm's own does not)."""
    from safetensors.torch import save_file

    from vit_scratch.weights import load_pretrained

    for distilled in (True, False):
        source = vit_scratch.create_model("vit_digits", distilled=distilled)
        path = tmp_path / f"distilled_{distilled}.safetensors"
        if recorded:
            save_checkpoint(source, path)
        else:
            save_file({k: v.contiguous() for k, v in source.state_dict().items()}, str(path))
        target = vit_scratch.create_model("vit_digits", distilled=not distilled)
        expected = ("holds a distilled model (dist_token, head_dist.weight, head_dist.bias: "
                    "DeiT's distillation token and its head), but the VisionTransformer has no "
                    "distillation token; build it with distilled=True") if distilled else (
                    "holds a model without a distillation token, but the "
                    "VisionTransformerDistilled has one")
        for load in (load_checkpoint, load_pretrained):
            with pytest.raises(CheckpointError) as info:
                load(target, path)
            assert expected in str(info.value) and "pos_embed" not in str(info.value)


def test_resize_pos_embed_arguments():
    pe = torch.randn(1, 1 + 16, 8)
    with pytest.raises(ValueError, match="mode must be one of"):
        vit_scratch.resize_pos_embed(pe, (6, 6), mode="lanczos")
    nearest = vit_scratch.resize_pos_embed(pe, (8, 8), mode="nearest")  # antialias: n/a, not an error
    grid = pe[0, 1:].reshape(4, 4, 8)
    assert torch.equal(nearest[0, 1:].reshape(8, 8, 8)[::2, ::2], grid)


# --- files that would load wrong -------------------------------------------------------------------


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


# --- the weight helpers ----------------------------------------------------------------------------


def test_state_dict_to_numpy_handles_low_precision():
    sd = {"a": torch.ones(2, dtype=torch.bfloat16), "b": torch.ones(2, requires_grad=True)}
    out = vit_scratch.state_dict_to_numpy(sd)
    assert out["a"].dtype == np.float32 and out["b"].dtype == np.float32
    assert vit_scratch.state_dict_to_numpy(sd, dtype=np.float64)["a"].dtype == np.float64


def test_randomize_weights_touches_every_parameter():
    model = vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, depth=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    vit_scratch.randomize_weights_(model, seed=0)
    for k, v in model.state_dict().items():
        assert not torch.equal(v, before[k]), k
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = vit_scratch.randomize_weights_(
            vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, depth=2), seed=0)
    for k, v in again.state_dict().items():
        assert torch.equal(v, model.state_dict()[k]), k  # deterministic for a seed


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




# --- the model a file records, as JSON; back to timm -----------------------------------------------

TIMM_CASES = [("vit_digits", {}), ("cait_digits", {}),
              ("cait_xxs24_224", dict(img_size=32, depth=2)),
              ("coat_lite_digits", dict(img_size=32, patch_size=4, in_chans=3)),
              ("coat_digits", dict(img_size=32, patch_size=4)),
              ("coat_lite_digits", dict(img_size=32, patch_size=4,
                                        parallel_mode="cross_attention"))]


@pytest.mark.parametrize("name, kwargs", TIMM_CASES)
def test_timm_kwargs_build_timms_model_with_the_same_logits(tmp_path, name, kwargs):
    """The config is JSON in the file's metadata, and ``timm.create_model(**timm_kwargs(path))``
    builds timm's model and loads the file into it: the same logits.  CaiT's
    ``class_token_in_keys`` and CoaT's ``parallel_mode`` are not passed to timm, which takes
    neither (CoaT-Lite's parallel_mode changes nothing, whatever it holds)."""
    import json

    import timm

    from vit_scratch.weights import read_metadata

    model = vit_scratch.randomize_weights_(vit_scratch.create_model(name, num_classes=3, **kwargs))
    path = tmp_path / "model.safetensors"
    save_checkpoint(model, path, class_names=["a", "b", "c"])
    recorded = json.loads(read_metadata(path)["model_config"])  # JSON, not a Python repr
    assert recorded["num_classes"] == 3
    timm_args = vit_scratch.timm_kwargs(path)
    assert timm_args["checkpoint_path"] == str(path)
    assert "class_token_in_keys" not in timm_args and "parallel_mode" not in timm_args
    oracle = timm.create_model(**timm_args).eval()
    x = torch.randn(2, *model.pretrained_cfg["input_size"],
                    generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert max_abs_diff(oracle(x), model.eval()(x)) < 1e-5


@pytest.mark.parametrize("name, kwargs, needle", [
    ("cait_digits", dict(class_token_in_keys=False),
     "class_token_in_keys=False: timm has no such model"),
    ("coat_digits", dict(img_size=32, patch_size=4, parallel_mode="cross_attention"),
     "parallel_mode='cross_attention': timm has no such model"),
    ("coat_lite_digits", {}, "patch_size=1: timm has no such model"),
])
def test_timm_kwargs_refuse_what_timm_has_no_model_for(tmp_path, name, kwargs, needle):
    path = tmp_path / "model.safetensors"
    save_checkpoint(vit_scratch.create_model(name, **kwargs), path)
    with pytest.raises(ValueError, match=re.escape(needle)):
        vit_scratch.timm_kwargs(path)
    bare = tmp_path / "bare.safetensors"
    save_checkpoint(vit_scratch.create_model(name, **kwargs).state_dict(), bare)
    with pytest.raises(CheckpointError, match="does not record its model"):
        vit_scratch.timm_kwargs(bare)


def test_a_config_recorded_as_a_python_literal_still_reads(tmp_path):
    """Files whose metadata holds the config as ``repr`` of a dict (tuples, int keys) read the
    same as JSON ones."""
    import dataclasses

    from safetensors.torch import save_file

    from vit_scratch.weights import read_metadata, read_model_info

    model = vit_scratch.create_model("coat_lite_digits", num_classes=3)
    path = tmp_path / "new.safetensors"
    save_checkpoint(model, path)
    old = tmp_path / "old.safetensors"
    metadata = {**read_metadata(path),
                "model_config": repr(dataclasses.asdict(model.cfg))}
    save_file({k: v.contiguous().clone() for k, v in model.state_dict().items()}, str(old),
              metadata=metadata)
    new_info, old_info = read_model_info(path), read_model_info(old)
    assert new_info["model_config"]["crpe_window"] == {3: 2, 5: 2}  # int keys from JSON
    assert vit_scratch.get_config("coat_lite_digits", **new_info["model_config"]) == \
        vit_scratch.get_config("coat_lite_digits", **old_info["model_config"]) == model.cfg
