"""The grader's own files, as recorded: checked before grading starts and before each exercise.

* **The manifest** (``exercises/grader/hidden/manifest.json``) holds the SHA-256 of every file the
  judge imports: ``exercises/*.py`` but the learners' ``exNN_*.py`` (the judge never imports
  those), and every file of ``exercises/grader/`` but the fixtures of the tests. A file that
  changed, disappeared or is not listed -- a planted ``exercises/grader/hidden/anything.py`` --
  stops grading, named, with the fix (``python -m exercises.grade --update-manifest`` after
  editing them yourself).
* **No bytecode from the repository.** ``python -m exercises.grade`` compiles the judge's modules
  from their source into a private folder (:func:`private_bytecode`); a ``.pyc`` file under
  ``exercises/`` is never run by it, and one that does not match its source -- planted there --
  stops grading too (:func:`bytecode_problems`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import marshal
import re
import sys
from pathlib import Path

EXERCISES_DIR = Path(__file__).resolve().parents[1]
GRADER_DIR = EXERCISES_DIR / "grader"
HIDDEN = GRADER_DIR / "hidden"
FIXTURES = GRADER_DIR / "fixtures"
MANIFEST = HIDDEN / "manifest.json"
ROOT = EXERCISES_DIR.parent
_LEARNER_FILE = re.compile(r"ex\d\d_\w+\.py")


def manifest_files() -> list[Path]:
    """The files the judge imports (see the module's docstring)."""
    top = [p for p in sorted(EXERCISES_DIR.glob("*.py")) if not _LEARNER_FILE.fullmatch(p.name)]
    grader = [p for p in sorted(GRADER_DIR.rglob("*")) if p.is_file() and p != MANIFEST
              and "__pycache__" not in p.parts and FIXTURES not in p.parents]
    return top + grader


def current_hashes() -> dict:
    return {p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in manifest_files()}


def write_manifest() -> Path:
    MANIFEST.write_text(json.dumps({"sha256": current_hashes()}, indent=1, sort_keys=True) + "\n")
    return MANIFEST


def manifest_problems(hashes: dict | None = None) -> list[str]:
    """What differs between the judge's files and the manifest, each with its fix (empty: all
    as recorded)."""
    try:
        recorded = json.loads(MANIFEST.read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{MANIFEST.relative_to(ROOT)} is missing or unreadable"]
    now = current_hashes() if hashes is None else hashes
    problems = [f"{f} changed" for f in sorted(set(now) & set(recorded)) if now[f] != recorded[f]]
    problems += [f"{f} is not in the manifest: delete it if you did not put it there"
                 for f in sorted(set(now) - set(recorded))]
    problems += [f"{f} is gone" for f in sorted(set(recorded) - set(now))]
    return problems


def bytecode_problems(exercises_dir: Path = EXERCISES_DIR) -> list[str]:
    """Every ``.pyc`` file under ``exercises/`` whose code is not its source's, compiled here:
    bytecode that someone put there (or left behind after deleting its source)."""
    problems = []
    root = exercises_dir.parent
    for pyc in sorted(exercises_dir.rglob("*.pyc")):
        rel = pyc.relative_to(root)
        parts = pyc.name.split(".")
        if len(parts) < 3 or parts[1] != sys.implementation.cache_tag:
            continue                                    # another interpreter's or tool's: never loaded here
        opt = re.fullmatch(r"opt-(\d)", parts[2])
        source = pyc.parent.parent / f"{parts[0]}.py"
        if pyc.parent.name != "__pycache__" or not source.is_file() or len(parts) != (4 if opt else 3):
            problems.append(f"{rel} has no source file: delete it")
            continue
        try:
            code = marshal.loads(pyc.read_bytes()[16:])
            same = code == compile(source.read_bytes(), str(source), "exec", dont_inherit=True,
                                   optimize=int(opt.group(1)) if opt else 0)
        except Exception:                               # noqa: BLE001 - unreadable is as bad as different
            same = False
        if not same:
            problems.append(f"{rel} does not match {source.relative_to(root)} (bytecode planted there?): delete it")
    return problems


@contextlib.contextmanager
def private_bytecode(folder):
    """Import the repository's modules from their source, caching their bytecode in ``folder``
    (the grader's own), never in or from the repository."""
    previous = sys.pycache_prefix
    sys.pycache_prefix = str(folder)
    try:
        yield
    finally:
        sys.pycache_prefix = previous
