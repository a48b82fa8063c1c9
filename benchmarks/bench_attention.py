"""Benchmark: how the cost of each family's attention grows with the number of tokens N.

    python benchmarks/bench_attention.py                          # CPU, N = 64 .. 4096
    python benchmarks/bench_attention.py --tokens 256 1024 --markdown
    python benchmarks/bench_attention.py --device cuda --dtype bf16 --compile --skip-numpy
                                                  # GPU mode (written for a GPU machine; not run
                                                  # on one yet)

Four attention kernels, on q, k, v of shape (B, heads, N, d) (no projections, so only the
attention itself is timed):

    self-attention (ViT, CaiT's patch stage)  softmax(q kᵀ/√d) v            O(N²·d), keeps N×N
    talking heads (CaiT's patch stage)        + two heads×heads mixings      O(N²·(d + h))
    class attention (CaiT's last stage)       one query: the class token     O(N·d)
    factorized attention (CoaT)               q (softmax(k)ᵀ v)/√d           O(N·d²), keeps d×d

PyTorch: ``F.scaled_dot_product_attention`` (fused; what our models run) and the explicit
softmax(q kᵀ) v (what ``get_attention_maps`` runs); NumPy: the NumPy room's functions.  Also
reported: the size of the largest intermediate each one builds.  A script, never a test.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F


def time_it(fn, repeats: int, device: str) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs (after one warm-up)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def torch_kernels(heads: int, device: str, compile_: bool):
    """name -> fn(q, k, v) for the PyTorch kernels."""
    mix_l = torch.nn.Linear(heads, heads).to(device)  # talking heads: before the softmax
    mix_w = torch.nn.Linear(heads, heads).to(device)  # ... and after it

    def explicit(q, k, v):
        return ((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)).softmax(-1) @ v

    def talking_heads(q, k, v):
        a = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (B, h, N, N)
        a = mix_l(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2).softmax(-1)
        a = mix_w(a.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return a @ v

    def class_attention(q, k, v):
        return F.scaled_dot_product_attention(q[:, :, :1], k, v)  # the class token's query

    def factorized(q, k, v):
        return (q @ (k.softmax(dim=-2).transpose(-2, -1) @ v)) * q.shape[-1] ** -0.5

    kernels = {"self-attention (fused)": F.scaled_dot_product_attention,
               "self-attention (explicit)": explicit, "talking heads": talking_heads,
               "class attention": class_attention, "factorized": factorized}
    if compile_:
        kernels = {name: torch.compile(fn) for name, fn in kernels.items()}
    return kernels


def numpy_kernels():
    from vit_scratch.numpy_nn.attention import scaled_dot_product_attention
    from vit_scratch.numpy_nn.factorized_attention import factorized_attention

    return {"self-attention": lambda q, k, v: scaled_dot_product_attention(q, k, v),
            "class attention": lambda q, k, v: scaled_dot_product_attention(q[:, :, :1], k, v),
            "factorized": factorized_attention}


def largest_intermediate(name: str, B: int, h: int, N: int, d: int) -> int:
    """Elements of the biggest tensor the kernel builds besides q, k, v and its output."""
    if name.startswith("self-attention") or name == "talking heads":
        return 0 if "fused" in name else B * h * N * N
    if name == "class attention":
        return B * h * N
    return B * h * (N * d + d * d)  # factorized: softmax(k) and the d×d summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", nargs="+", type=int, default=[64, 256, 1024, 4096])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--compile", action="store_true", help="torch.compile the kernels")
    parser.add_argument("--skip-numpy", action="store_true")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    B, h, d = args.batch, args.heads, args.head_dim
    kernels = torch_kernels(h, args.device, args.compile)
    rows = []
    for N in args.tokens:
        gen = torch.Generator().manual_seed(N)
        q, k, v = (torch.randn(B, h, N, d, generator=gen).to(args.device, dtype)
                   for _ in range(3))
        autocast = torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16,
                                  enabled=dtype == torch.bfloat16)
        with torch.no_grad(), autocast:
            for name, fn in kernels.items():
                seconds = time_it(lambda: fn(q, k, v), args.repeats, args.device)
                rows.append({"room": "torch", "kernel": name, "N": N, "ms": 1e3 * seconds,
                             "intermediate_MB": largest_intermediate(name, B, h, N, d)
                             * q.element_size() / 2**20})
                print(f"torch  {name:<26} N={N:<6} {1e3 * seconds:9.3f} ms", flush=True)
        if not args.skip_numpy:
            qn, kn, vn = (t.float().cpu().numpy() for t in (q, k, v))
            for name, fn in numpy_kernels().items():
                seconds = time_it(lambda: fn(qn, kn, vn), args.repeats, "cpu")
                rows.append({"room": "numpy", "kernel": name, "N": N, "ms": 1e3 * seconds,
                             "intermediate_MB": largest_intermediate(name, B, h, N, d) * 4 / 2**20})
                print(f"numpy  {name:<26} N={N:<6} {1e3 * seconds:9.3f} ms", flush=True)

    if args.markdown:
        print(f"\nms per call, B={B}, heads={h}, d={d}, {args.device}, {args.dtype}"
              f"{', compiled' if args.compile else ''}, {torch.get_num_threads()} thread(s)\n")
        tokens = args.tokens
        print("| room | kernel | " + " | ".join(f"N={n}" for n in tokens)
              + f" | largest intermediate at N={tokens[-1]} |")
        print("|---|---|" + "---|" * (len(tokens) + 1))
        seen = []
        for r in rows:
            if (r["room"], r["kernel"]) not in seen:
                seen.append((r["room"], r["kernel"]))
        for room, kernel in seen:
            mine = {r["N"]: r for r in rows if r["room"] == room and r["kernel"] == kernel}
            mb = mine[tokens[-1]]["intermediate_MB"]
            print(f"| {room} | {kernel} | " + " | ".join(f"{mine[n]['ms']:.2f}" for n in tokens)
                  + f" | {mb:.1f} MB |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "torch": str(torch.__version__), "rows": rows}, f,
                      indent=2)
    return rows


if __name__ == "__main__":
    main()
