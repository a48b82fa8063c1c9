"""A figure of attention maps either stretches each panel to its own range or, with a colour
bar, puts every panel on one stated scale."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from vit_scratch import plotting  # noqa: E402


def test_layer_head_maps_share_one_scale_with_a_colorbar():
    rng = np.random.default_rng(0)
    maps = rng.dirichlet(np.ones(16), size=(2, 3)).reshape(2, 3, 4, 4)  # (layers, heads, 4, 4)
    img = np.zeros((3, 8, 8), np.float32)
    fig = plotting.plot_layer_head_maps(img, maps, boxes=(0, 0, 4, 4), colorbar=True)
    panels = [ax for ax in fig.axes if ax.images and ax.images[-1].get_alpha() == 0.6]
    assert len(panels) == 2 * (3 + 1)
    assert {ax.images[-1].get_clim() for ax in panels} == {(0.0, float(maps.max()))}
    assert len(fig.axes) == len(panels) + 1  # the colour bar
    plt.close(fig)

    fig = plotting.plot_layer_head_maps(img, maps)  # default: each panel on its own range
    clims = {ax.images[-1].get_clim() for ax in fig.axes}
    assert len(clims) == 2 * (3 + 1) and len(fig.axes) == 8
    plt.close(fig)
