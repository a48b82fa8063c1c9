"""The model families: the factory's table, adding a family, and what every family shares."""
import numpy as np
import pytest
import torch

import toy_family
import vit_scratch
from helpers import max_abs_diff
from vit_scratch import models


@pytest.fixture
def with_toy_family(monkeypatch):
    """The toy family added to the factory's table: one more line, no other file edited."""
    toy = models.Family(toy_family, lambda: toy_family.Toy, lambda: toy_family.NumpyToy)
    monkeypatch.setattr(models, "FAMILIES", models.FAMILIES + (toy,))


def test_a_family_is_added_by_one_line_in_the_table(with_toy_family, tmp_path):
    assert "toy_tiny" in vit_scratch.list_models() and vit_scratch.list_models("toy_*") == ["toy_tiny"]
    assert vit_scratch.get_config("toy_tiny", embed_dim=4).embed_dim == 4
    model = vit_scratch.randomize_weights_(vit_scratch.create_model("toy_tiny", num_classes=3), seed=0)
    assert type(model) is toy_family.Toy and model.cfg.num_classes == 3
    assert model.pretrained_cfg["architecture"] == "toy_tiny"
    assert model.pretrained_cfg["input_size"] == (3, 16, 16)
    np_model = vit_scratch.create_numpy_model(
        "toy_tiny", vit_scratch.state_dict_to_numpy(model.state_dict()), num_classes=3)
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model.eval()(x)
    assert logits.shape == (2, 3) and logits.abs().max() > 1e-3
    assert max_abs_diff(np_model(x.numpy()), logits) < 1e-5
    vit_scratch.save_checkpoint(model, tmp_path / "toy.safetensors")
    loaded = vit_scratch.load_checkpoint(vit_scratch.create_model("toy_tiny", num_classes=3),
                                         tmp_path / "toy.safetensors")
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    with pytest.raises(ValueError, match="unknown model name 'toy_huge'; known models: .*toy_tiny"):
        vit_scratch.create_model("toy_huge")


def test_the_table_leads_from_a_name_to_its_classes():
    from vit_scratch.numpy_nn import cait as np_cait
    from vit_scratch.torch_nn import cait as t_cait

    family, spec = models.lookup("cait_xxs24_224")
    assert family.torch_class() is t_cait.Cait and family.numpy_class() is np_cait.Cait
    assert spec.name == "cait_xxs24_224" and family.spec.MODELS["cait_xxs24_224"] is spec
    names = [n for f in models.FAMILIES for n in f.spec.MODELS]
    assert sorted(names) == vit_scratch.list_models() and len(set(names)) == len(names)


def test_a_name_registered_twice_is_refused(monkeypatch):
    twice = models.Family(toy_family, None, None)
    monkeypatch.setattr(models, "FAMILIES", models.FAMILIES + (twice, twice))
    with pytest.raises(ValueError, match="model name 'toy_tiny' is registered by two families"):
        vit_scratch.list_models()
    with pytest.raises(ValueError, match="'toy_tiny' is registered twice"):
        toy_family.MODELS.register(toy_family.toy_tiny)
