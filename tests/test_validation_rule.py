"""Where the checks run: at the public entry points, once (``vit_scratch.validation``'s rule).

A profiler sees every call into the validation package, whatever name the caller imported it
under: one forward of a built model makes only ``prepare_images``' checks, in both rooms;
building a model validates its config once and its layers not at all.  Also the CS231n
pairing of the NumPy room: each ``f_backward`` directly after its ``f_forward``.
"""
from __future__ import annotations

import ast
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

import toy_family
import vit_scratch
from vit_scratch import models, validation
from vit_scratch.specs import base as specs_base
from vit_scratch.torch_nn.attention import Attention

VALIDATION = os.path.dirname(os.path.realpath(validation.__file__))
NUMPY_ROOM = Path(vit_scratch.__file__).parent / "numpy_nn"

#: The checks of a model's images, where they enter (``prepare_images``, both rooms); CoaT
#: also checks the size against its total stride.
IMAGE_CHECKS = {"check_image_dtype", "check_images", "check_image_values"}


def validation_calls(fn) -> tuple[int, Counter]:
    """``(calls into the validation package, Counter of the functions called from outside
    it)`` while ``fn()`` runs."""
    total, entries = 0, Counter()

    def profile(frame, event, arg):
        nonlocal total
        if event == "call" and os.path.realpath(frame.f_code.co_filename).startswith(VALIDATION):
            total += 1
            caller = frame.f_back
            if caller is None or not os.path.realpath(caller.f_code.co_filename).startswith(
                    VALIDATION):
                entries[frame.f_code.co_name] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return total, entries


@pytest.mark.parametrize("name", ["cait_xxs24_224", "vit_digits", "cait_digits",
                                  "coat_lite_digits", "coat_digits"])
def test_a_forward_makes_only_the_image_checks_in_both_rooms(name):
    """One forward of a built model on one picture: the images are checked where they enter,
    nothing inside the model checks again (1,042 calls in the NumPy room and 73 in PyTorch
    for cait_xxs24_224 before the rule was kept; 13 in each now)."""
    model = vit_scratch.create_model(name).eval()
    np_model = vit_scratch.create_numpy_model(
        name, vit_scratch.state_dict_to_numpy(model.state_dict()))
    c, h, w = model.pretrained_cfg["input_size"]
    x = np.random.default_rng(0).standard_normal((1, c, h, w)).astype(np.float32)
    expected = IMAGE_CHECKS | ({"check_divisible"} if name.startswith("coat") else set())
    with torch.no_grad():
        torch_total, torch_entries = validation_calls(lambda: model(torch.from_numpy(x)))
    numpy_total, numpy_entries = validation_calls(lambda: np_model(x))
    for total, entries in ((torch_total, torch_entries), (numpy_total, numpy_entries)):
        assert set(entries) == expected, entries
        assert all(n == 1 for n in entries.values()), entries  # each check once per forward
        assert total <= 20, total  # with the helpers they call (to_2tuple, ...): a handful


def test_a_layer_built_by_hand_checks_itself_and_a_models_layers_do_not():
    """A learner's ``Attention`` checks its arguments and, at every call, its input (a forward
    pre-hook); the layers a model builds from its validated config carry no such hook, and
    building the model from its config makes no call into the validation package."""
    with pytest.raises(ValueError, match="embed_dim 12 is not divisible by num_heads 5"):
        Attention(12, 5)
    layer = Attention(12, 3)
    with pytest.raises(ValueError, match=r"x must have last dimension 12, got shape \(2, 5, 8\)"):
        layer(torch.zeros(2, 5, 8))
    for name in ("cait_xxs24_224", "vit_digits", "coat_digits"):
        family, spec = models.lookup(name)
        cfg = spec.config()
        total, entries = validation_calls(lambda: family.torch_class()(cfg))
        assert total == 0, (name, entries)
        model = family.torch_class()(cfg)
        assert not [m for m in model.modules() if m._forward_pre_hooks], name


def test_create_model_builds_its_config_once_and_the_table_once(monkeypatch):
    """One ``create_model`` call validates one config (the name's default is built once, the
    first time), and the name table is built once for the table as it is."""
    built = Counter()
    post_init = specs_base.ConfigMixin.__post_init__

    def counted(self):
        built[type(self).__name__] += 1
        post_init(self)

    monkeypatch.setattr(specs_base.ConfigMixin, "__post_init__", counted)
    vit_scratch.create_model("cait_xxs24_224")  # builds the name's default, once
    tables = models._name_table.cache_info().misses
    built.clear()
    vit_scratch.create_model("cait_xxs24_224", num_classes=3)
    vit_scratch.create_numpy_model("vit_digits", vit_scratch.state_dict_to_numpy(
        vit_scratch.create_model("vit_digits").state_dict()))
    assert built == {"CaitConfig": 1, "ViTConfig": 2}  # one per create_model call
    assert models._name_table.cache_info().misses == tables  # the table, not built again
    toy = models.Family(toy_family, lambda: toy_family.Toy, lambda: toy_family.NumpyToy)
    monkeypatch.setattr(models, "FAMILIES", models.FAMILIES + (toy,))
    assert "toy_tiny" in vit_scratch.list_models()  # another table: built for it


def _top_level_functions(path: Path) -> list[str]:
    return [node.name for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef)]


@pytest.mark.parametrize("path", sorted(NUMPY_ROOM.glob("*.py")), ids=lambda p: p.name)
def test_each_backward_follows_its_forward(path):
    """CS231n's pairing: ``f_backward`` is the function right after ``f_forward``, in the
    module of ``f``, and states its derivation in its docstring."""
    names = _top_level_functions(path)
    tree = {node.name: node for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef)}
    for i, name in enumerate(names):
        if name.endswith("_backward") and name != "check_backward":  # (backprop.py's checker)
            stem = name.removesuffix("_backward")
            assert i > 0 and names[i - 1] == f"{stem}_forward", (name, names[i - 1])
            assert len(ast.get_docstring(tree[name]) or "") > 40, name
        if name.endswith("_forward") and name.removesuffix("_forward") in tree:
            stem = name.removesuffix("_forward")
            # the forward follows its function (or that function's unchecked core)
            assert names[i - 1] in (stem, f"_{stem}"), (name, names[i - 1])
