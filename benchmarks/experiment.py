"""What every experiment script of benchmarks/ shares: the summary over seeds, the commit of
the code that ran, the CPU time, and the results file.

An experiment is a script that trains and measures over at least three seeds and writes one
JSON file into ``benchmarks/results/`` with ``--json``: its settings, every run, the mean and
spread over the seeds, the git commit and the CPU seconds.  Pages and notebooks read their
numbers from that file (docs/maintainers.md, "Numbers from one source").
"""
from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_commit() -> str | None:
    """The commit of the code that ran (``None`` outside a git checkout); a ``+`` marks
    uncommitted changes to tracked files."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+" if dirty else "")


def summary(values) -> dict:
    """``{"mean", "std", "min", "max", "n"}`` of a list of numbers (std with ddof=1; 0 for one)."""
    values = [float(v) for v in values]
    return {"mean": statistics.mean(values),
            "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def one_thread() -> None:
    """Run PyTorch (and the BLAS under NumPy) on one thread: experiments run as one-thread
    processes, so that their CPU seconds are those of one idle core."""
    import torch

    torch.set_num_threads(1)


class CpuClock:
    """CPU seconds (user + system, this process and its finished children) since it started."""

    def __init__(self):
        self.start = self._now()

    @staticmethod
    def _now() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def seconds(self) -> float:
        return self._now() - self.start


def header(name: str, argv, settings: dict) -> dict:
    """The fields every results file starts with."""
    import numpy
    import torch

    return {"benchmark": name,
            "written_by": f"python {Path(sys.argv[0]).as_posix() if argv is None else name} "
                          + shlex.join(sys.argv[1:] if argv is None else argv),
            "commit": git_commit(),
            "machine": {"python": platform.python_version(), "torch": torch.__version__,
                        "numpy": numpy.__version__, "cpus": os.cpu_count(),
                        "threads": torch.get_num_threads(),
                        "load_average_at_start": os.getloadavg()[0]},
            "settings": settings}


def write(path, data: dict) -> None:
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}", flush=True)


def stamp() -> str:
    return time.strftime("%H:%M:%S")
