"""The NumPy room against PyTorch, module by module, in float64 at several random shapes.

PyTorch's own ops (F.linear, nn.LayerNorm, F.gelu, F.unfold, nn.MultiheadAttention) are the
independent computation; agreement is required near float64 machine precision.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import max_abs_diff
from vit_scratch.config import ViTConfig, vit_param_shapes
from vit_scratch.numpy_nn import attention as np_attn
from vit_scratch.numpy_nn import layers as np_layers
from vit_scratch.numpy_nn import patch_embed as np_pe
from vit_scratch.numpy_nn import vit as np_vit
from vit_scratch.torch_nn import attention as t_attn
from vit_scratch.torch_nn import layers as t_layers
from vit_scratch.torch_nn import patch_embed as t_pe
from vit_scratch.torch_nn import vit as t_vit
from vit_scratch import randomize_weights_, state_dict_to_numpy

F64 = 1e-12  # "near machine precision" for float64 sums of a few hundred terms

SHAPES = [(3,), (2, 5), (2, 7, 16), (1, 3, 4, 8)]


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("out_features", [1, 6])
def test_linear(rng, shape, out_features):
    x = rng.standard_normal(shape)
    w = rng.standard_normal((out_features, shape[-1]))
    b = rng.standard_normal(out_features)
    assert max_abs_diff(np_layers.linear(x, w, b), F.linear(t(x), t(w), t(b))) < F64
    assert max_abs_diff(np_layers.linear(x, w), F.linear(t(x), t(w))) < F64


@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm(rng, shape):
    x = 3.0 + 2.0 * rng.standard_normal(shape)
    ln = torch.nn.LayerNorm(shape[-1], eps=1e-6).double()
    randomize_weights_(ln, seed=1)
    ours = np_layers.layer_norm(x, ln.weight.detach().numpy(), ln.bias.detach().numpy())
    assert max_abs_diff(ours, ln(t(x))) < F64


def test_layer_norm_eps_is_the_reference_one():
    # A constant token has variance 0: the output is bias + 0 * weight, and eps = 1e-6 (not
    # PyTorch's default 1e-5) decides how a near-constant token is scaled.
    x = np.array([[0.0, 1e-3]])
    y = np_layers.layer_norm(x, np.ones(2), np.zeros(2))
    expected = (x - 5e-4) / math.sqrt(0.25e-6 + 1e-6)
    np.testing.assert_allclose(y, expected, rtol=1e-14)


@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_float64_is_exact(rng, shape):
    x = 3.0 * rng.standard_normal(shape)
    assert max_abs_diff(np_layers.gelu(x), F.gelu(t(x))) < 1e-15
    assert np_layers.gelu(x).dtype == np.float64


def test_gelu_is_not_the_tanh_approximation():
    x = np.linspace(-4, 4, 2001)
    tanh_gelu = F.gelu(t(x), approximate="tanh").numpy()
    assert np.abs(np_layers.gelu(x) - tanh_gelu).max() > 1e-4  # the two forms really differ


@pytest.mark.parametrize("n", [1, 1000])
def test_gelu_float32_matches_torch(rng, n):
    x = (3.0 * rng.standard_normal(n)).astype(np.float32)
    ours = np_layers.gelu(x)
    assert ours.dtype == np.float32
    assert max_abs_diff(ours, F.gelu(t(x))) < 2e-6
    inplace = x.copy()
    np_layers.gelu(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, ours)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax(rng, shape, axis):
    x = 5.0 * rng.standard_normal(shape)
    assert max_abs_diff(np_layers.softmax(x, axis=axis), torch.softmax(t(x), dim=axis)) < F64


def test_softmax_is_stable_and_masks():
    x = np.array([[1000.0, 1001.0, 1002.0], [-np.inf, 0.0, 0.0]])
    y = np_layers.softmax(x)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y[0], np.exp([-2.0, -1.0, 0.0]) / np.exp([-2.0, -1.0, 0.0]).sum())
    np.testing.assert_array_equal(y[1], [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(x[0], [1000.0, 1001.0, 1002.0])  # the input is untouched


@pytest.mark.parametrize("shape", [(2, 5, 8), (1, 1, 4)])
def test_mlp(rng, shape):
    mlp = t_layers.Mlp(shape[-1], 3 * shape[-1]).double().eval()
    randomize_weights_(mlp, seed=2)
    p = state_dict_to_numpy(mlp.state_dict())
    x = rng.standard_normal(shape)
    ours = np_layers.mlp(x, p["fc1.weight"], p["fc1.bias"], p["fc2.weight"], p["fc2.bias"])
    assert max_abs_diff(ours, mlp(t(x))) < F64


@pytest.mark.parametrize("shape,patch", [((2, 3, 32, 48), 16), ((1, 1, 8, 8), 2), ((3, 4, 12, 6), 3)])
def test_patchify_equals_unfold(rng, shape, patch):
    x = rng.standard_normal(shape)
    unfold = F.unfold(t(x), kernel_size=patch, stride=patch).transpose(1, 2)  # (B, N, C·P·P)
    np.testing.assert_array_equal(np_pe.patchify(x, patch), unfold.numpy())
    np.testing.assert_array_equal(np_pe.unpatchify(np_pe.patchify(x, patch), patch, shape[2:]), x)


@pytest.mark.parametrize("img_size,patch,chans,dim", [(32, 16, 3, 8), ((24, 40), 8, 1, 5)])
def test_patch_embed(rng, img_size, patch, chans, dim):
    pe = t_pe.PatchEmbed(img_size, patch, chans, dim).double()
    randomize_weights_(pe, seed=3)
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    x = rng.standard_normal((2, chans, h, w))
    ours = np_pe.patch_embed(x, pe.proj.weight.detach().numpy(), pe.proj.bias.detach().numpy())
    assert ours.shape == (2, pe.num_patches, dim)
    assert max_abs_diff(ours, pe(t(x))) < F64


def test_add_class_token(rng):
    tokens = rng.standard_normal((3, 4, 5))
    cls = rng.standard_normal((1, 1, 5))
    out = np_pe.add_class_token(tokens, cls)
    assert out.shape == (3, 5, 5)
    np.testing.assert_array_equal(out[:, 0], np.repeat(cls[0], 3, axis=0))
    np.testing.assert_array_equal(out[:, 1:], tokens)


def test_sincos_pos_embed_hand_worked():
    # dim 4 on a 1x2 grid: channels [sin(row), cos(row), sin(col), cos(col)] (one frequency, 1)
    pe = np_pe.sincos_pos_embed_2d(4, (1, 2), class_token=True)
    expected = np.array([[0, 0, 0, 0], [0, 1, 0, 1], [0, 1, math.sin(1), math.cos(1)]])
    np.testing.assert_allclose(pe[0], expected, atol=1e-7)


def test_cosine_similarity_grid(rng):
    pe = rng.standard_normal((1, 1 + 6, 8))
    sim = np_pe.cosine_similarity_grid(pe)
    ref = F.cosine_similarity(t(pe[0, 1:, None, :]), t(pe[0, None, 1:, :]), dim=-1)
    assert max_abs_diff(sim, ref) < F64


def _mha_inputs(rng, B, N, C):
    attn = t_attn.Attention(C, num_heads=3, qkv_bias=True).double().eval()
    randomize_weights_(attn, seed=4, std=0.3)
    p = state_dict_to_numpy(attn.state_dict())
    return attn, p, rng.standard_normal((B, N, C))


@pytest.mark.parametrize("B,N,C", [(2, 5, 12), (1, 17, 6), (3, 1, 3)])
def test_multi_head_attention(rng, B, N, C):
    attn, p, x = _mha_inputs(rng, B, N, C)
    out, weights = np_attn.multi_head_attention(
        x, p["qkv.weight"], p["qkv.bias"], p["proj.weight"], p["proj.bias"], 3,
        return_attention=True)
    t_out, t_weights = attn(t(x), return_attention=True)
    assert max_abs_diff(out, attn(t(x))) < F64  # the fused path
    assert max_abs_diff(out, t_out) < F64  # the explicit path
    assert max_abs_diff(weights, t_weights) < F64
    # nn.MultiheadAttention is an independent implementation with the same [q; k; v] layout
    mha = torch.nn.MultiheadAttention(C, 3, batch_first=True).double().eval()
    mha.load_state_dict({"in_proj_weight": attn.qkv.weight, "in_proj_bias": attn.qkv.bias,
                         "out_proj.weight": attn.proj.weight, "out_proj.bias": attn.proj.bias})
    m_out, m_weights = mha(t(x), t(x), t(x), need_weights=True, average_attn_weights=False)
    assert max_abs_diff(out, m_out) < F64
    assert max_abs_diff(weights, m_weights) < F64


@pytest.mark.parametrize("mask_kind", ["causal", "padding", "additive"])
def test_masked_attention(rng, mask_kind):
    B, N, C = 2, 6, 12
    attn, p, x = _mha_inputs(rng, B, N, C)
    if mask_kind == "causal":
        mask = np_attn.causal_mask(N)  # (N, N)
    elif mask_kind == "padding":
        mask = np.ones((B, 1, 1, N), dtype=bool)
        mask[1, ..., 4:] = False  # sequence 1 has 4 real tokens
    else:
        mask = rng.standard_normal((1, 3, N, N))
    out, weights = np_attn.multi_head_attention(
        x, p["qkv.weight"], p["qkv.bias"], p["proj.weight"], p["proj.bias"], 3, mask=mask,
        return_attention=True)
    assert max_abs_diff(out, attn(t(x), mask=t(mask))) < F64
    t_out, t_weights = attn(t(x), mask=t(mask), return_attention=True)
    assert max_abs_diff(weights, t_weights) < F64
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-14)
    if mask.dtype == bool:
        assert (weights[~np.broadcast_to(mask, weights.shape)] == 0).all()


def test_attention_weights_hand_worked():
    # q = k = the 2-D unit vectors: scores = I / sqrt(2), so each row is
    # [e^(1/sqrt 2), 1] / (e^(1/sqrt 2) + 1), in the diagonal's place.
    q = np.eye(2)[None]
    w = np_attn.attention_weights(q, q)
    a = math.exp(1 / math.sqrt(2))
    np.testing.assert_allclose(w[0], [[a / (a + 1), 1 / (a + 1)], [1 / (a + 1), a / (a + 1)]],
                               rtol=1e-15)
    v = np.array([[[1.0, 0.0], [0.0, 10.0]]])
    np.testing.assert_allclose(np_attn.scaled_dot_product_attention(q, q, v), w @ v)


def test_attention_weights_match_a_loop(rng):
    # The plainest possible computation, one score at a time, as an independent oracle.
    q, k = rng.standard_normal((2, 2, 3, 4, 5))
    w = np_attn.attention_weights(q, k)
    for b in range(2):
        for h in range(3):
            for i in range(4):
                s = np.array([q[b, h, i] @ k[b, h, j] / math.sqrt(5) for j in range(4)])
                np.testing.assert_allclose(w[b, h, i], np.exp(s) / np.exp(s).sum(), rtol=1e-13)


def test_split_merge_heads(rng):
    x = rng.standard_normal((2, 5, 12))
    heads = np_attn.split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    np.testing.assert_array_equal(heads[:, 1], x[:, :, 4:8])  # head 1 owns channels 4..7
    np.testing.assert_array_equal(np_attn.merge_heads(heads), x)


def test_attention_rollout_hand_worked():
    # One block that copies token 1 into token 0: A = [[0, 1], [0, 1]].  With the residual,
    # (A + I) / 2 row-normalised = [[.5, .5], [0, 1]]; two such blocks multiply.
    a = np.array([[[[0.0, 1.0], [0.0, 1.0]]]])  # (B=1, h=1, 2, 2)
    one = np.array([[0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(np_attn.attention_rollout([a])[0], one)
    np.testing.assert_allclose(np_attn.attention_rollout([a, a])[0], one @ one)


@pytest.mark.parametrize("B,N,C,heads", [(2, 7, 12, 3), (1, 3, 8, 2)])
def test_block(rng, B, N, C, heads):
    blk = t_vit.Block(C, heads, mlp_ratio=2.0).double().eval()
    randomize_weights_(blk, seed=5, std=0.2)
    x = rng.standard_normal((B, N, C))
    ours, attn = np_vit.block(x, state_dict_to_numpy(blk.state_dict()), heads,
                              return_attention=True)
    t_out, t_attn_w = blk(t(x), return_attention=True)
    assert max_abs_diff(ours, blk(t(x))) < F64
    assert max_abs_diff(attn, t_attn_w) < F64


SMALL_CONFIGS = [
    ViTConfig(img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3, num_classes=5),
    ViTConfig(img_size=(16, 40), patch_size=8, in_chans=1, embed_dim=16, depth=3, num_heads=4,
              num_classes=7, mlp_ratio=2.0, qkv_bias=False),
    ViTConfig(img_size=24, patch_size=4, embed_dim=12, depth=1, num_heads=1, num_classes=0),
]


@pytest.mark.parametrize("cfg", SMALL_CONFIGS, ids=lambda c: f"{c.img_size}-{c.embed_dim}")
def test_vit_float64(rng, cfg):
    model = t_vit.VisionTransformer(cfg).double().eval()
    randomize_weights_(model, seed=6, std=0.1)
    params = state_dict_to_numpy(model.state_dict())
    assert {k: v.shape for k, v in params.items()} == vit_param_shapes(cfg)
    x = rng.standard_normal((2, cfg.in_chans, *cfg.img_size))
    np_model = np_vit.ViT(cfg, params)
    assert max_abs_diff(np_model(x), model(t(x))) < F64
    for a, b in zip(np_model.get_attention_maps(x), model.get_attention_maps(t(x))):
        assert max_abs_diff(a, b) < F64


@pytest.mark.parametrize("additive", [False, True])
def test_query_with_nothing_to_attend_gets_zero_weights(rng, additive):
    """Both rooms and both PyTorch paths agree: all-zero weights, zero output, finite gradient."""
    q, k, v = rng.standard_normal((3, 1, 2, 4, 8))
    mask = np.ones((4, 4), dtype=bool)
    mask[2] = False  # query 2 may attend to nothing
    if additive:
        mask = np.where(mask, 0.0, -np.inf)
    out, w = np_attn.scaled_dot_product_attention(q, k, v, mask=mask, return_attention=True)
    assert (w[..., 2, :] == 0).all() and (out[..., 2, :] == 0).all()
    np.testing.assert_allclose(w[..., [0, 1, 3], :].sum(-1), 1.0)
    tq = t(q).requires_grad_(True)
    fused = t_attn.scaled_dot_product_attention(tq, t(k), t(v), mask=t(mask))
    explicit, t_w = t_attn.scaled_dot_product_attention(tq, t(k), t(v), mask=t(mask),
                                                        return_attention=True)
    assert max_abs_diff(out, fused) < F64 and max_abs_diff(out, explicit) < F64
    assert max_abs_diff(w, t_w) < F64
    explicit.sum().backward()
    assert torch.isfinite(tq.grad).all()
