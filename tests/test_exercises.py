"""The exercises: the fixed index, the stubs, the visible checks, the hidden tests' verdicts
(solutions full marks, stubs zero, every mutant loses points and hears why, bad submissions get
a clear zero), the loop count, and the release.

The grader runs ONCE for the whole session (``exercises/grader/fixtures/proof.py``): this file
and ``test_grader_security.py`` (the attacks) read the same report. The tests that need the
solutions or the hidden tests are skipped in a student copy (which has neither).
"""
from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exercises import check as check_cli
from exercises.grader.release import BEGIN, END, ReleaseError, make_stub, release, repository_files, solution_regions
from exercises.visible_checks import CHECKS, run_check

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
SOLUTIONS = EXERCISES / "solutions"
# In a student copy there are no solutions, and exercises/ holds the learner's work in progress:
# the tests of the stubs and of the release only run in the instructors' repository.
needs_solutions = pytest.mark.skipif(not SOLUTIONS.is_dir(), reason="a student copy has no solutions")
needs_hidden = pytest.mark.skipif(not (EXERCISES / "grader" / "hidden" / "__init__.py").is_file(),
                                  reason="a student copy has no hidden tests")


def _sandbox_problem():
    from exercises.grader.bubblewrap import detect

    return detect()["problem"]


needs_sandbox = pytest.mark.skipif(_sandbox_problem() is not None, reason=f"no sandbox here: {_sandbox_problem()}")

# The fixed exercise index (the notebooks link these names).
INDEX = {
    "ex01_patch_embedding": {"1.1": ["patchify_reshape"], "1.2": ["unpatchify"],
                             "1.3": ["conv_weight_to_hwc_linear"], "1.4": ["pos_embed_similarity"]},
    "ex02_self_attention": {"2.1": ["softmax"], "2.2": ["scaled_dot_product_attention"], "2.3": ["padding_mask"],
                            "2.4": ["split_heads", "merge_heads"], "2.5": ["attention_backward"]},
    "ex03_vision_transformer": {"3.1": ["vit_num_params"], "3.2": ["block_forward"],
                                "3.3": ["attention_rollout"], "3.4": ["Block"]},
    "ex04_layerscale": {"4.1": ["layerscale_init_value"], "4.2": ["LayerScaleBlock"]},
    "ex05_class_attention": {"5.1": ["class_attention"], "5.2": ["class_attention"],
                             "5.3": ["TalkingHeadAttention"]},
    "ex06_factorized_attention": {"6.1": ["factorized_attention"],
                                  "6.2": ["factorized_attention_flops", "crossover_num_tokens"]},
    "ex07_conv_position_encoding": {"7.1": ["clipped_relative_indices"], "7.2": ["depthwise_conv2d"],
                                    "7.3": ["conv_rel_pos_enc"]},
    "ex08_coscale": {"8.1": ["bilinear_resize"], "8.2": ["interpolate_tokens"]},
    "ex10_backprop": {"10.1": ["gelu_tanh_backward"], "10.2": ["talking_heads_backward"],
                      "10.3": ["class_attention_backward"], "10.4": ["conv_attention_backward"]},
    "ex11_distillation": {"11.1": ["hard_distillation_heads"],
                          "11.2": ["drop_path_residual", "drop_path_residual_backward"]},
}
FULL_MARKS = 315
ALL_IDS = [ex_id for entries in INDEX.values() for ex_id in entries]


def stub_module(name):
    return __import__(f"exercises.{name}", fromlist=["_"])


def test_the_index_is_complete():
    assert len(ALL_IDS) == 31 and sorted(CHECKS) == sorted(ALL_IDS)
    for module, entries in INDEX.items():
        mod = stub_module(module)
        for ex_id, names in entries.items():
            for name in names:
                obj = getattr(mod, name, None)
                assert obj is not None, f"{module}.{name} (Exercise {ex_id}) is missing"
                assert f"Exercise {ex_id}" in inspect.getsource(mod), f"no docstring names Exercise {ex_id}"


@needs_solutions
@pytest.mark.parametrize("module", sorted(INDEX))
def test_every_stub_raises_not_implemented(module):
    mod = stub_module(module)
    names = {n for names in INDEX[module].values() for n in names}
    for name in names:
        obj = getattr(mod, name)
        with pytest.raises(NotImplementedError, match=r"Exercise \d+\.\d"):
            if inspect.isclass(obj):
                obj(8, 2)
            else:
                required = [p for p in inspect.signature(obj).parameters.values()
                            if p.default is inspect.Parameter.empty]
                obj(*[None] * len(required))


@needs_solutions
@pytest.mark.parametrize("ex_id", ALL_IDS)
def test_visible_checks_say_not_done_on_the_stubs(ex_id):
    out = run_check(ex_id, stub_module(check_cli.TOPICS[CHECKS[ex_id].notebook][0]))
    assert out.status == "not done", out


@needs_solutions
def test_check_command_output_is_short_and_friendly(capsys):
    assert check_cli.main(["02"]) == 0                      # nothing wrong yet: all not done
    text = capsys.readouterr().out
    assert "2.3 padding_mask" in text and "not done yet" in text and len(text.splitlines()) < 15


# ---- against the reference solutions (instructors' repository only) ------------------------------

@needs_solutions
@pytest.mark.parametrize("module", sorted(INDEX))
def test_stubs_are_generated_from_the_solutions(module):
    master = (SOLUTIONS / f"{module}.py").read_text()
    assert (EXERCISES / f"{module}.py").read_text() == make_stub(master), (
        f"exercises/{module}.py is out of date: regenerate it with exercises.grader.release.make_stub")
    regions = solution_regions(master)
    ids = set()
    tree = ast.parse(master)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            doc = ast.get_docstring(node) or ""
            ids.update(i for i in INDEX[module] if f"Exercise {i}" in doc)
    assert ids == set(INDEX[module]) and len(regions) >= len({n for v in INDEX[module].values() for n in v})


@needs_solutions
@pytest.mark.parametrize("ex_id", ALL_IDS)
def test_visible_checks_pass_on_the_solutions(ex_id):
    module = __import__(f"exercises.solutions.{check_cli.TOPICS[CHECKS[ex_id].notebook][0]}", fromlist=["_"])
    out = run_check(ex_id, module)
    assert out.status == "ok", out


def _mutant_module(name):
    import types

    from exercises.grader.fixtures.mutants import MUTANTS

    mutant = next(m for m in MUTANTS if m.name == name)
    module = types.ModuleType(mutant.module)
    module.__file__ = str(EXERCISES / f"{mutant.module}.py")
    exec(compile(mutant.source(), module.__file__, "exec"), module.__dict__)
    return module


@needs_hidden
@needs_solutions
def test_visible_checks_name_what_is_wrong():
    """A wrong answer gets one short line (what differs, where) and a hint, never an array dump."""
    out = run_check("2.2", _mutant_module("attention: scale after the softmax"))
    assert out.status == "wrong" and "\n" not in out.message and len(out.message) < 200
    assert "(expected 2, got 0.4)" in out.message
    assert "√d" in out.hint


# A slip that gives the right shape and the wrong numbers: each one's visible check says WRONG (the
# checks use several heads, head groups and non-square grids), not ok.
LAYOUT_SLIPS = [
    "heads split in the wrong order (d h)", "merge_heads in (d h) order", "attention: scaled by √d_v instead of √d_k",
    "rollout renormalised over the columns", "Block: heads merged without the transpose",
    "class attention: heads split (d h)", "class attention: scaled by 1/√C instead of 1/√d",
    "talking heads: the softmax over the queries", "CRPE: the image of v channel-major (d h)",
    "CRPE: the window groups in the wrong order", "bilinear: no half-pixel centres",
    "bilinear: align_corners=True done the align_corners=False way", "interpolate tokens: reshape without the transpose",
    "interpolate tokens: align_corners=True", "talking heads backward: the head mixes undone with W instead of Wᵀ",
    "conv-attention backward: the input's gradient with the kernel not rotated",
]


@needs_hidden
@needs_solutions
@pytest.mark.parametrize("name", LAYOUT_SLIPS)
def test_a_visible_check_reports_a_layout_slip_wrong(name):
    from exercises.grader.fixtures.mutants import MUTANTS

    mutant = next(m for m in MUTANTS if m.name == name)
    out = run_check(mutant.exercise, _mutant_module(name))
    assert out.status == "wrong", out


@needs_hidden
@needs_solutions
def test_a_recognised_mistake_is_named_and_no_other_hint_is_given():
    """Class attention scaled after the softmax is told so -- not the generic hint about where
    the query comes from, which names a different mistake."""
    out = run_check("5.1", _mutant_module("class attention: scale after the softmax"))
    assert out.status == "wrong" and "before the softmax" in out.message
    assert out.hint == ""


@needs_solutions
def test_release_writes_a_student_copy_without_solutions(tmp_path):
    out = tmp_path / "student"
    summary = release(out)
    for left_out in ("solutions", "grader/hidden", "grader/fixtures"):
        assert not (out / "exercises" / left_out).exists(), left_out
    for module in INDEX:                                     # the exercise files are the stubs
        assert (out / "exercises" / f"{module}.py").read_text() == (EXERCISES / f"{module}.py").read_text()
    assert (out / "vit_scratch" / "__init__.py").read_bytes() == (ROOT / "vit_scratch" / "__init__.py").read_bytes()
    assert (out / "README.md").read_bytes() == (ROOT / "README.md").read_bytes()
    assert summary["files"] > 40

    # No solution code: no region markers anywhere, and no line of any solution region (code lines
    # of 25 characters or more, comments removed) in any Python file of the copy outside the
    # library (vit_scratch/ is the course's library: it holds its own versions of several
    # exercises by design, and shares boilerplate such as `self.proj = nn.Linear(dim, dim)`).
    solution_lines = set()
    for master in SOLUTIONS.glob("ex*.py"):
        for region in solution_regions(master.read_text()):
            for line in region.splitlines():
                code = line.split("#")[0].strip()
                if len(code) >= 25:
                    solution_lines.add(code)
    assert len(solution_lines) > 100
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".py", ".md", ".txt", ".toml", ".cfg"):
            text = path.read_text()
            assert not any(line.strip() in (BEGIN, END) for line in text.splitlines()), path
            assert "HIDDEN TESTS" + " -- instructors only" not in text, path
            if path.suffix == ".py" and "vit_scratch" not in path.relative_to(out).parts:
                code_lines = {line.split("#")[0].strip() for line in text.splitlines()}
                leaked = solution_lines & code_lines
                assert not leaked, f"{path.relative_to(out)} contains solution code: {sorted(leaked)[:2]}"

    # In the copy, grading says where the hidden tests went; checking works and finds stubs.
    env_path = {"PYTHONPATH": str(out)}
    graded = subprocess.run([sys.executable, "-m", "exercises.grade"], cwd=out, capture_output=True, text=True,
                            env={**_env(), **env_path})
    assert graded.returncode == 2 and "student copy" in graded.stderr
    checked = subprocess.run([sys.executable, "-m", "exercises.check", "01"], cwd=out, capture_output=True,
                             text=True, env={**_env(), **env_path})
    assert checked.returncode == 0 and "0 of 4 ok, 4 not done yet" in checked.stdout, checked.stdout + checked.stderr


@needs_solutions
def test_release_refuses_a_non_empty_folder_and_a_folder_inside_the_repository(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "file").write_text("mine")
    with pytest.raises(ReleaseError, match="not empty"):
        release(tmp_path / "x")
    with pytest.raises(ReleaseError, match="outside the repository"):
        release(ROOT / "student_copy")


def test_make_stub_replaces_regions_with_the_exercise_number():
    source = '''
def f(x):
    """Exercise 9.1 -- something."""
    y = 1
    BEGIN
    return x + y
    END


class G:
    """Exercise 9.2 -- a class."""

    def forward(self, x):
        BEGIN
        return x
        END
'''.replace("BEGIN", BEGIN).replace("END", END)
    stub = make_stub(source)
    assert "return x + y" not in stub and "return x\n" not in stub and BEGIN not in stub
    assert 'raise NotImplementedError("Exercise 9.1: f")' in stub
    assert 'raise NotImplementedError("Exercise 9.2: G.forward")' in stub
    assert "    y = 1\n    # TODO Exercise 9.1: your code here" in stub
    assert make_stub(stub) == stub


def _env():
    import os

    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


# ---- planted leaks: the release refuses, naming the file -----------------------------------------

def _repo_copy(tmp_path):
    repo = tmp_path / "repo"
    for rel in repository_files(ROOT):
        dst = repo / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes((ROOT / rel).read_bytes())
    return repo


def _plant_archive(repo):
    import tarfile

    with tarfile.open(repo / "backup.tgz", "w:gz") as tar:
        tar.add(repo / "exercises" / "grader" / "hidden", arcname="exercises/grader/hidden")
    return "backup.tgz holds exercises/grader/hidden/"


def _plant_other_encoding(repo):
    text = (repo / "exercises" / "solutions" / "ex02_self_attention.py").read_text()
    (repo / "notes.txt").write_bytes(text.encode("utf-16"))
    return "notes.txt contains a solution region"


def _plant_stripped_solution(repo):
    text = (repo / "exercises" / "solutions" / "ex06_factorized_attention.py").read_text()
    (repo / "exercises" / "ex06_solved.py").write_text(
        "\n".join(line for line in text.splitlines() if "SOLUTION" not in line))
    return "exercises/ex06_solved.py contains the code of a solution"


@needs_solutions
@pytest.mark.parametrize("plant", [_plant_archive, _plant_other_encoding, _plant_stripped_solution],
                         ids=["archive", "utf-16", "markers stripped"])
def test_release_refuses_a_planted_leak_and_names_the_file(tmp_path, plant):
    repo = _repo_copy(tmp_path)
    expected = plant(repo)
    with pytest.raises(ReleaseError) as err:
        release(tmp_path / "out", root=repo)
    assert expected in str(err.value)


# ---- the grader's verdicts (one grader run, exercises/grader/fixtures/proof.py) -------------------

if (EXERCISES / "grader" / "hidden" / "__init__.py").is_file() and SOLUTIONS.is_dir():
    from exercises.grader.fixtures.mutants import MUTANTS
else:  # a student copy
    MUTANTS = []


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from exercises.grader.fixtures.proof import graded

    result = graded(tmp_path_factory.mktemp("grading"))     # without a sandbox: --trust-submissions
    assert result["returncode"] == 0, result["stdout"][-2000:] + result["stderr"][-3000:]
    return result


def _reports(graded, kind):
    return [(what, rep) for (k, what), rep in zip(graded["names"], graded["reports"]) if k == kind]


@needs_hidden
@needs_solutions
def test_the_reference_solutions_score_full_marks(graded):
    (_, report), = _reports(graded, "solutions")
    assert [ex["id"] for ex in report["exercises"]] == ALL_IDS
    wrong = {ex["id"]: ex["feedback"] for ex in report["exercises"] if ex["score"] != ex["max_score"]}
    assert not wrong
    assert report["score"] == report["max_score"] == FULL_MARKS
    assert all(ex["status"] == "graded" and ex["feedback"] == "all checks passed" for ex in report["exercises"])


@needs_hidden
@needs_solutions
def test_the_stubs_score_zero_without_a_grader_error(graded):
    (_, report), = _reports(graded, "stubs")
    assert report["score"] == 0 and report["max_score"] == FULL_MARKS
    for ex in report["exercises"]:
        assert ex["status"] == "not done", ex
        assert "not done yet: raises NotImplementedError('Exercise " in ex["feedback"]


@needs_hidden
@needs_solutions
@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: f"{m.exercise} {m.name}")
def test_every_mutant_loses_points_and_hears_why(graded, mutant):
    ex = next(rep for what, rep in _reports(graded, "mutant") if what is mutant)["exercises"][0]
    assert ex["id"] == mutant.exercise and ex["status"] == "graded", ex
    assert ex["score"] < ex["max_score"], f"{mutant.name} scored full marks"
    if mutant.part is None:
        assert mutant.expect in ex["feedback"], ex["feedback"]
    else:
        part = next(p for p in ex["parts"] if p["name"] == mutant.part)
        assert part["status"] == "failed" and mutant.expect in part["message"], part


@needs_hidden
@needs_solutions
def test_the_twenty_slips_lose_points_and_the_first_line_of_feedback_names_each(graded):
    """The twenty plausible wrong solutions of ``exercises/grader/fixtures/slips.py``: the first
    thing the learner reads names the slip."""
    from exercises.grader.fixtures.slips import slip_mutants

    mutants = slip_mutants()
    assert len({m.name for m in mutants}) == 20
    reports = {id(what): rep for what, rep in _reports(graded, "mutant")}
    for mutant in mutants:
        (ex,) = reports[id(mutant)]["exercises"]
        first = ex["feedback"].splitlines()[0]
        assert ex["score"] < ex["max_score"] and mutant.expect in first, (mutant.name, ex["feedback"])
        assert "max |got - expected|" not in first


def _near_stub_module(name):
    import types

    from exercises.grader.fixtures.near_stubs import near_stub

    module = types.ModuleType(name)
    module.__file__ = str(EXERCISES / f"{name}.py")
    exec(compile(near_stub((SOLUTIONS / f"{name}.py").read_text()), module.__file__, "exec"), module.__dict__)
    return module


@needs_hidden
@needs_solutions
def test_a_near_stub_looks_busy():
    """What the near-stubs are: functions that raise ValueError on any input; modules with the
    solution's layers (its state_dict keys, its ValueError for a bad configuration) whose forward
    returns its input, with a gradient reaching every parameter."""
    import torch

    mod = _near_stub_module("ex03_vision_transformer")
    with pytest.raises(ValueError):
        mod.block_forward(None, None, 2)
    block, reference = mod.Block(8, 2), stub_module("solutions.ex03_vision_transformer").Block(8, 2)
    assert list(block.state_dict()) == list(reference.state_dict())
    with pytest.raises(ValueError):
        mod.Block(10, 3)
    x = torch.randn(2, 3, 8)
    out = block(x)
    assert torch.equal(out, x)
    out.sum().backward()
    assert all(p.grad is not None and bool((p.grad == x.numel()).all()) for p in block.parameters())


@needs_hidden
@needs_solutions
def test_near_stubs_score_nothing(graded):
    """Error-handling, gradient-flow and state_dict parts count only once the exercise's forward
    part passes: a submission that raises ValueError everywhere and declares its layers scores
    zero, and each such part says what it needs first."""
    (_, report), = _reports(graded, "near-stubs")
    assert [ex["id"] for ex in report["exercises"]] == ALL_IDS
    assert report["score"] == 0 and report["max_score"] == FULL_MARKS, \
        [(ex["id"], p["name"]) for ex in report["exercises"] for p in ex["parts"] if p["points"]]
    gated = [p for ex in report["exercises"] for p in ex["parts"]
             if p["name"].startswith("ValueError") or "gradient" in p["name"] or "state_dict" in p["name"]]
    assert len(gated) >= 20
    assert all(p["status"] == "skipped" and p["message"].startswith("needs '") for p in gated), gated


@needs_hidden
@needs_solutions
def test_a_bad_submission_gets_a_clear_zero_and_grading_goes_on(graded):
    """A folder that does not exist, an empty one, a notebook, a file that does not parse, a
    missing package, a file that is not UTF-8, a symbolic link, too many or too large helper
    files; and the code notebooks 07 and 08 show, pasted as 7.2 and 8.1, does not earn full
    marks (those exercises ask for more)."""
    cases = _reports(graded, "bad")
    names = {name for (name, _), _ in cases}
    assert {"a folder that does not exist", "an empty folder", "a notebook instead of a .py file",
            "a file that does not parse", "a missing package", "a file that is not UTF-8",
            "a symbolic link", "65 helper files (more than 64)", "5 helper files of 1 MiB (more than 4 MiB in all)"} <= names
    for (name, phrase), report in cases:
        (ex,) = report["exercises"]
        assert ex["score"] < ex["max_score"], (name, ex)
        if phrase:
            assert ex["score"] == 0 and ex["status"] == "import error" and phrase in ex["feedback"], (name, ex)


def test_the_loop_check_counts_python_steps_not_time():
    """A loop over tokens is seen at any machine speed: counts are exact and repeatable, and
    only the submission's own code is counted (not NumPy's)."""
    import numpy as np

    from exercises.grader.sandbox.guard import count_steps

    source = "def looped(x):\n    return np.stack([row * 2 for row in x])\n\ndef vectorized(x):\n    return x * 2\n"
    ns = {"np": np}
    exec(compile(source, "/submission/mine.py", "exec"), ns)

    def steps(fn, x):
        return count_steps(lambda: fn(x), learner_dirs=("/submission/",), trusted_dirs=(os.path.dirname(np.__file__), os.path.dirname(__file__)))

    small, large = np.zeros((3, 4)), np.zeros((19, 4))
    assert steps(ns["vectorized"], small) == steps(ns["vectorized"], large) > 0
    assert steps(ns["looped"], large) - steps(ns["looped"], small) >= 2 * 16
    assert steps(ns["looped"], large) == steps(ns["looped"], large)


def _grade_cli(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "exercises.grade", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@needs_hidden
@pytest.mark.parametrize("args, message", [
    (["--time-limit", "0"], "positive number of seconds"),
    (["--time-limit", "-3"], "positive number of seconds"),
    (["--json", "/nonexistent-folder/report.json"], "does not exist"),
    (["--jobs", "0"], "at least 1"),
], ids=["time-limit 0", "negative time-limit", "json into a missing folder", "jobs 0"])
def test_bad_options_are_refused_before_anything_runs(args, message):
    result = _grade_cli(*args, timeout=60)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Hidden tests" not in result.stdout


@needs_hidden
@needs_solutions
@needs_sandbox
def test_the_command_line_grader(tmp_path):
    """The documented command: a table on stdout, the JSON report, exit status 0."""
    submission = tmp_path / "exercises"
    submission.mkdir()
    (submission / "ex04_layerscale.py").write_text((SOLUTIONS / "ex04_layerscale.py").read_text())
    result = _grade_cli("--submission", str(submission), "--json", str(tmp_path / "report.json"), "04", "5.1")
    assert result.returncode == 0, result.stderr
    assert "4.2 LayerScaleBlock" in result.stdout and "total" in result.stdout
    report = json.loads((tmp_path / "report.json").read_text())
    assert set(report) >= {"score", "max_score", "exercises"}
    assert [e["name"] for e in report["exercises"]] == ["4.1 layerscale_init_value", "4.2 LayerScaleBlock",
                                                        "5.1 class_attention"]
    assert all(set(e) >= {"name", "score", "max_score", "feedback"} for e in report["exercises"])
    assert report["score"] == 17 and report["max_score"] == 29
    assert "ex05_class_attention.py is missing" in report["exercises"][2]["feedback"]


@needs_hidden
def test_the_manifest_matches_the_hidden_tests_and_the_grader():
    """The grader refuses to grade when these files differ from the manifest: after editing
    them, record them with ``python -m exercises.grade --update-manifest``."""
    from exercises.grader.integrity import bytecode_problems, manifest_problems

    assert manifest_problems() == [] and bytecode_problems() == []
