"""timm's own model tests pass on our models: ``tests/test_models.py`` of the installed timm's
source distribution, run through ``tools/timm_adapter.py`` (timm's factory swapped for
``vit_scratch.create_model``, ``list_models`` restricted to the names both libraries have,
nothing else), by ``tools/timm_suite.py``.

CI runs the cut that tool runs by default: every applicable test on one name per architecture
(``timm_suite.representatives``), but for the one test timm's own CI leaves out too
(``timm_suite.LEFT_OUT_OF_CI``).  ``python tools/timm_suite.py --full`` runs every applicable
test on every shared name (docs/library.md, "timm's test suite").  The source
distribution is fetched once from the package registry into ``~/.cache/vit-scratch``; without
registry and cache the test skips and says why.
"""
import collections
import json
from pathlib import Path

import pytest

from tools import timm_suite

#: The tests of timm's test_models.py that apply to every family: each must pass for each
#: family's names (or be skipped by timm's own size limits, for the names over them).
CORE = ("test_model_forward", "test_model_backward", "test_model_default_cfgs_non_std",
        "test_model_load_pretrained", "test_model_forward_torchscript",
        "test_model_forward_intermediates_features", "test_model_forward_intermediates",
        "test_model_forward_fx", "test_model_backward_fx", "test_model_forward_fx_torchscript")
#: The reasons timm's tests give when they skip one of our names: its size limits.
TIMM_SKIPS = ("Fixed input size model > limit.",)


@pytest.fixture(scope="module")
def report():
    try:
        tests = timm_suite.fetch_tests()
    except timm_suite.Unavailable as why:
        pytest.skip(str(why))
    names = timm_suite.representatives(timm_suite.shared_names())
    return timm_suite.run(tests, names=names, leave_out=timm_suite.LEFT_OUT_OF_CI)


def test_every_applicable_timm_test_passes(report):
    failed = [i for i in report["items"] if i["outcome"] == "failed"]
    assert not failed, "\n\n".join(f"{i['nodeid']}\n{i['reason'][-2000:]}" for i in failed) + \
        f"\n{report['output_tail']}"
    assert report["exitstatus"] == 0, report["output_tail"]


def test_each_family_passes_each_core_test(report):
    """Not a vacuous run: every core test ran and passed for every family's representative
    (a family whose names are all over timm's size limit for a test is skipped by timm)."""
    names = timm_suite.representatives(timm_suite.shared_names())
    ran, collected = collections.defaultdict(set), collections.defaultdict(set)
    for item in report["items"]:
        name = item["name"].partition(".")[0]
        collected[item["test"]].add(name)
        if item["outcome"] == "passed":
            ran[item["test"]].add(name)
    core = [test for test in CORE if test not in timm_suite.LEFT_OUT_OF_CI]
    # a name timm's own filters leave out of a test (deit_*_distilled_* for fx_torchscript) is
    # never collected for it; every name collected must pass, and every test pass somewhere
    missing = {test: sorted((set(names) & collected[test]) - ran[test]) for test in core
               if (set(names) & collected[test]) - ran[test]}
    assert not missing, missing
    assert all(ran[test] for test in core), {test: sorted(ran[test]) for test in core}


def test_skips_and_exclusions_are_timms_own(report):
    """What did not run is what timm itself leaves out: its size limits, its filters that
    exclude a family (``default_cfgs`` skips the non-standard models), its own models."""
    skips = {i["reason"] for i in report["items"] if i["outcome"] == "skipped"}
    assert skips <= set(TIMM_SKIPS), skips
    na = report["not_applicable"]
    assert na["test_model_default_cfgs"]["reason"] == "timm excludes this family"
    assert na["test_model_forward_features"]["reason"] == "timm excludes this family"
    assert na["test_model_inference"]["reason"] == "its models are timm's alone"  # test_* only
    assert "xcit_nano_12_p16_224" in na["test_prune_class_token_avg_pool"]["names"]


def test_the_committed_full_run_passed_on_every_shared_name():
    """The ``--full`` runs (every applicable test on every name both libraries have: about an
    hour on 2 cores, so not in CI), committed as benchmarks/results/timm_suite.json and shown
    in docs/library.md -- one run on every name, or runs on some names merged into it
    (``--merge``, every run kept): every shared name ran, nothing failed, and what timm skipped,
    its size limits skipped."""
    report = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" /
                         "timm_suite.json").read_text())
    assert report["exitstatus"] == 0
    assert report["written_by"].endswith("--json benchmarks/results/timm_suite.json")
    runs = timm_suite.runs(report)
    assert all(" --full" in run["written_by"] and run["exitstatus"] == 0 for run in runs)
    ran_by = [n for run in runs for n in run["names"]]
    assert sorted(ran_by) == sorted(set(ran_by))  # each name's items from one run
    items = [i for i in report["items"] if i["outcome"] != "not run"]
    assert {i["name"].partition(".")[0] for i in items if i["name"]} == set(ran_by)
    assert not [i["nodeid"] for i in items if i["outcome"] == "failed"]
    assert {i["reason"] for i in items if i["outcome"] == "skipped"} <= set(TIMM_SKIPS)
    assert {i["name"].partition(".")[0] for i in items if i["name"]} == set(
        timm_suite.shared_names())
    ran = {i["test"] for i in items if i["outcome"] == "passed"}
    assert set(CORE) | set(timm_suite.LEFT_OUT_OF_CI) <= ran


def test_a_run_on_some_names_merges_into_a_saved_report():
    """``--merge``: the names run replace their items, the other names keep theirs (a run on
    some names reports the others' items "not run"); a test is not applicable only if it
    applies to no name of either run; every run is kept with its names (a name re-run leaves
    the earlier run's list), and the seconds add up."""
    def item(name, outcome="passed"):
        return {"test": "test_model_forward", "name": name, "family": "VisionTransformer",
                "outcome": outcome, "reason": "", "nodeid": f"t[{name}]"}

    saved = {"benchmark": "timm_suite", "timm_version": "1.0", "exitstatus": 0, "seconds": 10.0,
             "written_by": "python tools/timm_suite.py --full --json r.json", "output_tail": "a",
             "items": [item("a"), item("b", "failed")],
             "not_applicable": {"t8": {"reason": "timm excludes this family", "names": []},
                                "t9": {"reason": "its models are timm's alone", "names": ["x"]}}}
    new = {"timm_version": "1.0", "exitstatus": 0, "seconds": 5.0, "output_tail": "b",
           "items": [item("a", "not run"), item("b"), item("c.tag")],  # a: outside --names
           "not_applicable": {"t9": {"reason": "its models are timm's alone", "names": ["y"]}}}
    command = "python tools/timm_suite.py --full --names b c --merge r.json --json r.json"
    merged = timm_suite.merge(saved, new, command)
    assert [(i["name"], i["outcome"]) for i in merged["items"]] == [
        ("a", "passed"), ("b", "passed"), ("c.tag", "passed")]
    assert merged["not_applicable"] == {"t9": {"reason": "its models are timm's alone",
                                               "names": ["x", "y"]}}
    assert [(r["written_by"], r["names"]) for r in timm_suite.runs(merged)] == [
        (saved["written_by"], ["a"]), (command, ["b", "c"])]
    assert merged["seconds"] == 15.0 and merged["written_by"] == command
    with pytest.raises(ValueError, match="cannot merge a run of timm 2.0 into a report of timm "
                                         "1.0"):
        timm_suite.merge(saved, dict(new, timm_version="2.0"), command)
