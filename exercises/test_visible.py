"""The visible checks as pytest tests:  pytest exercises  (or  pytest exercises -k 2_2).

A test is skipped while its exercise still raises NotImplementedError. The same checks run with
friendlier output as  python -m exercises.check NN.
"""
import pytest

from exercises.check import load
from exercises.visible_checks import CHECKS, run_check, sort_key


@pytest.mark.parametrize("ex_id", sorted(CHECKS, key=sort_key), ids=lambda i: i.replace(".", "_"))
def test_exercise(ex_id):
    module, problem = load(CHECKS[ex_id].notebook)
    assert module is not None, f"the exercise file does not import: {problem}"
    out = run_check(ex_id, module)
    if out.status == "not done":
        pytest.skip(f"not done yet: {out.message}")
    assert out.status == "ok", f"Exercise {ex_id} {out.name}: {out.message}\nhint: {out.hint}"
