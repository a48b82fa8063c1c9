"""Every snippet of the class-project sections -- README.md's "Class project" and
docs/library.md's walk-through -- runs, in order, in a fresh folder that holds a tiny
``my_pictures/`` (three classes of small PNGs), so the sections cannot rot.
``python -m vit_scratch.train ...`` lines run in-process through the same ``main(argv)`` the
command calls; the python blocks of one section run in one shared namespace."""
import os
import re
import shlex
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md", "## Class project")
WALK_THROUGH = (ROOT / "docs" / "library.md", "## Using vit_scratch in a class project")


def section_blocks(page: tuple[Path, str] = WALK_THROUGH) -> list[tuple[str, str]]:
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


def make_pictures(root: Path, per_class: int = 6) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for i, name in enumerate(["cat", "dog", "fox"]):
        (root / name).mkdir(parents=True)
        for j in range(per_class):
            pixels = rng.normal(50 + 70 * i, 25, (20, 24, 3)).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / name / f"{j}.png")


def test_section_has_python_and_shell_snippets():
    kinds = [kind for kind, _ in section_blocks()]
    assert kinds.count("python") >= 3 and kinds.count("bash") >= 1


def test_readme_class_project_snippet_runs():
    namespace: dict = {}
    blocks = section_blocks(README)
    assert [kind for kind, _ in blocks] == ["python"]
    for i, (_, code) in enumerate(blocks):
        exec(compile(code, f"README.md: class-project block {i}", "exec"), namespace)
    assert tuple(namespace["logits"].shape) == (2, 3)
    assert all(name.startswith("cait_") for name in namespace["vit_scratch"].list_models("cait_*"))


def test_every_class_project_snippet_runs(tmp_path, monkeypatch, capsys):
    from vit_scratch.train import main

    make_pictures(tmp_path / "my_pictures")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "1"))
    namespace: dict = {}
    for i, (kind, code) in enumerate(section_blocks()):
        if kind == "python":
            exec(compile(code, f"docs/library.md: class-project block {i}", "exec"), namespace)
            continue
        for argv in shell_commands(code):
            if argv[:3] != ["python", "-m", "vit_scratch.train"]:
                pytest.fail(f"docs/library.md runs {argv[:3]}; teach this test how to run it")
            main(argv[3:] + ["--progress", "off"])
    capsys.readouterr()
    # what the section promises
    assert tuple(namespace["logits"].shape) == (2, 3)
    assert tuple(namespace["probs"].shape) == (1, 3)
    assert np.isclose(float(namespace["probs"].sum()), 1.0, atol=1e-5)
    for name in ("metrics.json", "checkpoint.safetensors", "curves.png"):
        assert (tmp_path / "runs" / "pets" / name).is_file()
        assert (tmp_path / "runs" / "pets_finetuned" / name).is_file()
    assert namespace["rollout"].shape == (1, 4, 4)
    assert [tuple(f.shape[-2:]) for f in namespace["scales"]] == [(16, 16), (8, 8), (4, 4), (2, 2)]
    assert namespace["keys"][0].shape[-2:] == (16, 16)
