"""evaluate and predict: the averages and balanced accuracy against scikit-learn, a class never
predicted named, ``--bad-images``, a checkpoint that is not the run's model named, predict on
folders and patterns into RUN/predictions with bad pictures skipped or named, the attention
figure (the picture beside the overlay, alpha, a colour bar, the file and the class), and every
option's help."""
import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from test_training import make_pictures, picture_args, picture_run, pictures  # noqa: F401 (fixtures)
from vit_scratch import evaluate as evaluate_command
from vit_scratch import plotting
from vit_scratch import predict as predict_command
from vit_scratch.run_folder import BEST, load_model
from vit_scratch.train import main as train_main


@pytest.fixture(scope="module")
def run(picture_run) -> Path:
    return picture_run[0]


def test_averages_and_balanced_accuracy_are_scikit_learns():
    from sklearn import metrics as sk

    labels = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2, 2])
    predicted = np.array([0, 0, 1, 0, 1, 0, 1, 1, 2, 2, 2, 0])  # class 3 never predicted
    probs = np.eye(4)[predicted] * 0.7 + 0.075
    result = evaluate_command.metrics(probs, labels, ["a", "b", "c", "d"], top_k=2)
    assert result["balanced_accuracy"] == pytest.approx(sk.balanced_accuracy_score(labels,
                                                                                   predicted))
    assert result["never_predicted"] == ["d"]
    for average in ("macro", "weighted"):
        p, r, f, _ = sk.precision_recall_fscore_support(labels, predicted, average=average,
                                                        labels=[0, 1, 2, 3], zero_division=0)
        assert result[f"{average}_average"] == pytest.approx(
            {"precision": p, "recall": r, "f1": f})
    per_class = [row["precision"] for row in result["per_class"]]
    assert result["macro_average"]["precision"] == pytest.approx(np.mean(per_class))


def test_evaluate_reports_averages_and_a_class_never_predicted(run, pictures, tmp_path,
                                                               capsys):
    """A model that always answers "cat": the warning names the two classes it never
    predicts; the files hold the averages and the balanced accuracy."""
    import torch

    from vit_scratch.weights import save_checkpoint

    model = load_model(run)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([5.0, 0.0, 0.0]))
    cats = tmp_path / "cats.safetensors"
    save_checkpoint(model, cats, class_names=model.class_names)
    result = evaluate_command.main([str(cats), "--data", str(pictures), "--out",
                                    str(tmp_path / "eval")])
    out, err = capsys.readouterr()
    assert result["never_predicted"] == ["dog", "fox"]
    assert "never predicted dog, fox on these 48 pictures" in err
    assert result["accuracy"] == result["balanced_accuracy"] == pytest.approx(1 / 3)
    assert "macro average" in out and "weighted average" in out
    rows = list(csv.DictReader(open(tmp_path / "eval" / "per_class.csv")))
    assert [r["class"] for r in rows] == ["cat", "dog", "fox", "macro average",
                                          "weighted average"]
    assert float(rows[3]["recall"]) == pytest.approx(1 / 3)
    saved = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    assert saved["macro_average"] == result["macro_average"]


def test_evaluate_bad_images(run, pictures, tmp_path, capsys):
    data = tmp_path / "pictures"
    shutil.copytree(pictures, data)
    (data / "fox" / "2.png").write_bytes(b"broken")
    with pytest.raises(SystemExit):
        evaluate_command.main([str(run), "--data", str(data), "--out", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert "2.png" in err and "--bad-images skip" in err and "Traceback" not in err
    result = evaluate_command.main([str(run), "--data", str(data), "--bad-images", "skip",
                                    "--out", str(tmp_path / "e")])
    assert result["images"] == 47
    assert "left out 1 picture(s)" in capsys.readouterr().err


def test_a_checkpoint_of_another_model_in_the_run_is_named(run, pictures, tmp_path, capsys):
    """A CaiT checkpoint copied into a ViT run folder: evaluated as the file says, with a
    warning that names both models."""
    other = tmp_path / "cait"
    train_main([*picture_args(pictures), "--model", "cait_digits", "--epochs", "1", "--out",
                str(other)])
    copy = tmp_path / "pets"
    shutil.copytree(run, copy)
    shutil.copy(other / BEST, copy / BEST)
    capsys.readouterr()
    evaluate_command.main([str(copy)])
    err = capsys.readouterr().err
    assert "holds a cait_digits, but the run in" in err and "trained a vit_digits" in err


def test_predict_takes_folders_and_patterns_and_writes_its_table(run, pictures, tmp_path,
                                                                 capsys):
    data = tmp_path / "new"
    shutil.copytree(pictures / "cat", data / "cats")
    (data / "cats" / "5.png").write_bytes(b"broken")
    (data / "readme.txt").write_text("not a picture, not searched for")
    rows = predict_command.main([str(run), str(data), str(pictures / "dog" / "*.png"),
                                 "--top-k", "2"])
    err = capsys.readouterr().err
    assert "left out 1 picture(s)" in err and "5.png" in err
    good = [r for r in rows if r["error"] is None]
    assert len(good) == 15 + 16 and [r["picture"] for r in rows if r["error"]] == [
        str(data / "cats" / "5.png")]
    assert all(len(r["top"]) == 2 for r in good)
    table = list(csv.DictReader(open(run / "predictions" / "predictions.csv")))
    assert [r["picture"] for r in table] == [r["picture"] for r in rows]
    assert [r["class"] for r in table[:len(good)]] == [r["top"][0][0] for r in good]
    saved = json.loads((run / "predictions" / "predictions.json").read_text())
    assert [r["picture"] for r in saved] == [r["picture"] for r in rows]
    with pytest.raises(SystemExit):
        predict_command.main([str(run), str(data), "--bad-images", "error"])
    assert "1 picture(s) cannot be decoded" in capsys.readouterr().err


def test_the_attention_figure_shows_the_picture_beside_the_map(run, pictures, tmp_path):
    model = load_model(run)
    rows = predict_command.main([str(run), str(pictures / "fox" / "1.png"), "--attention",
                                 "--alpha", "0.3", "--out", str(tmp_path / "maps")])
    assert Path(rows[0]["attention"]).read_bytes()[:4] == b"\x89PNG"
    image = np.random.default_rng(0).random((1, 24, 24)).astype(np.float32)
    attn = np.arange(16, dtype=np.float32).reshape(4, 4)
    fig = plotting.save_attention_figure(image, attn, tmp_path / "f.png", title="1.png: fox 0.91",
                                         what="attention rollout", alpha=0.3)
    picture, overlay, bar = fig.axes
    assert len(picture.images) == 1 and len(overlay.images) == 2  # the picture, then the map
    assert overlay.images[-1].get_alpha() == 0.3 and picture.images[0].get_alpha() is None
    assert bar.get_ylabel() == "attention weight"
    assert fig._suptitle.get_text() == "1.png: fox 0.91\nattention rollout"
    assert model.class_names == ["cat", "dog", "fox"]


@pytest.mark.parametrize("command", [evaluate_command, predict_command])
def test_every_option_has_its_help_and_one_default(command):
    parser = command.build_parser()
    formatter = parser.formatter_class(parser.prog)
    for action in parser._actions:
        assert action.help, action.dest
        shown = formatter._get_help_string(action)
        assert shown.count("default:") <= 1 and "(default: None)" not in shown, shown


def test_predict_writes_into_the_run_folder_or_beside_the_checkpoint(run, pictures, tmp_path):
    picture = str(pictures / "cat" / "0.png")
    predict_command.main([str(run), picture])
    assert (run / "predictions" / "predictions.csv").is_file()
    alone = tmp_path / "alone" / "model.safetensors"
    alone.parent.mkdir()
    shutil.copy(run / BEST, alone)
    predict_command.main([str(alone), picture])
    assert (alone.parent / "predictions" / "predictions.json").is_file()
