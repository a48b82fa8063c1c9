"""A pytest plugin that runs timm's own ``tests/test_models.py`` on vit-scratch's models.

Loaded by ``tools/timm_suite.py`` (``python -m pytest .../tests/test_models.py -p timm_adapter``)
before the test module is imported, it swaps timm's factory for ours and changes nothing else:

* ``timm.create_model`` -> ``vit_scratch.create_model`` (same keywords: ``pretrained``,
  ``num_classes``, ``in_chans``, ``global_pool``, ``features_only``, ``device``, ...);
* ``timm.list_models`` and ``timm.list_pretrained`` -> timm's own answer (its filters, its
  exclusions, tags included) restricted to the names vit-scratch also has;
* ``timm.get_pretrained_cfg_value`` -> vit-scratch's ``pretrained_cfg`` of the name.

Every other name test_models.py uses (``timm.models.FeatureInfo``, ``group_parameters``,
``get_notrace_modules``, its size limits and filters) is timm's own, unchanged.

The Hub is not reachable here, so ``pretrained=True`` reads its file from a private Hugging
Face cache (``HF_HUB_CACHE``, ``HF_HUB_OFFLINE=1``, set by the runner) where this plugin puts,
as the name's ``model.safetensors``, timm's own randomly initialised state_dict of that name:
the test then loads timm-format RGB weights into a model of another ``in_chans``, offline.

Collection: an item whose model is one vit-scratch has runs; the others (timm's models that
vit-scratch does not have, tests without a model) are deselected and recorded as not
applicable.  ``VIT_SCRATCH_TIMM_NAMES`` (comma-separated) limits the items to those names, and
``VIT_SCRATCH_TIMM_LEAVE_OUT`` leaves out those tests (both recorded as "not run").  Every
item's outcome goes to the JSON file ``VIT_SCRATCH_TIMM_REPORT``.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import time

import pytest
import timm
import timm.models

import vit_scratch
from vit_scratch import models as vs_models

_timm_create_model = timm.create_model
_timm_list_models = timm.list_models
_timm_list_pretrained = timm.list_pretrained


def shared(name) -> bool:
    """Whether vit-scratch has ``name`` (``arch`` or ``arch.tag`` with its weights' tag)."""
    try:
        vs_models.lookup(name)
    except ValueError:
        return False
    return True


def family(name: str) -> str:
    """The family column of a name: its model class (``VisionTransformer``, ``Cait``, ...)."""
    return vs_models.family_name(vs_models.lookup(name)[0])


class _Names(list):
    """timm's answer restricted to the shared names; ``excluded``: whether timm's
    ``exclude_filters`` removed shared names from it (else timm's filter named none of ours)."""

    excluded = False


def _restricted(timm_list, args, kwargs) -> _Names:
    names = _Names(n for n in timm_list(*args, **kwargs) if shared(n))
    if not names and kwargs.get("exclude_filters"):
        names.excluded = any(shared(n) for n in timm_list(*args, **{**kwargs, "exclude_filters": ""}))
    return names


def list_models(*args, **kwargs):
    return _restricted(_timm_list_models, args, kwargs)


def list_pretrained(*args, **kwargs):
    return _restricted(_timm_list_pretrained, args, kwargs)


def get_pretrained_cfg_value(model_name: str, cfg_key: str):
    return vit_scratch.get_pretrained_cfg(model_name).get(cfg_key)


def create_model(model_name: str, pretrained: bool = False, **kwargs):
    if pretrained:
        stand_in_weights(model_name)
    return vit_scratch.create_model(model_name, pretrained=pretrained, **kwargs)


def stand_in_weights(name: str) -> str:
    """The Hugging Face cache entry of ``name``'s weights, written once from timm's own model
    of that name (random weights; timm's keys, shapes and RGB first convolution)."""
    from safetensors.torch import save_file

    if os.environ.get("HF_HUB_OFFLINE") != "1" or not os.environ.get("HF_HUB_CACHE"):
        raise RuntimeError("timm_adapter: pretrained=True needs HF_HUB_OFFLINE=1 and a private "
                           "HF_HUB_CACHE (tools/timm_suite.py sets both)")
    spec = vs_models.lookup(name)[1]
    repo = spec.pretrained_cfg["hf_hub_id"]
    revision = "0" * 40
    folder = os.path.join(os.environ["HF_HUB_CACHE"], "models--" + repo.replace("/", "--"))
    path = os.path.join(folder, "snapshots", revision, "model.safetensors")
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.makedirs(os.path.join(folder, "refs"), exist_ok=True)
        state = _timm_create_model(spec.name, pretrained=False).state_dict()
        save_file({k: v.detach().clone().contiguous() for k, v in state.items()}, path)
        with open(os.path.join(folder, "refs", "main"), "w") as f:
            f.write(revision)
    return path


# The swap, before test_models.py imports these names from timm.
timm.create_model = create_model
timm.list_models = list_models
timm.list_pretrained = list_pretrained
timm.get_pretrained_cfg_value = get_pretrained_cfg_value


def _names(var: str) -> set[str] | None:
    value = os.environ.get(var)
    return None if value is None else {v for v in value.split(",") if v}


def _mentions_shared_name(function) -> bool:
    """Whether a test without a model parameter names a vit-scratch model in its code."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return False
    return any(shared(s) for s in re.findall(r"['\"]([A-Za-z0-9_.]+)['\"]", source))


_REPORT = {"items": [], "not_applicable": {}}


def _record_not_applicable(test: str, reason: str, name=None) -> None:
    entry = _REPORT["not_applicable"].setdefault(test, {"reason": reason, "names": []})
    if name is not None:
        entry["names"].append(str(name))


def pytest_collection_modifyitems(session, config, items):
    names, leave_out = _names("VIT_SCRATCH_TIMM_NAMES"), _names("VIT_SCRATCH_TIMM_LEAVE_OUT") or set()
    keep, drop = [], []
    for item in items:
        test = getattr(item, "originalname", item.name)
        params = getattr(getattr(item, "callspec", None), "params", {})
        skip = item.get_closest_marker("skip")
        if skip and str(skip.kwargs.get("reason", "")).startswith("got empty parameter set"):
            # none of our names in the parametrization: timm's filters exclude our families, or
            # the test is about other models (timm's test_* models, ...)
            excluded = any(getattr(m.args[1], "excluded", False)
                           for m in item.iter_markers("parametrize") if len(m.args) > 1)
            _record_not_applicable(test, "timm excludes this family" if excluded
                                   else "its models are timm's alone")
            drop.append(item)
        elif "model_name" not in params:
            if _mentions_shared_name(getattr(item, "function", None)):
                keep.append(item)
            else:
                _record_not_applicable(test, "builds only timm models vit-scratch does not have")
                drop.append(item)
        elif not shared(params["model_name"]):
            _record_not_applicable(test, "its models are timm's alone", params["model_name"])
            drop.append(item)
        elif test in leave_out or (names is not None
                                   and params["model_name"].partition(".")[0] not in names):
            _REPORT["items"].append(dict(test=test, nodeid=item.nodeid, name=params["model_name"],
                                         family=family(params["model_name"]), outcome="not run",
                                         reason="left out of this run", duration=0.0))
            drop.append(item)
        else:
            keep.append(item)
    items[:] = keep
    config.hook.pytest_deselected(items=drop)


def pytest_runtest_logreport(report):
    """One entry per item: its outcome (a failure in setup or teardown counts as failed)."""
    if report.when != "call" and not (report.failed or report.skipped):
        return
    item_name = report.nodeid.split("::")[-1]
    test = item_name.split("[")[0]
    name = None
    for entry in _CALLSPECS.get(report.nodeid, ()):
        name = entry
    reason = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = report.longrepr[2].removeprefix("Skipped: ")
    elif report.failed:
        reason = str(report.longrepr)[-3000:]
    _REPORT["items"].append(dict(
        test=test, nodeid=report.nodeid, name=name, family=family(name) if name else None,
        outcome=report.outcome, reason=reason, when=report.when,
        duration=round(report.duration, 3)))


_CALLSPECS: dict[str, tuple] = {}


def pytest_itemcollected(item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    name = params.get("model_name")
    if isinstance(name, str) and shared(name):
        _CALLSPECS[item.nodeid] = (name,)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each item's processor time (all threads; with one thread about its wall time on an idle
    machine), added to its entries."""
    start, first = time.process_time(), len(_REPORT["items"])
    yield
    for entry in _REPORT["items"][first:]:
        entry["cpu_seconds"] = round(time.process_time() - start, 3)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("VIT_SCRATCH_TIMM_REPORT")
    if path:
        _REPORT["timm_version"] = timm.__version__
        _REPORT["exitstatus"] = int(exitstatus)
        with open(path, "w") as f:
            json.dump(_REPORT, f, indent=1)
