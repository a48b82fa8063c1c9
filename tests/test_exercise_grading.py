"""The hidden tests and the grader, proved: the reference solutions score full marks, the stubs
score zero without a harness error, every mutant (one classic mistake each) loses points and is
told which mistake it made, and hostile submissions (hang, exit, crash, output flood, a call to
the library's reference) get zero for that exercise while the rest is graded as usual.

Everything is graded in ONE grader process (``python -m exercises.grade --batch``), which
imports PyTorch once and forks a child per exercise. Skipped in a student copy (no hidden tests).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
SOLUTIONS = EXERCISES / "solutions"
if not (EXERCISES / "hidden").is_dir() or not SOLUTIONS.is_dir():
    pytest.skip("a student copy has no hidden tests and no solutions", allow_module_level=True)

from exercises.hidden.hostile import HOSTILE, SHORT_LIMIT, hostile_source  # noqa: E402
from exercises.hidden.mutants import MUTANTS  # noqa: E402

ALL = ["1.1", "1.2", "1.3", "1.4", "2.1", "2.2", "2.3", "2.4", "2.5", "3.1", "3.2", "3.3", "3.4",
       "4.1", "4.2", "5.1", "5.2", "5.3", "6.1", "6.2", "7.1", "7.2", "7.3", "8.1", "8.2"]
MODULE_EXERCISES = {"ex01_patch_embedding": ["1.1", "1.2", "1.3", "1.4"],
                    "ex02_self_attention": ["2.1", "2.2", "2.3", "2.4", "2.5"],
                    "ex03_vision_transformer": ["3.1", "3.2", "3.3", "3.4"],
                    "ex04_layerscale": ["4.1", "4.2"], "ex05_class_attention": ["5.1", "5.2", "5.3"],
                    "ex06_factorized_attention": ["6.1", "6.2"],
                    "ex07_conv_position_encoding": ["7.1", "7.2", "7.3"], "ex08_coscale": ["8.1", "8.2"]}

@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Grade everything in one grader run; returns {job name: report}."""
    tmp = tmp_path_factory.mktemp("grading")
    jobs, names = [], []
    jobs.append({"submission": str(SOLUTIONS), "exercises": None})
    names.append("solutions")
    jobs.append({"submission": str(EXERCISES), "exercises": None})
    names.append("stubs")
    for i, mutant in enumerate(MUTANTS):
        jobs.append({"submission": str(mutant.write(tmp / f"mutant{i}")), "exercises": [mutant.exercise]})
        names.append(f"mutant: {mutant.name}")
    for i, (name, (module, code, _)) in enumerate(HOSTILE.items()):
        folder = tmp / f"hostile{i}"
        folder.mkdir()
        (folder / f"{module}.py").write_text(hostile_source(module, code))
        jobs.append({"submission": str(folder), "exercises": MODULE_EXERCISES[module],
                     "time_limit": SHORT_LIMIT.get(name)})
        names.append(f"hostile: {name}")
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "exercises.grade", "--batch", str(tmp / "jobs.json"),
                             "--json", str(tmp / "report.json")], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    reports = json.loads((tmp / "report.json").read_text())
    return dict(zip(names, reports))


def by_id(report):
    return {ex["id"]: ex for ex in report["exercises"]}


def test_the_reference_solutions_score_full_marks(graded):
    report = graded["solutions"]
    assert [ex["id"] for ex in report["exercises"]] == ALL
    wrong = {ex["id"]: ex["feedback"] for ex in report["exercises"] if ex["score"] != ex["max_score"]}
    assert not wrong
    assert report["score"] == report["max_score"] == 249
    assert all(ex["status"] == "graded" and ex["feedback"] == "all checks passed" for ex in report["exercises"])


def test_the_stubs_score_zero_without_a_harness_error(graded):
    report = graded["stubs"]
    assert report["score"] == 0 and report["max_score"] == 249
    for ex in report["exercises"]:
        assert ex["status"] == "not done", ex
        assert "not done yet: raises NotImplementedError('Exercise " in ex["feedback"]


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.exercise} {m.name}")
def test_every_mutant_loses_points_and_hears_why(graded, mutant):
    ex = graded[f"mutant: {mutant.name}"]["exercises"][0]
    assert ex["id"] == mutant.exercise and ex["status"] == "graded", ex
    assert ex["score"] < ex["max_score"], f"{mutant.name} scored full marks"
    assert mutant.expect in ex["feedback"], ex["feedback"]


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_submission_gets_zero_there_and_the_rest_is_graded(graded, case):
    module, _, zeroed = HOSTILE[case]
    exercises = by_id(graded[f"hostile: {case}"])
    assert sorted(exercises) == MODULE_EXERCISES[module]
    for ex_id, ex in exercises.items():
        if ex_id in zeroed:
            status, phrase = zeroed[ex_id]
            assert ex["score"] == 0 and ex["status"] == status, ex
            assert phrase in ex["feedback"], ex["feedback"]
        else:
            assert ex["score"] == ex["max_score"], (ex_id, ex["feedback"])


def test_the_loop_check_counts_python_steps_not_time():
    """A loop over tokens is seen at any machine speed: counts are exact and repeatable."""
    import numpy as np

    from exercises.harness import python_steps

    folder = Path(__file__).parent          # python_steps counts code in files under this folder

    def looped(x):
        return np.stack([row * 2 for row in x])

    def vectorized(x):
        return x * 2

    small, large = np.zeros((3, 4)), np.zeros((19, 4))
    assert python_steps(lambda: vectorized(small), folder) == python_steps(lambda: vectorized(large), folder)
    extra = python_steps(lambda: looped(large), folder) - python_steps(lambda: looped(small), folder)
    assert extra >= 2 * 16
    assert python_steps(lambda: looped(large), folder) == python_steps(lambda: looped(large), folder)


def test_the_command_line_grader(tmp_path):
    """The documented command: a table on stdout, the JSON report, exit status 0."""
    submission = tmp_path / "exercises"
    submission.mkdir()
    shutil.copy(SOLUTIONS / "ex04_layerscale.py", submission)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "exercises.grade", "--submission", str(submission),
                             "--json", str(tmp_path / "report.json"), "04", "5.1"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "4.2 LayerScaleBlock" in result.stdout and "total" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report) >= {"score", "max_score", "exercises"}
    assert [e["name"] for e in report["exercises"]] == ["4.1 layerscale_init_value", "4.2 LayerScaleBlock",
                                                        "5.1 class_attention"]
    assert all(set(e) >= {"name", "score", "max_score", "feedback"} for e in report["exercises"])
    assert report["score"] == 17 and report["max_score"] == 29
    assert "ex05_class_attention.py is missing" in report["exercises"][2]["feedback"]
