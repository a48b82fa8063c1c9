"""timm's own model tests, run on vit-scratch's models: ``tests/test_models.py`` of the installed
timm's source distribution, through ``tools/timm_adapter.py`` (timm's factory swapped for ours,
nothing else).

    python tools/timm_suite.py             # the CI cut (what tests/test_timm_suite.py runs)
    python tools/timm_suite.py --full      # every applicable test on every shared name
    python tools/timm_suite.py --full --table  # ... and the table, timm test × family (Markdown)
    python tools/timm_suite.py --full --json timm_suite.json   # every item's outcome
    python tools/timm_suite.py --report timm_suite.json --table   # the table of a saved run
    python tools/timm_suite.py --full --names deit3_small_patch16_224 --merge timm_suite.json \
        --json timm_suite.json      # every test on some names, merged into a saved full run

1. **Fetch** (once): ``pip download --no-binary :all: --no-deps timm==<installed version>`` into
   ``~/.cache/vit-scratch/timm-<version>/`` (``$XDG_CACHE_HOME`` if set), and its ``tests/``
   unpacked there.  Without the package registry and without the cache there is nothing to run:
   ``fetch_tests`` raises :class:`Unavailable`, which the test turns into a skip.
2. **Run**: ``python -m pytest <cache>/tests/test_models.py -p timm_adapter`` in a subprocess
   (timm's module-level settings stay out of the caller), offline: ``HF_HUB_OFFLINE=1`` and a
   private ``HF_HUB_CACHE`` where the adapter puts stand-in weights (timm's own state_dict of
   the name) for ``pretrained=True``.
3. **Report**: every item's outcome (JSON), and a table, timm test × family.  ``--merge`` puts
   a run on some names into a saved report (:func:`merge`): their items replace that report's
   items of the same names, and the report keeps every run that wrote it (``runs``: command,
   names, seconds), so a name added later joins the full run without repeating it.

The CI cut: every applicable test on one name per architecture -- the smallest shared name of
each set of names with the same state_dict key layout (``representatives``: DeiT-Ti (the
ViT-Ti architecture), CaiT-XXS24, CoaT-Lite Tiny, CoaT Tiny, and any new family or variant the
moment timm and vit-scratch share it) -- except ``LEFT_OUT_OF_CI``, which timm's own CI leaves
out too.  ``--full`` runs every applicable test on every shared name.
"""
from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Tests the CI cut leaves out: test_prune_intermediate_layers_contract prunes a copy of the
#: model at every feature index (the costliest test here, 12 copies for a ViT); timm's own CI
#: does not run it either ("no marker, slow ... excluded from CI for now").  And
#: test_model_backward_fx, a quarter of the cut's CPU time on 2 cores: the fx trace it
#: differentiates is the one test_model_forward_fx checks, and --full runs it.
LEFT_OUT_OF_CI = ("test_prune_intermediate_layers_contract", "test_model_backward_fx")


class Unavailable(RuntimeError):
    """timm's tests cannot be had: no registry, and no cached copy."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vit-scratch"


def fetch_tests(version: str | None = None, cache: Path | None = None) -> Path:
    """The ``tests/`` folder of timm ``version`` (default: the installed one)'s source
    distribution, from the cache or downloaded into it with ``pip download``."""
    version = version or importlib.metadata.version("timm")
    root = (cache or cache_dir()) / f"timm-{version}"
    tests = root / "tests"
    if (tests / "test_models.py").is_file():
        return tests
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
               "--quiet", "--disable-pip-version-check", "-d", tmp, f"timm=={version}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise Unavailable(f"pip download timm=={version} took over 300 s (no package "
                              f"registry?) and {tests} is not cached") from None
        sdists = list(Path(tmp).glob("timm-*.tar.gz"))
        if done.returncode or not sdists:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise Unavailable(f"pip download timm=={version} failed ({last[0]}) and {tests} is "
                              f"not cached: timm's tests cannot be run without the registry")
        with tarfile.open(sdists[0]) as sdist:
            prefix = f"timm-{version}/tests/"
            members = [m for m in sdist.getmembers() if m.name.startswith(prefix) and m.isfile()]
            staging = Path(tmp) / "unpacked"
            for m in members:
                m.name = m.name[len(prefix):]
                sdist.extract(m, staging / "tests", filter="data")
        (staging / "tests").rename(tests)
    return tests


def shared_names() -> list[str]:
    """vit-scratch's registered names that timm also has."""
    import timm

    import vit_scratch

    known = set(timm.list_models())
    return [n for n in vit_scratch.list_models() if n in known]


def representatives(names) -> list[str]:
    """One name per architecture: names whose state_dicts have the same keys (block indices
    aside) are one architecture at different sizes; the one with the fewest parameters stands
    for them."""
    from vit_scratch import models
    from vit_scratch.specs.base import num_params

    groups = collections.defaultdict(list)
    for name in names:
        family, spec = models.lookup(name)
        shapes = spec.param_shapes(spec.default)
        layout = frozenset(re.sub(r"\.\d+(?=\.)", ".#", k) for k in shapes)
        groups[(family.spec.__name__, layout)].append((num_params(shapes), name))
    return sorted(min(group)[1] for group in groups.values())


def run(tests: Path, names=None, leave_out=(), extra_args=(), timeout=6000) -> dict:
    """Run timm's test_models.py through the adapter: on ``names`` (None: every shared name),
    without the tests in ``leave_out``.  Returns the adapter's report (``items``: one entry per
    item; ``not_applicable``: the tests that apply to none of our names, and why)."""
    with tempfile.TemporaryDirectory() as tmp:
        report_path = Path(tmp) / "report.json"
        (Path(tmp) / "pytest.ini").write_text(
            "[pytest]\nfilterwarnings =\n    ignore::pytest.PytestUnknownMarkWarning\n"
            "    ignore::FutureWarning\n    ignore::UserWarning\n    ignore::DeprecationWarning\n")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT / "tools"), str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
        env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(Path(tmp) / "hub"),
                   VIT_SCRATCH_TIMM_REPORT=str(report_path),
                   VIT_SCRATCH_TIMM_LEAVE_OUT=",".join(leave_out))
        if names is None:
            env.pop("VIT_SCRATCH_TIMM_NAMES", None)
        else:
            env["VIT_SCRATCH_TIMM_NAMES"] = ",".join(names)
        for var in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_ADDOPTS"):
            env.pop(var, None)
        cmd = [sys.executable, "-m", "pytest", str(tests / "test_models.py"), "-p", "timm_adapter",
               "-c", str(Path(tmp) / "pytest.ini"), "--rootdir", str(tests.parent),
               "--import-mode=importlib", "-p", "no:cacheprovider", "-q", "-rfE",
               "--no-header", *extra_args]
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=tmp)
        elapsed = time.perf_counter() - start
        if not report_path.is_file():
            raise RuntimeError(f"timm's test run wrote no report (exit {done.returncode}):\n"
                               f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        report = json.loads(report_path.read_text())
    report["seconds"] = round(elapsed, 1)
    report["output_tail"] = done.stdout[-4000:]
    return report


def ran_names(report: dict) -> list[str]:
    """The names a report's items ran on (an item of another name, outside ``--names``, is
    reported "not run")."""
    return sorted({i["name"].partition(".")[0] for i in report["items"]
                   if i["name"] and i["outcome"] != "not run"})


def runs(report: dict) -> list[dict]:
    """The runs a report holds: its ``runs``, or, for a report of one run, that run (its
    command, the names it ran, its seconds, exit status and output)."""
    if report.get("runs"):
        return report["runs"]
    return [{"written_by": report.get("written_by", ""), "names": ran_names(report),
             "seconds": report.get("seconds"), "exitstatus": report.get("exitstatus"),
             "output_tail": report.get("output_tail", "")}]


def merge(saved: dict, new: dict, written_by: str) -> dict:
    """``new`` (a run on some names) put into ``saved`` (a report on others, or on these too):
    the items of the names ``new`` ran are ``new``'s, every other item is ``saved``'s; a test
    is not applicable if it applies to no name of either; the exit status is the worse, the
    seconds the sum, and ``runs`` lists every run, ``new``'s last (under its own command, or
    ``written_by``, the merging command, for a run that records none)."""
    if saved.get("timm_version") != new.get("timm_version"):
        raise ValueError(f"cannot merge a run of timm {new.get('timm_version')} into a report "
                         f"of timm {saved.get('timm_version')}: run --full again")
    names = set(ran_names(new))
    ran = [i for i in new["items"] if (i["name"] or "").partition(".")[0] in names]
    kept = [i for i in saved["items"] if (i["name"] or "").partition(".")[0] not in names]
    not_applicable = {}
    for test, entry in saved["not_applicable"].items():
        other = new["not_applicable"].get(test)
        if other is not None and other["reason"] == entry["reason"]:
            not_applicable[test] = dict(entry, names=sorted(set(entry["names"]) |
                                                            set(other["names"])))
    new_runs = [dict(run, written_by=run["written_by"] or written_by) for run in runs(new)]
    earlier = [dict(run, names=[n for n in run["names"] if n not in names])
               for run in runs(saved)]
    every = [run for run in earlier if run["names"]] + new_runs
    return {**saved, "written_by": written_by, "items": kept + ran,
            "not_applicable": not_applicable,
            "exitstatus": max(saved["exitstatus"], new["exitstatus"]),
            "seconds": round(sum(run["seconds"] for run in every), 1),
            "output_tail": new["output_tail"], "runs": every}


def table(report: dict) -> dict[str, dict[str, str]]:
    """timm test -> family -> one cell: "n passed", timm's skips with their reason, failures,
    or "not applicable (reason)"."""
    items = [i for i in report["items"] if i["outcome"] != "not run"]
    families = sorted({i["family"] for i in report["items"] if i["family"]})
    rows: dict[str, dict[str, str]] = {}
    tests = list(dict.fromkeys([i["test"] for i in items] + list(report["not_applicable"])))
    for test in tests:
        row = {}
        for fam in families:
            mine = [i for i in items if i["test"] == test and i["family"] == fam]
            if not mine:
                na = report["not_applicable"].get(test)
                if any(i["test"] == test for i in items):
                    row[fam] = "not applicable (timm excludes this family)"
                elif na:
                    row[fam] = f"not applicable ({na['reason']})"
                continue
            counts = collections.Counter(i["outcome"] for i in mine)
            names = {i["name"] for i in mine}
            parts = [f"{counts['passed']} passed"] if counts["passed"] else []
            for reason, n in collections.Counter(i["reason"] for i in mine
                                                 if i["outcome"] == "skipped").items():
                parts.append(f"{n} skipped by timm: {reason}")
            if counts["failed"]:
                parts.append(f"{counts['failed']} FAILED")
            row[fam] = f"{'; '.join(parts)} ({len(names)} name{'s' * (len(names) > 1)})"
        rows[test] = row
    return rows


def markdown(report: dict) -> str:
    """The table as Markdown: the tests that apply to a family first, then the others grouped."""
    rows = table(report)
    families = sorted({i["family"] for i in report["items"] if i["family"]})
    applied = {t: r for t, r in rows.items() if any("passed" in c or "FAILED" in c or "skipped" in c
                                                     for c in r.values())}
    lines = ["| timm test | " + " | ".join(families) + " |",
             "|---|" + "---|" * len(families)]
    for test, row in applied.items():
        lines.append(f"| {test} | " + " | ".join(row.get(f, "") for f in families) + " |")
    others = collections.defaultdict(list)
    for test, row in rows.items():
        if test not in applied:
            others[next(iter(row.values()), "not applicable")].append(test)
    for cell, tests in others.items():
        lines.append(f"| {len(tests)} other tests: {', '.join(sorted(tests))} | "
                     + " | ".join(cell for _ in families) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true",
                        help="every applicable test on every shared name (the CI cut otherwise)")
    parser.add_argument("--names", nargs="+", help="run on these names only (with --full: "
                        "every test on them)")
    parser.add_argument("--json", help="write the report (every item's outcome) to this file")
    parser.add_argument("--table", "--markdown", dest="table", action="store_true",
                        help="print the table, timm test × family, as Markdown")
    parser.add_argument("--report", help="no run: read this saved report (--json) instead")
    parser.add_argument("--merge", help="merge the run into this saved report (its items of "
                        "the names run are replaced; with --json, written with every run kept)")
    parser.add_argument("--timeout", type=float, default=6000,
                        help="seconds the run may take before it is stopped (default 6000)")
    parser.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = parser.parse_args(argv)
    names = args.names or (None if args.full else representatives(shared_names()))
    if args.report:
        report = json.loads(Path(args.report).read_text())
    else:
        report = run(fetch_tests(), names=names, leave_out=() if args.full else LEFT_OUT_OF_CI,
                     extra_args=args.pytest_args, timeout=args.timeout)
    written_by = "python " + shlex.join(sys.argv)
    if args.merge:
        report = merge(json.loads(Path(args.merge).read_text()),
                       report if args.report else dict(report, written_by=written_by),
                       written_by)
    if args.json:
        report.update(benchmark="timm_suite", written_by=written_by)
        Path(args.json).write_text(json.dumps(report, indent=1))
    counts = collections.Counter(i["outcome"] for i in report["items"])
    ran = ran_names(report)
    print(f"timm {report['timm_version']}: {dict(counts)} in {report['seconds']} s "
          f"(names: {', '.join(ran)})")
    if report.get("exitstatus") == 2:  # pytest's "interrupted"
        print("interrupted: only the tests listed ran (pytest stopped before the others)")
    if args.table:
        print(markdown(report))
    else:
        for test, row in table(report).items():
            print(test, json.dumps(row))
    for item in report["items"]:
        if item["outcome"] == "failed":
            print(f"\nFAILED {item['nodeid']}\n{item['reason'][-1500:]}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
