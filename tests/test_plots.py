"""The figure helpers and the arrays behind them: shapes and values, no pixels compared."""
import matplotlib.pyplot as plt
import numpy as np
import pytest

from vit_scratch import plotting
from vit_scratch.data import sample_image
from vit_scratch.numpy_nn.patch_embed import patchify


# --- figures ---------------------------------------------------------------------------------------


DIGITS16 = dict(input_size=(1, 16, 16), mean=(0.5,), std=(0.25,), interpolation="bilinear",
                crop_pct=1.0)


def test_patch_mosaic_keeps_every_patch_in_place():
    img = np.random.default_rng(0).random((3, 8, 12))
    mosaic = plotting.patch_mosaic(patchify(img[None], 4)[0], (2, 3), 4, gap=1)
    assert mosaic.shape == (2 * 5, 3 * 5, 3)
    np.testing.assert_array_equal(mosaic[5:9, 10:14], img[:, 4:8, 8:12].transpose(1, 2, 0))
    assert (mosaic[4, :] == 1.0).all()  # the gap


def test_similarity_mosaic_tiles():
    sim = np.arange(36.0).reshape(6, 6)  # grid (2, 3): 6 patches
    mosaic = plotting.similarity_mosaic(sim, (2, 3), gap=1)
    assert mosaic.shape == (2 * 3, 3 * 4)
    # tile (row 1, col 2) is patch 5's row, drawn on the grid
    np.testing.assert_array_equal(mosaic[3:5, 8:11], sim[5].reshape(2, 3))
    assert np.isnan(mosaic[2]).all()


def test_upsample_and_figures_draw():
    attn = np.arange(6, dtype=np.float32).reshape(2, 3)
    up = plotting.upsample_map(attn, 4)
    assert up.shape == (8, 12) and (up[4:8, 8:12] == 5).all()
    img = sample_image(48)
    fig, axes = plt.subplots(1, 3)
    plotting.draw_patch_grid(img, 16, ax=axes[0], numbers=True)
    plotting.plot_attention_overlay(img, np.random.default_rng(0).random((3, 3)), 16, ax=axes[1],
                                    vmin=0, vmax=1)
    _, image = plotting.plot_similarity_grid(np.eye(9), (3, 3), ax=axes[2], vmin=None, vmax=None)
    assert image.get_clim() == (0.0, 1.0)
    assert len(axes[0].texts) == 9
    plt.close(fig)


def test_figures_for_maps():
    img = np.random.default_rng(0).random((1, 8, 8)).repeat(3, 0)
    maps = np.random.default_rng(1).random((2, 3, 4, 4))
    fig = plotting.plot_layer_head_maps(img, maps, boxes=(1, 2, 4, 4), title="t")
    assert len(fig.axes) == 2 * 4
    plt.close(fig)
    np.testing.assert_allclose(plotting.unnormalize(np.zeros((1, 2, 2)), DIGITS16), 0.5)


# --- arrays from a model, through the interface ----------------------------------------------------


def test_share_inside_boxes_hand_worked():
    maps = np.zeros((2, 2, 2))
    maps[0, 0, 0] = 1.0  # image 0: all attention on the top-left cell (pixels 0-1 × 0-1)
    maps[1] = 0.25  # image 1: uniform
    boxes = np.array([[0, 0, 1, 1], [1, 1, 2, 3]])  # (top, left, height, width)
    share = plotting.share_inside_boxes(maps, boxes, (4, 4))
    np.testing.assert_allclose(share, [1 / 4, 6 / 16])  # a quarter of the cell; the box's area
    masks = plotting.box_masks(boxes, (4, 4))
    assert masks.sum() == 1 + 6 and masks[1, 2, 3] and not masks[1, 3, 3]


def test_rollout_grids_and_similarity_from_a_model():
    import torch

    import vit_scratch
    from vit_scratch.numpy_nn.attention import attention_rollout

    torch.manual_seed(0)
    model = vit_scratch.create_model("vit_digits", depth=2).eval()
    images = torch.randn(3, 1, 24, 24)
    with torch.no_grad():
        maps = [m.numpy() for m in model.get_attention_maps(images)]
    grids = plotting.attention_grids(model, images)
    assert len(grids) == 2 and grids[0].shape == (3, 4, 4, 4) and isinstance(grids[0], np.ndarray)
    np.testing.assert_allclose(grids[1], maps[1][:, :, 0, 1:].reshape(3, 4, 4, 4))
    rollout = plotting.attention_rollout_grid(model, images)
    np.testing.assert_allclose(rollout, attention_rollout(maps)[:, 0, 1:].reshape(3, 4, 4),
                               rtol=1e-6)
    assert (rollout.sum(axis=(1, 2)) < 1).all()  # the class token keeps some for itself
    np_model = vit_scratch.create_numpy_model(
        "vit_digits", vit_scratch.state_dict_to_numpy(model.state_dict()), depth=2)
    np.testing.assert_allclose(plotting.attention_rollout_grid(np_model, images.numpy()),
                               rollout, atol=1e-5)
    sim, grid = plotting.pos_embed_similarity(model)
    pe = model.pos_embed.detach().double()[0, 1:]
    expected = torch.nn.functional.cosine_similarity(pe[:, None], pe[None], dim=-1)
    assert grid == (4, 4) and sim.shape == (16, 16)
    np.testing.assert_allclose(sim, expected.numpy(), atol=1e-12)
    np.testing.assert_allclose(plotting.pos_embed_similarity(np_model)[0], sim, atol=1e-6)


def test_factorized_attention_view_is_a_distribution_per_channel():
    """CoaT: softmax(K) of every key channel on its scale's grid; its channel mean is the
    model's own "keys" grid, and with the class token's entry it sums to 1."""
    import torch

    import vit_scratch

    torch.manual_seed(0)
    model = vit_scratch.create_model("coat_lite_digits").eval()
    c, h, w = model.pretrained_cfg["input_size"]
    images = torch.randn(2, c, h, w)
    views = plotting.factorized_attention_view(model, images)
    with torch.no_grad():
        grids = model.get_attention_grids(images, view="keys")
        keys = model.get_attention_maps(images, view="keys")
    assert len(views) == len(grids) == len(model.attention_modules())
    for view, grid, k in zip(views, grids, keys):
        B, heads, d, gh, gw = view.shape
        assert (B, heads) == (2, model.cfg.num_heads) and (gh, gw) == tuple(grid.shape[-2:])
        np.testing.assert_allclose(view.mean(axis=2), grid.numpy(), rtol=1e-5, atol=1e-7)
        class_entry = k[:, :, 0].numpy()  # (B, h, d): the class token's share of each channel
        np.testing.assert_allclose(view.sum(axis=(-2, -1)) + class_entry, 1.0, rtol=1e-5)
    sizes = [v.shape[-1] for v in views]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]  # finer scales first


def test_class_attention_grids_and_similarity_for_cait():
    """The same helpers on CaiT: its class-attention layers, a pos_embed without a class entry."""
    import torch

    import vit_scratch

    torch.manual_seed(0)
    model = vit_scratch.create_model("cait_digits", depth=2).eval()
    images = torch.randn(2, 1, 24, 24)
    grids = plotting.attention_grids(model, images)
    assert len(grids) == model.cfg.depth_token_only and grids[0].shape == (2, 4, 4, 4)
    with torch.no_grad():
        weights = model.get_attention_maps(images)[1].numpy()  # (B, h, 1, 1 + 16)
    np.testing.assert_allclose(grids[1], weights[:, :, 0, 1:].reshape(2, 4, 4, 4))
    assert (grids[1].sum(axis=(-2, -1)) < 1).all()  # the class token's self-weight is not drawn
    with pytest.raises(ValueError, match="attention rollout needs every layer"):
        plotting.attention_rollout_grid(model, images)
    sim, grid = plotting.pos_embed_similarity(model)
    assert grid == (4, 4) and sim.shape == (16, 16) and np.allclose(np.diag(sim), 1.0)
    np_model = vit_scratch.create_numpy_model(
        "cait_digits", vit_scratch.state_dict_to_numpy(model.state_dict()), depth=2)
    np.testing.assert_allclose(plotting.pos_embed_similarity(np_model)[0], sim, atol=1e-6)


