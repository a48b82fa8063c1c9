"""The operating-system sandbox of each exercise: bubblewrap, its command line, and what this
machine offers.

Every exercise runs inside a sandbox that bubblewrap (``bwrap``, Flatpak's sandbox; the
``bubblewrap`` package of Debian, Ubuntu and Fedora) builds, as root or as an ordinary user (it
uses unprivileged user namespaces):

* new user, mount, pid, ipc, network and uts namespaces, and no way to make more user
  namespaces inside (``--disable-userns``);
* a read-only filesystem that holds only the interpreter and its packages, the exercise's view
  of the library at ``/grader/lib`` and copies of the submission's files at ``/submission``:
  no repository, no ``.git``, no hidden test, no solution, no other submission, no report;
* a private ``/tmp`` and ``/dev/shm`` of :data:`TMPFS_SIZE` bytes each and its own ``/proc``,
  mounted before the interpreter's folders are bound (an interpreter in a virtual environment
  under ``/tmp`` works);
* ``--die-with-parent``, a session of its own; the resource limits are set by the process that
  serves the exercise (:mod:`exercises.grader.sandbox.confine`).

:func:`detect` finds bubblewrap and tries it once; :func:`protections` says in words what is
active. Where it cannot run, the grader refuses untrusted submissions
(``--trust-submissions`` grades without it, for an instructor's own solutions).
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

SUBMISSION = "/submission"        # the submission's files, inside the sandbox
LIBRARY = "/grader/lib"           # the exercise's view of the library (and _grader_absent.py)
TMPFS_SIZE = 64 << 20             # bytes of /tmp and of /dev/shm
INSTALL = ("install bubblewrap: apt-get install bubblewrap (Debian, Ubuntu), dnf install bubblewrap "
           "(Fedora), pacman -S bubblewrap (Arch)")
_NAMESPACES = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
               "--unshare-cgroup-try"]


@functools.lru_cache(maxsize=1)
def detect() -> dict:
    """{"bwrap": path or None, "version": str, "disable_userns": bool, "size": bool,
    "problem": None or why it cannot be used, in words}."""
    found = {"bwrap": shutil.which("bwrap"), "version": "", "disable_userns": False, "size": False,
             "problem": None}
    if sys.platform != "linux":
        found["problem"] = "bubblewrap needs Linux"
        return found
    if found["bwrap"] is None:
        found["problem"] = f"bubblewrap (bwrap) is not installed: {INSTALL}"
        return found
    try:
        version = subprocess.run([found["bwrap"], "--version"], capture_output=True, text=True, timeout=30)
        usage = subprocess.run([found["bwrap"], "--help"], capture_output=True, text=True, timeout=30)
        found["version"] = version.stdout.split()[-1] if version.stdout.split() else "?"
        found["disable_userns"] = "--disable-userns" in usage.stdout
        found["size"] = re.search(r"^\s*--size\b", usage.stdout, re.M) is not None
        probe = [found["bwrap"], *_NAMESPACES, *(["--disable-userns"] if found["disable_userns"] else []),
                 "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--", "true"]
        result = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        found["problem"] = f"bubblewrap ({found['bwrap']}) does not run: {err}"
        return found
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit status {result.returncode}"
        found["problem"] = (f"bubblewrap cannot build a sandbox here ({detail}): run the grader as root, or "
                            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 "
                            "on Debian; user.max_user_namespaces > 0)")
    return found


def protections(trusted: bool = False) -> tuple[list[str], list[str]]:
    """(what protects the grader on this machine, what is missing), in words."""
    box = detect()
    have = ["each exercise in a process of its own, forked from an interpreter that never imported the "
            "hidden tests, the references or the scoring code; inputs and outputs as data (JSON and raw "
            "array bytes); the scores computed here",
            "what an exercise may not use is absent from its view: the library's functions replaced by ones "
            "that raise, forbidden packages (torch in a NumPy exercise, einops, parts of SciPy) by stubs",
            "limits: CPU time, address space, output size, open files; one process and one thread: "
            + ("the functions that would start others are taken away (as root the kernel's limit does not "
               "count uid 0's processes)" if os.geteuid() == 0 else "the kernel refuses a fork or a thread"),
            "in the process: an audit hook and the loop count, their state out of the submission's reach",
            "the grader's files checked against exercises/grader/hidden/manifest.json, no bytecode loaded "
            "from the repository"]
    lack = []
    if trusted:
        lack.append("--trust-submissions: no sandbox -- the submission runs as you, with your files; "
                    "use it for your own solutions only")
    elif box["problem"] is None:
        have.insert(1, f"bubblewrap {box['version']}: each exercise in new user, mount, pid, ipc, network and "
                       "uts namespaces, a read-only view of only the interpreter, the library and the "
                       f"submission's own files, a private /tmp, /dev/shm ({TMPFS_SIZE >> 20} MiB each) and "
                       "/proc; killed with the grader")
        if not box["disable_userns"]:
            lack.append(f"bubblewrap {box['version']} has no --disable-userns (0.8 or later): a submission "
                        "can make user namespaces of its own inside the sandbox")
        if not box["size"]:
            lack.append(f"bubblewrap {box['version']} has no --size: /tmp and /dev/shm are not size-limited")
    else:
        lack.append(f"no sandbox: {box['problem']}")
    return have, lack


def _system_dirs() -> list[str]:
    """The root's folders that hold programs and shared libraries: bound, or linked as on the host."""
    args = []
    for name in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    if os.path.isfile("/etc/ld.so.cache"):
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


def python_dirs(exclude=()) -> list[str]:
    """The interpreter's folders (prefixes, standard library, site-packages), as found and
    resolved. A folder that holds one of ``exclude`` (the repository, the grader's files) is an
    error: the sandbox would show it."""
    import site
    import sysconfig

    candidates = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                  *sysconfig.get_paths().values(), *site.getsitepackages()]
    out = set()
    bad = tuple(os.path.realpath(e) for e in exclude)
    for p in candidates:
        if not p or not os.path.isdir(p):
            continue
        for q in (os.path.abspath(p), os.path.realpath(p)):
            if q.startswith(("/usr/", "/bin/", "/lib")) or q in ("/", "/usr"):
                continue                                # bound with the system's folders
            if any(b.startswith(q.rstrip(os.sep) + os.sep) for b in bad):
                raise RuntimeError(f"the interpreter's folder {q} holds {next(b for b in bad if b.startswith(q))}: "
                                   "the sandbox would show it (use an interpreter installed elsewhere)")
            out.add(q)
    return sorted(p for p in out if not any(p.startswith(o + os.sep) for o in out))


def overlay_destinations(target, bound) -> list[str]:
    """Where an overlay of ``target`` is bound: its real path, and the path it is found at when
    that path lies in one of the ``bound`` folders without passing through a link below it (a
    folder bound under a linked name is a folder of its own in the sandbox). A link kept inside
    a bound folder -- a package linked into a virtual environment -- leads to the real path."""
    real, path = os.path.realpath(target), os.path.abspath(target)
    dests = {real}
    roots = [b for b in bound if path == b or path.startswith(b.rstrip(os.sep) + os.sep)]
    if roots and path != real:
        root = max(roots, key=len)
        current, linked = root, False
        for part in path[len(root):].strip(os.sep).split(os.sep):
            current = os.path.join(current, part)
            linked = linked or os.path.islink(current)
        if not linked:
            dests.add(path)
    return sorted(dests)


def sandbox_args(*, library: Path, submission: Path, overlays, exclude) -> list[str]:
    """bwrap's arguments (without --info-fd and the command) for one exercise: ``library`` and
    ``submission`` are host folders bound at :data:`LIBRARY` and :data:`SUBMISSION`; each
    ``(source, target)`` of ``overlays`` replaces a file or folder of the interpreter's packages
    (an absent package, a file with absent functions)."""
    box = detect()
    system = _system_dirs()
    bad = [os.path.realpath(e) for e in exclude]
    for option, source, _ in zip(system[::3], system[1::3], system[2::3]):
        held = [b for b in bad if b.startswith(os.path.realpath(source).rstrip(os.sep) + os.sep)]
        if option == "--ro-bind" and held:
            raise RuntimeError(f"{source} holds {held[0]}: the sandbox would show it (move the repository)")
    size = ["--size", str(TMPFS_SIZE)] if box["size"] else []
    # The private /tmp and /dev/shm first: what is bound after them (an interpreter in a virtual
    # environment under /tmp, the overlays over its packages) is bound inside them, never hidden.
    args = [*_NAMESPACES, *(["--disable-userns"] if box["disable_userns"] else []),
            "--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL", "--hostname", "sandbox",
            "--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/tmp", *size, "--tmpfs", "/dev/shm", *system]
    bound = python_dirs(exclude)
    for path in bound:
        args += ["--ro-bind", path, path]
    for source, target in overlays:
        for dest in overlay_destinations(target, bound):
            args += ["--ro-bind", str(source), dest]
    args += ["--ro-bind", str(library), LIBRARY, "--ro-bind", str(submission), SUBMISSION, "--chdir", "/"]
    return args
