"""The small-folder case: the recipe (``--recipe small_folder``) and how options override it, the
linear baseline against an independent fit on the same split, chance, the warning when training
stays at chance, the curves that draw them; and what a run says of itself (one epoch, a resized
position embedding).  The recipe's accuracy is tests/test_readme.py's acceptance test and
benchmarks/bench_small_folder.py's table."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import vit_scratch
from digit_pictures import NAMES, make_digit_pictures
from test_training import TINY, make_pictures, picture_settings
from vit_scratch import plotting
from vit_scratch.data import ModelTransform, make_datasets, plain_pictures
from vit_scratch.run_folder import METRICS
from vit_scratch.train import (RECIPES, TrainSettings, check_settings, recipe_settings,
                               settings_from_args, train)
from vit_scratch.training import yardsticks
from vit_scratch.training.settings import baselines
from vit_scratch.weights import save_checkpoint


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    return make_pictures(tmp_path_factory.mktemp("data") / "pictures")


def test_the_generated_folder_is_a_students(tmp_path):
    folder = make_digit_pictures(tmp_path / "f", classes=4, per_class=9, seed=3)
    files = sorted(folder.glob("*/*"))
    assert sorted(p.name for p in folder.iterdir()) == sorted(NAMES[:4])
    assert len(files) == 36 and {p.suffix for p in files} >= {".png", ".jpg", ".bmp", ".webp",
                                                              ".tif", ".ppm"}
    from PIL import Image

    sizes = [Image.open(p).size for p in files]
    assert all(32 <= w <= 48 and 32 <= h <= 48 for w, h in sizes)
    again = make_digit_pictures(tmp_path / "g", classes=4, per_class=9, seed=3)
    assert all(p.read_bytes() == (again / p.relative_to(folder)).read_bytes() for p in files)


def test_the_recipe_is_a_starting_point_that_options_override():
    small = RECIPES["small_folder"]
    settings, _, _ = settings_from_args(["--recipe", "small_folder", "--epochs", "7"])
    assert settings.epochs == 7 and settings.lr == small["lr"]
    assert settings.model == small["model"] and settings.model_kwargs == small["model_kwargs"]
    settings, _, _ = settings_from_args(["--recipe", "small_folder", "--model-arg", "depth=2",
                                         "--model-arg", "img_size=48"])
    assert settings.model_kwargs == {**small["model_kwargs"], "img_size": 48, "depth": 2}
    settings, _, _ = settings_from_args(["--recipe", "small_folder", "--model", "vit_digits"])
    assert settings.model == "vit_digits" and settings.model_kwargs == {}  # the recipe's model's
    assert settings.lr == small["lr"]
    assert settings_from_args([])[0] == TrainSettings(out=settings_from_args([])[0].out)
    assert recipe_settings("small_folder", data="x", out="o") == settings_from_args(
        ["--recipe", "small_folder", "--data", "x", "--out", "o"])[0]


def pixels(dataset):
    xs, ys = zip(*[dataset[i] for i in range(len(dataset))])
    return torch.stack(xs).flatten(1).numpy(), np.array([int(y) for y in ys])


def test_the_linear_baseline_is_fitted_on_the_training_split(pictures, tmp_path):
    """The trainer's baseline equals a logistic regression fitted here on the training
    split's pixels (without the photo augmentation the model trains with), scored on the
    validation and test splits; it is printed, in metrics.json and beside chance."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    logs = []
    settings = picture_settings(pictures, tmp_path / "run", epochs=1, flip=True,
                                crop_scale=0.5)
    result = train(settings, log=logs.append)
    model = vit_scratch.create_model("vit_digits", num_classes=3, **TINY)
    train_set, val_set, test_set = make_datasets(str(pictures), model, 0.25, 0,
                                                 val_fraction=0.25)
    x, y = pixels(train_set)
    fitted = make_pipeline(StandardScaler(), LogisticRegression(
        max_iter=yardsticks.BASELINE_MAX_ITER)).fit(x, y)
    baseline = json.loads((tmp_path / "run" / METRICS).read_text())["linear_baseline"]
    for name, dataset in (("val", val_set), ("test", test_set)):
        xs, ys = pixels(dataset)
        assert baseline[f"{name}_accuracy"] == pytest.approx(float((fitted.predict(xs) ==
                                                                     ys).mean()))
    assert baseline["train_images"] == len(train_set) == 27 and baseline["features"] == 576
    assert 0 < baseline["iterations"] <= yardsticks.BASELINE_MAX_ITER
    assert result["chance"] == pytest.approx(1 / 3) and result["linear_baseline"] == baseline
    assert any(line.startswith("linear baseline (logistic regression on the pixels)")
               for line in logs)


def test_the_linear_baseline_stops_at_its_iteration_cap(monkeypatch):
    """Separable pixels: L-BFGS would go on sharpening the boundary; the fit stops at
    ``BASELINE_MAX_ITER`` iterations, without the convergence warning, and scores what it has."""
    import warnings

    from torch.utils.data import TensorDataset

    g = torch.Generator().manual_seed(0)
    x = torch.randn(60, 3, 8, 8, generator=g)
    y = torch.arange(60) % 3
    x[:, 0] += y.view(-1, 1, 1).float()  # the class in the first channel's brightness
    monkeypatch.setattr(yardsticks, "BASELINE_MAX_ITER", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        numbers = yardsticks.linear_baseline(TensorDataset(x, y), TensorDataset(x[:9], y[:9]),
                                             TensorDataset(x[9:], y[9:]))
    assert numbers["iterations"] == 3 and numbers["test_accuracy"] > 1 / 3


@pytest.mark.parametrize("text, names", [("linear", ("linear",)), ("cnn", ("cnn",)),
                                         ("linear,cnn", ("linear", "cnn")), ("none", ())])
def test_baseline_names(text, names):
    assert baselines(text) == names


@pytest.mark.parametrize("text", ["svm", "linear,linear", "", "none,cnn", "linear;cnn"])
def test_a_baseline_that_is_not_one_is_refused_in_one_line(text):
    with pytest.raises(ValueError, match=rf"^--baseline must be 'linear', 'cnn', 'linear,cnn' "
                                         rf"or 'none', got {text!r}$"):
        check_settings(TrainSettings(baseline=text))


def test_the_small_convnet():
    """Three blocks of two 3 × 3 convolutions with BatchNorm and 2 × 2 max pools, 16/32/64
    channels, the mean over positions, a linear head: 72,629 parameters for five classes;
    any picture side divisible by 8, grey or colour."""
    from vit_scratch.training.convnet import SmallConvNet
    from vit_scratch.training.recipe import count_params

    model = SmallConvNet(5)
    assert count_params(model) == 72_629
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 5)
    assert SmallConvNet(3, in_chans=1)(torch.randn(1, 1, 24, 24)).shape == (1, 3)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [16, 16, 32, 32, 64, 64]
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) for c in convs)


def test_the_convnet_yardstick_is_trained_on_the_same_split_and_changes_nothing_else(
        pictures, tmp_path):
    """``--baseline linear,cnn``: the convnet's numbers are printed, in metrics.json and in the
    final line; its test accuracy is its selected model's on the test split (evaluated here
    again); and the run's own model trains exactly as without it (same history, same test)."""
    logs = []
    both = train(picture_settings(pictures, tmp_path / "both", epochs=2, baseline="linear,cnn",
                                  flip=True), log=logs.append)
    alone = train(picture_settings(pictures, None, epochs=2, flip=True), log=lambda *_: None)
    assert [{k: v for k, v in h.items() if k != "train_seconds"} for h in both["history"]] == \
        [{k: v for k, v in h.items() if k != "train_seconds"} for h in alone["history"]]
    assert both["test_accuracy"] == alone["test_accuracy"]
    convnet = both["convnet_baseline"]
    assert json.loads((tmp_path / "both" / METRICS).read_text())["convnet_baseline"] == convnet
    assert convnet["params"] == 16 * 9 + 16 * 16 * 9 + 16 * 32 * 9 + 32 * 32 * 9 + \
        32 * 64 * 9 + 64 * 64 * 9 + 2 * (16 + 16 + 32 + 32 + 64 + 64) + 64 * 3 + 3  # grey input
    assert 1 <= convnet["selected_epoch"] <= 2 and 0 <= convnet["test_accuracy"] <= 1
    text = "\n".join(logs)
    assert (f"convnet yardstick (72,211 parameters, epoch {convnet['selected_epoch']}): "
            f"validation {convnet['val_accuracy']:.4f}, "
            f"test {convnet['test_accuracy']:.4f}") in text
    assert (f"test accuracy {both['test_accuracy']:.4f}; linear baseline "
            f"{both['linear_baseline']['test_accuracy']:.4f}, convnet "
            f"{convnet['test_accuracy']:.4f}, chance") in text


def test_the_convnet_yardstick_tests_its_best_validation_epoch(pictures):
    """Its test accuracy is that of the returned model on the test split, evaluated here."""
    from vit_scratch.data import make_datasets

    settings = picture_settings(pictures, None, epochs=2)
    model = vit_scratch.create_model("vit_digits", num_classes=3, **TINY)
    train_set, val_set, test_set = make_datasets(str(pictures), model, 0.25, 0,
                                                 val_fraction=0.25)
    loaders = [torch.utils.data.DataLoader(d, batch_size=64) for d in (val_set, test_set)]
    numbers, convnet = yardsticks.convnet_baseline(train_set, *loaders, settings, 3,
                                                   model.pretrained_cfg, torch.device("cpu"))
    with torch.no_grad():
        x, y = map(torch.stack, zip(*[(img, torch.tensor(label)) for img, label in test_set]))
        assert numbers["test_accuracy"] == (convnet(x).argmax(-1) == y).sum().item() / len(y)
        x, y = map(torch.stack, zip(*[(img, torch.tensor(label)) for img, label in val_set]))
        assert numbers["val_accuracy"] == (convnet(x).argmax(-1) == y).sum().item() / len(y)
    assert not convnet.training and convnet.pretrained_cfg["input_size"] == \
        model.pretrained_cfg["input_size"]


def test_the_photo_folders_are_a_students(tmp_path):
    """Crops of photographs (and drawn shapes): 40-300 pixels a side, JPEG, PNG, RGBA and grey
    files, classes of unequal size, the same bytes for the same seed."""
    from PIL import Image

    pytest.importorskip("skimage")
    from photo_pictures import FOLDERS, make_photo_pictures

    folder = make_photo_pictures(tmp_path / "photos", "photos", seed=1, scale=0.2)
    files = sorted(folder.glob("*/*"))
    counts = {name: len(list((folder / name).iterdir())) for name in FOLDERS["photos"]}
    assert counts == {n: round(c * 0.2) for n, c in FOLDERS["photos"].items()}
    assert len(set(counts.values())) > 1  # unbalanced
    assert {p.suffix for p in files} == {".jpg", ".png"}
    modes = {Image.open(p).mode for p in files}
    assert {"RGB", "RGBA", "L"} <= modes
    sizes = [Image.open(p).size for p in files]
    assert all(40 <= min(s) and max(s) <= 300 for s in sizes) and len(set(sizes)) > len(sizes) // 2
    again = make_photo_pictures(tmp_path / "again", "photos", seed=1, scale=0.2)
    assert all(p.read_bytes() == (again / p.relative_to(folder)).read_bytes() for p in files)
    shapes = make_photo_pictures(tmp_path / "shapes", "shapes", seed=0, scale=0.1)
    assert sorted(p.name for p in shapes.iterdir()) == sorted(FOLDERS["shapes"])
    with pytest.raises(ValueError, match="kind must be one of photos, textures, shapes, got 'x'"):
        make_photo_pictures(tmp_path / "x", "x")


def test_attention_on_the_recipe_shows_every_scale_with_more_than_one_token(tmp_path):
    """CoaT-Lite at the recipe's 32 × 32 has grids of 8, 4, 2 and 1 tokens a side: predict's
    figure draws the picture and the 8 × 8, 4 × 4 and 2 × 2 scales (each the last layer on its
    grid), never the 1 × 1 one; the single map is the deepest of them."""
    from vit_scratch import plotting
    from vit_scratch import predict as predict_command

    model = vit_scratch.create_model(RECIPES["small_folder"]["model"],
                                     **RECIPES["small_folder"]["model_kwargs"]).eval()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    views = plotting.factorized_attention_view(model, x)
    assert [v.shape[-2:] for v in views] == [(8, 8), (4, 4), (2, 2), (1, 1)]
    scales = predict_command.attention_scales(model, x)
    assert [m.shape for m, _ in scales] == [(2, 8, 8), (2, 4, 4), (2, 2, 2)]
    for (maps, _), view in zip(scales, views):
        np.testing.assert_allclose(maps, view.mean(axis=(1, 2)), rtol=1e-6)
    maps, what = predict_command.attention_map(model, x)
    assert maps.shape == (2, 2, 2) and "(2 × 2 tokens)" in what
    fig = plotting.save_attention_figure(np.zeros((3, 32, 32), np.float32),
                                         [m[0] for m, _ in scales], tmp_path / "f.png",
                                         panel_titles=[label for _, label in scales])
    overlays = [ax for ax in fig.axes if len(ax.images) == 2]
    assert len(overlays) == 3 and [ax.images[-1].get_array().shape for ax in overlays] == \
        [(32, 32)] * 3
    assert [ax.get_title() for ax in overlays] == [label for _, label in scales]


def test_plain_pictures_leave_out_the_augmentation(pictures):
    model = vit_scratch.create_model("vit_digits", num_classes=3, **TINY)
    augment = ModelTransform(model, flip=True, crop_scale=0.3, color_jitter=0.4)
    train_set, _ = make_datasets(str(pictures), model, 0.25, 0, augment=augment)
    plain = plain_pictures(train_set)
    reference, _ = make_datasets(str(pictures), model, 0.25, 0)
    for i in range(3):
        assert torch.equal(plain[i][0], reference[i][0]) and plain[i][1] == reference[i][1]
    assert plain.classes == train_set.classes
    assert plain_pictures(reference) is reference


def test_training_at_chance_says_so_and_what_to_try(pictures, tmp_path):
    logs = []
    result = train(picture_settings(pictures, tmp_path / "run", epochs=6, lr=1e-30),
                   log=logs.append)
    warnings = [line for line in logs if line.startswith("warning: after 5 epochs")]
    assert len(warnings) == 1 and "near chance (0.33): the model is not learning" in warnings[0]
    assert "--recipe small_folder" in warnings[0] and "--pretrained" in warnings[0]
    assert "a lower --lr than 1e-30" in warnings[0]
    # metrics.json keeps it among the run's notes (beside the small validation split's)
    assert [n for n in result["notes"] if n.startswith("warning: after 5 epochs")] == warnings
    stuck = [dict(train_accuracy=0.3)] * 20
    recipe = recipe_settings("small_folder")  # 100 epochs: checked after 20
    assert yardsticks.not_learning(stuck[:5], 0.25, None, recipe) is None
    on_the_recipe = yardsticks.not_learning(stuck, 0.25, None, recipe)
    assert on_the_recipe.startswith("warning: after 20 epochs") and "--recipe" not in \
        on_the_recipe  # not the recipe it runs already
    learning = train(picture_settings(pictures, None, epochs=5), log=logs.append)
    assert max(h["train_accuracy"] for h in learning["history"]) > 0.4
    assert not [n for n in learning["notes"] if "not learning" in n]


def test_kept_pictures_train_as_pictures_read_every_epoch(pictures, monkeypatch):
    """The folder's pictures decoded once and kept (data.folders.KeptPictures) give the run
    that reading them from disk every epoch gives, loss for loss."""
    from vit_scratch.data import folders

    kept = train(picture_settings(pictures, None, epochs=2), log=lambda *_: None)
    monkeypatch.setattr(folders, "KEEP_BYTES", 0)
    read = train(picture_settings(pictures, None, epochs=2), log=lambda *_: None)
    assert kept["history"] == [{**h, "train_seconds": k["train_seconds"]}  # all but the time
                               for h, k in zip(read["history"], kept["history"])]
    assert kept["test_accuracy"] == read["test_accuracy"]


def test_curves_draw_chance_the_baseline_and_an_early_stop():
    import matplotlib.pyplot as plt

    history = [dict(epoch=e, train_cross_entropy=1.0, val_loss=1.1, train_accuracy=0.5,
                    val_accuracy=[0.6, 0.8, 0.7][e - 1]) for e in (1, 2, 3)]
    loss_ax, acc_ax = plotting.plot_training_curves(
        history, selected_epoch=2, test_accuracy=0.75, chance=0.25, baseline=0.4,
        stopped_early="stopped early after 3 epochs: no better validation accuracy for 1 epoch")
    lines = {line.get_label(): line for line in acc_ax.lines}
    assert list(lines["chance 0.25"].get_ydata()) == [0.25, 0.25]
    assert list(lines["linear baseline (validation) 0.40"].get_ydata()) == [0.4, 0.4]
    assert acc_ax.get_ylim()[0] <= 0.25
    assert acc_ax.get_title().endswith("stopped early after 3 epochs: no better validation "
                                       "accuracy for 1 epoch")
    legend = [t.get_text() for t in loss_ax.figure.legends[0].get_texts()]
    assert "chance 0.25" in legend and "linear baseline (validation) 0.40" in legend
    plt.close(loss_ax.figure)


def test_a_run_says_one_epoch_and_a_resized_position_embedding(pictures, tmp_path):
    """"1 epoch", not "1 epochs"; and fine-tuning from a file trained at another size logs
    which tensors were resized to fit."""
    start = vit_scratch.create_model("vit_digits", num_classes=3, **TINY)  # 24 px: 4 × 4 patches
    save_checkpoint(start, tmp_path / "start.safetensors")
    logs = []
    train(picture_settings(pictures, None, epochs=1, init=str(tmp_path / "start.safetensors"),
                           model_kwargs=dict(TINY, img_size=36)), log=logs.append)
    text = "\n".join(logs)
    assert "3 classes, 1 epoch on cpu, 1 thread" in text and "after 1 epoch (" in text
    assert (f"{tmp_path / 'start.safetensors'}: pos_embed resized from (1, 17, 16) to "
            f"(1, 37, 16) to fit the model's input size") in text


ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


FOLDER_NAMES = {"photos": "the photographs", "textures": "the textures", "shapes": "the shapes",
                "digits": "the digits"}


def pct(stat) -> str:
    return f"{100 * stat['mean']:.1f}%"


def against(interval: dict, other: str) -> str:
    """What a paired interval (fractions) says, as the pages phrase it."""
    from benchmarks import stats

    iv = stats.Interval.from_dict(interval).scaled(100)
    if iv.sign() == 0:
        return f"not told apart from {other} ({iv.format()})"
    return f"{'ahead of' if iv.sign() > 0 else 'behind'} {other}: {iv.format()}"


def small_folder_sentences(results: dict) -> list[str]:
    """The sentences the README and docs/training.md quote from small_folder.json."""
    folders = results["folders"]
    recipe = {k: folders[k]["recipes"]["small_folder"] for k in FOLDER_NAMES}
    listed = lambda texts: f"{', '.join(texts[:-1])} and {texts[-1]}"  # noqa: E731
    reaches = listed([f"{pct(recipe[k]['test_accuracy'])} on {name}"
                      for k, name in FOLDER_NAMES.items()])
    convnet = listed([pct(folders[k]["convnet"]) for k in FOLDER_NAMES])
    seeds = len(results["settings"]["seeds"])
    return [
        f"{seeds} seeds each), it reaches {reaches}, where the course's small convnet, trained on "
        f"the same splits with the same augmentation, epochs and schedule (`--baseline "
        f"linear,cnn`), reaches {convnet}",
        "paired by seed, the README's command is " + listed(
            [f"{against(recipe[k]['minus_convnet'], 'the convnet')} on {name}"
             for k, name in FOLDER_NAMES.items()]),
        "against the same recipe without it, it is " + listed(
            [f"{against(folders[k]['primary'], 'it')} on {name}"
             for k, name in FOLDER_NAMES.items()])]


def test_the_pages_quote_the_small_folder_and_workers_results():
    """The README's and docs/training.md's sentences about the small-folder recipe and the
    workers are read from the committed results of benchmarks/bench_small_folder.py and
    benchmarks/bench_workers.py (their tables: tests/test_docs_consistency.py)."""
    import importlib.util

    folder = json.loads((RESULTS / "small_folder.json").read_text())
    readme, training = (" ".join((ROOT / page).read_text().split())
                        for page in ("README.md", "docs/training.md"))
    assert set(folder["folders"]) == set(FOLDER_NAMES)
    assert len(folder["settings"]["seeds"]) >= 3
    for sentence in small_folder_sentences(folder):
        assert sentence in readme and sentence in training, sentence
    spec = importlib.util.spec_from_file_location("bench", ROOT / "benchmarks" /
                                                  "bench_small_folder.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    argv = bench.RECIPES["small_folder"][0]  # the table's row is the README's command
    assert settings_from_args(argv + ["--out", "o"])[0] == recipe_settings("small_folder", out="o")
    workers = json.loads((RESULTS / "workers.json").read_text())
    configs = workers["configs"]
    training = " ".join(training.split())
    assert (f"spawn workers take {configs['spawn']['seconds_per_epoch']:.2f} s per epoch, fork "
            f"workers {configs['fork']['seconds_per_epoch']:.2f} s ({workers['spawn_over_fork']:.2f}"
            f"×)") in training
    assert (f"the later epochs {configs['spawn']['later_epoch_seconds']:.2f} s against "
            f"{configs['fork']['later_epoch_seconds']:.2f} s "
            f"({workers['spawn_over_fork_later_epochs']:.2f}×)") in training
    assert (f"the first epoch {configs['spawn']['first_epoch_seconds']:.2f} s against "
            f"{configs['fork']['first_epoch_seconds']:.2f} s") in training
    loads = workers["load_average_at_each_run"]
    assert f"load average, still settling after one, {min(loads):.1f} to {max(loads):.1f})" in training
    # the training loader's workers kept for the run: spawn within 2× of fork per epoch, and
    # after their start, spawn costs what fork does
    assert workers["spawn_over_fork"] <= 2 and workers["spawn_over_fork_later_epochs"] <= 1.2
