"""The NumPy room against the PyTorch room, module by module and model by model, in float64.

PyTorch's own ops (F.linear, nn.LayerNorm, F.gelu, F.unfold, F.conv2d, F.interpolate,
nn.MultiheadAttention), timm's modules where a block has a timm twin, and hand-worked cases are
the independent computations; agreement is required near float64 machine precision.
"""
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import vit_scratch
from helpers import (CAIT_SMALL, class_attention_numpy, COAT_SMALL, conv_attention64, F64,
                     float64_model, LN, max_abs_diff, np_params, numpy_twin, params64, random64,
                     random_tokens, t64)
from vit_scratch import randomize_weights_, state_dict_to_numpy
from vit_scratch.numpy_nn import _fast as np_fast
from vit_scratch.numpy_nn import (attention as np_attn, cait as np_cait, class_attention as np_ca,
                                  coat as np_coat, conv_position_encoding as np_cpe,
                                  coscale as np_coscale, factorized_attention as np_fa,
                                  layers as np_layers, layerscale as np_ls, patch_embed as np_pe,
                                  vit as np_vit)
from vit_scratch.specs.cait import RESIDUAL_FORMS
from vit_scratch.specs.coat import shared_keys
from vit_scratch.specs.vit import vit_param_shapes, ViTConfig
from vit_scratch.torch_nn import (attention as pt_attn, attention as t_attn,
                                  class_attention as pt_ca, conv_position_encoding as t_cpe,
                                  coscale as t_coscale, factorized_attention as t_fa,
                                  layers as t_layers, layerscale as pt_ls, patch_embed as t_pe,
                                  vit as t_vit)
from vit_scratch.torch_nn.cait import Cait


# --- layers, patches, attention (ViT) --------------------------------------------------------------


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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_of_plus_infinity_is_refused(dtype):
    """A +inf score (float32 overflows at 3.4e38) would give its row NaN weights (inf - inf),
    as PyTorch's softmax does; ours names it instead, before writing anything (``out=x``
    included), in the formula the models call as well as the checked function."""
    x = np.array([[np.inf, 1.0, 2.0], [0.0, 1.0, 2.0]], dtype=dtype)
    assert torch.isnan(torch.softmax(t(x), dim=-1)[0]).all()  # what it would be
    message = re.escape(f"softmax input holds +inf in 1 of its rows (a {np.dtype(dtype)} score "
                        f"that overflowed?)")
    for f in (np_layers.softmax, np_layers._softmax):
        with pytest.raises(ValueError, match=message):
            f(x, -1, x)
        assert x[0, 0] == np.inf and x[1, 2] == 2.0  # untouched
    big = np.full((1, 2, 3, 4), 1e20, np.float32)  # q·k overflows float32: +inf scores
    with np.errstate(over="ignore"), pytest.raises(
            ValueError, match="softmax input holds \\+inf in 6 of its rows"):
        np_attn.attention_weights(big, big)
    np.testing.assert_array_equal(np_layers.softmax(np.array([-np.inf, 0.0])), [0.0, 1.0])


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


def test_sincos_2d_axis_order_on_a_non_square_grid():
    """Mutant: the grid built in the wrong axis order (rows and columns swapped, or the tokens
    in column-major order).  On a 1×2 grid both orders agree, so this uses 2×3 and an
    independent computation, one token at a time."""
    dim, (gh, gw) = 8, (2, 3)
    pe = np_pe.sincos_pos_embed_2d(dim, (gh, gw), class_token=True)
    assert pe.shape == (1, 1 + gh * gw, dim)
    np.testing.assert_array_equal(pe[0, 0], 0.0)
    freqs = [10000.0 ** -(i / (dim // 4)) for i in range(dim // 4)]  # per half: dim/4 frequencies
    for r in range(gh):
        for c in range(gw):
            token = pe[0, 1 + r * gw + c]  # raster order, as patchify
            expected = ([math.sin(r * f) for f in freqs] + [math.cos(r * f) for f in freqs]
                        + [math.sin(c * f) for f in freqs] + [math.cos(c * f) for f in freqs])
            np.testing.assert_allclose(token, expected, atol=1e-7, err_msg=f"row {r}, col {c}")


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
    # DeiT III's form: LayerScale in every block, no position for the prefix tokens
    ViTConfig(img_size=(24, 32), patch_size=8, embed_dim=16, depth=2, num_heads=2, num_classes=3,
              init_values=0.1, no_embed_class=True),
]


@pytest.mark.parametrize("cfg", SMALL_CONFIGS, ids=lambda c: f"{c.img_size}-{c.embed_dim}")
def test_vit_float64(rng, cfg):
    model = t_vit.VisionTransformer(cfg).double().eval()
    randomize_weights_(model, seed=6, std=0.1)
    params = state_dict_to_numpy(model.state_dict())
    assert {k: v.shape for k, v in params.items()} == vit_param_shapes(cfg)
    x = rng.standard_normal((2, cfg.in_chans, *cfg.img_size))
    np_model = np_vit.VisionTransformer(cfg, params)
    assert max_abs_diff(np_model(x), model(t(x))) < F64
    for a, b in zip(np_model.get_attention_maps(x), model.get_attention_maps(t(x))):
        assert max_abs_diff(a, b) < F64


@pytest.mark.parametrize("cfg", SMALL_CONFIGS[:2] + SMALL_CONFIGS[3:],
                         ids=lambda c: f"{c.img_size}-{c.embed_dim}")
def test_distilled_vit_float64(rng, cfg):
    """DeiT's distillation token in both rooms: the same tokens (class, distillation, patches),
    the same average of the two heads, the same attention maps, near float64 precision."""
    cfg = cfg.replace(distilled=True)
    model = t_vit.VisionTransformerDistilled(cfg).double().eval()
    randomize_weights_(model, seed=7, std=0.1)
    params = state_dict_to_numpy(model.state_dict())
    assert {k: v.shape for k, v in params.items()} == vit_param_shapes(cfg)
    np_model = np_vit.VisionTransformerDistilled(cfg, params)
    x = rng.standard_normal((2, cfg.in_chans, *cfg.img_size))
    with torch.no_grad():
        features = model.forward_features(t(x))
        assert max_abs_diff(np_model.forward_features(x), features) < F64
        assert max_abs_diff(np_model(x), model(t(x))) < F64
        pooled = model.forward_head(features, pre_logits=True)
    assert max_abs_diff(np_model.forward_head(np_model.forward_features(x), pre_logits=True),
                        pooled) < F64
    assert max_abs_diff(pooled, (features[:, 0] + features[:, 1]) / 2) < F64
    for a, b in zip(np_model.get_attention_maps(x), model.get_attention_maps(t(x))):
        assert a.shape[-1] == 2 + cfg.num_patches and max_abs_diff(a, b) < F64
    assert params["pos_embed"].shape[1] == cfg.pos_embed_prefix_tokens + cfg.num_patches
    # the distillation token is not a copy of the class token: the two heads read different rows
    assert max_abs_diff(features[:, 0], features[:, 1]) > 1e-3


@pytest.mark.parametrize("no_embed_class", [False, True])
@pytest.mark.parametrize("distilled", [False, True])
def test_where_the_position_embedding_goes(rng, no_embed_class, distilled):
    """The tokens entering the blocks, in both rooms: the patches plus their positions, and in
    front the class (and distillation) token -- with its own position entry, or with
    ``no_embed_class`` (DeiT III) as it is learnt, the position embedding the grid's alone."""
    cfg = SMALL_CONFIGS[3].replace(no_embed_class=no_embed_class, distilled=distilled)
    cls = t_vit.VisionTransformer.class_for(cfg)
    model = randomize_weights_(cls(cfg).double().eval(), seed=8, std=0.1)
    params = state_dict_to_numpy(model.state_dict())
    np_model = getattr(np_vit, cls.__name__)(cfg, params)
    x = rng.standard_normal((2, 3, 24, 32))
    with torch.no_grad():
        tokens = model.embed(t(x)).numpy()
    assert max_abs_diff(np_model.embed(x), tokens) < F64
    prefix = [params["cls_token"]] + ([params["dist_token"]] if distilled else [])
    n = len(prefix)
    pos = params["pos_embed"][0]  # (entries, C)
    assert len(pos) == (0 if no_embed_class else n) + 12
    patches = np_pe.patch_embed(x, params["patch_embed.proj.weight"], params["patch_embed.proj.bias"])
    for i, token in enumerate(prefix):
        expected = token[0, 0] + (0 if no_embed_class else pos[i])
        np.testing.assert_array_equal(tokens[:, i], np.broadcast_to(expected, (2, 16)))
    assert max_abs_diff(tokens[:, n:], patches + pos[len(pos) - 12:]) < F64


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


# --- CaiT: LayerScale, talking heads, class attention ----------------------------------------------


def test_layer_scale_and_scalar_gate(rng):
    x = random_tokens(rng, 2, 5, 8)
    ls = random64(pt_ls.LayerScale(8, init_values=0.1))
    gate = random64(pt_ls.ScalarGate())
    with torch.no_grad():
        np.testing.assert_allclose(np_ls.layer_scale(x, ls.gamma.numpy()),
                                   ls(torch.from_numpy(x)).numpy(), rtol=0, atol=F64)
        np.testing.assert_allclose(np_ls.scalar_gate(x, gate.alpha.numpy()),
                                   gate(torch.from_numpy(x)).numpy(), rtol=0, atol=F64)
    # diag(γ) as a matrix, the way the paper writes it
    gamma = ls.gamma.detach().numpy()
    np.testing.assert_allclose(np_ls.layer_scale(x, gamma), x @ np.diag(gamma), rtol=0, atol=F64)
    assert torch.equal(pt_ls.LayerScale(4, 1e-6).gamma, torch.full((4,), 1e-6))
    assert torch.equal(pt_ls.ScalarGate().alpha, torch.zeros(1))


@pytest.mark.parametrize("residual", list(RESIDUAL_FORMS))
def test_residual_block_numpy_vs_torch(rng, residual):
    block = random64(pt_ls.ResidualBlock(16, 4, residual=residual, mlp_ratio=2.0), seed=1)
    x = random_tokens(rng, 2, 7, 16)
    with torch.no_grad():
        expected = block(torch.from_numpy(x)).numpy()
    got = np_ls.residual_block(x, params64(block), 4, residual=residual)
    np.testing.assert_allclose(got, expected, rtol=0, atol=F64)
    keys = set(block.state_dict())
    assert ("norm1.weight" in keys) == (residual != "rezero")
    expected = {"prenorm": set(), "rezero": {"ls1.alpha"}, "prenorm_scalar": {"ls1.alpha"},
                "layerscale": {"ls1.gamma"}}[residual]
    assert {k for k in keys if k.startswith("ls1.")} == expected


@pytest.mark.parametrize("talking_heads", [True, False])
def test_layerscale_block_numpy_vs_torch_vs_timm(rng, talking_heads):
    from timm.models.cait import LayerScaleBlock, TalkingHeadAttn
    from timm.models.vision_transformer import Attention

    attn_block = TalkingHeadAttn if talking_heads else Attention
    theirs = random64(LayerScaleBlock(24, 4, mlp_ratio=3.0, qkv_bias=True, init_values=1e-5,
                                       norm_layer=LN, attn_block=attn_block), seed=2)
    ours = pt_ls.LayerScaleBlock(24, 4, mlp_ratio=3.0, talking_heads=talking_heads)
    ours = ours.double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x = random_tokens(rng, 2, 9, 24)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x)).numpy()
        assert max_abs_diff(ours(torch.from_numpy(x)), expected) < F64
    got = np_ls.layerscale_block(x, params64(ours), 4, talking_heads=talking_heads)
    np.testing.assert_allclose(got, expected, rtol=0, atol=F64)


def test_mix_heads_is_a_linear_layer_over_the_head_axis(rng):
    attn = random_tokens(rng, 2, 3, 5, 6)
    lin = random64(nn.Linear(3, 3), std=0.5)
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    with torch.no_grad():  # nn.Linear on the heads moved last, as timm writes it
        expected = lin(torch.from_numpy(attn).permute(0, 2, 3, 1)).permute(0, 3, 1, 2).numpy()
        ours_pt = pt_attn.mix_heads(torch.from_numpy(attn), lin.weight, lin.bias).numpy()
    np.testing.assert_allclose(np_attn.mix_heads(attn, w, b), expected, rtol=0, atol=F64)
    np.testing.assert_allclose(ours_pt, expected, rtol=0, atol=F64)
    np.testing.assert_allclose(np_attn.mix_heads(attn, w, b),
                               np.einsum("gh,bhqk->bgqk", w, attn) + b[:, None, None],
                               rtol=0, atol=F64)
    # the identity map leaves the heads alone: plain multi-head attention
    np.testing.assert_array_equal(np_attn.mix_heads(attn, np.eye(3), np.zeros(3)), attn)


def test_talking_heads_attention_numpy_vs_torch_vs_timm(rng):
    from timm.models.cait import TalkingHeadAttn

    theirs = random64(TalkingHeadAttn(24, num_heads=4, qkv_bias=True), seed=4)
    ours = pt_attn.TalkingHeadAttention(24, num_heads=4, qkv_bias=True).double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = random_tokens(rng, 2, 10, 24)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x)).numpy()
        assert max_abs_diff(ours(torch.from_numpy(x)), expected) < F64
    p = params64(ours)
    got, attn = np_attn.talking_heads_attention(
        x, p["qkv.weight"], p["qkv.bias"], p["proj_l.weight"], p["proj_l.bias"],
        p["proj_w.weight"], p["proj_w.bias"], p["proj.weight"], p["proj.bias"], 4,
        return_attention=True)
    np.testing.assert_allclose(got, expected, rtol=0, atol=F64)
    ours.record_attention = True
    with torch.no_grad():
        ours(torch.from_numpy(x))
    np.testing.assert_allclose(ours.recorded.numpy(), attn, rtol=0, atol=F64)


def test_talking_heads_with_identity_maps_is_multi_head_attention(rng):
    """proj_l = proj_w = identity, zero bias: the heads do not talk, and we are back to
    ViT's attention -- a hand-checkable special case."""
    th = random64(pt_attn.TalkingHeadAttention(24, num_heads=4, qkv_bias=True), seed=5)
    with torch.no_grad():
        for lin in (th.proj_l, th.proj_w):
            lin.weight.copy_(torch.eye(4))
            lin.bias.zero_()
    mha = pt_attn.Attention(24, num_heads=4, qkv_bias=True).double().eval()
    mha.load_state_dict({k: v for k, v in th.state_dict().items() if "proj_" not in k})
    x = torch.from_numpy(random_tokens(rng, 2, 10, 24))
    with torch.no_grad():
        assert max_abs_diff(th(x), mha(x)) < F64


@pytest.mark.parametrize("in_keys", [True, False])
def test_class_attention_numpy_vs_torch(rng, in_keys):
    ca = random64(pt_ca.ClassAttention(24, 4, qkv_bias=True, class_token_in_keys=in_keys), seed=6)
    u = random_tokens(rng, 3, 11, 24)
    with torch.no_grad():
        fused = ca(torch.from_numpy(u)).numpy()
        ca.record_attention = True
        explicit = ca(torch.from_numpy(u)).numpy()
        weights = ca.recorded.numpy()
    got, attn = class_attention_numpy(u, params64(ca), 4, in_keys, return_attention=True)
    assert got.shape == (3, 1, 24) and attn.shape == (3, 4, 1, 11 if in_keys else 10)
    np.testing.assert_allclose(got, fused, rtol=0, atol=F64)
    np.testing.assert_allclose(got, explicit, rtol=0, atol=F64)
    np.testing.assert_allclose(attn, weights, rtol=0, atol=F64)
    np.testing.assert_allclose(attn.sum(-1), 1.0, rtol=0, atol=F64)


def test_class_attention_block_numpy_vs_torch_vs_timm(rng):
    from timm.models.cait import LayerScaleBlockClassAttn

    theirs = random64(LayerScaleBlockClassAttn(24, 4, mlp_ratio=2.0, qkv_bias=True,
                                                init_values=1e-5, norm_layer=LN), seed=9)
    ours = pt_ca.LayerScaleBlockClassAttn(24, 4, mlp_ratio=2.0).double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x, cls = random_tokens(rng, 2, 9, 24), random_tokens(rng, 2, 1, 24)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x), torch.from_numpy(cls)).numpy()
        assert max_abs_diff(ours(torch.from_numpy(x), torch.from_numpy(cls)), expected) < F64
    got = np_ca.class_attention_block(x, cls, params64(ours), 4)
    assert got.shape == (2, 1, 24)
    np.testing.assert_allclose(got, expected, rtol=0, atol=F64)


@pytest.mark.parametrize("in_keys", [True, False])
def test_cait_float64_numpy_vs_torch(rng, in_keys):
    model = random64(Cait(class_token_in_keys=in_keys, **CAIT_SMALL), seed=11)
    np_model = np_cait.Cait(model.cfg, params64(model))
    x = random_tokens(rng, 2, 3, 32, 32)
    with torch.no_grad():
        logits = model(torch.from_numpy(x)).numpy()
        maps = [m.numpy() for m in model.get_attention_maps(torch.from_numpy(x))]
    assert logits.dtype == np.float64
    np.testing.assert_allclose(np_model(x), logits, rtol=0, atol=F64)
    np_maps = np_model.get_attention_maps(x)
    assert len(maps) == len(np_maps) == 2
    for a, b in zip(maps, np_maps):
        assert a.shape == (2, 4, 1, 17 if in_keys else 16)
        np.testing.assert_allclose(b, a, rtol=0, atol=F64)
    # the grids: the weights on the patches only (after the class token's, when it is a key)
    with torch.no_grad():
        grids = [g.numpy() for g in model.get_attention_grids(torch.from_numpy(x))]
    np_grids = np_model.get_attention_grids(x)
    for maps_i, g, np_g in zip(maps, grids, np_grids):
        assert g.shape == np_g.shape == (2, 4, 4, 4)
        np.testing.assert_allclose(np_g, g, rtol=0, atol=F64)
        np.testing.assert_allclose(np_g.reshape(2, 4, 16), maps_i[:, :, 0, 1 if in_keys else 0:],
                                   rtol=0, atol=F64)


# --- CoaT: depthwise convolution, resizing, CPE, CRPE, conv-attention, blocks, models --------------


@pytest.mark.parametrize("k", [1, 3, 5, 7])
@pytest.mark.parametrize("conv", [np_cpe.depthwise_conv2d, np_fast.depthwise_conv2d],
                         ids=["formula", "fast"])
def test_depthwise_conv_equals_conv2d_groups(rng, k, conv):
    x = rng.standard_normal((3, 6, 9, 7))  # odd, non-square grid smaller than some windows
    w, b = rng.standard_normal((6, 1, k, k)), rng.standard_normal(6)
    expected = F.conv2d(t64(x), t64(w), t64(b), padding=k // 2, groups=6).numpy()
    got = conv(x, w, b)
    assert got.dtype == np.float64 and max_abs_diff(got, expected) < F64
    got_cl = conv(np.moveaxis(x, 1, -1), w, b, channels_last=True)
    assert max_abs_diff(np.moveaxis(got_cl, -1, 1), expected) < F64
    assert max_abs_diff(t_cpe.depthwise_conv2d(t64(x), t64(w), t64(b)), expected) < F64


@pytest.mark.parametrize("grid,factor", [
    (grid, factor) for grid in [(8, 8), (7, 7), (5, 9), (6, 10), (1, 3)]
    for factor in [2.0, 4.0, 0.5, 0.25] if min(grid) * factor >= 1])  # odd grids included
def test_bilinear_resize_equals_interpolate(rng, grid, factor):
    x = rng.standard_normal((2, 3, *grid))
    expected = F.interpolate(t64(x), scale_factor=factor, mode="bilinear", align_corners=False,
                             recompute_scale_factor=False).numpy()
    got = np_coscale.bilinear_resize(x, scale_factor=factor)
    assert got.shape == expected.shape and max_abs_diff(got, expected) < F64
    channels_last = np_coscale.bilinear_resize(np.moveaxis(x, 1, -1), scale_factor=factor, axes=(1, 2))
    assert max_abs_diff(np.moveaxis(channels_last, -1, 1), expected) < F64
    x32 = x.astype(np.float32)
    expected32 = F.interpolate(torch.from_numpy(x32), scale_factor=factor, mode="bilinear",
                               align_corners=False, recompute_scale_factor=False)
    got32 = np_coscale.bilinear_resize(x32, scale_factor=factor)
    assert got32.dtype == np.float32 and max_abs_diff(got32, expected32) < 1e-6
    assert max_abs_diff(t_coscale.bilinear_resize(t64(x), scale_factor=factor), expected) == 0.0


@pytest.mark.parametrize("size", [(3, 3), (12, 5), (7, 14), (2, 1)])
def test_bilinear_resize_to_a_size(rng, size):
    """With ``size`` the ratio is in/out (7 -> 3 is not ×½): PyTorch's other code path."""
    x = rng.standard_normal((1, 2, 7, 5))
    expected = F.interpolate(t64(x), size=size, mode="bilinear", align_corners=False).numpy()
    assert max_abs_diff(np_coscale.bilinear_resize(x, size=size), expected) < F64


def test_conv_pos_enc_both_rooms(rng):
    size, C = (3, 5), 6
    x = rng.standard_normal((2, 1 + 15, C))
    cpe = t_cpe.ConvPosEnc(C).double()
    vit_scratch.randomize_weights_(cpe, seed=0, std=0.3)
    expected = cpe(t64(x), size).detach()
    p = np_params(cpe)
    got = np_cpe.conv_pos_enc(x, p["proj.weight"], p["proj.bias"], size)
    assert max_abs_diff(got, expected) < F64
    np.testing.assert_array_equal(got[:, 0], x[:, 0])  # the class token passes unchanged
    grid = t64(x[:, 1:]).reshape(2, 3, 5, C).permute(0, 3, 1, 2)
    independent = grid + F.conv2d(grid, t64(p["proj.weight"]), t64(p["proj.bias"]), padding=1, groups=C)
    assert max_abs_diff(got[:, 1:], independent.flatten(2).transpose(1, 2)) < F64
    zero = np_cpe.conv_pos_enc(x, np.zeros_like(p["proj.weight"]), np.zeros(C), size)
    np.testing.assert_array_equal(zero, x)  # a zero kernel: the identity


@pytest.mark.parametrize("window", [{3: 2, 5: 3, 7: 3}, {5: 1, 3: 2}, 3])
def test_conv_rel_pos_enc_both_rooms(rng, window):
    heads = 8 if isinstance(window, dict) and sum(window.values()) == 8 else 3
    d, size = 4, (5, 6)
    crpe = t_cpe.ConvRelPosEnc(d, heads, window).double()
    vit_scratch.randomize_weights_(crpe, seed=1, std=0.3)
    q, v = rng.standard_normal((2, 2, heads, 31, d))
    expected = crpe(t64(q), t64(v), size).detach()
    weights = [c.weight.detach().numpy() for c in crpe.conv_list]
    biases = [c.bias.detach().numpy() for c in crpe.conv_list]
    got = np_cpe.conv_rel_pos_enc(q, v, size, weights, biases)
    assert max_abs_diff(got, expected) < F64
    np.testing.assert_array_equal(got[:, :, 0], 0.0)  # the class token's row is zero
    # independent: head by head, each with the window of its group
    windows = [w for w, n in crpe.window.items() for _ in range(n)]
    first_head = np.cumsum([0] + list(crpe.window.values()))
    for h in range(heads):
        g = int(np.searchsorted(first_head, h, side="right") - 1)
        w_h = weights[g][(h - first_head[g]) * d:(h - first_head[g] + 1) * d]
        b_h = biases[g][(h - first_head[g]) * d:(h - first_head[g] + 1) * d]
        assert w_h.shape[-1] == windows[h]
        v_h = t64(v[:, h, 1:]).reshape(2, *size, d).permute(0, 3, 1, 2)
        conv = F.conv2d(v_h, t64(w_h), t64(b_h), padding=windows[h] // 2, groups=d)
        ev = q[:, h, 1:] * conv.flatten(2).transpose(1, 2).numpy()
        assert max_abs_diff(got[:, h, 1:], ev) < F64


def test_factorized_attention_both_rooms_and_associativity(rng):
    q, k, v = rng.standard_normal((3, 2, 4, 50, 8))
    got = np_fa.factorized_attention(q, k, v)
    assert max_abs_diff(got, t_fa.factorized_attention(t64(q), t64(k), t64(v))) < F64
    ks = np.exp(k - k.max(axis=-2, keepdims=True))
    ks /= ks.sum(axis=-2, keepdims=True)  # softmax over the tokens: each channel sums to 1
    np.testing.assert_allclose(ks.sum(axis=-2), 1.0)
    weights = (q @ np.swapaxes(ks, -1, -2)) / np.sqrt(8)  # the N×N matrix it never builds
    assert max_abs_diff(got, weights @ v) < 1e-12  # Q (softmax(K)ᵀ V) = (Q softmax(K)ᵀ) V
    assert weights.min() < 0 and not np.allclose(weights.sum(-1), 1.0)  # not a softmax
    softmax_att = F.scaled_dot_product_attention(t64(q), t64(k), t64(v)).numpy()
    assert max_abs_diff(got, softmax_att) > 0.1  # a different function from softmax attention
    # queries and keys may differ in number (cross-attention)
    assert np_fa.factorized_attention(q[..., :7, :], k, v).shape == (2, 4, 7, 8)


def test_conv_attention_both_rooms(rng):
    att, size = conv_attention64(), (4, 5)
    x = rng.standard_normal((2, 21, 24))
    expected = att(t64(x), size).detach()
    assert max_abs_diff(np_fa.conv_attention(x, np_params(att), 8, size), expected) < F64
    # independent: the formula with the explicit N×N weights, heads split by hand
    q, k, v = (t.detach() for t in att.split_qkv(t64(x)))
    d = 3
    weights = (q @ k.softmax(dim=2).transpose(-1, -2)) * d ** -0.5  # (B, h, N, N)
    out = weights @ v + att.crpe(q, v, size).detach()
    out = F.linear(out.transpose(1, 2).reshape(2, 21, 24), att.proj.weight, att.proj.bias)
    assert max_abs_diff(out, expected) < F64


def test_serial_block_both_rooms(rng):
    model = float64_model("coat_lite_digits")
    blk, size = model.serial_blocks2[0], (4, 4)
    x = rng.standard_normal((2, 17, 64))
    expected = blk(t64(x), size).detach()
    got = np_coat.serial_block(x, np_params(blk), 4, size)
    assert max_abs_diff(got, expected) < F64


@pytest.mark.parametrize("mode", ["interpolation", "cross_attention"])
def test_parallel_block_both_rooms(rng, mode):
    model = float64_model(parallel_mode=mode, img_size=16)
    blk, sizes = model.parallel_blocks[0], [(8, 8), (4, 4), (2, 2)]
    xs = [rng.standard_normal((2, 1 + h * w, 64)) for h, w in sizes]
    expected = [y.detach() for y in blk([t64(x) for x in xs], sizes)]
    got = np_coscale.parallel_block(xs, np_params(blk), sizes, 4, mode)
    assert max_abs_diff(got, expected) < F64


@pytest.mark.parametrize("name,kwargs", [
    ("coat_lite_digits", {}), ("coat_digits", {}), ("coat_digits", dict(parallel_mode="cross_attention")),
    ("coat_tiny", COAT_SMALL), ("coat_lite_tiny", dict(img_size=32, num_classes=0)),
], ids=["lite-digits", "coat-digits", "coat-digits-cross", "small-coat", "lite-no-head"])
def test_whole_model_both_rooms_float64(name, kwargs):
    model = float64_model(name, **kwargs)
    np_model = numpy_twin(model, name, **kwargs)
    c, h, w = model.pretrained_cfg["input_size"]
    x = torch.randn(2, c, h, w, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x)
    got = np_model(x.numpy())
    assert got.dtype == np.float64 and max_abs_diff(got, expected) < 1e-11
    assert expected.abs().max() > 1e-2  # not a trivially small output


def test_numpy_params_with_or_without_aliases(rng):
    model = float64_model("coat_digits")
    full = np_params(model)
    canonical = {k: v for k, v in full.items()
                 if not any(k in g[1:] for g in shared_keys(model.cfg))}
    assert len(canonical) < len(full)
    x = rng.standard_normal((2, 1, 8, 8))
    a = numpy_twin(model)(x)
    b = vit_scratch.create_numpy_model("coat_digits", canonical)(x)
    np.testing.assert_array_equal(a, b)
    bad = dict(full)
    bad["serial_blocks2.0.cpe.proj.weight"] = bad["cpe2.proj.weight"] + 1.0
    with pytest.raises(ValueError, match=re.escape(
            "serial_blocks2.0.cpe.proj.weight and cpe2.proj.weight name one shared tensor but hold different values")):
        vit_scratch.create_numpy_model("coat_digits", bad)


def test_numpy_batch_threads_give_the_same_answer(monkeypatch):
    """The NumPy model splits a batch over threads (``_fast.split_batch``); any thread count
    gives the same logits as one thread, to rounding."""
    model = float64_model("coat_digits", parallel_mode="cross_attention")
    np_model = numpy_twin(model)
    x = np.random.default_rng(0).standard_normal((5, 1, 8, 8))
    outputs = {}
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("OMP_NUM_THREADS", threads)
        outputs[threads] = np_model(x)
    assert max_abs_diff(outputs["2"], outputs["1"]) < 1e-13
    assert max_abs_diff(outputs["3"], outputs["1"]) < 1e-13
    assert [len(c) for c in np_fast.split_batch(lambda c: c, x, threads=3)] == [1, 2, 2]


