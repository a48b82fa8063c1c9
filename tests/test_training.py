"""The trainer and the commands around it: the schedule, one step, gradient accumulation, real
runs (the digits, and a small folder of pictures), model selection, early stopping, resume and
extension, evaluate and predict, two processes against one, the optional extras, the curves,
and every bad argument refused before the first step.  Models are tiny (16 channels, one
block); the runs share two fixtures."""
import csv
import json
import math
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import vit_scratch
from vit_scratch import evaluate as evaluate_command
from vit_scratch import plotting, predict as predict_command
from vit_scratch.data import make_datasets, preprocess
from vit_scratch.distributed import World
from vit_scratch.run_folder import (
    BEST, CHECKPOINT, CURVES, METRICS, METRICS_CSV, SETTINGS, STATE, load_model, load_state,
)
from vit_scratch.schedule import lr_at
from vit_scratch.train import (
    RunProgress, TrainSettings, build_model, build_parser, check_settings, evaluate, lr_schedule,
    main, param_groups, train, train_step,
)
from vit_scratch.weights import read_model_info, save_checkpoint

TINY = dict(embed_dim=16, depth=1, num_heads=2, mlp_ratio=2.0)
TINY_ARGS = ["--model-arg", "embed_dim=16", "--model-arg", "depth=1", "--model-arg", "num_heads=2",
             "--model-arg", "mlp_ratio=2.0"]
CLASSES = ["cat", "dog", "fox"]


def quiet(*_):
    pass


def make_pictures(root: Path, per_class: int = 16, classes=CLASSES, size=(12, 10)) -> Path:
    """A folder of small PNGs, one subfolder per class; class i is brighter than class i - 1."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for i, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for j in range(per_class):
            pixels = np.clip(rng.normal(50 + 70 * i, 25, size + (3,)), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(root / name / f"{j}.png")
    return root


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    return make_pictures(tmp_path_factory.mktemp("data") / "pictures")


def picture_settings(pictures, out, **changes) -> TrainSettings:
    """27 train / 9 validation / 12 test pictures, batches of 8."""
    base = dict(model="vit_digits", model_kwargs=dict(TINY), data=str(pictures), epochs=3,
                batch_size=8, lr=1e-2, warmup_epochs=0.5, test_fraction=0.25, val_fraction=0.25,
                device="cpu", progress="off", threads=1, out=str(out) if out else None)
    return TrainSettings(**{**base, **changes})


def picture_args(pictures) -> list[str]:
    return ["--data", str(pictures), "--test-fraction", "0.25", "--val-fraction", "0.25",
            "--batch-size", "8", "--lr", "1e-2", "--warmup-epochs", "0.5", "--device", "cpu",
            "--threads", "1", "--progress", "off", *TINY_ARGS]


def digits_settings(out, **changes) -> TrainSettings:
    base = dict(model="vit_digits", model_kwargs=dict(TINY), epochs=3, batch_size=32, lr=2e-2,
                warmup_epochs=0.5, device="cpu", progress="off", threads=1,
                out=str(out) if out else None)
    return TrainSettings(**{**base, **changes})


def weights(path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


# --- the recipe's pieces ------------------------------------------------------------------------

def test_lr_schedule():
    assert lr_at(0, 100, 10, 1.0) == 0.1
    assert lr_at(9, 100, 10, 1.0) == 1.0
    assert abs(lr_at(55, 100, 10, 1.0) - 0.5) < 1e-12  # half-way through the cosine
    assert lr_at(100, 100, 10, 1.0) < 1e-12
    assert lr_at(0, 100, 0, 1.0) == 1.0  # no warm-up


@pytest.mark.parametrize("total, warmup, done", [(120, 12, 0), (57, 0, 0), (90, 5, 40)])
def test_pytorch_schedulers_follow_lr_at(total, warmup, done):
    """The trainer's LinearLR + CosineAnnealingLR (SequentialLR) is lr_at's curve, also when
    fast-forwarded to where a resumed run stopped."""
    p = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([p], lr=2.0)
    schedule = lr_schedule(optimizer, total, warmup, done)
    got = []
    for _ in range(done, total):
        got.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    expected = [lr_at(step, total, warmup, 2.0) for step in range(done, total)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_one_training_step_lowers_the_loss():
    torch.manual_seed(0)
    model = vit_scratch.create_model("vit_digits", **TINY, drop_path_rate=0.0)
    images, labels = torch.randn(32, 1, 24, 24), torch.randint(0, 10, (32,))
    optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-2)

    def loss():
        with torch.no_grad():
            return torch.nn.functional.cross_entropy(model.eval()(images), labels).item()

    before = loss()
    model.train()
    step = train_step(model, images, labels, optimizer)
    assert abs(step.loss - before) < 1e-5 and 0 <= step.correct <= 32  # the loss it stepped on
    assert abs(step.cross_entropy - step.loss) < 1e-6  # no label smoothing: the same number
    assert loss() < before - 0.01


def test_gradient_accumulation_takes_the_same_step():
    """Three uneven parts (11 + 11 + 10 images) whose gradients add up: the step of the whole
    batch, to float rounding; with label smoothing the objective differs from the plain
    cross-entropy, which is reported beside it."""
    torch.manual_seed(0)
    model = vit_scratch.create_model("vit_digits", **TINY, drop_path_rate=0.0)
    twin = vit_scratch.create_model("vit_digits", **TINY, drop_path_rate=0.0)
    twin.load_state_dict(model.state_dict())
    images, labels = torch.randn(32, 1, 24, 24), torch.randint(0, 10, (32,))
    steps = []
    for m, accum in ((model, 1), (twin, 3)):
        optimizer = torch.optim.AdamW(param_groups(m, 0.05), lr=1e-2)
        steps.append(train_step(m.train(), images, labels, optimizer, 0.1, None, accum))
    assert math.isclose(steps[0].loss, steps[1].loss, rel_tol=1e-6)
    assert steps[0].correct == steps[1].correct
    assert steps[0].loss > steps[0].cross_entropy  # smoothing adds to the objective
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        if name.endswith("attn.qkv.bias"):
            # The key bias has a zero gradient (softmax ignores a shift shared by a query's
            # scores), so both "gradients" are rounding noise and Adam's first step, about
            # lr·sign(g), moves it by ±lr either way: compare the query and value parts only.
            dim = a.numel() // 3
            a, b = torch.cat([a[:dim], a[2 * dim:]]), torch.cat([b[:dim], b[2 * dim:]])
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)


def test_weight_decay_groups_follow_the_model():
    """The trainer knows no family: it decays >= 2-D weights except what the model names."""
    model = vit_scratch.create_model("vit_digits")
    decay, no_decay = param_groups(model, 0.05)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert {"cls_token", "pos_embed"} == model.no_weight_decay()
    assert not decayed & model.no_weight_decay()
    assert "patch_embed.proj.weight" in decayed and "blocks.0.attn.qkv.weight" in decayed
    assert not any(n.endswith(".bias") or "norm" in n for n in decayed)
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    model.no_weight_decay = lambda: {"cls_token", "pos_embed", "patch_embed.proj.weight"}
    decay, _ = param_groups(model, 0.05)
    assert "patch_embed.proj.weight" not in {names[id(p)] for p in decay["params"]}


def test_evaluate_counts_every_image():
    model = vit_scratch.create_model("vit_digits", **TINY)
    images, labels = torch.randn(7, 1, 24, 24), torch.arange(7)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels),
                                         batch_size=3)
    result = evaluate(model, loader, torch.device("cpu"))
    with torch.no_grad():
        logits = model(images)
    expected = torch.nn.functional.cross_entropy(logits, labels).item()
    assert math.isclose(result["loss"], expected, rel_tol=1e-5)
    assert result["accuracy"] == (logits.argmax(-1) == labels).sum().item() / 7
    assert result["count"] == 7


def test_best_epoch_and_patience_bookkeeping():
    """The best epoch is the highest validation accuracy, ties going to the lower validation
    loss; patience counts the epochs since, and an extended run gets its own."""
    model = vit_scratch.create_model("vit_digits", **TINY)
    run = RunProgress()
    for epoch, (acc, loss) in enumerate([(0.5, 1.0), (0.7, 0.9), (0.7, 0.8), (0.7, 0.85),
                                         (0.6, 0.5)], 1):
        record = {"epoch": epoch, "val_accuracy": acc, "val_loss": loss}
        with torch.no_grad():
            model.head.bias.fill_(epoch)
        run.add(record, model, 1.0, 1.0)
    assert run.best_epoch == 3 and run.best_val_accuracy == 0.7
    assert float(run.best_weights["head.bias"][0]) == 3.0  # a copy, not the live tensor
    assert run.out_of_patience(2) and not run.out_of_patience(3) and not run.out_of_patience(None)
    run.patience_from = 5  # extended after epoch 5
    assert not run.out_of_patience(1)
    assert run.select(model, "best") == 3 and float(model.head.bias.detach()[0]) == 3.0
    assert run.select(model, "last") == 5


# --- a real run on the digits, through the command line -----------------------------------------

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A tiny run through the command line, with the progress bar on."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    result = main(["--epochs", "3", "--batch-size", "32", "--lr", "2e-2", "--warmup-epochs", "0.5",
                   "--out", str(out), "--device", "cpu", "--threads", "1", "--progress", "on",
                   *TINY_ARGS])
    return out, result


def test_cli_writes_every_file_of_a_run(finished_run):
    out, result = finished_run
    for name in (METRICS, METRICS_CSV, CHECKPOINT, BEST, CURVES, SETTINGS, STATE):
        assert (out / name).is_file(), name
    metrics = json.loads((out / METRICS).read_text())
    history = metrics["history"]
    assert [h["epoch"] for h in history] == [1, 2, 3] and metrics["epochs_done"] == 3
    assert metrics["images"] == {"train": 1294, "val": 144, "test": 359}
    assert metrics["params"] == sum(p.numel() for p in result["model"].parameters())
    assert metrics["train_seconds"] > 0 and metrics["cpu_seconds"] > 0
    losses = [h["train_loss"] for h in history]
    assert losses[-1] < losses[0] - 0.2  # it learns (2.27 -> 1.80 when this was written)
    assert metrics["test_accuracy"] > 0.25  # 2.5x chance after 3 tiny epochs (0.37 then)
    best = max(history, key=lambda h: (h["val_accuracy"], -h["val_loss"]))
    assert metrics["selected_epoch"] == metrics["best_epoch"] == best["epoch"]
    with open(out / METRICS_CSV) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    assert [float(r["val_accuracy"]) for r in rows] == [h["val_accuracy"] for h in history]
    assert (out / CURVES).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the test split, once, on the selected checkpoint: evaluated again here, independently
    model = load_model(out)
    _, test_set = make_datasets("digits", model, 0.2, 0)
    again = evaluate(model, torch.utils.data.DataLoader(test_set, batch_size=512),
                     torch.device("cpu"))
    assert again["accuracy"] == metrics["test_accuracy"] and again["count"] == 359


def test_checkpoint_files_reload_to_identical_logits(finished_run):
    out, result = finished_run
    images = torch.randn(5, 1, 24, 24)
    selected = load_model(out)  # the run folder: its selected checkpoint, from its metadata
    assert selected.class_names == [str(d) for d in range(10)]
    last = vit_scratch.load_checkpoint(build_model(digits_settings(None), 10), out / CHECKPOINT)
    state = load_state(out)
    with torch.no_grad():
        torch.testing.assert_close(selected(images), result["model"].eval()(images), rtol=0,
                                   atol=0)
        assert torch.equal(load_model(out / BEST)(images), selected(images))
    for key, value in last.state_dict().items():  # checkpoint.safetensors: the last epoch
        assert torch.equal(value, state["model"][key]), key
    assert state["finished"] and state["epoch"] == 3


def test_init_fine_tunes_with_a_new_head(finished_run):
    """--init loads every weight but a head for another number of classes."""
    from vit_scratch.train import init_from

    out, _ = finished_run
    model = build_model(digits_settings(None), num_classes=3)
    init_from(model, out / CHECKPOINT)
    trained = weights(out / CHECKPOINT)
    for key, value in model.state_dict().items():
        if key.startswith("head."):
            assert value.shape[0] == 3
        else:
            assert torch.equal(value, trained[key]), key


def test_every_setting_is_an_option_with_its_help():
    """One table: each field of TrainSettings carries its help, the parser is made from it, and
    docs/training.md lists every option with the same text."""
    import dataclasses

    text = build_parser().format_help()
    docs = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    for f in dataclasses.fields(TrainSettings):
        assert f.metadata["help"], f.name
        flag = f.metadata["flag"] or f"--{f.name.replace('_', '-')}"
        assert flag in text, flag
        assert f"| `{flag}" in docs and f.metadata["help"].replace("|", "\\|") in docs, flag
    parsed = vars(build_parser().parse_args(["--patience", "3", "--flip", "--select", "last"]))
    assert parsed["patience"] == 3 and parsed["flip"] is True and parsed["select"] == "last"
    settings = TrainSettings(**{k: v for k, v in parsed.items()
                                if k not in ("resume", "overwrite", "recipe", "model_kwargs")})
    assert settings.patience == 3 and settings.threads == 0  # 0: chosen from the machine


# --- a folder of pictures: selection, early stopping, resume, extension --------------------------

def test_resume_continues_exactly_and_extends_a_finished_run(pictures, tmp_path, capsys):
    """Stopped after epoch 1 (as Ctrl-C would), then resumed from the command line: the same
    weights, learning rates and losses as a run that never stopped.  A finished run is not
    resumed, but ``--resume --epochs N`` extends it: its first epochs stay as they were."""
    whole = train(picture_settings(pictures, tmp_path / "whole"), log=quiet)

    def stop(epoch, record):
        if epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(picture_settings(pictures, tmp_path / "cut"), log=quiet, on_epoch_end=stop)
    assert not (tmp_path / "cut" / METRICS).exists()
    assert load_state(tmp_path / "cut")["epoch"] == 1
    assert len((tmp_path / "cut" / METRICS_CSV).read_text().splitlines()) == 2  # header + 1
    resumed = main(["--out", str(tmp_path / "cut"), "--resume"])  # the rest from the run
    assert [h["lr"] for h in resumed["history"]] == [h["lr"] for h in whole["history"]]
    assert [h["train_loss"] for h in resumed["history"]] == [
        h["train_loss"] for h in whole["history"]]
    for name in (CHECKPOINT, BEST):
        a, b = weights(tmp_path / "whole" / name), weights(tmp_path / "cut" / name)
        assert all(torch.equal(a[k], b[k]) for k in a), name
    assert resumed["test_accuracy"] == whole["test_accuracy"]

    capsys.readouterr()
    fails(["--out", str(tmp_path / "whole"), "--resume"], capsys, "is finished",
          "--epochs N with N > 3")
    longer = main(["--out", str(tmp_path / "whole"), "--resume", "--epochs", "5"])
    assert [h["epoch"] for h in longer["history"]] == [1, 2, 3, 4, 5]
    assert longer["history"][:3] == whole["history"]
    assert longer["history"][3]["lr"] > longer["history"][4]["lr"] > 0  # the longer schedule
    assert json.loads((tmp_path / "whole" / METRICS).read_text())["epochs_done"] == 5
    assert len((tmp_path / "whole" / METRICS_CSV).read_text().splitlines()) == 6
    assert json.loads((tmp_path / "whole" / SETTINGS).read_text())["settings"]["epochs"] == 5


def test_patience_stops_and_select_chooses_the_checkpoint(pictures, tmp_path):
    """At a learning rate too small to change any float32 computation (1e-30), the validation
    numbers never improve after epoch 1: --patience 1 stops after epoch 2; --select best tests
    epoch 1's weights, --select last epoch 2's (the same numbers here, as nothing moved)."""
    best = train(picture_settings(pictures, tmp_path / "best", epochs=6, lr=1e-30, patience=1),
                 log=quiet)
    assert best["epochs_done"] == 2 and best["stopped_early"]
    assert best["selected_epoch"] == best["best_epoch"] == 1
    last = train(picture_settings(pictures, tmp_path / "last", epochs=6, lr=1e-30, patience=1,
                                  select="last"), log=quiet)
    assert last["selected_epoch"] == 2 and last["test_accuracy"] == best["test_accuracy"]
    history = best["history"]
    assert history[0]["val_loss"] == history[1]["val_loss"]  # nothing moved
    assert (tmp_path / "best" / BEST).is_file() and (tmp_path / "last" / CHECKPOINT).is_file()


@pytest.fixture(scope="module")
def picture_run(pictures, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "pets"
    result = main([*picture_args(pictures), "--epochs", "4", "--out", str(out)])
    return out, result


def test_evaluate_command(picture_run, pictures, tmp_path, capsys):
    out, result = picture_run
    report = evaluate_command.main([str(out)])  # the run's own test split
    assert report["images"] == 12 and report["classes"] == CLASSES
    assert report["accuracy"] == result["test_accuracy"]
    matrix = np.array(report["confusion_matrix"])
    assert matrix.sum() == 12 and matrix.sum(1).tolist() == [4, 4, 4]
    assert np.trace(matrix) / 12 == report["accuracy"]
    recalls = [row["recall"] for row in report["per_class"]]
    np.testing.assert_allclose(recalls, np.diag(matrix) / matrix.sum(1))
    for name in ("evaluation.json", "per_class.csv", "confusion_matrix.csv",
                 "confusion_matrix.png"):
        assert (out / "evaluation" / name).is_file(), name
    with open(out / "evaluation" / "confusion_matrix.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0][1:] == CLASSES and [list(map(int, r[1:])) for r in rows[1:]] == matrix.tolist()
    whole = evaluate_command.main([str(out / BEST), "--data", str(pictures), "--out",
                                   str(tmp_path / "all")])
    assert whole["images"] == 48 and whole["top_k"] is None  # top-3 of 3 classes says nothing
    other = make_pictures(tmp_path / "other", per_class=2, classes=["cat", "dog"])
    fails_with(evaluate_command.main, [str(out), "--data", str(other)], capsys,
               "the data's classes ['cat', 'dog'] are not the checkpoint's ['cat', 'dog', 'fox']")


def test_predict_command_and_a_checkpoint_file_alone(picture_run, pictures, tmp_path, capsys):
    out, _ = picture_run
    files = [str(pictures / "cat" / "0.png"), str(pictures / "fox" / "0.png")]
    rows = predict_command.main([str(out), *files, "--top-k", "2", "--attention", "--out",
                                 str(tmp_path / "maps")])
    model = load_model(out)
    from PIL import Image

    batch = torch.stack([torch.from_numpy(preprocess(Image.open(f), model)) for f in files])
    with torch.no_grad():
        probs = model(batch).softmax(-1)
    for row, p in zip(rows, probs):
        names = [name for name, _ in row["top"]]
        assert names == [CLASSES[i] for i in p.argsort(descending=True)[:2]]
        np.testing.assert_allclose([q for _, q in row["top"]], p.sort(descending=True).values[:2],
                                   rtol=1e-6)
    assert [Path(r["attention"]).name for r in rows] == ["0_attention.png", "0-2_attention.png"]
    assert all(Path(r["attention"]).read_bytes()[:4] == b"\x89PNG" for r in rows)
    # the checkpoint file alone: its metadata names the model, its preprocessing and classes
    alone = tmp_path / "alone" / "model.safetensors"
    alone.parent.mkdir()
    shutil.copy(out / BEST, alone)
    info = read_model_info(alone)
    assert info["model_name"] == "vit_digits" and info["class_names"] == CLASSES
    assert info["model_config"]["embed_dim"] == 16
    assert info["pretrained_cfg"]["input_size"] == [1, 24, 24]
    assert predict_command.main([str(alone), *files, "--top-k", "2"]) == [
        {**r, "attention": None} for r in rows]
    capsys.readouterr()
    # bad input: refused before the model is loaded
    not_a_picture = tmp_path / "notes.txt"
    not_a_picture.write_text("hello")
    fails_with(predict_command.main, [str(out), str(not_a_picture)], capsys,
               f"no picture could be decoded: {not_a_picture}")
    fails_with(predict_command.main, [str(out), files[0], str(not_a_picture), "--bad-images",
                                      "error"], capsys,
               f"1 picture(s) cannot be decoded: {not_a_picture}")
    (tmp_path / "empty_run").mkdir()
    fails_with(predict_command.main, [str(tmp_path / "empty_run"), files[0]], capsys,
               "holds no checkpoint (best.safetensors or checkpoint.safetensors)")
    with pytest.raises(ValueError, match="class_names must be 3 strings"):
        save_checkpoint(model, tmp_path / "x.safetensors", class_names=["cat", "dog"])


def test_attention_map_follows_what_the_model_shows():
    """predict --attention asks the interface, never the family's name: rollout where every
    layer is token-to-token (ViT), the factorized view where the model offers view="keys"
    (CoaT), the last class-attention layer otherwise (CaiT) -- each equal to the plotting
    helper it comes from."""
    torch.manual_seed(0)
    expected = {
        "vit_digits": lambda m, x: plotting.attention_rollout_grid(m, x),
        "cait_digits": lambda m, x: plotting.attention_grids(m, x)[-1].mean(1),
        # the deepest of CoaT-Lite's scales with more than one token a side: 2 × 2, not 1 × 1
        "coat_lite_digits": lambda m, x: plotting.factorized_attention_view(m, x)[2].mean((1, 2)),
    }
    kinds = {}
    for name, reference in expected.items():
        model = vit_scratch.create_model(name).eval()
        x = torch.randn(2, *model.pretrained_cfg["input_size"])
        maps, kinds[name] = predict_command.attention_map(model, x)
        assert maps.ndim == 3 and maps.shape[0] == 2
        np.testing.assert_allclose(maps, reference(model, x), rtol=1e-6)
    assert kinds == {"vit_digits": "attention rollout",
                     "cait_digits": "the last layer's class attention",
                     "coat_lite_digits": "factorized attention: where the keys of layer 3 of 4 "
                                         "(2 × 2 tokens) pool from"}


# --- several processes (tests/test_distributed.py launches them) ----------------------------------

def same_model(path_a, path_b) -> None:
    """Two checkpoints hold the same weights to float rounding, except the attention's key bias,
    whose true gradient is 0 (q·(k + b) - q·k is the same for every key, and softmax ignores
    it): AdamW divides its float noise (~1e-9) by eps-sized running averages into steps of
    ~1e-4, in any two runs that sum in another order.  So their logits are compared too."""
    a, b = weights(path_a), weights(path_b)
    for key in a:
        x, y = a[key], b[key]
        if key.endswith("attn.qkv.bias"):
            dim = len(x) // 3
            x, y = torch.cat([x[:dim], x[2 * dim:]]), torch.cat([y[:dim], y[2 * dim:]])
        torch.testing.assert_close(x, y, rtol=0, atol=2e-6, msg=key)
    one, two = load_model(path_a), load_model(path_b)
    images = torch.randn(8, 1, 24, 24, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(one(images), two(images), rtol=0, atol=1e-5)


def test_batch_shares_must_be_whole():
    world = World(rank=0, size=3, local_rank=0, local_size=3, launched=True)
    with pytest.raises(ValueError, match=r"--batch-size 32 is not divisible by the 3 processes"):
        check_settings(digits_settings(None), world=world)
    check_settings(digits_settings(None, batch_size=30), world=world)
    with pytest.raises(ValueError, match=r"--accum-steps 16 splits each process's 10 images"):
        check_settings(digits_settings(None, batch_size=30, accum_steps=16), world=world)


# --- the optional extras, the figure ---------------------------------------------------------------

def test_a_missing_extra_is_named_and_a_missing_figure_costs_no_file(pictures, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(ModuleNotFoundError, match=r"the progress bar .* needs tqdm, which is "
                                                  r"not installed: pip install -e '\.\[train\]'"):
        train(picture_settings(pictures, None, epochs=1, progress="on"), log=quiet)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.warns(UserWarning, match="curves.png not drawn .*matplotlib.*vit-scratch"):
        train(picture_settings(pictures, tmp_path / "run", epochs=1), log=quiet)
    for name in (METRICS, METRICS_CSV, CHECKPOINT, BEST, SETTINGS, STATE):
        assert (tmp_path / "run" / name).is_file(), name
    assert not (tmp_path / "run" / CURVES).exists()


def test_training_curves_figure():
    """Plain cross-entropy for both losses (the smoothing said), integer epoch ticks, a legend
    below the panels, the tested epoch marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = [dict(epoch=e, train_cross_entropy=2.0 / e, val_loss=2.1 / e,
                    train_accuracy=0.5 + e / 10, val_accuracy=[0.6, 0.8, 0.7][e - 1])
               for e in (1, 2, 3)]
    loss_ax, acc_ax = plotting.plot_training_curves(history, title="run", selected_epoch=2,
                                                    test_accuracy=0.75, label_smoothing=0.1)
    fig = loss_ax.figure
    fig.canvas.draw()
    assert [line.get_ydata()[1] for line in loss_ax.lines[:2]] == [1.0, 1.05]
    assert "without label smoothing (trained with 0.1)" in loss_ax.get_title()
    assert acc_ax.get_title() == "best validation 0.8000 (epoch 2); test 0.7500 (epoch 2)"
    ticks = [t for t in acc_ax.get_xticks() if 1 <= t <= 3]
    assert ticks and all(float(t).is_integer() for t in ticks)
    legend = fig.legends[0].get_window_extent()
    for ax in (loss_ax, acc_ax):
        assert legend.y1 <= ax.get_window_extent().y0  # below the panels, covering nothing
    marker = acc_ax.lines[-1]
    assert list(marker.get_xdata()) == [2] and list(marker.get_ydata()) == [0.8]
    plt.close(fig)


# --- bad arguments: refused before the first step, with a message that names them --------------

def fails_with(command, argv, capsys, *needles):
    """``command(argv)`` exits with status 2 and a message holding every needle; returns the
    (stdout, stderr) it wrote."""
    with pytest.raises(SystemExit) as info:
        command(argv)
    assert info.value.code == 2
    out, err = capsys.readouterr()
    for needle in needles:
        assert needle in err, (needle, err)
    return out, err


def fails(argv, capsys, *needles):
    """The trainer refuses ``argv`` before its first epoch."""
    out, err = fails_with(main, argv, capsys, *needles)
    assert "epoch" not in out
    return err


def test_unknown_model_and_data_list_the_known_ones(tmp_path, capsys):
    fails(["--model", "vit_huge", "--out", str(tmp_path / "a")], capsys,
          "unknown model name 'vit_huge'", "vit_digits", "vit_tiny_patch16_224")
    fails(["--data", "mnist", "--out", str(tmp_path / "b")], capsys,
          "unknown data 'mnist'", "digits, digits_on_canvas", "folder")
    fails(["--model-arg", "depht=2", "--out", str(tmp_path / "c")], capsys,
          "'depht'", "depth")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("argv, needle", [
    (["--epochs", "0"], "--epochs must be a positive integer, got 0"),
    (["--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
    (["--batch-size", "-8"], "--batch-size must be a positive integer, got -8"),
    (["--lr", "-1"], "--lr must be a positive number, got -1.0"),
    (["--label-smoothing", "1.5"], "--label-smoothing must be in [0, 1), got 1.5"),
    (["--warmup-epochs", "50", "--epochs", "5"], "--warmup-epochs must be in [0, --epochs=5]"),
    (["--epochs", "two"], "argument --epochs: invalid int value: 'two'"),
    (["--device", "cuda:7" if torch.cuda.is_available() else "cuda"], "device 'cuda"),
    (["--init", "missing.safetensors"], "--init 'missing.safetensors': no such checkpoint file"),
    (["--val-fraction", "0"], "--val-fraction must be in (0, 1), got 0.0"),
    (["--val-fraction", "1.5"], "--val-fraction must be in (0, 1), got 1.5"),
    (["--patience", "0"], "--patience must be a positive integer (epochs without a better "
                          "validation accuracy), got 0"),
    (["--accum-steps", "0"], "--accum-steps must be a positive integer, got 0"),
    (["--select", "worst"], "argument --select: invalid choice: 'worst'"),
    (["--crop-scale", "2"], "--crop-scale must be in [0, 1]"),
    (["--flip"], "--flip, --crop-scale and --color-jitter augment folders of pictures"),
    (["--precision", "fp8"], "argument --precision: invalid choice: 'fp8'"),
    (["--backend", "numpy", "--precision", "fp16"], "does not take --precision fp16"),
])
def test_bad_numbers_are_refused(argv, needle, tmp_path, capsys):
    fails([*argv, "--out", str(tmp_path / "run")], capsys, needle)
    assert not any((tmp_path / "run").glob("*.safetensors"))


def test_settings_are_checked_through_the_api_too():
    for changes, message in [(dict(select="worst"), "--select must be 'best' or 'last'"),
                             (dict(bad_images="ignore"), "--bad-images must be 'error' or 'skip'"),
                             (dict(patience=-2), "--patience must be a positive integer")]:
        with pytest.raises(ValueError, match=message):
            train(digits_settings(None, **changes), log=quiet)


def test_a_class_without_a_validation_picture_is_refused(tmp_path, capsys):
    data = make_pictures(tmp_path / "few", per_class=20, classes=["a", "b"])
    make_pictures(data, per_class=2, classes=["c"])  # c: 2 pictures, both for training
    out = tmp_path / "run"
    fails(["--data", str(data), "--out", str(out), *TINY_ARGS], capsys,
          "--val-fraction 0.1 leaves class 'c' without a validation picture")
    fails(["--data", str(data), "--val-fraction", "0.02", "--out", str(out), *TINY_ARGS], capsys,
          "--val-fraction 0.02 of 34 training pictures leaves 1 for validation and 33 for "
          "training: too few validation pictures for the 3 classes", "raise --val-fraction")
    (data / "c" / "1.png").unlink()
    fails(["--data", str(data), "--out", str(out), *TINY_ARGS], capsys,
          "class 'c' has 1 training picture(s): a validation split needs at least 2")
    assert not out.exists()  # nothing written


def test_a_picture_that_does_not_decode_is_named_before_training(pictures, tmp_path, capsys):
    data = tmp_path / "pictures"
    shutil.copytree(pictures, data)
    broken = data / "dog" / "3.png"
    broken.write_bytes(broken.read_bytes()[:60])  # truncated
    err = fails([*picture_args(data), "--out", str(tmp_path / "run")], capsys,
                "1 picture(s) in", str(broken), "--bad-images skip")
    assert "Traceback" not in err and not (tmp_path / "run" / SETTINGS).exists()
    result = main([*picture_args(data), "--epochs", "1", "--bad-images", "skip", "--out",
                   str(tmp_path / "run")])
    assert sum(result["images"].values()) == 47
    err = capsys.readouterr().err  # a warning, on one line
    assert "python -m vit_scratch.train: warning: left out 1 picture(s) of" in err and \
        str(broken) in err


def test_a_finished_run_is_never_overwritten_unless_asked(finished_run, capsys):
    out, _ = finished_run
    before = (out / CHECKPOINT).read_bytes()
    fails(["--epochs", "1", "--out", str(out)], capsys, "already holds a finished run",
          "--overwrite")
    fails(["--out", str(out), "--resume"], capsys, "is finished")
    assert (out / CHECKPOINT).read_bytes() == before


def test_overwrite_replaces_a_run(pictures, tmp_path):
    out = tmp_path / "run"
    first = train(picture_settings(pictures, out, epochs=2), log=quiet)
    second = train(picture_settings(pictures, out, epochs=1, seed=1), overwrite=True, log=quiet)
    metrics = json.loads((out / METRICS).read_text())
    assert metrics["settings"]["seed"] == 1 and metrics["test_accuracy"] == second["test_accuracy"]
    assert len((out / METRICS_CSV).read_text().splitlines()) == 2  # the old rows are gone
    assert first["model"] is not second["model"]


def test_unwritable_or_file_out_fails_before_training(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    fails(["--out", str(blocker / "run")], capsys, "is not a folder we can write to")
    fails(["--out", str(blocker)], capsys, "must be a folder")
    fails(["--out", str(tmp_path / "digits.safetensors")], capsys, "must be a folder")


def test_resuming_another_models_run_names_the_keys(pictures, tmp_path, capsys):
    out = tmp_path / "run"

    def stop(epoch, record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(picture_settings(pictures, out), log=quiet, on_epoch_end=stop)
    err = fails(["--out", str(out), "--resume", "--model-arg", "depth=2"], capsys,
                "trained with --model vit_digits", "missing", "blocks.1.attn.qkv.weight")
    assert "embed_dim" in err  # the run's own model arguments are shown
    fails(["--out", str(out), "--resume", "--lr", "0.1"], capsys,
          "--lr 0.1 (the run has 0.01)")
    fails(["--out", str(tmp_path / "nothing"), "--resume"], capsys, "holds no run to resume")


def test_compile_is_skipped_cleanly_on_the_cpu(pictures):
    logs = []
    train(picture_settings(pictures, None, epochs=1, compile=True), log=logs.append)
    assert any("--compile: skipped" in line for line in logs)


def test_any_image_label_dataset_trains():
    """The trainer takes any (image, label) datasets, e.g. torchvision's; without a validation
    set it holds out --val-fraction of the training set, stratified."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(64) % 4
    images = torch.randn(64, 3, 24, 24, generator=gen) + labels[:, None, None, None]  # separable
    data = torch.utils.data.TensorDataset(images, labels)
    settings = digits_settings(None, data="my tensors", model_kwargs=dict(TINY, in_chans=3),
                               epochs=2, batch_size=16)
    result = train(settings, datasets=(data, data), log=quiet)
    assert result["model"].num_classes == 4  # one more than the largest label
    assert result["images"] == {"train": 57, "val": 7, "test": 64}
    assert result["history"][-1]["train_loss"] < result["history"][0]["train_loss"]
    three = train(settings, datasets=(data, data, data), log=quiet)
    assert three["images"] == {"train": 64, "val": 64, "test": 64}


def test_bf16_autocast_path_runs_on_the_cpu(pictures):
    """The GPU recipe's bf16 autocast, exercised on the CPU (where it is allowed, but slow)."""
    result = train(picture_settings(pictures, None, epochs=1, precision="bf16"), log=quiet)
    assert result["precision"] == "bf16" and math.isfinite(result["history"][0]["train_loss"])
    assert next(result["model"].parameters()).dtype == torch.float32  # weights stay fp32


def test_auto_precision_is_fp16_with_a_scaler_where_the_gpu_lacks_bf16(monkeypatch):
    """--precision auto asks the GPU: bf16 where it has it, fp16 (which needs a gradient
    scaler) where it does not (a T4, a V100); fp32 on the CPU.  A GPU without bf16 is only
    simulated here: the choice is made before anything runs on it."""
    from vit_scratch.training.settings import needs_grad_scaler, resolve_precision

    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    for supported, expected in ((True, torch.bfloat16), (False, torch.float16)):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: supported)
        assert resolve_precision("auto", cuda) == expected
        assert needs_grad_scaler(expected) == (not supported)
    with pytest.raises(ValueError, match=r"precision 'bf16' was asked for but cuda does not "
                                         r"support it \(--precision fp16 trains in fp16"):
        resolve_precision("bf16", cuda)
    assert resolve_precision("fp16", cuda) == resolve_precision("fp16", cpu) == torch.float16
    assert resolve_precision("auto", cpu) is None and resolve_precision("fp32", cuda) is None
    assert not needs_grad_scaler(torch.bfloat16) and not needs_grad_scaler(None)


def test_the_gradient_scaler_unscales_and_skips_a_step_that_overflows():
    """train_step with a GradScaler: the loss is scaled (by a power of two) before the backward
    pass and the gradients unscaled before AdamW, so in fp32 the step is the unscaled one bit
    for bit; a step whose gradients overflow (planted: an infinite gradient) leaves the weights
    as they were and halves the scale."""
    torch.manual_seed(0)
    model = vit_scratch.create_model("vit_digits", **TINY, drop_path_rate=0.0)
    twin = vit_scratch.create_model("vit_digits", **TINY, drop_path_rate=0.0)
    twin.load_state_dict(model.state_dict())
    images, labels = torch.randn(16, 1, 24, 24), torch.randint(0, 10, (16,))
    scaler = torch.amp.GradScaler("cpu")
    for m, s in ((model, None), (twin, scaler)):
        optimizer = torch.optim.AdamW(param_groups(m, 0.05), lr=1e-2)
        train_step(m.train(), images, labels, optimizer, 0.1, scaler=s)
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), name
    before = {k: v.clone() for k, v in twin.state_dict().items()}
    scale = scaler.get_scale()
    overflow = twin.head.weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    train_step(twin, images, labels, optimizer, 0.1, scaler=scaler)
    overflow.remove()
    assert all(torch.equal(before[k], v) for k, v in twin.state_dict().items())
    assert scaler.get_scale() == scale / 2


def test_fp16_with_a_gradient_scaler_trains_and_resumes_exactly_on_the_cpu(pictures, tmp_path):
    """--precision fp16 on the CPU (where autocast allows it, slowly): the scaler's path, the
    weights kept in fp32, the scaler's state saved for --resume, which continues the run bit
    for bit.  (On a GPU the same code runs in fp16 kernels: a CUDA machine checks it.)"""
    logs = []
    settings = picture_settings(pictures, tmp_path / "whole", precision="fp16", epochs=2)
    whole = train(settings, log=logs.append)
    assert whole["precision"] == "fp16" and "(fp16 autocast, gradient scaler)" in logs[0]
    assert all(math.isfinite(h["train_loss"]) for h in whole["history"])
    assert next(whole["model"].parameters()).dtype == torch.float32
    saved = load_state(tmp_path / "whole")["grad_scaler"]
    assert set(saved) >= {"scale", "_growth_tracker"} and saved["scale"] > 0

    def stop(epoch, record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(picture_settings(pictures, tmp_path / "cut", precision="fp16", epochs=2),
              log=quiet, on_epoch_end=stop)
    resumed = main(["--out", str(tmp_path / "cut"), "--resume"])
    for key in ("train_loss", "val_loss", "lr"):
        assert [h[key] for h in resumed["history"]] == [h[key] for h in whole["history"]], key
    a, b = weights(tmp_path / "whole" / CHECKPOINT), weights(tmp_path / "cut" / CHECKPOINT)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert load_state(tmp_path / "cut")["grad_scaler"] == saved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_run_with_bf16_and_compile(tmp_path):
    result = train(digits_settings(tmp_path / "gpu", epochs=2, device="cuda", compile=True),
                   log=quiet)
    assert result["device"].startswith("cuda") and result["precision"] == "bf16"
    model = load_model(tmp_path / "gpu")  # the checkpoint has plain keys, not _orig_mod.*
    assert model.num_classes == 10


def test_ctrl_c_exits_130_and_says_how_to_resume(pictures, tmp_path, monkeypatch, capsys):
    import vit_scratch.train as trainer

    out = tmp_path / "run"

    def interrupted(settings, **kwargs):  # as if Ctrl-C came after the first saved epoch
        def stop(epoch, record):
            raise KeyboardInterrupt

        return train(settings, log=quiet, on_epoch_end=stop)

    monkeypatch.setattr(trainer, "train", interrupted)
    with pytest.raises(SystemExit) as info:
        main([*picture_args(pictures), "--out", str(out), "--epochs", "2"])
    assert info.value.code == 130
    assert f"--out {out} --resume" in capsys.readouterr().err
    assert (out / STATE).exists() and not (out / METRICS).exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the folder is complete as far as it went
        assert load_model(out).num_classes == 3


# --- what the log says about time, and about a small validation split --------------------------

def test_each_epoch_line_gives_its_own_time_the_total_and_the_time_left(pictures, monkeypatch):
    """Epochs that take 2, 4, 6 and 8 s (a clock the test sets): each line gives its own time,
    the run's so far, and the epochs left times the median epoch so far."""
    from types import SimpleNamespace

    from vit_scratch.training import loop, progress

    ticks = iter([0, 2, 2, 6, 6, 12, 12, 20])  # each epoch's start and end
    monkeypatch.setattr(loop, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks)),
                                                      process_time=lambda: 0.0))
    logs = []
    result = train(picture_settings(pictures, None, epochs=4, baseline="none"), log=logs.append)
    ends = [line[line.rindex("("):] for line in logs if line.startswith("epoch ")]
    assert ends == ["(2.0 s, 2.0 s in all, about 6.0 s left)",   # 3 × 2
                    "(4.0 s, 6.0 s in all, about 6.0 s left)",   # 2 × median(2, 4)
                    "(6.0 s, 12 s in all, about 4.0 s left)",    # 1 × median(2, 4, 6)
                    "(8.0 s, 20 s in all)"]
    assert [h["train_seconds"] for h in result["history"]] == [2.0, 6.0, 12.0, 20.0]
    assert [progress.duration(s) for s in (4.25, 42, 720, 9000)] == ["4.2 s", "42 s", "12 min",
                                                                 "2.5 h"]


def test_a_small_validation_split_is_named_with_a_larger_one():
    from vit_scratch.training.yardsticks import small_validation

    assert small_validation(100, 900, carved=True) is None
    text = small_validation(44, 389, carved=True)  # the class project's folder
    assert text.startswith("warning: the validation split has 44 pictures: one picture moves "
                           "its accuracy by 2.3 points")
    assert text.endswith("--val-fraction 0.25 holds out about 108 of the 433 training pictures, "
                         "or --select last tests the last epoch instead")
    assert "--val-fraction 0.30 holds out about 105 of the 350" in small_validation(35, 315, True)
    for tiny in (small_validation(9, 27, carved=True), small_validation(44, 389, carved=False)):
        assert tiny.endswith("more validation pictures would help, or --select last tests the "
                             "last epoch instead")


def test_the_run_warns_of_its_small_validation_split(picture_run, capsys):
    _, result = picture_run
    assert result["images"]["val"] == 9
    assert result["notes"][0].startswith("warning: the validation split has 9 pictures")
    big = train(digits_settings(None, epochs=1), log=quiet)  # 144 validation digits
    assert not any("validation split" in note for note in big["notes"])


class BurnsCPU(torch.utils.data.Dataset):
    """Pictures that take 0.05 s of CPU each to read (a busy loop on the process's clock)."""

    def __init__(self, n: int = 16):
        self.images = torch.randn(n, 1, 24, 24, generator=torch.Generator().manual_seed(0))
        self.labels = torch.arange(n) % 2

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        import time

        start = time.process_time()
        while time.process_time() - start < 0.05:
            pass
        return self.images[index], self.labels[index]


def test_cpu_seconds_count_the_loader_workers():
    """Reading each picture costs 0.05 CPU s in a worker: an epoch of 16 pictures, 0.8 s that
    the main process, which only waits for them, does not spend itself."""
    settings = digits_settings(None, epochs=1, batch_size=8, workers=2, baseline="none")
    held_out = torch.utils.data.TensorDataset(torch.zeros(4, 1, 24, 24), torch.arange(4) % 2)
    result = train(settings, datasets=(BurnsCPU(), held_out, held_out), log=quiet)
    assert result["cpu_seconds"] >= 0.8
