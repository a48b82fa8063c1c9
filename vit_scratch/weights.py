"""Weights: load and save checkpoints safely, convert them for the NumPy room, randomise them.

``load_checkpoint(model, path)`` takes what people actually download:

* ``.safetensors`` (timm / Hugging Face), read with ``safetensors`` -- no code runs;
* ``.pth`` / ``.pt`` / ``.bin`` / ``.ckpt`` read with ``torch.load(weights_only=True)`` -- tensors
  and plain containers only, never pickled code;
* a ``{"model": state_dict}`` or ``{"state_dict": ...}`` wrapper (how the official DeiT and CaiT
  releases ship) and ``module.`` prefixes (left by ``DataParallel``/DDP);
* a position embedding trained at another resolution (resized to the model's patch grid).

On a mismatch it raises ``CheckpointError`` listing the missing, unexpected and mis-shaped keys.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import checks

SAFETENSORS_SUFFIXES = {".safetensors"}
TORCH_SUFFIXES = {".pth", ".pt", ".bin", ".ckpt"}


class CheckpointError(ValueError):
    """A checkpoint whose keys or shapes do not fit the model."""


def read_state_dict(path) -> dict[str, torch.Tensor]:
    """Read a checkpoint file into a flat ``{key: tensor}`` on the CPU (see module docstring)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in SAFETENSORS_SUFFIXES:
        from safetensors.torch import load_file

        obj = load_file(str(path), device="cpu")
    elif suffix in TORCH_SUFFIXES:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    else:
        raise ValueError(
            f"checkpoint path {str(path)!r} has an unknown suffix {suffix!r}; expected one of "
            f"{sorted(SAFETENSORS_SUFFIXES | TORCH_SUFFIXES)}"
        )
    return unwrap_state_dict(obj)


def unwrap_state_dict(obj) -> dict[str, torch.Tensor]:
    """``{"model": sd}`` / ``{"state_dict": sd}`` -> sd, and ``module.x`` -> ``x``."""
    for key in ("model", "state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(
            "checkpoint is not a state_dict (a dict of tensors), nor a dict holding one under "
            "'model' or 'state_dict'"
        )
    return {k.removeprefix("module."): v for k, v in obj.items()}


def shared_keys(model: nn.Module) -> list[list[str]]:
    """Groups of state_dict keys that are one tensor (a module registered under several names,
    as CoaT does).  Files de-duplicate them; loading fills the aliases back in."""
    groups: dict[tuple, list[str]] = {}
    for key, t in model.state_dict(keep_vars=True).items():
        groups.setdefault((t.data_ptr(), t.dtype, tuple(t.shape)), []).append(key)
    return [keys for keys in groups.values() if len(keys) > 1]


def load_checkpoint(model: nn.Module, path, strict: bool = True) -> nn.Module:
    """Load the checkpoint at ``path`` into ``model`` and return the model.

    With ``strict=False`` the keys that fit are loaded and the rest is reported in a warning
    (e.g. fine-tuning an ImageNet checkpoint with a new ``num_classes``: everything but the head).
    """
    state_dict = read_state_dict(path)
    if hasattr(model, "adapt_state_dict"):
        state_dict = model.adapt_state_dict(state_dict)
    for group in shared_keys(model):
        present = [k for k in group if k in state_dict]
        for k in group:
            if present and k not in state_dict:
                state_dict[k] = state_dict[present[0]]
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing, unexpected, misshaped = checks.param_mismatch(state_dict, expected)
    if missing or unexpected or misshaped:
        message = checks.mismatch_message(f"checkpoint {str(path)!r} for {type(model).__name__}",
                                          missing, unexpected, misshaped)
        if strict:
            raise CheckpointError(message)
        warnings.warn(message + "\n(loaded the rest: strict=False)", stacklevel=2)
        state_dict = {k: v for k, v in state_dict.items() if k in expected and k not in misshaped}
    model.load_state_dict(state_dict, strict=strict)
    return model


def save_checkpoint(model_or_state_dict, path) -> None:
    """Save weights as ``.safetensors`` (recommended) or a ``.pth`` state_dict.

    Tensors shared under several keys are stored once (safetensors refuses shared memory);
    ``load_checkpoint`` restores the aliases from the model's own structure.
    """
    sd = (model_or_state_dict.state_dict() if isinstance(model_or_state_dict, nn.Module)
          else dict(model_or_state_dict))
    seen, unique = set(), {}
    for key, t in sd.items():
        ident = (t.data_ptr(), t.dtype, tuple(t.shape))
        if ident not in seen:
            seen.add(ident)
            unique[key] = t.detach().cpu().contiguous()
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in SAFETENSORS_SUFFIXES:
        from safetensors.torch import save_file

        save_file(unique, str(path))
    elif suffix in TORCH_SUFFIXES:
        torch.save(unique, path)
    else:
        raise ValueError(f"checkpoint path {str(path)!r} must end in .safetensors or .pth")


def state_dict_to_numpy(state_dict: dict, dtype=None) -> dict[str, np.ndarray]:
    """``{key: tensor}`` -> ``{key: ndarray}`` for the NumPy room (bf16/fp16 become float32)."""
    out = {}
    for key, t in state_dict.items():
        t = t.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        out[key] = t.numpy() if dtype is None else t.numpy().astype(dtype)
    return out


@torch.no_grad()
def randomize_weights_(model: nn.Module, seed: int = 0, std: float = 0.02,
                       norm_std: float = 0.1) -> nn.Module:
    """Overwrite every parameter with random values, so that every parameter matters in an
    equivalence test (a zero-initialised bias or a LayerNorm at identity would hide a bug).

    Norm weights become 1 + N(0, norm_std²), norm biases N(0, norm_std²), everything else
    N(0, std²).  Deterministic for a given seed and parameter order.
    """
    gen = torch.Generator().manual_seed(seed)
    norm_weights = {id(m.weight) for m in model.modules()
                    if isinstance(m, nn.LayerNorm) and m.weight is not None}
    norm_biases = {id(m.bias) for m in model.modules()
                   if isinstance(m, nn.LayerNorm) and m.bias is not None}
    for p in model.parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
        if id(p) in norm_weights:
            p.copy_(1.0 + norm_std * noise)
        elif id(p) in norm_biases:
            p.copy_(norm_std * noise)
        else:
            p.copy_(std * noise)
    return model
