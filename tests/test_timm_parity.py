"""Our models against timm, the oracle: same keys, strict load, same logits (fp32).

Every timm parameter is randomized first (``randomize_weights_``): timm initialises biases to 0
and LayerNorms to identity, which would hide a missing bias or a wrong eps.
"""
import pytest
import torch

import vit_scratch
from helpers import check_logits_match_timm, make_pair, max_abs_diff, timm_names
from vit_scratch.specs.base import num_params
from vit_scratch.specs.vit import vit_param_shapes

TORCH_TOL = 1e-5
NUMPY_TOL = 1e-4


@pytest.fixture(scope="module")
def images():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(2, 3, 224, 224, generator=gen)


@pytest.mark.parametrize("name", [n for n in timm_names() if n.startswith(("vit_", "deit_"))])
def test_logits_match_timm(name, images):
    oracle, ours = make_pair(name, seed=1)
    check_logits_match_timm(name, oracle, ours, images, vit_param_shapes(ours.cfg), min_scale=0.1,
                            torch_tol=TORCH_TOL, numpy_tol=NUMPY_TOL)


def test_vit_tiny_parameter_count():
    model = vit_scratch.create_model("vit_tiny_patch16_224")
    assert sum(p.numel() for p in model.parameters()) == 5_717_416
    assert num_params(vit_param_shapes(model.cfg)) == 5_717_416
    assert len(model.state_dict()) == 152


@pytest.mark.parametrize("kwargs", [
    dict(num_classes=10, img_size=(64, 96)),
    dict(img_size=48, patch_size=8, embed_dim=96, depth=3, num_heads=4, in_chans=1,
         num_classes=7),
    dict(img_size=32, embed_dim=64, depth=2, num_heads=2, num_classes=0),  # features, no head
], ids=["rect-10cls", "small-1ch", "no-head"])
def test_kwargs_build_what_timm_builds(kwargs):
    oracle, ours = make_pair("vit_tiny_patch16_224", seed=2, **kwargs)
    size = kwargs["img_size"]
    h, w = (size, size) if isinstance(size, int) else size
    x = torch.randn(2, kwargs.get("in_chans", 3), h, w, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert max_abs_diff(ours(x), oracle(x)) <= TORCH_TOL
    np_model = vit_scratch.create_numpy_model(
        "vit_tiny_patch16_224", vit_scratch.state_dict_to_numpy(oracle.state_dict()), **kwargs)
    with torch.no_grad():
        assert max_abs_diff(np_model(x.numpy()), oracle(x)) <= NUMPY_TOL


def test_attention_maps_match_timm_unfused():
    """timm's unfused path passes the attention weights through ``attn_drop``; a forward hook
    there is the classic extraction recipe.  Our ``get_attention_maps`` must give the same maps
    without giving up the fused path for normal forwards."""
    oracle, ours = make_pair("vit_tiny_patch16_224", seed=4, img_size=64)
    captured = []
    for blk in oracle.blocks:
        blk.attn.fused_attn = False
        blk.attn.attn_drop.register_forward_hook(lambda m, inp, out: captured.append(inp[0]))
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        oracle(x)
        maps = ours.get_attention_maps(x)
    assert len(maps) == len(captured) == 12
    for a, b in zip(maps, captured):
        assert a.shape == (1, 3, 17, 17)
        assert max_abs_diff(a, b) <= 1e-6
