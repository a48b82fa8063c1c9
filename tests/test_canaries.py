"""Every results file that records an accuracy records a canary, the cheapest slice of its own
command with the exact numbers it gave; this test runs each canary again and compares exactly.

A change to the library's numerics, the trainer's recipe or its augmentation changes the
numbers, so the file's table can no longer be quoted as today's: CI fails until the file is
measured again (``written_by`` in the file gives the command).  The canaries run in one thread
each, as the experiments do.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
import experiment  # noqa: E402


def records_accuracy(value) -> bool:
    """Whether a results file holds an accuracy anywhere (a key with "accuracy" in it)."""
    if isinstance(value, dict):
        return any("accuracy" in str(k) or records_accuracy(v) for k, v in value.items())
    if isinstance(value, list):
        return any(records_accuracy(v) for v in value)
    return False


def results_files() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*.json"))


def with_accuracy() -> list[Path]:
    return [p for p in results_files() if records_accuracy(json.loads(p.read_text()))]


def test_every_file_with_an_accuracy_has_a_canary():
    missing = [p.name for p in with_accuracy() if "canary" not in json.loads(p.read_text())]
    assert not missing, f"results files without a canary: {missing}"


def test_records_accuracy_finds_nested_accuracies():
    assert records_accuracy({"runs": [{"seed": 0, "test_accuracy": 0.9}]})
    assert not records_accuracy({"runs": [{"seed": 0, "seconds": 0.9}], "name": "accuracy"})


@pytest.mark.parametrize("path", with_accuracy(), ids=lambda p: p.name)
def test_the_canary_gives_the_recorded_numbers(path):
    canary = json.loads(path.read_text()).get("canary")
    if canary is None:
        pytest.fail(f"{path.name} records no canary")
    argv = shlex.split(canary["command"])
    assert argv[0] == "python" and argv[1].startswith("benchmarks/"), canary["command"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, *argv[1:]], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = experiment.read_canary(done.stdout)
    assert got == canary["numbers"], (
        f"{path.name}'s canary gives other numbers than the file records: the code changed "
        f"since the file was measured; run its command again ({json.loads(path.read_text())['written_by']})."
        f"\nrecorded: {canary['numbers']}\nnow:      {got}")
