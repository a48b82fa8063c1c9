"""The commands and the run folders they read and write: a runtime error is one line (the usage
block is for argument errors), a refused run leaves no folder, ``--overwrite`` clears what a run
wrote, a run folder that lies is named (a missing selected checkpoint, class names that do not
fit the head, a damaged settings.json or checkpoint), ``load_model`` takes the best epoch where
it is not the last, and a data set of one class is refused."""
import json
import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from test_training import (  # noqa: F401 (picture_run, pictures: fixtures)
    TINY, TINY_ARGS, make_pictures, picture_args, picture_run, pictures, quiet)
from vit_scratch import evaluate as evaluate_command
from vit_scratch import predict as predict_command
from vit_scratch.run_folder import BEST, CHECKPOINT, METRICS, SETTINGS, STATE, load_model
from vit_scratch.train import TrainSettings, main, train
from vit_scratch.weights import read_state_dict


@pytest.fixture(scope="module")
def run(picture_run) -> Path:
    return picture_run[0]


def failure(command, argv, capsys) -> list[str]:
    """``command(argv)`` exits with status 2; the lines it wrote to stderr."""
    with pytest.raises(SystemExit) as info:
        command(argv)
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()


# --- errors: one line at run time, the usage for arguments -------------------------------------

def test_a_runtime_error_is_one_line_and_an_argument_error_shows_the_usage(pictures, tmp_path,
                                                                         capsys):
    data = tmp_path / "pictures"
    shutil.copytree(pictures, data)
    (data / "dog" / "3.png").write_bytes(b"not a picture")
    (line,) = failure(main, [*picture_args(data), "--out", str(tmp_path / "run")], capsys)
    assert line.startswith("python -m vit_scratch.train: error: 1 picture(s) in") and \
        "3.png" in line
    assert not (tmp_path / "run").exists()  # the folder is made once the data is read
    lines = failure(main, ["--epochs", "two"], capsys)
    assert lines[0].startswith("usage:") and "invalid int value: 'two'" in lines[-1]
    lines = failure(main, ["--lr", "-1", "--out", str(tmp_path / "run")], capsys)
    assert lines[0].startswith("usage:") and "--lr must be a positive number" in lines[-1]
    (line,) = failure(evaluate_command.main, [str(tmp_path / "nothing")], capsys)
    assert line == (f"python -m vit_scratch.evaluate: error: {str(tmp_path / 'nothing')!r}: no "
                    f"such run folder or checkpoint file")


def test_a_missing_pretrained_cache_is_one_line(tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    (line,) = failure(main, ["--model", "deit_tiny_patch16_224", "--pretrained", "--out",
                             str(tmp_path / "run"), "--threads", "1", "--progress", "off"],
                      capsys)
    assert line.startswith("python -m vit_scratch.train: error: --pretrained: offline mode is "
                           "on") and "--init model.safetensors" in line
    assert not (tmp_path / "run").exists()


def test_a_refused_run_leaves_no_folder(pictures, tmp_path, capsys):
    one_class = make_pictures(tmp_path / "one", per_class=6, classes=["cat"])
    lines = failure(main, ["--data", str(one_class), "--out", str(tmp_path / "run"),
                           *TINY_ARGS], capsys)
    assert "1 class(es) ['cat']; a classifier needs at least 2" in lines[-1]
    assert not (tmp_path / "run").exists()


def test_datasets_of_one_class_are_refused():
    """Datasets of one class given to ``train`` (a folder of one: above): nothing to tell
    apart, refused before anything is built."""
    data = TensorDataset(torch.randn(12, 1, 24, 24), torch.zeros(12, dtype=torch.int64))
    data.classes = ["only"]
    settings = TrainSettings(model="vit_digits", model_kwargs=dict(TINY), epochs=1,
                             device="cpu", progress="off", threads=1, out=None)
    with pytest.raises(ValueError, match=r"1 class\(es\) \['only'\]; a classifier needs at "
                                         r"least 2"):
        train(settings, datasets=(data, data, data), log=quiet)


def test_overwrite_clears_everything_the_run_wrote(pictures, tmp_path):
    out = tmp_path / "run"
    main([*picture_args(pictures), "--epochs", "1", "--out", str(out)])
    evaluate_command.main([str(out)])
    predict_command.main([str(out), str(pictures / "cat" / "0.png")])
    assert (out / "evaluation" / "evaluation.json").is_file()
    assert (out / "predictions" / "predictions.csv").is_file()
    (out / "notes.txt").write_text("mine")
    main([*picture_args(pictures), "--epochs", "1", "--seed", "1", "--out", str(out),
          "--overwrite"])
    assert not (out / "evaluation").exists() and not (out / "predictions").exists()
    assert (out / "notes.txt").read_text() == "mine"  # not the run's: kept
    assert json.loads((out / METRICS).read_text())["settings"]["seed"] == 1


# --- run folders that lie ------------------------------------------------------------------------

def test_a_missing_selected_checkpoint_is_named_not_replaced(run, pictures, tmp_path, capsys):
    copy = tmp_path / "pets"
    shutil.copytree(run, copy)
    (copy / BEST).unlink()
    with pytest.raises(ValueError, match=r"selects best.safetensors \(--select best\), which is "
                                         r"missing; checkpoint.safetensors holds another epoch"):
        load_model(copy)
    (line,) = failure(predict_command.main, [str(copy), str(pictures / "cat" / "0.png")],
                      capsys)
    assert "best.safetensors (--select best), which is missing" in line


def test_class_names_that_do_not_fit_the_head_are_named(run, pictures, tmp_path, capsys):
    model = load_model(run)
    path = tmp_path / "three.safetensors"
    bigger = torch.nn.Linear(model.head.in_features, 10)
    state = {**model.state_dict(), "head.weight": bigger.weight.detach(),
             "head.bias": bigger.bias.detach()}
    from safetensors.torch import save_file

    from vit_scratch.weight_files import read_metadata

    save_file({k: v.contiguous() for k, v in state.items()}, str(path),
              metadata={**read_metadata(run / BEST), "model_config": json.dumps(
                  {**json.loads(read_metadata(run / BEST)["model_config"]), "num_classes": 10})})
    with pytest.raises(Exception, match=r"three.safetensors.*lists 3 class names for a head of "
                                        r"10 classes"):
        load_model(path)
    (line,) = failure(predict_command.main, [str(path), str(pictures / "cat" / "0.png")],
                      capsys)
    assert "lists 3 class names for a head of 10 classes" in line


@pytest.mark.parametrize("text, needle", [
    ("{not json", "is damaged: not JSON"),
    ('{"model_config": {}, "classes": []}', "is damaged: it lacks settings"),
    ('{"settings": {}, "model_config": {}, "classes": []}', "is damaged: it lacks "
                                                            "settings.model"),
])
def test_a_damaged_settings_file_is_named(run, pictures, tmp_path, capsys, text, needle):
    copy = tmp_path / "pets"
    shutil.copytree(run, copy)
    (copy / SETTINGS).write_text(text)
    for command, argv in ((evaluate_command.main, [str(copy)]),
                          (predict_command.main, [str(copy), str(pictures / "cat" / "0.png")])):
        (line,) = failure(command, argv, capsys)
        assert f"{str(copy / SETTINGS)!r} {needle}" in line, line


def test_a_truncated_checkpoint_is_named(run, tmp_path, capsys, pictures):
    copy = tmp_path / "pets"
    shutil.copytree(run, copy)
    (copy / BEST).write_bytes((run / BEST).read_bytes()[:4000])
    (line,) = failure(evaluate_command.main, [str(copy)], capsys)
    assert f"checkpoint file {str(copy / BEST)!r}" in line and "damaged" in line
    (line,) = failure(predict_command.main, [str(copy), str(pictures / "cat" / "0.png")], capsys)
    assert f"checkpoint file {str(copy / BEST)!r}" in line and "damaged" in line


def test_a_damaged_trainer_state_is_named_with_what_to_do(run, tmp_path, capsys):
    """--resume on a trainer_state.pt that is not a PyTorch file, a truncated one, or one that
    lacks what the run needs: one line naming the file, and the way on (the last epoch's
    weights, --init; or --overwrite) -- never a traceback."""
    copy = tmp_path / "pets"
    shutil.copytree(run, copy)
    whole = (run / STATE).read_bytes()
    for damage, needle in ((b"not a torch file", "torch.load cannot read it"),
                           (whole[:len(whole) // 2], "torch.load cannot read it"),
                           ({"epoch": 4, "settings": {}}, "it lacks optimizer (a dict), "
                                                          "history (a list)"),
                           ({**torch.load(run / STATE, weights_only=True), "best_epoch": 9},
                            "its epoch 4, best epoch 9 and history of 4 epochs disagree")):
        if isinstance(damage, bytes):
            (copy / STATE).write_bytes(damage)
        else:
            torch.save(damage, copy / STATE)
        (line,) = failure(main, ["--out", str(copy), "--resume", "--epochs", "6"], capsys)
        assert line.startswith(f"python -m vit_scratch.train: error: {str(copy / STATE)!r} is "
                               f"damaged: ") and needle in line, line
        assert line.endswith(f"--init {copy / CHECKPOINT} and another --out, or start again "
                             f"with --overwrite")


def test_predict_without_pictures_says_so(run, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (line,) = failure(predict_command.main, [str(run), str(tmp_path / "empty")], capsys)
    assert f"folder {str(tmp_path / 'empty')!r} holds no pictures" in line
    (line,) = failure(predict_command.main, [str(run), str(tmp_path / "*.jpg")], capsys)
    assert "matches no file" in line


def test_a_validation_fraction_too_large_advises_lowering_it(pictures, tmp_path, capsys):
    lines = failure(main, [*picture_args(pictures), "--val-fraction", "0.999", "--out",
                           str(tmp_path / "run")], capsys)
    assert "too few training pictures" in lines[-1] and lines[-1].endswith(
        "lower --val-fraction")


# --- best against last --------------------------------------------------------------------------

def test_load_model_takes_the_best_epoch_where_it_is_not_the_last(tmp_path):
    """The validation pictures carry the opposite labels of the training pictures, so the
    better the model learns, the worse it validates: the best validation epoch is the first,
    the last is another.  ``load_model`` (and evaluate) take the best."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(32) % 2
    images = torch.randn(32, 1, 24, 24, generator=gen) * 0.3 + 2 * labels[:, None, None, None]
    train_set = TensorDataset(images[:24], labels[:24])
    val_set = TensorDataset(images[24:], 1 - labels[24:])
    for d in (train_set, val_set):
        d.classes = ["dark", "bright"]
    settings = TrainSettings(model="vit_digits", model_kwargs=dict(TINY), epochs=4,
                             batch_size=8, lr=1e-2, warmup_epochs=0.5, device="cpu",
                             progress="off", threads=1, baseline="none", out=str(tmp_path / "run"))
    result = train(settings, datasets=(train_set, val_set, val_set), log=quiet)
    assert result["best_epoch"] == result["selected_epoch"] == 1 != result["epochs_done"]
    model = load_model(tmp_path / "run")
    best, last = read_state_dict(tmp_path / "run" / BEST), read_state_dict(tmp_path / "run" /
                                                                           CHECKPOINT)
    own = model.state_dict()
    assert all(torch.equal(own[k], best[k]) for k in best)
    assert not all(torch.equal(own[k], last[k]) for k in last)
