"""Other input sizes, position-embedding resizing and checkpoint files."""
import pickle
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import vit_scratch
from helpers import make_pair, max_abs_diff
from vit_scratch import CheckpointError, load_checkpoint, resize_pos_embed, save_checkpoint


@pytest.mark.parametrize("old,new", [((14, 14), (24, 24)), ((14, 14), (7, 7)),
                                     ((14, 14), (12, 20)), ((8, 12), (16, 6))])
def test_resize_pos_embed_matches_timm(old, new):
    from timm.layers import resample_abs_pos_embed

    pe = torch.randn(1, 1 + old[0] * old[1], 32, generator=torch.Generator().manual_seed(0))
    ours = resize_pos_embed(pe, new, old_grid=old)
    assert ours.shape == (1, 1 + new[0] * new[1], 32)
    assert torch.equal(ours[:, :1], pe[:, :1])  # the class token's entry is kept as it is
    expected = resample_abs_pos_embed(pe, list(new), list(old), num_prefix_tokens=1)
    assert max_abs_diff(ours, expected) <= 1e-6


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


@pytest.mark.parametrize("img_size", [384, (224, 160), 96])
def test_224_checkpoint_runs_at_other_sizes(tmp_path, img_size):
    """A 224 checkpoint loaded into a model of another size gives timm's answer for the same
    checkpoint (timm resizes with its own checkpoint filter)."""
    import timm
    from timm.models.vision_transformer import checkpoint_filter_fn

    source, _ = make_pair("deit_tiny_patch16_224", seed=3)
    path = tmp_path / "deit_tiny_224.safetensors"
    save_checkpoint(source, path)

    ours = load_checkpoint(vit_scratch.create_model("deit_tiny_patch16_224", img_size=img_size),
                           path).eval()
    oracle = timm.create_model("deit_tiny_patch16_224", img_size=img_size).eval()
    oracle.load_state_dict(checkpoint_filter_fn(source.state_dict(), oracle), strict=True)
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert max_abs_diff(ours(x), oracle(x)) <= 1e-5
    np_model = vit_scratch.create_numpy_model(
        "deit_tiny_patch16_224", vit_scratch.state_dict_to_numpy(ours.state_dict()),
        img_size=img_size)
    with torch.no_grad():
        assert max_abs_diff(np_model(x.numpy()), oracle(x)) <= 1e-4


def _official_style(sd):
    """How the official DeiT/CaiT releases ship: {'model': sd} saved from a DDP-wrapped model."""
    return {"model": {f"module.{k}": v for k, v in sd.items()}, "epoch": 300}


@pytest.mark.parametrize("suffix,wrap", [(".safetensors", False), (".pth", False),
                                         (".pth", True), (".bin", True)])
def test_checkpoint_round_trip(tmp_path, suffix, wrap):
    source, _ = make_pair("vit_tiny_patch16_224", seed=5, img_size=32, num_classes=3)
    path = tmp_path / f"ckpt{suffix}"
    if wrap:
        torch.save(_official_style(source.state_dict()), path)
    else:
        save_checkpoint(source, path)
    loaded = load_checkpoint(vit_scratch.create_model("vit_tiny_patch16_224", img_size=32,
                                                      num_classes=3), path)
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
    source, _ = make_pair("vit_tiny_patch16_224", seed=6, img_size=32)
    path = tmp_path / "in1k.safetensors"
    save_checkpoint(source, path)
    target = vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, num_classes=10)
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


def test_shared_modules_save_once_and_load_back(tmp_path):
    src = _Shared()
    nn.init.normal_(src.cpe.weight)
    path = tmp_path / "shared.safetensors"
    save_checkpoint(src, path)  # plain safetensors.save_file would refuse the shared tensors
    stored = vit_scratch.read_state_dict(path)
    assert set(stored) == {"cpe.weight", "cpe.bias", "head.weight", "head.bias"}
    dst = load_checkpoint(_Shared(), path)
    assert torch.equal(dst.block.cpe.weight, src.cpe.weight)
    assert dst.block.cpe is dst.cpe


def test_checkpoint_errors(tmp_path):
    # The format comes from the file's bytes, not its suffix (issue 10): a missing file is
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
