"""The grader against hostile submissions: marks that mean something, as root or not.

The attacks (``exercises/grader/fixtures/hostile.py``), by category: forged scores and reports,
reading the hidden tests, the solutions, the repository's ``.git`` or another student's work,
switching the in-process checks off, writing to the repository or to shared memory, outliving
the grader, signalling it, flooding it. They are graded in the same single grader run as the
rest of the proof (``exercises/grader/fixtures/proof.py``), followed by a correct submission
and the untouched stubs. Each attack must score zero on the exercise it attacks, with the
status and the words its entry names, leak nothing into any report (no hidden test, no
solution, no other submission), and change nothing: the repository, the next submission,
``/dev/shm`` and ``/tmp``, the file the report's path linked to; no process is left. As root,
the attacks marked ``also_as_user`` are graded again by a grader that runs as an ordinary user
(how instructors usually grade).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
if not (EXERCISES / "grader" / "hidden" / "__init__.py").is_file() or not (EXERCISES / "solutions").is_dir():
    pytest.skip("a student copy has no hidden tests and no solutions", allow_module_level=True)

from exercises.grader import bubblewrap  # noqa: E402
from exercises.grader.fixtures.hostile import ALLOWED_HELPERS, ATTACKS, exercises_of  # noqa: E402

NO_SANDBOX = bubblewrap.detect()["problem"]
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
USER_ATTACKS = [a for a in ATTACKS if a.also_as_user]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from exercises.grader.fixtures.proof import graded

    if NO_SANDBOX:
        pytest.skip(f"no sandbox here: {NO_SANDBOX}")
    return graded(tmp_path_factory.mktemp("grading"))


@pytest.fixture(scope="module")
def graded_as_user():
    from exercises.grader.fixtures.proof import graded_as_user

    if NO_SANDBOX:
        pytest.skip(f"no sandbox here: {NO_SANDBOX}")
    result = graded_as_user()
    if "skipped" in result:
        pytest.skip(result["skipped"])
    yield result
    shutil.rmtree(result["home"], ignore_errors=True)


@pytest.fixture(params=["this user", "an ordinary user"])
def run(request):
    """Each grader run: the main one (as whoever runs the tests), and the ordinary user's."""
    return request.getfixturevalue("graded" if request.param == "this user" else "graded_as_user")


def _report(result, attack):
    return next(rep for (kind, what), rep in zip(result["names"], result["reports"]) if what is attack)


def _zeroed(result, attack):
    report = _report(result, attack)
    exercises = {ex["id"]: ex for ex in report["exercises"]}
    assert sorted(exercises) == sorted(exercises_of(attack))
    for ex_id, ex in exercises.items():
        if ex_id in attack.zeroed:
            status, phrase = attack.zeroed[ex_id]
            assert ex["score"] == 0 and ex["status"] == status, ex
            assert phrase in ex["feedback"], ex["feedback"]
        else:                                   # the rest of its module is graded as usual
            assert ex["score"] == ex["max_score"], (ex_id, ex["feedback"])


def test_the_suite_covers_every_category_with_at_least_30_attacks():
    categories = {a.category for a in ATTACKS}
    assert len(ATTACKS) >= 30
    assert {"forged score", "hidden tests read", "other students", "guard off", "repository written", "writes",
            "outlives the grader", "signals the grader", "flood"} <= categories
    assert {"forged score", "hidden tests read", "other students", "repository written", "writes",
            "outlives the grader", "signals the grader"} <= {a.category for a in USER_ATTACKS}


def test_the_grader_survives_the_batch(run):
    """Exit status 0, one report per submission, every score within its maximum."""
    assert run["returncode"] == 0, run["stdout"][-2000:] + run["stderr"][-3000:]
    reports = run["reports"]
    assert reports is not None and len(reports) == len(run["jobs"])
    for report in reports:
        assert report["score"] == sum(e["score"] for e in report["exercises"])
        assert all(0 <= e["score"] <= e["max_score"] for e in report["exercises"])
        assert all(e["status"] != "grader error" for e in report["exercises"]), report


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: f"{a.category}: {a.name}")
def test_an_attack_scores_zero_on_what_it_attacks(graded, attack):
    _zeroed(graded, attack)


@pytest.mark.parametrize("attack", USER_ATTACKS, ids=lambda a: f"{a.category}: {a.name}")
def test_as_an_ordinary_user_an_attack_scores_zero_too(graded_as_user, attack):
    _zeroed(graded_as_user, attack)


def test_the_allowed_library_helpers_are_not_an_attack(graded):
    report = _report(graded, ALLOWED_HELPERS)
    assert report["score"] == report["max_score"], report


def test_a_correct_submission_after_the_attacks_scores_full_marks_and_the_stubs_zero(run):
    kinds = [kind for kind, _ in run["names"]]
    solutions = run["reports"][kinds.index("solutions")]
    stubs = run["reports"][kinds.index("stubs")]
    assert kinds.index("solutions") > max(i for i, k in enumerate(kinds) if k == "attack")
    assert solutions["score"] == solutions["max_score"] == 315, \
        [(e["id"], e["feedback"]) for e in solutions["exercises"] if e["score"] < e["max_score"]]
    assert stubs["score"] == 0 and {e["status"] for e in stubs["exercises"]} == {"not done"}


def test_no_report_leaks_a_hidden_test_a_solution_or_another_submission(run):
    """Every report, whatever the attack: no line of a hidden test or of a solution region, not
    the hidden tests' marker, not the secret in the next submission's files; no terminal
    escape or other control character but newlines."""
    from exercises.grader.fixtures.proof import leak_texts

    texts = leak_texts(run["root"])
    assert len(texts) > 200
    kinds = [kind for kind, _ in run["names"]]
    for kind, report in zip(kinds, run["reports"]):
        if kind != "attack":
            continue
        dumped = json.dumps(report, ensure_ascii=False)
        assert run["canary"] not in dumped, report["submission"]
        assert not [t for t in texts if t in dumped], (report["submission"], [t for t in texts if t in dumped][:3])
        feedback = "".join(e["feedback"] + "".join(p["message"] for p in e["parts"]) for e in report["exercises"])
        assert not any(ord(c) < 32 and c != "\n" for c in feedback), report["submission"]
    assert run["canary"] not in run["stdout"] + run["stderr"]


def test_nothing_was_written_and_nothing_outlives_the_grader(run):
    """The repository (exercises/ and vit_scratch/, their bytecode caches included) and the
    next student's files are byte for byte what they were -- but for the bytecode Python itself
    writes for ``exercises/__init__.py`` and ``exercises/grade.py`` when it starts
    ``python -m exercises.grade``, compiled from them; no attack's file is in /dev/shm or /tmp;
    no process of the run is left."""
    from exercises.grader.integrity import bytecode_problems

    before, after = run["before"], run["after"]
    changed = {path for path, digest in set(after["tree"].items()) ^ set(before["tree"].items())}
    started = {p for p in changed if re.fullmatch(r"exercises/__pycache__/(__init__|grade)\.[\w-]+\.pyc", p)}
    assert changed == started and not (set(before["tree"]) - set(after["tree"])), sorted(changed)[:5]
    assert bytecode_problems(Path(run["root"]) / "exercises") == []
    assert after["next"] == before["next"]
    assert after["marks"] == before["marks"] == []
    assert run["leftovers"] == []


def test_the_report_replaces_the_link_at_its_path_and_never_follows_it(run):
    report = Path(run["report_path"])
    assert not report.is_symlink() and report.is_file()
    assert run["victim"] == "a file the grader must not write\n"
    assert report.read_text().lstrip().startswith("[") and '"score": 315' in report.read_text()


@needs_sandbox
def test_the_protections_are_said_in_words(monkeypatch):
    have, lack = bubblewrap.protections()
    assert any("bubblewrap" in line and "namespaces" in line for line in have) and lack == []
    _, lack = bubblewrap.protections(trusted=True)
    assert any("--trust-submissions" in line for line in lack)
    monkeypatch.setattr(bubblewrap, "detect", lambda: {"problem": "bubblewrap (bwrap) is not installed: install it",
                                                        "bwrap": None, "version": "", "disable_userns": False,
                                                        "size": False})
    have, lack = bubblewrap.protections()
    assert lack == ["no sandbox: bubblewrap (bwrap) is not installed: install it"]
    assert not any("bubblewrap" in line and "namespaces" in line for line in have)


def _grade(*args, env=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "exercises.grade", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_help_says_which_protection_is_active():
    result = _grade("--help", timeout=60)
    assert result.returncode == 0 and "--trust-submissions" in result.stdout
    expected = f"no sandbox: {NO_SANDBOX}" if NO_SANDBOX else f"bubblewrap {bubblewrap.detect()['version']}: each exercise"
    assert expected in " ".join(result.stdout.split()), result.stdout


@needs_sandbox
def test_without_bubblewrap_untrusted_submissions_are_refused_and_trusted_ones_graded(tmp_path):
    """No bwrap on the PATH: refused, saying why and what to install; --trust-submissions grades."""
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("cat", "true"):
        os.symlink(shutil.which(tool), bare / tool)
    refused = _grade("--submission", str(EXERCISES / "solutions"), "4.1", env={"PATH": str(bare)})
    assert refused.returncode == 2 and "apt-get install bubblewrap" in refused.stderr, refused.stderr
    assert "Hidden tests" not in refused.stdout
    trusted = _grade("--trust-submissions", "--submission", str(EXERCISES / "solutions"), "4.1",
                     env={"PATH": str(bare)})
    assert trusted.returncode == 0 and "5/5" in trusted.stdout, trusted.stdout + trusted.stderr
    assert "--trust-submissions: no sandbox" in trusted.stderr


def test_a_forged_bad_answer_is_a_protocol_error_and_its_text_never_shown():
    """An answer with the request's nonce but the status "bad" (only the grader's own requests
    could make the server say that) ends the exercise as the child's fault, not the grader's."""
    from exercises.grader.sandbox import wire
    from exercises.grader.session import Child, ChildGone

    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    recv, _ = wire.fd_channel(req_r)

    def forger():
        header, _ = wire.unpack(recv())
        os.write(resp_w, wire.pack({"status": "bad", "message": "\x1b[31ma bug of ours", "nonce": header["nonce"]}))

    thread = threading.Thread(target=forger)
    thread.start()
    child = Child(zygote=None, pid=0, req_fd=req_w, resp_fd=resp_r)
    child.budget = 10.0
    with pytest.raises(ChildGone) as gone:
        child.request({"op": "import", "module": "ex04_layerscale"})
    thread.join()
    assert gone.value.status == "protocol error" and "\x1b" not in gone.value.reason
    for fd in (req_r, req_w, resp_r, resp_w):
        os.close(fd)


def _plant_bytecode(copy):
    import importlib.util
    import marshal

    source = copy / "exercises" / "grader" / "hidden" / "h04_layerscale.py"
    pyc = Path(importlib.util.cache_from_source(str(source)))
    pyc.parent.mkdir(exist_ok=True)
    code = compile("from exercises.grader.judge import exercise\n", str(source), "exec")
    st = source.stat()
    pyc.write_bytes(importlib.util.MAGIC_NUMBER + b"\0" * 4 + int(st.st_mtime).to_bytes(4, "little")
                    + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(code))
    return pyc.relative_to(copy).as_posix() + " does not match"


def _edit_package_init(copy):
    with open(copy / "exercises" / "__init__.py", "a") as fh:
        fh.write("\nimport exercises.grader.judge\n")
    return "exercises/__init__.py changed"


def _unlisted_hidden_file(copy):
    (copy / "exercises" / "grader" / "hidden" / "h99_extra.py").write_text("x = 1\n")
    return "exercises/grader/hidden/h99_extra.py is not in the manifest: delete it"


@pytest.mark.parametrize("plant", [_plant_bytecode, _edit_package_init, _unlisted_hidden_file],
                         ids=["a planted .pyc", "an edited exercises/__init__.py", "an unlisted file in hidden/"])
def test_a_planted_file_stops_grading_before_it_starts_and_is_named(tmp_path, plant):
    copy = tmp_path / "repo"
    shutil.copytree(EXERCISES, copy / "exercises", ignore=shutil.ignore_patterns("__pycache__"))
    expected = plant(copy)
    env = {**os.environ, "PYTHONPATH": str(copy), "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-m", "exercises.grade", "--submission",
                             str(copy / "exercises" / "solutions"), "4.1"], cwd=copy, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert "refusing to grade" in result.stderr and "Hidden tests" not in result.stdout


# ---- absence: what an exercise's sandbox holds (exercises/grader/views.py) ------------------------

@pytest.fixture(scope="module")
def views(tmp_path_factory):
    """The views of the library and the packages, built as a grading run builds them."""
    import exercises.grader.hidden  # noqa: F401 - registers every exercise
    from exercises.grader.judge import REGISTRY
    from exercises.grader.views import Views

    built = Views(tmp_path_factory.mktemp("views"), ROOT / "vit_scratch")
    return {ex_id: built.for_spec(spec) for ex_id, spec in REGISTRY.items()}


def _defs(path: Path) -> dict:
    """{qualified name of each function of a file: its body's first statement, as text}."""
    import ast

    out = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + [child.name])
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[".".join(prefix + [child.name])] = ast.unparse(child.body[0])
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text()), [])
    return out


def test_in_every_view_each_function_of_the_two_rooms_is_absent(views):
    """Whatever an exercise may use, the library's NumPy and PyTorch rooms are in its view only
    as names: every function and method raises "not allowed" -- but in 3.2's view, its four
    allowed layers and the private helpers they call."""
    import re

    allowed_32 = {"linear", "layer_norm", "gelu", "softmax"}
    for ex_id, view in views.items():
        kept = {}
        for room in ("numpy_nn", "torch_nn"):
            for path in sorted((view["library"] / "vit_scratch" / room).glob("*.py")):
                text = path.read_text()
                kept |= {(path.name, name): text for name, first in _defs(path).items() if "_grader_absent" not in first}
        if ex_id != "3.2":
            assert kept == {}, (ex_id, sorted(kept))
            continue
        names = {name for _, name in kept}
        assert allowed_32 <= names and all(name in allowed_32 or name.startswith("_") for name in names), names
        for (_, name), text in kept.items():      # a helper is kept because a kept function calls it
            assert name in allowed_32 or re.search(rf"\b{re.escape(name)}\(", text), name


def test_the_library_functions_kept_whole_are_its_import_machinery(views):
    """Outside the rooms, only the few functions the package runs while it is imported (its
    registries, lazy attributes) stay whole in a view that forbids the library; none computes
    anything an exercise asks for."""
    whole = set()
    for path in sorted((views["2.1"]["library"] / "vit_scratch").rglob("*.py")):
        rel = path.relative_to(views["2.1"]["library"]).with_suffix("").as_posix()
        whole |= {f"{rel}:{name}" for name, first in _defs(path).items() if "_grader_absent" not in first}
    assert 0 < len(whole) <= 8, whole
    words = ("attention", "softmax", "block", "norm", "linear", "gelu", "patch", "interpolate", "conv", "param")
    assert not [w for w in whole if any(word in w.lower() for word in words)], whole


def test_a_view_replaces_forbidden_packages_and_functions_and_picks_its_zygote(views):
    import scipy.special
    import torch

    def overlaid(ex_id):
        return {Path(target).name: Path(source) for source, target in views[ex_id]["overlays"]}

    torch_dir = Path(torch.__file__).parent.name
    assert torch_dir in overlaid("8.1") and "scipy" in overlaid("8.1") and views["8.1"]["kind"] == "numpy"
    assert "einops" in overlaid("2.4") and views["2.4"]["kind"] == "scipy"
    assert {"signal", "ndimage"} <= set(overlaid("7.2")) and views["7.2"]["kind"] == "scipy"
    softmax_file = overlaid("2.1")[Path(scipy.special.softmax.__code__.co_filename).name]
    replaced = {name for name, first in _defs(softmax_file).items() if "_grader_absent" in first}
    assert {"softmax", "log_softmax", "logsumexp"} <= replaced and views["2.1"]["kind"] == "numpy"
    assert torch_dir not in overlaid("3.4") and views["3.4"]["kind"] == "torch"
    assert views["3.2"]["kind"] == "scipy"


def test_an_absent_package_imports_as_placeholders_and_raises_once_called(views, tmp_path):
    """A file that also holds the PyTorch exercises still imports without torch (a class built
    on nn.Module, type hints, a decorator); calling anything of it raises, naming the exercise."""
    stub = next(Path(source) for source, target in views["8.1"]["overlays"] if Path(target).name == "torch")
    (tmp_path / "torch").mkdir()
    shutil.copy(stub / "__init__.py", tmp_path / "torch" / "__init__.py")
    code = """
import _grader_absent
import torch
import torch.nn.functional as F
from torch import nn

class Block(nn.Module):
    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor | None:
        return x

_grader_absent.STRICT = True
try:
    F.interpolate(1, size=2)
except _grader_absent.NotAllowed as err:
    print(err)
try:
    Block()
except _grader_absent.NotAllowed as err:
    print(err)
"""
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{views['8.1']['library']}", "GRADER_EXERCISE": "8.1"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.stdout.splitlines() == ["torch.nn.functional.interpolate is not allowed in exercise 8.1",
                                          "torch.nn.Module is not allowed in exercise 8.1"], result.stderr
