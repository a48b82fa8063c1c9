"""CaiT: LayerScale, talking-heads attention, class attention and the model, in both rooms.

Each module is checked three ways: NumPy against PyTorch in float64 (to rounding, ~1e-12),
PyTorch against timm's module of the same name with the same (randomized) weights, and against a
hand-worked case where one exists.  The whole model: timm parity for every registered CaiT name
(strict load, fp32 logits), the class-token-in-keys switch, LayerScale's depth rule, the
attention maps, gradients, bad input, and the trainer.
"""
from functools import partial

import numpy as np
import pytest
import torch
from torch import nn

import vit_scratch
from helpers import check_logits_match_timm, make_pair, max_abs_diff
from vit_scratch.numpy_nn import attention as np_attn
from vit_scratch.numpy_nn import cait as np_cait
from vit_scratch.numpy_nn import class_attention as np_ca
from vit_scratch.numpy_nn import layerscale as np_ls
from vit_scratch.specs.cait import (CaitConfig, cait_param_shapes, layerscale_init_value,
                                    RESIDUAL_FORMS)
from vit_scratch.torch_nn import attention as pt_attn
from vit_scratch.torch_nn import class_attention as pt_ca
from vit_scratch.torch_nn import layerscale as pt_ls
from vit_scratch.torch_nn.cait import Cait

F64 = 1e-12
TORCH_TOL = 1e-5
NUMPY_TOL = 1e-4
CAIT_NAMES = vit_scratch.list_models("cait_*")
TIMM_CAIT_NAMES = [n for n in CAIT_NAMES if n != "cait_digits"]
LN = partial(nn.LayerNorm, eps=1e-6)


def _params64(module: nn.Module) -> dict:
    return vit_scratch.state_dict_to_numpy(module.state_dict(), dtype=np.float64)


def _random64(module: nn.Module, seed: int = 0, std: float = 0.2) -> nn.Module:
    """A float64 module in eval mode with every parameter random (LayerScale included)."""
    return vit_scratch.randomize_weights_(module.double().eval(), seed=seed, std=std)


def _tokens(rng, *shape):
    return rng.standard_normal(shape)


# --- LayerScale and the residual forms -------------------------------------------------------


@pytest.mark.parametrize("depth,eps", [(1, 0.1), (12, 0.1), (18, 0.1), (19, 1e-5), (24, 1e-5),
                                       (25, 1e-6), (36, 1e-6), (48, 1e-6)])
def test_layerscale_init_rule(depth, eps):
    assert layerscale_init_value(depth) == eps
    # init_values=None in a config means "the rule", and every gamma starts there
    model = vit_scratch.create_model("cait_digits", depth=depth, depth_token_only=1)
    assert model.cfg.init_values is None and model.cfg.layer_scale_init == eps
    gammas = [p for n, p in model.named_parameters() if "gamma" in n]
    assert len(gammas) == 2 * (depth + 1)
    assert all(torch.equal(g, torch.full_like(g, eps)) for g in gammas)


def test_layerscale_rule_follows_depth_changes_and_explicit_values_win():
    cfg = vit_scratch.get_config("cait_digits")
    assert cfg.replace(depth=24).layer_scale_init == 1e-5  # the rule is re-read, not frozen
    assert cfg.replace(depth=30, init_values=0.5).layer_scale_init == 0.5
    assert pt_ls.layerscale_init_value is np_ls.layerscale_init_value is layerscale_init_value


@pytest.mark.parametrize("name", TIMM_CAIT_NAMES)
def test_registered_init_values_are_timms(name):
    """The names keep the released values (cait_xxs36 uses 1e-5, not the rule's 1e-6)."""
    import timm

    small = dict(img_size=32, depth=1, depth_token_only=1)
    ours = vit_scratch.create_model(name, **small)
    theirs = timm.create_model(name, **small)
    assert torch.equal(ours.blocks[0].gamma_1, theirs.blocks[0].gamma_1)
    assert torch.equal(ours.blocks_token_only[0].gamma_2, theirs.blocks_token_only[0].gamma_2)


def test_layer_scale_and_scalar_gate(rng):
    x = _tokens(rng, 2, 5, 8)
    ls = _random64(pt_ls.LayerScale(8, init_values=0.1))
    gate = _random64(pt_ls.ScalarGate())
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
    block = _random64(pt_ls.ResidualBlock(16, 4, residual=residual, mlp_ratio=2.0), seed=1)
    x = _tokens(rng, 2, 7, 16)
    with torch.no_grad():
        expected = block(torch.from_numpy(x)).numpy()
    got = np_ls.residual_block(x, _params64(block), 4, residual=residual)
    np.testing.assert_allclose(got, expected, rtol=0, atol=F64)
    keys = set(block.state_dict())
    assert ("norm1.weight" in keys) == (residual != "rezero")
    expected = {"prenorm": set(), "rezero": {"ls1.alpha"}, "prenorm_scalar": {"ls1.alpha"},
                "layerscale": {"ls1.gamma"}}[residual]
    assert {k for k in keys if k.startswith("ls1.")} == expected


def test_residual_forms_at_initialisation():
    """Scalar forms start as the identity; LayerScale starts within ε of it; pre-norm does not."""
    torch.manual_seed(0)
    x = torch.randn(2, 7, 16)
    for residual in RESIDUAL_FORMS:
        block = pt_ls.ResidualBlock(16, 4, residual=residual, init_values=1e-4).eval()
        with torch.no_grad():
            change = (block(x) - x).abs().max().item()
        if residual in ("rezero", "prenorm_scalar"):
            assert change == 0.0
        elif residual == "layerscale":
            assert 0 < change < 1e-3
        else:
            assert change > 1e-2


def test_residual_block_layerscale_is_timms_vit_block_with_init_values(rng):
    from timm.models.vision_transformer import Block

    theirs = _random64(Block(16, 4, mlp_ratio=2.0, qkv_bias=True, init_values=1e-5, norm_layer=LN))
    ours = pt_ls.ResidualBlock(16, 4, residual="layerscale", mlp_ratio=2.0).double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.from_numpy(_tokens(rng, 2, 7, 16))
    with torch.no_grad():
        assert max_abs_diff(ours(x), theirs(x)) < F64
    prenorm = pt_ls.ResidualBlock(16, 4, residual="prenorm", mlp_ratio=2.0).double().eval()
    vit_block = vit_scratch.torch_nn.vit.Block(16, 4, mlp_ratio=2.0).double().eval()
    _random64(vit_block, seed=3)
    prenorm.load_state_dict(vit_block.state_dict(), strict=True)  # pre-norm = ViT's block
    with torch.no_grad():
        assert max_abs_diff(prenorm(x), vit_block(x)) < F64


@pytest.mark.parametrize("talking_heads", [True, False])
def test_layerscale_block_numpy_vs_torch_vs_timm(rng, talking_heads):
    from timm.models.cait import LayerScaleBlock, TalkingHeadAttn
    from timm.models.vision_transformer import Attention

    attn_block = TalkingHeadAttn if talking_heads else Attention
    theirs = _random64(LayerScaleBlock(24, 4, mlp_ratio=3.0, qkv_bias=True, init_values=1e-5,
                                       norm_layer=LN, attn_block=attn_block), seed=2)
    ours = pt_ls.LayerScaleBlock(24, 4, mlp_ratio=3.0, talking_heads=talking_heads)
    ours = ours.double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x = _tokens(rng, 2, 9, 24)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x)).numpy()
        assert max_abs_diff(ours(torch.from_numpy(x)), expected) < F64
    got = np_ls.layerscale_block(x, _params64(ours), 4, talking_heads=talking_heads)
    np.testing.assert_allclose(got, expected, rtol=0, atol=F64)


# --- talking-heads attention -----------------------------------------------------------------


def test_mix_heads_is_a_linear_layer_over_the_head_axis(rng):
    attn = _tokens(rng, 2, 3, 5, 6)
    lin = _random64(nn.Linear(3, 3), std=0.5)
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

    theirs = _random64(TalkingHeadAttn(24, num_heads=4, qkv_bias=True), seed=4)
    ours = pt_attn.TalkingHeadAttention(24, num_heads=4, qkv_bias=True).double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = _tokens(rng, 2, 10, 24)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x)).numpy()
        assert max_abs_diff(ours(torch.from_numpy(x)), expected) < F64
    p = _params64(ours)
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
    th = _random64(pt_attn.TalkingHeadAttention(24, num_heads=4, qkv_bias=True), seed=5)
    with torch.no_grad():
        for lin in (th.proj_l, th.proj_w):
            lin.weight.copy_(torch.eye(4))
            lin.bias.zero_()
    mha = pt_attn.Attention(24, num_heads=4, qkv_bias=True).double().eval()
    mha.load_state_dict({k: v for k, v in th.state_dict().items() if "proj_" not in k})
    x = torch.from_numpy(_tokens(rng, 2, 10, 24))
    with torch.no_grad():
        assert max_abs_diff(th(x), mha(x)) < F64


# --- class attention -------------------------------------------------------------------------


def _ca_numpy(u, p, heads, in_keys, return_attention=False):
    return np_ca.class_attention(u, p["q.weight"], p["q.bias"], p["k.weight"], p["k.bias"],
                                 p["v.weight"], p["v.bias"], p["proj.weight"], p["proj.bias"],
                                 heads, class_token_in_keys=in_keys,
                                 return_attention=return_attention)


@pytest.mark.parametrize("in_keys", [True, False])
def test_class_attention_numpy_vs_torch(rng, in_keys):
    ca = _random64(pt_ca.ClassAttention(24, 4, qkv_bias=True, class_token_in_keys=in_keys), seed=6)
    u = _tokens(rng, 3, 11, 24)
    with torch.no_grad():
        fused = ca(torch.from_numpy(u)).numpy()
        ca.record_attention = True
        explicit = ca(torch.from_numpy(u)).numpy()
        weights = ca.recorded.numpy()
    got, attn = _ca_numpy(u, _params64(ca), 4, in_keys, return_attention=True)
    assert got.shape == (3, 1, 24) and attn.shape == (3, 4, 1, 11 if in_keys else 10)
    np.testing.assert_allclose(got, fused, rtol=0, atol=F64)
    np.testing.assert_allclose(got, explicit, rtol=0, atol=F64)
    np.testing.assert_allclose(attn, weights, rtol=0, atol=F64)
    np.testing.assert_allclose(attn.sum(-1), 1.0, rtol=0, atol=F64)


def test_class_attention_is_the_first_row_of_self_attention(rng):
    """With k, v from all tokens, class attention is row 0 of full self-attention that uses the
    same projections -- computed N + 1 times cheaper."""
    ca = _random64(pt_ca.ClassAttention(24, 4, qkv_bias=True), seed=7)
    p = _params64(ca)
    u = _tokens(rng, 2, 9, 24)
    qkv_w = np.concatenate([p["q.weight"], p["k.weight"], p["v.weight"]])
    qkv_b = np.concatenate([p["q.bias"], p["k.bias"], p["v.bias"]])
    full, full_attn = np_attn.multi_head_attention(u, qkv_w, qkv_b, p["proj.weight"],
                                                   p["proj.bias"], 4, return_attention=True)
    got, attn = _ca_numpy(u, p, 4, True, return_attention=True)
    np.testing.assert_allclose(got, full[:, :1], rtol=0, atol=F64)
    np.testing.assert_allclose(attn, full_attn[:, :, :1], rtol=0, atol=F64)


def test_class_token_in_keys_switch_hand_worked(rng):
    """Zero query -> all scores equal -> uniform weights, so the output is proj(mean of the
    values it may look at): over [cls, patches] with the class token in the keys, over the
    patches alone without it."""
    C, heads, N = 8, 2, 5
    u = _tokens(rng, 1, 1 + N, C)
    p = _params64(_random64(pt_ca.ClassAttention(C, heads, qkv_bias=True), seed=8))
    p["q.weight"][:] = 0.0
    p["q.bias"][:] = 0.0
    v = u @ p["v.weight"].T + p["v.bias"]  # (1, 1 + N, C)
    for in_keys, rows in ((True, v[:, 0:]), (False, v[:, 1:])):
        out, attn = _ca_numpy(u, p, heads, in_keys, return_attention=True)
        np.testing.assert_allclose(attn, 1.0 / rows.shape[1], rtol=0, atol=F64)
        expected = rows.mean(axis=1, keepdims=True) @ p["proj.weight"].T + p["proj.bias"]
        np.testing.assert_allclose(out, expected, rtol=0, atol=F64)
    # Without the class token in the keys, its own value never reaches the output: changing
    # the class token changes nothing once its query is fixed (here: zero).
    u2 = u.copy()
    u2[:, 0] += 10.0
    np.testing.assert_allclose(_ca_numpy(u2, p, heads, False), _ca_numpy(u, p, heads, False),
                               rtol=0, atol=F64)
    assert np.abs(_ca_numpy(u2, p, heads, True) - _ca_numpy(u, p, heads, True)).max() > 0.1


def test_class_attention_block_numpy_vs_torch_vs_timm(rng):
    from timm.models.cait import LayerScaleBlockClassAttn

    theirs = _random64(LayerScaleBlockClassAttn(24, 4, mlp_ratio=2.0, qkv_bias=True,
                                                init_values=1e-5, norm_layer=LN), seed=9)
    ours = pt_ca.LayerScaleBlockClassAttn(24, 4, mlp_ratio=2.0).double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    x, cls = _tokens(rng, 2, 9, 24), _tokens(rng, 2, 1, 24)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x), torch.from_numpy(cls)).numpy()
        assert max_abs_diff(ours(torch.from_numpy(x), torch.from_numpy(cls)), expected) < F64
    got = np_ca.class_attention_block(x, cls, _params64(ours), 4)
    assert got.shape == (2, 1, 24)
    np.testing.assert_allclose(got, expected, rtol=0, atol=F64)


def test_class_attention_gradients_fused_equal_explicit():
    ca = _random64(pt_ca.ClassAttention(24, 4, qkv_bias=True), seed=10, std=0.3)
    u1 = torch.randn(2, 9, 24, dtype=torch.float64, requires_grad=True)
    u2 = u1.detach().clone().requires_grad_(True)
    fused = ca(u1)
    ca.record_attention = True
    explicit = ca(u2)
    fused.square().sum().backward()
    explicit.square().sum().backward()
    assert max_abs_diff(fused, explicit) < F64
    assert max_abs_diff(u1.grad, u2.grad) < F64


# --- the model -------------------------------------------------------------------------------

SMALL = dict(img_size=32, patch_size=8, embed_dim=24, depth=3, depth_token_only=2, num_heads=4,
             num_classes=5, init_values=0.1)


@pytest.mark.parametrize("in_keys", [True, False])
def test_cait_float64_numpy_vs_torch(rng, in_keys):
    model = _random64(Cait(class_token_in_keys=in_keys, **SMALL), seed=11)
    np_model = np_cait.Cait(model.cfg, _params64(model))
    x = _tokens(rng, 2, 3, 32, 32)
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


def test_class_token_in_keys_changes_the_function_not_the_parameters():
    with_cls = Cait(**SMALL)
    without = Cait(class_token_in_keys=False, **SMALL)
    assert {k: v.shape for k, v in with_cls.state_dict().items()} == \
        {k: v.shape for k, v in without.state_dict().items()}
    vit_scratch.randomize_weights_(with_cls, seed=12, std=0.2)
    without.load_state_dict(with_cls.state_dict(), strict=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert max_abs_diff(with_cls(x), without(x)) > 1e-4
        grids = without.get_attention_grids(x)
    assert all(g.shape == (2, 4, 4, 4) for g in grids)
    assert all(torch.allclose(g.sum((-1, -2)), torch.ones(2, 4, dtype=g.dtype)) for g in grids)


def test_class_attention_stage_leaves_the_patch_tokens_alone():
    model = vit_scratch.randomize_weights_(Cait(**SMALL).eval(), seed=13, std=0.2)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        patches = model.blocks(model.embed(x))
        feats = model.forward_features(x)
    assert torch.equal(feats[:, 1:], model.norm(patches))
    assert max_abs_diff(feats[:, :1], model.norm(model.cls_token.expand(2, -1, -1))) > 1e-3


@pytest.mark.parametrize("name", TIMM_CAIT_NAMES)
def test_logits_match_timm(name):
    """Every name at its native size (batch 1 at 384²): strict load, same keys in the same
    order, the spec's table, fp32 logits within 1e-5 (PyTorch) and 1e-4 (NumPy)."""
    oracle, ours = make_pair(name, seed=1)
    cfg = ours.cfg
    batch = 2 if cfg.img_size == (224, 224) else 1
    x = torch.randn(batch, 3, *cfg.img_size, generator=torch.Generator().manual_seed(0))
    check_logits_match_timm(name, oracle, ours, x, cait_param_shapes(cfg), min_scale=0.1,
                            torch_tol=TORCH_TOL, numpy_tol=NUMPY_TOL)


def test_cait_xxs24_parameter_count():
    model = vit_scratch.create_model("cait_xxs24_224")
    assert sum(p.numel() for p in model.parameters()) == 11_956_264
    assert len(model.state_dict()) == 476
    assert vit_scratch.create_model("cait_xxs24_224").pos_embed.shape == (1, 196, 192)


def test_attention_maps_match_timm_unfused_with_a_hook():
    """The classic extraction recipe on timm's unfused class attention: a hook on attn_drop sees
    softmax(q kᵀ/√d).  Ours gives the same maps while the normal forward stays fused."""
    oracle, ours = make_pair("cait_xxs24_224", seed=4, img_size=64, depth=2)
    captured = []
    for blk in oracle.blocks_token_only:
        blk.attn.fused_attn = False
        blk.attn.attn_drop.register_forward_hook(lambda m, inp, out: captured.append(inp[0]))
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        oracle(x)
        maps = ours.get_attention_maps(x)
        grids = ours.get_attention_grids(x)
    assert len(maps) == len(captured) == 2
    for a, b, g in zip(maps, captured, grids):
        assert a.shape == (2, 4, 1, 17) and g.shape == (2, 4, 4, 4)
        assert max_abs_diff(a, b) <= 1e-6
        assert torch.equal(g, a[:, :, 0, 1:].reshape(2, 4, 4, 4))  # raster order
        assert max_abs_diff(a.sum(-1), torch.ones(2, 4, 1)) < 1e-6
    assert all(not m.record_attention and m.recorded is None for m in ours.attention_modules())
    assert len(ours.attention_modules()) == 2  # class attention only, not the 2 SA layers


def test_normal_forward_keeps_the_fused_path(monkeypatch):
    """Outside get_attention_maps, class attention never builds its weights explicitly."""
    model = Cait(**SMALL).eval()
    x = torch.randn(1, 3, 32, 32)

    def explicit(*args, **kwargs):
        raise AssertionError("explicit attention weights on the normal path")

    monkeypatch.setattr(pt_ca, "attention_weights", explicit)
    with torch.no_grad():
        model(x)
    with pytest.raises(AssertionError, match="explicit"):
        model.get_attention_maps(x)


def test_forward_intermediates_nlc_and_early_stop_match_timm():
    oracle, ours = make_pair("cait_xxs24_224", seed=6, img_size=64, depth=4)
    np_model = vit_scratch.create_numpy_model(
        "cait_xxs24_224", vit_scratch.state_dict_to_numpy(ours.state_dict()), img_size=64, depth=4)
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        final, maps = ours.forward_intermediates(x, indices=[1, -1], output_fmt="NLC", norm=True)
        final_t, maps_t = oracle.forward_intermediates(x, indices=[1, -1], output_fmt="NLC",
                                                       norm=True)
        only = ours.forward_intermediates(x, indices=[0], intermediates_only=True)
        only_t = oracle.forward_intermediates(x, indices=[0], intermediates_only=True)
    assert max_abs_diff(final, final_t) < 1e-5
    for a, b in zip(maps + only, maps_t + only_t):
        assert max_abs_diff(a, b) < 1e-5
    assert maps[0].shape == (2, 16, 192) and only[0].shape == (2, 192, 4, 4)
    np_only = np_model.forward_intermediates(x.numpy(), indices=[0], intermediates_only=True)
    assert max_abs_diff(np_only[0], only[0]) < 1e-4


def test_checkpoint_at_another_resolution(tmp_path):
    """CaiT's pos_embed has no class-token entry (pos_embed_prefix_tokens = 0): the whole of it
    is the patch grid, resized as timm resizes it."""
    import timm
    from timm.layers import resample_abs_pos_embed

    source, _ = make_pair("cait_xxs24_224", seed=8, img_size=64, depth=2)
    path = tmp_path / "cait_64.safetensors"
    vit_scratch.save_checkpoint(source, path)
    ours = vit_scratch.load_checkpoint(
        vit_scratch.create_model("cait_xxs24_224", img_size=96, depth=2), path).eval()
    assert ours.pos_embed.shape == (1, 36, 192)
    sd = dict(source.state_dict())
    sd["pos_embed"] = resample_abs_pos_embed(sd["pos_embed"], [6, 6], [4, 4], num_prefix_tokens=0)
    oracle = timm.create_model("cait_xxs24_224", img_size=96, depth=2).eval()
    oracle.load_state_dict(sd, strict=True)
    x = torch.randn(1, 3, 96, 96, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        assert max_abs_diff(ours(x), oracle(x)) <= TORCH_TOL


def test_gradients_reach_every_parameter():
    model = Cait(**SMALL)
    vit_scratch.randomize_weights_(model, seed=14)
    x = torch.randn(2, 3, 32, 32)
    loss = nn.functional.cross_entropy(model(x), torch.tensor([0, 3]))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_dropout_and_drop_path_act_in_training_only():
    model = Cait(**{**SMALL, "drop_rate": 0.3, "attn_drop_rate": 0.3, "drop_path_rate": 0.3})
    assert [b.drop_path.p for b in model.blocks] == [0.3] * 3  # constant, as in CaiT
    assert all(b.drop_path.p == 0.0 for b in model.blocks_token_only)
    x = torch.randn(2, 3, 32, 32)
    model.train()
    torch.manual_seed(0)
    a = model(x)
    torch.manual_seed(1)
    b = model(x)
    assert max_abs_diff(a, b) > 1e-4
    model.eval()
    assert torch.equal(model(x), model(x))


def test_numpy_cait_leaves_torch_unimported():
    import subprocess
    import sys

    code = ("import sys, numpy as np, vit_scratch; "
            "from vit_scratch.specs.cait import cait_param_shapes; "
            "cfg = vit_scratch.get_config('cait_digits'); "
            "params = {k: np.zeros(s, np.float32) for k, s in cait_param_shapes(cfg).items()}; "
            "m = vit_scratch.create_numpy_model('cait_digits', params); "
            "y = m(np.zeros((1, 1, 24, 24), np.float32)); "
            "print(y.shape, 'torch' in sys.modules, 'timm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(1, 10) False False"


# --- the trainer -----------------------------------------------------------------------------


def test_train_command_trains_cait_digits(tmp_path, capsys):
    """``python -m vit_scratch.train --model cait_digits --epochs 1`` through the family-neutral
    trainer; the checkpoint reloads in both rooms."""
    from vit_scratch.train import load_run, main

    out = tmp_path / "cait"
    main(["--model", "cait_digits", "--epochs", "1", "--device", "cpu", "--progress", "off",
          "--model-arg", "depth=2", "--out", str(out)])
    assert "test accuracy" in capsys.readouterr().out
    model = load_run(out)
    np_model = vit_scratch.create_numpy_model("cait_digits", vit_scratch.state_dict_to_numpy(
        model.state_dict()), depth=2)
    x = torch.rand(4, *model.pretrained_cfg["input_size"])
    with torch.no_grad():
        assert max_abs_diff(np_model(x.numpy()), model(x)) < NUMPY_TOL
    gammas = model.blocks[0].gamma_1
    assert not torch.equal(gammas, torch.full_like(gammas, model.cfg.layer_scale_init))


def test_weight_decay_skips_tokens_and_layerscale():
    from vit_scratch.train import param_groups

    model = vit_scratch.create_model("cait_digits")
    decay, no_decay = param_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert model.no_weight_decay() == {"cls_token", "pos_embed"}
    assert not decayed & {"cls_token", "pos_embed"}
    assert not any("gamma" in n for n in decayed)  # LayerScale vectors are 1-D: no decay
    assert {"blocks.0.attn.proj_l.weight", "blocks_token_only.0.attn.q.weight"} <= decayed


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.0, -1e-5, float("nan"), "small"])
def test_init_values_must_be_positive(value):
    match = "init_values must be a positive number"
    # configs check the field's type first (vit_scratch.checks, issue 10): NaN and strings are
    # named as "a finite number or None"
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


@pytest.mark.parametrize("kwargs,match", [
    (dict(embed_dim=100, num_heads=3), "embed_dim 100 is not divisible by num_heads 3"),
    (dict(img_size=9), "image size 9 is not divisible by patch size [26]"),
    (dict(num_classes=-1), "num_classes must be an int >= 0, got -1"),
    (dict(mlp_ratio=0), "mlp_ratio must be positive, got 0"),
    (dict(mlp_ratio_token_only=-2.0), "mlp_ratio_token_only must be positive"),
    (dict(drop_path_rate=1.0), r"drop_path_rate must be in \[0, 1\), got 1.0"),
    (dict(depth=0), "depth must be a positive int, got 0"),
])
def test_config_errors(kwargs, match):
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


def test_image_errors_both_rooms():
    model = vit_scratch.create_model("cait_digits")
    np_model = vit_scratch.create_numpy_model(
        "cait_digits", vit_scratch.state_dict_to_numpy(model.state_dict()))
    for m, zeros in ((model, torch.zeros), (np_model, np.zeros)):
        with pytest.raises(ValueError, match="images have 3 channels but the model expects"):
            m(zeros((1, 3, 24, 24)))
        with pytest.raises(ValueError, match="image size 12 does not match the model's img_size 24"):
            m(zeros((1, 1, 12, 12)))
