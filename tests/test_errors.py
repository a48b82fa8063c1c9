"""Bad input gets a clear ValueError that names the parameter and the value -- in both rooms."""
import re

import numpy as np
import pytest
import torch

import vit_scratch
from vit_scratch.numpy_nn import attention as np_attn
from vit_scratch.numpy_nn import patch_embed as np_pe
from vit_scratch.torch_nn.attention import Attention


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


@pytest.mark.parametrize("kwargs,match", [
    (dict(depth=0), "depth must be a positive int, got 0"),
    (dict(patch_size=-16), "patch_size must be a positive int, got -16"),
    (dict(img_size=(224, 224, 3)), "img_size must be an int or a pair"),
    (dict(num_classes=-1), "num_classes must be an int >= 0, got -1"),
    (dict(drop_path_rate=1.5), "drop_path_rate must be in \\[0, 1\\), got 1.5"),
])
def test_bad_config_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        vit_scratch.create_model("vit_tiny_patch16_224", **kwargs)
