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
