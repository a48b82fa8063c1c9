"""Write ``tests/budgets.json``, each test file's CPU seconds, from the totals of the last run
of the whole suite (``.pytest_cache/cpu_seconds.json``, written by tests/conftest.py)::

    pytest && python tools/budgets.py

Run it on purpose, after a change that makes a file slower for a reason (say which in the
commit); tests/budgets.py explains the budgets and their check.
"""
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import budgets  # noqa: E402


def main() -> None:
    if not budgets.TOTALS.exists():
        sys.exit(f"{budgets.TOTALS} does not exist: run the whole suite (pytest) first")
    totals = json.loads(budgets.TOTALS.read_text())
    data = {"about": "CPU seconds per test file of one run of the whole suite, rounded up; "
                     "tests/budgets.py checks each run against them",
            "cpu_seconds": {path: math.ceil(seconds) for path, seconds in sorted(totals.items())}}
    budgets.BUDGETS.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{budgets.BUDGETS.relative_to(ROOT)}: {len(totals)} files, "
          f"{sum(totals.values()):.0f} CPU s in all")


if __name__ == "__main__":
    main()
