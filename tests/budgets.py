"""Each test file's budget of CPU time, checked at the end of every full run of the suite.

CI must stay fast (``.ci/run`` in about five minutes on two cores), and a test file that grows
slowly is seen only when the whole run is already slow.  So every test item's CPU time is
measured where it runs -- the pytest process's own (``time.process_time``) plus that of the
processes it started and waited for (``resource.getrusage(RUSAGE_CHILDREN)``: the grading
batches, the trainer's command lines, a notebook's kernel when it shuts down) -- and added up
per file (a notebook is one file).  CPU seconds, not wall seconds: the same on a quiet machine
and a loaded one, so that a budget fails for a slower test, not for a busy machine.

``tests/budgets.json`` holds each file's measured CPU seconds (``python tools/budgets.py``
writes it from a run's totals); a file may take ``FACTOR`` times its measured time before the
run fails, a file without an entry ``DEFAULT_SECONDS``.  The check runs only when the whole suite
ran (plain ``pytest``): a part of it (``pytest tests/test_x.py``, ``-k``) measures nothing
complete.  Each run's totals are written to ``.pytest_cache/cpu_seconds.json``.
"""
from __future__ import annotations

import json
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGETS = ROOT / "tests" / "budgets.json"
TOTALS = ROOT / ".pytest_cache" / "cpu_seconds.json"
#: How much more than its measured CPU time a file may take before the run fails.
FACTOR = 1.5
#: Plus this many seconds (a small file's time is mostly noise).
SLACK = 5.0
#: The budget of a file that has no measured time yet.
DEFAULT_SECONDS = 20.0


def cpu_now(item=None) -> float:
    """CPU seconds (user + system) of this process and of its children waited for so far, and,
    for a notebook's cell, of the notebook's running kernel (and its children waited for)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (time.process_time() + children.ru_utime + children.ru_stime
            + kernel_cpu(getattr(getattr(item, "parent", None), "kernel", None)))


def kernel_cpu(kernel) -> float:
    """A running nbval kernel's CPU seconds from ``/proc`` (its own and its waited children's);
    0 without one.  Read while it runs: the kernel is never a waited child of this process."""
    try:
        pid = kernel.km.provisioner.process.pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (AttributeError, OSError, IndexError):
        return 0.0
    import os

    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def file_of(nodeid: str) -> str:
    """``tests/test_x.py::test_y[1]`` -> ``tests/test_x.py``; a notebook's cells -> the notebook."""
    return nodeid.split("::", 1)[0]


def over_budget(totals: dict[str, float], budgets: dict[str, float],
                factor: float = FACTOR, slack: float = SLACK,
                default: float = DEFAULT_SECONDS) -> list[str]:
    """One line per file whose CPU seconds exceed ``factor`` × its budget + ``slack`` (or
    ``default`` without a budget), the largest excess first; ``[]`` when every file is within."""
    lines = []
    for path, seconds in totals.items():
        budget = budgets.get(path)
        limit = default if budget is None else factor * budget + slack
        if seconds > limit:
            lines.append((seconds - limit,
                          f"{path}: {seconds:.0f} CPU s, over its limit of {limit:.0f} s ("
                          + ("no budget in tests/budgets.json" if budget is None else
                             f"{factor:g} × its measured {budget:.0f} s + {slack:g} s") + ")"))
    return [line for _, line in sorted(lines, reverse=True)]


def read_budgets(path: Path = BUDGETS) -> dict[str, float]:
    return json.loads(path.read_text())["cpu_seconds"] if path.exists() else {}
