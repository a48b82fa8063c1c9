"""The figure helpers and the offline data: shapes and values, no pixels compared."""
import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from vit_scratch import plotting  # noqa: E402
from vit_scratch.data import IMAGENET_MEAN, IMAGENET_STD, normalize, sample_image  # noqa: E402
from vit_scratch.numpy_nn.patch_embed import patchify  # noqa: E402


@pytest.mark.parametrize("size", [224, (96, 160)])
def test_sample_image(size):
    img = sample_image(size)
    h, w = (size, size) if isinstance(size, int) else size
    assert img.shape == (3, h, w) and img.dtype == np.float32
    assert 0.0 <= img.min() and img.max() <= 1.0 and img.std() > 0.1  # a real picture


def test_normalize():
    img = np.ones((2, 3, 4, 4), dtype=np.float32) * np.reshape(IMAGENET_MEAN, (3, 1, 1))
    np.testing.assert_allclose(normalize(img, mean=IMAGENET_MEAN, std=IMAGENET_STD), 0.0, atol=1e-7)
    one_std = np.reshape(IMAGENET_MEAN, (3, 1, 1)) + np.reshape(IMAGENET_STD, (3, 1, 1))
    np.testing.assert_allclose(normalize(np.broadcast_to(one_std, (3, 2, 2)), "deit_tiny_patch16_224"),
                               1.0, rtol=1e-6)


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


def test_normalize_has_no_silent_default():
    img = np.zeros((3, 4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="normalize needs the model's mean and std"):
        normalize(img)
    # vit_* weights expect [-1, 1] inputs, deit_* ImageNet's statistics: not the same numbers
    assert normalize(img, "vit_tiny_patch16_224").min() == -1.0
    assert normalize(img, "deit_tiny_patch16_224").min() < -2.0


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224", "deit_tiny_patch16_224"])
def test_preprocess_equals_timm_eval_transform(name):
    """Ours follows the model's pretrained_cfg exactly as timm's own evaluation transform does."""
    timm = pytest.importorskip("timm")
    from matplotlib import cbook
    from PIL import Image
    from timm.data import create_transform, resolve_data_config

    import vit_scratch
    from vit_scratch.data import preprocess

    image = Image.open(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)).convert("RGB")
    model = vit_scratch.create_model(name)
    oracle = timm.create_model(name)
    expected = create_transform(**resolve_data_config(model=oracle))(image).numpy()
    got = preprocess(image, model)
    assert got.shape == expected.shape == (3, 224, 224)
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_digits_on_canvas_places_each_digit_in_its_box():
    from vit_scratch.data import digits_on_canvas, load_digits

    x_tr, y_tr, b_tr, x_te, y_te, b_te = digits_on_canvas(canvas_size=24, scale=2, noise=0.1)
    digits_tr, labels_tr, _, labels_te = load_digits()
    assert x_tr.shape == (len(labels_tr), 1, 24, 24) and x_tr.dtype == np.float32
    np.testing.assert_array_equal(y_tr, labels_tr)
    np.testing.assert_array_equal(y_te, labels_te)
    assert (b_tr[:, 2:] == 16).all() and b_tr[:, :2].min() >= 0 and b_tr[:, :2].max() <= 8
    assert len(np.unique(b_tr[:, :2], axis=0)) > 50  # the places vary
    for i in (0, 7, 300):
        top, left, h, w = b_tr[i]
        window = x_tr[i, 0, top:top + h, left:left + w]
        big = np.kron(digits_tr[i, 0], np.ones((2, 2), dtype=np.float32))
        np.testing.assert_array_equal(window, np.maximum(window, big))  # the digit is on top
        np.testing.assert_allclose(window[big > 0.1], big[big > 0.1])
        outside = x_tr[i, 0].copy()
        outside[top:top + h, left:left + w] = 0
        assert outside.max() <= 0.1  # only noise outside the box
    with pytest.raises(ValueError, match="canvas_size 12 is smaller than the digit"):
        digits_on_canvas(canvas_size=12, scale=2)


# --- the trainer's datasets: they follow the model ---------------------------------------------

DIGITS16 = dict(input_size=(1, 16, 16), mean=(0.5,), std=(0.25,), interpolation="bilinear",
                crop_pct=1.0)


def test_digits_datasets_are_resized_normalised_and_split():
    import torch
    import torch.nn.functional as F

    import vit_scratch
    from vit_scratch.data import load_digits, make_datasets

    train, test = make_datasets("digits", DIGITS16)
    x_tr, y_tr, x_te, y_te = load_digits()
    assert len(train) == len(y_tr) == 1438 and len(test) == len(y_te) == 359
    assert train.classes == [str(d) for d in range(10)]
    image, label = train[5]
    assert image.shape == (1, 16, 16) and image.dtype == torch.float32 and label == y_tr[5]
    expected = F.interpolate(torch.from_numpy(x_te), size=(16, 16), mode="bilinear",
                             align_corners=False)
    torch.testing.assert_close(test.tensors[0] * 0.25 + 0.5, expected)  # resized, then (x-m)/s
    np.testing.assert_array_equal(test.tensors[1].numpy(), y_te)
    rgb_cfg = dict(vit_scratch.get_pretrained_cfg("vit_tiny_patch16_224"), input_size=(3, 24, 24))
    rgb, _ = make_datasets("digits", rgb_cfg, test_fraction=0.5, seed=3)
    assert rgb.tensors[0].shape == (899, 3, 24, 24)  # grey -> 3 channels, 8 -> 24
    assert torch.equal(rgb.tensors[0][:, 0], rgb.tensors[0][:, 2])
    other, _ = make_datasets("digits", DIGITS16, seed=1)
    assert not torch.equal(other.tensors[1], train.tensors[1])  # another split


def test_canvas_datasets_keep_the_boxes():
    from vit_scratch.data import make_datasets

    cfg = dict(DIGITS16, input_size=(1, 24, 24), mean=(0.0,), std=(1.0,))
    train, test = make_datasets("digits_on_canvas", cfg)
    assert train.tensors[0].shape == (1438, 1, 24, 24) and test.boxes.shape == (359, 4)
    top, left, h, w = test.boxes[3]
    image = test.tensors[0][3, 0].numpy()
    assert (h, w) == (8, 8) and image[top:top + h, left:left + w].max() > 0.5
    outside = image.copy()
    outside[top:top + h, left:left + w] = 0
    assert outside.max() <= 0.1  # only noise outside the box


def make_image_folder(root, classes=("cat", "dog"), per_class=5, size=(12, 10), split=False):
    """A tiny folder of PNGs, one subfolder per class: class i is brighter than class i-1."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for part in (("train", "test") if split else ("",)):
        for i, name in enumerate(classes):
            folder = root / part / name
            folder.mkdir(parents=True)
            for j in range(per_class):
                pixels = np.clip(rng.normal(60 + 120 * i, 20, size + (3,)), 0, 255)
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{j}.png")
    return root


def test_image_folder_datasets(tmp_path):
    import torch

    from vit_scratch.data import make_datasets

    root = make_image_folder(tmp_path / "pets")
    train, test = make_datasets(str(root), DIGITS16)
    assert train.classes == test.classes == ["cat", "dog"]
    assert len(train) == 8 and len(test) == 2  # 20% of each class held out
    assert sorted(int(test[i][1]) for i in range(2)) == [0, 1]
    image, label = train[0]
    assert image.shape == (1, 16, 16) and image.dtype == torch.float32
    assert abs(float(image.mean()) * 0.25 + 0.5 - 60 / 255) < 0.05  # grey, then normalised
    split = make_image_folder(tmp_path / "split", per_class=2, split=True)
    train, test = make_datasets(str(split), "vit_tiny_patch16_224")
    assert len(train) == len(test) == 4 and train[0][0].shape == (3, 224, 224)
    (tmp_path / "empty" / "only").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no images in class subfolders"):
        make_datasets(str(tmp_path / "empty"), DIGITS16)


def test_unknown_data_lists_the_known_ones():
    from vit_scratch.data import make_datasets

    with pytest.raises(ValueError, match="unknown data 'cifar10'.*digits, digits_on_canvas"):
        make_datasets("cifar10", DIGITS16)


# --- arrays from a model, through the interface ------------------------------------------------

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


def test_figures_for_maps_and_curves(tmp_path):
    img = np.random.default_rng(0).random((1, 8, 8)).repeat(3, 0)
    maps = np.random.default_rng(1).random((2, 3, 4, 4))
    fig = plotting.plot_layer_head_maps(img, maps, boxes=(1, 2, 4, 4), title="t")
    assert len(fig.axes) == 2 * 4
    plt.close(fig)
    history = [dict(epoch=e, train_loss=2.0 / e, test_loss=2.1 / e, train_accuracy=0.5 + e / 10,
                    test_accuracy=0.45 + e / 10) for e in (1, 2, 3)]
    axes = plotting.plot_training_curves(history)
    assert len(axes[1].lines) == 2
    plt.close(axes[0].figure)
    plotting.save_training_curves(history, tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    np.testing.assert_allclose(plotting.unnormalize(np.zeros((1, 2, 2)), DIGITS16), 0.5)


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


def test_digits_split_is_stratified_and_fixed():
    from vit_scratch.data import load_digits, stratified_split

    x_train, y_train, x_test, y_test = load_digits()
    assert x_train.shape[1:] == (1, 8, 8) and x_train.dtype == np.float32
    assert len(y_train) + len(y_test) == 1797
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0
    counts = np.bincount(y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # 20% of each class (~180 per class)
    np.testing.assert_array_equal(load_digits()[3], y_test)  # fixed by the seed
    assert not np.array_equal(load_digits(seed=1)[3], y_test)
    labels = np.repeat(np.arange(3), [10, 20, 5])
    test = stratified_split(labels, 0.2, seed=0)
    assert [int(test[labels == c].sum()) for c in range(3)] == [2, 4, 1]
    with pytest.raises(ValueError, match="test_fraction must be in"):
        stratified_split(labels, 1.0)
