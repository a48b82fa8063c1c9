"""Benchmark: any registered model against timm's on the same weights, and the NumPy room against PyTorch.

    python benchmarks/bench_models.py                      # vit_tiny, batch 8, 224², CPU
    python benchmarks/bench_models.py --model cait_xxs24_224 --img-size 224
    python benchmarks/bench_models.py --model coat_lite_tiny     # or coat_tiny (any CoaT name)
    python benchmarks/bench_models.py --model vit_small_patch16_224 --repeats 20
    python benchmarks/bench_models.py --families --markdown   # one model per family: the README table
    python benchmarks/bench_models.py --families --paths plain  # the plain formulas, no fast twins
    python benchmarks/bench_models.py --train-step --markdown   # NumPy/PyTorch training step rows
    python benchmarks/bench_models.py --families --device cuda --dtype bf16 --compile --skip-numpy
                                                           # GPU mode (written for a GPU machine;
                                                           # not run on one yet)

What it measures (a script, never a test -- timings are noisy and machine-specific):
  1. forward + backward time, ours vs timm, same weights, runs alternating between the two so
     drifts in machine load hit both; reported as medians and the median of per-pair ratios;
  2. forward time of the NumPy model vs our PyTorch model (inference, float32, CPU only);
  3. with ``--train-step``: one training step (forward, backward, AdamW) in the NumPy room over
     one in PyTorch, vit_digits and coat_lite_digits at the trainer's batch size, 1 and 2
     threads (``benchmarks/bench_train_step.py``, the README's speed rows).
timm is imported here only as the reference to race against.  ``--paths plain`` makes the
models call the plain formulas instead of their fast twins (``numpy_nn/_fast.py``,
``torch_nn/_fast.py``), to see what the twins gain in a whole model.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import vit_scratch


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_call(fn, device) -> float:
    _sync(device)
    start = time.perf_counter()
    fn()
    _sync(device)
    return time.perf_counter() - start


def fwd_bwd_step(model, images, labels, autocast_dtype):
    def step():
        model.zero_grad(set_to_none=True)
        with torch.autocast(images.device.type, dtype=autocast_dtype,
                            enabled=autocast_dtype is not None):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()

    return step


def use_plain_formulas() -> None:
    """Point the fast twins at the plain formulas they stand in for, for this process."""
    from vit_scratch.numpy_nn import _fast as np_fast
    from vit_scratch.numpy_nn import conv_position_encoding, layers
    from vit_scratch.torch_nn import _fast as t_fast
    from vit_scratch.torch_nn import attention

    np_fast.gelu = layers.gelu
    np_fast.depthwise_conv2d = conv_position_encoding.depthwise_conv2d
    np_fast.split_batch = lambda fn, x, threads=None: [fn(x)]  # the whole batch in one thread
    t_fast.mix_heads = attention.mix_heads


#: One model per family for ``--families`` (the smallest of each that timm also has).
FAMILY_MODELS = ("vit_tiny_patch16_224", "cait_xxs24_224", "coat_lite_tiny", "coat_tiny")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", nargs="+", default=["vit_tiny_patch16_224"],
                        help="one or more registered names")
    parser.add_argument("--families", action="store_true",
                        help=f"benchmark one model per family: {', '.join(FAMILY_MODELS)} "
                             f"(those that are registered)")
    parser.add_argument("--markdown", action="store_true", help="end with a Markdown table")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--img-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                        help="bf16 = autocast for the PyTorch fwd+bwd")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    parser.add_argument("--skip-numpy", action="store_true")
    parser.add_argument("--paths", choices=["fast", "plain"], default="fast",
                        help="plain: the models call the plain formulas, not their fast twins")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--train-step", action="store_true",
                        help="only the NumPy/PyTorch training-step rows (bench_train_step.py)")
    args = parser.parse_args(argv)
    if args.train_step:
        import bench_train_step  # benchmarks/ is the script's folder

        return bench_train_step.main(["--repeats", str(args.repeats)]
                                     + (["--markdown"] if args.markdown else []))
    if args.paths == "plain":
        use_plain_formulas()
    names = list(args.model)
    if args.families:
        known = set(vit_scratch.list_models())
        names = [n for n in FAMILY_MODELS if n in known]
    results = [bench_one(name, args) for name in names]
    if args.markdown:
        print()
        print("| model | fwd+bwd ms, timm | fwd+bwd ms, ours | ours / timm | fwd ms, NumPy "
              "| fwd ms, PyTorch | NumPy / PyTorch |")
        print("|---|---|---|---|---|---|---|")
        for r in results:
            cells = [r["model"]] + [
                f"{r[k]:.2f}" if k in r else "--" for k in (
                    "fwd_bwd_ms_timm", "fwd_bwd_ms_ours", "fwd_bwd_ratio_ours_over_timm",
                    "fwd_ms_numpy", "fwd_ms_torch_cpu", "fwd_ratio_numpy_over_torch")]
            print("| " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results if len(results) > 1 else results[0], f, indent=2)
    return results if len(results) > 1 else results[0]


def bench_one(model_name: str, args) -> dict:
    import timm  # the reference we race against

    torch.manual_seed(0)
    device = args.device
    oracle = timm.create_model(model_name, img_size=args.img_size)
    vit_scratch.randomize_weights_(oracle, seed=0)
    ours = vit_scratch.create_model(model_name, img_size=args.img_size)
    ours.load_state_dict(oracle.state_dict(), strict=True)
    oracle.to(device).train()
    ours.to(device).train()
    images = torch.randn(args.batch, ours.cfg.in_chans, args.img_size, args.img_size, device=device)
    labels = torch.randint(0, ours.cfg.num_classes, (args.batch,), device=device)
    autocast = torch.bfloat16 if args.dtype == "bf16" else None
    run_oracle, run_ours = oracle, ours
    if args.compile:
        run_oracle, run_ours = torch.compile(oracle), torch.compile(ours)

    steps = {"timm": fwd_bwd_step(run_oracle, images, labels, autocast),
             "ours": fwd_bwd_step(run_ours, images, labels, autocast)}
    for _ in range(args.warmup):
        for step in steps.values():
            step()
    times = {"timm": [], "ours": []}
    for i in range(args.repeats):
        order = ["timm", "ours"] if i % 2 == 0 else ["ours", "timm"]  # alternate who goes first
        for name in order:
            times[name].append(time_call(steps[name], device))
    ratios = [o / t for o, t in zip(times["ours"], times["timm"])]
    result = {
        "model": model_name, "batch": args.batch, "img_size": args.img_size,
        "device": device, "dtype": args.dtype, "compile": args.compile,
        "torch": torch.__version__, "timm": timm.__version__,
        "threads": torch.get_num_threads(), "paths": args.paths,
        "fwd_bwd_ms_timm": 1e3 * statistics.median(times["timm"]),
        "fwd_bwd_ms_ours": 1e3 * statistics.median(times["ours"]),
        "fwd_bwd_ratio_ours_over_timm": statistics.median(ratios),
    }

    if not args.skip_numpy:
        ours_cpu = vit_scratch.create_model(model_name, img_size=args.img_size).eval()
        ours_cpu.load_state_dict(oracle.state_dict())
        np_model = vit_scratch.create_numpy_model(
            model_name, vit_scratch.state_dict_to_numpy(oracle.state_dict()),
            img_size=args.img_size)
        x = images.float().cpu()
        x_np = x.numpy()
        np_model(x_np)
        with torch.no_grad():
            ours_cpu(x)
        t_np, t_pt = [], []
        for i in range(args.repeats):
            with torch.no_grad():
                pair = [("np", lambda: np_model(x_np)), ("pt", lambda: ours_cpu(x))]
                for name, fn in pair if i % 2 == 0 else pair[::-1]:
                    (t_np if name == "np" else t_pt).append(time_call(fn, "cpu"))
        result.update({
            "fwd_ms_numpy": 1e3 * statistics.median(t_np),
            "fwd_ms_torch_cpu": 1e3 * statistics.median(t_pt),
            "fwd_ratio_numpy_over_torch": statistics.median(
                [a / b for a, b in zip(t_np, t_pt)]),
        })

    width = max(map(len, result))
    for key, value in result.items():
        shown = f"{value:.3f}" if isinstance(value, float) else value
        print(f"{key:<{width}}  {shown}", flush=True)
    print()
    return result


if __name__ == "__main__":
    main()
