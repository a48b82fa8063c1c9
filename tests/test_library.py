"""The library's contract: no timm at import time, the factory, training-mode behaviour."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vit_scratch
from helpers import max_abs_diff

PACKAGE = Path(vit_scratch.__file__).parent


def test_import_leaves_timm_unimported():
    code = ("import sys, vit_scratch, vit_scratch.numpy_nn, vit_scratch.torch_nn, "
            "vit_scratch.data, vit_scratch.plotting; "
            "m = vit_scratch.create_model('vit_tiny_patch16_224', img_size=32); "
            "print('timm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_module_of_the_library_imports_timm():
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n == "timm" or n.startswith("timm.") for n in names), path


def test_numpy_room_does_not_import_torch():
    code = "import sys, vit_scratch.numpy_nn; print(any(m == 'torch' for m in sys.modules))"
    # vit_scratch/__init__ imports the PyTorch room, so load the NumPy room on its own
    code = ("import sys, importlib.util, types; "
            f"sys.path.insert(0, {str(PACKAGE.parent)!r}); "
            "pkg = types.ModuleType('vit_scratch'); pkg.__path__ = "
            f"[{str(PACKAGE)!r}]; sys.modules['vit_scratch'] = pkg; "
            "import vit_scratch.numpy_nn.vit; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_importing_the_package_and_the_numpy_room_leaves_torch_unimported():
    """A NumPy-only user pays for neither torch nor timm: the registry, the configs and the
    NumPy models import without them."""
    code = ("import sys, numpy as np, vit_scratch, vit_scratch.numpy_nn; "
            "from vit_scratch.specs.vit import vit_param_shapes; "
            "cfg = vit_scratch.get_config('vit_tiny_patch16_224', img_size=32, depth=1); "
            "params = {k: np.zeros(s, np.float32) for k, s in vit_param_shapes(cfg).items()}; "
            "m = vit_scratch.create_numpy_model('vit_tiny_patch16_224', params, img_size=32, depth=1); "
            "y = m(np.zeros((1, 3, 32, 32), np.float32)); "
            "print(y.shape, 'torch' in sys.modules, 'timm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(1, 1000) False False"


def test_list_models():
    names = vit_scratch.list_models()
    assert names == sorted(names)
    assert {"vit_tiny_patch16_224", "vit_small_patch16_224", "vit_base_patch16_224",
            "deit_tiny_patch16_224", "deit_small_patch16_224", "vit_digits"} <= set(names)
    assert vit_scratch.list_models("deit_*") == ["deit_small_patch16_224", "deit_tiny_patch16_224"]


def test_get_config_overrides():
    cfg = vit_scratch.get_config("vit_small_patch16_224", img_size=(224, 160), num_classes=10)
    assert cfg.grid_size == (14, 10) and cfg.num_patches == 140 and cfg.head_dim == 64
    assert cfg.embed_dim == 384 and cfg.num_classes == 10


def _tiny(**kwargs):
    return vit_scratch.create_model("vit_tiny_patch16_224", img_size=32, depth=3, **kwargs)


def test_gradients_reach_every_parameter():
    model = _tiny(num_classes=4)
    vit_scratch.randomize_weights_(model, seed=0)
    x = torch.randn(2, 3, 32, 32)
    loss = torch.nn.functional.cross_entropy(model(x), torch.tensor([0, 3]))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_attention_path_gradients_equal_fused_path():
    """The explicit path (used when attention weights are requested) is the same function as the
    fused kernel: same output and same input gradient."""
    from vit_scratch.torch_nn.attention import Attention

    attn = Attention(24, num_heads=4, qkv_bias=True).double()
    vit_scratch.randomize_weights_(attn, seed=1, std=0.3)
    x1 = torch.randn(2, 9, 24, dtype=torch.float64, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    fused = attn(x1)
    explicit, _ = attn(x2, return_attention=True)
    fused.square().sum().backward()
    explicit.square().sum().backward()
    assert max_abs_diff(fused, explicit) < 1e-12
    assert max_abs_diff(x1.grad, x2.grad) < 1e-12


def test_dropout_and_drop_path_act_in_training_only():
    model = _tiny(drop_rate=0.3, attn_drop_rate=0.3, drop_path_rate=0.3)
    assert [round(b.drop_path1.p, 2) for b in model.blocks] == [0.0, 0.15, 0.3]
    x = torch.randn(2, 3, 32, 32)
    model.train()
    torch.manual_seed(0)
    a = model(x)
    torch.manual_seed(1)
    b = model(x)
    assert max_abs_diff(a, b) > 1e-4  # stochastic in training
    model.eval()
    assert torch.equal(model(x), model(x))  # deterministic in eval


def test_default_init_is_the_training_recipe():
    model = vit_scratch.create_model("vit_tiny_patch16_224")
    w = model.blocks[0].mlp.fc1.weight
    # N(0, 0.02²) truncated at ±2 std: nothing beyond 0.04, and the std shrinks to 0.88 · 0.02
    assert w.abs().max() <= 0.04 and abs(w.std().item() - 0.88 * 0.02) < 0.001
    assert torch.equal(model.blocks[0].attn.qkv.bias, torch.zeros_like(model.blocks[0].attn.qkv.bias))
    assert torch.equal(model.norm.weight, torch.ones(192))


@pytest.mark.parametrize("name", ["vit_tiny_patch16_224"])
def test_forward_features_and_head(name):
    model = vit_scratch.create_model(name, img_size=32, num_classes=0).eval()
    x = torch.randn(2, 3, 32, 32)
    feats = model.forward_features(x)
    assert feats.shape == (2, 5, 192)
    assert torch.equal(model(x), feats[:, 0])  # num_classes=0: the class token's features
