"""The class project as the pages teach it: README.md's "Class project" walk-through runs, command
by command and in order, in a fresh folder holding a small generated ``my_pictures/`` (crops of
three photographs, ``tests/photo_pictures.py``: 15 pictures a class of 40-300 pixels, JPEG, PNG,
RGBA and grey), two new pictures and a timm-format DeiT-tiny file; then docs/library.md's
class-project section runs its Python blocks in the same folder, on the run the README trained.
The sections cannot rot.

How each command runs:

* ``python -m vit_scratch.train|evaluate|predict ...``: in this process, through the ``main(argv)``
  the command calls.  Training commands get :data:`QUICK` appended (argparse keeps an option's
  last value): one epoch on one thread, so each command is executed once, cheaply, as written.
* ``torchrun ...``: torchrun's own parser reads its arguments, and the trainer checks its
  arguments as each of the processes torchrun would start checks them (the batch must split
  evenly among them).  The single-machine line (``--standalone``) then trains in this process,
  through the same ``main(argv)`` each of its processes runs; the several-machine line cannot run
  here and stops at the checks.  Two processes launched for real cost about 26 CPU seconds
  (three Python processes importing PyTorch) for what tests/test_training.py's two-process
  test proves already: the trainer under ``torchrun``, with gloo, equals one process.
"""
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md", "## Class project")
WALK_THROUGH = (ROOT / "docs" / "library.md", "## Using vit_scratch in a class project")
QUICK = ["--epochs", "1", "--threads", "1", "--progress", "off"]
#: The classes of my_pictures/ and the photographs their pictures are cut from.
PHOTOGRAPHS = {"cat": "chelsea", "cup": "coffee", "rocket": "rocket"}
CLASSES = list(PHOTOGRAPHS)
DEIT_FILE = "deit_tiny_patch16_224.safetensors"


def section_blocks(page: tuple[Path, str]) -> list[tuple[str, str]]:
    """(language, code) of every fenced block in the page's section, in order."""
    path, heading = page
    text = path.read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    body = text[start:end if end != -1 else None]
    return re.findall(r"```(python|bash)\n(.*?)```", body, flags=re.S)


def shell_commands(code: str) -> list[list[str]]:
    """The commands of a bash block: comments dropped, ``\\`` continuations joined."""
    joined = re.sub(r"\\\n\s*", " ", code)
    commands = []
    for line in joined.splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            commands.append(shlex.split(line))
    return commands


def make_pictures(root: Path, per_class: int = 15) -> None:
    """Crops of three photographs (:data:`PHOTOGRAPHS`), one subfolder per class: 15 a class
    leave 9 test, 32 train and 4 validation pictures (at least one of each class)."""
    pytest.importorskip("skimage")
    from photo_pictures import make_photo_pictures

    make_photo_pictures(root, "photos", counts={p: per_class for p in PHOTOGRAPHS.values()})
    for name, photo in PHOTOGRAPHS.items():
        (root / photo).rename(root / name)


def make_timm_file(path: Path) -> None:
    """What timm's ``model.safetensors`` for DeiT-tiny holds: a plain state_dict with timm's
    keys (ours), 1000 classes at 224 pixels, no metadata; random weights."""
    import torch
    from safetensors.torch import save_file

    import vit_scratch

    torch.manual_seed(0)
    save_file(vit_scratch.create_model("deit_tiny_patch16_224").state_dict(), str(path))


def run_command(argv: list[str], log: list) -> None:
    """One command of a bash block, run as the module docstring says."""
    from vit_scratch import evaluate, predict, train

    commands = {"vit_scratch.train": train.main, "vit_scratch.evaluate": evaluate.main,
                "vit_scratch.predict": predict.main}
    if argv[:2] == ["python", "-m"] and argv[2] in commands:
        extra = QUICK if argv[2] == "vit_scratch.train" else []
        log.append((argv, commands[argv[2]](argv[3:] + extra)))
    elif argv[0] == "torchrun":
        from torch.distributed.run import get_args_parser

        from vit_scratch.train import main

        launch = get_args_parser().parse_args(argv[1:])
        assert launch.module and launch.training_script == "vit_scratch.train", argv
        nodes = int(launch.nnodes.split(":")[-1])
        trainer_argv = launch.training_script_args + QUICK
        check_trainer_argv(trainer_argv, processes=nodes * int(launch.nproc_per_node))
        if launch.standalone:  # this machine: what each process runs, as one process
            log.append((argv, main(trainer_argv)))
        else:
            log.append((argv, "checked"))
    else:
        pytest.fail(f"the walk-through runs {argv[:3]}; teach this test how to run it")


def check_trainer_argv(argv: list[str], processes: int) -> None:
    """The trainer's own check of its arguments, as each of ``processes`` would run it."""
    from vit_scratch.distributed import World
    from vit_scratch.train import check_settings, settings_from_args

    settings, _, _ = settings_from_args(argv)
    check_settings(settings, world=World(size=processes, launched=True))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """The README's walk-through, run once in a fresh folder: (folder, [(argv, result)])."""
    root = tmp_path_factory.mktemp("project")
    make_pictures(root / "my_pictures")
    from PIL import Image

    from photo_pictures import crop, photograph

    rng = np.random.default_rng(1)
    for name, source in (("new_cat.jpg", "chelsea"), ("new_dog.png", "astronaut")):
        Image.fromarray(crop(photograph(source), rng)).save(root / name)
    make_timm_file(root / DEIT_FILE)
    log: list = []
    namespace: dict = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        for i, (kind, code) in enumerate(section_blocks(README)):
            if kind == "python":
                exec(compile(code, f"README.md: class-project block {i}", "exec"), namespace)
            else:
                for argv in shell_commands(code):
                    run_command(argv, log)
    return root, log, namespace


def results(log, program: str) -> list:
    return [result for argv, result in log if program in argv]


def test_the_walk_through_goes_from_a_folder_to_torchrun(project):
    _, log, namespace = project
    steps = [next(a for a in argv if a.startswith("vit_scratch.") or a == "torchrun")
             for argv, _ in log]
    assert steps == ["vit_scratch.train", "vit_scratch.evaluate", "vit_scratch.predict",
                     "vit_scratch.train", "torchrun", "torchrun"]
    assert tuple(namespace["logits"].shape) == (2, 3)
    assert all(name.startswith("cait_") for name in namespace["vit_scratch"].list_models("cait_*"))


def test_training_selects_an_epoch_by_validation(project, capsys):
    root, log, _ = project
    run = root / "runs" / "pets"
    for name in ("best.safetensors", "checkpoint.safetensors", "metrics.csv", "metrics.json",
                 "curves.png", "settings.json", "trainer_state.pt"):
        assert (run / name).is_file(), name
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["images"] == {"train": 32, "val": 4, "test": 9}
    assert metrics["selected_epoch"] == metrics["best_epoch"] == 1
    assert len((run / "metrics.csv").read_text().strip().splitlines()) == 1 + 1  # header, epoch 1
    assert results(log, "vit_scratch.train")[0]["test_accuracy"] == metrics["test_accuracy"]


def test_evaluate_writes_the_confusion_matrix_and_per_class_numbers(project):
    root, log, _ = project
    (result,) = results(log, "vit_scratch.evaluate")
    matrix = np.array(result["confusion_matrix"])
    assert result["classes"] == CLASSES and matrix.shape == (3, 3)
    assert matrix.sum() == result["images"] == 9 and matrix.sum(1).tolist() == [3, 3, 3]
    assert result["accuracy"] == pytest.approx(np.trace(matrix) / 9)
    assert result["checkpoint"].endswith("best.safetensors")
    for row in result["per_class"]:
        assert 0 <= row["precision"] <= 1 and 0 <= row["recall"] <= 1 and row["support"] == 3
    for name in ("confusion_matrix.png", "confusion_matrix.csv", "per_class.csv",
                 "evaluation.json"):
        assert (root / "runs" / "pets" / "evaluation" / name).is_file(), name


def test_predict_names_classes_and_saves_attention(project):
    root, log, _ = project
    (rows,) = results(log, "vit_scratch.predict")
    assert [row["picture"] for row in rows] == ["new_cat.jpg", "new_dog.png"]
    for row in rows:
        classes, probs = zip(*row["top"])
        assert sorted(classes) == CLASSES and sum(probs) == pytest.approx(1, abs=1e-5)
        assert list(probs) == sorted(probs, reverse=True)
        assert (root / row["attention"]).is_file()
        assert Path(row["attention"]).parent == Path("runs/pets/predictions")
    assert (root / "runs" / "pets" / "predictions" / "predictions.csv").is_file()


def test_fine_tuning_starts_from_the_timm_file(project):
    """One epoch at lr 1e-4 moves no weight by more than a few steps of 1e-4: the run started
    from the file (a fresh initialisation differs by ~0.1), with a new 3-class head and the
    position embedding resized to the 7 × 7 grid."""
    from safetensors.torch import load_file

    root, _, _ = project
    start = load_file(str(root / DEIT_FILE))
    tuned = load_file(str(root / "runs" / "pets_deit" / "best.safetensors"))
    assert start["head.weight"].shape == (1000, 192) and tuned["head.weight"].shape == (3, 192)
    assert start["pos_embed"].shape == (1, 197, 192) and tuned["pos_embed"].shape == (1, 50, 192)
    for key in ("patch_embed.proj.weight", "blocks.0.attn.qkv.weight", "blocks.11.mlp.fc2.weight"):
        assert (tuned[key] - start[key]).abs().max() < 2e-3, key


def test_torchrun_lines(project):
    root, log, _ = project
    single, several = results(log, "torchrun")
    metrics = json.loads((root / "runs" / "pets_ddp" / "metrics.json").read_text())
    assert single["test_accuracy"] == metrics["test_accuracy"]
    assert metrics["images"] == {"train": 32, "val": 4, "test": 9}
    assert several == "checked" and not (root / "runs" / "pets_big").exists()


@pytest.mark.parametrize("processes, refused", [(2, False), (3, True)])
def test_the_torchrun_check_sees_the_processes(project, processes, refused, monkeypatch):
    """The check the torchrun lines go through refuses a batch the processes cannot share."""
    root, _, _ = project
    monkeypatch.chdir(root)
    argv = ["--data", "my_pictures", "--batch-size", "16", "--out", "runs/unused"]
    if refused:
        with pytest.raises(ValueError, match="not divisible by the 3 processes"):
            check_trainer_argv(argv, processes)
    else:
        check_trainer_argv(argv, processes)


def test_library_walk_through_runs_on_the_readme_run(project, monkeypatch):
    """docs/library.md's class-project section, in the folder the README's commands left."""
    root, _, _ = project
    blocks = section_blocks(WALK_THROUGH)
    assert blocks and {kind for kind, _ in blocks} == {"python"}
    monkeypatch.chdir(root)
    namespace: dict = {}
    for i, (_, code) in enumerate(blocks):
        exec(compile(code, f"docs/library.md: class-project block {i}", "exec"), namespace)
    assert tuple(namespace["logits"].shape) == (2, 3)
    assert tuple(namespace["probs"].shape) == (1, 3)
    assert np.isclose(float(namespace["probs"].sum()), 1.0, atol=1e-5)
    assert namespace["model"].class_names == CLASSES
    assert namespace["rollout"].shape == (1, 4, 4)
    assert [tuple(f.shape[-2:]) for f in namespace["scales"]] == [(8, 8), (4, 4), (2, 2), (1, 1)]
    assert namespace["keys"][0].shape[-2:] == (8, 8)
    assert namespace["class_rows"][0].shape == (1, 4, 8, 8)


def test_the_training_command_learns_a_small_folder(tmp_path, monkeypatch, capsys):
    """Acceptance: the walk-through's training command, as written -- all its epochs -- on a
    folder like a student's (``tests/digit_pictures.py``: 4 classes × 90 pictures of 32-48
    pixels, digits in random colours on random backgrounds, mixed formats) reaches at least 80%
    test accuracy, and prints the linear baseline and chance beside it.  (Over three seeds, with
    the other recipes: benchmarks/bench_small_folder.py.)"""
    from digit_pictures import make_digit_pictures
    from vit_scratch import train

    argv = next(argv for kind, code in section_blocks(README) if kind == "bash"
                for argv in shell_commands(code) if argv[:3] == ["python", "-m",
                                                                  "vit_scratch.train"])
    make_digit_pictures(tmp_path / "my_pictures")
    monkeypatch.chdir(tmp_path)
    result = train.main(argv[3:] + ["--progress", "off"])
    out = capsys.readouterr().out
    assert result["images"] == {"train": 259, "val": 29, "test": 72}
    assert result["test_accuracy"] >= 0.80, result["test_accuracy"]
    baseline = result["linear_baseline"]
    assert f"linear baseline (logistic regression on the pixels): validation " \
           f"{baseline['val_accuracy']:.4f}, test {baseline['test_accuracy']:.4f}" in out
    assert f"test accuracy {result['test_accuracy']:.4f}; linear baseline " \
           f"{baseline['test_accuracy']:.4f}, chance {result['chance']:.4f}" in out
    assert result["chance"] == 65 / 259  # the most common class's share of the training split
