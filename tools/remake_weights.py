"""Remake a checkpoint the notebooks load (``notebooks/weights/NAME.safetensors``), by one command.

    python tools/remake_weights.py cait_clutter       # train, test, copy into notebooks/weights/
    python tools/remake_weights.py --list             # every file, its trainer command(s)

Each file has one recipe here: the trainer commands (``python -m vit_scratch.train ...``) that
make it, run in order (a later one may start from an earlier one's weights, ``{run:NAME}``).
The last run's selected checkpoint is copied to ``notebooks/weights/NAME.safetensors`` with
what made it in the file's metadata: ``train_commands`` (the command lines), ``train_settings``
(the last run's settings, as ``settings.json`` has them), ``test_accuracy``, ``params`` and
``train_cpu_seconds`` (all the recipe's runs).
``tests/test_checkpoints.py`` checks that every file has a recipe, that each command parses,
and that the settings it gives are the ones the file records.  Runs go to ``runs/weights/``.

The trainer is ``vit_scratch.train``; another machine or PyTorch version gives close, not
bit-identical, weights, so the notebooks assert what matters (an accuracy, a share of
attention), never the weights.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = ROOT / "notebooks" / "weights"
RUNS = Path("runs") / "weights"
TRAIN = "python -m vit_scratch.train"


@dataclass(frozen=True)
class Recipe:
    """The trainer commands that make one file (their arguments after ``python -m
    vit_scratch.train``; ``--out`` is added), in order; ``{run:NAME}`` is the checkpoint of an
    earlier run of the recipe."""

    runs: tuple[tuple[str, str], ...]  # (run name, arguments)
    loaded_by: tuple[str, ...]  # the notebooks that load the file


RECIPES = {
    "coat_lite_canvas": Recipe(
        runs=(("coat_lite_digits",
               "--model coat_lite_digits --data digits --epochs 20 --threads 1 --select last"),
              ("coat_lite_canvas",
               "--model coat_lite_digits --data digits_on_canvas --model-arg img_size=16 "
               "--init {run:coat_lite_digits} --epochs 40 --lr 1e-3 --weight-decay 0.05 "
               "--rotate 0 --translate 0.25 --scale 0 --threads 1 --select last")),
        loaded_by=("07_conv_position_encoding",)),
    # seed 0 of benchmarks/exp_attention_localisation.py: a digit and a fainter distractor
    "vit_clutter": Recipe(
        runs=(("vit_clutter",
               "--model vit_digits --data digits_in_clutter --model-arg img_size=24 "
               "--model-arg patch_size=4 --epochs 30 --batch-size 64 --lr 1.5e-3 "
               "--weight-decay 0.05 --translate 0 --threads 1"),),
        loaded_by=("03_vision_transformer", "09_capstone")),
    "cait_clutter": Recipe(
        runs=(("cait_clutter",
               "--model cait_digits --data digits_in_clutter --model-arg img_size=24 "
               "--model-arg patch_size=4 --model-arg depth=2 --epochs 30 --batch-size 64 "
               "--lr 1.5e-3 --weight-decay 0.05 --translate 0 --threads 1"),),
        loaded_by=("09_capstone",)),
    # seed 0 of the README's digits recipe for the ViT, as benchmarks/bench_digits.py runs it
    "vit_digits": Recipe(
        runs=(("vit_digits", "--model vit_digits --data digits --threads 1"),),
        loaded_by=("09_capstone",)),
}


def commands(name: str, runs: Path = RUNS) -> list[list[str]]:
    """The trainer arguments of each run of ``name``'s recipe, ``--out`` and ``--init`` filled in."""
    out = []
    for run, args in RECIPES[name].runs:
        argv = shlex.split(args.replace("{run:", "{").format(
            **{r: str(runs / r / "checkpoint.safetensors") for r, _ in RECIPES[name].runs}))
        out.append(argv + ["--out", str(runs / run)])
    return out


def command_lines(name: str, runs: Path = RUNS) -> list[str]:
    return [f"{TRAIN} {shlex.join(argv)}" for argv in commands(name, runs)]


def recorded_settings(settings) -> dict:
    """What a file records of its last run's settings: everything but where the run was written
    and where it started from (paths of the machine that made it)."""
    data = asdict(settings) if not isinstance(settings, dict) else dict(settings)
    for key in ("out", "init", "progress"):
        data.pop(key, None)
    data["model_kwargs"] = dict(sorted(data["model_kwargs"].items()))
    return data


def settings_of(name: str, runs: Path = RUNS):
    """The last run's ``TrainSettings``, parsed from its command as the trainer parses it."""
    from vit_scratch.train import settings_from_args

    return settings_from_args(commands(name, runs)[-1])[0]


def remake(name: str, runs: Path = RUNS, overwrite: bool = False, from_run: Path | None = None
           ) -> dict:
    """Run the recipe, then copy its last run's selected checkpoint into notebooks/weights/.
    ``from_run``: copy that finished run folder instead of training (seed 0 of an experiment
    that trains with the recipe), once its settings.json is checked to be the recipe's."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from vit_scratch import run_folder
    from vit_scratch.train import main as train

    settings = settings_of(name, runs)
    if from_run is None:
        result, cpu_seconds = None, 0.0
        for argv in commands(name, runs):
            print(f"$ {TRAIN} {shlex.join(argv)}", flush=True)
            result = train(argv + (["--overwrite"] if overwrite else []))
            cpu_seconds += result["cpu_seconds"]
    else:
        recorded = recorded_settings(run_folder.read_settings(from_run)["settings"])
        wanted = recorded_settings(settings)
        differ = {k for k in wanted if recorded.get(k) != wanted[k]}
        if differ:
            raise SystemExit(f"{from_run}: not a run of the {name} recipe: "
                             + ", ".join(f"{k}={recorded.get(k)!r} (recipe: {wanted[k]!r})"
                                         for k in sorted(differ)))
        result = json.loads((from_run / "metrics.json").read_text(encoding="utf-8"))
        cpu_seconds = result["cpu_seconds"]
        settings = dataclasses.replace(settings, out=str(from_run))
    chosen = Path(settings.out) / ("best.safetensors" if settings.select == "best"
                                   else "checkpoint.safetensors")
    with safe_open(str(chosen), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        metadata = dict(f.metadata() or {})
    metadata.update(train_commands=json.dumps(command_lines(name, runs)),
                    train_settings=json.dumps(recorded_settings(settings)),
                    test_accuracy=json.dumps(result["test_accuracy"]),
                    params=json.dumps(result["params"]),
                    train_cpu_seconds=json.dumps(round(cpu_seconds, 1)))
    target = WEIGHTS / f"{name}.safetensors"
    save_file(tensors, str(target), metadata=metadata)
    target.chmod(0o644)
    print(f"{target.relative_to(ROOT)}: test accuracy {result['test_accuracy']:.4f}, "
          f"{result['cpu_seconds']:.0f} CPU s in the last run")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"the files to remake: {', '.join(RECIPES)}")
    parser.add_argument("--list", action="store_true", help="print every recipe's commands")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier runs in runs/weights/")
    parser.add_argument("--from-run", type=Path, metavar="DIR",
                        help="copy this finished run of the recipe instead of training (one NAME)")
    args = parser.parse_args(argv)
    if args.list or not args.names:
        for name in RECIPES:
            print(f"{name}.safetensors:")
            for line in command_lines(name):
                print(f"  {line}")
        return
    unknown = [n for n in args.names if n not in RECIPES]
    if unknown:
        parser.error(f"no recipe for {', '.join(unknown)}; the files: {', '.join(RECIPES)}")
    if args.from_run is not None and len(args.names) != 1:
        parser.error("--from-run copies one run: give one NAME")
    for name in args.names:
        remake(name, overwrite=args.overwrite, from_run=args.from_run)


if __name__ == "__main__":
    sys.exit(main())
