"""Hard distillation in the trainer (``--teacher``): DeiT's objective computed by hand, the
teacher in eval mode under no_grad on the batch as its own preprocessing wants it, a step that
teaches the distillation head the teacher's classes and the class head the labels, the NumPy
runner's steps equal to the PyTorch runner's with a teacher, whole runs through the command
line (both backends, two processes under torchrun), and the one-line errors.

Teachers are tiny models saved with ``save_checkpoint`` (random weights do: a teacher is any
model the library can load, trained or not); students are one-block distilled ViTs.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vit_scratch
from vit_scratch.data import load_digits, to_model_input
from vit_scratch.numpy_nn import training as np_training
from vit_scratch.run_folder import CHECKPOINT, METRICS, RUN_FILES, SETTINGS, load_model
from vit_scratch.train import TrainSettings, check_settings, main, objective, train, train_step
from vit_scratch.training import runners
from vit_scratch.training.distillation import Teacher, load_teacher

STUDENT = dict(embed_dim=16, depth=1, num_heads=2, mlp_ratio=2.0, drop_path_rate=0.0,
               distilled=True)
STUDENT_ARGS = [arg for k, v in STUDENT.items() for arg in ("--model-arg", f"{k}={v}")]
#: A CoaT-Lite teacher: another family, at the digits' own 8×8 (the student sees 24×24).
TEACHER = dict(embed_dims=(8, 8, 16, 16), serial_depths=(1, 1, 1, 1))


def quiet(*_):
    pass


def save_teacher(path: Path, name: str = "coat_lite_digits", seed: int = 2, **kwargs) -> Path:
    """A teacher with random weights, spread wide enough (std 1) to tell images apart."""
    torch.manual_seed(seed)
    model = vit_scratch.create_model(name, **{**TEACHER, **kwargs})
    vit_scratch.randomize_weights_(model, seed=seed, std=1.0)
    vit_scratch.save_checkpoint(model, path)
    return path


@pytest.fixture(scope="module")
def teacher_file(tmp_path_factory) -> Path:
    return save_teacher(tmp_path_factory.mktemp("teacher") / "coat_teacher.safetensors")


@pytest.fixture(scope="module")
def teacher_run(tmp_path_factory) -> Path:
    """A run folder of a tiny CoaT-Lite trained for 3 epochs on the digits (about 60% test)."""
    out = tmp_path_factory.mktemp("teacher") / "coat_run"
    result = train(TrainSettings(model="coat_lite_digits", model_kwargs=dict(TEACHER), epochs=3,
                                 lr=1e-2, warmup_epochs=0.5, device="cpu", progress="off",
                                 threads=1, out=str(out)), log=quiet)
    assert result["test_accuracy"] > 0.3
    return out


def settings(teacher=None, **changes) -> TrainSettings:
    base = dict(model="vit_digits", model_kwargs=dict(STUDENT), epochs=2, batch_size=32,
                lr=2e-2, warmup_epochs=0.5, device="cpu", progress="off", threads=1, out=None,
                teacher=None if teacher is None else str(teacher))
    return TrainSettings(**{**base, **changes})


def student(seed: int = 0, dtype=torch.float32):
    torch.manual_seed(seed)
    model = vit_scratch.create_model("vit_digits", **STUDENT).to(dtype)
    return vit_scratch.randomize_weights_(model, seed=seed)


# --- the objective and the teacher ---------------------------------------------------------------

def test_objective_is_half_labels_half_teacher_by_hand():
    """½ · Σ CE_ε(class head, labels) + ½ · Σ CE(distillation head, teacher's classes), from
    log-softmax by hand: the smoothing on the true labels only (DeiT's code)."""
    g = torch.Generator().manual_seed(0)
    cls, dist = torch.randn(5, 4, generator=g), torch.randn(5, 4, generator=g)
    labels, teacher = torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 1, 3, 3, 2])
    eps = 0.1
    log_p, log_q = cls.log_softmax(-1), dist.log_softmax(-1)
    smoothed = (1 - eps) * F.one_hot(labels, 4) + eps / 4
    by_hand = 0.5 * -(smoothed * log_p).sum() + 0.5 * -log_q[torch.arange(5), teacher].sum()
    assert torch.allclose(objective((cls, dist), labels, eps, teacher), by_hand, atol=1e-6)
    assert torch.allclose(objective(cls, labels, eps), -(smoothed * log_p).sum(), atol=1e-6)
    np_loss = np_training.hard_distillation(cls.numpy(), dist.numpy(), labels.numpy(),
                                            teacher.numpy(), eps)
    assert abs(float(np_loss) - by_hand.item() / 5) < 1e-6  # the NumPy room's: the batch mean


def test_teacher_sees_the_batch_as_its_own_preprocessing_wants_it(teacher_file):
    """A 24×24 student batch (mean 0, std 1) for an 8×8 teacher is what ``to_model_input`` makes
    of the same pictures; for a 3-channel teacher with ImageNet's mean and std, the grey batch
    is repeated and normalised; the same input passes through untouched."""
    stu = student()
    teacher = load_teacher(settings(teacher_file), stu, torch.device("cpu"), quiet)
    pictures = torch.rand(4, 1, 24, 24, generator=torch.Generator().manual_seed(1))
    batch = to_model_input(pictures.numpy(), stu)  # the student's normalised batch
    expected = to_model_input(pictures.numpy(), teacher.model)  # (4, 1, 8, 8)
    assert teacher.view(batch).shape == (4, 1, 8, 8)
    assert torch.allclose(teacher.view(batch), expected, atol=1e-6)
    rgb = vit_scratch.create_model("deit_tiny_patch16_224", img_size=32, depth=1, num_classes=10)
    rgb_teacher = Teacher(rgb, stu.pretrained_cfg)
    expected = to_model_input(pictures.numpy(), rgb)  # (4, 3, 32, 32): ImageNet's mean and std
    assert torch.allclose(rgb_teacher.view(batch), expected, atol=1e-5)
    same = Teacher(student(seed=1), stu.pretrained_cfg)
    assert same.same_input and same.view(batch) is batch


def test_a_student_with_imagenet_statistics_un_normalises_its_batch_for_the_teacher():
    """A student normalised with ImageNet's mean and std, a teacher with mean 0 and std 1 at
    another size: the teacher's view is what ``to_model_input`` makes of the same pictures for
    the teacher -- so the student's normalisation was undone first (without that, the view
    differs by far more than float rounding)."""
    stu = vit_scratch.create_model("deit_tiny_distilled_patch16_224", img_size=32, depth=1,
                                   num_classes=10)  # 3 × 32 × 32, ImageNet's mean and std
    assert tuple(stu.pretrained_cfg["mean"]) != (0.0, 0.0, 0.0)
    grey = vit_scratch.create_model("coat_lite_digits", **TEACHER)  # 1 × 8 × 8, mean 0, std 1
    teacher = Teacher(grey, stu.pretrained_cfg)
    pictures = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    batch = to_model_input(pictures.numpy(), stu)
    expected = to_model_input(pictures.numpy(), grey)
    assert torch.allclose(teacher.view(batch), expected, atol=1e-5)
    skipped = to_model_input(batch.numpy().clip(0, 1), grey)  # the view, had it not been undone
    assert (skipped - expected).abs().max() > 0.1


def test_a_student_without_a_distillation_token_learns_the_teacher_through_its_head():
    """Without a distillation token the one head learns both targets: ½ · CE_ε(logits, labels)
    + ½ · CE(logits, teacher's classes), by hand; a step with a teacher that always says 7
    moves a plain ViT towards 7 more than a step without."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(5, 4, generator=g)
    labels, teacher = torch.tensor([0, 1, 2, 3, 0]), torch.tensor([1, 1, 3, 3, 2])
    log_p = logits.log_softmax(-1)
    smoothed = 0.9 * F.one_hot(labels, 4) + 0.1 / 4
    by_hand = 0.5 * -(smoothed * log_p).sum() + 0.5 * -log_p[torch.arange(5), teacher].sum()
    assert torch.allclose(objective(logits, labels, 0.1, teacher), by_hand, atol=1e-6)
    plain = dict(STUDENT, distilled=False)
    images = torch.randn(16, 1, 24, 24, generator=g)
    labels = torch.arange(16) % 5
    sevens = {}
    for name, teacher in (("with", FixedTeacher()), ("without", None)):
        torch.manual_seed(0)
        model = vit_scratch.create_model("vit_digits", **plain).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
        for _ in range(10):
            step = train_step(model, images, labels, optimizer, 0.1, teacher=teacher)
        with torch.no_grad():
            sevens[name] = model.eval()(images).softmax(-1)[:, 7].mean().item()
    assert sevens["with"] > sevens["without"] + 0.1
    assert 0 <= step.correct <= 16


def test_teacher_runs_in_eval_mode_without_gradients(teacher_file):
    """The runner's ``train()`` switches the student, never the teacher; the teacher's classes
    carry no graph, and are the argmax of its eval-mode logits on its view of the batch."""
    stu = student()
    runner = runners.TorchRunner(stu, settings(teacher_file, model_kwargs=dict(
        STUDENT, drop_path_rate=0.1)), steps=4)
    runner.train()
    teacher = runner.teacher
    assert stu.training and stu.distilled_training and not teacher.model.training
    assert not any(p.requires_grad for p in teacher.model.parameters())
    images = to_model_input(load_digits()[0][:16], stu)  # (16, 1, 24, 24), as the trainer's
    classes = teacher(images)
    assert classes.dtype == torch.int64 and not classes.requires_grad
    with torch.no_grad():
        assert torch.equal(classes, teacher.model.eval()(teacher.view(images)).argmax(-1))
    assert len(set(classes.tolist())) > 1  # a teacher that says one class would test less


class FixedTeacher:
    """A teacher that always says class 7."""

    def __call__(self, images):
        return torch.full((len(images),), 7)


def test_a_step_teaches_each_head_its_own_target():
    """Trained on random images whose labels are 0..4 while the teacher always says 7: the
    class head comes to predict the labels, the distillation head 7 -- each head learns from its
    own target through its own token.  The step reports the average's accuracy."""
    model = student(seed=3).train()
    model.set_distilled_training(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    g = torch.Generator().manual_seed(4)
    images = torch.randn(16, 1, 24, 24, generator=g)
    labels = torch.arange(16) % 5
    for _ in range(40):
        train_step(model, images, labels, optimizer, 0.1, teacher=FixedTeacher())
    with torch.no_grad():
        cls, dist = model(images)
    assert (cls.argmax(-1) == labels).float().mean() > 0.9
    assert (dist.argmax(-1) == 7).float().mean() > 0.9
    optimizer.param_groups[0]["lr"] = 0.0  # one more step that changes nothing: what it reports
    step = train_step(model, images, labels, optimizer, 0.1, teacher=FixedTeacher())
    average = (cls + dist) / 2  # what the model predicts at inference
    assert step.correct == int((average.argmax(-1) == labels).sum())
    assert math.isclose(step.cross_entropy, F.cross_entropy(average, labels).item(), rel_tol=1e-5)
    by_hand = (0.5 * F.cross_entropy(cls, labels, label_smoothing=0.1)
               + 0.5 * F.cross_entropy(dist, torch.full((16,), 7)))
    assert math.isclose(step.loss, by_hand.item(), rel_tol=1e-5)
    with torch.no_grad():
        assert torch.allclose(model.eval()(images), average, atol=1e-6)


def test_the_numpy_runner_takes_the_pytorch_runners_steps_with_a_teacher(teacher_file):
    """Ten steps of hard distillation in float64 (no stochastic depth, no augmentation): the
    NumPy student's backward through both heads and the PyTorch student's autograd give the
    same losses and end at the same weights; both runners' teacher is the same PyTorch model."""
    model = student(seed=5, dtype=torch.float64)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    s = settings(teacher_file, lr=3e-3, weight_decay=0.3, warmup_epochs=0.2,
                 label_smoothing=0.1)
    ours, theirs = runners.NumpyRunner(model, s, 10), runners.TorchRunner(model, s, 10)
    assert ours.model.distilled_training and model.distilled_training
    gen = torch.Generator().manual_seed(6)
    ours.train()
    theirs.train()
    for step in range(10):
        images = torch.randn(8, 1, 24, 24, generator=gen, dtype=torch.float64)
        labels = torch.randint(0, 10, (8,), generator=gen)
        a, b = ours.step(images, labels), theirs.step(images, labels)
        assert abs(a.loss - b.loss) <= 1e-9 * b.loss, step
        assert abs(a.cross_entropy - b.cross_entropy) <= 1e-9 * b.cross_entropy, step
        assert a.correct == b.correct
    for key, value in model.state_dict().items():
        a, b = ours.model.params[key], value.numpy()
        if key.endswith("qkv.bias"):  # the key bias: a zero gradient, AdamW's noise (as in
            a, b = np.delete(a, np.s_[16:32]), np.delete(b, np.s_[16:32])  # test_numpy_training)
        assert np.abs(a - b).max() <= 1e-9 * np.abs(b).max(), key
    for key in ("dist_token", "head_dist.weight", "head.weight"):  # both heads and the token learnt
        assert not torch.equal(model.state_dict()[key], initial[key]), key


# --- whole runs ----------------------------------------------------------------------------------

def test_a_distilled_run_through_the_command_line_both_backends(teacher_run, tmp_path):
    """``--teacher RUN`` on the digits with each backend: every file of a run, the teacher in
    settings.json, a history that learns, and a checkpoint that loads as the distilled model;
    ``--resume`` takes the teacher from the run.

    "Learns", for two epochs of a one-block student whose first epoch is mostly warm-up: the
    loss falls, and the test accuracy is above chance by more than three standard errors of a
    guesser's accuracy on the 359 test digits (0.10 + 3 · 0.016) -- not a fixed 0.2, which
    such a short run reaches or misses by float rounding (0.189 with PyTorch 2.14)."""
    common = ["--epochs", "2", "--batch-size", "32", "--lr", "2e-2", "--warmup-epochs", "0.5",
              "--device", "cpu", "--threads", "1", "--progress", "off", *STUDENT_ARGS,
              "--teacher", str(teacher_run)]
    for backend in ("torch", "numpy"):
        out = tmp_path / backend
        result = main([*common, "--backend", backend, "--out", str(out)])
        assert all((out / name).is_file() for name in RUN_FILES), backend
        saved = json.loads((out / SETTINGS).read_text())
        assert saved["settings"]["teacher"] == str(teacher_run)
        assert saved["model_config"]["distilled"] is True
        metrics = json.loads((out / METRICS).read_text())
        losses = [h["train_loss"] for h in metrics["history"]]
        chance, tested = metrics["chance"], metrics["images"]["test"]
        above_chance = chance + 3 * math.sqrt(chance * (1 - chance) / tested)  # ~0.15
        assert losses[-1] < losses[0] - 0.1, (backend, losses)
        assert metrics["test_accuracy"] > above_chance, (backend, metrics["test_accuracy"])
        model = load_model(out)
        assert type(model).__name__ == "VisionTransformerDistilled"
        assert not model.distilled_training  # a loaded model predicts with the average
        assert result["model"].state_dict().keys() == model.state_dict().keys()
    resumed = main(["--out", str(tmp_path / "torch"), "--resume", "--epochs", "3"])
    assert resumed["settings"]["teacher"] == str(teacher_run) and resumed["epochs_done"] == 3


def test_two_processes_distil_as_one(teacher_file, tmp_path):
    """torchrun, 2 processes (gloo), each with its teacher, against 1 process with the same
    global batch: the same weights after one epoch, to float rounding."""
    data_args = ["--batch-size", "64", "--epochs", "1", "--lr", "1e-2", "--warmup-epochs", "0.5",
                 "--rotate", "0", "--translate", "0", "--scale", "0", "--select", "last",
                 "--device", "cpu", "--threads", "1", "--progress", "off", *STUDENT_ARGS,
                 "--teacher", str(teacher_file)]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                          os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "vit_scratch.train", *data_args, "--out", str(tmp_path / "two")],
        env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("teacher: coat_lite_digits") == 1  # rank 0 alone says it
    main([*data_args, "--out", str(tmp_path / "one")])
    assert json.loads((tmp_path / "two" / METRICS).read_text())["processes"] == 2
    one, two = load_model(tmp_path / "one" / CHECKPOINT), load_model(tmp_path / "two" / CHECKPOINT)
    images = torch.randn(8, 1, 24, 24, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(one(images), two(images), rtol=0, atol=1e-4)
    assert not torch.equal(one.head_dist.weight, student().head_dist.weight)  # it trained


def test_init_from_a_distilled_checkpoint_replaces_both_heads(tmp_path):
    """Fine-tuning (``--init``) a distilled model on data with other classes: everything loads
    but the class and distillation heads, which are new and sized for the data."""
    from vit_scratch.train import init_from

    source = student(seed=7)
    vit_scratch.save_checkpoint(source, tmp_path / "ten.safetensors")
    model = vit_scratch.create_model("vit_digits", **{**STUDENT, "num_classes": 3})
    with pytest.warns(UserWarning, match=r"its classifier head \(head.weight\) has 10 classes"):
        init_from(model, tmp_path / "ten.safetensors")
    for key, value in model.state_dict().items():
        if key.startswith(("head.", "head_dist.")):
            assert value.shape[0] == 3, key
        else:
            assert torch.equal(value, source.state_dict()[key]), key


# --- the errors, one line each, before anything is written ---------------------------------------

def test_a_student_without_a_distillation_token_distils_with_the_pytorch_backend(teacher_file):
    """The PyTorch backend distils through the class head; the NumPy room distils through a
    distillation token only, and says so in one line."""
    check_settings(settings(teacher_file, model_kwargs={}))
    check_settings(settings(teacher_file, model="cait_digits", model_kwargs={}))
    with pytest.raises(ValueError, match=r"--teacher '.*coat_teacher.safetensors' with --backend "
                                         r"numpy: --model vit_digits has no distillation token, "
                                         r"and the NumPy room distils through one; use --backend "
                                         r"torch .* \(--model-arg distilled=True, or --model NAME "
                                         r"with NAME one of deit_base_distilled_patch16_224, "):
        check_settings(settings(teacher_file, model_kwargs={}, backend="numpy"))
    with pytest.raises(ValueError, match=r"--model cait_digits has no distillation token, .* "
                                         r"\(--model NAME with NAME one of deit_base_distilled"):
        check_settings(settings(teacher_file, model="cait_digits", model_kwargs={},
                                backend="numpy"))
    check_settings(settings(teacher_file, backend="numpy"))  # distilled=True: accepted


def test_a_teacher_that_does_not_exist_is_refused(tmp_path, capsys):
    missing = tmp_path / "runs" / "nope"
    with pytest.raises(SystemExit) as stop:
        main(["--epochs", "1", "--teacher", str(missing), "--out", str(tmp_path / "out"),
              *STUDENT_ARGS])
    assert stop.value.code == 2
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.endswith(f"error: --teacher {str(missing)!r}: no such run folder or "
                            f"checkpoint file (or 'auto': a small convnet trained first on the "
                            f"same pictures)")
    assert not (tmp_path / "out").exists()  # refused before the run folder is made


def test_a_teacher_of_other_classes_is_refused_before_any_file(tmp_path, capsys):
    three = save_teacher(tmp_path / "three_classes.safetensors", num_classes=3)
    with pytest.raises(SystemExit):
        main(["--epochs", "1", "--teacher", str(three), "--out", str(tmp_path / "out"),
              "--progress", "off", "--threads", "1", *STUDENT_ARGS])
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.endswith(f"error: --teacher {str(three)!r}: its model (coat_lite_digits) "
                            f"predicts 3 classes, the student 10; the teacher must be trained "
                            f"on the student's classes")
    assert not any((tmp_path / "out" / name).exists() for name in RUN_FILES)


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_a_teacher_of_other_class_names_is_refused(tmp_path, capsys, backend):
    """A 10-class teacher whose file records the classes a..j, for the digits 0..9: the same
    count, other classes -- refused, naming both lists, before the run folder is written.  A
    teacher whose file records no names (numbered 0..9) is taken class for class."""
    other = tmp_path / "letters.safetensors"
    torch.manual_seed(0)
    vit_scratch.save_checkpoint(vit_scratch.create_model("coat_lite_digits", **TEACHER), other,
                                class_names=list("abcdefghij"))
    with pytest.raises(SystemExit):
        main(["--epochs", "1", "--teacher", str(other), "--out", str(tmp_path / "out"),
              "--backend", backend, "--progress", "off", "--threads", "1", "--baseline",
              "none", *STUDENT_ARGS])
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert message.endswith(f"error: --teacher {str(other)!r}: its classes are a, b, c, d, e, "
                            f"f, g, h, i, j, the data's 0, 1, 2, 3, 4, 5, 6, 7, 8, 9; the teacher "
                            f"must be trained on the student's classes, in the same order")
    assert not any((tmp_path / "out" / name).exists() for name in RUN_FILES)
    stu = student()
    for names in (None, [str(i) for i in range(10)]):
        vit_scratch.save_checkpoint(vit_scratch.create_model("coat_lite_digits", **TEACHER),
                                    tmp_path / "digits.safetensors", class_names=names)
        assert load_teacher(settings(tmp_path / "digits.safetensors"), stu, torch.device("cpu"),
                            quiet, classes=[str(i) for i in range(10)]) is not None


def test_teacher_auto_is_the_convnet_yardstick(tmp_path):
    """``--teacher auto``: the trainer trains the small convnet first (the convnet yardstick,
    written to metrics.json even without ``--baseline cnn``) and distils from it; a runner
    made without the trainer has no convnet to use, and says so."""
    logs = []
    plain = dict(STUDENT, distilled=False)
    result = train(settings("auto", epochs=1, model_kwargs=plain, baseline="none",
                            out=str(tmp_path / "auto")), log=logs.append)
    assert "teacher: the small convnet trained on the same pictures (--teacher auto)" in logs
    assert result["convnet_baseline"]["params"] == 16 * 9 + 16 * 16 * 9 + 16 * 32 * 9 + \
        32 * 32 * 9 + 32 * 64 * 9 + 64 * 64 * 9 + 2 * (16 + 16 + 32 + 32 + 64 + 64) + 64 * 10 + 10
    assert result["linear_baseline"] is None
    saved = json.loads((tmp_path / "auto" / METRICS).read_text())
    assert saved["convnet_baseline"] == result["convnet_baseline"]
    with pytest.raises(ValueError, match="--teacher auto: the convnet teacher is trained by the "
                                         "trainer"):
        runners.TorchRunner(student(), settings("auto"), steps=4)


def test_a_teacher_file_that_does_not_name_its_model_is_refused(tmp_path, capsys):
    bare = tmp_path / "bare.safetensors"
    vit_scratch.save_checkpoint(save_teacher_state(), bare)  # a state_dict: no metadata
    with pytest.raises(SystemExit):
        main(["--epochs", "1", "--teacher", str(bare), "--out", str(tmp_path / "out"),
              "--progress", "off", "--threads", "1", *STUDENT_ARGS])
    message = capsys.readouterr().err.strip().splitlines()[-1]
    assert "does not record its model" in message and str(bare) in message


def save_teacher_state() -> dict:
    return vit_scratch.create_model("coat_lite_digits", **TEACHER).state_dict()


def test_numpy_loss_refuses_teacher_labels_without_distilled_training():
    model = student()
    np_model = vit_scratch.create_numpy_model(
        "vit_digits", vit_scratch.state_dict_to_numpy(model.state_dict()), **STUDENT)
    images, labels = np.zeros((2, 1, 24, 24), np.float32), np.array([0, 1])
    with pytest.raises(ValueError, match=r"teacher_labels need a distilled model in distilled "
                                         r"training \(vit_digits: set_distilled_training\(True\)\)"):
        np_training.loss_and_grads(np_model, images, labels, teacher_labels=np.array([1, 1]))
    np_model.set_distilled_training(True)
    with pytest.raises(ValueError, match=r"teacher_labels must have shape \(B,\) = \(2,\)"):
        np_training.loss_and_grads(np_model, images, labels, teacher_labels=np.array([1]))
    loss, grads, logits = np_training.loss_and_grads(np_model, images, labels,
                                                     teacher_labels=np.array([1, 1]))
    assert logits.shape == (2, 10) and "head_dist.weight" in grads and math.isfinite(loss)
