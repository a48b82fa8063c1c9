"""Bad input gets a clear error that names the parameter and the value, in both rooms: configs,
layers built by hand, images, NumPy params, the functional entry points and the figure helpers.
(Checkpoint files: ``test_checkpoints.py``; many more random cases: ``test_properties.py``.)
"""
import math
import re
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import vit_scratch
from helpers import float64_model, max_abs_diff, numpy_twin, one_name_per_family, small_pair
from vit_scratch import validation
from vit_scratch.data import normalize
from vit_scratch.numpy_nn import (attention as np_attn, class_attention as np_ca,
                                  layers as np_layers, layerscale as np_ls, patch_embed as np_pe)
from vit_scratch.specs.cait import cait_param_shapes, CaitConfig, layerscale_init_value
from vit_scratch.torch_nn import (attention as pt_attn, attention as t_attn,
                                  class_attention as pt_ca, layerscale as pt_ls)
from vit_scratch.torch_nn.attention import Attention
from vit_scratch.torch_nn.features import FeatureGetter
from vit_scratch.torch_nn.layers import DropPath, Mlp
from vit_scratch.torch_nn.patch_embed import PatchEmbed


# --- configs ---------------------------------------------------------------------------------------


FAMILY_NAMES = one_name_per_family()


TINY = "vit_tiny_patch16_224"


SMALL = dict(img_size=32, depth=2)


@pytest.fixture(scope="module")
def tiny():
    model = vit_scratch.create_model(TINY, **SMALL).eval()
    vit_scratch.randomize_weights_(model, seed=0)
    np_model = vit_scratch.create_numpy_model(
        TINY, vit_scratch.state_dict_to_numpy(model.state_dict()), **SMALL)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    return model, np_model, x


@pytest.fixture(scope="module")
def small():
    """A small ViT in both rooms, with the same weights."""
    model = vit_scratch.create_model("vit_tiny_patch16_224", img_size=32).eval()
    params = vit_scratch.state_dict_to_numpy(model.state_dict())
    return model, vit_scratch.create_numpy_model("vit_tiny_patch16_224", params, img_size=32)


def test_image_size_not_divisible_by_patch_size():
    message = "image size 225 is not divisible by patch size 16 (img_size=225, patch_size=16)"
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_model("vit_tiny_patch16_224", img_size=225)
    with pytest.raises(ValueError, match=re.escape("image size (224, 100) is not divisible")):
        vit_scratch.create_model("vit_tiny_patch16_224", img_size=(224, 100))
    with pytest.raises(ValueError, match="image size 30 is not divisible by patch size 16"):
        np_pe.patchify(np.zeros((1, 3, 30, 30)), 16)


def test_embed_dim_not_divisible_by_num_heads():
    match = re.escape("embed_dim 100 is not divisible by num_heads 3")
    with pytest.raises(ValueError, match=match):
        vit_scratch.create_model("vit_tiny_patch16_224", embed_dim=100)
    with pytest.raises(ValueError, match=match):
        Attention(100, num_heads=3)
    with pytest.raises(ValueError, match=match):
        np_attn.split_heads(np.zeros((1, 4, 100)), 3)
    with pytest.raises(ValueError, match=re.escape("embed_dim 10 is not divisible by num_heads 4")):
        vit_scratch.create_numpy_model("vit_tiny_patch16_224", {}, embed_dim=10, num_heads=4)


def test_unknown_model_name_lists_known_ones():
    with pytest.raises(ValueError) as info:
        vit_scratch.create_model("vit_huge_patch14_224")
    message = str(info.value)
    assert "unknown model name 'vit_huge_patch14_224'" in message
    for name in vit_scratch.list_models():
        assert name in message
    known = ", ".join(vit_scratch.list_models())  # sorted, every family's names
    with pytest.raises(ValueError, match=re.escape(f"unknown model name 'nope'; known models: {known}")):
        vit_scratch.create_numpy_model("nope", {})


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="unknown argument\\(s\\) 'emb_dim' for ViTConfig; known: img_size"):
        vit_scratch.create_model("vit_tiny_patch16_224", emb_dim=192)


# --- the interface's switches and timm's factory keywords ------------------------------------------

#: Each switch of the interface, given the string 'False' (truthy: it would switch on).
SWITCHES = [
    ("forward_intermediates", dict(norm="False"), "norm"),
    ("forward_intermediates", dict(intermediates_only="False"), "intermediates_only"),
    ("forward_intermediates", dict(stop_early="False"), "stop_early"),
    ("forward_intermediates", dict(return_prefix_tokens="False"), "return_prefix_tokens"),
    ("forward_intermediates", dict(output_dict="False"), "output_dict"),
    ("get_intermediate_layers", dict(reshape="False"), "reshape"),
    ("get_intermediate_layers", dict(norm="False"), "norm"),
    ("prune_intermediate_layers", dict(prune_norm="False"), "prune_norm"),
    ("prune_intermediate_layers", dict(prune_head="False"), "prune_head"),
]
NUMPY_SWITCHES = {"forward_intermediates": ("norm", "intermediates_only"),
                  "get_intermediate_layers": ("reshape", "norm")}


@pytest.fixture(scope="module")
def family_pairs():
    """A small model of each family in both rooms (the refused calls leave them untouched)."""
    return {name: small_pair(name) for name in FAMILY_NAMES}


@pytest.mark.parametrize("name", FAMILY_NAMES)
@pytest.mark.parametrize("method, kwargs, switch", SWITCHES)
def test_a_switch_given_as_a_string_is_refused_in_both_rooms(family_pairs, name, method, kwargs,
                                                            switch):
    model, np_model = family_pairs[name]
    x = torch.zeros(1, *model.pretrained_cfg["input_size"])
    message = f"^{switch} must be True or False, got 'False' \\(str\\)$"
    call = (lambda m, images: getattr(m, method)(images, **kwargs)) if method != \
        "prune_intermediate_layers" else (lambda m, images: getattr(m, method)(1, **kwargs))
    with pytest.raises(ValueError, match=message):
        call(model, x)
    if switch in NUMPY_SWITCHES.get(method, ()):
        with pytest.raises(ValueError, match=message):
            call(np_model, x.numpy())


def test_forward_head_and_distilled_training_switches_in_both_rooms():
    name = "deit_tiny_distilled_patch16_224"
    model = vit_scratch.create_model(name, img_size=32, depth=1)
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(model.state_dict()), img_size=32, depth=1)
    x = torch.zeros(1, 3, 32, 32)
    for m, images in ((model, x), (np_model, x.numpy())):
        with pytest.raises(ValueError, match=r"^pre_logits must be True or False, got 'False' "):
            m.forward_head(m.forward_features(images), pre_logits="False")
        with pytest.raises(ValueError, match=r"^enable must be True or False, got 'False' "):
            m.set_distilled_training("False")
        assert m.distilled_training is False
        m.set_distilled_training(np.bool_(True))
        assert m.distilled_training is True
    with pytest.raises(ValueError, match=r"^norm must be True or False, got 'False' \(str\)$"):
        FeatureGetter(vit_scratch.create_model("vit_tiny_patch16_224", img_size=32), norm="False")


@pytest.mark.parametrize("overlay, error, message", [
    (dict(mean_std=0.5), TypeError, "pretrained_cfg_overlay has the unknown key(s) 'mean_std'; a "
                                    "pretrained_cfg knows url, file, state_dict"),
    ([("file", "w.safetensors")], ValueError, "pretrained_cfg_overlay must be a dict of "
                                              "pretrained_cfg entries"),
    (dict(input_size=(3, 64)), ValueError, "pretrained_cfg_overlay['input_size'] must be (C, H, "
                                           "W), got (3, 64) (tuple)"),
    (dict(input_size=(3, 64, 64)), ValueError, "pretrained_cfg_overlay['input_size'] is (3, 64, "
                                               "64), but the model takes (in_chans, *img_size) = "
                                               "(3, 32, 32)"),
    (dict(mean=(0.5, 0.5)), ValueError, "pretrained_cfg_overlay['mean'] has 2 values, but the "
                                        "model takes 3 channel(s)"),
    (dict(std=(0.5, 0.0, 0.5)), ValueError, "pretrained_cfg_overlay['std'] must be positive, "
                                            "got 0.0"),
    (dict(crop_pct=1.5), ValueError, "pretrained_cfg_overlay['crop_pct'] must be in (0, 1], got "
                                     "1.5"),
    (dict(interpolation="lanczos"), ValueError, "pretrained_cfg_overlay['interpolation'] must be "
                                                "one of ('bicubic', 'bilinear', 'nearest'), got "
                                                "'lanczos' (str)"),
    (dict(architecture="vit_small_patch16_224"), ValueError, "pretrained_cfg_overlay["
                                                             "'architecture'] is "
                                                             "'vit_small_patch16_224', but the "
                                                             "model is vit_tiny_patch16_224"),
])
def test_a_bad_pretrained_cfg_overlay_is_named(overlay, error, message):
    for create in (lambda: vit_scratch.create_model("vit_tiny_patch16_224", img_size=32,
                                                    pretrained_cfg_overlay=overlay),
                   lambda: vit_scratch.create_numpy_model("vit_tiny_patch16_224", {}, img_size=32,
                                                          pretrained_cfg_overlay=overlay)):
        with pytest.raises(error) as info:
            create()
        assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.mark.parametrize("overlay, message", [
    (dict(url="https://example.org/w.pth"), "pretrained=True with pretrained_cfg_overlay['url']="
                                            "'https://example.org/w.pth': weights are fetched "
                                            "from the Hugging Face Hub only"),
    (dict(state_dict={}), "pretrained=True with pretrained_cfg_overlay['state_dict']: weights are "
                          "loaded from files here"),
])
def test_weight_sources_the_library_does_not_read_say_what_to_do(overlay, message):
    with pytest.raises(ValueError) as info:
        vit_scratch.create_model("vit_digits", pretrained=True, pretrained_cfg_overlay=overlay)
    assert str(info.value).startswith(message)
    assert "pretrained_cfg_overlay=dict(file=" in str(info.value)


@pytest.mark.parametrize("kwargs,match", [
    (dict(depth=0), "depth must be a positive int, got 0"),
    (dict(patch_size=-16), "patch_size must be a positive int, got -16"),
    (dict(img_size=(224, 224, 3)), "img_size must be an int or a pair"),
    (dict(num_classes=-1), "num_classes must be an int >= 0, got -1"),
    (dict(drop_path_rate=1.5), "drop_path_rate must be in \\[0, 1\\), got 1.5"),
])
def test_bad_vit_config_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        vit_scratch.create_model("vit_tiny_patch16_224", **kwargs)


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


@pytest.mark.parametrize("value", [0, 0.0, -1e-5, float("nan"), "small"])
def test_init_values_must_be_positive(value):
    match = "init_values must be a positive number"
    # configs check the field's type first (specs/base.py, check_config_fields): NaN and strings
    # are named as "a finite number or None"
    config_match = "init_values must be a (positive|finite) number"
    with pytest.raises(ValueError, match=config_match):
        vit_scratch.create_model("cait_digits", init_values=value)
    with pytest.raises(ValueError, match=config_match):
        vit_scratch.create_numpy_model("cait_digits", {}, init_values=value)
    with pytest.raises(ValueError, match=match):
        pt_ls.LayerScale(8, init_values=value)
    with pytest.raises(ValueError, match=match):
        pt_ls.LayerScaleBlock(8, 2, init_values=value)
    with pytest.raises(ValueError, match=match):
        pt_ca.LayerScaleBlockClassAttn(8, 2, init_values=value)


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_depth_token_only_at_least_one(value):
    # 1.5 and True fail the shared type check ("must be an int"), 0 and -1 the range (">= 1")
    with pytest.raises(ValueError, match=f"depth_token_only must be an int.*got {value!r}"):
        vit_scratch.create_model("cait_digits", depth_token_only=value)


def test_layerscale_rule_needs_a_positive_depth():
    for depth in (0, -3, 2.5):
        with pytest.raises(ValueError, match="depth must be a positive int"):
            layerscale_init_value(depth)


@pytest.mark.parametrize("kwargs,match", [
    (dict(embed_dim=100, num_heads=3), "embed_dim 100 is not divisible by num_heads 3"),
    (dict(img_size=9), "image size 9 is not divisible by patch size [26]"),
    (dict(num_classes=-1), "num_classes must be an int >= 0, got -1"),
    (dict(mlp_ratio=0), "mlp_ratio must be positive, got 0"),
    (dict(mlp_ratio_token_only=-2.0), "mlp_ratio_token_only must be positive"),
    (dict(drop_path_rate=1.0), r"drop_path_rate must be in \[0, 1\), got 1.0"),
    (dict(depth=0), "depth must be a positive int, got 0"),
])
def test_cait_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        vit_scratch.create_model("cait_digits", **kwargs)
    with pytest.raises(ValueError, match=match):
        CaitConfig(**{**dict(img_size=8, patch_size=2, embed_dim=64, num_heads=4), **kwargs})


def test_unknown_fields_and_residual_forms():
    with pytest.raises(TypeError, match="unknown argument.*'depth_cls'.*known: img_size"):
        vit_scratch.create_model("cait_digits", depth_cls=2)
    with pytest.raises(ValueError, match="residual must be one of"):
        pt_ls.ResidualBlock(8, 2, residual="postnorm")
    with pytest.raises(ValueError, match="residual must be one of"):
        np_ls.residual_block(np.zeros((1, 2, 8)), {}, 2, residual="postnorm")
    with pytest.raises(ValueError, match=r"mix_heads: weight of shape \(3, 3\)"):
        np_attn.mix_heads(np.zeros((1, 4, 2, 2)), np.eye(3))
    with pytest.raises(ValueError, match=r"mix_heads: weight of shape \(3, 3\)"):
        pt_attn.mix_heads(torch.zeros(1, 4, 2, 2), torch.eye(3))


@pytest.mark.parametrize("kwargs,message", [
    (dict(img_size=100), "img_size 100 is not divisible by the model's total stride 32 "
                         "(patch_size 4 × 2 × 2 × 2); use a multiple of 32, e.g. 96"),
    (dict(img_size=64, patch_size=16), "img_size 64 is not divisible by the model's total stride 128"),
    (dict(crpe_window={3: 2, 5: 3}), "crpe_window {3: 2, 5: 3} splits 5 heads, but num_heads is 8"),
    (dict(crpe_window={3: 4, 4: 4}), "crpe_window has window 4: windows must be odd"),
    (dict(crpe_window={3: 8, 5: 0}), "crpe_window gives 0 heads to window 5"),
    (dict(embed_dims=(64, 128, 256)), "embed_dims must be a tuple of 4 ints, got (64, 128, 256)"),
    (dict(serial_depths=(2, 2, 2, 2, 2)), "serial_depths must be a tuple of 4 ints, got"),
    (dict(mlp_ratios=(4, 4)), "mlp_ratios must be a tuple of 4 finite numbers, got (4, 4)"),
    (dict(embed_dims=(64, 128, 250, 320)), "embed_dims[2] = 250 is not divisible by num_heads 8"),
    (dict(parallel_depth=2), "parallel_depth=2 needs equal embed_dims at scales 2-4"),
    (dict(parallel_depth=1, embed_dims=(64, 64, 64, 64)), "needs equal mlp_ratios at scales 2-4"),
    (dict(parallel_mode="attention"), "parallel_mode must be one of"),
    (dict(drop_path_rate=1.0), "drop_path_rate must be in [0, 1)"),
])
def test_coat_config_values_are_named_in_both_rooms(kwargs, message):
    # (the lengths of the per-scale tuples are checked by the shared field check,
    # specs/base.py's check_config_fields, hence its wording for those three)
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_model("coat_lite_tiny", **kwargs)
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_numpy_model("coat_lite_tiny", {}, **kwargs)


# --- layers built by hand --------------------------------------------------------------------------


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


def test_even_kernel_is_refused_when_the_layer_is_built():
    from vit_scratch.torch_nn.conv_position_encoding import ConvPosEnc

    with pytest.raises(ValueError, match=re.escape("kernel_size must be odd (a centred window "
                                                   "with 'same' padding k // 2), got 4")):
        ConvPosEnc(8, 4)
    assert ConvPosEnc(8, 5).proj.weight.shape == (8, 1, 5, 5)


def test_class_token_width_mismatch_both_rooms():
    block = pt_ca.LayerScaleBlockClassAttn(24, 4)
    params = vit_scratch.state_dict_to_numpy(block.state_dict())
    x, cls = np.zeros((2, 9, 24), np.float32), np.zeros((2, 1, 16), np.float32)
    message = ("the class token has width 16 but the patch tokens have 24 channels "
               "(class token shape (2, 1, 16), tokens shape (2, 9, 24))")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        block(torch.from_numpy(x), torch.from_numpy(cls))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        np_ca.class_attention_block(x, cls, params, 4)
    with pytest.raises(ValueError, match=r"the class token must have shape \(B, 1, C\)"):
        np_ca.class_attention_block(x, np.zeros((2, 2, 24), np.float32), params, 4)
    with pytest.raises(ValueError, match="batch size 1 but the patch tokens have 2"):
        block(torch.from_numpy(x), torch.zeros(1, 1, 24))
    # a checkpoint whose class token has another width is named before any matmul
    cfg = vit_scratch.get_config("cait_digits")
    bad = {k: np.zeros(s, np.float32) for k, s in cait_param_shapes(cfg).items()}
    bad["cls_token"] = np.zeros((1, 1, 32), np.float32)
    with pytest.raises(ValueError, match=r"cls_token: got \(1, 1, 32\), expected \(1, 1, 64\)"):
        vit_scratch.create_numpy_model("cait_digits", bad)


def test_class_attention_needs_a_class_token_and_patches():
    with pytest.raises(ValueError, match="u must have shape"):
        pt_ca.ClassAttention(8, 2)(torch.zeros(2, 1, 8))
    with pytest.raises(ValueError, match="u must have shape"):
        np_ca.class_attention(np.zeros((2, 8)), *([np.eye(8), None] * 3), np.eye(8),
                              np.zeros(8), 2)


# --- images: one policy in both rooms --------------------------------------------------------------


def test_wrong_number_of_channels(small):
    model, np_model = small
    match = re.escape("images have 1 channels but the model expects in_chans=3")
    with pytest.raises(ValueError, match=match):
        model(torch.zeros(2, 1, 32, 32))
    with pytest.raises(ValueError, match=match):
        np_model(np.zeros((2, 1, 32, 32), dtype=np.float32))


def test_wrong_spatial_size_for_a_fixed_size_model(small):
    model, np_model = small
    match = re.escape("image size 48 does not match the model's img_size 32")
    with pytest.raises(ValueError, match=match):
        model(torch.zeros(1, 3, 48, 48))
    with pytest.raises(ValueError, match=match):
        np_model(np.zeros((1, 3, 48, 48), dtype=np.float32))
    with pytest.raises(ValueError, match=re.escape("image size (32, 48) does not match")):
        model(torch.zeros(1, 3, 32, 48))


def test_images_must_be_4d(small):
    model, np_model = small
    with pytest.raises(ValueError, match=re.escape("images must have shape (B, C, H, W), got shape (3, 32, 32)")):
        model(torch.zeros(3, 32, 32))
    with pytest.raises(ValueError, match="images must have shape"):
        np_model(np.zeros((3, 32, 32)))


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


@pytest.mark.parametrize("name", FAMILY_NAMES + ["coat_digits"])
def test_an_empty_batch_gives_empty_logits_in_both_rooms(name):
    model, np_model = small_pair(name)
    c, h, w = model.pretrained_cfg["input_size"]
    with torch.no_grad():
        assert model(torch.zeros(0, c, h, w)).shape == (0, model.num_classes)
    assert np_model(np.zeros((0, c, h, w), np.float32)).shape == (0, model.num_classes)


def test_cait_image_errors_both_rooms():
    model = vit_scratch.create_model("cait_digits")
    np_model = vit_scratch.create_numpy_model(
        "cait_digits", vit_scratch.state_dict_to_numpy(model.state_dict()))
    for m, zeros in ((model, torch.zeros), (np_model, np.zeros)):
        with pytest.raises(ValueError, match="images have 3 channels but the model expects"):
            m(zeros((1, 3, 24, 24)))
        with pytest.raises(ValueError, match="image size 12 does not match the model's img_size 24"):
            m(zeros((1, 1, 12, 12)))


def test_coat_images_same_message_in_both_rooms():
    model = float64_model("coat_digits")
    np_model = numpy_twin(model)
    for shape, match in [((1, 1, 12, 8), "image size \\(12, 8\\) is not divisible by the model's "
                                          "total stride 8 \\(patch_size 1 × 2 × 2 × 2\\)"),
                         ((1, 1, 8, 12), "image size \\(8, 12\\) is not divisible by the model's "
                                          "total stride 8 \\(patch_size 1 × 2 × 2 × 2\\)"),
                         ((1, 3, 8, 8), "images have 3 channels but the model expects in_chans=1"),
                         ((1, 8, 8), "images must have shape \\(B, C, H, W\\)")]:
        with pytest.raises(ValueError, match=match):
            model(torch.zeros(shape, dtype=torch.float64))
        with pytest.raises(ValueError, match=match):
            np_model(np.zeros(shape))
    for m in (model, np_model):
        with pytest.raises(ValueError, match="view must be one of"):
            m.get_attention_maps(np.zeros((1, 1, 8, 8)) if m is np_model else torch.zeros(1, 1, 8, 8,
                                 dtype=torch.float64), view="heads")


@pytest.mark.parametrize("name, size, message", [
    ("coat_digits", (8, 12), "img_size (8, 12) is not divisible by the model's total stride 8"),
    ("coat_digits", (12, 8), "img_size (12, 8) is not divisible by the model's total stride 8"),
    ("cait_digits", (24, 20), "image size (24, 20) is not divisible by patch size 6"),
    ("vit_digits", (20, 24), "image size (20, 24) is not divisible by patch size 6"),
])
def test_a_size_bad_in_one_side_only_is_refused_in_both_rooms(name, size, message):
    """Each side is checked against the stride: a width that does not tile would be cropped
    silently by the strided convolutions (PyTorch) and fail deep in a reshape (NumPy)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.create_model(name, img_size=size)
    with pytest.raises(ValueError, match=re.escape(message)):
        vit_scratch.get_config(name, img_size=size)


def test_a_coat_model_refuses_a_width_off_the_stride_at_call_time():
    """CoaT takes any multiple of its stride at call time: a height that fits and a width that
    does not is refused in both rooms, not cropped."""
    model = float64_model("coat_digits")
    np_model = numpy_twin(model)
    message = re.escape("image size (16, 20) is not divisible by the model's total stride 8")
    with pytest.raises(ValueError, match=message):
        model(torch.zeros(1, 1, 16, 20, dtype=torch.float64))
    with pytest.raises(ValueError, match=message):
        np_model(np.zeros((1, 1, 16, 20)))
    assert model(torch.zeros(1, 1, 16, 24, dtype=torch.float64)).shape == (1, 10)


# --- NumPy params ----------------------------------------------------------------------------------


def test_numpy_params_missing_or_misshaped(small):
    model, _ = small
    params = vit_scratch.state_dict_to_numpy(model.state_dict())
    del params["blocks.2.attn.qkv.bias"]
    del params["norm.weight"]
    params["head.weight"] = params["head.weight"][:10]
    params["blocks.0.gamma"] = np.ones(192)
    with pytest.raises(ValueError) as info:
        vit_scratch.create_numpy_model("vit_tiny_patch16_224", params, img_size=32)
    message = str(info.value)
    assert "params for vit_tiny_patch16_224 does not match" in message
    assert "missing keys (2): blocks.2.attn.qkv.bias, norm.weight" in message
    assert "unexpected keys (1): blocks.0.gamma" in message
    assert "head.weight: got (10, 192), expected (1000, 192)" in message


def test_numpy_params_for_another_resolution(small):
    model, _ = small
    params = vit_scratch.state_dict_to_numpy(model.state_dict())  # built for 32x32
    with pytest.raises(ValueError, match=re.escape("pos_embed: got (1, 5, 192), expected (1, 17, 192)")):
        vit_scratch.create_numpy_model("vit_tiny_patch16_224", params, img_size=64)


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


# --- the functional entry points -------------------------------------------------------------------


def test_bad_mask_shape():
    attn = Attention(12, num_heads=3)
    x = torch.zeros(2, 5, 12)
    match = re.escape("mask of shape (4, 4) does not broadcast to the attention scores (B, heads, N_q, N_k) = (2, 3, 5, 5)")
    with pytest.raises(ValueError, match=match):
        attn(x, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=match):
        attn(x, mask=torch.ones(4, 4, dtype=torch.bool), return_attention=True)
    q = np.zeros((2, 3, 5, 4))
    with pytest.raises(ValueError, match=match):
        np_attn.scaled_dot_product_attention(q, q, q, mask=np.ones((4, 4), dtype=bool))


def test_mask_with_more_dimensions_than_the_scores_is_refused():
    """Mutant: a mask with more dimensions than the scores, which NumPy (and PyTorch) would
    broadcast silently into a larger output."""
    q = np.random.default_rng(0).standard_normal((2, 3, 5, 4))  # scores (2, 3, 5, 5)
    mask = np.ones((1, 2, 3, 5, 5), dtype=bool)
    message = ("mask of shape (1, 2, 3, 5, 5) does not broadcast to the attention scores "
               "(B, heads, N_q, N_k) = (2, 3, 5, 5)")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        np_attn.scaled_dot_product_attention(q, q, q, mask=mask)
    tq, tmask = torch.from_numpy(q), torch.from_numpy(mask)
    for explicit in (False, True):
        with pytest.raises(ValueError, match=r"mask of shape \(1, 2, 3, 5, 5\) does not broadcast"):
            t_attn.scaled_dot_product_attention(tq, tq, tq, mask=tmask, return_attention=explicit)
    # the same mask with a fitting number of dimensions is fine in both rooms
    out = np_attn.scaled_dot_product_attention(q, q, q, mask=mask[0])
    assert out.shape == q.shape


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


@pytest.mark.parametrize("mask", [None, "bool", "additive"])
def test_attention_with_an_empty_batch_in_both_rooms(mask):
    """A batch of 0 gives empty outputs of the right shapes, with or without a mask, in both
    rooms (no reduction over an empty axis, no shape error)."""
    x = np.zeros((0, 5, 12), np.float32)
    w, b = np.ones((12, 12), np.float32), np.ones(12, np.float32)
    m = {None: None, "bool": np.tril(np.ones((5, 5), bool)),
         "additive": np.zeros((5, 5), np.float32)}[mask]
    out, attn = np_attn.multi_head_attention(x, np.ones((36, 12), np.float32), None, w, b, 3,
                                             mask=m, return_attention=True)
    assert out.shape == (0, 5, 12) and attn.shape == (0, 3, 5, 5)
    assert np_ca.class_attention(x, w, None, w, None, w, None, w, b, 3).shape == (0, 1, 12)
    layer = t_attn.Attention(12, 3)
    with torch.no_grad():
        t_out, t_attn_w = layer(torch.from_numpy(x), mask=None if m is None else
                                torch.from_numpy(m), return_attention=True)
        assert t_out.shape == (0, 5, 12) and t_attn_w.shape == (0, 3, 5, 5)
        assert pt_ca.ClassAttention(12, 3)(torch.from_numpy(x)).shape == (0, 1, 12)


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


# --- the figure helpers ----------------------------------------------------------------------------


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


