"""Checkpoint files, read safely: the format from the file's first bytes, PyTorch pickles read
with ``torch.load(weights_only=True)`` (and a pickle of Python objects never unpickled), the
metadata ``save_checkpoint`` records, and the state_dict inside a training script's wrapper.

    read_state_dict(path)    -> {key: tensor} on the CPU: safetensors, a PyTorch file, .npz
    read_model_info(path)    -> the model's name, config, preprocessing and class names
    recorded_grid(path)      -> the position embedding's patch grid, as recorded

What the file holds is checked against a model where it is loaded (``vit_scratch.weights``,
with the messages of ``vit_scratch.checkpoint_checks``).
"""
from __future__ import annotations

import argparse
import json
import os
import pickletools
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from .checkpoint_checks import CheckpointError, UnsafeCheckpointError

SAFETENSORS_SUFFIXES = {".safetensors"}
TORCH_SUFFIXES = {".pth", ".pt", ".bin", ".ckpt"}
#: Prefixes that wrappers add to every key: DataParallel/DDP and torch.compile.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")
#: Metadata key under which ``save_checkpoint`` records the patch grid of the position embedding.
GRID_METADATA_KEY = "pos_embed_grid"
#: Metadata keys under which ``save_checkpoint`` records what it takes to use a model file alone:
#: the registered name, the config's fields, the preprocessing (``pretrained_cfg``) and the
#: class names, each as JSON (:func:`config_to_json`).
MODEL_INFO_KEYS = ("model_name", "model_config", "pretrained_cfg", "class_names")


def config_to_json(config: dict) -> str:
    """A config's fields as JSON: tuples become lists, and the integer keys of a dict (CoaT's
    ``crpe_window``, ``{window: heads}``) strings, as JSON has them; :func:`config_from_json`
    turns them back."""
    return json.dumps(config)


def _int_keys(value):
    if isinstance(value, dict):
        return {int(k) if isinstance(k, str) and re.fullmatch(r"-?\d+", k) else k: _int_keys(v)
                for k, v in value.items()}
    return value


def config_from_json(text: str) -> dict:
    """:func:`config_to_json` read back: keys that are whole numbers become ints again (a
    config's lists stand for its tuples: the configs take either)."""
    return {k: _int_keys(v) for k, v in json.loads(text).items()}


def _describe_path(path: Path) -> str:
    return repr(str(path))


def checkpoint_format(path) -> str:
    """``'safetensors'``, ``'torch'`` or ``'npz'``, read from the file's first bytes; a
    ``CheckpointError`` (or ``FileNotFoundError``) saying what the path is otherwise."""
    path = Path(path)
    where = _describe_path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint file {where} does not exist")
    if path.is_dir():
        found = sorted(p.name for p in path.iterdir()
                       if p.suffix.lower() in SAFETENSORS_SUFFIXES | TORCH_SUFFIXES | {".npz"})
        hint = (f"; it holds {', '.join(found)}: pass one of those files" if found
                else "; expected a .safetensors or .pth file")
        raise CheckpointError(f"checkpoint path {where} is a folder, not a file{hint}")
    size = path.stat().st_size
    if size == 0:
        raise CheckpointError(f"checkpoint file {where} is empty (0 bytes): an interrupted "
                              f"download or save?")
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(b"PK\x03\x04"):  # a zip archive: torch.save's format, or NumPy's .npz
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except zipfile.BadZipFile:
            raise CheckpointError(f"checkpoint file {where} is a damaged or truncated zip "
                                  f"archive ({size} bytes)") from None
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise CheckpointError(f"checkpoint file {where} is a zip archive but neither a PyTorch "
                              f"checkpoint nor a NumPy .npz (it holds: {shown or 'nothing'})")
    if len(head) >= 9:
        header_len = int.from_bytes(head[:8], "little")
        if head[8:9] == b"{" and 2 <= header_len <= size - 8:
            return "safetensors"
        if head[8:9] == b"{":
            raise CheckpointError(f"checkpoint file {where} looks like a truncated safetensors "
                                  f"file (its header announces {header_len} bytes, the file has "
                                  f"{size})")
    if head[:1] == b"\x80":  # a pickle protocol opcode: torch.save's legacy format
        return "torch"
    if size <= PICKLE_SNIFF_BYTES and _is_plain_pickle(path):  # protocol 0 or 1: not torch.save's
        found = _pickle_globals(path)
        what = f" (it would import {found[0]})" if found else ""
        raise UnsafeCheckpointError(
            f"checkpoint file {where} is a pickle of Python objects{what}, not a PyTorch "
            f"checkpoint; vit_scratch never unpickles such files (that would run code chosen by "
            f"whoever made the file)")
    if head.startswith(b"version https://git-lfs"):
        raise CheckpointError(f"checkpoint file {where} is a Git LFS pointer, not the weights: "
                              f"fetch them with `git lfs pull`")
    if head.lstrip()[:1] == b"<":
        raise CheckpointError(f"checkpoint file {where} is an HTML or XML page, not weights "
                              f"(a failed download?)")
    raise CheckpointError(f"checkpoint file {where} is neither safetensors, nor a PyTorch "
                          f"file, nor a NumPy .npz (it starts with {head[:16]!r})")


#: Files up to this size that start like no known format are read as a possible pickle.
PICKLE_SNIFF_BYTES = 1 << 24


def _is_plain_pickle(path: Path) -> bool:
    """Whether the file parses, opcode by opcode, as one whole pickle (``pickletools`` reads the
    opcodes without running any of them)."""
    try:
        with open(path, "rb") as f:
            ops = list(pickletools.genops(f))
        return bool(ops) and ops[-1][0].name == "STOP"
    except Exception:  # noqa: BLE001 -- not a pickle
        return False


def _pickle_globals(path: Path) -> list[str]:
    """The ``module.name`` globals a pickle would import, in order (read, never run)."""
    found = []
    with open(path, "rb") as f:
        for op, arg, _ in pickletools.genops(f):
            if op.name in ("GLOBAL", "INST"):
                found.append(str(arg).replace(" ", "."))
    return found


def _torch_load(path: Path):
    """``torch.load(weights_only=True)``, with its errors told plainly (and without its advice
    to retry with ``weights_only=False``, which would run whatever code the file holds)."""
    where = _describe_path(path)
    try:
        # argparse.Namespace (the "args" of DeiT-style training checkpoints) only sets
        # attributes when unpickled, so it is allowed next to tensors and containers.
        # An open file, not the path: torch.load picks a reader by the suffix of a path.
        with torch.serialization.safe_globals([argparse.Namespace]), open(path, "rb") as f, \
                warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol")  # said below
            return torch.load(f, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 -- re-raised with a plain message
        text = str(err)
        if "Weights only load failed" in text:  # the pickle itself, not the file's length
            found = re.findall(r"GLOBAL ([\w.]+)", text)
            if found:
                what = (f"Python objects besides tensors and plain containers (the first of "
                        f"them: {found[0]})")
            else:
                detail = re.search(r"WeightsUnpickler error: \s*(.+)", text)
                what = (f"a pickle that the safe unpickler cannot read "
                        f"({detail.group(1).strip() if detail else 'unsupported'}: written with "
                        f"pickle.dump rather than torch.save, or holding more than tensors)")
            raise UnsafeCheckpointError(
                f"checkpoint file {where} holds {what}; vit_scratch reads PyTorch files with "
                f"weights_only=True and never runs code from a file.  Where the model lives, save "
                f"just its weights: vit_scratch.save_checkpoint(model, 'weights.safetensors')"
            ) from None
        first = text.strip().splitlines()[0][:200] if text.strip() else "no detail"
        raise CheckpointError(f"checkpoint file {where} is a damaged or truncated PyTorch file "
                              f"({type(err).__name__}: {first})") from None


def read_metadata(path) -> dict[str, str]:
    """The string metadata of a safetensors file (``{}`` for other formats)."""
    if checkpoint_format(path) != "safetensors":
        return {}
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except Exception as err:  # noqa: BLE001 -- safetensors' own error type
        raise CheckpointError(f"checkpoint file {_describe_path(Path(path))} is a damaged "
                              f"safetensors file ({err})") from None


def read_model_info(path) -> dict:
    """What ``save_checkpoint`` recorded about the model in a safetensors file:
    ``{"model_name": str, "model_config": dict, "pretrained_cfg": dict, "class_names": list}``,
    each ``None`` where the file does not record it (other formats record nothing).
    ``vit_scratch.create_model(info["model_name"], **info["model_config"])`` rebuilds the
    model the weights belong to.  (A ``model_config`` recorded as a Python literal, the
    ``repr`` of a dict, reads too.)"""
    metadata = read_metadata(path)
    info = dict.fromkeys(MODEL_INFO_KEYS)
    for key in MODEL_INFO_KEYS:
        text = metadata.get(key)
        if text is None:
            continue
        try:
            if key == "model_name":
                info[key] = text
            elif key == "model_config":
                info[key] = _read_config(text)
            else:
                info[key] = json.loads(text)
            wanted = {"model_config": dict, "pretrained_cfg": dict, "class_names": list}
            if key in wanted and not isinstance(info[key], wanted[key]):
                raise ValueError(key)
        except (ValueError, SyntaxError, TypeError, AttributeError, MemoryError,
                RecursionError):
            raise CheckpointError(f"checkpoint file {_describe_path(Path(path))}: its metadata "
                                  f"{key!r} is damaged ({text[:80]!r})") from None
    return info


def _read_config(text: str) -> dict:
    """A recorded config: JSON, or a Python literal (``repr`` of a dict)."""
    import ast

    try:
        return config_from_json(text)
    except ValueError:  # json.JSONDecodeError is a ValueError
        return ast.literal_eval(text)


def read_state_dict(path) -> dict[str, torch.Tensor]:
    """Read a checkpoint file into a flat ``{key: tensor}`` on the CPU (see module docstring)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a str or a path, got {type(path).__name__}")
    path = Path(path)
    fmt = checkpoint_format(path)
    if fmt == "safetensors":
        from safetensors.torch import load_file

        try:
            obj = load_file(str(path), device="cpu")
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"checkpoint file {_describe_path(path)} is a damaged "
                                  f"safetensors file ({err})") from None
    elif fmt == "npz":
        try:
            with np.load(path, allow_pickle=False) as archive:
                obj = {k: torch.from_numpy(np.ascontiguousarray(archive[k])) for k in archive.files}
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(f"checkpoint file {_describe_path(path)} is a damaged .npz "
                                  f"archive ({err})") from None
    else:
        obj = _torch_load(path)
    return unwrap_state_dict(obj, where=f"checkpoint file {_describe_path(path)}")


def strip_wrapper_prefixes(key: str) -> str:
    """``module._orig_mod.blocks.0...`` -> ``blocks.0...`` (DDP and torch.compile wrappers)."""
    while key.startswith(WRAPPER_PREFIXES):
        for prefix in WRAPPER_PREFIXES:
            key = key.removeprefix(prefix)
    return key


def unwrap_state_dict(obj, where: str = "checkpoint") -> dict[str, torch.Tensor]:
    """``{"model": sd}`` / ``{"state_dict": sd}`` -> sd; ``module.x`` / ``_orig_mod.x`` -> ``x``."""
    for key in ("model", "state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict):
        raise CheckpointError(f"{where} holds a {type(obj).__name__}, not a state_dict (a dict "
                              f"of tensors) nor a dict holding one under 'model' or 'state_dict'")
    others = [k for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if others or not obj:
        shown = ", ".join(map(repr, others[:6])) + (", ..." if len(others) > 6 else "")
        raise CheckpointError(
            f"{where} is not a state_dict (a dict of tensors), nor a dict holding one under "
            f"'model' or 'state_dict'" + (f"; these entries are not tensors: {shown}" if others
                                         else "; it is empty"))
    out = {}
    for k, v in obj.items():
        name = strip_wrapper_prefixes(str(k))
        if name in out:
            raise CheckpointError(f"{where} holds {name!r} twice (with and without a wrapper "
                                  f"prefix {WRAPPER_PREFIXES})")
        out[name] = v
    return out


def recorded_grid(path) -> tuple[int, int] | None:
    """The patch grid ``save_checkpoint`` recorded in a safetensors file's metadata (None if the
    file records none); damaged metadata is a ``CheckpointError`` saying so."""
    recorded = read_metadata(path).get(GRID_METADATA_KEY)
    if recorded is None:
        return None
    parts = recorded.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise CheckpointError(
            f"checkpoint file {_describe_path(Path(path))} records {GRID_METADATA_KEY}="
            f"{recorded!r} in its metadata, which is not 'rows,cols' (two positive ints): damaged "
            f"metadata; pass pos_embed_grid=(rows, cols) to say the grid it was trained on")
    return int(parts[0]), int(parts[1])
