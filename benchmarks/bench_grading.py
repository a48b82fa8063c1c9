"""How long the grader takes for a full correct submission (the reference solutions, full marks).

    python benchmarks/bench_grading.py            # 3 runs each, with the sandbox and without
    python benchmarks/bench_grading.py --runs 1 --jobs 1 --sandbox-only

Each run is one ``python -m exercises.grade --submission exercises/solutions`` in a fresh process
(what an instructor types): the grader's start, the zygotes' (PyTorch imported once), the copy of
the submission into the grader's folder, then every exercise, each in a process of its own --
inside its bubblewrap sandbox, or, for comparison, without one (``--trust-submissions``).
Prints the wall time and the CPU time of the grader and of all its processes, and the machine's
load, since a busy machine slows everything down. The target: under 15 s wall on 2 idle cores,
with the sandbox.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(jobs: int, sandbox: bool) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "exercises.grade", "--submission",
                             str(ROOT / "exercises" / "solutions"), "--jobs", str(jobs),
                             *([] if sandbox else ["--trust-submissions"])],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                            capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    total = re.search(r"^\s*total\s+(\d+)/(\d+)", result.stdout, re.M)
    if result.returncode != 0 or total is None or total.group(1) != total.group(2):
        sys.exit(f"the grader did not give full marks:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return wall, cpu, f"{total.group(1)}/{total.group(2)}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2, help="exercises graded at a time (the grader's --jobs)")
    parser.add_argument("--sandbox-only", action="store_true", help="skip the runs without the sandbox")
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} before the first run")
    for sandbox in (True,) if args.sandbox_only else (True, False):
        label = "with the sandbox" if sandbox else "without it (--trust-submissions)"
        walls = []
        for i in range(args.runs):
            wall, cpu, marks = one_run(args.jobs, sandbox)
            walls.append(wall)
            print(f"{label}, run {i + 1}: {wall:5.1f} s wall, {cpu:5.1f} s CPU (grader and its processes), {marks}")
        print(f"{label}: best {min(walls):.1f} s wall (--jobs {args.jobs}); load average now "
              f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
