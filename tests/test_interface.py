"""Every registered name answers one model interface (timm's), in both rooms.

The interface is defined once (``vit_scratch.interface``, ``torch_nn/base.py``,
``numpy_nn/base.py``); these tests run it over ``list_models()``, on small models of each name
(``helpers.small_kwargs``, two blocks), so a new family is covered the moment it registers its
names.  Where timm has the same name, timm is the oracle: the same ``pretrained_cfg`` numbers
(read from timm's registry, no model built), the same ``no_weight_decay`` set, the same
intermediate features.
"""
import copy

import numpy as np
import pytest
import torch

import vit_scratch
from helpers import make_pair, max_abs_diff, small_kwargs, timm_names
from vit_scratch import interface

NAMES = vit_scratch.list_models()
TIMM_NAMES = timm_names()


def _kwargs(name: str) -> dict:
    """A small model of ``name`` with two blocks (the intermediate-feature tests take two)."""
    kwargs = small_kwargs(name)
    if hasattr(vit_scratch.get_config(name), "depth"):
        kwargs["depth"] = 2
    return kwargs


#: timm's coat_small takes no depth overrides (its builder passes them itself): its own depths.
TIMM_FIXED_DEPTHS = {"coat_small"}


def _timm_kwargs(name: str) -> dict:
    return dict(img_size=64) if name in TIMM_FIXED_DEPTHS else _kwargs(name)


def _images(model, batch=2, seed=0):
    c, h, w = model.pretrained_cfg["input_size"]
    return torch.randn(batch, c, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=NAMES)
def pair(request):
    """A small PyTorch model with random weights and the NumPy model with the same weights."""
    name = request.param
    model = vit_scratch.create_model(name, **_kwargs(name)).eval()
    vit_scratch.randomize_weights_(model, seed=0)
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(model.state_dict()), **_kwargs(name))
    return name, model, np_model


def test_attributes(pair):
    name, model, np_model = pair
    for m in (model, np_model):
        for attr in interface.ATTRIBUTES:
            assert hasattr(m, attr), f"{name}: {type(m).__name__} lacks {attr}"
        assert m.num_classes == m.cfg.num_classes
        assert m.num_features == np_model.num_features and m.embed_dim == np_model.embed_dim
        assert m.pretrained_cfg["input_size"] == (m.cfg.in_chans, *m.cfg.img_size)
        assert len(m.pretrained_cfg["mean"]) == len(m.pretrained_cfg["std"]) == m.cfg.in_chans
        assert m.pretrained_cfg["architecture"] == name
    for method in interface.TORCH_METHODS:
        assert callable(getattr(model, method, None)), f"{name}: no {method}"
    for attr in interface.TORCH_ATTRIBUTES:
        assert hasattr(model, attr), f"{name}: {type(model).__name__} lacks {attr}"
    assert model.in_chans == model.cfg.in_chans and model.head_hidden_size == model.num_features
    for method in interface.METHODS:
        assert callable(getattr(np_model, method, None)), f"{name}: NumPy model has no {method}"
    assert type(model).__name__ == type(np_model).__name__  # one class name in both rooms
    assert model.default_cfg is model.pretrained_cfg


def test_forward_head_and_pre_logits(pair):
    name, model, np_model = pair
    x = _images(model)
    with torch.no_grad():
        feats = model.forward_features(x)
        pooled = model.forward_head(feats, pre_logits=True)
        logits = model(x)
    assert pooled.shape == (2, model.num_features)
    assert logits.shape == (2, model.num_classes)
    heads = model.get_classifier()
    if isinstance(heads, tuple):  # DeiT's distilled models: each token its head, then the average
        expected = sum(head(feats[:, i]) for i, head in enumerate(heads)) / len(heads)
        assert max_abs_diff(expected, logits) < 1e-6
        assert max_abs_diff(feats[:, :len(heads)].mean(1), pooled) < 1e-6
    else:
        assert max_abs_diff(heads(pooled), logits) < 1e-6
    np_feats = np_model.forward_features(x.numpy())
    assert max_abs_diff(np_model.forward_head(np_feats, pre_logits=True), pooled) < 1e-4
    assert max_abs_diff(np_model(x.numpy()), logits) < 1e-4


def test_reset_classifier(pair):
    name, model, _ = pair
    model = copy.deepcopy(model)  # the module-scoped fixture stays untouched
    x = _images(model)
    model.reset_classifier(5)
    assert model.num_classes == 5 and model.cfg.num_classes == 5
    assert model.pretrained_cfg["num_classes"] == 5
    heads = model.get_classifier()
    assert all(head.out_features == 5 for head in (heads if isinstance(heads, tuple) else [heads]))
    with torch.no_grad():
        assert model(x).shape == (2, 5)
    model.reset_classifier(0)
    with torch.no_grad():
        assert model(x).shape == (2, model.num_features)
    with pytest.raises(ValueError, match="num_classes must be an int >= 0, got -1"):
        model.reset_classifier(-1)


def test_no_weight_decay_names_real_parameters(pair):
    name, model, _ = pair
    skip = model.no_weight_decay()
    params = dict(model.named_parameters())
    assert skip and skip <= set(params), skip - set(params)
    assert all("token" in k or "pos_embed" in k for k in skip)


def test_intermediates_both_rooms(pair):
    name, model, np_model = pair
    x = _images(model)
    with torch.no_grad():
        final, maps = model.forward_intermediates(x)
        last_two = model.get_intermediate_layers(x, n=2, reshape=True)
        tokens = model.forward_intermediates(x, indices=[0, -1], output_fmt="NLC",
                                             intermediates_only=True)
        assert max_abs_diff(final, model.forward_features(x)) < 1e-6
    assert len(maps) == len(model.feature_info)
    for m, info in zip(maps, model.feature_info):
        assert m.shape[:2] == (2, info["num_chs"])
        assert m.shape[2] == model.cfg.img_size[0] // info["reduction"]
    assert len(last_two) == 2 and max_abs_diff(last_two[-1], maps[-1]) < 1e-6
    assert tokens[0].ndim == 3 and tokens[0].shape[-1] == maps[0].shape[1]
    np_final, np_maps = np_model.forward_intermediates(x.numpy())
    assert max_abs_diff(np_final, final) < 1e-4
    for a, b in zip(np_maps, maps):
        assert max_abs_diff(a, b) < 1e-4
    with pytest.raises(ValueError, match="indices"):
        model.forward_intermediates(x, indices=len(maps) + 1)
    with pytest.raises(ValueError, match="output_fmt"):
        model.forward_intermediates(x, output_fmt="NHWC")


def test_attention_maps_and_grids_both_rooms(pair):
    name, model, np_model = pair
    x = _images(model)
    with torch.no_grad():
        maps = model.get_attention_maps(x)
        grids = model.get_attention_grids(x)
    np_maps = np_model.get_attention_maps(x.numpy())
    np_grids = np_model.get_attention_grids(x.numpy())
    assert len(maps) == len(grids) == len(np_maps) == len(np_grids) > 0
    for a, b in zip(maps, np_maps):
        assert max_abs_diff(a, b) < 1e-4
    for g, g_np in zip(grids, np_grids):
        assert g.ndim == 4 and g.shape[0] == 2 and torch.isfinite(g).all()
        assert max_abs_diff(g, g_np) < 1e-4
    # recording is switched off again: the normal forward is untouched
    assert all(not m.record_attention and m.recorded is None for m in model.attention_modules())


@pytest.mark.parametrize("name", TIMM_NAMES)
def test_pretrained_cfg_matches_timm(name):
    """The numbers of the preprocessing, and the keys timm's own tests read (the weights'
    tag: timm's cfg of ``name.tag``); ``fixed_input_size`` differs for CoaT on purpose (ours
    takes any multiple of the total stride)."""
    from timm.models import get_pretrained_cfg

    ours = vit_scratch.get_pretrained_cfg(name)
    theirs = get_pretrained_cfg(f"{name}.{ours['tag']}").to_dict()  # timm's registry: no model
    for key in ("input_size", "mean", "std", "crop_pct", "interpolation", "num_classes"):
        assert tuple(np.atleast_1d(ours[key])) == tuple(np.atleast_1d(theirs[key])), key
    for key in ("first_conv", "classifier", "pool_size", "crop_mode", "tag", "license",
                "hf_hub_id"):
        assert ours[key] == theirs[key], key
    assert ours["fixed_input_size"] is (theirs["fixed_input_size"] and "coat" not in name)


@pytest.mark.parametrize("name", TIMM_NAMES)
def test_interface_matches_timm(name):
    """Same weights, same answers: no_weight_decay, pre-logits, intermediate feature maps."""
    oracle, ours = make_pair(name, seed=3, **_timm_kwargs(name))
    assert ours.no_weight_decay() == oracle.no_weight_decay() & set(dict(ours.named_parameters()))
    assert ours.num_features == oracle.num_features
    x = _images(ours, seed=4)
    with torch.no_grad():
        assert max_abs_diff(ours.forward_head(ours.forward_features(x), pre_logits=True),
                            oracle.forward_head(oracle.forward_features(x), pre_logits=True)) < 1e-5
        for kwargs in (dict(), dict(indices=2, norm=True), dict(indices=[0], output_fmt="NLC")):
            if kwargs.get("output_fmt") == "NLC" and not name.startswith(("vit_", "deit_")):
                continue  # timm offers NLC for ViT only
            final, maps = ours.forward_intermediates(x, **kwargs)
            final_t, maps_t = oracle.forward_intermediates(x, **kwargs)
            assert max_abs_diff(final, final_t) < 1e-5
            assert len(maps) == len(maps_t)
            for a, b in zip(maps, maps_t):
                assert max_abs_diff(a, b) < 1e-5


def test_forward_features_and_head():
    model = vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, num_classes=0).eval()
    x = torch.randn(2, 3, 32, 32)
    feats = model.forward_features(x)
    assert feats.shape == (2, 5, 192)
    assert torch.equal(model(x), feats[:, 0])  # num_classes=0: the class token's features


# --- DeiT's distilled models ------------------------------------------------------------------

DISTILLED = vit_scratch.list_models("deit_*distilled*")


def test_the_distilled_names_are_timms():
    import timm

    assert DISTILLED == timm.list_models("deit_*distilled*") == [
        "deit_base_distilled_patch16_224", "deit_base_distilled_patch16_384",
        "deit_small_distilled_patch16_224", "deit_tiny_distilled_patch16_224"]
    for name in DISTILLED:
        assert vit_scratch.get_pretrained_cfg(name)["classifier"] == ("head", "head_dist")
        assert vit_scratch.get_config(name).distilled


def test_distilled_model_answers_as_timms():
    """forward_features puts both tokens first; in training mode with set_distilled_training the
    model returns both heads' logits (timm's pair), otherwise -- training without it, or eval --
    their average; the NumPy twin gives the same features, average and pair."""
    kwargs = dict(img_size=32, depth=2)
    oracle, ours = make_pair("deit_tiny_distilled_patch16_224", seed=5, **kwargs)
    np_model = vit_scratch.create_numpy_model(
        "deit_tiny_distilled_patch16_224", vit_scratch.state_dict_to_numpy(ours.state_dict()),
        **kwargs)
    x = _images(ours, seed=6)
    assert ours.num_prefix_tokens == oracle.num_prefix_tokens == np_model.num_prefix_tokens == 2
    assert ours.distilled_training is oracle.distilled_training is False
    assert [type(h).__name__ for h in ours.get_classifier()] == ["Linear", "Linear"]
    with torch.no_grad():
        feats, feats_t = ours.forward_features(x), oracle.forward_features(x)
        assert feats.shape == (2, 2 + 4, 192) and max_abs_diff(feats, feats_t) < 1e-5
        average = ours(x)
        assert max_abs_diff(average, (ours.head(feats[:, 0]) + ours.head_dist(feats[:, 1])) / 2) < 1e-6
        assert max_abs_diff(average, oracle(x)) < 1e-5
        assert torch.equal(ours.train()(x), ours.eval()(x))  # training, not distilled: the average
        for m in (ours, oracle):
            m.set_distilled_training(True)
            m.train()
        pair, pair_t = ours(x), oracle(x)
        assert isinstance(pair, tuple) and len(pair) == 2
        assert max_abs_diff(pair, pair_t) < 1e-5
        assert max_abs_diff((pair[0] + pair[1]) / 2, average) < 1e-6
        assert max_abs_diff(pair[0], pair[1]) > 1e-3  # two heads on two tokens
        assert torch.equal(ours.eval()(x), average)  # eval: the average again
    assert max_abs_diff(np_model.forward_features(x.numpy()), feats) < 1e-4
    assert max_abs_diff(np_model(x.numpy()), average) < 1e-4
    np_model.set_distilled_training(True)
    np_pair, _ = np_model.forward_with_cache(x.numpy())
    assert max_abs_diff(np_pair, pair) < 1e-4
    assert max_abs_diff(np_model(x.numpy()), average) < 1e-4  # inference stays the average


def test_distilled_class_follows_the_config():
    from vit_scratch.numpy_nn import vit as np_vit
    from vit_scratch.torch_nn import vit as torch_vit

    small = dict(img_size=32, depth=1, num_classes=3)
    plain = vit_scratch.create_model("vit_tiny_patch16_224", distilled=True, **small)
    assert type(plain) is torch_vit.VisionTransformerDistilled
    assert "dist_token" in plain.state_dict() and plain.pos_embed.shape == (1, 2 + 4, 192)
    assert type(vit_scratch.create_model("deit_tiny_distilled_patch16_224", distilled=False,
                                         **small)) is torch_vit.VisionTransformer
    assert type(torch_vit.VisionTransformerDistilled(embed_dim=24, num_heads=2, **small)) is \
        torch_vit.VisionTransformerDistilled  # the class alone is distilled, as timm's
    cfg = vit_scratch.get_config("deit_tiny_distilled_patch16_224", **small)
    with pytest.raises(ValueError, match="distilled=True is built by VisionTransformerDistilled, "
                                         "not VisionTransformer"):
        torch_vit.VisionTransformer(cfg)
    params = vit_scratch.state_dict_to_numpy(plain.state_dict())
    with pytest.raises(ValueError, match="distilled=True is built by VisionTransformerDistilled"):
        np_vit.VisionTransformer(cfg, params)
    with pytest.raises(ValueError, match="distilled=False is built by VisionTransformer, not "
                                         "VisionTransformerDistilled"):
        torch_vit.VisionTransformerDistilled(cfg.replace(distilled=False))
    assert vit_scratch.models.family_of(type(plain)) is vit_scratch.models.lookup(
        "vit_tiny_patch16_224")[0]  # the subclass is the ViT family's


# --- a checkpoint rebuilt in timm, with its preprocessing ----------------------------------------


@pytest.mark.parametrize("name, kwargs", [
    ("vit_digits", dict(depth=1, num_classes=3)),         # grey, 24 px, mean 0, std 1, bilinear
    ("deit_tiny_patch16_224", dict(img_size=32, depth=1, num_classes=3)),  # ImageNet's, bicubic
    ("coat_lite_digits", dict(img_size=32, patch_size=4, num_classes=3)),
])
def test_timm_rebuilds_a_checkpoint_with_its_preprocessing(tmp_path, name, kwargs):
    """``timm.create_model(**timm_kwargs(path))`` carries the file's preprocessing
    (``pretrained_cfg_overlay``): timm's ``resolve_data_config`` reads our input size, mean,
    std, crop_pct and interpolation, and a photo through timm's ``create_transform`` and timm's
    model gives the logits of ours through ``vit_scratch.data.preprocess``."""
    import timm
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    from matplotlib import cbook
    from vit_scratch.data import preprocess

    model = vit_scratch.randomize_weights_(vit_scratch.create_model(name, **kwargs)).eval()
    path = tmp_path / "model.safetensors"
    vit_scratch.save_checkpoint(model, path, class_names=["a", "b", "c"])
    oracle = timm.create_model(**vit_scratch.timm_kwargs(path)).eval()
    config = resolve_data_config({}, model=oracle)
    ours = model.pretrained_cfg
    assert config == {k: ours[k] for k in ("input_size", "interpolation", "mean", "std",
                                           "crop_pct", "crop_mode")}
    picture = Image.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    picture = picture.convert("L" if ours["input_size"][0] == 1 else "RGB")
    with torch.no_grad():
        theirs = oracle(create_transform(**config)(picture)[None])
        mine = model(torch.from_numpy(preprocess(picture, model))[None])
    assert theirs.abs().max() > 1e-2 and max_abs_diff(theirs, mine) < 1e-5


@pytest.mark.parametrize("metadata, needle", [
    (dict(model_name="vit_gigantic_patch14_224", model_config="{}"),
     "unknown model name 'vit_gigantic_patch14_224'"),
    (dict(model_name="vit_digits", model_config='{"depth": 1, "register_tokens": 4}'),
     "unknown argument(s) 'register_tokens' for ViTConfig"),
])
def test_timm_kwargs_name_the_file_whose_model_is_unknown(tmp_path, metadata, needle):
    from safetensors.torch import save_file

    from vit_scratch import CheckpointError

    path = tmp_path / "other_version.safetensors"
    save_file({"w": torch.zeros(1)}, str(path), metadata=metadata)
    with pytest.raises(CheckpointError) as error:
        vit_scratch.timm_kwargs(path)
    assert str(error.value).startswith(f"checkpoint file {str(path)!r}: its metadata does not "
                                       f"describe a model of this library (")
    assert needle in str(error.value) and "\n" not in str(error.value)
