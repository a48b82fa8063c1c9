"""The exercises as handed out: the fixed index, the stubs, the visible checks, the release.

The tests that need the reference solutions are skipped in a student copy (which has none);
the grading proofs (solutions, stubs, mutants, hostile submissions) are in
``test_exercise_grading.py``.
"""
from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from exercises import check as check_cli
from exercises.checks import CHECKS, run_check
from exercises.release import BEGIN, END, make_stub, release, solution_regions

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
SOLUTIONS = EXERCISES / "solutions"
# In a student copy there are no solutions, and exercises/ holds the learner's work in progress:
# the tests of the stubs and of the release only run in the instructors' repository.
needs_solutions = pytest.mark.skipif(not SOLUTIONS.is_dir(), reason="a student copy has no solutions")

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
}
ALL_IDS = [ex_id for entries in INDEX.values() for ex_id in entries]


def stub_module(name):
    return __import__(f"exercises.{name}", fromlist=["_"])


def test_the_index_is_complete():
    assert len(ALL_IDS) == 25 and sorted(CHECKS) == sorted(ALL_IDS)
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
        with pytest.raises(NotImplementedError, match=r"Exercise \d\.\d"):
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
        f"exercises/{module}.py is out of date: regenerate it with exercises.release.make_stub")
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


@needs_solutions
def test_visible_checks_name_what_is_wrong():
    """A wrong answer gets one short line (what differs, where) and a hint, never an array dump."""
    import types

    from exercises.hidden.mutants import MUTANTS

    mutant = next(m for m in MUTANTS if m.name == "attention: scale after the softmax")
    module = types.ModuleType(mutant.module)
    module.__file__ = str(EXERCISES / f"{mutant.module}.py")
    exec(compile(mutant.source(), module.__file__, "exec"), module.__dict__)
    out = run_check("2.2", module)
    assert out.status == "wrong" and "\n" not in out.message and len(out.message) < 200
    assert "(expected 2, got 0.4)" in out.message
    assert "√d" in out.hint


@needs_solutions
def test_release_writes_a_student_copy_without_solutions(tmp_path):
    out = tmp_path / "student"
    summary = release(out)
    assert not (out / "exercises" / "solutions").exists() and not (out / "exercises" / "hidden").exists()
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
    from exercises.release import ReleaseError

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
