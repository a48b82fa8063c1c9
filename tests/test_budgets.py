"""The per-file CPU budgets (tests/budgets.py): the rule on hand-made totals, and the committed
budgets cover the files that exist."""
import json

import pytest

import budgets


def test_a_file_within_its_budget_passes_and_one_over_it_is_named_with_its_numbers():
    got = budgets.over_budget({"tests/a.py": 30.0, "tests/b.py": 36.0},
                              {"tests/a.py": 20.0, "tests/b.py": 20.0}, factor=1.5, slack=5.0)
    assert got == ["tests/b.py: 36 CPU s, over its limit of 35 s (1.5 × its measured 20 s + 5 s)"]


def test_a_file_without_a_budget_gets_the_default_and_the_largest_excess_comes_first():
    got = budgets.over_budget({"tests/new.py": 21.0, "tests/b.py": 100.0, "tests/c.py": 19.0},
                              {"tests/b.py": 10.0}, factor=2.0, slack=0.0, default=20.0)
    assert got == ["tests/b.py: 100 CPU s, over its limit of 20 s (2 × its measured 10 s + 0 s)",
                   "tests/new.py: 21 CPU s, over its limit of 20 s (no budget in "
                   "tests/budgets.json)"]
    assert budgets.over_budget({"tests/b.py": 20.0}, {"tests/b.py": 10.0}, 2.0, 0.0) == []


@pytest.mark.parametrize("nodeid, path", [
    ("tests/test_x.py::test_y[1-2]", "tests/test_x.py"),
    ("notebooks/09_capstone.ipynb::Cell 3", "notebooks/09_capstone.ipynb")])
def test_a_test_item_counts_for_its_file(nodeid, path):
    assert budgets.file_of(nodeid) == path


def test_cpu_time_counts_the_children_waited_for():
    import subprocess
    import sys

    before = budgets.cpu_now()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    assert budgets.cpu_now() - before > 0.1  # the child's work, not this process's


def test_every_budget_names_a_file_that_exists():
    data = json.loads(budgets.BUDGETS.read_text())
    missing = [p for p in data["cpu_seconds"] if not (budgets.ROOT / p).exists()]
    assert not missing, f"budgets for files that no longer exist: {missing}"
