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
    """The last ``--full`` run (every applicable test on every name both libraries have: about
    an hour on 2 cores, so not in CI), committed as benchmarks/results/timm_suite.json and shown
    in docs/library.md: it ran on every shared name, nothing failed, and what timm skipped, its
    size limits skipped."""
    report = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" /
                         "timm_suite.json").read_text())
    assert report["exitstatus"] == 0 and report["written_by"].endswith("--full --json "
                                                                       "benchmarks/results/timm_suite.json")
    items = [i for i in report["items"] if i["outcome"] != "not run"]
    assert not [i["nodeid"] for i in items if i["outcome"] == "failed"]
    assert {i["reason"] for i in items if i["outcome"] == "skipped"} <= set(TIMM_SKIPS)
    assert {i["name"].partition(".")[0] for i in items if i["name"]} == set(
        timm_suite.shared_names())
    ran = {i["test"] for i in items if i["outcome"] == "passed"}
    assert set(CORE) | set(timm_suite.LEFT_OUT_OF_CI) <= ran
