"""Benchmark: each fast path against the plain formula it stands in for -- why each one exists.

    python benchmarks/bench_fast_paths.py                  # sizes of the models' layers
    python benchmarks/bench_fast_paths.py --repeats 20 --markdown

The plain formulas are the functions a learner reads (``numpy_nn.layers.gelu``,
``numpy_nn.conv_position_encoding.depthwise_conv2d``, ``torch_nn.attention.mix_heads``, a model
forward on the whole batch); the fast twins are what the models run
(``numpy_nn/_fast.py``, ``torch_nn/_fast.py``), checked equal by ``tests/test_fast_paths.py``.
Shapes are those of a batch of 4 at 224² in the smallest model of each family that uses the
path.  The two sides run alternately, so drifts in machine load hit both; reported are the
medians and the median of the per-pair ratios plain / fast.  A script, never a test.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

import vit_scratch
from vit_scratch.numpy_nn import _fast as np_fast
from vit_scratch.numpy_nn import conv_position_encoding as np_cpe
from vit_scratch.numpy_nn import layers as np_layers
from vit_scratch.torch_nn import _fast as t_fast
from vit_scratch.torch_nn import attention as t_attn


def race(plain, fast, repeats: int, warmup: int) -> dict:
    """Times of ``plain()`` and ``fast()``, run alternately (who goes first alternates too)."""
    for _ in range(warmup):
        plain(), fast()
    times = {"plain": [], "fast": []}
    for i in range(repeats):
        order = [("plain", plain), ("fast", fast)]
        for name, fn in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {"ms_plain": 1e3 * statistics.median(times["plain"]),
            "ms_fast": 1e3 * statistics.median(times["fast"]),
            "speedup": statistics.median(p / f for p, f in zip(times["plain"], times["fast"]))}


def cases():
    """(name, shape note, plain fn, fast fn) for every fast path."""
    rng = np.random.default_rng(0)

    # GELU on fc1's output, float32: ViT-Tiny (B·N, 4C) and CoaT-Lite-Tiny's scale 1 (mlp ratio 8)
    for note, shape in (("vit_tiny: (4·197, 768)", (4 * 197, 768)),
                        ("coat_lite_tiny scale 1: (4·3137, 512)", (4 * 3137, 512))):
        h = rng.standard_normal(shape).astype(np.float32)
        yield ("gelu, float32", note,
               lambda h=h: np_layers.gelu(h.copy()),
               lambda h=h: np_fast.gelu(h.copy()))

    # depthwise convolutions, channels last, CoaT-Lite-Tiny's scale 1 (56×56, 64 channels)
    x = rng.standard_normal((4, 56, 56, 64)).astype(np.float32)
    for k in (3, 5, 7):
        w = rng.standard_normal((64, 1, k, k)).astype(np.float32)
        b = rng.standard_normal(64).astype(np.float32)
        yield (f"depthwise_conv2d {k}×{k}", "coat_lite_tiny scale 1: (4, 56, 56, 64)",
               lambda w=w, b=b: np_cpe.depthwise_conv2d(x, w, b, channels_last=True),
               lambda w=w, b=b: np_fast.depthwise_conv2d(x, w, b, channels_last=True))

    # a whole NumPy CoaT-Lite-Tiny forward: the whole batch at once (elementwise work on one
    # core, BLAS on all) vs the batch split over `num_threads()` threads
    model = vit_scratch.create_model("coat_lite_tiny")
    vit_scratch.randomize_weights_(model, seed=0)
    np_model = vit_scratch.create_numpy_model(
        "coat_lite_tiny", vit_scratch.state_dict_to_numpy(model.state_dict()))
    images = rng.standard_normal((4, 3, 224, 224)).astype(np.float32)
    whole = np_fast.split_batch

    def one_thread():
        np_fast.split_batch = lambda fn, x, threads=None: [fn(x)]
        try:
            return np_model(images)
        finally:
            np_fast.split_batch = whole

    yield ("split_batch", "coat_lite_tiny NumPy forward, batch 4",
           one_thread, lambda: np_model(images))

    # talking heads' head mixing, CaiT-XXS24's patch stage: (4, 4 heads, 197, 197)
    attn = torch.randn(4, 4, 197, 197, requires_grad=True)
    weight = torch.randn(4, 4, requires_grad=True)
    bias = torch.randn(4, requires_grad=True)

    def forward(mix):
        def run():
            with torch.no_grad():
                return mix(attn, weight, bias).softmax(-1)
        return run

    def forward_backward(mix):
        def run():
            mix(attn, weight, bias).softmax(-1).sum().backward()
        return run

    note = "cait_xxs24: (4, 4, 197, 197), then softmax"
    yield ("mix_heads, forward", note, forward(t_attn.mix_heads), forward(t_fast.mix_heads))
    yield ("mix_heads, fwd+bwd", note, forward_backward(t_attn.mix_heads),
           forward_backward(t_fast.mix_heads))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--markdown", action="store_true", help="end with a Markdown table")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"numpy {np.__version__}, torch {torch.__version__} (1 thread), split_batch "
          f"{np_fast.num_threads()} threads, {args.repeats} repeats\n")
    results = []
    for name, note, plain, fast in cases():
        r = race(plain, fast, args.repeats, args.warmup)
        results.append({"path": name, "shape": note, **r})
        print(f"{name:<24} {note:<42} formula {r['ms_plain']:8.2f} ms   fast {r['ms_fast']:8.2f} ms"
              f"   formula / fast {r['speedup']:.2f}", flush=True)
    if args.markdown:
        print("\n| fast path | shape | ms, formula | ms, fast | formula / fast |")
        print("|---|---|---|---|---|")
        for r in results:
            print(f"| {r['path']} | {r['shape']} | {r['ms_plain']:.2f} | {r['ms_fast']:.2f} "
                  f"| {r['speedup']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    main()
