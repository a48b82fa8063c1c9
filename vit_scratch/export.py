"""Export a trained model for deployment, each file checked against the model it came from.

    python -m vit_scratch.export runs/pets                      # -> runs/pets/export/
    python -m vit_scratch.export runs/pets/best.safetensors --out deploy/
    python -m vit_scratch.export runs/pets --formats onnx

RUN is a run folder (its selected checkpoint) or a checkpoint file alone (its metadata names the
model, the preprocessing and the classes).  Writes into ``--out`` (default: RUN/export, or
``export/`` beside a checkpoint file), replacing an earlier export (its files of formats not
written this time are removed):

    model.onnx            ONNX (PyTorch's exporter built on torch.export), for onnxruntime and
                          the other ONNX runtimes
    model.torchscript.pt  TorchScript (torch.jit.trace), for torch.jit.load and LibTorch
    model.pt2             the torch.export program (torch.export.load), TorchScript's successor
    export.json           what they take and give -- images (batch, C, H, W) float32, normalised
                          with the preprocessing it lists, and logits (batch, classes) -- the class
                          names, and each file's check

Each file takes any batch size (its first dimension is free) and holds the model in eval mode.
Before it is written, each is read back and run on random images at three batch sizes (2, the
example's; 1; 3), and its logits must equal the PyTorch model's within ``TOLERANCE`` times the
largest logit (onnxruntime runs the ONNX file); otherwise nothing is written and the command
says which file differs, by how much.

Infrastructure, not teaching code: PyTorch's exporters (``torch.export``, ``torch.jit.trace``,
``torch.onnx.export``) and onnxruntime for the check; ONNX needs the ``[export]`` extra
(onnx, onnxscript, onnxruntime).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import warnings
from pathlib import Path

import torch

from . import run_folder
from .extras import require

#: Each format and its file.
FORMATS = {"onnx": "model.onnx", "torchscript": "model.torchscript.pt", "pt2": "model.pt2"}
MANIFEST = "export.json"
#: The batch the model is exported with, then the batch sizes every file is checked at.
EXAMPLE_BATCH = 2
CHECKED_BATCHES = (EXAMPLE_BATCH, 1, 3)
#: Largest |exported - eager| allowed, relative to the largest |logit| (at least 1): float32
#: kernels that sum in another order (onnxruntime's) differ by about 1e-7 of the scale.
TOLERANCE = 1e-4


def export_folder(run, out=None) -> Path:
    """Where the files go: ``out``, or RUN/export (a run folder), or ``export/`` beside a
    checkpoint file."""
    if out is not None:
        return Path(out)
    run = Path(run)
    return (run if run.is_dir() else run.parent) / run_folder.EXPORT


def check_formats(formats) -> list[str]:
    """``formats`` as a list of known names, in :data:`FORMATS`' order, without repeats."""
    if isinstance(formats, str):
        formats = [f.strip() for f in formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"--formats must be one or more of {', '.join(FORMATS)} (comma-"
                         f"separated), got {','.join(map(str, formats)) or repr('')}")
    return [f for f in FORMATS if f in formats]


def example_images(model, batch: int, seed: int) -> torch.Tensor:
    """Random normal images of the model's input size: what normalised pictures look like to
    the model (mean 0, std 1 per channel)."""
    c, h, w = model.pretrained_cfg["input_size"]
    return torch.randn(batch, c, h, w, generator=torch.Generator().manual_seed(seed))


def largest_difference(run, model, batches, file: str) -> float:
    """The largest |run(x) - model(x)| over ``batches``, relative to the largest |logit| (at
    least 1); a ``ValueError`` naming ``file`` beyond :data:`TOLERANCE` or for a wrong shape."""
    worst = 0.0
    for x in batches:
        with torch.no_grad():
            want, got = model(x), torch.as_tensor(run(x))
        if tuple(got.shape) != tuple(want.shape):
            raise ValueError(f"{file} gives logits of shape {tuple(got.shape)} for a batch of "
                             f"{len(x)}, the model {tuple(want.shape)}; nothing was written")
        scale = max(1.0, float(want.abs().max()))
        error = float((got.float() - want).abs().max()) / scale
        if not error <= TOLERANCE:
            raise ValueError(f"{file} gives logits that differ from the PyTorch model's by "
                             f"{error:.3g} of the largest logit at batch {len(x)} (allowed: "
                             f"{TOLERANCE:g}); nothing was written")
        worst = max(worst, error)
    return worst


def _write_onnx(program, example, path: Path):
    torch.onnx.export(program, (example,), str(path), input_names=["images"],
                      output_names=["logits"], external_data=False, verbose=False)
    ort = require("onnxruntime", "--formats onnx (checking the ONNX file)")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"images": x.numpy()})[0]


def _write_torchscript(model, example, path: Path):
    with warnings.catch_warnings():
        # PyTorch marks TorchScript deprecated (torch.export is its successor: model.pt2)
        warnings.filterwarnings("ignore", "`torch.jit.(trace|load)", FutureWarning)
        torch.jit.trace(model, example).save(str(path))
        return torch.jit.load(str(path))


def _write_pt2(program, example, path: Path):
    torch.export.save(program, str(path))
    return torch.export.load(str(path)).module()


def export_run(run, out=None, formats=tuple(FORMATS), log=print) -> dict:
    """Export the model of ``run`` (a run folder or a checkpoint file) in ``formats``
    (:data:`FORMATS`' names) into ``out`` (default: :func:`export_folder`), each file checked
    against the PyTorch model at :data:`CHECKED_BATCHES`; prints a line per file.  Returns what
    export.json holds."""
    formats = check_formats(formats)
    if "onnx" in formats:  # missing packages: said before anything is done
        for module in ("onnx", "onnxscript", "onnxruntime"):
            require(module, "--formats onnx")
    folder = export_folder(run, out)
    run_folder.check_output_folder(folder, ", ".join([*map(FORMATS.get, formats), MANIFEST]))
    model, checkpoint, _ = run_folder.open_run(run, "cpu")
    model = model.float().eval()
    example = example_images(model, EXAMPLE_BATCH, seed=0)
    batches = [example] + [example_images(model, b, seed=b) for b in CHECKED_BATCHES[1:]]
    program = None
    if {"onnx", "pt2"} & set(formats):
        program = torch.export.export(
            model, (example,), dynamic_shapes={"images": {0: torch.export.Dim("batch")}})
    c, h, w = model.pretrained_cfg["input_size"]
    log(f"{checkpoint}: {model.pretrained_cfg['architecture']}, images (batch, {c}, {h}, {w}), "
        f"{model.num_classes} classes")
    writers = {"onnx": lambda p: _write_onnx(program, example, p),
               "torchscript": lambda p: _write_torchscript(model, example, p),
               "pt2": lambda p: _write_pt2(program, example, p)}
    files = {}
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".export-", dir=folder.parent) as tmp:
        for fmt in formats:
            name = FORMATS[fmt]
            run_file = writers[fmt](Path(tmp) / name)
            error = largest_difference(run_file, model, batches, name)
            files[name] = {"format": fmt, "checked_batches": list(CHECKED_BATCHES),
                           "largest_difference": error}
            log(f"  {name:<21} equal to the PyTorch model at batch sizes "
                f"{', '.join(map(str, CHECKED_BATCHES))} (largest difference {error:.2g}, "
                f"relative to the largest logit)")
        manifest = _manifest(model, checkpoint, files)
        run_folder.write_json(manifest, Path(tmp) / MANIFEST)
        folder.mkdir(exist_ok=True)
        for name in [*files, MANIFEST]:
            os.replace(Path(tmp) / name, folder / name)
        for name in set(FORMATS.values()) - set(files):  # an earlier export's other files
            (folder / name).unlink(missing_ok=True)
    log(f"-> {folder}")
    return manifest


def _manifest(model, checkpoint, files: dict) -> dict:
    pcfg = model.pretrained_cfg
    c, h, w = pcfg["input_size"]
    return {
        "model_name": pcfg["architecture"],
        "checkpoint": str(checkpoint),
        "input": {"name": "images", "shape": ["batch", c, h, w], "dtype": "float32"},
        "output": {"name": "logits", "shape": ["batch", model.num_classes],
                   "dtype": "float32", "probabilities": "softmax over the last dimension"},
        "preprocessing": {k: run_folder.json_ready(pcfg[k]) for k in
                          ("input_size", "mean", "std", "crop_pct", "interpolation",
                           "crop_mode") if k in pcfg},
        "class_names": list(model.class_names),
        "files": files,
        "torch": torch.__version__,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.export", description=__doc__.split("\n\n")[0],
        formatter_class=run_folder.HelpFormatter)
    parser.add_argument("run", metavar="RUN_OR_CHECKPOINT",
                        help="a run folder (its selected checkpoint) or a checkpoint file")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="where the files go, replacing those of an earlier export "
                             "(default: RUN/export, or export/ beside a checkpoint file)")
    parser.add_argument("--formats", default=",".join(FORMATS), metavar="LIST",
                        help=f"which files, comma-separated: {', '.join(FORMATS)}")
    return parser


def main(argv=None) -> dict:
    return run_folder.run_command(build_parser(), argv,
                                  lambda a: export_run(a.run, a.out, a.formats))


if __name__ == "__main__":
    main()
