"""A submission: the folder a learner hands in, read once, checked, and copied for its sandbox.

Only the top-level ``.py`` files count: the exercise files ``exNN_*.py`` and the learner's own
helper modules. The judge reads regular files only and copies them into a folder of its own,
which each exercise's sandbox binds, read-only, at ``/submission``; the sandbox never sees the
folder the submission came from. A symbolic link, a hard link, a file that is not UTF-8, one of
more than :data:`MAX_SOURCE` bytes, or a name the sandbox reserves scores zero for its exercises
with the reason; more than :data:`MAX_FILES` Python files, or more than :data:`MAX_TOTAL` bytes
of them, scores zero for the whole submission.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

MAX_SOURCE = 1 << 20          # bytes of one file
MAX_FILES = 64                # Python files in one submission
MAX_TOTAL = 4 << 20           # bytes of all of them
RESERVED = re.compile(r"_grader\w*")
# exercises/ itself holds the course's own modules next to the learner's files
COURSE_FILES = frozenset({"__init__.py", "check.py", "grade.py", "release.py", "feedback.py",
                          "visible_checks.py", "visible_checks_cait_coat.py",
                          "visible_checks_backprop.py", "test_visible.py"})


def read_submission(folder: Path, exercises_dir: Path) -> tuple[dict, dict]:
    """(files, notes): the folder's Python files as {module: bytes}, and, for modules that
    cannot be graded, why ({module: message}); notes['*'] for the folder itself."""
    files, notes = {}, {}
    if not folder.exists():
        return files, {"*": f"the submission folder {folder} does not exist"}
    if not folder.is_dir():
        return files, {"*": f"the submission {folder} is not a folder"}
    entries = sorted(folder.iterdir())
    if not entries:
        notes["*"] = "the submission folder is empty"
    skip = COURSE_FILES if folder.resolve() == exercises_dir.resolve() else frozenset()
    total = 0
    for path in entries:
        name = path.name
        stem = name.split(".")[0]
        if not name.endswith(".py"):
            if re.fullmatch(r"ex\d\d_\w+", stem) and path.is_file():
                notes.setdefault(stem, f"{stem}.py is missing from the submission (it holds {name}, "
                                       "which is not a Python file: save the exercise as a .py file)")
            continue
        if name in skip or not stem.isidentifier() or name.count(".") != 1:
            continue
        if RESERVED.fullmatch(stem):
            notes[stem] = f"{name}: the grader reserves this name"
            continue
        try:
            st = path.lstat()
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            notes[stem] = f"{name} is a symbolic link: submit the file itself"
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if st.st_nlink > 1:
            notes[stem] = f"{name} is a hard link: submit a copy of the file"
            continue
        if st.st_size > MAX_SOURCE:
            notes[stem] = f"{name} is larger than {MAX_SOURCE >> 20} MiB"
            continue
        if len(files) >= MAX_FILES or total + st.st_size > MAX_TOTAL:
            return {}, {"*": f"the submission holds more than {MAX_FILES} Python files or {MAX_TOTAL >> 20} MiB "
                             "of them: hand in the exercise files and your own helpers only"}
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read(MAX_SOURCE + 1)
        except OSError as err:
            notes[stem] = f"{name} cannot be read ({err.strerror})"
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as err:
            notes[stem] = f"{name} is not UTF-8 text (byte {err.start})"
            continue
        files[stem] = data
        total += len(data)
    return files, notes


def copy_for_sandbox(files: dict, dest: Path) -> Path:
    """Write the files (and nothing else) into ``dest``, the folder bound at /submission."""
    dest.mkdir(mode=0o700)
    for stem, data in files.items():
        (dest / f"{stem}.py").write_bytes(data)
    return dest


def missing_message(module: str, files: dict, notes: dict) -> str | None:
    if module in files:
        return None
    if module in notes:
        return notes[module]
    if "*" in notes:
        return f"{notes['*']}: {module}.py is missing"
    return f"{module}.py is missing from the submission"
