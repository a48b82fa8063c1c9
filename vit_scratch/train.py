"""Train any registered model on offline data -- the course's training command.

    python -m vit_scratch.train --model coat_lite_digits --data digits --epochs 16 --out runs/lite
    python -m vit_scratch.train --model coat_lite_digits --data my_pictures/ --out runs/mine
    python -m vit_scratch.train --out runs/lite --resume            # after a crash or Ctrl-C
    python -m vit_scratch.train --out runs/lite --resume --epochs 24   # extend a finished run
    torchrun --standalone --nproc_per_node 2 -m vit_scratch.train ...  # several processes
    python -m vit_scratch.train --help                  # every option, with its default

This module is the command line -- one option per field of ``TrainSettings``, generated from
the fields' help texts -- and the trainer's public names.  The trainer itself is the package
``vit_scratch.training``:

    settings   TrainSettings (the options and their defaults, the digits recipe) and the checks
               made before anything is built
    recipe     param_groups, lr_schedule, the objective, train_step, evaluate: one step of a
               scaled-down DeiT recipe, written by hand
    runners    who computes each step: PyTorch (``--backend torch``) or the NumPy room's
               hand-written backward passes and AdamW (``--backend numpy``), one interface
    distillation  the teacher of ``--teacher`` (DeiT's hard distillation): loaded, checked,
               run in eval mode under no_grad; the runners hold it
    progress   the run so far: history, best epoch, patience, what ``--resume`` restores
    loop       train(settings): set-up, the epochs, save

``train(settings, resume=, overwrite=, log=, on_epoch_end=, datasets=)`` is the Python API.

Which is which: the recipe, the schedule (``vit_scratch.schedule.lr_at``, which PyTorch's
schedulers follow in the PyTorch backend, tested equal) and the affine augmentation are written by
hand, to be read; the infrastructure comes from the libraries of its field --
``torch.utils.data`` (loaders), ``torch.distributed`` and ``DistributedDataParallel``,
``torch.optim`` (AdamW, its schedulers), torchvision's ``ImageFolder`` and transforms v2,
scikit-learn's stratified split, metrics and linear baseline, tqdm, matplotlib.
"""
from __future__ import annotations

import os

if __name__ == "__main__":  # the command line: set before PyTorch starts its OpenMP threads
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # (see training.settings.auto_threads)

import argparse
import sys
import typing
from dataclasses import asdict, fields
from pathlib import Path

from . import run_folder
from .distributed import world_from_env
from .run_folder import RUNTIME_ERRORS, STATE, command_warnings, one_line
from .training.loop import class_names, init_from, train, train_epoch
from .training.progress import RunProgress
from .training.recipe import (Step, count_params, epoch_seed, evaluate, evaluate_everywhere,
                              lr_schedule, objective, param_groups, train_step)
from .training.runners import RUNNERS, NumpyRunner, TorchRunner
from .training.settings import (RECIPES, SettingsError, TrainSettings, auto_threads,
                                build_model, check_numpy_backend, check_pretrained,
                                check_settings, default_out, parse_model_arg, recipe_settings,
                                resolve_device, resolve_precision, warmup_epochs)

__all__ = [
    "RECIPES", "RUNNERS", "NumpyRunner", "RunProgress", "SettingsError", "Step", "TorchRunner",
    "TrainSettings", "recipe_settings",
    "auto_threads", "build_model", "build_parser", "check_numpy_backend", "check_pretrained",
    "check_settings", "class_names", "count_params", "default_out", "epoch_seed", "evaluate",
    "evaluate_everywhere", "init_from", "lr_schedule", "main", "objective",
    "param_groups", "parse_model_arg", "resolve_device", "resolve_precision",
    "settings_from_args", "train", "train_epoch", "train_step", "warmup_epochs",
]


def build_parser(show_defaults: bool = True) -> argparse.ArgumentParser:
    """The command line, generated from :class:`TrainSettings` (one option per field), plus
    ``--resume`` and ``--overwrite``.  ``show_defaults=False``: options not given are absent
    from the parsed namespace (how ``--resume`` tells what was typed)."""
    parser = argparse.ArgumentParser(
        prog="python -m vit_scratch.train",
        description="Train a registered model on offline data (scikit-learn's digits, the "
                    "digits-on-canvas localisation set) or on a folder of your own pictures. "
                    "Holds out a validation split, saves the run in --out after every epoch, "
                    "tests the selected checkpoint once at the end, and writes metrics.json "
                    "and curves.png.  Under torchrun, several processes share each batch.",
        epilog="Example: python -m vit_scratch.train --model coat_lite_digits --data digits "
               "--epochs 16 --out runs/coat_lite_digits\n",
        formatter_class=run_folder.HelpFormatter,
        argument_default=None if show_defaults else argparse.SUPPRESS)
    types = typing.get_type_hints(TrainSettings)
    defaults = TrainSettings()

    def default(value):
        return {"default": value} if show_defaults else {}

    for f in fields(TrainSettings):
        meta = f.metadata
        flag = meta["flag"] or f"--{f.name.replace('_', '-')}"
        value = getattr(defaults, f.name)
        if meta["parse"] is not None:  # KEY=VALUE pairs, repeatable
            parser.add_argument(flag, dest=f.name, type=meta["parse"], action="append",
                                metavar=meta["metavar"], help=meta["help"], **default([]))
        elif types[f.name] is bool:
            parser.add_argument(flag, dest=f.name, action="store_true", help=meta["help"],
                                **default(value))
        else:
            kind = next((t for t in (int, float) if t in typing.get_args(types[f.name])
                         or types[f.name] is t), str)
            parser.add_argument(flag, dest=f.name, type=kind, metavar=meta["metavar"],
                                choices=meta["choices"], help=meta["help"], **default(value))
    parser.add_argument("--recipe", choices=tuple(RECIPES), metavar="NAME",
                        help="start from the named settings instead of the defaults (the "
                             "options given override them): " + "; ".join(
                                 f"'{name}': {recipe_text(name)}" for name in RECIPES),
                        **default("digits"))
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its last saved epoch (options not "
                             "given again are taken from the run); with --epochs N, extend a "
                             "finished run to N epochs", **default(False))
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run already in --out (otherwise that is an error)",
                        **default(False))
    return parser


def recipe_text(name: str) -> str:
    """What the recipe ``name`` changes, as options."""
    changes = RECIPES[name]
    if not changes:
        return "the defaults (scikit-learn's digits)"
    parts = []
    for key, value in changes.items():
        if key == "model_kwargs":
            parts += [f"--model-arg {k}={v}" for k, v in value.items()]
        else:
            parts.append(f"--{key.replace('_', '-')} {value}")
    return " ".join(parts)


def settings_from_args(argv) -> tuple[TrainSettings, bool, bool]:
    """argv -> (TrainSettings, resume, overwrite).  ``--recipe NAME`` starts from that recipe's
    settings (:func:`recipe_settings`); the options given override them.  With ``--resume``,
    options not given are taken from the run in ``--out``."""
    args = vars(build_parser().parse_args(argv))
    given = vars(build_parser(show_defaults=False).parse_args(argv))  # only what was typed
    resume, overwrite, recipe = args.pop("resume"), args.pop("overwrite"), args.pop("recipe")
    given.pop("recipe", None)
    for parsed in (args, given):
        if "model_kwargs" in parsed:
            parsed["model_kwargs"] = dict(parsed["model_kwargs"])
    args = asdict(recipe_settings(recipe, **{k: v for k, v in given.items()
                                            if k not in ("resume", "overwrite")}))
    if args["out"] is None:
        args["out"] = default_out(TrainSettings(**args))
    if resume:
        settings_file = Path(args["out"]) / run_folder.SETTINGS
        if settings_file.exists():
            saved = run_folder.read_settings(Path(args["out"]))["settings"]
            saved = {k: v for k, v in saved.items() if k in args}
            args = {**saved, **{k: v for k, v in given.items() if k in args},
                    "out": args["out"]}
    return TrainSettings(**args), resume, overwrite


def main(argv=None) -> dict:
    """The command: an argument error (argparse's, or a setting ``check_settings`` refuses)
    prints the usage and the message; a runtime error (the data, the model, a checkpoint, the
    run folder, a missing file or package) prints one line; both exit with status 2."""
    parser = build_parser()
    world = world_from_env()
    out = None
    try:
        settings, resume, overwrite = settings_from_args(argv)
        out = settings.out
        with command_warnings(parser.prog):
            return train(settings, resume=resume, overwrite=overwrite)
    except SettingsError as error:
        if not world.main:  # rank 0 says it
            raise SystemExit(2) from None
        parser.error(str(error))  # usage + the message, exit status 2
    except RUNTIME_ERRORS as error:
        if world.main:
            print(f"{parser.prog}: error: {one_line(error)}", file=sys.stderr)
        raise SystemExit(2) from None
    except FloatingPointError as error:  # a loss or gradient that is not finite (NumPy backend)
        if world.main:
            print(f"error: {error}; the run folder keeps the last finished epoch", file=sys.stderr)
        raise SystemExit(1) from None
    except KeyboardInterrupt:
        if world.main:
            if out is not None and (Path(out) / STATE).exists():
                print(f"\ninterrupted: the run in {out} is saved up to its last finished "
                      f"epoch; continue it with: python -m vit_scratch.train --out {out} "
                      f"--resume", file=sys.stderr)
            else:
                print("\ninterrupted before the first epoch was saved", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
