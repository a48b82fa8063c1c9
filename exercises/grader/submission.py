"""A submission: the folder a learner hands in, collected once, as bytes, into a folder of the judge's.

Only the top-level ``.py`` files count: the exercise files ``exNN_*.py`` and the learner's own
helper modules. :func:`collect` copies them, before any exercise runs, into a folder the judge
owns, which each exercise's sandbox binds, read-only, at ``/submission``; after the copy the
learner's folder is never read again, and the sandbox never sees it.

The copy is made through file descriptors, never by a path that can change under the judge:

* the folder is opened from ``/``, one component at a time, each with ``O_NOFOLLOW`` (the
  folders above it with ``O_PATH``, which needs no permission to read them): a folder
  that is a symbolic link, or whose path passes through one (``/proc/self/cwd/...`` among
  them), is refused with the reason, and so is a folder inside the grader's repository or its
  working folder (but the repository's own ``exercises/`` and ``exercises/solutions/``);
* each entry is read relative to that descriptor (``dir_fd``) with ``O_NOFOLLOW``, checked with
  ``fstat`` against what the listing said, and read at most :data:`MAX_SOURCE` + 1 bytes: a
  folder swapped for a link while it is read is not followed, and a file that vanishes or
  changes while it is read is named.

A symbolic link, a hard link, anything but a regular file, a file that is not UTF-8, one of more
than :data:`MAX_SOURCE` bytes, or a name the sandbox reserves scores zero for its exercises with
the reason; more than :data:`MAX_FILES` Python files, or more than :data:`MAX_TOTAL` bytes of
them, scores zero for the whole submission. No error of a submission's folder stops the batch.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

MAX_SOURCE = 1 << 20          # bytes of one file
MAX_FILES = 64                # Python files in one submission
MAX_TOTAL = 4 << 20           # bytes of all of them
RESERVED = re.compile(r"_grader\w*")
EXERCISE_STEM = re.compile(r"ex\d\d_\w+")
# exercises/ itself holds the course's own modules next to the learner's files
COURSE_FILES = frozenset({"__init__.py", "check.py", "grade.py", "release.py", "feedback.py",
                          "visible_checks.py", "visible_checks_cait_coat.py",
                          "visible_checks_backprop.py", "test_visible.py"})
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# the folders above a submission are only walked through: O_PATH needs no read permission on them
_WALK_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

# Called as PAUSE(event, name) at each step of reading a folder: "listed" once, then for each
# entry "entry" (before its stat), "open" (between its stat and its open) and "read" (once it
# is copied). None when grading; the tests set it to change the folder between two reads.
PAUSE = None


class Refused(Exception):
    """The submission's folder cannot be collected at all; the message says why."""


@dataclass
class Collected:
    """What :func:`collect` found: the modules copied, and for those that cannot be graded,
    why (``notes[module]``; ``notes['*']`` for the folder itself, ``refused`` when nothing of
    it could be read)."""

    modules: set = field(default_factory=set)
    notes: dict = field(default_factory=dict)
    refused: str | None = None

    def missing(self, module: str) -> str | None:
        """Why ``module`` cannot be graded, or None when it was copied."""
        if self.refused:
            return self.refused
        if module in self.modules:
            return None
        if module in self.notes:
            return self.notes[module]
        if "*" in self.notes:
            return f"{self.notes['*']}: {module}.py is missing"
        return f"{module}.py is missing from the submission"


def _pause(event: str, name: str = "") -> None:
    if PAUSE is not None:
        PAUSE(event, name)


def _identity(st) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def open_folder(path: str) -> int:
    """A descriptor of the folder at the absolute ``path``, opened from ``/`` one component at
    a time with ``O_NOFOLLOW``; :class:`Refused` when the path does not lead to a folder by
    folders only."""
    if "\0" in path:
        raise Refused(f"the submission folder {path!r} holds a NUL character")
    if not os.path.isabs(path):
        raise Refused(f"the submission folder {path} is not an absolute path")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    fd = os.open("/", _DIR_FLAGS if not parts else _WALK_FLAGS)
    walked = ""
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            walked += "/" + part
            try:
                child = os.open(part, _DIR_FLAGS if last else _WALK_FLAGS, dir_fd=fd)
            except OSError as err:
                raise Refused(_why_not_a_folder(err, fd, part, walked, path, last)) from None
            if not stat.S_ISDIR(os.fstat(child).st_mode):          # O_PATH may open a link itself
                os.close(child)
                raise Refused(_why_not_a_folder(OSError(errno.ENOTDIR, "Not a directory"), fd, part, walked,
                                                path, last))
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def _why_not_a_folder(err: OSError, parent: int, part: str, walked: str, path: str, last: bool) -> str:
    try:
        is_link = stat.S_ISLNK(os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        is_link = False
    if is_link or err.errno == errno.ELOOP:
        if last:
            return (f"the submission folder {path} is a symbolic link: a submission is read from a real "
                    "folder, never through a link")
        return (f"the path of the submission folder {path} passes through a symbolic link ({walked}): a "
                "submission is read from a real folder, never through a link")
    if err.errno == errno.ENOENT:
        return f"the submission folder {path} does not exist"
    if err.errno == errno.ENOTDIR:
        return f"the submission {path} is not a folder" if last else f"the submission folder {path} does not exist"
    if err.errno in (errno.EACCES, errno.EPERM):
        return f"the submission folder {path} cannot be read ({walked}: permission denied)"
    return f"the submission folder {path} cannot be read ({walked}: {err.strerror})"


def _ancestors(fd: int) -> list[tuple[int, int]]:
    """(device, inode) of the folder ``fd`` and of every folder above it, up to ``/``."""
    chain, current = [], os.dup(fd)
    try:
        while True:
            here = _identity(os.fstat(current))
            if chain and chain[-1] == here:
                return chain
            chain.append(here)
            parent = os.open("..", _WALK_FLAGS, dir_fd=current)
            os.close(current)
            current = parent
    finally:
        os.close(current)


def _identity_of(path: Path) -> tuple[int, int] | None:
    try:
        return _identity(os.stat(path))
    except OSError:
        return None


def collect(path: str, dest: Path, *, repository: Path, exercises_dir: Path, private=()) -> Collected:
    """Copy the submission at ``path`` (absolute) into the new folder ``dest`` and say what was
    found. Never raises for anything about the submission's folder: what cannot be read is a
    note or a refusal, with the reason. ``repository``: the grader's repository (a submission is
    never read from it, but for ``exercises_dir`` and its ``solutions/``); ``private``: other
    folders of the judge's that no submission may be."""
    found = Collected()
    dest.mkdir(mode=0o700)
    try:
        fd = open_folder(path)
    except Refused as refusal:
        found.refused = str(refusal)
        return found
    except OSError as err:
        found.refused = f"the submission folder {path} cannot be read ({err.strerror})"
        return found
    try:
        course = _course_folder(fd, path, repository, exercises_dir, private)
        out = os.open(dest, _DIR_FLAGS)
        try:
            _copy_entries(fd, out, found, skip=COURSE_FILES if course == "exercises" else frozenset())
        finally:
            os.close(out)
    except Refused as refusal:
        found.modules, found.notes, found.refused = set(), {}, str(refusal)
    except OSError as err:
        found.modules, found.notes = set(), {}
        found.refused = f"the submission folder {path} cannot be read ({err.strerror or err})"
    finally:
        os.close(fd)
    if found.refused:
        for entry in dest.iterdir():
            entry.unlink()
    return found


def _course_folder(fd: int, path: str, repository: Path, exercises_dir: Path, private) -> str | None:
    """'exercises' or 'solutions' when ``fd`` is the repository's own exercises/ or
    exercises/solutions/; None for a folder outside the repository; :class:`Refused` for any
    other folder inside it or inside one of ``private``."""
    chain = _ancestors(fd)
    if chain[0] == _identity_of(exercises_dir):
        return "exercises"
    if chain[0] == _identity_of(exercises_dir / "solutions"):
        return "solutions"
    for folder, what in [(repository, "the grader's repository"), *[(p, "the grader's own folder") for p in private]]:
        if _identity_of(folder) in chain:
            raise Refused(f"the submission folder {path} is inside {what}: a submission is read from a folder "
                          "of its own (of the repository, only exercises/ and exercises/solutions/ can be graded)")
    return None


def _copy_entries(fd: int, out: int, found: Collected, skip) -> None:
    names = sorted(os.listdir(fd))
    _pause("listed")
    if not names:
        found.notes["*"] = "the submission folder is empty"
    total = 0
    for name in names:
        _pause("entry", name)
        stem = name.split(".")[0]
        if not name.endswith(".py"):
            if EXERCISE_STEM.fullmatch(stem) and stem.isidentifier() and _is_file(fd, name):
                found.notes.setdefault(stem, f"{stem}.py is missing from the submission (it holds {name}, "
                                             "which is not a Python file: save the exercise as a .py file)")
            continue
        if name in skip or not stem.isidentifier() or name.count(".") != 1:
            continue
        if RESERVED.fullmatch(stem):
            found.notes[stem] = f"{name}: the grader reserves this name"
            continue
        if len(found.modules) >= MAX_FILES:
            raise Refused(_too_much())
        data = _read_entry(fd, name, found.notes, stem)
        if data is None:
            continue
        total += len(data)
        if total > MAX_TOTAL:
            raise Refused(_too_much())
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                         dir_fd=out)
        with os.fdopen(target, "wb") as fh:
            fh.write(data)
        found.modules.add(stem)
        _pause("read", name)


def _too_much() -> str:
    return (f"the submission holds more than {MAX_FILES} Python files or {MAX_TOTAL >> 20} MiB of them: hand in "
            "the exercise files and your own helpers only")


def _is_file(fd: int, name: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _read_entry(fd: int, name: str, notes: dict, stem: str) -> bytes | None:
    """The bytes of the regular file ``name`` of the folder ``fd``, or None with ``notes[stem]``
    saying why not."""
    try:
        listed = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        notes[stem] = f"{name} vanished while the submission was read"
        return None
    except OSError as err:
        notes[stem] = f"{name} cannot be read ({err.strerror})"
        return None
    if stat.S_ISLNK(listed.st_mode):
        notes[stem] = f"{name} is a symbolic link: submit the file itself"
        return None
    if not stat.S_ISREG(listed.st_mode):
        notes[stem] = f"{name} is not a regular file"
        return None
    if listed.st_nlink > 1:
        notes[stem] = f"{name} is a hard link: submit a copy of the file"
        return None
    if listed.st_size > MAX_SOURCE:
        notes[stem] = f"{name} is larger than {MAX_SOURCE >> 20} MiB"
        return None
    _pause("open", name)
    try:
        handle = os.open(name, _FILE_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        notes[stem] = f"{name} vanished while the submission was read"
        return None
    except OSError as err:
        notes[stem] = (f"{name} is a symbolic link: submit the file itself" if err.errno == errno.ELOOP
                       else f"{name} cannot be read ({err.strerror})")
        return None
    try:
        opened = os.fstat(handle)
        if _identity(opened) != _identity(listed) or not stat.S_ISREG(opened.st_mode) or opened.st_nlink > 1:
            notes[stem] = f"{name} changed while the submission was read: hand in a folder nobody is changing"
            return None
        chunks, size = [], 0
        while size <= MAX_SOURCE:
            chunk = os.read(handle, MAX_SOURCE + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        after = os.fstat(handle)
    except OSError as err:
        notes[stem] = f"{name} cannot be read ({err.strerror})"
        return None
    finally:
        os.close(handle)
    data = b"".join(chunks)
    if len(data) > MAX_SOURCE:
        notes[stem] = f"{name} is larger than {MAX_SOURCE >> 20} MiB"
        return None
    if len(data) != after.st_size or after.st_mtime_ns != opened.st_mtime_ns:
        notes[stem] = f"{name} changed while the submission was read: hand in a folder nobody is changing"
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        notes[stem] = f"{name} is not UTF-8 text (byte {err.start})"
        return None
    return data
