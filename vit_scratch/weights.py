"""Weights: load and save checkpoints safely, convert them for the NumPy room, randomise them.
(Reading a file is ``vit_scratch.weight_files``; the messages, ``vit_scratch.checkpoint_checks``.)

``load_checkpoint(model, path)`` takes what people actually download.  The format is read from
the file's first bytes, not from its name (a safetensors file called ``.pth`` loads):

* safetensors (timm / Hugging Face), read with ``safetensors`` -- no code runs;
* PyTorch files (``torch.save``, zip or legacy) read with ``torch.load(weights_only=True)`` --
  tensors and plain containers only, never pickled code (a file that holds anything else is
  refused with :class:`UnsafeCheckpointError`);
* NumPy ``.npz`` archives of arrays (read with ``allow_pickle=False``);
* a ``{"model": state_dict}`` or ``{"state_dict": ...}`` wrapper (how the official DeiT and CaiT
  releases and most training scripts ship), ``module.`` prefixes (left by ``DataParallel``/DDP)
  and ``_orig_mod.`` prefixes (left by ``torch.compile``);
* a position embedding trained at another resolution (resized to the model's patch grid; a
  non-square training grid is read from the file's metadata, or given as ``pos_embed_grid``).

An empty file, a folder, a damaged or truncated file, a Git LFS pointer or an HTML page raise
:class:`CheckpointError` saying so; a pickle of Python objects raises
:class:`UnsafeCheckpointError` (it is never unpickled).  ``load_checkpoint`` names another
family's checkpoint as such (the families' key tables, through ``vit_scratch.models``), and
otherwise lists the missing, unexpected, mis-shaped and mis-typed keys (an integer or complex
tensor for a floating-point parameter is mis-typed) and the keys holding NaN, infinite or
implausibly large values (damaged bytes).
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from . import checkpoint_checks, models, validation
from .checkpoint_checks import CheckpointError, UnsafeCheckpointError
from .weight_files import (GRID_METADATA_KEY, SAFETENSORS_SUFFIXES, TORCH_SUFFIXES,
                           checkpoint_format, config_to_json, read_metadata, read_model_info,
                           read_state_dict, recorded_grid, strip_wrapper_prefixes,
                           unwrap_state_dict)

__all__ = ["CheckpointError", "UnsafeCheckpointError", "checkpoint_format", "load_checkpoint",
           "load_pretrained", "randomize_weights_", "read_metadata", "read_model_info",
           "read_state_dict", "save_checkpoint", "shared_keys", "state_dict_to_numpy",
           "timm_kwargs", "unwrap_model", "unwrap_state_dict"]

def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside ``torch.compile`` (``_orig_mod``) and DataParallel/DDP (``module``)
    wrappers, whose state_dict keys are the model's own."""
    while True:
        if isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        elif isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            model = model.module
        else:
            return model


def shared_keys(model: nn.Module) -> list[list[str]]:
    """Groups of state_dict keys that are one tensor (a module registered under several names,
    as CoaT does).  ``save_checkpoint`` writes every key (timm's ``load_state_dict(strict=True)``
    wants them all); loading checks that the aliases agree, and fills in those a file leaves
    out."""
    groups: dict[tuple, list[str]] = {}
    for key, t in model.state_dict(keep_vars=True).items():
        groups.setdefault((t.data_ptr(), t.dtype, tuple(t.shape)), []).append(key)
    return [keys for keys in groups.values() if len(keys) > 1]


def _mistyped(state_dict: dict, own: dict) -> dict:
    """Keys whose tensor cannot stand for the model's: an integer, bool or complex tensor for a
    floating-point parameter (a quantised or corrupted file), or a float for an integer buffer."""
    out = {}
    for k, v in state_dict.items():
        if k in own and tuple(v.shape) == tuple(own[k].shape):
            if own[k].is_floating_point() and not v.is_floating_point():
                out[k] = (validation.dtype_name(v.dtype), "a floating-point dtype")
            elif not own[k].is_floating_point() and v.dtype != own[k].dtype:
                out[k] = (validation.dtype_name(v.dtype), validation.dtype_name(own[k].dtype))
    return out


def _max_abs(state_dict: dict) -> dict[str, float]:
    """{key: largest |value|} of the floating-point tensors (NaN if a tensor holds a NaN)."""
    return {k: float(v.detach().abs().amax()) for k, v in state_dict.items()
            if v.is_floating_point() and v.numel()}


#: DeiT's distillation token and its head: a distilled model has them, a plain one does not.
DISTILLATION_KEYS = ("dist_token", "head_dist.weight", "head_dist.bias")


def _distillation_token_mismatch(state_dict: dict, model: nn.Module, what: str) -> str | None:
    """A message when one of the checkpoint and the model has DeiT's distillation token and
    the other does not (the position embedding then differs by a token too, which is not the
    file's fault), else ``None``."""
    own = "dist_token" in model.state_dict()
    held = [k in state_dict for k in DISTILLATION_KEYS]
    if own == ("dist_token" in state_dict) or (own and any(held)) or (not own and not all(held)):
        return None  # the file has some of them: a key is missing or renamed, named as such
    name = type(model).__name__
    keys = ", ".join(DISTILLATION_KEYS)
    if own:
        return (f"{what} holds a model without a distillation token, but the {name} has one "
                f"({keys}: built with distilled=True); build it without (distilled=False, a "
                f"name without '_distilled_'; the trainer: drop --model-arg distilled=True), or "
                f"load a distilled checkpoint")
    return (f"{what} holds a distilled model ({keys}: DeiT's distillation token and its head), "
            f"but the {name} has no distillation token; build it with distilled=True (a "
            f"deit_*_distilled_* name; the trainer: --model-arg distilled=True)")


def load_checkpoint(model: nn.Module, path, strict: bool = True,
                    pos_embed_grid=None, adapt_in_chans: bool = False) -> nn.Module:
    """Load the checkpoint at ``path`` into ``model`` and return the model.

    With ``strict=False`` the keys that fit are loaded and the rest is reported in a warning
    (e.g. fine-tuning an ImageNet checkpoint with a new ``num_classes``: everything but the head).
    ``pos_embed_grid=(rows, cols)`` is the patch grid the checkpoint's position embedding was
    trained on, needed only for a non-square grid from a file that does not record it (files
    written by ``save_checkpoint`` do, and a grid given that contradicts the record is refused:
    (14, 10) and (10, 14) hold the same number of positions, so only the record tells them
    apart).  A ``torch.compile``d or DDP-wrapped model loads too.  ``adapt_in_chans=True``
    adapts a first convolution trained on other input channels (RGB weights for a grey model)
    to the model's ``in_chans``, as timm does (``torch_nn.patch_embed.adapt_input_conv``).

    Refused with a ``CheckpointError`` that names the keys: another family's checkpoint ("holds
    a Cait ..., but the model is a CoaT"; by the name the file records, or else by its keys),
    a distilled checkpoint for a model without DeiT's distillation token or the reverse,
    another variant's with ``strict`` ("those of deit3_small_patch16_224, another variant of
    VisionTransformer than the model's"), missing, unexpected, mis-shaped or mis-typed keys,
    NaN, infinite or implausibly large values (``checkpoint_checks.MAX_ABS_PARAM``), and aliases of
    one shared tensor that hold different values.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"model must be a torch.nn.Module, got {type(model).__name__}; for the NumPy room "
            f"read the file and build the model from it: vit_scratch.create_numpy_model(name, "
            f"vit_scratch.state_dict_to_numpy(vit_scratch.read_state_dict(path)))")
    strict = validation.check_bool(strict, "strict")
    if pos_embed_grid is not None:
        pos_embed_grid = validation.to_2tuple(pos_embed_grid, "pos_embed_grid")
    target = unwrap_model(model)
    state_dict = read_state_dict(path)
    what = f"checkpoint {str(path)!r}"
    family = models.family_of(target)
    if family is not None:  # one of ours: is the file another family's (or variant's)?
        shapes = {k: tuple(v.shape) for k, v in state_dict.items()}
        name = read_metadata(path).get("model_name")  # by its name, or else its keys
        message = models.other_family_message(shapes, family, what, name) or \
            _distillation_token_mismatch(state_dict, target, what)
        if strict and not message:  # strict=False loads what fits of another variant
            message = models.other_variant_message(
                shapes, {k: tuple(v.shape) for k, v in target.state_dict().items()}, family,
                what, name, (getattr(target, "pretrained_cfg", None) or {}).get("architecture"))
        if message:
            raise CheckpointError(message)
    recorded = recorded_grid(path)
    if recorded is not None and pos_embed_grid is not None and recorded != pos_embed_grid:
        raise CheckpointError(
            f"pos_embed_grid={pos_embed_grid} contradicts the grid {recorded} that {what} "
            f"records in its metadata (its position embedding was trained on {recorded[0]} rows "
            f"and {recorded[1]} columns of patches); leave pos_embed_grid out for such a file")
    grid = pos_embed_grid or recorded
    if hasattr(target, "adapt_state_dict"):
        try:
            state_dict = target.adapt_state_dict(state_dict, pos_embed_grid=grid)
        except CheckpointError as error:
            if pos_embed_grid is None and recorded is not None:  # the grid came from the file
                raise CheckpointError(
                    f"{what} records {GRID_METADATA_KEY}={recorded} in its metadata, which does "
                    f"not fit its own pos_embed: damaged metadata? Pass pos_embed_grid=(rows, "
                    f"cols) to say the grid it was trained on ({error})") from None
            raise
    if validation.check_bool(adapt_in_chans, "adapt_in_chans"):
        state_dict = _adapt_first_conv(target, state_dict)
    for group in shared_keys(target):  # the aliases must agree; a file may leave them out
        present = [k for k in group if k in state_dict]
        for k in present[1:]:
            if not torch.equal(state_dict[k], state_dict[present[0]]):
                raise CheckpointError(f"{what}: {k} and {present[0]} name one shared tensor of "
                                      f"{type(target).__name__} but hold different values")
        for k in group:
            if present and k not in state_dict:
                state_dict[k] = state_dict[present[0]]
    own = target.state_dict()
    expected = {k: tuple(v.shape) for k, v in own.items()}
    missing, unexpected, misshaped = checkpoint_checks.param_mismatch(state_dict, expected)
    mistyped = _mistyped(state_dict, own)
    bad_values = checkpoint_checks.bad_param_values(_max_abs(state_dict))
    if missing or unexpected or misshaped or mistyped or bad_values:
        message = checkpoint_checks.mismatch_message(f"{what} for {type(target).__name__}", missing,
                                              unexpected, misshaped, mistyped, bad_values)
        if strict:
            raise CheckpointError(message)
        warnings.warn(message + "\n(loaded the rest: strict=False)", stacklevel=2)
        state_dict = {k: v for k, v in state_dict.items() if k in expected and k not in misshaped
                      and k not in mistyped and k not in bad_values}
    target.load_state_dict(state_dict, strict=strict)
    return model


def _adapt_first_conv(model: nn.Module, state_dict: dict) -> dict:
    """``state_dict`` with the weight of the model's first convolution (its
    ``pretrained_cfg["first_conv"]``) adapted to the model's ``in_chans`` when the file's was
    trained on another number of input channels."""
    from .torch_nn.patch_embed import adapt_input_conv

    first_conv = (getattr(model, "pretrained_cfg", None) or {}).get("first_conv")
    key = f"{first_conv}.weight"
    own = model.state_dict().get(key)
    weight = state_dict.get(key)
    if own is None or weight is None or weight.ndim != 4 or weight.shape[1] == own.shape[1] \
            or weight.shape[0] != own.shape[0] or weight.shape[2:] != own.shape[2:]:
        return state_dict  # nothing to adapt (a mismatch is reported with the rest)
    return {**state_dict, key: adapt_input_conv(weight, own.shape[1])}


def load_pretrained(model: nn.Module, path) -> nn.Module:
    """Load ``path`` into ``model`` to start from it (fine-tuning): strictly, except a
    classifier head for another number of classes than the model's, which is left freshly
    initialised (a warning says so), and a first convolution trained on other input channels
    (RGB weights for ``in_chans=1``), adapted as timm does.  Everything else must fit as for
    ``load_checkpoint``.

    What ``create_model(name, pretrained=True)``, ``create_model(name, checkpoint_path=...)``
    and the trainer's ``--pretrained`` and ``--init`` do."""
    target = unwrap_model(model)
    head = target.get_classifier() if hasattr(target, "get_classifier") else None
    if isinstance(head, tuple):  # DeiT's distilled models: (head, head_dist), resized together
        head = head[0]
    prefix = next((name for name, m in target.named_modules() if m is head), None)
    key = f"{prefix}.weight"
    state = read_state_dict(path)
    n_file = state[key].shape[0] if prefix and key in state and state[key].ndim == 2 else None
    wanted = getattr(target, "num_classes", None)
    if n_file is None or n_file == wanted:
        return load_checkpoint(model, path, adapt_in_chans=True)
    target.reset_classifier(n_file)
    try:
        load_checkpoint(model, path, adapt_in_chans=True)
    finally:
        target.reset_classifier(wanted)  # a fresh head, whether the rest loaded or not
    new_head = (f"a new, randomly initialised head of {wanted} classes" if wanted
                else "no head (num_classes=0)")
    warnings.warn(f"checkpoint {str(path)!r}: its classifier head ({key}) has {n_file} classes, "
                  f"the model {wanted}; loaded everything else strictly, with {new_head}",
                  stacklevel=2)
    return model


def save_checkpoint(model_or_state_dict, path, class_names=None) -> None:
    """Save weights as ``.safetensors`` (recommended) or a ``.pth`` state_dict.

    Every key of the state_dict is saved, so that the file loads into the matching timm model
    with ``load_state_dict(strict=True)``: a tensor the model uses under several names (CoaT's
    shared modules) is written under each name: as copies in a safetensors file (which refuses
    shared memory), once in a ``.pth`` file (``torch.save`` keeps the sharing).
    ``load_checkpoint`` puts the sharing back and refuses copies that differ.  Wrapper prefixes
    (``_orig_mod.`` of ``torch.compile``, ``module.`` of DDP) are not saved.  A safetensors file
    records in its metadata the position embedding's patch grid (so that a non-square grid is
    resized correctly on load) and, for a model built by ``create_model``, its name, its
    config, its preprocessing and ``class_names`` (a list of ``num_classes`` strings): the file
    alone is then enough to predict (``read_model_info``).
    """
    if isinstance(model_or_state_dict, nn.Module):
        model = unwrap_model(model_or_state_dict)
        sd = model.state_dict()
    elif isinstance(model_or_state_dict, dict):
        model, sd = None, dict(model_or_state_dict)
    else:
        raise ValueError(f"model_or_state_dict must be an nn.Module or a dict of tensors, got "
                         f"{type(model_or_state_dict).__name__}")
    bad = [k for k, v in sd.items() if not isinstance(v, torch.Tensor)]
    if bad:
        raise ValueError(f"save_checkpoint saves tensors only; these entries are not: "
                         f"{', '.join(map(repr, bad[:6]))}")
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"path must be a str or a path, got {type(path).__name__}")
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SAFETENSORS_SUFFIXES | TORCH_SUFFIXES:
        raise ValueError(f"checkpoint path {str(path)!r} must end in .safetensors or .pth")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot save checkpoint {str(path)!r}: the folder "
                                f"{str(path.parent)!r} does not exist (create it first: "
                                f"Path({str(path.parent)!r}).mkdir(parents=True))")
    seen, tensors = set(), {}
    for key, t in sd.items():
        t = t.detach().cpu().contiguous()
        storage = t.untyped_storage().data_ptr()
        alias = storage in seen and suffix in SAFETENSORS_SUFFIXES
        tensors[strip_wrapper_prefixes(key)] = t.clone() if alias else t
        seen.add(storage)
    if suffix in SAFETENSORS_SUFFIXES:
        from safetensors.torch import save_file

        save_file(tensors, str(path), metadata=_metadata(model, class_names) or None)
    else:
        torch.save(tensors, path)


def _metadata(model, class_names) -> dict[str, str]:
    """The string metadata ``save_checkpoint`` writes into a safetensors file."""
    import dataclasses
    import json

    metadata = {}
    grid = getattr(getattr(model, "patch_embed", None), "grid_size", None)
    if grid:
        metadata[GRID_METADATA_KEY] = f"{grid[0]},{grid[1]}"
    pretrained_cfg = getattr(model, "pretrained_cfg", None)
    cfg = getattr(model, "cfg", None)
    if isinstance(pretrained_cfg, dict) and "architecture" in pretrained_cfg \
            and dataclasses.is_dataclass(cfg):
        metadata["model_name"] = str(pretrained_cfg["architecture"])
        metadata["model_config"] = config_to_json(
            {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
        metadata["pretrained_cfg"] = json.dumps(pretrained_cfg)
    if class_names is not None:
        names = list(class_names)
        wanted = getattr(model, "num_classes", len(names))
        if len(names) != wanted or not all(isinstance(n, str) for n in names):
            raise ValueError(f"class_names must be {wanted} strings (one per class of the "
                             f"model), got {names!r}")
        metadata["class_names"] = json.dumps(names)
    return metadata


#: What ``timm_kwargs`` passes to timm as ``pretrained_cfg_overlay``: the preprocessing the
#: checkpoint's model expects (timm's ``resolve_data_config`` reads these).
DATA_CONFIG_KEYS = ("input_size", "mean", "std", "crop_pct", "interpolation", "crop_mode")


def timm_kwargs(path) -> dict:
    """The keyword arguments that build, in timm, the model a checkpoint file of ours holds, and
    load the file into it::

        model = timm.create_model(**vit_scratch.timm_kwargs("runs/pets/best.safetensors"))
        transform = timm.data.create_transform(**timm.data.resolve_data_config({}, model=model))

    ``model_name`` (the file's registered name, or for a name of ours alone -- the
    ``*_digits`` configs -- a timm name of the same family, every field then given),
    ``checkpoint_path``, every field of the recorded config that timm's model class takes
    (``ConfigMixin.timm_kwargs``), and ``pretrained_cfg_overlay``: the preprocessing the file
    records (:data:`DATA_CONFIG_KEYS`: input size, mean and std, crop_pct, interpolation), so
    that timm's ``resolve_data_config`` and ``create_transform`` prepare pictures as the model
    was trained on them.  Fields timm does not take must hold timm's behaviour (CaiT's
    ``class_token_in_keys=True``, CoaT's ``parallel_mode="interpolation"``); otherwise timm has
    no such model, and a ``ValueError`` says so.  ``CheckpointError`` for a file that records no
    model (not written by ``save_checkpoint`` from a model of ``create_model``), or a model
    this library does not know (another version's name or config field), naming the file."""
    info = read_model_info(path)
    if info["model_name"] is None or info["model_config"] is None:
        raise CheckpointError(f"checkpoint file {str(path)!r} does not record its model (no "
                              f"'model_name' and 'model_config' in its metadata): timm_kwargs "
                              f"needs a file that vit_scratch.save_checkpoint wrote from a model "
                              f"of create_model")
    name = info["model_name"]
    try:
        cfg = models.get_config(name, **info["model_config"])
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"checkpoint file {str(path)!r}: its metadata does not describe a "
                              f"model of this library ({error}); was it written by another "
                              f"version of vit_scratch? That version rebuilds it") from None
    try:
        kwargs = cfg.timm_kwargs()
    except ValueError as error:
        raise ValueError(f"checkpoint file {str(path)!r} ({name}): {error}") from None
    recorded = info["pretrained_cfg"] or models.get_pretrained_cfg(name, **info["model_config"])
    overlay = {k: tuple(v) if isinstance(v, list) else v for k, v in recorded.items()
               if k in DATA_CONFIG_KEYS}
    return {"model_name": models.timm_name(name, cfg), "checkpoint_path": str(path), **kwargs,
            "pretrained_cfg_overlay": overlay}


def state_dict_to_numpy(state_dict: dict, dtype=None) -> dict[str, np.ndarray]:
    """``{key: tensor}`` -> ``{key: ndarray}`` for the NumPy room (bf16/fp16 become float32)."""
    if isinstance(state_dict, nn.Module):
        state_dict = unwrap_model(state_dict).state_dict()
    if not isinstance(state_dict, dict):
        raise ValueError(f"state_dict must be a dict of tensors (model.state_dict()), got "
                         f"{type(state_dict).__name__}")
    out = {}
    for key, t in state_dict.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"state_dict[{key!r}] is a {type(t).__name__}, not a tensor")
        t = t.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()
        # keys as the model names them (a compiled or DDP model's state_dict has prefixes)
        out[strip_wrapper_prefixes(key)] = t.numpy() if dtype is None else t.numpy().astype(dtype)
    return out


@torch.no_grad()
def randomize_weights_(model: nn.Module, seed: int = 0, std: float = 0.02,
                       norm_std: float = 0.1) -> nn.Module:
    """Overwrite every parameter with random values, so that every parameter matters in an
    equivalence test (a zero-initialised bias or a LayerNorm at identity would hide a bug).

    Norm weights become 1 + N(0, norm_std²), norm biases N(0, norm_std²), everything else
    N(0, std²).  Deterministic for a given seed and parameter order.
    """
    seed = validation.check_int(seed, "seed", minimum=0)
    std = validation.check_float(std, "std", 0.0, None)
    norm_std = validation.check_float(norm_std, "norm_std", 0.0, None)
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
