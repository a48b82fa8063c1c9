"""``python -m vit_scratch.train --backend numpy``: the NumPy room trains.

Step equivalence: with stochastic depth and augmentation off, the same initial weights and the
same batches, twenty steps of the NumPy runner (``training.runners.NumpyRunner``: the NumPy
room's backward passes and AdamW, ``schedule.LrSchedule``) take the PyTorch runner's losses
(``recipe.train_step``, ``torch.optim.AdamW`` on ``recipe.param_groups``,
``recipe.lr_schedule``) and end at its weights, for a ViT, a CaiT and a CoaT-Lite.  Then whole runs: the same history and run folder as the
PyTorch backend, resume, a NaN stopping the run without touching the saved epoch, and the
options the NumPy backend refuses.  Models are tiny (one block, 16 channels).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import vit_scratch
from vit_scratch import numpy_backend
from vit_scratch.numpy_nn import training
from vit_scratch.training import runners
from vit_scratch.run_folder import BEST, CHECKPOINT, METRICS, load_model, load_state
from vit_scratch.schedule import LrSchedule, lr_at
from vit_scratch.train import TrainSettings, check_settings, train
from vit_scratch.weights import read_state_dict

TINY = {
    "vit_digits": dict(embed_dim=16, depth=1, num_heads=2, drop_path_rate=0.0),
    "cait_digits": dict(embed_dim=16, depth=1, depth_token_only=1, num_heads=2,
                        init_values=0.1, drop_path_rate=0.0),
    "coat_lite_digits": dict(embed_dims=(8, 8, 16, 16), drop_path_rate=0.0),
}
STEPS, BATCH = 20, 8
#: Loss: relative error.  Weights: max |NumPy - PyTorch| over the tensor's largest entry.
TOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def comparable(key: str, value: np.ndarray) -> np.ndarray | None:
    """The part of a tensor two exact-arithmetic-equal runs must agree on.  An attention's key
    bias has a zero gradient (a shift shared by all keys leaves the softmax over the keys -- or,
    in factorized attention, over the tokens -- unchanged), so both runs' "gradients" are
    rounding noise, and in float32 AdamW turns noise over an eps-sized average into steps of
    up to lr: the query and value parts of a fused qkv bias are compared, a separate key bias
    is not."""
    if key.endswith("qkv.bias"):
        d = len(value) // 3
        return np.concatenate([value[:d], value[2 * d:]])
    if key.endswith(".k.bias"):
        return None
    return value


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", list(TINY))
def test_twenty_steps_equal_the_pytorch_trainers(name, dtype):
    """The two runners behind the trainer's one interface (``training.runners``), on the same
    settings, weights and batches: the same losses and learning rates step by step, and the
    same weights after twenty steps."""
    torch.manual_seed(0)
    model = vit_scratch.create_model(name, **TINY[name]).to(dtype)
    vit_scratch.randomize_weights_(model, seed=1)
    initial = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    settings = TrainSettings(model=name, model_kwargs=TINY[name], epochs=1, lr=1.5e-3,
                             weight_decay=0.3, warmup_epochs=0.2, label_smoothing=0.1)
    ours = runners.NumpyRunner(model, settings, STEPS)  # warm-up: round(0.2 · 20) = 4 steps
    theirs = runners.TorchRunner(model, settings, STEPS)
    weights = ours.model.params
    assert all(not np.shares_memory(weights[k], v.numpy()) for k, v in model.state_dict().items())
    assert all(v.dtype == model.state_dict()[k].numpy().dtype for k, v in weights.items())
    size = model.pretrained_cfg["input_size"]
    gen = torch.Generator().manual_seed(2)
    ours.train()
    theirs.train()
    for step in range(STEPS):
        images = torch.randn(BATCH, *size, generator=gen, dtype=dtype)
        labels = torch.randint(0, model.num_classes, (BATCH,), generator=gen)
        assert math.isclose(ours.lr, theirs.lr, rel_tol=1e-12)
        a, b = ours.step(images, labels), theirs.step(images, labels)
        assert abs(a.loss - b.loss) <= TOL[dtype] * abs(b.loss), step
        assert abs(a.cross_entropy - b.cross_entropy) <= TOL[dtype] * b.cross_entropy
        assert a.correct == b.correct or dtype == torch.float32
    assert ours.optimizer.adamw.steps == STEPS
    moved = []
    for key, value in model.state_dict().items():
        a, b = comparable(key, weights[key]), comparable(key, value.numpy())
        if a is None:
            continue
        assert np.abs(a - b).max() <= TOL[dtype] * np.abs(b).max(), key
        moved.append(not np.array_equal(b, comparable(key, initial[key])))
    # the comparison means something: training moved the weights (a few tensors have a zero
    # gradient, e.g. talking heads' bias before the softmax, the smallest grid's CRPE bias)
    assert np.mean(moved) > 0.8
    ours.push(model)  # and back: the PyTorch model now holds the NumPy weights exactly
    assert all(np.array_equal(v.numpy(), weights[k]) for k, v in model.state_dict().items())


def test_a_scale_without_serial_blocks_trains_in_both_rooms():
    """A CoaT-Lite whose third scale has no serial block: its CPE and CRPE take part in no
    forward pass, get no gradient in either room, and both runners leave them as they are while
    the rest trains to the same weights."""
    kwargs = {**TINY["coat_lite_digits"], "serial_depths": (1, 1, 0, 1)}
    torch.manual_seed(0)
    model = vit_scratch.create_model("coat_lite_digits", **kwargs).double()
    vit_scratch.randomize_weights_(model, seed=1)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    settings = TrainSettings(model="coat_lite_digits", model_kwargs=kwargs, epochs=1, lr=1e-2,
                             warmup_epochs=0.0)
    ours, theirs = (runner(model, settings, 3) for runner in (runners.NumpyRunner,
                                                              runners.TorchRunner))
    gen = torch.Generator().manual_seed(2)
    for _ in range(3):
        images = torch.randn(BATCH, 1, 8, 8, generator=gen, dtype=torch.float64)
        labels = torch.randint(0, 10, (BATCH,), generator=gen)
        a, b = ours.step(images, labels), theirs.step(images, labels)
        assert abs(a.loss - b.loss) <= 1e-9 * b.loss
    idle = {k for k in initial if k.startswith(("cpe3.", "crpe3."))}
    assert idle and all(model.get_parameter(k).grad is None for k in idle)
    moved = {}
    for key, value in model.state_dict().items():
        assert np.abs(ours.model.params[key] - value.numpy()).max() <= 1e-9, key
        moved[key] = not torch.equal(value, initial[key])
    assert not any(moved[k] for k in idle) and np.mean(list(moved.values())) > 0.8


def test_schedule_is_one_function():
    """Both backends follow one ``lr_at``: the NumPy room's training module uses it, and
    ``LrSchedule`` (the NumPy runner's schedule) follows it step by step (PyTorch's schedulers
    follow it too: tests/test_training.py)."""
    assert training.lr_at is lr_at

    class Opt:
        param_groups = [{"lr": 2.0}]

    schedule = LrSchedule(Opt, 10, 3, done=2)
    got = []
    for _ in range(8):
        got.append(Opt.param_groups[0]["lr"])
        schedule.step()
    assert got == [lr_at(step, 10, 3, 2.0) for step in range(2, 10)]


# --- whole runs ---------------------------------------------------------------------------------

RUN = dict(model="vit_digits", model_kwargs=dict(TINY["vit_digits"]), epochs=2, batch_size=64,
           lr=2e-2, warmup_epochs=0.5, rotate=0.0, translate=0.0, scale=0.0, device="cpu",
           progress="off", threads=1)


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def numpy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("numpy_run")
    settings = TrainSettings(**RUN, backend="numpy", out=str(out))
    return settings, train(settings, log=quiet)


def test_a_numpy_run_is_the_pytorch_run(numpy_run):
    """Two epochs of the digits in both backends: the same history (float32 rounding apart),
    the same test accuracy, and a run folder whose checkpoint loads in both rooms."""
    settings, ours = numpy_run
    theirs = train(TrainSettings(**RUN, backend="torch"), log=quiet)
    for a, b in zip(ours["history"], theirs["history"]):
        for key in ("train_loss", "train_cross_entropy", "val_loss"):
            assert abs(a[key] - b[key]) <= 1e-4 * b[key], key
        assert math.isclose(a["lr"], b["lr"], rel_tol=1e-12)
    assert ours["test_accuracy"] == theirs["test_accuracy"] > 0.3
    out = ours["out"]
    assert {p.name for p in out.iterdir()} >= {CHECKPOINT, BEST, METRICS, "metrics.csv",
                                               "curves.png", "settings.json"}
    assert load_state(out)["settings"]["backend"] == "numpy"
    model = load_model(out / CHECKPOINT)  # the PyTorch room
    np_model = vit_scratch.create_numpy_model(
        "vit_digits", vit_scratch.state_dict_to_numpy(read_state_dict(out / CHECKPOINT)),
        **TINY["vit_digits"])
    images = torch.randn(4, 1, 24, 24, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(images).numpy()
    assert np.abs(np_model(images.numpy()) - expected).max() <= 1e-4


def test_a_numpy_run_resumes(numpy_run, tmp_path):
    """``--resume --epochs 3`` continues with the saved AdamW state; the backend cannot change."""
    settings, first = numpy_run
    import shutil

    out = tmp_path / "run"
    shutil.copytree(first["out"], out)
    with pytest.raises(ValueError, match=r"--backend 'torch' \(the run has 'numpy'\)"):
        train(TrainSettings(**{**RUN, "epochs": 3}, backend="torch", out=str(out)),
              resume=True, log=quiet)
    again = train(TrainSettings(**{**RUN, "epochs": 3}, backend="numpy", out=str(out)),
                  resume=True, log=quiet)
    assert [h["epoch"] for h in again["history"]] == [1, 2, 3]
    assert again["history"][:2] == first["history"]
    assert again["history"][2]["train_loss"] < first["history"][1]["train_loss"]


def test_a_nan_stops_the_run_and_keeps_the_saved_epoch(tmp_path, monkeypatch):
    """A weight turned NaN after epoch 1: the first step of epoch 2 stops with its number and
    the run folder keeps epoch 1's finite checkpoint."""
    runners = []
    init = numpy_backend.NumpyRunner.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        runners.append(self)

    monkeypatch.setattr(numpy_backend.NumpyRunner, "__init__", record)

    def poison(epoch, record):
        runners[0].model.params["head.bias"][0] = np.nan

    settings = TrainSettings(**RUN, backend="numpy", out=str(tmp_path))
    steps = math.ceil(1294 / RUN["batch_size"])
    with pytest.raises(FloatingPointError, match=rf"the loss is nan at step {steps + 1}; "):
        train(settings, log=quiet, on_epoch_end=poison)
    saved = read_state_dict(tmp_path / CHECKPOINT)
    assert all(torch.isfinite(v).all() for v in saved.values())
    assert load_state(tmp_path)["epoch"] == 1


@pytest.mark.parametrize("change, message", [
    (dict(compile=True), "does not take --compile True"),
    (dict(precision="bf16"), "does not take --precision bf16"),
    (dict(device="cuda"), "does not take --device cuda"),
    (dict(accum_steps=2), "does not take --accum-steps 2"),
    (dict(model_kwargs={"drop_rate": 0.1}), "trains without dropout .* drop_rate=0.1"),
    (dict(backend="jax"), "--backend must be 'torch' or 'numpy', got 'jax'"),
])
def test_numpy_backend_refuses_what_it_cannot_do(change, message):
    with pytest.raises(ValueError, match=message):
        check_settings(TrainSettings(**{**RUN, "backend": "numpy", **change}))
