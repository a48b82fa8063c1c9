"""Benchmark: one training step in the NumPy room over one in PyTorch, same model, same batch.

    python benchmarks/bench_train_step.py          # vit_digits, coat_lite_digits; 1 and 2 threads
    python benchmarks/bench_train_step.py --models cait_digits coat_digits --threads 1
    python benchmarks/bench_train_step.py --repeats 20 --markdown

A step is what each trainer does per batch: forward, label-smoothed cross-entropy, backward,
AdamW (weight decay on the trainer's groups), in training mode (stochastic depth on, as the
config sets it).  PyTorch: ``vit_scratch.train.train_step`` with ``torch.optim.AdamW``; NumPy:
``vit_scratch.numpy_nn.training.train_step`` with its ``AdamW``, the batch split over the same
number of threads.  Batch size: the trainer's default (``TrainSettings().batch_size``), float32,
CPU.  The two runs alternate, so a drift in machine load hits both; the table gives medians and
the median of the per-pair ratios.  Timings are noisy and machine-specific: a script, never a
test.  Goal: NumPy/PyTorch <= 1.5 (bound 2.0) on vit_digits and coat_lite_digits.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from threadpoolctl import threadpool_limits

import vit_scratch
from vit_scratch.numpy_nn import training
from vit_scratch.train import TrainSettings, param_groups, train_step


def bench(name: str, threads: int, repeats: int, warmup: int, batch: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = vit_scratch.create_model(name).train()
    np_model = vit_scratch.create_numpy_model(
        name, {k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    size = model.pretrained_cfg["input_size"]
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(batch, *size, generator=gen)
    labels = torch.randint(0, model.num_classes, (batch,), generator=gen)
    optimizer = torch.optim.AdamW(param_groups(model, 0.3), lr=1e-4)
    np_optimizer = training.AdamW(training.trainable_params(np_model), lr=1e-4, weight_decay=0.3)
    rng = np.random.default_rng(0)
    np_images, np_labels = images.numpy(), labels.numpy()

    def torch_step():
        train_step(model, images, labels, optimizer, 0.1)

    def numpy_step():
        training.train_step(np_model, np_optimizer, np_images, np_labels, 1e-4, 0.1, rng,
                            threads=threads)

    times = {"torch": [], "numpy": []}
    with threadpool_limits(limits=threads, user_api="blas"):
        for i in range(warmup + repeats):
            for key, step in (("torch", torch_step), ("numpy", numpy_step)):
                start = time.perf_counter()
                step()
                if i >= warmup:
                    times[key].append(time.perf_counter() - start)
    ratios = [n / t for n, t in zip(times["numpy"], times["torch"])]
    return {"model": name, "threads": threads, "torch_ms": 1e3 * statistics.median(times["torch"]),
            "numpy_ms": 1e3 * statistics.median(times["numpy"]),
            "ratio": statistics.median(ratios)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["vit_digits", "coat_lite_digits"])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--batch", type=int, default=TrainSettings().batch_size)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    rows = [bench(m, t, args.repeats, args.warmup, args.batch)
            for m in args.models for t in args.threads]
    if args.markdown:
        print("| model | threads | PyTorch step (ms) | NumPy step (ms) | NumPy / PyTorch |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['model']} | {r['threads']} | {r['torch_ms']:.1f} | {r['numpy_ms']:.1f} | "
                  f"{r['ratio']:.2f} |")
    else:
        for r in rows:
            print(f"{r['model']:<18} threads {r['threads']}: PyTorch {r['torch_ms']:7.1f} ms   "
                  f"NumPy {r['numpy_ms']:7.1f} ms   NumPy/PyTorch {r['ratio']:.2f}")
    return rows


if __name__ == "__main__":
    main()
