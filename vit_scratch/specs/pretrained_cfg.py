"""A name's ``pretrained_cfg`` with timm's ``pretrained_cfg_overlay``: the entries a
``pretrained_cfg`` may hold (timm's ``PretrainedCfg`` fields), an overlay checked entry by entry,
the config defaults it gives, and the ``pretrained_cfg`` a model of a spec carries with it.
``vit_scratch.models`` (``create_model``, ``create_numpy_model``) and ``vit_scratch.hub`` use
these; torch-free.
"""
from __future__ import annotations

import os

from .base import ModelSpec

#: The entries a ``pretrained_cfg`` may hold: the fields of timm's ``PretrainedCfg``.  Where the
#: weights come from (``WEIGHT_SOURCES``), what the model's input must look like (``input_size``,
#: ``mean``, ``std``, ``crop_pct``, ``interpolation``, ``crop_mode``: what
#: ``vit_scratch.data.preprocess`` reads), the head, and descriptions.
PRETRAINED_CFG_KEYS = (
    "url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source", "architecture", "tag",
    "custom_load", "input_size", "test_input_size", "min_input_size", "fixed_input_size",
    "interpolation", "crop_pct", "test_crop_pct", "crop_mode", "mean", "std", "num_classes",
    "label_offset", "label_names", "label_descriptions", "pool_size", "test_pool_size",
    "first_conv", "classifier", "license", "description", "origin_url", "paper_name",
    "paper_ids", "notes")
#: The entries that say where ``pretrained=True`` finds the weights (``vit_scratch.hub``).
WEIGHT_SOURCES = ("state_dict", "file", "hf_hub_id", "hf_hub_filename", "url")
#: The resampling filters the preprocessing knows (``vit_scratch.data.preprocess``).
INTERPOLATIONS = ("bicubic", "bilinear", "nearest")


def check_pretrained_cfg_overlay(overlay, name: str) -> dict:
    """timm's ``pretrained_cfg_overlay``: a dict whose entries replace those of ``name``'s
    ``pretrained_cfg``, keyed as timm's ``PretrainedCfg`` (an unknown key is a ``TypeError``,
    as in timm).  The entries the library reads are checked, each a ``ValueError`` naming the
    entry and the value: ``input_size`` (C, H, W), ``mean`` and ``std`` (one number per channel,
    std positive), ``crop_pct`` in (0, 1], ``interpolation``, ``crop_mode`` (``"center"``),
    ``num_classes``, ``fixed_input_size``, ``architecture`` (the name itself) and the weight
    sources (``file``: a path, ``state_dict``: a dict, ``hf_hub_id``, ``hf_hub_filename``,
    ``url``: strings).  Returns a new dict (tuples for sequences)."""
    from .. import validation

    if overlay is None:
        return {}
    if not isinstance(overlay, dict):
        raise ValueError(f"pretrained_cfg_overlay must be a dict of pretrained_cfg entries "
                         f"(e.g. dict(file='model.safetensors')), got "
                         f"{validation.describe_value(overlay)}")
    unknown = [k for k in overlay if k not in PRETRAINED_CFG_KEYS]
    if unknown:
        raise TypeError(f"pretrained_cfg_overlay has the unknown key(s) "
                        f"{', '.join(map(repr, unknown))}; a pretrained_cfg knows "
                        f"{', '.join(PRETRAINED_CFG_KEYS)}")
    out = dict(overlay)
    what = lambda key: f"pretrained_cfg_overlay[{key!r}]"  # noqa: E731
    if "input_size" in out:
        size = out["input_size"]
        if isinstance(size, str) or not hasattr(size, "__len__") or len(size) != 3:
            raise ValueError(f"{what('input_size')} must be (C, H, W), got "
                             f"{validation.describe_value(size)}")
        out["input_size"] = tuple(validation.check_positive(v, what("input_size"))
                                  for v in size)
    for key in ("mean", "std"):
        if key in out:
            values = out[key]
            if isinstance(values, str) or not hasattr(values, "__len__") or not len(values):
                raise ValueError(f"{what(key)} must be one number per channel, got "
                                 f"{validation.describe_value(values)}")
            check = validation.check_positive_float if key == "std" else validation.check_float
            out[key] = tuple(check(v, what(key)) for v in values)
    if "crop_pct" in out:
        out["crop_pct"] = validation.check_float(out["crop_pct"], what("crop_pct"), 0.0, 1.0,
                                                 low_open=True)
    if "interpolation" in out:
        validation.check_choice(out["interpolation"], what("interpolation"), INTERPOLATIONS)
    if "crop_mode" in out:
        validation.check_choice(out["crop_mode"], what("crop_mode"), ("center",))
    if "num_classes" in out:
        out["num_classes"] = validation.check_int(out["num_classes"], what("num_classes"),
                                                  minimum=0)
    if "fixed_input_size" in out:
        out["fixed_input_size"] = validation.check_bool(out["fixed_input_size"],
                                                        what("fixed_input_size"))
    if out.get("architecture", name) != name:
        raise ValueError(f"{what('architecture')} is {out['architecture']!r}, but the model is "
                         f"{name}: build that name instead (the architecture is the name's)")
    if out.get("file") is not None and not isinstance(out["file"], (str, os.PathLike)):
        raise ValueError(f"{what('file')} must be a path, got "
                         f"{validation.describe_value(out['file'])}")
    if out.get("state_dict") is not None and not isinstance(out["state_dict"], dict):
        raise ValueError(f"{what('state_dict')} must be a dict of tensors, got "
                         f"{validation.describe_value(out['state_dict'])}")
    for key in ("hf_hub_id", "hf_hub_filename", "url"):
        if out.get(key) is not None and not isinstance(out[key], str):
            raise ValueError(f"{what(key)} must be a str, got "
                             f"{validation.describe_value(out[key])}")
    return out


def overlay_defaults(overlay: dict, kwargs: dict) -> dict:
    """timm's rule: the overlay's ``input_size`` gives ``in_chans`` and ``img_size``, and its
    ``num_classes`` gives ``num_classes``, unless ``kwargs`` give them (a size that contradicts
    them is refused when the model is built: :func:`overlaid_pretrained_cfg`)."""
    kwargs = dict(kwargs)
    if "input_size" in overlay:
        kwargs.setdefault("in_chans", overlay["input_size"][0])
        kwargs.setdefault("img_size", tuple(overlay["input_size"][1:]))
    if "num_classes" in overlay:
        kwargs.setdefault("num_classes", overlay["num_classes"])
    return kwargs


def overlaid_pretrained_cfg(spec: ModelSpec, cfg, overlay: dict | None) -> dict:
    """``spec``'s ``pretrained_cfg`` for ``cfg``, the overlay's entries in place of its own
    (an in-memory ``state_dict`` is not kept in it).  Its ``input_size`` is the model's and its
    ``num_classes`` the model's head: an overlay whose ``input_size`` or ``mean``/``std``
    contradict the model's channels and size is a ``ValueError``."""
    pcfg = spec.pretrained_cfg_for(cfg)
    if not overlay:
        return pcfg
    entries = {k: v for k, v in overlay.items() if k != "state_dict"}
    size = pcfg["input_size"]
    if "input_size" in entries and tuple(entries["input_size"]) != tuple(size):
        raise ValueError(f"pretrained_cfg_overlay['input_size'] is {entries['input_size']}, but "
                         f"the model takes (in_chans, *img_size) = {size}: leave out in_chans "
                         f"and img_size (the overlay's input_size then gives them) or make them "
                         f"agree")
    for key in ("mean", "std"):
        if key in entries and len(entries[key]) != size[0]:
            raise ValueError(f"pretrained_cfg_overlay[{key!r}] has {len(entries[key])} "
                             f"values, but the model takes {size[0]} channel(s)")
    return {**pcfg, **entries, "input_size": size, "num_classes": cfg.num_classes}
