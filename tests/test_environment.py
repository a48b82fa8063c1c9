"""The environment must not change what our models do.

timm reads ``TIMM_FUSED_ATTN`` when it is imported: ``TIMM_FUSED_ATTN=0`` switches its attention
to the explicit path, which *calls* ``attn_drop`` with the weights -- so notebook 03's hook demo
("hooks on attn_drop see nothing") captured a map for such a user.  vit_scratch reads no
environment variable.  Which of our attention layers call ``attn_drop`` is fixed by the code,
whatever the environment says: ViT's never does (the fused kernel takes the dropout
probability; the explicit path used for attention maps applies ``F.dropout``), so a hook there
sees nothing; CaiT's talking-heads attention has no fused kernel and calls it on every forward,
its class attention only while ``get_attention_maps`` records; CoaT's factorized attention has
no ``attn_drop``.  The timm test runs in a subprocess with the variable set, since timm reads it
once, at import.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import vit_scratch
from helpers import family_of, make_pair, one_name_per_variant, small_kwargs

PACKAGE = Path(vit_scratch.__file__).parent

SCRIPT = r"""
import json, sys
import numpy as np, torch, timm
import vit_scratch
sys.path.insert(0, "tests")
from helpers import make_pair, max_abs_diff

oracle, ours = make_pair("vit_tiny_patch16_224", seed=7, img_size=64, depth=2)
x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(8))
report = {"timm_fused": bool(oracle.blocks[0].attn.fused_attn)}

def hook_count(model):
    captured = []
    hook = model.blocks[0].attn.attn_drop.register_forward_hook(
        lambda m, i, o: captured.append(o))
    with torch.no_grad():
        model(x)
    hook.remove()
    return len(captured)

report["ours_hook"] = hook_count(ours)
report["timm_hook"] = hook_count(oracle)
for blk in oracle.blocks:  # the notebook's fix: pin timm's default, the fused kernel
    blk.attn.fused_attn = True
report["timm_hook_pinned"] = hook_count(oracle)
with torch.no_grad():
    report["logits_diff"] = max_abs_diff(ours(x), oracle(x))
    maps = ours.get_attention_maps(x)
report["maps"] = [list(m.shape) for m in maps]
np.save(sys.argv[1], ours(x).detach().numpy())
print(json.dumps(report))
"""


def test_timm_fused_attn_0_changes_nothing_of_ours(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(PACKAGE.parent), OMP_NUM_THREADS="1",
               TIMM_FUSED_ATTN="0")
    out = tmp_path / "logits.npy"
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True,
                            text=True, env=env, cwd=PACKAGE.parent, check=True)
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["timm_fused"] is False  # the variable acts on timm ...
    assert report["timm_hook"] == 1  # ... so a hook on timm's attn_drop sees a map,
    assert report["timm_hook_pinned"] == 0  # unless fused_attn is pinned (notebook 03's fix)
    # ours: nothing captured, the maps available, the same logits as timm's unfused path ...
    assert report["ours_hook"] == 0
    assert report["maps"] == [[1, 3, 17, 17]] * 2
    assert report["logits_diff"] <= 1e-5
    # ... and bit for bit the logits of this process (whatever its environment)
    _, ours = make_pair("vit_tiny_patch16_224", seed=7, img_size=64, depth=2)
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        np.testing.assert_array_equal(np.load(out), ours(x).numpy())


#: Environment variables the library may read: the NumPy room's thread count (which changes
#: the speed, not the result -- tests/test_rooms.py checks any thread count gives the same logits),
#: the trainer's OpenMP wait policy (speed on a shared machine) and what torchrun tells each
#: process (vit_scratch/distributed.py).
ALLOWED_ENV = {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "RANK", "WORLD_SIZE", "LOCAL_RANK",
               "LOCAL_WORLD_SIZE"}


def test_the_library_reads_no_other_environment_variable():
    access = r"""(?:\benviron(?:\.get|\.setdefault)?\s*[\[(]|getenv\()"""
    pattern = re.compile(access + r"""\s*["'](\w+)["']""")
    read = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        names = set(pattern.findall(text))
        uses = len(re.findall(access, text))
        assert len(pattern.findall(text)) == uses, f"{path}: an environment read by a computed name"
        read |= names
        assert "TIMM_" not in text, path
    assert read <= ALLOWED_ENV, read - ALLOWED_ENV


#: Per family: (calls of attn_drop in a training forward, calls while get_attention_maps
#: records).  A family not named here: none, as the library's fused ``Attention`` (ViT's).
ATTN_DROP_CALLS = {
    "cait": lambda m: (len(m.blocks), len(m.blocks) + len(m.blocks_token_only)),
}


@pytest.mark.parametrize("name", one_name_per_variant())
def test_which_attention_calls_attn_drop(name):
    """What a hook on ``attn_drop`` sees, family by family and variant by variant, in training
    mode too."""
    rate = {} if family_of(name) == "coat" else dict(attn_drop_rate=0.1)  # CoaT: no such rate
    model = vit_scratch.create_model(name, **small_kwargs(name), **rate).train()
    calls = []
    for key, module in model.named_modules():
        if key.endswith("attn_drop"):
            module.register_forward_hook(lambda m, i, o: calls.append(o))
    c, h, w = model.pretrained_cfg["input_size"]
    x = torch.randn(2, c, h, w)
    model(x)
    in_forward = len(calls)
    model.get_attention_maps(x)
    expected = ATTN_DROP_CALLS.get(family_of(name), lambda m: (0, 0))(model)
    assert (in_forward, len(calls) - in_forward) == expected
