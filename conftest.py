"""Hooks for every test item, the notebooks' cells included: each test file's CPU budget
(``tests/budgets.py``).  The fixtures and the scheduling are in ``tests/conftest.py``."""
import pytest

# --- each test file's CPU budget (tests/budgets.py) -------------------------------------------

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    import budgets

    item.cpu_mark = budgets.cpu_now(item)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Each phase's report carries the CPU seconds since the previous phase (setup: since the
    item started, module fixtures included) to the process that adds them up."""
    import budgets

    outcome = yield
    now = budgets.cpu_now(item)
    report = outcome.get_result()  # its user_properties may be the item's own list: not added to
    report.user_properties = [*report.user_properties,
                              ("cpu_seconds", now - getattr(item, "cpu_mark", now))]
    item.cpu_mark = now


def pytest_runtest_logreport(report):
    if report.nodeid:
        import budgets

        seconds = sum(v for k, v in report.user_properties if k == "cpu_seconds")
        CPU_TOTALS[budgets.file_of(report.nodeid)] = CPU_TOTALS.get(
            budgets.file_of(report.nodeid), 0.0) + seconds


#: CPU seconds per test file in this run (in the process that reports: xdist's controller).
CPU_TOTALS: dict = {}
OVER_BUDGET: list = []


def _whole_suite(config) -> bool:
    """Plain ``pytest``: the configured test paths, nothing selected or deselected."""
    source = getattr(config, "args_source", None)
    return (source is not None and source.name == "TESTPATHS" and not config.option.keyword
            and not config.option.markexpr and not config.getoption("deselect", None)
            and not config.getoption("lf", False) and not config.getoption("exitfirst", False))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """Writes this run's totals; on a whole-suite run, fails it when a file is over budget."""
    if hasattr(session.config, "workerinput") or not CPU_TOTALS:
        return
    import json

    import budgets

    budgets.TOTALS.parent.mkdir(exist_ok=True)
    budgets.TOTALS.write_text(json.dumps(dict(sorted(CPU_TOTALS.items())), indent=1) + "\n")
    if _whole_suite(session.config):
        OVER_BUDGET[:] = budgets.over_budget(CPU_TOTALS, budgets.read_budgets())
        if OVER_BUDGET and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if OVER_BUDGET:
        terminalreporter.section("test files over their CPU budget (tests/budgets.py)", red=True)
        for line in OVER_BUDGET:
            terminalreporter.line(line)
