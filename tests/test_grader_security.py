"""The grader against hostile submissions: marks that mean something.

53 attacks (``exercises/hidden/hostile.py``), by category: forged scores and reports, reading
the hidden tests, switching the guard and the loop count off, writing to the repository or to
another student's files, outliving the grader, signalling it, flooding it. They are graded in
the same single grader run as the rest of the proof (``exercises/hidden/proof.py``), followed by
a correct submission and the untouched stubs. Each attack must score zero on the exercise it
attacks, with the status and the words its entry names; what the grader reports afterwards
must be intact: the exit status, the report, the repository, no process left behind.
"""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
if not (EXERCISES / "hidden" / "__init__.py").is_file() or not (EXERCISES / "solutions").is_dir():
    pytest.skip("a student copy has no hidden tests and no solutions", allow_module_level=True)

from exercises.hidden.hostile import ALLOWED_HELPERS, ATTACKS, exercises_of  # noqa: E402
from exercises.session import is_root  # noqa: E402


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    from exercises.hidden.proof import graded

    return graded(tmp_path_factory.mktemp("grading"))


def _report(graded, attack):
    return next(rep for (kind, what), rep in zip(graded["names"], graded["reports"]) if what is attack)


def test_the_suite_covers_every_category_with_at_least_30_attacks():
    categories = {a.category for a in ATTACKS}
    assert len(ATTACKS) >= 30
    assert {"forged score", "hidden tests read", "guard off", "repository written", "outlives the grader",
            "signals the grader", "flood"} <= categories


def test_the_grader_survives_the_batch(graded):
    """Exit status 0, one report per submission, every score within its maximum."""
    assert graded["returncode"] == 0, graded["stdout"][-2000:] + graded["stderr"][-3000:]
    reports = graded["reports"]
    assert reports is not None and len(reports) == len(graded["jobs"])
    for report in reports:
        assert report["score"] == sum(e["score"] for e in report["exercises"])
        assert all(0 <= e["score"] <= e["max_score"] for e in report["exercises"])


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: f"{a.category}: {a.name}")
def test_an_attack_scores_zero_on_what_it_attacks(graded, attack):
    report = _report(graded, attack)
    exercises = {ex["id"]: ex for ex in report["exercises"]}
    assert sorted(exercises) == sorted(exercises_of(attack))
    for ex_id, ex in exercises.items():
        if ex_id in attack.zeroed:
            status, phrase = attack.zeroed[ex_id]
            assert ex["score"] == 0 and ex["status"] == status, ex
            assert phrase in ex["feedback"], ex["feedback"]
        else:                                   # the rest of its module is graded as usual
            assert ex["score"] == ex["max_score"], (ex_id, ex["feedback"])


def test_the_allowed_library_helpers_are_not_an_attack(graded):
    report = _report(graded, ALLOWED_HELPERS)
    assert report["score"] == report["max_score"], report


def test_a_correct_submission_after_the_attacks_scores_full_marks_and_the_stubs_zero(graded):
    kinds = [kind for kind, _ in graded["names"]]
    solutions = graded["reports"][kinds.index("solutions")]
    stubs = graded["reports"][kinds.index("stubs")]
    assert kinds.index("solutions") > max(i for i, k in enumerate(kinds) if k == "attack")
    assert solutions["score"] == solutions["max_score"] == 293, \
        [(e["id"], e["feedback"]) for e in solutions["exercises"] if e["score"] < e["max_score"]]
    assert stubs["score"] == 0 and {e["status"] for e in stubs["exercises"]} == {"not done"}


def test_nothing_was_written_and_nothing_outlives_the_grader(graded):
    """The hidden tests, the grader, the solutions and the stubs are byte for byte what they
    were; the next student's files too; no process of any submission's uid is left."""
    assert graded["hashes_after"] == graded["hashes_before"]
    nxt = Path(graded["next"])
    assert (nxt / "ex04_layerscale.py").read_text() == (EXERCISES / "solutions" / "ex04_layerscale.py").read_text()
    assert graded["leftovers"] == []
    report = Path(graded["report_path"]).read_text()
    assert report.lstrip().startswith("[") and '"score": 293' in report


@pytest.mark.skipif(not is_root(), reason="the uid drop and mode 0700 need root")
def test_as_root_the_hidden_tests_and_solutions_are_root_only():
    import stat

    for folder in (EXERCISES / "hidden", EXERCISES / "solutions"):
        st = folder.stat()
        assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700, folder


def test_not_as_root_the_grader_says_what_is_missing(monkeypatch):
    from exercises import session

    monkeypatch.setattr(session, "is_root", lambda: False)
    have, lack = session.protections()
    assert any("not root" in line and "uid" in line for line in lack)
    monkeypatch.setattr(session, "is_root", lambda: True)
    have, lack = session.protections()
    assert lack == [] or all("Linux" in line for line in lack)
    assert any("uid and gid of its own" in line for line in have)
