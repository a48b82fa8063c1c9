"""The checkpoints the notebooks load (notebooks/weights/) can be remade: each has one recipe in
tools/remake_weights.py, its commands parse with the trainer's own parser, and the settings they
give are the ones the file records in its metadata (written there by the tool that made it)."""
from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

import vit_scratch
from vit_scratch.train import TrainSettings, build_parser, settings_from_args

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = ROOT / "notebooks" / "weights"
FILES = sorted(WEIGHTS.glob("*.safetensors"))


def _load_tool():
    spec = importlib.util.spec_from_file_location("remake_weights", ROOT / "tools" / "remake_weights.py")
    module = sys.modules["remake_weights"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


remake = _load_tool()


def metadata(path: Path) -> dict:
    with safe_open(str(path), "pt") as f:
        return dict(f.metadata() or {})


def recipe_problems(name: str, recorded: dict) -> list[str]:
    """What differs between the recipe of ``name`` and the metadata a file records."""
    problems = []
    for argv in remake.commands(name):
        build_parser().parse_args(argv)  # each command parses (SystemExit otherwise)
    settings = remake.recorded_settings(remake.settings_of(name))
    made_with = json.loads(recorded.get("train_settings", "{}"))
    defaults = remake.recorded_settings(TrainSettings())
    for key in sorted(set(settings) | set(made_with)):
        if key not in made_with and settings.get(key) == defaults.get(key):
            continue  # a setting the trainer gained after the file was made, at its default
        if settings.get(key) != made_with.get(key):
            problems.append(f"{name}: --{key.replace('_', '-')}: the recipe gives "
                            f"{settings.get(key)!r}, the file was made with {made_with.get(key)!r}")
    if json.loads(recorded.get("train_commands", "[]")) != remake.command_lines(name):
        problems.append(f"{name}: the file records other commands than the recipe's")
    return problems


def recorded_config(text: str) -> dict:
    """The model config a file records: JSON, or the Python repr older files hold."""
    try:
        made = json.loads(text)
    except json.JSONDecodeError:
        made = ast.literal_eval(text)
    return {k: tuple(v) if isinstance(v, list) else v for k, v in made.items()}


def test_every_file_has_a_recipe_and_every_recipe_a_file():
    assert {p.stem for p in FILES} == set(remake.RECIPES)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_the_recipe_parses_and_gives_the_settings_the_file_records(path):
    recorded = metadata(path)
    assert not recipe_problems(path.stem, recorded), "\n".join(recipe_problems(path.stem, recorded))
    settings = remake.settings_of(path.stem)
    model = vit_scratch.create_model(settings.model, num_classes=10, **settings.model_kwargs)
    vit_scratch.load_checkpoint(model, path)  # the file loads into the recipe's model, strictly
    config = vit_scratch.get_config(settings.model, num_classes=10, **settings.model_kwargs)
    made = recorded_config(recorded["model_config"])
    fields = {f.name: f.default for f in dataclasses.fields(config)}
    for key, value in dataclasses.asdict(config).items():  # a field gained since: its default
        assert made.get(key, fields[key]) == value, key
    assert 0.9 <= json.loads(recorded["test_accuracy"]) <= 1.0


def test_a_recipe_that_changed_since_the_file_is_found():
    path = WEIGHTS / "cait_clutter.safetensors"
    recorded = metadata(path)
    settings = json.loads(recorded["train_settings"])
    planted = dict(recorded, train_settings=json.dumps({**settings, "epochs": settings["epochs"] + 10}))
    problems = "\n".join(recipe_problems("cait_clutter", planted))
    assert "--epochs: the recipe gives" in problems


def test_the_weights_page_gives_each_files_command():
    page = (WEIGHTS / "README.md").read_text(encoding="utf-8")
    for name in remake.RECIPES:
        assert f"python tools/remake_weights.py {name}" in page, name
        for line in remake.command_lines(name):
            assert " ".join(line.split()) in " ".join(page.replace("\\\n", " ").split()), line


def test_a_finished_run_is_the_settings_the_tool_compares():
    """``--from-run`` copies a run only when its settings.json is the recipe's (parsed as the
    trainer parses the command line)."""
    settings, _, _ = settings_from_args(remake.commands("vit_clutter")[-1])
    assert remake.recorded_settings(settings) == remake.recorded_settings(remake.settings_of("vit_clutter"))
