"""Every family and variant exported four ways, each exported model equal to eager PyTorch at
a batch size other than the example's: ``torch.export`` with a dynamic batch
(``torch.export.Dim``), ``torch.jit.trace``, and ONNX both ways -- the TorchScript-based
exporter (``dynamo=False``, ``dynamic_axes``) and the ``torch.export``-based one
(``dynamo=True``, ``dynamic_shapes``), run in onnxruntime.  Then the export command,
``python -m vit_scratch.export RUN_OR_CHECKPOINT``.

The variants come from the registry: the registered names grouped by their line of models (the
name's first word: ``vit``, ``deit``, ``cait``, ``coat``, ...) and their state_dict's key
patterns (DeiT's distilled models have ``dist_token`` and ``head_dist``, CoaT has
``parallel_blocks`` and CoaT-Lite none); each group's smallest name (by parameter count) is
built small (``helpers.small_kwargs``).  A new family or variant is covered the moment it
registers its names.
"""
from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import torch

import vit_scratch
from helpers import max_abs_diff, small_kwargs
from vit_scratch.models import lookup
from vit_scratch.specs.base import num_params

onnx = pytest.importorskip("onnx", reason="the [test] extra brings onnx")
ort = pytest.importorskip("onnxruntime", reason="the [test] extra brings onnxruntime")

#: The example batch the models are exported with, and the other sizes they are run at.
EXPORT_BATCH = 2
OTHER_BATCHES = (1, 3)
#: Exported against eager: the largest difference of the float32 logits, relative to the largest
#: logit (at least 1); onnxruntime's kernels sum in another order.
TOLERANCE = 1e-5


def _pattern(key: str) -> str:
    return re.sub(r"\.\d+(?=\.)", ".#", key)


def variants() -> dict[str, str]:
    """``{variant: its smallest registered name}``: the names grouped by their line of models
    and the patterns of their state_dict keys (block indices dropped)."""
    groups: dict[tuple, list[tuple[int, str]]] = {}
    for name in vit_scratch.list_models():
        family, spec = lookup(name)
        shapes = family.spec.MODELS.param_shapes(spec.default)
        line = name.split("_")[0]
        key = (line, frozenset(_pattern(k) for k in shapes))
        groups.setdefault(key, []).append((num_params(shapes), name))
    out = {}
    for (line, _), members in sorted(groups.items(), key=lambda item: min(item[1])[1]):
        name = min(members)[1]
        label = line + ("_distilled" if "distilled" in name else "") + \
            ("_lite" if "_lite" in name else "")
        out[label if label not in out else f"{label}_{name}"] = name
    return out


VARIANTS = variants()


def test_the_variants_cover_every_line_of_models():
    """The grouping finds each variant of the acceptance list (DeiT III once it is
    registered), each represented by its smallest name."""
    expected = {"vit", "deit", "deit_distilled", "cait", "coat", "coat_lite"}
    if vit_scratch.list_models("deit3_*"):
        expected.add("deit3")
    assert expected <= set(VARIANTS), VARIANTS
    assert VARIANTS["deit_distilled"] == "deit_tiny_distilled_patch16_224"
    assert VARIANTS["coat"] == "coat_digits" and VARIANTS["coat_lite"] == "coat_lite_digits"


def _images(model, batch: int, seed: int = 0) -> torch.Tensor:
    c, h, w = model.pretrained_cfg["input_size"]
    return torch.randn(batch, c, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def exported(request):
    """A small model of the variant with random weights, in eval mode; its example batch and
    the other batches with their eager logits; its ``torch.export`` program (dynamic batch)."""
    name = VARIANTS[request.param]
    model = vit_scratch.create_model(name, **small_kwargs(name)).eval()
    vit_scratch.randomize_weights_(model, seed=0, std=0.1)  # logits of order 1
    example = _images(model, EXPORT_BATCH)
    batches = [_images(model, b, seed=b) for b in (EXPORT_BATCH,) + OTHER_BATCHES]
    with torch.no_grad():
        expected = [model(x) for x in batches]
    program = torch.export.export(model, (example,),
                                  dynamic_shapes={"images": {0: torch.export.Dim("batch")}})
    return dict(name=name, model=model, example=example, batches=batches, expected=expected,
                program=program)


def _check(run, exported, record_property) -> float:
    """The largest |exported - eager| over the example's batch and the other batches, relative
    to the largest logit (at least 1), kept as the test's ``largest_difference`` property
    (``pytest --junitxml`` reports it)."""
    errors = []
    scale = max(float(want.abs().max()) for want in exported["expected"])
    assert scale > 0.3  # logits that a wrong graph could not match by chance
    for x, want in zip(exported["batches"], exported["expected"]):
        got = run(x)
        assert tuple(got.shape) == tuple(want.shape), (exported["name"], got.shape, want.shape)
        errors.append(max_abs_diff(got, want) / max(1.0, scale))
    assert max(errors) <= TOLERANCE, (exported["name"], errors)
    record_property("largest_difference", max(errors))
    return max(errors)


def test_torch_export_with_a_dynamic_batch(exported, record_property):
    module = exported["program"].module()
    (batch,) = exported["program"].range_constraints.values()
    assert batch.lower <= 1 and batch.upper > 2 ** 31  # the batch is free, not fixed at 2
    with torch.no_grad():
        _check(module, exported, record_property)


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.trace_method` is deprecated:FutureWarning")
def test_torch_jit_trace(exported, record_property):
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)  # no size read as a constant
        traced = torch.jit.trace(exported["model"], exported["example"])
    with torch.no_grad():
        _check(traced, exported, record_property)


def _onnx_batch_dims(path) -> list:
    """The first dimension of the ONNX graph's input and output: a name if it is free."""
    graph = onnx.load(str(path)).graph
    return [v.type.tensor_type.shape.dim[0].dim_param or v.type.tensor_type.shape.dim[0].dim_value
            for v in (graph.input[0], graph.output[0])]


def _run_onnx(path):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"images": x.numpy()})[0]


@pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export"
                            ":DeprecationWarning")
def test_onnx_torchscript_exporter_with_dynamic_axes(exported, tmp_path, record_property):
    path = tmp_path / "model.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)
        torch.onnx.export(exported["model"], (exported["example"],), str(path), dynamo=False,
                          input_names=["images"], output_names=["logits"],
                          dynamic_axes={"images": {0: "batch"}, "logits": {0: "batch"}})
    assert _onnx_batch_dims(path) == ["batch", "batch"]
    _check(_run_onnx(path), exported, record_property)


def test_onnx_export_based_exporter_with_dynamic_shapes(exported, tmp_path, record_property):
    """The exporter built on ``torch.export`` (the program with its dynamic batch): the ONNX
    graph's batch is free, and onnxruntime runs it at other batch sizes."""
    path = tmp_path / "model.onnx"
    torch.onnx.export(exported["program"], (exported["example"],), str(path), dynamo=True,
                      input_names=["images"], output_names=["logits"], optimize=False,
                      verbose=False)
    batch, out = _onnx_batch_dims(path)
    assert isinstance(batch, str) and batch == out, (batch, out)
    _check(_run_onnx(path), exported, record_property)


def test_onnx_dynamo_exporter_keeps_the_batch_free(tmp_path):
    """``torch.onnx.export(model, dynamo=True, dynamic_shapes=...)``, the whole way: when
    ``torch.export`` could not keep the batch free, this exporter wrote a graph fixed at the
    example's batch without a word; now the batch is free."""
    name = VARIANTS["vit"]
    model = vit_scratch.create_model(name, **small_kwargs(name)).eval()
    example = _images(model, EXPORT_BATCH)
    path = tmp_path / "model.onnx"
    torch.onnx.export(model, (example,), str(path), dynamo=True, input_names=["images"],
                      output_names=["logits"], verbose=False,
                      dynamic_shapes={"images": {0: torch.export.Dim("batch")}})
    batch, _ = _onnx_batch_dims(path)
    assert isinstance(batch, str), f"the ONNX graph's batch is fixed at {batch}"
    x = _images(model, 3, seed=1)
    with torch.no_grad():
        assert max_abs_diff(_run_onnx(path)(x), model(x)) <= TOLERANCE


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:FutureWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.trace_method` is deprecated:FutureWarning")
def test_the_example_is_still_checked_while_exporting():
    """Under ``torch.export`` and ``torch.jit.trace`` the checks see the example: a wrong size
    is the eager one-line error, not a shape error inside the model."""
    name = VARIANTS["vit"]
    model = vit_scratch.create_model(name, **small_kwargs(name)).eval()
    c, h, w = model.pretrained_cfg["input_size"]
    wrong = torch.zeros(2, c, h + model.cfg.patch_size, w)
    with pytest.raises(ValueError, match="does not match the model's img_size"):
        torch.export.export(model, (wrong,), dynamic_shapes={"images": {0: torch.export.Dim("b")}})
    with pytest.raises(ValueError, match="does not match the model's img_size"):
        torch.jit.trace(model, wrong)
    with pytest.raises(ValueError, match=f"images have {c + 1} channels"):
        torch.jit.trace(model, torch.zeros(2, c + 1, h, w))


# --- the export command -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A run folder holding only a checkpoint (as after the first epoch): a one-block ViT of
    the digits' size with random weights and three named classes."""
    folder = tmp_path_factory.mktemp("run")
    model = vit_scratch.create_model("vit_digits", depth=1, num_classes=3).eval()
    vit_scratch.randomize_weights_(model, seed=1)
    vit_scratch.save_checkpoint(model, folder / "best.safetensors", class_names=["a", "b", "c"])
    return folder, model


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_export_command_writes_files_equal_to_the_model(checkpoint, capsys):
    """``python -m vit_scratch.export RUN`` writes the three files and export.json into
    RUN/export; each file, read back here, gives the model's logits at a batch size it was not
    exported with, and export.json says how to feed it."""
    from vit_scratch import export

    folder, model = checkpoint
    manifest = export.main([str(folder)])
    out = folder / "export"
    assert sorted(p.name for p in out.iterdir()) == sorted([*export.FORMATS.values(),
                                                            "export.json"])
    assert json.loads((out / "export.json").read_text()) == manifest
    assert manifest["input"]["shape"] == ["batch", 1, 24, 24]
    assert manifest["output"]["shape"] == ["batch", 3] and manifest["class_names"] == ["a", "b", "c"]
    assert manifest["preprocessing"]["mean"] == [0.0] and manifest["preprocessing"]["crop_pct"] == 1.0
    for entry in manifest["files"].values():
        assert entry["checked_batches"] == [2, 1, 3] and entry["largest_difference"] <= 1e-5
    x = torch.randn(5, 1, 24, 24, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        want = model(x)
        runs = {"onnx": _run_onnx(out / "model.onnx"),
                "torchscript": torch.jit.load(str(out / "model.torchscript.pt")),
                "pt2": torch.export.load(str(out / "model.pt2")).module()}
        for fmt, run in runs.items():
            assert max_abs_diff(run(x), want) <= TOLERANCE, fmt
    printed = capsys.readouterr().out
    assert printed.count("equal to the PyTorch model at batch sizes 2, 1, 3") == 3
    assert printed.rstrip().endswith(f"-> {out}")
    export.main([str(folder), "--formats", "torchscript"])  # replaces the whole export
    assert sorted(p.name for p in out.iterdir()) == ["export.json", "model.torchscript.pt"]


def test_export_command_writes_nothing_when_a_file_differs(checkpoint, tmp_path, monkeypatch,
                                                           capsys):
    """A file whose logits are not the model's (here: TorchScript traced from other weights) is
    a one-line error naming it, and nothing is written."""
    from vit_scratch import export

    folder, model = checkpoint
    other = vit_scratch.randomize_weights_(vit_scratch.create_model(
        "vit_digits", depth=1, num_classes=3).eval(), seed=2)
    write = export._write_torchscript
    monkeypatch.setattr(export, "_write_torchscript", lambda m, x, p: write(other, x, p))
    out = tmp_path / "deploy"
    with pytest.raises(SystemExit) as exit_info:
        export.main([str(folder / "best.safetensors"), "--out", str(out),
                     "--formats", "torchscript"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("python -m vit_scratch.export: error: model.torchscript.pt gives "
                            "logits that differ from the PyTorch model's by") and "\n" not in error
    assert error.endswith("nothing was written")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == []


@pytest.mark.parametrize("argv, message", [
    (["{missing}"], "no such run folder or checkpoint file"),
    (["{run}", "--formats", "onnx,tflite"], "--formats must be one or more of onnx, "
                                            "torchscript, pt2 (comma-separated), got onnx,tflite"),
    (["{run}", "--out", "{file}"], "is a file; the command writes a folder of files (model.onnx, "
                                   "model.torchscript.pt, model.pt2, export.json)"),
])
def test_export_command_bad_input_is_one_line(checkpoint, tmp_path, capsys, argv, message):
    from vit_scratch import export

    folder, _ = checkpoint
    (tmp_path / "notes.txt").write_text("mine")
    argv = [a.format(missing=tmp_path / "nowhere", run=folder, file=tmp_path / "notes.txt")
            for a in argv]
    with pytest.raises(SystemExit):
        export.main(argv)
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error


def test_a_run_replaced_with_overwrite_loses_its_export(tmp_path):
    """``--overwrite`` removes what the commands wrote into the run folder, the export too (it
    holds the replaced run's model)."""
    from vit_scratch import run_folder

    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "model.onnx").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("mine")
    run_folder.remove_run_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
