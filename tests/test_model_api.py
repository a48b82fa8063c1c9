"""The parts of timm's model interface that timm's own test suite asks of our models
(tests/test_timm_suite.py runs that suite), checked here on small models against independent
computations and against timm: gradient checkpointing (equal gradients), TorchScript and
torch.fx (equal outputs), the first convolution adapted to other ``in_chans``, pooling,
feature extraction, pruning, resizing, the factory's keywords, ``group_matcher``.
"""
import copy

import numpy as np
import pytest
import torch

import vit_scratch
from helpers import CAIT_SMALL, COAT_SMALL, make_pair, max_abs_diff
from vit_scratch.torch_nn.base import UnsupportedPool
from vit_scratch.torch_nn.features import FeatureGetter
from vit_scratch.torch_nn.patch_embed import adapt_input_conv

#: A small model of each architecture (CoaT-Lite and CoaT differ: parallel blocks), with
#: stochastic depth so that training-mode passes are random.
SMALL = {
    "vit_tiny_patch16_224": dict(img_size=32, patch_size=8, embed_dim=24, depth=3, num_heads=2,
                                 num_classes=5, drop_path_rate=0.2),
    "cait_xxs24_224": dict(CAIT_SMALL, drop_path_rate=0.2),
    "coat_lite_tiny": dict(img_size=64, embed_dims=(16, 16, 24, 32), serial_depths=(1, 2, 1, 1),
                           mlp_ratios=(2, 2, 2, 2), num_classes=5, drop_path_rate=0.2),
    "coat_tiny": dict(COAT_SMALL, drop_path_rate=0.2),
}
NAMES = list(SMALL)


def small(name, **kwargs):
    model = vit_scratch.create_model(name, **{**SMALL[name], **kwargs})
    return vit_scratch.randomize_weights_(model, seed=0)


def images(model, batch=2, seed=0, size=None):
    c, h, w = model.pretrained_cfg["input_size"]
    h, w = size or (h, w)
    return torch.randn(batch, c, h, w, generator=torch.Generator().manual_seed(seed))


# --- training ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_grad_checkpointing_recomputes_each_block_and_gives_equal_gradients(name, monkeypatch):
    """Training mode with stochastic depth: the same seed gives the same loss and the same
    gradients with and without checkpointing, and the blocks really are recomputed
    (torch.utils.checkpoint is called once per block)."""
    x = images(small(name))
    calls = []
    checkpoint = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint",
                        lambda fn, *a, **k: calls.append(fn) or checkpoint(fn, *a, **k))
    grads = []
    for enable in (False, True):
        model = small(name).train()
        model.set_grad_checkpointing(enable)
        torch.manual_seed(1)
        model(x).square().mean().backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
        if not enable:
            assert not calls
    blocks = [m for m in model.modules() if type(m).__name__ in ("Block", "LayerScaleBlock",
                                                                  "SerialBlock", "ParallelBlock")]
    assert len(calls) == len(blocks) > 0
    assert grads[0].keys() == grads[1].keys()
    for key, g in grads[0].items():
        assert g is not None and torch.allclose(g, grads[1][key], rtol=1e-5, atol=1e-7), key


# --- compiled and traced ------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
@pytest.mark.parametrize("name", NAMES)
def test_torchscript_and_fx_give_the_eager_logits(name):
    """TorchScript compiles the forward (the eager-only checks and branches left out) and
    torch.fx traces it (CoaT's token grids come from the input's shape); both give the eager
    logits, also at another input size for CoaT."""
    model = small(name).eval()
    x = images(model)
    with torch.no_grad():
        expected = model(x)
        scripted = torch.jit.script(model)
        traced = torch.fx.symbolic_trace(model)
        assert torch.allclose(scripted(x), expected, atol=1e-6)
        assert torch.allclose(traced(x), expected, atol=1e-6)
        if name.startswith("coat"):
            y = images(model, size=(96, 32))
            assert torch.allclose(scripted(y), model(y), atol=1e-6)
            assert torch.allclose(traced(y), model(y), atol=1e-6)


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_torchscript_refuses_cross_attention_at_run_time():
    model = small("coat_tiny", parallel_mode="cross_attention").eval()
    scripted = torch.jit.script(model)
    with pytest.raises(torch.jit.Error, match="interpolation mode only"):
        scripted(images(model))


def test_eager_models_still_check_their_images():
    model = small("vit_tiny_patch16_224").eval()
    with pytest.raises(ValueError, match="image size 48 does not match"):
        model(torch.zeros(1, 3, 48, 48))


# --- the first convolution for other input channels --------------------------------------------


@pytest.mark.parametrize("in_chans", [1, 2, 4, 6, 7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_adapt_input_conv_matches_timm(in_chans, dtype):
    from timm.models import adapt_input_conv as timm_adapt

    w = torch.randn(8, 3, 4, 4, generator=torch.Generator().manual_seed(in_chans)).to(dtype)
    ours = adapt_input_conv(w, in_chans)
    assert ours.dtype == dtype and ours.shape == (8, in_chans, 4, 4)
    assert torch.equal(ours, timm_adapt(in_chans, w.clone()))
    assert adapt_input_conv(w, 3) is w


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "coat_lite_tiny"])
@pytest.mark.parametrize("in_chans", [1, 6])
def test_rgb_weights_load_into_other_in_chans(name, in_chans, tmp_path):
    """RGB weights loaded into a grey (or 6-channel) model answer a grey image x (or [x; x]) as
    the RGB model answers x repeated on its three channels: the adapted first convolution sums
    the RGB weights (or repeats them at 3/6 the scale)."""
    rgb = small(name).eval()
    path = tmp_path / "rgb.safetensors"
    vit_scratch.save_checkpoint(rgb, path)
    other = vit_scratch.create_model(name, checkpoint_path=str(path),
                                     **{**SMALL[name], "in_chans": in_chans}).eval()
    assert other.in_chans == in_chans == other.pretrained_cfg["input_size"][0]
    grey = images(rgb, batch=2)[:, :1]
    with torch.no_grad():
        expected = rgb(grey.expand(-1, 3, -1, -1))
        got = other(grey.expand(-1, in_chans, -1, -1).contiguous())
    assert max_abs_diff(got, expected) < 1e-4
    with pytest.raises(vit_scratch.CheckpointError, match="patch_embed"):  # strict load: refused
        vit_scratch.load_checkpoint(vit_scratch.create_model(
            name, **{**SMALL[name], "in_chans": in_chans}), path)


# --- pooling, heads, pruning ----------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_global_pool(name):
    model = small(name, global_pool="avg").eval()
    assert model.global_pool == "avg"
    x = images(model)
    with torch.no_grad():
        feats = model.forward_features(x)
        pooled = model.forward_head(feats, pre_logits=True)
        scales = feats if isinstance(feats, list) else [feats]
        means = [f[:, model.num_prefix_tokens:].mean(1) for f in scales]
        if len(scales) == 3:  # CoaT: the means of scales 2-4, mixed by aggregate
            means = [model.aggregate(torch.stack(means, 1)).squeeze(1)]
        assert max_abs_diff(pooled, means[0]) < 1e-6
        assert pooled.shape[-1] == model.head_hidden_size == model.num_features
        if not name.startswith("coat"):
            model.reset_classifier(0, "")
            assert torch.equal(model(x), feats)  # no pooling, no head: the tokens
    with pytest.raises(UnsupportedPool, match="global_pool must be one of"):
        model.reset_classifier(3, "max")
    assert issubclass(UnsupportedPool, ValueError) and issubclass(UnsupportedPool, AssertionError)


@pytest.mark.parametrize("name", NAMES)
def test_prune_keeps_the_taps(name):
    """After prune_intermediate_layers(i), the taps are those of the whole model, forward runs,
    and training reaches every parameter that is left (CoaT: scale 1's tap drops the parallel
    blocks)."""
    model = small(name).eval()
    x = images(model)
    with torch.no_grad():
        taps = model.forward_intermediates(x, intermediates_only=True)
    for i in range(len(taps)):
        pruned = copy.deepcopy(model)
        kept = pruned.prune_intermediate_layers([i])
        assert kept == [i]
        with torch.no_grad():
            tap = pruned.forward_intermediates(x, indices=kept, intermediates_only=True)[0]
            assert torch.equal(tap, taps[i])
            out = pruned(x)
        assert out.shape[0] == 2 and pruned.num_classes == 0
        pruned.train()
        feats = pruned.forward_features(x)
        sum(f.sum() for f in (feats if isinstance(feats, list) else [feats])).backward()
        unused = [n for n, p in pruned.named_parameters() if p.grad is None]
        assert not unused or name == "coat_tiny", unused


def test_cait_pruned_loses_its_class_token():
    model = small("cait_xxs24_224").eval()
    model.prune_intermediate_layers([0])
    assert model.cls_token is None and model.blocks_token_only is None
    assert model.num_prefix_tokens == 0 and "cls_token" not in model.state_dict()
    with pytest.raises(AssertionError, match="needs a class token"):
        model.reset_classifier(0, "token")
    model.reset_classifier(0, "avg")
    x = images(model)
    with torch.no_grad():
        feats = model.forward_features(x)
        assert feats.shape[1] == model.patch_embed.num_patches
        assert torch.allclose(model(x), feats.mean(1))


# --- feature extraction ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_features_only(name):
    """features_only: timm's default maps (ViT, CaiT: the last three blocks; CoaT: the four
    scales), as forward_intermediates gives them, described by feature_info."""
    whole = small(name).eval()
    backbone = vit_scratch.create_model(name, features_only=True, **SMALL[name])
    backbone.load_state_dict({f"model.{k}": v for k, v in whole.state_dict().items()
                              if f"model.{k}" in backbone.state_dict()})
    assert isinstance(backbone, FeatureGetter)
    x = images(whole)
    n = 4 if name.startswith("coat") else 3
    with torch.no_grad():
        maps = backbone.eval()(x)
        expected = whole.forward_intermediates(x, indices=n, intermediates_only=True)
    assert len(maps) == n == len(backbone.feature_info.channels())
    for m, e, chs, red in zip(maps, expected, backbone.feature_info.channels(),
                              backbone.feature_info.reduction()):
        assert torch.equal(m, e)
        assert m.shape[1] == chs and m.shape[-1] == x.shape[-1] // red
    picked = vit_scratch.create_model(name, features_only=True, out_indices=(0, -1),
                                      **SMALL[name])
    assert len(picked.eval()(x)) == 2 and picked.out_indices[0] == 0
    with pytest.raises(ValueError, match="feature_cls"):
        vit_scratch.create_model(name, features_only=True, feature_cls="hook")


@pytest.mark.parametrize("name", NAMES)
def test_features_only_prunes_what_timm_prunes(name):
    """A backbone keeps exactly the parameters timm's keeps (``features_only=True``, the
    default maps and the first one): the final norm and the head are gone, and so are the
    blocks (CoaT: the scales) after the last map."""
    import timm

    kwargs = {k: v for k, v in SMALL[name].items() if k != "drop_path_rate"}
    if name == "cait_xxs24_224":
        kwargs["init_values"] = 0.1
    for out_indices in (None, (0,)):
        extra = {} if out_indices is None else dict(out_indices=out_indices)
        ours = vit_scratch.create_model(name, features_only=True, **kwargs, **extra)
        theirs = timm.create_model(name, features_only=True, **kwargs, **extra)
        assert set(ours.state_dict()) == set(theirs.state_dict()), out_indices
    assert not any(k.startswith(("model.norm.", "model.head.")) for k in ours.state_dict())


def test_feature_options_need_features_only():
    """``out_indices`` and ``feature_cls`` belong to the backbone: without
    ``features_only=True`` they are a ``TypeError`` saying why.  timm passes ``feature_cls``
    to the model class, which refuses it so, and drops ``out_indices`` without a word (a
    forgotten ``features_only=True`` then goes unnoticed); an empty ``out_indices`` asks for
    no map at all."""
    import timm

    kwargs = dict(img_size=32, depth=2)
    with pytest.raises(TypeError, match="unexpected keyword argument 'feature_cls'"):
        timm.create_model("vit_tiny_patch16_224", feature_cls="getter", **kwargs)
    for extra in (dict(out_indices=(1,)), dict(feature_cls="getter"),
                  dict(features_only=False, out_indices=(1,))):
        with pytest.raises(TypeError, match=r"without features_only=True: it is an option of "
                                            r"the backbone of feature maps"):
            vit_scratch.create_model("vit_tiny_patch16_224", **kwargs, **extra)
    vit_scratch.create_model("vit_tiny_patch16_224", out_indices=None, **kwargs)  # None: unset
    with pytest.raises(ValueError, match=r"^out_indices is empty: ask for at least one of the "
                                         r"2 feature maps \(None: all of them\)$"):
        vit_scratch.create_model("vit_tiny_patch16_224", features_only=True, out_indices=[],
                                 **kwargs)
    with pytest.raises(ValueError, match=r"^out_indices contains 4, but there are 4 feature "
                                         r"maps \(valid: -4\.\.3\)$"):
        vit_scratch.create_model("coat_lite_tiny", features_only=True, out_indices=[4],
                                 img_size=64)


# --- the input size -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "cait_xxs24_224"])
def test_set_input_size_and_dynamic_img_size(name, tmp_path):
    """set_input_size(48) gives what a model built at 48 with the checkpoint loaded gives (the
    position embedding resized the same way); dynamic_img_size resizes it on the fly, to the
    same logits, and takes other sizes; requires_grad survives the resize."""
    model = small(name).eval()
    model.pos_embed.requires_grad_(False)
    state = copy.deepcopy(model.state_dict())
    vit_scratch.save_checkpoint(model, tmp_path / "m.safetensors")
    built = vit_scratch.create_model(name, **{**SMALL[name], "img_size": 48}).eval()
    vit_scratch.load_checkpoint(built, tmp_path / "m.safetensors")
    dynamic = small(name, dynamic_img_size=True).eval()
    dynamic.load_state_dict(state)
    assert dynamic.pretrained_cfg["fixed_input_size"] is False
    model.set_input_size(img_size=48)
    assert model.pos_embed.requires_grad is False
    assert model.pretrained_cfg["input_size"][1:] == (48, 48) == model.patch_embed.img_size
    x = images(model, size=(48, 48))
    with torch.no_grad():
        assert max_abs_diff(model(x), built(x)) < 1e-6
        assert max_abs_diff(dynamic(x), built(x)) < 1e-5
        assert dynamic(images(model, size=(40, 24))).shape == (2, 5)
    with pytest.raises(ValueError, match="patch_size"):
        model.set_input_size(patch_size=4)


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "cait_xxs24_224"])
def test_dynamic_img_size_resizes_to_the_grid_of_a_non_square_input(name, tmp_path):
    """On a 40 × 24 input (a 5 × 3 grid of patches), ``dynamic_img_size`` gives the logits of
    the model built at 40 × 24 with the checkpoint loaded (its position embedding resized once,
    to 5 × 3); the 3 × 5 grid -- the same number of positions, transposed -- gives others.
    ViT: timm's ``dynamic_img_size`` model too."""
    from vit_scratch.torch_nn.patch_embed import resize_pos_embed

    model = small(name).eval()
    vit_scratch.save_checkpoint(model, tmp_path / "m.safetensors")
    dynamic = small(name, dynamic_img_size=True).eval()
    dynamic.load_state_dict(model.state_dict())
    built = vit_scratch.create_model(name, **{**SMALL[name], "img_size": (40, 24)}).eval()
    vit_scratch.load_checkpoint(built, tmp_path / "m.safetensors")
    x = images(model, size=(40, 24))
    with torch.no_grad():
        got = dynamic(x)
        assert max_abs_diff(got, built(x)) < 1e-5
        prefix = model.pos_embed_prefix_tokens
        for grid, close in (((5, 3), True), ((3, 5), False)):
            pos = resize_pos_embed(model.pos_embed, grid, old_grid=(4, 4), num_prefix_tokens=prefix)
            assert torch.allclose(dynamic.position_embedding(x), pos, atol=1e-6) is close
    if name.startswith("vit"):
        oracle, ours = make_pair(name, **{**SMALL[name], "dynamic_img_size": True})
        with torch.no_grad():
            assert max_abs_diff(ours(x), oracle(x)) < 1e-5


# --- the factory and the metadata -----------------------------------------------------------------


def test_factory_keywords_device_dtype_and_tags():
    model = vit_scratch.create_model("vit_base_patch16_224", device="meta", dtype=torch.bfloat16)
    assert {p.device.type for p in model.parameters()} == {"meta"}
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    tagged = vit_scratch.create_model("deit_tiny_patch16_224.fb_in1k", device="meta")
    assert tagged.pretrained_cfg["tag"] == "fb_in1k"
    with pytest.raises(ValueError, match="the tag of its weights is 'fb_in1k'"):
        vit_scratch.create_model("deit_tiny_patch16_224.fb_dist_in1k")
    with pytest.raises(ValueError, match="dtype must be a floating-point"):
        vit_scratch.create_model("vit_tiny_patch16_224", dtype=torch.int8)
    with pytest.raises(ValueError, match="global_pool must be one of"):
        vit_scratch.create_model("coat_lite_tiny", global_pool="")
    with pytest.raises(TypeError):
        vit_scratch.create_model("vit_tiny_patch16_224", not_a_model_arg=1)


def test_pretrained_cfg_overlay_knows_timms_keys():
    import dataclasses

    from timm.models import PretrainedCfg

    assert set(vit_scratch.models.PRETRAINED_CFG_KEYS) == {
        f.name for f in dataclasses.fields(PretrainedCfg)}


def test_pretrained_cfg_overlay_loads_a_local_file_as_timm(tmp_path):
    """timm's idiom for published weights kept in a local file, ``pretrained=True,
    pretrained_cfg_overlay=dict(file=PATH)``: the file loads (strictly, the head adapted) in
    both rooms, as in timm, for a name with published weights and for one without."""
    import timm

    kwargs = dict(img_size=32, depth=1, num_classes=3)
    saved = vit_scratch.randomize_weights_(
        vit_scratch.create_model("deit_tiny_patch16_224", **kwargs), seed=3).eval()
    path = tmp_path / "weights.safetensors"
    vit_scratch.save_checkpoint(saved, path)
    overlay = dict(file=str(path), num_classes=3)  # timm keeps a head of the file's classes
    ours = vit_scratch.create_model("deit_tiny_patch16_224", pretrained=True,
                                    pretrained_cfg_overlay=overlay, **kwargs).eval()
    theirs = timm.create_model("deit_tiny_patch16_224", pretrained=True,
                               pretrained_cfg_overlay=overlay, **kwargs).eval()
    in_numpy = vit_scratch.create_numpy_model("deit_tiny_patch16_224", pretrained=True,
                                              pretrained_cfg_overlay=overlay, **kwargs)
    x = images(saved)
    with torch.no_grad():
        expected = saved(x)
        assert expected.abs().max() > 1e-2
        assert max_abs_diff(ours(x), expected) == 0 and max_abs_diff(theirs(x), expected) < 1e-5
    assert max_abs_diff(in_numpy(x.numpy()), expected) < 1e-4
    assert ours.pretrained_cfg["file"] == in_numpy.pretrained_cfg["file"] == str(path)
    digits = vit_scratch.randomize_weights_(vit_scratch.create_model("vit_digits", depth=1))
    vit_scratch.save_checkpoint(digits, tmp_path / "digits.safetensors")
    loaded = vit_scratch.create_model("vit_digits", depth=1, pretrained=True,
                                      pretrained_cfg_overlay=dict(file=str(tmp_path / "digits"
                                                                                      ".safetensors")))
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(),
                                                 digits.state_dict().values()))


def test_pretrained_cfg_overlay_gives_the_preprocessing_and_the_input_as_timm():
    """The overlay's entries replace the name's ``pretrained_cfg`` entries; its ``input_size``
    gives ``in_chans`` and ``img_size`` unless they are given (timm's rule): timm's
    ``resolve_data_config`` reads from our model what it reads from timm's, and
    ``vit_scratch.data.preprocess`` follows it."""
    import timm
    from PIL import Image
    from timm.data import resolve_data_config

    from vit_scratch.data import preprocess

    data = dict(input_size=(1, 32, 48), mean=(0.5,), std=(0.25,), crop_pct=1.0,
                interpolation="bilinear")
    ours = vit_scratch.create_model("vit_tiny_patch16_224", depth=1, pretrained_cfg_overlay=data)
    theirs = timm.create_model("vit_tiny_patch16_224", depth=1, pretrained_cfg_overlay=data)
    assert ours.cfg.in_chans == 1 and ours.cfg.img_size == (32, 48)
    assert theirs.patch_embed.proj.in_channels == 1 and theirs.patch_embed.img_size == (32, 48)
    assert resolve_data_config({}, model=ours) == resolve_data_config({}, model=theirs)
    picture = Image.fromarray((np.arange(64 * 96) % 256).astype(np.uint8).reshape(64, 96))
    resized = np.asarray(picture.resize((48, 32), Image.BILINEAR), dtype=np.float32)[None]
    assert np.allclose(preprocess(picture, ours), (resized / 255 - 0.5) / 0.25, atol=1e-6)
    numpy_model = vit_scratch.create_numpy_model(
        "vit_tiny_patch16_224", vit_scratch.state_dict_to_numpy(ours.state_dict()), depth=1,
        pretrained_cfg_overlay=data)
    assert numpy_model.pretrained_cfg == ours.pretrained_cfg


def test_a_checkpoint_keeps_the_preprocessing_of_its_overlay(tmp_path):
    """A model built with another preprocessing, saved, comes back with it (``load_model``:
    what ``predict``, ``evaluate`` and ``export`` read)."""
    from vit_scratch.run_folder import load_model

    data = dict(mean=(0.3, 0.3, 0.3), std=(0.2, 0.2, 0.2), crop_pct=0.8,
                interpolation="bilinear")
    model = vit_scratch.create_model("deit_tiny_patch16_224", img_size=32, depth=1,
                                     num_classes=2, pretrained_cfg_overlay=data)
    vit_scratch.save_checkpoint(model, tmp_path / "m.safetensors", class_names=["a", "b"])
    loaded = load_model(tmp_path / "m.safetensors")
    assert {k: loaded.pretrained_cfg[k] for k in data} == data
    assert loaded.pretrained_cfg == model.pretrained_cfg


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "coat_lite_tiny"])
def test_group_matcher_orders_every_parameter_like_timm(name):
    """Layer-wise learning-rate decay's groups (timm's group_parameters reads our matcher): the
    same groups as timm's, the head last, fewer with ``coarse``."""
    from timm.models._manipulate import group_parameters

    kwargs = dict(img_size=32, depth=3) if name.startswith("vit") else dict(img_size=64)
    oracle, ours = make_pair(name, **kwargs)
    groups = group_parameters(ours, ours.group_matcher(), reverse=True)
    assert set(groups) == {n for n, _ in ours.named_parameters()}
    assert groups == group_parameters(oracle, oracle.group_matcher(), reverse=True)
    assert groups["head.weight"] == max(groups.values()) > groups["norm4.weight" if "coat"
                                                               in name else "norm.weight"]
    coarse = group_parameters(ours, ours.group_matcher(coarse=True), reverse=True)
    assert len(set(coarse.values())) < len(set(groups.values()))


def test_forward_intermediates_keywords_match_timm():
    """stop_early, return_prefix_tokens and output_dict: timm's ViT is the oracle."""
    oracle, ours = make_pair("vit_tiny_patch16_224", img_size=32, depth=3)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        for kw in (dict(indices=[0], stop_early=True), dict(return_prefix_tokens=True),
                   dict(output_dict=True, return_prefix_tokens=True, indices=2)):
            a, b = ours.forward_intermediates(x, **kw), oracle.forward_intermediates(x, **kw)
            if isinstance(a, dict):
                assert a.keys() == b.keys()
                a, b = (a["image_features"], a["image_intermediates"],
                        a["image_intermediates_prefix"]), \
                    (b["image_features"], b["image_intermediates"],
                     b["image_intermediates_prefix"])
            flat = lambda t: [u for v in t for u in (flat(v) if isinstance(v, (list, tuple))  # noqa
                                                     else [v])]
            assert len(flat(a)) == len(flat(b))
            for u, v in zip(flat(a), flat(b)):
                assert max_abs_diff(u, v) < 1e-5
