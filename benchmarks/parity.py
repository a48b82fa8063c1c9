"""Report: our PyTorch and NumPy logits against timm's, for every registered timm name.

    python benchmarks/parity.py                 # every timm name (minutes on 2 cores)
    python benchmarks/parity.py cait_xxs24_224  # some of them

timm's model with *every* parameter randomized (``randomize_weights_``: zero biases and identity
LayerNorms would hide bugs) is loaded strictly into ours; both rooms run a batch of 2 images at
the name's input size in float32.  The tests assert the bounds (``tests/test_timm_parity.py``);
this script prints the measured differences.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch

import vit_scratch


def main(argv=None) -> None:
    import timm  # the oracle; vit_scratch itself never imports it

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="registered names (default: every timm name)")
    args = parser.parse_args(argv)
    names = args.names or [n for n in vit_scratch.list_models() if not n.endswith("_digits")]
    torch.set_grad_enabled(False)
    print(f"{'model':24} {'max |logit|':>11} {'PyTorch vs timm':>16} {'NumPy vs timm':>14}   (max |diff|, relative)")
    for name in names:
        oracle = timm.create_model(name).eval()
        vit_scratch.randomize_weights_(oracle, seed=0)
        ours = vit_scratch.create_model(name).eval()
        ours.load_state_dict(oracle.state_dict(), strict=True)
        np_model = vit_scratch.create_numpy_model(
            name, vit_scratch.state_dict_to_numpy(oracle.state_dict()))
        c, h, w = ours.pretrained_cfg["input_size"]
        x = torch.randn(2, c, h, w, generator=torch.Generator().manual_seed(1))  # (2, C, H, W)
        expected = oracle(x).numpy()
        scale = float(np.abs(expected).max())
        d_torch = float(np.abs(ours(x).numpy() - expected).max())
        d_numpy = float(np.abs(np_model(x.numpy()) - expected).max())
        print(f"{name:24} {scale:11.3g} {d_torch:9.1e} ({d_torch / scale:.0e}) "
              f"{d_numpy:7.1e} ({d_numpy / scale:.0e})", flush=True)


if __name__ == "__main__":
    main()
