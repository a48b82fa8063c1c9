"""Fixtures shared by the tests; figures draw off-screen (matplotlib's Agg backend).

Plain ``pytest`` runs in two processes (pytest-xdist, ``-n 2`` in pyproject.toml): each test file
and each notebook goes whole to one process, so a file's module fixtures are built once and a
notebook's cells run in order in one kernel.  ``pytest -n 0`` runs everything in this process
(for ``--pdb``, or to see ``print`` output with ``-s``)."""
import os

# The cores are shared among the test processes: each one (and the notebook kernels it starts,
# which inherit the variable) uses its share of them for PyTorch, BLAS and the NumPy room's
# batch threads.  Set before NumPy and PyTorch are imported, as both read it when they load.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault(
        "OMP_NUM_THREADS", str(max(1, (_cores or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))
os.environ.setdefault("MPLBACKEND", "Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

#: Test files that share one session-wide fixture, run in the same process: the grader's single
#: run over every submission (``exercises/grader/fixtures/proof.py``) serves both.
SAME_PROCESS = {"tests/test_exercises.py": "grader", "tests/test_grader_security.py": "grader"}


#: The longest files and notebooks (their CPU seconds in tests/budgets.json, the grader's two
#: files together), handed out first, longest first, so that the two processes finish together:
#: a long file handed out last runs alone at the end.  The rest follow in xdist's order (the most
#: tests first).
LONGEST_FIRST = ("notebooks/09_capstone.ipynb", "tests/test_readme.py", "tests/test_timm_suite.py",
                 "tests/test_canaries.py", "grader", "tests/test_families.py",
                 "tests/test_export.py", "tests/test_interface.py", "tests/test_site.py",
                 "tests/test_judge.py", "tests/test_timm_parity.py", "tests/test_distillation.py",
                 "notebooks/11_distillation.ipynb", "notebooks/08_coscale.ipynb",
                 "tests/test_distributed.py", "tests/test_properties.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Whole files (and whole notebooks) to one process; the files in ``SAME_PROCESS`` together;
    the scopes in ``LONGEST_FIRST`` first."""
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SAME_PROCESS.get(path, path)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the queue is complete when the first unit is handed out
                rank = {scope: i for i, scope in enumerate(LONGEST_FIRST)}
                queue = sorted(self.workqueue.items(),
                               key=lambda item: rank.get(item[0], len(rank)))  # stable
                self.workqueue, self.ordered = OrderedDict(queue), True
            super()._assign_work_unit(node)

    return ByFile(config, log)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
