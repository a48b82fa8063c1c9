"""The trainer: the schedule, the augmentation, one step, a tiny real run, resume, and every
bad argument refused before the first step.  Runs are tiny (16 channels, one block)."""
import json
import math

import numpy as np
import pytest
import torch

import vit_scratch
from vit_scratch.run_folder import CHECKPOINT, CURVES, METRICS, SETTINGS, STATE, load_run
from vit_scratch.train import (
    TrainSettings, build_model, evaluate, lr_at, main, param_groups, train, train_step,
)

TINY = dict(embed_dim=16, depth=1, num_heads=2, mlp_ratio=2.0)
TINY_ARGS = ["--model-arg", "embed_dim=16", "--model-arg", "depth=1", "--model-arg", "num_heads=2",
             "--model-arg", "mlp_ratio=2.0"]


def tiny_settings(out, **changes) -> TrainSettings:
    base = dict(model="vit_digits", model_kwargs=dict(TINY), epochs=3, batch_size=32, lr=2e-2,
                warmup_epochs=0.5, device="cpu", progress="off", out=str(out) if out else None)
    return TrainSettings(**{**base, **changes})


def test_lr_schedule():
    assert lr_at(0, 100, 10, 1.0) == 0.1
    assert lr_at(9, 100, 10, 1.0) == 1.0
    assert abs(lr_at(55, 100, 10, 1.0) - 0.5) < 1e-12  # half-way through the cosine
    assert lr_at(100, 100, 10, 1.0) < 1e-12
    assert lr_at(0, 100, 0, 1.0) == 1.0  # no warm-up


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
    step_loss, correct = train_step(model, images, labels, optimizer)
    assert abs(step_loss - before) < 1e-5 and 0 <= correct <= 32  # the loss it stepped on
    assert loss() < before - 0.01


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


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A tiny run through the command line, with the progress bar on."""
    out = tmp_path_factory.mktemp("runs") / "tiny"
    result = main(["--epochs", "3", "--batch-size", "32", "--lr", "2e-2", "--warmup-epochs", "0.5",
                   "--out", str(out),
                   "--device", "cpu", "--progress", "on", *TINY_ARGS])
    return out, result


def test_cli_writes_metrics_checkpoint_and_curves(finished_run, capsys):
    out, result = finished_run
    for name in (METRICS, CHECKPOINT, CURVES, SETTINGS, STATE):
        assert (out / name).is_file(), name
    metrics = json.loads((out / METRICS).read_text())
    assert metrics["test_accuracy"] == result["test_accuracy"] == metrics["history"][-1][
        "test_accuracy"]
    assert metrics["params"] == sum(p.numel() for p in result["model"].parameters())
    assert metrics["train_seconds"] > 0 and metrics["cpu_seconds"] > 0
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    losses = [h["train_loss"] for h in metrics["history"]]
    assert losses[-1] < losses[0] - 0.2  # it learns (2.32 -> 1.82 when this was written)
    assert metrics["test_accuracy"] > 0.25  # 2.5x chance after 3 tiny epochs (0.35 then)
    assert (out / CURVES).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_checkpoint_reloads_to_identical_logits(finished_run):
    out, result = finished_run
    model = load_run(out)  # settings.json + checkpoint.safetensors
    fresh = vit_scratch.load_checkpoint(build_model(tiny_settings(None), 10), out / CHECKPOINT)
    images = torch.randn(5, 1, 24, 24)
    with torch.no_grad():
        expected = result["model"].eval()(images)
        assert torch.equal(model(images), expected)
        assert torch.equal(fresh.eval()(images), expected)


def test_resume_continues_the_schedule_exactly(tmp_path):
    """Stopped after epoch 1 (as Ctrl-C would), then resumed from the command line: the same
    weights, learning rates and losses as a run that never stopped."""
    whole = train(tiny_settings(tmp_path / "whole"), log=lambda *_: None)

    def stop(epoch, record):
        if epoch == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_settings(tmp_path / "cut"), log=lambda *_: None, on_epoch_end=stop)
    assert not (tmp_path / "cut" / METRICS).exists()
    assert torch.load(tmp_path / "cut" / STATE, weights_only=True)["epoch"] == 1
    resumed = main(["--out", str(tmp_path / "cut"), "--resume"])  # the rest from the run
    assert [h["lr"] for h in resumed["history"]] == [h["lr"] for h in whole["history"]]
    assert [h["train_loss"] for h in resumed["history"]] == [
        h["train_loss"] for h in whole["history"]]
    for key, value in whole["model"].state_dict().items():
        assert torch.equal(resumed["model"].state_dict()[key], value), key


def test_init_fine_tunes_with_a_new_head(tmp_path, finished_run):
    """--init loads every weight but a head for another number of classes."""
    out, result = finished_run
    model = build_model(tiny_settings(None), num_classes=3)
    from vit_scratch.train import init_from

    init_from(model, out / CHECKPOINT)
    trained = result["model"].state_dict()
    for key, value in model.state_dict().items():
        if key.startswith("head."):
            assert value.shape[0] == 3
        else:
            assert torch.equal(value, trained[key]), key


# --- bad arguments: refused before the first step, with a message that names them --------------

def fails(argv, capsys, *needles):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, (needle, err)
    assert "epoch" not in capsys.readouterr().out
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
])
def test_bad_numbers_are_refused(argv, needle, tmp_path, capsys):
    fails([*argv, "--out", str(tmp_path / "run")], capsys, needle)
    assert not (tmp_path / "run").exists()


def test_a_finished_run_is_never_overwritten_unless_asked(finished_run, capsys):
    out, _ = finished_run
    before = (out / CHECKPOINT).read_bytes()
    fails(["--epochs", "1", "--out", str(out)], capsys, "already holds a finished run",
          "--overwrite")
    fails(["--out", str(out), "--resume"], capsys, "is finished")
    assert (out / CHECKPOINT).read_bytes() == before


def test_overwrite_replaces_a_run(tmp_path):
    out = tmp_path / "run"
    first = train(tiny_settings(out, epochs=1), log=lambda *_: None)
    second = train(tiny_settings(out, epochs=1, seed=1), overwrite=True, log=lambda *_: None)
    metrics = json.loads((out / METRICS).read_text())
    assert metrics["settings"]["seed"] == 1 and metrics["test_accuracy"] == second["test_accuracy"]
    assert first["model"] is not second["model"]


def test_unwritable_or_file_out_fails_before_training(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    fails(["--out", str(blocker / "run")], capsys, "is not a folder we can write to")
    fails(["--out", str(blocker)], capsys, "must be a folder")
    fails(["--out", str(tmp_path / "digits.safetensors")], capsys, "must be a folder")


def test_resuming_another_models_run_names_the_keys(tmp_path, capsys):
    out = tmp_path / "run"

    def stop(epoch, record):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(tiny_settings(out), log=lambda *_: None, on_epoch_end=stop)
    err = fails(["--out", str(out), "--resume", "--model-arg", "depth=2"], capsys,
                "trained with --model vit_digits", "missing", "blocks.1.attn.qkv.weight")
    assert "embed_dim" in err  # the run's own model arguments are shown
    fails(["--out", str(out), "--resume", "--lr", "0.1"], capsys,
          "--lr 0.1 (the run has 0.02)")
    fails(["--out", str(tmp_path / "nothing"), "--resume"], capsys, "holds no run to resume")


def test_compile_is_skipped_cleanly_on_the_cpu(tmp_path):
    logs = []
    train(tiny_settings(None, epochs=1, compile=True), log=logs.append)
    assert any("--compile: skipped" in line for line in logs)


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
    assert np.isfinite(result["loss"])


def test_any_image_label_dataset_trains():
    """The trainer takes any (image, label) datasets, e.g. torchvision's."""
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(64) % 4
    images = torch.randn(64, 3, 24, 24, generator=gen) + labels[:, None, None, None]  # separable
    data = torch.utils.data.TensorDataset(images, labels)
    cfg = tiny_settings(None, data="my tensors", model_kwargs=dict(TINY, in_chans=3), epochs=2,
                      batch_size=16)
    result = train(cfg, datasets=(data, data), log=lambda *_: None)
    assert result["model"].num_classes == 4  # one more than the largest label
    assert result["history"][-1]["train_loss"] < result["history"][0]["train_loss"]


def test_bf16_autocast_path_runs_on_the_cpu():
    """The GPU recipe's bf16 autocast, exercised on the CPU (where it is allowed, but slow)."""
    result = train(tiny_settings(None, epochs=1, precision="bf16"), log=lambda *_: None)
    assert result["precision"] == "bf16" and math.isfinite(result["history"][0]["train_loss"])
    assert next(result["model"].parameters()).dtype == torch.float32  # weights stay fp32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_run_with_bf16_and_compile(tmp_path):
    result = train(tiny_settings(tmp_path / "gpu", epochs=2, device="cuda", compile=True),
                   log=lambda *_: None)
    assert result["device"].startswith("cuda") and result["precision"] == "bf16"
    model = load_run(tmp_path / "gpu")  # the checkpoint has plain keys, not _orig_mod.*
    assert model.num_classes == 10


def test_ctrl_c_exits_130_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    import vit_scratch.train as trainer

    out = tmp_path / "run"

    def interrupted(cfg, **kwargs):  # as if Ctrl-C came after the first saved epoch
        def stop(epoch, record):
            raise KeyboardInterrupt

        return train(cfg, log=lambda *_: None, on_epoch_end=stop)

    monkeypatch.setattr(trainer, "train", interrupted)
    with pytest.raises(SystemExit) as info:
        main(["--out", str(out), "--epochs", "2", "--progress", "off", *TINY_ARGS])
    assert info.value.code == 130
    assert f"--out {out} --resume" in capsys.readouterr().err
    assert (out / STATE).exists() and not (out / METRICS).exists()
