"""The loop: ``train(settings)`` reads top to bottom -- set-up, the epochs, save.

1. **Set-up.**  Every setting is checked (``training.settings.check_settings``) before anything
   is built, and a run is never written over unless ``overwrite``.  The model
   (``--model``, ``--model-arg key=value``) gets as many classes as the data has; the data
   follows the model: resized to its input size and normalised with its mean and std
   (``vit_scratch.data.make_datasets``).  ``--val-fraction`` of each class of the training split
   is held out for validation (stratified); one of fewer than 100 pictures is warned of
   (``training.yardsticks.small_validation``).  The runner of ``--backend`` (``training.runners``) holds the
   optimiser and its schedule and computes every step.
2. **The epochs.**  The batches (``distributed.BatchShares``: every picture once, or with
   ``--balanced-sampling`` every class equally often), the augmentation of each batch
   (``vit_scratch.data.random_affine``), one step of the recipe (``training.recipe``) per
   batch, the validation split evaluated, the best epoch kept (``--patience`` stops early), and
   the run folder (``vit_scratch.run_folder``) given the weights and everything ``--resume``
   needs (``training.progress``); each epoch's line says its time and the time left.
3. **Save.**  The test split is evaluated once, on the checkpoint ``--select`` chooses (the best
   validation accuracy, or the last epoch); then ``metrics.json`` and ``curves.png``.

Under ``torchrun`` (``vit_scratch.distributed``) every process runs this loop: rank 0 alone
logs and writes.
"""
from __future__ import annotations

import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch

from .. import distributed, run_folder
from ..checkpoint_checks import CheckpointError
from ..data import (ModelTransform, SeededSamples, data_classes, dataset_labels,
                    make_datasets, plain_pictures, validation_split)
from ..run_folder import CURVES, METRICS
from ..weights import load_pretrained
from .progress import RunProgress, epoch_times, plural
from . import yardsticks
from .recipe import count_params, train_epoch
from .runners import RUNNERS
from .settings import (SettingsError, TrainSettings, auto_threads, baselines, build_model,
                       check_settings, needs_grad_scaler, precision_name, resolve_precision)


def train(settings: TrainSettings, resume: bool = False, overwrite: bool = False, log=print,
          on_epoch_end=None, datasets=None) -> dict:
    """Check ``settings``, build the model and the data, train, select, test, save as it goes;
    returns a dict with ``model`` (the selected model), ``history``, ``test_accuracy``,
    ``selected_epoch``, ``train_seconds``, ``cpu_seconds``, ``params``, ``out``.

    ``resume=True`` continues the run in ``settings.out`` exactly where its last saved epoch
    ended (or extends a finished run to more ``epochs``); ``overwrite=True`` replaces a run
    there.  ``on_epoch_end(epoch, record)`` is called after each epoch has been saved.
    ``settings.out=None`` trains without saving.

    ``datasets=(train_set, test_set)`` or ``(train_set, val_set, test_set)``: any PyTorch
    datasets of ``(image, label)`` pairs, images already shaped as the model expects (e.g.
    torchvision's, with your own transforms); then ``settings.data`` only names them, and
    without a validation set, ``--val-fraction`` of the training set is held out.  The model
    gets ``len(train_set.classes)`` classes if the dataset has ``.classes``, else one more than
    the largest label.

    Under ``torchrun`` (``vit_scratch.distributed``) every process calls this: they join the
    process group, and rank 0 alone logs and writes."""
    world = distributed.world_from_env()
    try:
        check_settings(settings, own_data=datasets is not None, world=world)
    except SettingsError:
        raise
    except ValueError as error:
        raise SettingsError(str(error)) from None
    device = distributed.device_for(world, RUNNERS[settings.backend].compute_device(settings))
    joined = distributed.join(world, device)
    try:
        with _warnings_of_rank_0(world):
            return _train(settings, resume, overwrite, log if world.main else _quiet,
                          on_epoch_end, datasets, world, device)
    finally:
        distributed.leave(joined)


@contextmanager
def _warnings_of_rank_0(world):
    """Rank 0 alone shows warnings, as it alone logs: every process reads the same data and
    settings, so the others would only repeat them (a picture left out, once per process)."""
    if world.main:
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _train(settings, resume, overwrite, log, on_epoch_end, datasets, world, device) -> dict:
    # --- set-up: the run folder, the model, the data, the runner (optimiser and schedule)
    out, state = _open_run_folder(settings, resume, overwrite, world, device)
    torch.set_num_threads(settings.threads or auto_threads(world))
    model, classes = _model_for_the_data(settings, datasets, state, out, log)
    train_set, val_set, test_set = _datasets(settings, model, datasets)
    run = RunProgress.start(state, settings, out, world, device, log)
    batches = distributed.BatchShares(
        len(train_set), settings.batch_size, world, settings.seed,
        labels=dataset_labels(train_set) if settings.balanced_sampling else None)
    workers = dict(num_workers=settings.workers, persistent_workers=settings.workers > 0)
    samples = SeededSamples(train_set, settings.seed)
    if settings.workers:
        samples = WorkerClocks(samples, settings.workers)
    train_loader = torch.utils.data.DataLoader(
        samples, batch_sampler=batches, pin_memory=device.type == "cuda", **workers)
    share = settings.batch_size // world.size  # each process's part of a batch
    # Validation and test pictures are read in this process: no augmentation, one pass per
    # epoch, and a second set of workers would cost a fresh start of PyTorch per worker under
    # the ``spawn`` start method (benchmarks/bench_workers.py).
    val_loader, test_loader = (torch.utils.data.DataLoader(
        distributed.shard(d, world), batch_size=max(256, share))
        for d in (val_set, test_set))
    model.to(device)
    log(f"{settings.model}: {count_params(model):,} parameters, {len(train_set)} train / "
        f"{len(val_set)} validation / {len(test_set)} test images of "
        f"{tuple(model.pretrained_cfg['input_size'])}, {len(classes)} classes, "
        f"{plural(settings.epochs, 'epoch')} on {device}"
        f"{f' × {world.size} processes' if world.size > 1 else ''}"
        f"{_precision_label(settings, device)}"
        f"{RUNNERS[settings.backend].label}, {plural(torch.get_num_threads(), 'thread')}")
    notes = []
    small = yardsticks.small_validation(len(val_set), len(train_set), _validation_carved(settings, datasets))
    if small:
        notes.append(small)
        log(small)
    level = yardsticks.chance(dataset_labels(train_set), len(classes))
    baseline, convnet, teacher = _yardsticks(settings, world, model, classes, (
        train_set, val_set, test_set), (val_loader, test_loader), level, device, log)
    runner = RUNNERS[settings.backend](model, settings, len(train_loader), state, world, device,
                                       log, teacher=teacher)
    if out is not None and world.main:
        _write_run_start(out, settings, model, classes, run, overwrite and state is None)

    # --- the epochs: train, validate, keep the best, save
    show_bar = world.main and (settings.progress == "on" or (
        settings.progress == "auto" and sys.stderr.isatty()))
    first_epoch, walls = run.epoch, []
    for epoch in range(first_epoch, settings.epochs):
        if run.out_of_patience(settings.patience):
            notes.append(f"stopped early after {plural(run.epoch, 'epoch')}: no better "
                         f"validation accuracy for {plural(settings.patience, 'epoch')}")
            log(notes[-1])
            break
        if not settings.threads and epoch > first_epoch:  # the machine got busier or quieter
            torch.set_num_threads(auto_threads(world, own=torch.get_num_threads()))
        wall0, cpu0 = time.perf_counter(), time.process_time()
        workers0 = samples.seconds() if settings.workers else 0.0
        batches.set_epoch(epoch)
        record = train_epoch(runner, _progress(train_loader, epoch, settings.epochs, show_bar),
                             settings, epoch, world, device, len(train_set))
        val = runner.evaluate(val_loader)
        record.update(val_loss=val["loss"], val_accuracy=val["accuracy"])
        runner.push(model)  # the weights that are kept and saved are the model's
        workers_cpu = samples.seconds() - workers0 if settings.workers else 0.0
        (cpu,) = distributed.sum_over_processes([time.process_time() - cpu0 + workers_cpu],
                                                device)
        walls.append(time.perf_counter() - wall0)
        improved = run.add(record, model, walls[-1], cpu)
        if out is not None and world.main:
            run.save(out, model, runner.optimizer, settings, classes, improved, runner.scaler)
        log(f"epoch {epoch + 1:3d}/{settings.epochs}  loss {record['train_loss']:.4f}  "
            f"train acc {record['train_accuracy']:.4f}  val loss {record['val_loss']:.4f}  "
            f"val acc {record['val_accuracy']:.4f}{'  best' if improved else ''}  "
            f"({epoch_times(walls, run.train_seconds, settings.epochs - epoch - 1)})")
        warning = yardsticks.not_learning(run.history, level, baseline, settings)
        if warning:
            notes.append(warning)
            log(warning)
        if on_epoch_end is not None:
            on_epoch_end(epoch + 1, record)

    # --- save: test the selected checkpoint once, write metrics.json, then draw
    selected_epoch = run.select(model, settings.select)
    runner.pull(model)
    test = runner.evaluate(test_loader)
    result = {
        "model": settings.model, "data": settings.data, "classes": classes,
        "test_accuracy": test["accuracy"], "test_loss": test["loss"],
        "select": settings.select, "selected_epoch": selected_epoch,
        "best_epoch": run.best_epoch, "best_val_accuracy": run.best_val_accuracy,
        "epochs_done": run.epoch, "stopped_early": run.epoch < settings.epochs,
        "chance": level, "linear_baseline": baseline, "convnet_baseline": convnet,
        "notes": notes,
        "train_seconds": run.train_seconds, "cpu_seconds": run.cpu_seconds,
        "params": count_params(model),
        "images": {"train": len(train_set), "val": len(val_set), "test": len(test_set)},
        "device": str(device), "processes": world.size,
        "precision": precision_name(runner.autocast_dtype),
        "threads": torch.get_num_threads(), "torch": str(torch.__version__),
        "settings": asdict(settings), "history": run.history}
    if out is not None and world.main:
        run_folder.write_json(result, out / METRICS)
        run.finish(out)
        _draw_curves(run.history, out, settings, result)
    beside = "".join(f"{name} {numbers['test_accuracy']:.4f}, " for name, numbers in (
        ("linear baseline", baseline), ("convnet", convnet)) if numbers)
    beside = f"; {beside}chance {level:.4f}"
    log(f"test accuracy {test['accuracy']:.4f}{beside} ({settings.select} checkpoint: epoch "
        f"{selected_epoch}, validation accuracy "
        f"{run.history[selected_epoch - 1]['val_accuracy']:.4f}) after "
        f"{plural(run.epoch, 'epoch')} ({run.train_seconds:.1f} s wall, "
        f"{run.cpu_seconds:.1f} s CPU in all processes, {device})"
        f"{f' -> {out}' if out is not None else ''}")
    return {**result, "model": model, "out": out}


def _precision_label(settings, device) -> str:
    """`` (bf16 autocast)``, `` (fp16 autocast, gradient scaler)`` or nothing (fp32, or the
    NumPy backend), as the runner will train."""
    if settings.backend != "torch":
        return ""
    dtype = resolve_precision(settings.precision, device)
    if dtype is None:
        return ""
    scaled = ", gradient scaler" if needs_grad_scaler(dtype) else ""
    return f" ({precision_name(dtype)} autocast{scaled})"


def _yardsticks(settings, world, model, classes, splits, loaders, level, device, log):
    """``(linear baseline, convnet yardstick, teacher)`` of ``--baseline`` and ``--teacher``
    (``training.yardsticks``, ``training.distillation``), each logged: the linear baseline in
    rank 0 alone; the convnet, which ``--teacher auto`` also needs, in every process (each
    trains the same one, on the whole training split)."""
    from .distillation import AUTO, load_teacher

    train_set, val_set, test_set = splits
    names = baselines(settings.baseline)
    baseline = convnet = trained = None
    if "linear" in names and world.main:
        baseline = yardsticks.linear_baseline(plain_pictures(train_set), val_set, test_set)
        log(f"linear baseline (logistic regression on the pixels): validation "
            f"{baseline['val_accuracy']:.4f}, test {baseline['test_accuracy']:.4f} "
            f"({baseline['seconds']:.1f} s); chance {level:.4f}")
    if "cnn" in names or settings.teacher == AUTO:
        log(f"convnet yardstick: the small convnet (training.convnet), "
            f"{plural(settings.epochs, 'epoch')} on the same pictures ...")
        convnet, trained = yardsticks.convnet_baseline(
            train_set, *loaders, settings, len(classes), model.pretrained_cfg, device, log)
        log(f"convnet yardstick ({convnet['params']:,} parameters, epoch "
            f"{convnet['selected_epoch']}): validation {convnet['val_accuracy']:.4f}, test "
            f"{convnet['test_accuracy']:.4f} ({convnet['cpu_seconds']:.1f} CPU s)")
    teacher = load_teacher(settings, model, device, log, classes, trained)
    return baseline, convnet, teacher


def _validation_carved(settings: TrainSettings, datasets) -> bool:
    """Whether the validation split is held out of the training pictures (``--val-fraction``),
    rather than given: a folder's own val/ beside train/ and test/, or a caller's datasets."""
    if datasets is not None:
        return len(datasets) == 2
    root = Path(settings.data)
    return not all((root / name).is_dir() for name in ("train", "val", "test"))


class WorkerClocks:
    """The training samples as DataLoader workers read them, each worker writing its CPU time
    so far (``time.process_time``, its start included) into shared memory after every item it
    reads: :meth:`seconds` adds them up, so that the run's CPU seconds count the workers'
    decoding and augmentation too.  A ``multiprocessing`` array, which workers started by
    ``fork`` or ``spawn`` both inherit."""

    def __init__(self, dataset, workers: int):
        import multiprocessing

        self.dataset = dataset
        self.clocks = multiprocessing.RawArray("d", workers)  # one slot per worker, 0.0 at first

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key):
        item = self.dataset[key]
        worker = torch.utils.data.get_worker_info()
        if worker is not None:
            self.clocks[worker.id] = time.process_time()
        return item

    def seconds(self) -> float:
        """The workers' CPU seconds so far, added up."""
        return float(sum(self.clocks))


# --- the set-up -------------------------------------------------------------------------------

def _open_run_folder(settings, resume, overwrite, world, device):
    """``(out, state)``: the checked run folder (``None`` without ``--out``) and, resuming, its
    saved state.  Rank 0 alone checks and reads the folder; the others get its verdict and the
    state, so that every process stops on an error and resumes from the same epoch."""
    out = Path(settings.out) if settings.out is not None else None
    if out is None:
        if resume:
            raise ValueError("resume needs the run folder (--out)")
        return None, None
    error, state = None, None
    if world.main:
        try:
            run_folder.check_out(out, resume, overwrite)
            if resume:
                state = run_folder.load_state(out)
                run_folder.check_resume(settings, state, out)
        except (ValueError, CheckpointError) as caught:
            error = caught
    verdict = distributed.same_everywhere(None if error is None else str(error), device)
    if error is not None:
        raise error
    if verdict is not None:
        raise ValueError(verdict)
    return out, distributed.broadcast(state, device)


def _model_for_the_data(settings: TrainSettings, datasets, state: dict | None, out: Path | None,
                        log=print):
    """The model, with as many classes as the data has, and the class names.  Resuming: the
    run's model with its saved weights, after checking that the data has the run's classes.
    Data with fewer than 2 classes is refused: there is nothing to tell apart."""
    classes = class_names(datasets[0]) if datasets is not None else data_classes(settings.data)
    if len(classes) < 2:
        raise ValueError(f"--data {settings.data}: {len(classes)} class(es) "
                         f"{classes}; a classifier needs at least 2 (one subfolder per class)")
    if state is None:
        start = settings.init
        if settings.pretrained:  # fetched (or found in the cache) before anything is built
            from .. import hub

            start = hub.download(settings.model, option="--pretrained")
        torch.manual_seed(settings.seed)
        model = build_model(settings, len(classes))
        if start is not None:
            init_from(model, start, log)
        return model, classes
    saved = state["settings"]
    model = build_model(settings, len(state["classes"]))
    own, weights = model.state_dict(), state["model"]
    mismatch = {"missing": [k for k in own if k not in weights],
                "unexpected": [k for k in weights if k not in own],
                "mis-shaped": [k for k in own if k in weights and own[k].shape != weights[k].shape]}
    if any(mismatch.values()):  # a run of another model
        listed = "; ".join(f"{what}: {', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''}"
                           for what, keys in mismatch.items() if keys)
        raise CheckpointError(f"--resume: the run in {str(out)!r} was trained with --model "
                              f"{saved['model']} {saved['model_kwargs']}, not {settings.model} "
                              f"{settings.model_kwargs}; its weights do not fit ({listed})")
    model.load_state_dict(weights)
    if classes != state["classes"]:
        raise ValueError(f"--resume: the data's classes {classes} are not the run's "
                         f"{state['classes']}")
    return model, classes


def _datasets(settings: TrainSettings, model, datasets):
    """``(train, val, test)``: the data shaped for the model, or the caller's datasets, with
    ``--val-fraction`` of the training split held out when there is no validation set."""
    if datasets is not None:
        if len(datasets) == 3:
            return tuple(datasets)
        train_set, test_set = datasets
        return (*validation_split(train_set, settings.val_fraction, settings.split_seed),
                test_set)
    augment = ModelTransform(model, settings.flip, settings.crop_scale, settings.color_jitter)
    return make_datasets(settings.data, model, settings.test_fraction, settings.split_seed,
                         val_fraction=settings.val_fraction, bad_images=settings.bad_images,
                         augment=augment if augment.augments else None)


def _write_run_start(out: Path, settings, model, classes, run, replace: bool) -> None:
    """Once everything is set up (the data read, the model built): the run folder made, the
    old run's files gone (``--overwrite``: and the evaluations and predictions made from it),
    settings.json, and metrics.csv as the saved history has it (a resumed run)."""
    out.mkdir(parents=True, exist_ok=True)
    if replace:
        run_folder.remove_run_files(out)
    run_folder.write_settings(out, settings, model, classes)
    if run.history:
        run_folder.write_metrics_csv(out, run.history)


def _draw_curves(history, out: Path, settings, result) -> None:
    """curves.png; skipped with a warning when matplotlib is missing or the figure fails -- a
    finished run keeps its files either way (metrics.json is written before)."""
    try:
        from ..plotting import save_training_curves

        baseline = result["linear_baseline"]
        stopped = next((n for n in result["notes"] if n.startswith("stopped early")), None)
        save_training_curves(history, out / CURVES, title=f"{settings.model} on {settings.data}",
                             selected_epoch=result["selected_epoch"],
                             test_accuracy=result["test_accuracy"],
                             label_smoothing=settings.label_smoothing, chance=result["chance"],
                             baseline=baseline["val_accuracy"] if baseline else None,
                             stopped_early=stopped)
    except Exception as error:  # noqa: BLE001 -- a figure never costs a run its results
        warnings.warn(f"{CURVES} not drawn ({type(error).__name__}: {error}); the run's other "
                      f"files are complete", stacklevel=2)


def init_from(model, path, log=print) -> None:
    """Load the weights of ``path`` into ``model`` for fine-tuning: strictly, except that a head
    for another number of classes is replaced by a fresh one (``weights.load_pretrained``, which
    warns).  Mismatched keys raise ``CheckpointError`` naming them.  What was resized to fit
    (the position embedding, for another input size) is logged, key by key."""
    from ..weights import read_state_dict

    own = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    load_pretrained(model, path)
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    head_keys = {f"{name}.{p}" for name, m in model.named_modules() if m is head
                 for p, _ in m.named_parameters()}
    for key, tensor in read_state_dict(path).items():
        if key in own and key not in head_keys and tuple(tensor.shape) != own[key]:
            log(f"{path}: {key} resized from {tuple(tensor.shape)} to {own[key]} to fit the "
                f"model's input size")


def class_names(dataset) -> list[str]:
    """``dataset.classes``, or ``["0", ..., str(max label)]`` read from ``.targets`` or from the
    dataset itself."""
    classes = getattr(dataset, "classes", None)
    if classes:
        return [str(c) for c in classes]
    from ..data import dataset_labels

    return [str(c) for c in range(int(dataset_labels(dataset).max()) + 1)]


def _progress(loader, epoch: int, epochs: int, show: bool):
    if not show:
        return loader
    from ..extras import require

    tqdm = require("tqdm.auto", "the progress bar (--progress)").tqdm
    return tqdm(loader, desc=f"epoch {epoch + 1}/{epochs}", leave=False, unit="batch",
                dynamic_ncols=True)


def _quiet(*_):
    pass
