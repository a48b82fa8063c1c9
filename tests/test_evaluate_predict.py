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


def test_top_k_is_given_only_below_the_number_of_classes(run, pictures, tmp_path, capsys):
    """Top-k of k classes is always 1: left out (a warning when --top-k asked for it), never cut
    to k - 1 behind the reader's back; below k, scikit-learn's number."""
    from sklearn.metrics import top_k_accuracy_score

    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(5), size=40)
    labels = rng.integers(0, 5, 40)
    names = list("abcde")
    assert evaluate_command.metrics(probs, labels, names, top_k=5)["top_k"] is None
    for k in (1, 2, 4):
        result = evaluate_command.metrics(probs, labels, names, top_k=k)
        assert result["top_k"] == k and result["top_k_accuracy"] == pytest.approx(
            top_k_accuracy_score(labels, probs, k=k, labels=range(5)))
    out = tmp_path / "e"
    quiet = evaluate_command.main([str(run), "--out", str(out)])  # the default, 5: left out
    text, err = capsys.readouterr()
    assert quiet["top_k"] is quiet["top_k_accuracy"] is None and "top-" not in text + err
    asked = evaluate_command.main([str(run), "--top-k", "3", "--out", str(out)])
    text, err = capsys.readouterr()
    assert asked["top_k"] is None and "top-" not in text
    assert ("--top-k 3: the data has 3 classes, so the true class is always among the top 3; "
            "top-k accuracy is left out (give K below 3)") in err
    two = evaluate_command.main([str(run), "--top-k", "2", "--out", str(out)])
    assert f"top-2 {two['top_k_accuracy']:.4f}" in capsys.readouterr().out


def test_evaluate_prints_the_confusion_matrix(run, pictures, tmp_path, capsys):
    result = evaluate_command.main([str(run), "--data", str(pictures), "--out",
                                    str(tmp_path / "e")])
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("confusion matrix (rows: true class, columns: predicted)")
    header, *rows = lines[start + 1:start + 5]
    assert header.split() == ["true", "\\", "predicted", "cat", "dog", "fox"]
    assert [row.split()[0] for row in rows] == ["cat", "dog", "fox"]
    assert [list(map(int, row.split()[1:])) for row in rows] == result["confusion_matrix"]
    assert np.sum(result["confusion_matrix"]) == 48


def test_the_misclassified_pictures_are_the_least_likely_of_each_class():
    """For each true class, the misclassified pictures by the probability of their true class,
    lowest first, at most N; pictures predicted right are never among them."""
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(3) * 0.5, size=60)
    labels = rng.integers(0, 3, 60)
    names = [f"p{i}.png" for i in range(60)]
    got = evaluate_command.misclassified(probs, labels, ["a", "b", "c"], names, per_class=4)
    expected = []
    for c, name in enumerate("abc"):  # an independent count: sort each class's mistakes
        wrong = [i for i in range(60) if labels[i] == c and probs[i].argmax() != c]
        expected += [(name, names[i]) for i in sorted(wrong, key=lambda i: probs[i, c])[:4]]
    assert [(g["true"], g["picture"]) for g in got] == expected
    for g in got:
        i = g["index"]
        assert g["true_probability"] == probs[i, labels[i]]
        assert [p for _, p in g["top"]] == sorted(probs[i], reverse=True)[:3]
        assert g["top"][0][0] != g["true"]
    assert evaluate_command.misclassified(probs, labels, ["a", "b", "c"], names, 0) == []


def test_evaluate_draws_and_lists_the_misclassified_pictures(run, pictures, tmp_path):
    """The run's model made to lean towards "cat": the dog and fox pictures it misclassifies,
    the least likely first, in misclassified.csv and misclassified.png, with the classes it
    gave them."""
    import torch
    from PIL import Image

    from vit_scratch.data import preprocess
    from vit_scratch.weights import save_checkpoint

    model = load_model(run)
    with torch.no_grad():
        model.head.bias.add_(torch.tensor([2.0, 0.0, 0.0]))
    leaning = tmp_path / "leaning.safetensors"
    save_checkpoint(model, leaning, class_names=model.class_names)
    out = tmp_path / "eval"
    result = evaluate_command.main([str(leaning), "--data", str(pictures), "--gallery", "2",
                                    "--out", str(out)])
    files = sorted(pictures.glob("*/*.png"))
    with torch.no_grad():
        probs = model(torch.stack([torch.from_numpy(preprocess(Image.open(f), model))
                                   for f in files])).softmax(-1).numpy()
    truth = np.array([["cat", "dog", "fox"].index(f.parent.name) for f in files])
    rows = list(csv.DictReader(open(out / "misclassified.csv")))
    assert rows and [r["picture"] for r in rows] == [g["picture"] for g in result["misclassified"]]
    for c, name in enumerate(["cat", "dog", "fox"]):
        wrong = [i for i in range(len(files)) if truth[i] == c and probs[i].argmax() != c]
        mine = [r for r in rows if r["true class"] == name]
        assert [r["picture"] for r in mine] == [str(files[i]) for i in
                                                sorted(wrong, key=lambda i: probs[i, c])[:2]]
        for r in mine:
            assert float(r["true class probability"]) == pytest.approx(
                probs[files.index(Path(r["picture"])), c], abs=1e-4)
    assert (out / "misclassified.png").read_bytes()[:4] == b"\x89PNG"
    evaluate_command.main([str(leaning), "--data", str(pictures), "--gallery", "0",
                           "--out", str(out)])
    assert not (out / "misclassified.png").exists()  # not an earlier evaluation's figure
    assert len(list(csv.reader(open(out / "misclassified.csv")))) == 1  # the header alone


def test_evaluate_bad_images(run, pictures, tmp_path, capsys):
    data = tmp_path / "pictures"
    shutil.copytree(pictures, data)
    (data / "fox" / "2.png").write_bytes(b"broken")
    with pytest.raises(SystemExit):
        evaluate_command.main([str(run), "--data", str(data), "--out", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert "2.png" in err and "--bad-images skip" in err and "Traceback" not in err
    assert "cannot be decoded: " + str(data / "fox" / "2.png") in err
    assert "pass --bad-images skip to leave them out" in err and "train" not in err
    result = evaluate_command.main([str(run), "--data", str(data), "--bad-images", "skip",
                                    "--out", str(tmp_path / "e")])
    assert result["images"] == 47
    assert "left out 1 picture(s)" in capsys.readouterr().err
    for picture in data.glob("*/*.png"):
        picture.write_bytes(b"broken")
    with pytest.raises(SystemExit):
        evaluate_command.main([str(run), "--data", str(data), "--bad-images", "skip", "--out",
                               str(tmp_path / "e")])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "none of the 48 picture(s) in" in line and "can be decoded" in line


@pytest.mark.parametrize("command", [evaluate_command, predict_command])
def test_out_at_a_file_is_named_before_anything_runs(command, run, pictures, tmp_path, capsys):
    blocker = tmp_path / "results.csv"
    blocker.write_text("a file the student keeps")
    picture = [str(pictures / "cat" / "0.png")] if command is predict_command else []
    for out, where in ((blocker, "is a file"), (blocker / "sub", f"is inside the file "
                                                                f"{str(blocker)!r}")):
        with pytest.raises(SystemExit) as info:
            command.main([str(run), *picture, "--out", str(out)])
        assert info.value.code == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"error: --out {str(out)!r} {where}; the command writes a folder of files" in line
    assert blocker.read_text() == "a file the student keeps"


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


def test_predict_takes_each_picture_once_and_replaces_the_earlier_call(run, pictures, tmp_path,
                                                                       capsys):
    """A folder, a pattern over the same pictures and a file named twice: each picture once, in
    the order first named.  A later call replaces the earlier one's files -- its table and its
    attention figures, nothing else in the folder -- and says so."""
    cat = pictures / "cat"
    out = tmp_path / "out"
    rows = predict_command.main([str(run), str(cat / "3.png"), str(cat), str(cat / "*.png"),
                                 str(cat / ".." / "cat" / "3.png"), "--out", str(out)])
    files = [str(cat / "3.png")] + [str(p) for p in sorted(cat.glob("*.png"))
                                    if p.name != "3.png"]
    assert [r["picture"] for r in rows] == files and len(files) == 16
    assert "replacing" not in capsys.readouterr().out
    predict_command.main([str(run), str(cat / "0.png"), str(cat / "1.png"), "--attention",
                          "--out", str(out)])
    assert f"replacing the earlier predictions in {out}" in capsys.readouterr().out
    assert len(list(csv.DictReader(open(out / "predictions.csv")))) == 2
    assert sorted(p.name for p in out.glob("*_attention.png")) == ["0_attention.png",
                                                                   "1_attention.png"]
    (out / "notes.txt").write_text("the student's own")
    again = predict_command.main([str(run), str(pictures / "dog" / "0.png"), "--out", str(out)])
    assert f"replacing the earlier predictions in {out}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "predictions.csv",
                                                     "predictions.json"]  # figures gone
    table = list(csv.DictReader(open(out / "predictions.csv")))
    assert [r["picture"] for r in table] == [again[0]["picture"]]


def test_predict_says_what_label_smoothing_does_to_the_probabilities(run, pictures, tmp_path,
                                                                      capsys):
    """The run trained with label smoothing 0.1 over 3 classes: its targets give the true class
    1 - 0.1 + 0.1/3 = 0.93, and predict says so; a checkpoint alone, whose training is not
    known, says nothing."""
    predict_command.main([str(run), str(pictures / "cat" / "0.png"), "--out",
                          str(tmp_path / "a")])
    assert ("the probabilities top out near 0.93: the run trained with label smoothing 0.1, "
            "whose targets give the true class 1 - 0.1 + 0.1/3 = 0.93, not 1") in \
        capsys.readouterr().out
    alone = tmp_path / "alone" / "model.safetensors"
    alone.parent.mkdir()
    shutil.copy(run / BEST, alone)
    predict_command.main([str(alone), str(pictures / "cat" / "0.png")])
    assert "label smoothing" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, needle", [
    (["--gallery", "-1"], "error: --gallery must be an integer >= 0, got -1"),
    (["--top-k", "0"], "error: --top-k must be a positive integer, got 0"),
])
def test_evaluate_refuses_bad_numbers_in_one_line(run, argv, needle, capsys):
    with pytest.raises(SystemExit) as info:
        evaluate_command.main([str(run), *argv])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(needle), line
