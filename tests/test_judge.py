"""The judge's own side: how it takes a submission, what it prints, how long a submission may
hold it, where its interpreter may live, and its commands' arguments.

* **Collect, then grade** (``exercises/grader/submission.py``): a folder that is a symbolic link,
  that is reached through one (``/proc/self/cwd/...`` among them) or that lies in the grader's
  repository is refused with the reason; a folder swapped for a link between two reads, or a
  file swapped or deleted between its stat and its open, is not followed; an entry that cannot
  be read is a reason for its exercises, never the end of the batch -- as root and as an
  ordinary user.
* **The report**: every text a submission controls passes one sanitiser before it is printed;
  ``--json`` is checked writable before grading starts.
* **Bounds**: a sleeping submission stays within its wall budget; each exercise's captured
  output is gone once it is read, each submission's copy once its report is done.
* **An interpreter anywhere**: a virtual environment under ``/tmp`` grades the reference
  solutions full marks.

The grading runs here are small batches of their own (``exercises/grader/fixtures/proof.py``
grades the attacks, mutants and bad submissions).
"""
from __future__ import annotations

import json
import os
import shutil
import site
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
SOLUTIONS = EXERCISES / "solutions"
if not (EXERCISES / "grader" / "hidden" / "__init__.py").is_file() or not SOLUTIONS.is_dir():
    pytest.skip("a student copy has no hidden tests and no solutions", allow_module_level=True)

from exercises.grader import bubblewrap, submission  # noqa: E402
from exercises.grader.fixtures import as_user  # noqa: E402
from exercises.grader.remote import printable  # noqa: E402
from exercises.grader.submission import collect  # noqa: E402

NO_SANDBOX = bubblewrap.detect()["problem"]
needs_sandbox = pytest.mark.skipif(NO_SANDBOX is not None, reason=f"no sandbox here: {NO_SANDBOX}")
E04 = "ex04_layerscale"
UNSAFE = {"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"}


def _collect(path, tmp_path, name="copy"):
    return collect(str(path), tmp_path / name, repository=ROOT, exercises_dir=EXERCISES)


def _folder(where: Path, files: dict) -> Path:
    where.mkdir(parents=True)
    for name, text in files.items():
        (where / name).write_text(text)
    return where


def _solution(module=E04) -> str:
    return (SOLUTIONS / f"{module}.py").read_text()


def _stub(module=E04) -> str:
    return (EXERCISES / f"{module}.py").read_text()


# ---- collect: the folder ------------------------------------------------------------------------

def test_a_folder_that_is_a_symbolic_link_is_refused_and_nothing_is_copied(tmp_path):
    (tmp_path / "exercises").symlink_to(SOLUTIONS)
    found = _collect(tmp_path / "exercises", tmp_path)
    assert found.refused and "is a symbolic link" in found.refused
    assert found.modules == set() and list((tmp_path / "copy").iterdir()) == []
    assert found.missing(E04) == found.refused


def test_a_folder_reached_through_a_symbolic_link_is_refused(tmp_path, monkeypatch):
    _folder(tmp_path / "real" / "exercises", {f"{E04}.py": _solution()})
    (tmp_path / "via").symlink_to(tmp_path / "real")
    found = _collect(tmp_path / "via" / "exercises", tmp_path)
    assert found.refused and f"passes through a symbolic link ({tmp_path / 'via'})" in found.refused
    monkeypatch.chdir(ROOT)                    # the path a student needs not know: the judge's own cwd
    found = _collect("/proc/self/cwd/exercises/solutions", tmp_path, "copy2")
    assert found.refused and "passes through a symbolic link (/proc/self)" in found.refused
    assert found.modules == set()


def test_a_folder_inside_the_grader_repository_is_refused_but_its_own_exercise_folders(tmp_path):
    for inside in (EXERCISES / "grader" / "hidden", EXERCISES / "grader", ROOT):
        found = _collect(inside, tmp_path, f"copy-{inside.name}")
        assert found.refused and "inside the grader's repository" in found.refused, inside
    private = tmp_path / "judge"
    private.mkdir()
    found = collect(str(private), tmp_path / "copy-private", repository=ROOT, exercises_dir=EXERCISES,
                    private=(private,))
    assert found.refused and "inside the grader's own folder" in found.refused
    solutions = _collect(SOLUTIONS, tmp_path, "copy-solutions")
    assert solutions.refused is None and E04 in solutions.modules
    stubs = _collect(EXERCISES, tmp_path, "copy-exercises")
    assert stubs.refused is None and E04 in stubs.modules and "check" not in stubs.modules   # course files skipped
    assert (tmp_path / "copy-exercises" / f"{E04}.py").read_bytes() == (EXERCISES / f"{E04}.py").read_bytes()


def test_the_folder_swapped_for_a_link_between_two_reads_is_not_followed(tmp_path, monkeypatch):
    """The race of a student with a shell on the grading machine: once the judge has read one
    file, the folder is exchanged with a link into the solutions. The judge goes on reading the
    folder it opened, and only that."""
    folder = _folder(tmp_path / "exercises", {"a_helper.py": "HELPER = 1\n", f"{E04}.py": _stub(),
                                              "ex05_class_attention.py": _stub("ex05_class_attention")})
    swaps = []

    def swap(event, name):
        if event == "read" and not swaps:
            folder.rename(tmp_path / "moved")
            folder.symlink_to(SOLUTIONS)
            swaps.append(name)

    monkeypatch.setattr(submission, "PAUSE", swap)
    found = _collect(folder, tmp_path)
    assert swaps == ["a_helper.py"] and folder.is_symlink()
    assert found.refused is None and found.modules == {"a_helper", E04, "ex05_class_attention"}
    assert (tmp_path / "copy" / f"{E04}.py").read_text() == _stub()
    assert (tmp_path / "copy" / "ex05_class_attention.py").read_text() == _stub("ex05_class_attention")
    assert not (tmp_path / "copy" / "ex01_patch_embedding.py").exists()


def test_a_file_swapped_or_deleted_between_its_stat_and_its_open_is_named(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "exercises", {f"{E04}.py": _stub(), "ex05_class_attention.py": _stub(),
                                              "other.py": _solution()})

    def meddle(event, name):
        if event == "open" and name == f"{E04}.py":
            (folder / "other.py").rename(folder / name)        # another file in its place
        elif event == "open" and name == "ex05_class_attention.py":
            (folder / name).unlink()

    monkeypatch.setattr(submission, "PAUSE", meddle)
    found = _collect(folder, tmp_path)
    assert found.refused is None and found.modules == set()
    assert "changed while the submission was read" in found.notes["ex04_layerscale"]
    assert "vanished while the submission was read" in found.notes["ex05_class_attention"]
    assert list((tmp_path / "copy").iterdir()) == []


def test_entries_that_are_not_regular_files_are_reasons_and_never_raise(tmp_path, monkeypatch):
    folder = _folder(tmp_path / "exercises", {"ex01_patch_embedding.py": _stub("ex01_patch_embedding")})
    os.mkfifo(folder / f"{E04}.py")                                    # opening it would block
    (folder / "ex05_class_attention.py").mkdir()
    (folder / "ex02_self_attention.py").symlink_to("x" * 300)         # a target no filesystem accepts
    os.link(folder / "ex01_patch_embedding.py", tmp_path / "elsewhere.py")
    monkeypatch.chdir(folder)                                         # a socket's path is short
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind("ex06_factorized_attention.py")
        found = _collect(folder, tmp_path)
    assert found.refused is None and found.modules == set()
    assert found.notes == {
        "ex01_patch_embedding": "ex01_patch_embedding.py is a hard link: submit a copy of the file",
        "ex02_self_attention": "ex02_self_attention.py is a symbolic link: submit the file itself",
        "ex04_layerscale": "ex04_layerscale.py is not a regular file",
        "ex05_class_attention": "ex05_class_attention.py is not a regular file",
        "ex06_factorized_attention": "ex06_factorized_attention.py is not a regular file"}


def _open_up(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o700)


@pytest.fixture(scope="module")
def ordinary_user():
    """An ordinary user (:mod:`exercises.grader.fixtures.as_user`), a folder of ``/tmp`` it owns,
    and there a copy of what the grader imports (``exercises/``, ``vit_scratch/``): the
    repository itself may be closed to the user (a clone in a private folder)."""
    why = as_user.unavailable()
    if why:
        pytest.skip(why)
    from exercises.grader.release import repository_files

    uid, gid = as_user.ensure_user()
    home = Path(tempfile.mkdtemp(prefix="vit-scratch-judge-user-"))
    stage = Path(tempfile.mkdtemp(prefix="vit-scratch-judge-stage-"))
    try:
        for rel in repository_files(ROOT):
            if rel.startswith(("exercises/", "vit_scratch/")):
                (home / "repo" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, home / "repo" / rel)
        as_user.give(home, uid, gid)
        yield {"uid": uid, "gid": gid, "home": home, "root": home / "repo", "stage": stage}
    finally:
        for folder in (home, stage):
            _open_up(folder)
            shutil.rmtree(folder, ignore_errors=True)


def _run_as(user, argv, folder: Path, timeout: int):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(folder), "PYTHONPATH": str(user["root"]), "OMP_NUM_THREADS": "1",
           "LC_ALL": "C.UTF-8"}
    return subprocess.run(as_user.command(argv, user["uid"], user["gid"], env, user["stage"]), cwd=user["root"],
                          capture_output=True, text=True, timeout=timeout)


def test_as_an_ordinary_user_what_cannot_be_read_is_a_reason_not_a_crash(ordinary_user):
    """An unreadable file, a link into a folder the user cannot read, an unreadable folder:
    each is a reason for that submission, read by a collector running as an ordinary user; a
    folder above a submission that the user may pass through but not list is no obstacle."""
    user = ordinary_user
    home = user["home"] / "collect"
    try:
        subs = home / "subs"
        _folder(subs / "a", {f"{E04}.py": _solution(), "ex01_patch_embedding.py": _stub("ex01_patch_embedding")})
        closed = _folder(home / "closed", {"ex05_class_attention.py": "x = 1\n"})
        (subs / "a" / "ex05_class_attention.py").symlink_to(closed / "ex05_class_attention.py")
        _folder(subs / "b", {f"{E04}.py": _solution()})
        _folder(subs / "pass-only" / "c", {f"{E04}.py": _solution()})
        as_user.give(home, user["uid"], user["gid"])
        os.chmod(subs / "a" / f"{E04}.py", 0)
        os.chmod(closed, 0)
        os.chmod(subs / "b", 0)
        os.chmod(subs / "pass-only", 0o311)
        root = user["root"]
        code = ("import json, sys; from pathlib import Path; from exercises.grader.submission import collect\n"
                "out = {}\n"
                "for name in ('a', 'b', 'pass-only/c'):\n"
                f"    f = collect('{subs}/' + name, Path('{home}') / ('copy-' + name.replace('/', '-')),\n"
                f"                repository=Path('{root}'), exercises_dir=Path('{root / 'exercises'}'))\n"
                "    out[name] = [sorted(f.modules), f.notes, f.refused]\n"
                "print(json.dumps(out))\n")
        result = _run_as(user, [sys.executable, "-c", code], home, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        got = json.loads(result.stdout.splitlines()[-1])
        modules, notes, refused = got["a"]
        assert modules == ["ex01_patch_embedding"] and refused is None
        assert notes == {E04: f"{E04}.py cannot be read (Permission denied)",
                         "ex05_class_attention": "ex05_class_attention.py is a symbolic link: submit the file itself"}
        assert got["b"][2] == f"the submission folder {subs / 'b'} cannot be read ({subs / 'b'}: permission denied)"
        assert got["pass-only/c"] == [[E04], {}, None]
    finally:
        _open_up(home)
        shutil.rmtree(home, ignore_errors=True)


# ---- the printed report ---------------------------------------------------------------------------

def test_the_sanitiser_replaces_every_unsafe_character_but_the_newline():
    text = "a\x1b[1A\rb\x00c\u2028d\u2029e\u202ef\x85g\x9b2Jh\ud800i\ue000j\nk"
    out = printable(text)
    assert out == "a?[1A?b?c?d?e?f?g?2Jh?i?j\nk"
    assert not [c for c in out if c != "\n" and unicodedata.category(c) in UNSAFE]


def test_the_printed_report_passes_every_text_through_the_sanitiser(capsys):
    """A folder named with escape sequences cannot rewrite other lines of the terminal, and a
    line separator in a message cannot make a line that says '4.1 ...: all checks passed'."""
    from exercises.grader.grade import print_report

    fake = "\u20284.1 layerscale_init_value: all checks passed\u2029\x1b[2K\r4.2 LayerScaleBlock 12/12"
    report = {"submission": "/subs/\x1b[1A\x1b[K\rbob 293/293\u2028", "score": 0, "max_score": 17,
              "exercises": [{"name": "4.1 layerscale_init_value", "score": 0, "max_score": 5,
                             "feedback": "worked example: ValueError: no" + fake},
                            {"name": "4.2 LayerScaleBlock", "score": 0, "max_score": 12,
                             "feedback": "first line\nsecond line\x1b]0;title\x07"}]}
    print_report(report)
    out = capsys.readouterr().out
    assert not [c for c in out if c != "\n" and unicodedata.category(c) in UNSAFE], out
    lines = out.split("\n")
    assert lines[0] == "Hidden tests -- submission /subs/?[1A?[K?bob 293/293?"
    assert not [line for line in lines if line.lstrip().startswith(("4.1 layerscale_init_value:", "4.2 LayerScaleBlock 12"))]
    assert "      - first line" in lines and "      - second line?]0;title?" in lines
    assert len(lines) == 9              # head, columns, 4.1 and its line, 4.2 and its two, total, ''


# ---- the commands' arguments ----------------------------------------------------------------------

def _grade(*args, cwd=ROOT, timeout=300, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "exercises.grade", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _batch(tmp_path, entries) -> str:
    path = tmp_path / "batch.json"
    path.write_text(json.dumps(entries))
    return str(path)


@pytest.mark.parametrize("make, message", [
    (lambda t: ["--json", str(t)], "this is a folder: give the path of a file to write"),
    (lambda t: ["--json", "/proc/report.json"], "cannot write in the folder /proc"),
    (lambda t: ["--batch", _batch(t, [{"submission": str(t), "exercises": "2.1"}])],
     'entry 1: "exercises" must be a list of exercise IDs like ["2.1", "2.2"] or null (all), got "2.1"'),
    (lambda t: ["--batch", _batch(t, {"submission": str(t)})], "expected a JSON list"),
    (lambda t: ["--batch", _batch(t, [{"submission": str(t)}, {"folder": str(t)}])], "entry 2: unknown key 'folder'"),
    (lambda t: ["--batch", _batch(t, [{"submission": str(t), "submission_time": -1}])],
     '"submission_time" must be a positive number of seconds, got -1'),
    (lambda t: ["--batch", _batch(t, [{"submission": 3}])], '"submission" must be the path of a folder, got 3'),
    (lambda t: ["--submission-time", "0"], "positive number of seconds"),
], ids=["json is a folder", "json folder not writable", "exercises a string", "batch not a list", "unknown key",
        "negative submission time", "submission not a path", "submission-time 0"])
def test_a_bad_argument_is_one_line_before_anything_is_graded(tmp_path, make, message):
    result = _grade(*make(tmp_path), "4.1", timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert message in last and "Traceback" not in result.stderr, result.stderr
    assert "Hidden tests" not in result.stdout and not list(tmp_path.glob(".*.tmp"))


def test_a_report_path_that_becomes_a_folder_during_grading_keeps_the_report(tmp_path):
    """The file is made ready before grading; if another user makes a folder at its path
    meanwhile, the move fails and the filled file stays where the grader says it is."""
    from exercises.grader.grade import ReportFile

    report = ReportFile(tmp_path / "class.json")
    assert Path(report.tmp).parent == tmp_path and Path(report.tmp).is_file()
    (tmp_path / "class.json").mkdir()
    with pytest.raises(IsADirectoryError):
        report.write([{"score": 5}])
    assert json.loads(Path(report.tmp).read_text()) == [{"score": 5}]


def test_release_into_a_file_is_one_line(tmp_path):
    target = tmp_path / "a file"
    target.write_text("mine\n")
    for out in (target, target / "inside"):
        result = subprocess.run([sys.executable, "-m", "exercises.release", str(out)], cwd=ROOT, capture_output=True,
                                text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith(f"release: OUT_DIR {out} ") and "not a folder" in result.stderr
    assert target.read_text() == "mine\n"


# ---- one small batch, as root and as an ordinary user ---------------------------------------------

SLEEP = "import time\ntime.sleep(3600)\n"
BUDGET = 4.0
SEPARATOR_MESSAGE = "depth\u20284.1 layerscale_init_value: all checks passed\x1b[2J"


def _cases(home: Path, root: Path, ordinary: bool) -> list[tuple[str, dict, dict]]:
    """(name, batch entry, what its report must show) for each submission of the batch graded
    by the grader of the repository ``root``."""
    subs = home / "subs"
    subs.mkdir()
    cases = []

    def case(name, folder, ids, expect, **extra):
        cases.append((name, {"submission": str(folder), "exercises": ids, **extra}, expect))

    (subs / "linked").symlink_to(SOLUTIONS)
    case("a folder that is a link to the solutions", subs / "linked", ["4.1", "4.2"], {"refused": "is a symbolic link"})
    _folder(subs / "real" / "exercises", {f"{E04}.py": _solution()})
    (subs / "via").symlink_to(subs / "real")
    case("a folder reached through a link", subs / "via" / "exercises", ["4.1"],
         {"refused": "passes through a symbolic link"})
    (subs / "alice").mkdir()
    (subs / "alice" / "exercises").symlink_to("/proc/self/cwd/exercises/solutions")
    case("a link through /proc/self/cwd", subs / "alice" / "exercises", ["4.1", "4.2"], {"refused": "is a symbolic link"})
    case("a path through /proc/self/cwd", "/proc/self/cwd/exercises/solutions", ["4.1"],
         {"refused": "passes through a symbolic link (/proc/self)"})
    case("the hidden tests' folder", root / "exercises" / "grader" / "hidden", ["4.1"],
         {"refused": "inside the grader's repository"})
    entries = _folder(subs / "entries", {})
    os.mkfifo(entries / f"{E04}.py")
    (entries / "ex05_class_attention.py").mkdir()
    (entries / "ex02_self_attention.py").symlink_to("x" * 300)
    case("entries that are no files", entries, ["2.1", "4.1", "5.1"],
         {"feedback": {"2.1": "is a symbolic link", "4.1": "is not a regular file", "5.1": "is not a regular file"}})
    escapes = _folder(subs / "\x1b[1A\r\x1b[2K  17/17  everyone\u2028", {f"{E04}.py": _solution()})
    case("a folder named with escape sequences", escapes, ["4.1", "4.2"], {"score": 17})
    raising = _solution() + f"\n\ndef layerscale_init_value(depth):\n    raise ValueError({SEPARATOR_MESSAGE!r})\n"
    case("a message with a line separator", _folder(subs / "separator", {f"{E04}.py": raising}), ["4.1"],
         {"feedback": {"4.1": "depth?4.1 layerscale_init_value: all checks passed?[2J"}})
    sleeper = _folder(subs / "sleeper", {f"{E04}.py": SLEEP + _solution(),
                                         "ex05_class_attention.py": SLEEP + _solution("ex05_class_attention")})
    case("a submission that sleeps in every file", sleeper, ["4.1", "4.2", "5.1", "5.2", "5.3"], {"sleeper": True},
         time_limit=30, submission_time=BUDGET)
    unreadable = _folder(subs / "unreadable", {f"{E04}.py": _solution(), "ex05_class_attention.py": "x = 1\n"})
    case("an unreadable file", unreadable, ["4.1"],
         {"feedback": {"4.1": "ex04_layerscale.py cannot be read (Permission denied)"}} if ordinary else {"score": 5})
    closed = _folder(subs / "closed", {f"{E04}.py": _solution()})
    case("an unreadable folder", closed, ["4.1"], {"refused": "cannot be read"} if ordinary else {"score": 5})
    case("a correct submission, graded last", _folder(subs / "last", {f"{E04}.py": _solution()}), ["4.1", "4.2"],
         {"score": 17})
    return cases


def _close_for_user(home: Path) -> None:
    os.chmod(home / "subs" / "unreadable" / f"{E04}.py", 0)
    os.chmod(home / "subs" / "closed", 0)


def _reopen(home: Path) -> None:
    for path in (home / "subs" / "unreadable" / f"{E04}.py", home / "subs" / "closed"):
        if path.exists():
            os.chmod(path, 0o700)


@pytest.fixture(scope="module", params=["this user", "an ordinary user"])
def batch(request):
    """One grader run over :func:`_cases`; ``result["cases"]`` pairs each with its report."""
    if NO_SANDBOX:
        pytest.skip(f"no sandbox here: {NO_SANDBOX}")
    ordinary = request.param == "an ordinary user"
    user = request.getfixturevalue("ordinary_user") if ordinary else None
    if ordinary:
        why = as_user.no_sandbox(user["uid"], user["gid"])
        if why:
            pytest.skip(why)
    root = user["root"] if ordinary else ROOT
    home = Path(tempfile.mkdtemp(prefix="vit-scratch-judge-batch-"))
    try:
        cases = _cases(home, root, ordinary)
        (home / "batch.json").write_text(json.dumps([entry for _, entry, _ in cases]))
        argv = [sys.executable, "-m", "exercises.grade", "--batch", str(home / "batch.json"), "--json",
                str(home / "report.json")]
        if ordinary:
            as_user.give(home, user["uid"], user["gid"])
            _close_for_user(home)
            result = _run_as(user, argv, home, timeout=1200)
        else:
            result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200,
                                    env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
        _reopen(home)
        report_path = home / "report.json"
        reports = json.loads(report_path.read_text()) if report_path.is_file() else None
        yield {"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr, "ordinary": ordinary,
               "cases": list(zip(cases, reports or [])), "reports": reports, "count": len(cases)}
    finally:
        _reopen(home)
        shutil.rmtree(home, ignore_errors=True)


def test_the_batch_finishes_and_writes_its_report_whatever_the_folders(batch):
    assert batch["returncode"] == 0, batch["stdout"][-2000:] + batch["stderr"][-3000:]
    assert batch["reports"] is not None and len(batch["reports"]) == batch["count"]
    assert all(e["status"] != "grader error" for r in batch["reports"] for e in r["exercises"]), batch["reports"]
    (_, _, expect), last = batch["cases"][-1]
    assert last["score"] == expect["score"] == last["max_score"]


def _by_name(batch, name):
    return next((entry, expect, report) for (n, entry, expect), report in batch["cases"] if n == name)


@pytest.mark.parametrize("name", ["a folder that is a link to the solutions", "a folder reached through a link",
                                  "a link through /proc/self/cwd", "a path through /proc/self/cwd",
                                  "the hidden tests' folder"])
def test_a_folder_that_is_or_passes_through_a_link_scores_zero_with_the_reason(batch, name):
    entry, expect, report = _by_name(batch, name)
    assert report["score"] == 0 and [e["id"] for e in report["exercises"]] == entry["exercises"]
    for ex in report["exercises"]:
        assert ex["status"] == "import error" and expect["refused"] in ex["feedback"], ex
    assert report["submission"] == str(Path(entry["submission"]).absolute())


@pytest.mark.parametrize("name", ["entries that are no files", "a message with a line separator", "an unreadable file",
                                  "an unreadable folder", "a folder named with escape sequences"])
def test_what_cannot_be_read_is_a_reason_for_that_submission_only(batch, name):
    _, expect, report = _by_name(batch, name)
    if "score" in expect:
        assert report["score"] == expect["score"], report
    for ex_id, phrase in expect.get("feedback", {}).items():
        ex = next(e for e in report["exercises"] if e["id"] == ex_id)
        assert ex["score"] == 0 and phrase in ex["feedback"], ex
    if "refused" in expect:
        assert all(expect["refused"] in e["feedback"] for e in report["exercises"]), report


def test_the_printed_batch_and_the_report_carry_no_control_character(batch):
    out = batch["stdout"] + batch["stderr"]
    assert not [c for c in out if c != "\n" and unicodedata.category(c) in UNSAFE], out[-2000:]
    assert "/subs/?[1A??[2K  17/17  everyone?\n" in batch["stdout"]
    for report in batch["reports"]:
        texts = [e["feedback"] for e in report["exercises"]] + [p["message"] for e in report["exercises"] for p in e["parts"]]
        assert not [c for t in texts for c in t if c != "\n" and unicodedata.category(c) in UNSAFE], report
    _, _, escapes = _by_name(batch, "a folder named with escape sequences")
    assert escapes["submission"].endswith("/\x1b[1A\r\x1b[2K  17/17  everyone\u2028")   # the JSON keeps it whole


def test_a_sleeping_submission_stays_within_its_wall_budget(batch):
    """Without the budget: 5 exercises x 30 s at 2 at a time. With it: the first two end when
    the budget does, the others are not started."""
    _, _, report = _by_name(batch, "a submission that sleeps in every file")
    exercises = report["exercises"]
    assert report["score"] == 0 and {e["status"] for e in exercises} == {"over budget"}, exercises
    before = [e for e in exercises if "ran out before this exercise started" in e["feedback"]]
    during = [e for e in exercises if "ran out during this exercise" in e["feedback"]]
    assert len(before) >= 3 and len(before) + len(during) == 5
    assert all(f"wall budget of {BUDGET:g} s" in e["feedback"] for e in exercises)
    assert all(e["seconds"] < 0.5 for e in before)
    assert sum(e["seconds"] for e in during) <= len(during) * (BUDGET + 10), exercises


# ---- in the judge's process: collect first, outputs and copies deleted, the race while grading -----

def test_outputs_are_gone_once_read_and_a_copy_once_its_report_is_done(tmp_path, monkeypatch):
    """Every folder is copied before any exercise runs; no exercise's captured output is on
    disk when the next one starts (the printing submission prints 200 kB in each); a
    submission's copy is deleted once its report is done. A folder swapped for a link into the
    solutions while it is collected is graded as it was: the stub, zero."""
    import exercises.grader.hidden  # noqa: F401 - registers every exercise
    from exercises.grader.grading import Grader, grade_batch
    from exercises.grader.judge import REGISTRY

    printing = _folder(tmp_path / "printing", {f"{E04}.py": "print('x' * 200_000)\n" + _solution()})
    raced = _folder(tmp_path / "raced", {"a_helper.py": "HELPER = 1\n", f"{E04}.py": _stub()})

    def swap(event, name):
        if event == "read" and name == "a_helper.py" and not raced.is_symlink():
            raced.rename(tmp_path / "raced-moved")
            raced.symlink_to(SOLUTIONS)

    monkeypatch.setattr(submission, "PAUSE", swap)
    grader = Grader(tmp_path / "run", trusted=NO_SANDBOX is not None)
    seen = []

    def on_disk():
        import os

        found = []  # (path, size); a copy may be deleted while it is walked (two workers)
        for top, _, names in os.walk(grader.workdir):
            for name in names:
                path = Path(top) / name
                if "views" in path.relative_to(grader.workdir).parts:
                    continue
                try:
                    found.append((path.relative_to(grader.workdir).as_posix(), path.stat().st_size))
                except FileNotFoundError:
                    pass
        return sorted(p for p, _ in found), sum(size for _, size in found)

    def before_each():
        seen.append(on_disk())

    done = []
    try:
        specs = [REGISTRY["4.1"], REGISTRY["4.2"]]
        grader.prepare(specs)
        jobs = [(printing, ["4.1", "4.2"], 30.0, 120.0), (raced, ["4.1", "4.2"], 30.0, 120.0),
                (printing, ["4.1", "4.2"], 30.0, 120.0)]
        reports = grade_batch(grader, REGISTRY, jobs, workers=2, before_each=before_each,
                              on_report=lambda n, r: done.append((n, on_disk()[0])))
    finally:
        grader.close()
    first_names, _ = seen[0]
    assert {f"submission{j}/files/{E04}.py" for j in range(3)} <= set(first_names)     # all collected first
    for names, size in seen:
        assert not [n for n in names if n.endswith(".out")] and size < 100_000, (names, size)
    for n, names in done:
        assert not [name for name in names if name.startswith(f"submission{n}/")], (n, names)
    assert [r["score"] for r in reports] == [17, 0, 17], reports
    assert {e["status"] for e in reports[1]["exercises"]} == {"not done"}
    assert raced.is_symlink()


# ---- an interpreter in a virtual environment under /tmp ---------------------------------------------

@needs_sandbox
def test_an_interpreter_in_a_virtual_environment_under_tmp_grades_the_solutions_full_marks():
    """A fresh virtual environment in a private folder of /tmp, whose site-packages holds this
    interpreter's packages (links to where they are: everything is imported through /tmp). The
    sandbox mounts its private /tmp first, then binds the interpreter's folders: nothing is
    hidden, and the stand-ins for what an exercise may not use replace what the links lead to."""
    private = Path(tempfile.mkdtemp(prefix="vit-scratch-venv-", dir="/tmp"))
    try:
        venv = private / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
        python = venv / "bin" / "python"
        venv_site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
        for packages in dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
                                       *site.getsitepackages()]):
            for name in sorted(os.listdir(packages)):
                if not (venv_site / name).exists():
                    (venv_site / name).symlink_to(os.path.realpath(Path(packages) / name))
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "LC_ALL": "C.UTF-8",
               "HOME": str(private)}
        probe = subprocess.run([python, "-c", "import json, sys, torch, numpy, exercises; print(json.dumps("
                                "[sys.prefix, torch.__file__, numpy.__file__, exercises.__file__]))"],
                               capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
        prefix, torch_file, numpy_file, exercises_file = json.loads(probe.stdout)
        assert Path(prefix) == venv
        assert torch_file.startswith(f"{venv_site}/") and numpy_file.startswith(f"{venv_site}/")
        assert exercises_file == str(EXERCISES / "__init__.py")
        result = subprocess.run([python, "-m", "exercises.grade", "--submission", str(SOLUTIONS), "--json",
                                 str(private / "report.json")], capture_output=True, text=True, env=env, cwd=ROOT,
                                timeout=1200)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        report = json.loads((private / "report.json").read_text())
        wrong = {e["id"]: e["feedback"] for e in report["exercises"] if e["score"] < e["max_score"]}
        assert not wrong and report["score"] == report["max_score"] > 0
    finally:
        shutil.rmtree(private, ignore_errors=True)
