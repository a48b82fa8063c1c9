"""Benchmark: what installing the library and its extras takes, in fresh virtual environments.

    python benchmarks/bench_install.py --torch-wheel /path/to/torch-*+cpu-*.whl \
        --json benchmarks/results/install.json

For each extra (``[train]``, ``[course]``) a fresh virtual environment gets PyTorch's CPU build
and its torchvision first (``--torch-wheel``, or ``--torch-index`` such as
https://download.pytorch.org/whl/cpu), then ``pip install ".[EXTRA]"`` from this checkout. It
records how many packages and megabytes (the environment's ``site-packages``, 10⁶ bytes) each
step adds, and how long the extra's install took on the wall clock (a download's speed and the
machine's load make that rough). The environments are made in a temporary folder and deleted.
A script, never a test: it needs the package index and a few GB of disk.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import experiment  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def site_packages(env: Path) -> Path:
    return next((env / "lib").glob("python*/site-packages"))


def megabytes(folder: Path) -> float:
    total = 0
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total / 1e6


def packages(env: Path) -> int:
    out = subprocess.run([str(env / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                         capture_output=True, text=True, check=True).stdout
    return len([line for line in out.splitlines() if line.strip()])


def pip(env: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", *args],
                   check=True, cwd=ROOT)
    return time.perf_counter() - start


def measure(extra: str, torch_args: list[str], workdir: Path) -> dict:
    env = workdir / f"env-{extra}"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    empty = {"packages": packages(env), "MB": megabytes(site_packages(env))}
    torch_seconds = pip(env, *torch_args)
    with_torch = {"packages": packages(env), "MB": megabytes(site_packages(env))}
    extra_seconds = pip(env, f".[{extra}]")
    done = {"packages": packages(env), "MB": megabytes(site_packages(env))}
    print(f"[{extra}]: torch + torchvision {with_torch['MB'] - empty['MB']:.0f} MB; the extra adds "
          f"{done['packages'] - with_torch['packages']} packages, "
          f"{done['MB'] - with_torch['MB']:.0f} MB in {extra_seconds:.0f} s", flush=True)
    return {"extra": extra, "empty_env": empty, "with_torch": with_torch, "with_extra": done,
            "torch_MB": with_torch["MB"] - empty["MB"], "torch_seconds": torch_seconds,
            "added_packages": done["packages"] - with_torch["packages"],
            "added_MB": done["MB"] - with_torch["MB"], "total_MB": done["MB"] - empty["MB"],
            "install_seconds": extra_seconds}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--extras", nargs="+", default=["train", "course"])
    parser.add_argument("--torch-wheel", help="a CPU build of torch to install first")
    parser.add_argument("--torch-index", help="an index with PyTorch's CPU builds")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.torch_wheel:
        torch_args = [args.torch_wheel, "torchvision"]
    elif args.torch_index:
        torch_args = ["torch", "torchvision", "--index-url", args.torch_index]
    else:
        parser.error("give --torch-wheel or --torch-index: the CPU build goes in first")
    data = experiment.header("install", argv, {"extras": args.extras, "torch": torch_args})
    with tempfile.TemporaryDirectory() as workdir:
        data["runs"] = [measure(extra, torch_args, Path(workdir)) for extra in args.extras]
    if args.json:
        experiment.write(args.json, data)
    return data


if __name__ == "__main__":
    main()
