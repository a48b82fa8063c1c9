"""HIDDEN TESTS -- instructors only. The grading proof: one grader run over everything CI checks.

``tests/test_exercises.py`` (the mutants, the solutions, the stubs, bad submissions) and
``tests/test_grader_security.py`` (the attacks) assert on the report of ONE
``python -m exercises.grade --batch`` run, made here once per test session: the mutants, the
attacks, the bad submissions, the code the notebooks show for 7.2 and 8.1, then a correct
submission and the untouched stubs graded after all of them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .hostile import ALLOWED_HELPERS, ATTACKS, exercises_of
from .mutants import MUTANTS

EXERCISES = Path(__file__).resolve().parents[1]
ROOT = EXERCISES.parent
SOLUTIONS = EXERCISES / "solutions"
_CACHE: dict = {}


def _notebook_function(notebook: str, *names: str) -> str | None:
    """The code cells of a notebook that define ``names`` (what a learner could paste)."""
    path = ROOT / "notebooks" / notebook
    if not path.is_file():
        return None
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    found = [c for c in cells if any(re.search(rf"^def {n}\(", c, re.M) for n in names)]
    return "\n\n".join(found) if found else None


def bad_submissions(folder: Path) -> dict:
    """{name: (folder, the exercise graded, the phrase its feedback must contain)}."""
    folder.mkdir(parents=True, exist_ok=True)
    stub04 = (EXERCISES / "ex04_layerscale.py").read_text()
    cases = {}

    def make(name, files, ex, phrase):
        d = folder / name
        d.mkdir()
        for fname, content in files.items():
            (d / fname).write_bytes(content if isinstance(content, bytes) else content.encode())
        cases[name] = (d, ex, phrase)

    cases["a folder that does not exist"] = (folder / "nowhere", "4.1", "does not exist")
    make("an empty folder", {}, "4.1", "the submission folder is empty")
    make("a notebook instead of a .py file", {"ex04_layerscale.ipynb": "{}"}, "4.1", "not a Python file")
    make("a file that does not parse", {"ex04_layerscale.py": stub04 + "\ndef broken(:\n"}, "4.1",
         "does not compile: SyntaxError at line")
    make("a missing package", {"ex04_layerscale.py": "import not_a_package_anywhere\n" + stub04}, "4.1",
         "No module named 'not_a_package_anywhere'")
    make("a file that is not UTF-8", {"ex04_layerscale.py": b"# caf\xe9\n" + stub04.encode()}, "4.1",
         "is not UTF-8")
    d = folder / "a symbolic link"
    d.mkdir()
    (d / "ex04_layerscale.py").symlink_to(SOLUTIONS / "ex04_layerscale.py")
    cases["a symbolic link"] = (d, "4.1", "symbolic link")
    for ex_id, module, notebook, names, keep in [
            ("7.2", "ex07_conv_position_encoding", "07_conv_position_encoding.ipynb", ("depthwise_conv2d",), ()),
            ("8.1", "ex08_coscale", "08_coscale.ipynb", ("bilinear_resize", "linear_taps"), ())]:
        code = _notebook_function(notebook, *names)
        if code is not None:
            text = (SOLUTIONS / f"{module}.py").read_text()
            make(f"the notebook's code pasted into {ex_id}", {f"{module}.py": text + "\n\n" + code + "\n"}, ex_id, "")
    return cases


def graded(tmp: Path) -> dict:
    """Run the grader once over everything; returns its results (cached for the session)."""
    if "result" in _CACHE:
        return _CACHE["result"]
    tmp = Path(tmp)
    report = tmp / "report.json"
    nxt = tmp / "next"
    shutil.copytree(SOLUTIONS, nxt, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    jobs, names = [], []
    for i, mutant in enumerate(MUTANTS):
        jobs.append({"submission": str(mutant.write(tmp / f"mutant{i}")), "exercises": [mutant.exercise]})
        names.append(("mutant", mutant))
    for i, attack in enumerate(ATTACKS + [ALLOWED_HELPERS]):
        folder = attack.write(tmp / f"attack{i}", root=ROOT, report=report, next=nxt)
        jobs.append({"submission": str(folder), "exercises": exercises_of(attack), "time_limit": attack.time_limit})
        names.append(("attack", attack))
    for name, (folder, ex_id, phrase) in bad_submissions(tmp / "bad").items():
        jobs.append({"submission": str(folder), "exercises": [ex_id]})
        names.append(("bad", (name, phrase)))
    jobs.append({"submission": str(nxt), "exercises": None})
    names.append(("solutions", None))
    jobs.append({"submission": str(EXERCISES), "exercises": None})
    names.append(("stubs", None))
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    hashes = tree_hashes()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "exercises.grade", "--batch", str(tmp / "jobs.json"),
                             "--json", str(report)], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=1800)
    _CACHE["result"] = {"returncode": result.returncode, "stdout": result.stdout, "stderr": result.stderr,
                        "seconds": time.monotonic() - start, "names": names, "jobs": jobs,
                        "report_path": report, "next": nxt, "hashes_before": hashes,
                        "hashes_after": tree_hashes(), "leftovers": processes_of(len(jobs)),
                        "reports": json.loads(report.read_text()) if report.is_file() else None}
    return _CACHE["result"]


def tree_hashes() -> dict:
    """sha256 of every file of exercises/ (the grader's code, hidden tests, solutions, stubs)."""
    return {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(EXERCISES.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def processes_of(n: int) -> list[str]:
    """Processes still running under one of the n submissions' uids (there must be none)."""
    from exercises.session import UID_BASE

    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration, ValueError):
            continue
        if UID_BASE <= uid < UID_BASE + n:
            found.append(f"pid {status.parent.name} uid {uid}")
    return found
