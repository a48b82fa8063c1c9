"""Our models against timm, the oracle: same keys, strict load, same logits (fp32), the same
attention maps and intermediate features, the same answers at other resolutions.

Every timm parameter is randomized first (``randomize_weights_``): timm initialises biases to 0
and LayerNorms to identity, which would hide a missing bias or a wrong eps.
"""
import numpy as np
import pytest
import torch

import vit_scratch
from helpers import (check_logits_match_timm, F64, family_of, LN, make_pair, max_abs_diff,
                     NUMPY_TOL, random64, random_tokens, small_kwargs, timm_names, TORCH_TOL)
from tools import timm_suite
from vit_scratch import load_checkpoint, resize_pos_embed, save_checkpoint
from vit_scratch.models import lookup
from vit_scratch.torch_nn import layerscale as pt_ls


# --- logits, every name ----------------------------------------------------------------------------


#: The parity every family keeps with timm: the smallest max |logit| that counts as
#: non-trivial, and the tolerances.  A family or variant not named in :data:`PARITY` keeps these.
DEFAULT_PARITY = dict(min_scale=0.1, torch_tol=TORCH_TOL, numpy_tol=NUMPY_TOL)
#: Families with other tolerances: CoaT's, relative to the largest logit.
PARITY = {"coat": dict(min_scale=0.01, torch_tol=1e-5, numpy_tol=1e-5, relative=True)}
TIMM_NAMES = timm_names()
#: Names checked at full size, at their native input size: the smallest timm name of each
#: architecture -- each family and variant (``timm_suite.representatives``: DeiT-Ti, DeiT-Ti⚗,
#: DeiT III-S, CaiT-XXS24, CoaT-Lite Tiny, CoaT Tiny).  The ``*_digits`` names are small
#: already and run as they are.
FULL_SIZE = set(timm_suite.representatives(TIMM_NAMES))
#: timm's coat_small builder takes no depth overrides: its own depths, at 64².
TIMM_FIXED_DEPTHS = {"coat_small"}


def _parity_kwargs(name: str) -> dict:
    """Every other timm name keeps all that its builder sets (widths, heads, MLP ratios, biases,
    LayerScale's ε, the CRPE windows) with two blocks (CoaT: one per scale and one parallel
    block) at a small input (``helpers.small_kwargs``): the same code, a fraction of the cost."""
    if name in FULL_SIZE or name not in TIMM_NAMES:
        return {}
    if name in TIMM_FIXED_DEPTHS:
        return dict(img_size=64)
    kwargs = small_kwargs(name)
    if hasattr(vit_scratch.get_config(name), "depth"):
        kwargs["depth"] = 2
    return kwargs


@pytest.mark.parametrize("name", vit_scratch.list_models())
def test_logits_match_timm(name):
    """Every registered name (our ``*_digits`` configs against timm's class of the family built
    with the same fields, ``helpers.timm_twin``): same keys in the same order, the spec's
    {key: shape} table, a strict load, non-trivial fp32 logits within the tolerances in both
    rooms."""
    family, spec = lookup(name)
    kwargs = _parity_kwargs(name)
    oracle, ours = make_pair(name, seed=1, **kwargs)
    c, h, w = ours.pretrained_cfg["input_size"]
    batch = 2 if (h, w) <= (224, 224) else 1
    x = torch.randn(batch, c, h, w, generator=torch.Generator().manual_seed(0))
    check_logits_match_timm(name, oracle, ours, x, family.spec.MODELS.param_shapes(ours.cfg),
                            **PARITY.get(family_of(name), DEFAULT_PARITY), **kwargs)


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


TIMM_CAIT_NAMES = [n for n in timm_names() if family_of(n) == "cait"]


@pytest.mark.parametrize("name", TIMM_CAIT_NAMES)
def test_registered_init_values_are_timms(name):
    """The names keep the released values (cait_xxs36 uses 1e-5, not the rule's 1e-6)."""
    import timm

    small = dict(img_size=32, depth=1, depth_token_only=1)
    ours = vit_scratch.create_model(name, **small)
    theirs = timm.create_model(name, **small)
    assert torch.equal(ours.blocks[0].gamma_1, theirs.blocks[0].gamma_1)
    assert torch.equal(ours.blocks_token_only[0].gamma_2, theirs.blocks_token_only[0].gamma_2)


def test_residual_block_layerscale_is_timms_vit_block_with_init_values(rng):
    from timm.models.vision_transformer import Block

    theirs = random64(Block(16, 4, mlp_ratio=2.0, qkv_bias=True, init_values=1e-5, norm_layer=LN))
    ours = pt_ls.ResidualBlock(16, 4, residual="layerscale", mlp_ratio=2.0).double().eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.from_numpy(random_tokens(rng, 2, 7, 16))
    with torch.no_grad():
        assert max_abs_diff(ours(x), theirs(x)) < F64
    prenorm = pt_ls.ResidualBlock(16, 4, residual="prenorm", mlp_ratio=2.0).double().eval()
    vit_block = vit_scratch.torch_nn.vit.Block(16, 4, mlp_ratio=2.0).double().eval()
    random64(vit_block, seed=3)
    prenorm.load_state_dict(vit_block.state_dict(), strict=True)  # pre-norm = ViT's block
    with torch.no_grad():
        assert max_abs_diff(prenorm(x), vit_block(x)) < F64


def test_vit_block_is_the_residual_block_and_takes_timms_init_values(rng):
    """One block class for the ViT family: ``vit.Block`` is ``layerscale.ResidualBlock``; with
    timm's ``init_values`` it is timm's LayerScale block (DeiT III's), without it ViT's."""
    from timm.models.vision_transformer import Block

    assert vit_scratch.torch_nn.vit.Block is pt_ls.ResidualBlock
    x = torch.from_numpy(random_tokens(rng, 2, 7, 16))
    for init_values, residual in ((None, "prenorm"), (1e-6, "layerscale")):
        theirs = random64(Block(16, 4, mlp_ratio=2.0, qkv_bias=True, init_values=init_values,
                                norm_layer=LN), seed=5)
        ours = vit_scratch.torch_nn.vit.Block(16, 4, mlp_ratio=2.0, init_values=init_values)
        assert ours.residual == residual
        ours = ours.double().eval()
        ours.load_state_dict(theirs.state_dict(), strict=True)
        with torch.no_grad():
            assert max_abs_diff(ours(x), theirs(x)) < F64
    assert torch.equal(pt_ls.ResidualBlock(16, 4, init_values=1e-6).ls2.gamma,
                       torch.full((16,), 1e-6))  # LayerScale starts at ε, as timm's


def test_layerscale_starts_at_init_values_as_timms_deit3():
    """DeiT III's LayerScale vectors start at ε = 1e-6, as timm's, and ``reset_parameters``
    puts them back there (and a pre-norm ViT has none)."""
    import timm

    small = dict(img_size=32, depth=2)
    model = vit_scratch.create_model("deit3_small_patch16_224", **small)
    theirs = timm.create_model("deit3_small_patch16_224", **small)
    gammas = {k: v for k, v in model.state_dict().items() if ".ls" in k}
    assert list(gammas) == [k for k in theirs.state_dict() if ".ls" in k] and len(gammas) == 4
    for key, gamma in gammas.items():
        assert torch.equal(gamma, theirs.state_dict()[key]), key
        assert torch.equal(gamma, torch.full((384,), 1e-6)), key
    vit_scratch.randomize_weights_(model, seed=1)
    model.reset_parameters()
    assert all(torch.equal(v, torch.full((384,), 1e-6)) for k, v in model.state_dict().items()
               if ".ls" in k)
    assert not any(".ls" in k for k in vit_scratch.create_model("vit_digits").state_dict())


def test_deit3_checkpoint_loads_strictly_and_at_other_sizes(tmp_path):
    """A timm DeiT III file (no metadata): strictly into the same model, with timm's logits in
    both rooms; into one built for 96² and into one with ``dynamic_img_size`` at 64×96, its
    pos_embed -- the patch grid alone: the class token has no position -- resized as timm
    resizes it (the grid's rows and columns each where they belong)."""
    import timm
    from timm.models.vision_transformer import checkpoint_filter_fn

    name, small = "deit3_small_patch16_224", dict(img_size=64, depth=2)
    source, _ = make_pair(name, seed=8, **small)
    path = tmp_path / "deit3_small_64.pth"
    torch.save(source.state_dict(), path)  # timm's own file: no metadata
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    same = load_checkpoint(vit_scratch.create_model(name, **small), path).eval()
    assert same.pos_embed.shape == (1, 16, 384) and same.pos_embed_prefix_tokens == 0
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(vit_scratch.read_state_dict(path)), **small)
    with torch.no_grad():
        expected = source(x)
        assert max_abs_diff(same(x), expected) <= TORCH_TOL
    assert max_abs_diff(np_model(x.numpy()), expected) <= NUMPY_TOL
    ours = load_checkpoint(vit_scratch.create_model(name, img_size=96, depth=2), path).eval()
    oracle = timm.create_model(name, img_size=96, depth=2).eval()
    oracle.load_state_dict(checkpoint_filter_fn(source.state_dict(), oracle), strict=True)
    x = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert max_abs_diff(ours.pos_embed, oracle.pos_embed) <= 1e-6
        assert max_abs_diff(ours(x), oracle(x)) <= TORCH_TOL
    dynamic = vit_scratch.create_model(name, dynamic_img_size=True, **small).eval()
    dynamic.load_state_dict(source.state_dict(), strict=True)
    oracle = timm.create_model(name, dynamic_img_size=True, **small).eval()
    oracle.load_state_dict(source.state_dict(), strict=True)
    x = torch.randn(2, 3, 64, 96, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = oracle(x)
        assert max_abs_diff(dynamic(x), expected) <= TORCH_TOL
        assert max_abs_diff(dynamic(x.transpose(-1, -2)), oracle(x.transpose(-1, -2))) <= TORCH_TOL


def test_cross_attention_uses_the_same_parameters_and_timm_weights_load():
    oracle, _ = make_pair("coat_tiny", seed=6, img_size=64)
    cross = vit_scratch.create_model("coat_tiny", img_size=64, parallel_mode="cross_attention")
    cross.load_state_dict(oracle.state_dict(), strict=True)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = oracle(x), cross.eval()(x)
    assert a.shape == b.shape and max_abs_diff(a, b) > 1e-3  # same weights, another function


# --- attention maps and intermediate features ------------------------------------------------------


def test_attention_maps_match_timm_unfused():
    """timm's unfused path passes the attention weights through ``attn_drop``; a forward hook
    there is the classic extraction recipe.  Our ``get_attention_maps`` must give the same maps
    without giving up the fused path for normal forwards."""
    oracle, ours = make_pair("vit_tiny_patch16_224", seed=4, img_size=64, depth=3)
    captured = []
    for blk in oracle.blocks:
        blk.attn.fused_attn = False
        blk.attn.attn_drop.register_forward_hook(lambda m, inp, out: captured.append(inp[0]))
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        oracle(x)
        maps = ours.get_attention_maps(x)
    assert len(maps) == len(captured) == 3
    for a, b in zip(maps, captured):
        assert a.shape == (1, 3, 17, 17)
        assert max_abs_diff(a, b) <= 1e-6


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


# --- other resolutions -----------------------------------------------------------------------------


@pytest.mark.parametrize("as_numpy", [False, True], ids=["tensor", "ndarray"])
def test_resize_pos_embed_reads_old_grid_as_rows_then_columns(as_numpy):
    """The grid's entries are read in raster order over ``old_grid=(rows, cols)``: on a 3×5
    grid whose two channels are each entry's row and column, the resized grid's row channel is
    the same along every row and grows down the columns, and the column channel the other way
    round -- the positions stay where they were.  A transposed ``old_grid`` (5, 3) holds as many
    entries and is read as it says, scrambling them: nothing in the tensor tells the two apart
    (``load_checkpoint`` reads the grid from the file for that reason)."""
    rows, cols = np.meshgrid(np.arange(3.0), np.arange(5.0), indexing="ij")  # (3, 5) each
    grid = np.stack([rows, cols], axis=-1).reshape(1, 15, 2)
    pe = np.concatenate([np.full((1, 1, 2), 7.0), grid], axis=1).astype(np.float32)
    pe = pe if as_numpy else torch.from_numpy(pe)
    out = np.asarray(resize_pos_embed(pe, (6, 10), old_grid=(3, 5), mode="bilinear"))
    assert out.shape == (1, 61, 2) and np.array_equal(out[0, 0], [7.0, 7.0])
    new = out[0, 1:].reshape(6, 10, 2)
    assert np.allclose(new[..., 0], new[:, :1, 0]) and np.all(np.diff(new[:, 0, 0]) >= 0)
    assert np.allclose(new[..., 1], new[:1, :, 1]) and np.all(np.diff(new[0, :, 1]) >= 0)
    assert new[-1, 0, 0] > new[0, 0, 0] and new[0, -1, 1] > new[0, 0, 1]
    same = np.asarray(resize_pos_embed(pe, (3, 5), old_grid=(3, 5)))
    assert np.array_equal(same, np.asarray(pe))
    transposed = np.asarray(resize_pos_embed(pe, (6, 10), old_grid=(5, 3), mode="bilinear"))
    assert not np.allclose(transposed[0, 1:].reshape(6, 10, 2)[..., 0], new[:, :1, 0])


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


def test_distilled_checkpoint_loads_strictly_and_at_another_size(tmp_path):
    """A timm DeiT⚗ checkpoint: strictly into the same model (logits and the training pair
    equal), and into one built for 96² where its pos_embed -- two prefix entries, the class and
    the distillation token's, then the 4×4 grid -- is resized as timm's checkpoint filter
    resizes it."""
    import timm
    from timm.models.vision_transformer import checkpoint_filter_fn

    name, small = "deit_small_distilled_patch16_224", dict(img_size=64, depth=2)
    source, _ = make_pair(name, seed=8, **small)
    path = tmp_path / "deit_small_distilled_64.pth"
    torch.save(source.state_dict(), path)  # timm's own file: no metadata
    x = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(3))
    same = load_checkpoint(vit_scratch.create_model(name, **small), path).eval()
    with torch.no_grad():
        assert max_abs_diff(same(x), source(x)) <= TORCH_TOL
        for m in (same, source):
            m.set_distilled_training(True)
            m.train()
        assert max_abs_diff(same(x), source(x)) <= TORCH_TOL  # the pair
    ours = load_checkpoint(vit_scratch.create_model(name, img_size=96, depth=2), path).eval()
    assert ours.pos_embed.shape == (1, 2 + 36, 384)
    oracle = timm.create_model(name, img_size=96, depth=2).eval()
    oracle.load_state_dict(checkpoint_filter_fn(source.state_dict(), oracle), strict=True)
    x = torch.randn(2, 3, 96, 96, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert max_abs_diff(ours.pos_embed, oracle.pos_embed) <= 1e-6
        assert max_abs_diff(ours(x), oracle(x)) <= TORCH_TOL


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


@pytest.mark.parametrize("name", ["coat_lite_tiny", "coat_tiny"])
def test_other_input_sizes_without_rebuilding(name):
    """Built for 224, called at 160×224 and 96×96: the same as timm built for that size with the
    same weights (timm must be rebuilt; CoaT has no position embedding to resize)."""
    import timm

    oracle224, ours = make_pair(name, seed=5, num_classes=10)
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(ours.state_dict()), num_classes=10)
    for hw in [(160, 224), (96, 96)]:
        oracle = timm.create_model(name, img_size=hw, num_classes=10).eval()
        oracle.load_state_dict(oracle224.state_dict())
        x = torch.randn(1, 3, *hw, generator=torch.Generator().manual_seed(6))
        with torch.no_grad():
            expected = oracle(x)
            assert max_abs_diff(ours(x), expected) <= 1e-5 * expected.abs().max()
            maps = ours.forward_intermediates(x, intermediates_only=True)
            maps_t = oracle.forward_intermediates(x, intermediates_only=True)
        assert [m.shape[-2:] for m in maps] == [(hw[0] // s, hw[1] // s) for s in (4, 8, 16, 32)]
        assert max_abs_diff(maps, maps_t) < 1e-4
        assert max_abs_diff(np_model(x.numpy()), expected) <= 1e-5 * expected.abs().max()


