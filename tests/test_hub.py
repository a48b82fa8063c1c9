"""Pretrained starting points, the timm way, tested offline: ``create_model(name,
pretrained=True)`` reads a Hugging Face cache that the test builds (random weights, small
configs) in the layout ``huggingface_hub`` reads with ``HF_HUB_OFFLINE=1``; and every file
``save_checkpoint`` writes loads into timm's model of the same name with ``strict=True``.
"""
import sys

import pytest
import torch

import vit_scratch
from helpers import max_abs_diff, small_kwargs, timm_names
from vit_scratch import CheckpointError, hub

#: One name per family, each with published weights (CoaT with parallel blocks: shared tensors).
NAMES = ["cait_xxs24_224", "coat_tiny", "deit_tiny_patch16_224"]
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def narrow_kwargs(name: str) -> dict:
    """``small_kwargs`` (fewer blocks, smaller images), 3 classes, and 8 channels per head."""
    cfg = vit_scratch.get_config(name)
    kwargs = dict(small_kwargs(name), num_classes=3)
    if hasattr(cfg, "embed_dims"):  # CoaT: the scales' widths keep their pattern (2-4 equal)
        kwargs["embed_dims"] = tuple(8 * max(1, round(d / 64)) for d in cfg.embed_dims)
    else:
        kwargs["embed_dim"] = 8 * cfg.num_heads
    return kwargs


#: The test's "published" files: small configs of those names, 5 classes.
KWARGS = {name: dict(narrow_kwargs(name), num_classes=5) for name in NAMES}


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A Hugging Face cache as ``hf_hub_download`` reads it: ``models--timm--REPO/refs/main``
    names a commit, ``snapshots/<commit>/model.safetensors`` is the file (random weights saved
    by ``save_checkpoint``).  Returns the cache folder and ``{name: file}``."""
    root = tmp_path_factory.mktemp("hf_cache")
    files = {}
    for seed, name in enumerate(NAMES):
        repo, filename = hub.hub_source(name)
        folder = root / f"models--{repo.replace('/', '--')}"
        (folder / "snapshots" / COMMIT).mkdir(parents=True)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(COMMIT)
        model = vit_scratch.create_model(name, **KWARGS[name])
        files[name] = folder / "snapshots" / COMMIT / filename
        vit_scratch.save_checkpoint(vit_scratch.randomize_weights_(model, seed=seed), files[name])
    return root, files


@pytest.fixture
def offline(monkeypatch):
    """``HF_HUB_OFFLINE=1``: huggingface_hub reads the variable when it is imported, so its
    constant is set too (it is read at every call)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return constants


def images(name: str, batch: int = 2) -> torch.Tensor:
    cfg = vit_scratch.get_config(name, **KWARGS[name])
    generator = torch.Generator().manual_seed(0)
    return torch.randn(batch, cfg.in_chans, *cfg.img_size, generator=generator)


@pytest.mark.parametrize("name", NAMES)
def test_pretrained_loads_the_cached_file_offline(hub_cache, offline, name):
    """pretrained=True, checkpoint_path=FILE and load_checkpoint give the same model; the NumPy
    room takes the same keywords."""
    root, files = hub_cache
    x = images(name)
    direct = vit_scratch.load_checkpoint(vit_scratch.create_model(name, **KWARGS[name]),
                                         files[name]).eval()
    pretrained = vit_scratch.create_model(name, pretrained=True, cache_dir=root,
                                          **KWARGS[name]).eval()
    from_file = vit_scratch.create_model(name, checkpoint_path=files[name], **KWARGS[name]).eval()
    np_model = vit_scratch.create_numpy_model(name, pretrained=True, cache_dir=root,
                                              **KWARGS[name])
    np_from_file = vit_scratch.create_numpy_model(name, checkpoint_path=files[name],
                                                  **KWARGS[name])
    with torch.no_grad():
        expected = direct(x)
        assert expected.abs().max() > 1e-2  # random weights, not an untouched init
        assert torch.equal(pretrained(x), expected)
        assert torch.equal(from_file(x), expected)
    assert max_abs_diff(np_model(x.numpy()), expected) < 1e-4
    assert max_abs_diff(np_from_file(x.numpy()), expected) < 1e-4
    fresh = vit_scratch.create_model(name, **KWARGS[name]).eval()
    with torch.no_grad():
        assert max_abs_diff(fresh(x), expected) > 1e-3  # pretrained=False: not the file


def test_a_head_for_other_classes_is_replaced_and_the_rest_loads_strictly(hub_cache, offline):
    root, files = hub_cache
    name = "deit_tiny_patch16_224"
    stored = vit_scratch.read_state_dict(files[name])
    with pytest.warns(UserWarning, match=r"its classifier head \(head.weight\) has 5 classes, the "
                                         r"model 3; loaded everything else strictly"):
        model = vit_scratch.create_model(name, pretrained=True, cache_dir=root,
                                         **dict(KWARGS[name], num_classes=3))
    for key, value in model.state_dict().items():
        if key.startswith("head."):
            assert value.shape[0] == 3, key
        else:
            assert torch.equal(value, stored[key]), key
    assert model.num_classes == 3 and model.pretrained_cfg["num_classes"] == 3
    # anything else that differs is refused, naming the keys
    with pytest.raises(CheckpointError, match="missing.*blocks.1"):
        vit_scratch.create_model(name, pretrained=True, cache_dir=root,
                                 **dict(KWARGS[name], depth=2))


def test_an_uncached_file_offline_says_what_to_download_by_hand(tmp_path, offline):
    with pytest.raises(FileNotFoundError) as info:
        vit_scratch.create_model("cait_xxs24_224", pretrained=True, cache_dir=tmp_path)
    text = str(info.value)
    for needle in ("offline mode is on (HF_HUB_OFFLINE=1)", str(tmp_path),
                   "model.safetensors of the repository timm/cait_xxs24_224.fb_dist_in1k",
                   "https://huggingface.co/timm/cait_xxs24_224.fb_dist_in1k/resolve/main/"
                   "model.safetensors",
                   "create_model('cait_xxs24_224', checkpoint_path='model.safetensors')"):
        assert needle in text, needle


@pytest.fixture
def unreachable(monkeypatch):
    """Online mode, with the Hub's address a local port that nothing listens on: every request
    fails at once, as on a machine without a network."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as s:  # a free port, closed again: connections to it are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    return constants


def test_an_unreachable_hub_falls_back_to_the_cache_at_once(hub_cache, unreachable, tmp_path,
                                                           caplog):
    """Without a network and without HF_HUB_OFFLINE=1: the cached file, and an uncached one
    refused, saying why -- after one failed request, without huggingface_hub's retries (a
    ``hf_hub_download`` alone retries for about half a minute and logs a line per try)."""
    import logging

    root, files = hub_cache
    name = "deit_tiny_patch16_224"
    caplog.set_level(logging.INFO)
    assert hub.download(name, cache_dir=root) == files[name]
    with pytest.raises(FileNotFoundError) as info:
        hub.download(name, cache_dir=tmp_path, option="--pretrained")
    text = str(info.value)
    assert text.startswith(f"--pretrained: the Hugging Face Hub ({unreachable.ENDPOINT}) "
                           f"could not be reached (")
    assert f"is not in the cache {str(tmp_path)!r}" in text and "--init model.safetensors" in text
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]


def test_names_without_weights_and_bad_combinations_fail_before_anything_loads(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # and nothing is downloaded
    with pytest.raises(ValueError, match="'vit_digits' has no published weights .timm publishes "
                                         "weights for cait_s24_224, "):
        vit_scratch.create_model("vit_digits", pretrained=True)
    with pytest.raises(ValueError, match="has no published weights"):
        vit_scratch.create_numpy_model("coat_digits", pretrained=True)
    with pytest.raises(ValueError, match="pretrained=True and checkpoint_path='w.safetensors' "
                                         "both say where the weights come from"):
        vit_scratch.create_model("deit_tiny_patch16_224", pretrained=True,
                                 checkpoint_path="w.safetensors")
    with pytest.raises(ValueError, match="pretrained must be"):
        vit_scratch.create_model("deit_tiny_patch16_224", pretrained="yes")
    with pytest.raises(ValueError, match="checkpoint_path must be a str or a path, got dict"):
        vit_scratch.create_model("deit_tiny_patch16_224", checkpoint_path={})
    with pytest.raises(ValueError, match="got NoneType; or load a file: checkpoint_path=FILE "
                                         "or pretrained=True"):
        vit_scratch.create_numpy_model("vit_digits")
    with pytest.raises(ValueError, match="give params, checkpoint_path or pretrained=True"):
        vit_scratch.create_numpy_model("vit_digits", {}, checkpoint_path="w.safetensors")
    # a name with weights, without the [hub] extra
    with pytest.raises(ModuleNotFoundError, match=r"pretrained=True .*needs huggingface_hub, "
                                                  r"which is not installed: pip install -e "
                                                  r"'\.\[hub\]'"):
        vit_scratch.create_model("deit_tiny_patch16_224", pretrained=True)


def test_every_timm_name_has_timms_repository_and_ours_have_none():
    from timm.models import get_pretrained_cfg

    assert hub.pretrained_names() == timm_names()  # the *_digits configs: no weights
    for name in timm_names():
        timm_cfg = get_pretrained_cfg(name)
        assert hub.hub_source(name) == (timm_cfg.hf_hub_id, "model.safetensors"), name
        assert timm_cfg.hf_hub_filename in (None, "model.safetensors")  # timm's default file
        assert vit_scratch.get_pretrained_cfg(name)["hf_hub_id"] == timm_cfg.hf_hub_id


# --- the trainer ---------------------------------------------------------------------------------


def test_trainer_starts_from_the_cached_weights(hub_cache, offline, monkeypatch):
    """--pretrained: the file from the (default) cache, with a new head for the data's 3
    classes; a learning rate of 1e-9 leaves the rest as the file has it."""
    from torch.utils.data import TensorDataset

    from vit_scratch.train import TrainSettings, train

    root, files = hub_cache
    monkeypatch.setattr(offline, "HF_HUB_CACHE", str(root))  # HF_HUB_CACHE, read at import
    name = "deit_tiny_patch16_224"
    x = torch.randn(12, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    data = TensorDataset(x, torch.arange(12) % 3)
    model_kwargs = {k: v for k, v in KWARGS[name].items() if k != "num_classes"}
    settings = TrainSettings(model=name, model_kwargs=model_kwargs,
                             pretrained=True, epochs=1, batch_size=6, lr=1e-9, weight_decay=0.0,
                             device="cpu", progress="off", threads=1, out=None)
    with pytest.warns(UserWarning, match=r"head \(head.weight\) has 5 classes, the model 3"):
        result = train(settings, log=lambda *_: None, datasets=(data, data, data))
    stored = vit_scratch.read_state_dict(files[name])
    for key, value in result["model"].state_dict().items():
        if not key.startswith("head."):
            torch.testing.assert_close(value, stored[key], rtol=0, atol=1e-6)


def test_trainer_without_the_cached_weights_offline_says_what_to_download(tmp_path, offline,
                                                                          monkeypatch):
    from vit_scratch.train import TrainSettings, train

    monkeypatch.setattr(offline, "HF_HUB_CACHE", str(tmp_path / "empty"))
    settings = TrainSettings(model="deit_tiny_patch16_224", pretrained=True, device="cpu",
                             progress="off", threads=1, out=str(tmp_path / "run"))
    with pytest.raises(FileNotFoundError, match=r"--pretrained: offline mode is on .* pass its "
                                                r"path: .* \(the trainer: --model "
                                                r"deit_tiny_patch16_224 --init model.safetensors"):
        train(settings, log=lambda *_: None)
    assert not list((tmp_path / "run").glob("*"))  # nothing written


@pytest.mark.parametrize("argv, needle", [
    (["--pretrained", "--init", "w.safetensors"], "--pretrained and --init 'w.safetensors' both"),
    (["--pretrained"], "--pretrained: --model vit_digits has no published weights; these names "
                       "have: cait_s24_224, "),
])
def test_trainer_refuses_bad_pretrained_combinations(argv, needle, tmp_path, capsys,
                                                     monkeypatch):
    from vit_scratch.train import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.safetensors").write_bytes(b"")  # exists: --init's own check passes
    with pytest.raises(SystemExit) as info:
        main([*argv, "--out", str(tmp_path / "run")])
    assert info.value.code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


# --- checkpoints that go back to timm ----------------------------------------------------------


def timm_model(name: str, **kwargs):
    """timm's model ``name`` with ``kwargs``; where timm's entry point fixes a field that kwargs
    change (``coat_small`` fixes ``serial_depths``), timm's class of that entry point, built
    with every field of our config that it takes."""
    import importlib
    import inspect

    import timm

    try:
        return timm.create_model(name, pretrained=False, **kwargs)
    except TypeError as error:
        assert "multiple values for keyword argument" in str(error), error
    cfg = vit_scratch.get_config(name, **kwargs)
    module = importlib.import_module(timm.models.model_entrypoint(name).__module__)
    cls = getattr(module, type(vit_scratch.create_model(name, **kwargs)).__name__)
    takes = inspect.signature(cls.__init__).parameters
    return cls(**{f: getattr(cfg, f) for f in takes if hasattr(cfg, f)})


@pytest.mark.parametrize("name", timm_names())
def test_saved_checkpoints_load_into_timm_strictly(tmp_path, name):
    """Every key, the aliases of CoaT's shared modules included: timm's model of the same name
    (the same small config) takes the file with ``load_state_dict(strict=True)`` and gives our
    logits."""
    from safetensors.torch import load_file

    kwargs = narrow_kwargs(name)
    ours = vit_scratch.randomize_weights_(vit_scratch.create_model(name, **kwargs), seed=4).eval()
    vit_scratch.save_checkpoint(ours, tmp_path / "ours.safetensors", class_names=list("abc"))
    theirs = timm_model(name, **kwargs).eval()
    theirs.load_state_dict(load_file(tmp_path / "ours.safetensors"), strict=True)
    x = torch.randn(2, 3, *ours.cfg.img_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = theirs(x)
        assert expected.abs().max() > 1e-2
        assert max_abs_diff(ours(x), expected) < 1e-5
    if name in NAMES:  # timm's own one-liner (docs/training.md), and a .pth file
        import timm

        again = timm.create_model(name, checkpoint_path=tmp_path / "ours.safetensors", **kwargs)
        vit_scratch.save_checkpoint(ours, tmp_path / "ours.pth")
        theirs.load_state_dict(torch.load(tmp_path / "ours.pth", weights_only=True), strict=True)
        with torch.no_grad():
            assert torch.equal(again.eval()(x), expected)
            assert torch.equal(theirs(x), expected)
