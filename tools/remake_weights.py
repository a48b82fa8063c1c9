"""Remake a checkpoint the notebooks load (``notebooks/weights/NAME.safetensors``), by one command.

    python tools/remake_weights.py cait_canvas        # train, test, copy into notebooks/weights/
    python tools/remake_weights.py --list             # every file, its trainer command(s)

Each file has one recipe here: the trainer commands (``python -m vit_scratch.train ...``) that
make it, run in order (a later one may start from an earlier one's weights, ``{run:NAME}``).
The last run's selected checkpoint is copied to ``notebooks/weights/NAME.safetensors`` with
what made it in the file's metadata: ``train_commands`` (the command lines), ``train_settings``
(the last run's settings, as ``settings.json`` has them) and ``test_accuracy``.
``tests/test_checkpoints.py`` checks that every file has a recipe, that each command parses,
and that the settings it gives are the ones the file records.  Runs go to ``runs/weights/``.

The trainer is ``vit_scratch.train``; another machine or PyTorch version gives close, not
bit-identical, weights, so the notebooks assert what matters (an accuracy, a share of
attention), never the weights.
"""
from __future__ import annotations

import argparse
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
    "cait_canvas": Recipe(
        runs=(("cait_canvas",
               "--model cait_digits --data digits_on_canvas --model-arg img_size=24 "
               "--model-arg patch_size=4 --model-arg depth=2 --model-arg drop_path_rate=0.0 "
               "--epochs 200 --lr 1e-3 --weight-decay 0.05 --rotate 0 --translate 0.25 --scale 0 "
               "--threads 1"),),
        loaded_by=("05_class_attention",)),
    "coat_lite_canvas": Recipe(
        runs=(("coat_lite_digits",
               "--model coat_lite_digits --data digits --epochs 20 --threads 1 --select last"),
              ("coat_lite_canvas",
               "--model coat_lite_digits --data digits_on_canvas --model-arg img_size=16 "
               "--init {run:coat_lite_digits} --epochs 40 --lr 1e-3 --weight-decay 0.05 "
               "--rotate 0 --translate 0.25 --scale 0 --threads 1 --select last")),
        loaded_by=("07_conv_position_encoding",)),
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


def remake(name: str, runs: Path = RUNS, overwrite: bool = False) -> dict:
    """Run the recipe, then copy its last run's selected checkpoint into notebooks/weights/."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from vit_scratch.train import main as train

    result = None
    for argv in commands(name, runs):
        print(f"$ {TRAIN} {shlex.join(argv)}", flush=True)
        result = train(argv + (["--overwrite"] if overwrite else []))
    settings = settings_of(name, runs)
    chosen = Path(settings.out) / ("best.safetensors" if settings.select == "best"
                                   else "checkpoint.safetensors")
    with safe_open(str(chosen), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        metadata = dict(f.metadata() or {})
    metadata.update(train_commands=json.dumps(command_lines(name, runs)),
                    train_settings=json.dumps(recorded_settings(settings)),
                    test_accuracy=json.dumps(result["test_accuracy"]))
    target = WEIGHTS / f"{name}.safetensors"
    save_file(tensors, str(target), metadata=metadata)
    print(f"{target.relative_to(ROOT)}: test accuracy {result['test_accuracy']:.4f}, "
          f"{result['cpu_seconds']:.0f} CPU s in the last run")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"the files to remake: {', '.join(RECIPES)}")
    parser.add_argument("--list", action="store_true", help="print every recipe's commands")
    parser.add_argument("--overwrite", action="store_true", help="replace earlier runs in runs/weights/")
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
    for name in args.names:
        remake(name, overwrite=args.overwrite)


if __name__ == "__main__":
    sys.exit(main())
