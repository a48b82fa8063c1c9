"""Several processes against one: the batches each process takes (``distributed.BatchShares``),
the evaluation shares, the data order the loop asks for (shuffled, by ``--seed``, anew each
epoch), and a real ``torchrun`` launch of 2 processes on gloo with the default augmentation on
a data set the processes do not divide, against one process.

What is equal, and tested so: the global batches, every picture's augmentation (seeded by
``(seed, epoch, index)``), the per-epoch losses and accuracies (each picture counted once), the
weights to float rounding, and the evaluation (each picture evaluated by exactly one process).
Dropout and stochastic depth are drawn by each process for its own share of a batch, so the
launch turns stochastic depth off."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Subset, TensorDataset

from test_training import TINY, TINY_ARGS, make_pictures, same_model
from vit_scratch.data import SeededSamples, affine_draws, random_affine
from vit_scratch.distributed import BatchShares, World, shard
from vit_scratch.run_folder import CHECKPOINT, METRICS
from vit_scratch.train import TrainSettings, main, train

ROOT = Path(__file__).resolve().parents[1]


def shares(n, batch_size, size, seed=0, epoch=0):
    """Every process's batches of one epoch: [rank][step] -> [(epoch, index, counted)]."""
    out = []
    for rank in range(size):
        sampler = BatchShares(n, batch_size, World(rank=rank, size=size), seed)
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


@pytest.mark.parametrize("n, batch_size, size", [(10, 4, 2), (10, 4, 3), (9, 4, 4), (33, 8, 2),
                                                  (5, 6, 2)])
def test_the_processes_take_the_global_batches_once_each(n, batch_size, size):
    """Together, the processes' shares are one process's batches, step by step; every item is
    counted once per epoch, nothing repeated; a process with nothing left in a short last
    batch gets one stand-in, not counted."""
    (alone,) = shares(n, batch_size, 1)
    split = shares(n, batch_size, size)
    assert all(len(steps) == len(alone) == math.ceil(n / batch_size) for steps in split)
    counted = []
    for step, batch in enumerate(alone):
        together = [key for rank in range(size) for key in split[rank][step] if key[2]]
        assert sorted(together) == sorted(batch)
        counted += [index for _, index, _ in together]
        for rank in range(size):
            stand_ins = [key for key in split[rank][step] if not key[2]]
            assert len(stand_ins) == (len(split[rank][step]) == 1 and rank >= len(batch))
    assert sorted(counted) == list(range(n))


def test_the_order_is_shuffled_by_seed_and_epoch():
    def order(seed, epoch):
        return [i for batch in shares(20, 4, 1, seed, epoch)[0] for _, i, _ in batch]

    assert sorted(order(0, 0)) == list(range(20))
    assert order(0, 0) != list(range(20))  # shuffled
    assert order(0, 0) == order(0, 0)  # fixed by the seed and the epoch
    assert order(0, 0) != order(1, 0)  # the seed
    assert order(0, 0) != order(0, 1)  # the epoch


def test_balanced_sampling_draws_every_class_equally_often():
    """Classes of 80, 150, 100, 120 and 91 items (541 in all, as a student's folder): each
    epoch 108 or 109 draws of every class, the small class's items each once before any twice,
    the large class's never twice; a fresh sample each epoch, fixed by the seed; the processes'
    shares together are one process's batches."""
    counts = [80, 150, 100, 120, 91]
    labels = torch.cat([torch.full((c,), k) for k, c in enumerate(counts)])
    labels = labels[torch.randperm(541, generator=torch.Generator().manual_seed(5))]

    def epoch(e, seed=0, world=World()):
        sampler = BatchShares(541, 32, world, seed, labels=labels)
        sampler.set_epoch(e)
        return [key for batch in sampler for key in batch]

    first = [i for _, i, _ in epoch(0)]
    assert len(first) == 541 and len(list(BatchShares(541, 32, labels=labels))) == 17
    per_class = np.bincount(labels[first].numpy(), minlength=5)
    assert per_class.sum() == 541 and set(per_class) <= {108, 109}
    drawn = np.bincount(first, minlength=541)
    small, large = (labels == 0).numpy(), (labels == 1).numpy()
    assert drawn[small].min() == 1 and drawn[small].max() == 2  # every one, some twice
    assert drawn[large].max() == 1 and (drawn[large] == 0).sum() == 150 - per_class[1]
    assert [i for _, i, _ in epoch(0)] == first and [i for _, i, _ in epoch(1)] != first
    assert [i for _, i, _ in epoch(0, seed=1)] != first
    together = sorted(key for rank in range(2) for key in epoch(0, world=World(rank, 2)))
    assert together == sorted(epoch(0))
    plain = [i for batch in BatchShares(541, 32).global_batches() for i in batch]
    assert sorted(plain) == list(range(541))  # without labels: every item once, as before
    with pytest.raises(ValueError, match="labels: 540 for 541 items"):
        BatchShares(541, 32, labels=labels[:540])


def test_the_loop_samples_the_classes_evenly_when_asked():
    """--balanced-sampling: 12 pictures of one class and 4 of the other, read 8 and 8 times an
    epoch; without it, 12 and 4."""
    labels = torch.tensor([0] * 12 + [1] * 4)
    for balanced, expected in ((True, [8, 8]), (False, [12, 4])):
        pictures = TensorDataset(torch.randn(16, 1, 24, 24), labels)
        pictures.classes = ["a", "b"]
        data = ReadOrder(pictures)
        settings = TrainSettings(model="vit_digits", model_kwargs=dict(TINY), epochs=2,
                                 batch_size=4, device="cpu", progress="off", threads=1,
                                 baseline="none", balanced_sampling=balanced, out=None)
        train(settings, datasets=(data, separable(4, 1), separable(4, 2)), log=lambda *_: None)
        for e in range(2):
            read = labels[data.read[16 * e:16 * (e + 1)]]
            assert np.bincount(read.numpy()).tolist() == expected


def test_evaluation_shares_cover_every_item_once():
    data = TensorDataset(torch.arange(11))
    for size in (1, 2, 3):
        seen = [int(x) for rank in range(size) for (x,) in shard(data, World(rank=rank,
                                                                               size=size))]
        assert sorted(seen) == list(range(11))


def test_augmentation_is_seeded_by_the_picture_not_the_process():
    """The same picture gets the same affine draw and the same photo transform, whichever
    batch and process it comes in."""
    draws = affine_draws(0, 3, [5, 9, 2])
    np.testing.assert_array_equal(draws[1], affine_draws(0, 3, [9])[0])
    assert not np.array_equal(draws[0], affine_draws(0, 4, [5])[0])  # another epoch
    assert not np.array_equal(draws[0], affine_draws(1, 3, [5])[0])  # another seed
    images = torch.rand(3, 1, 12, 12)
    moved = random_affine(images, 8.0, 0.05, 0.08, draws=draws)
    alone = random_affine(images[1:2], 8.0, 0.05, 0.08, draws=affine_draws(0, 3, [9]))
    torch.testing.assert_close(moved[1:2], alone, rtol=0, atol=0)

    class Noisy:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.rand(2), i

    samples = SeededSamples(Noisy(), seed=0)
    a, b = samples[(1, 2, True)], samples[(1, 2, True)]
    assert torch.equal(a[0], b[0]) and a[1:] == (2, 2, True)
    assert not torch.equal(a[0], samples[(2, 2, True)][0])


class ReadOrder(Subset):
    """A dataset that writes down the order its items are read in."""

    def __init__(self, dataset):
        super().__init__(dataset, range(len(dataset)))
        self.classes, self.read = dataset.classes, []

    def __getitem__(self, index):
        self.read.append(index)
        return self.dataset[index]

    def __getitems__(self, indices):
        return [self[i] for i in indices]


def separable(n, seed):
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 2
    dataset = TensorDataset(torch.randn(n, 1, 24, 24, generator=gen) + labels[:, None, None, None],
                            labels)
    dataset.classes = ["a", "b"]
    return dataset


def test_the_loop_shuffles_by_seed_and_epoch():
    """The trainer reads its training data in a shuffled order that --seed fixes and that
    changes from epoch to epoch (``set_epoch`` before every epoch)."""
    def read(seed, epochs):
        data = ReadOrder(separable(16, 0))
        settings = TrainSettings(model="vit_digits", model_kwargs=dict(TINY), epochs=epochs,
                                 batch_size=4, device="cpu", progress="off", threads=1,
                                 baseline="none", seed=seed, out=None)
        train(settings, datasets=(data, separable(4, 1), separable(4, 2)), log=lambda *_: None)
        return [data.read[i:i + 16] for i in range(0, len(data.read), 16)]

    first, second = read(0, 2)
    assert sorted(first) == sorted(second) == list(range(16))
    assert first != list(range(16))  # shuffled
    assert first != second  # another order each epoch
    assert read(0, 1) == [first] and read(1, 1) != [first]  # fixed by --seed, and only by it


def read_ids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def test_torchrun_two_processes_equal_one_with_the_default_augmentation(tmp_path):
    """torchrun, 2 processes on gloo, the default augmentation, 33 training pictures in batches
    of 8 (the last one a single picture: the second process gets a stand-in) and 2 accumulated
    parts: the same per-epoch losses and accuracies as one process (to 1e-6), the same weights
    (to 2e-6; the attention key bias as ``same_model`` explains) and logits (to 1e-5).  Each
    picture is trained on once per epoch and evaluated by one process; the CPU seconds add up
    over the processes; rank 0 alone prints, its warnings too (a picture that does not decode,
    left out, is named once).  Then both runs resume in one process, extended by an epoch,
    and stay equal."""
    data = make_pictures(tmp_path / "pictures", per_class=20)  # 33 train / 15 val / 12 test
    (data / "cat" / "broken.png").write_bytes(b"not a picture")  # sorted last: left out
    args = ["--data", str(data), "--test-fraction", "0.2", "--val-fraction", "0.3125",
            "--batch-size", "8", "--epochs", "2", "--lr", "1e-2", "--warmup-epochs", "0.5",
            "--select", "last", "--model-arg", "drop_path_rate=0.0", "--device", "cpu",
            "--threads", "1", "--progress", "off", "--baseline", "none",
            "--bad-images", "skip", *TINY_ARGS]
    ids = tmp_path / "ids"
    ids.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "IDS_DIR": str(ids),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(ROOT / "tests" / "ddp_child.py"), *args, "--accum-steps", "2", "--out",
         str(tmp_path / "two")], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("epoch   2/2") == 1  # rank 0 alone prints
    assert done.stderr.count("warning: left out 1 picture(s)") == 1, done.stderr[-3000:]
    one = main([*args, "--out", str(tmp_path / "one")])
    two = json.loads((tmp_path / "two" / METRICS).read_text())
    assert two["processes"] == 2 and one["processes"] == 1
    assert two["images"] == one["images"] == {"train": 33, "val": 15, "test": 12}
    for a, b in zip(one["history"], two["history"]):
        for key in ("train_loss", "train_cross_entropy", "val_loss"):
            assert a[key] == pytest.approx(b[key], abs=1e-6), key
        for key in ("train_accuracy", "val_accuracy", "lr"):
            assert a[key] == b[key], key
    assert two["test_accuracy"] == one["test_accuracy"]
    assert two["cpu_seconds"] == 2 * (1 + 2)  # each epoch: 1 s of rank 0 and 2 s of rank 1
    same_model(tmp_path / "one" / CHECKPOINT, tmp_path / "two" / CHECKPOINT)

    # which pictures each process read: training, 17 + 17 an epoch (one of them a stand-in)
    train0, train1 = (read_ids(ids / f"train-rank{r}.txt") for r in (0, 1))
    assert len(train0) == len(train1) == 2 * 17
    for epoch in range(2):
        seen = train0[17 * epoch:17 * (epoch + 1)] + train1[17 * epoch:17 * (epoch + 1)]
        assert set(seen) == set(range(33)) and len(seen) == 34
    # evaluation: each picture by one process only (validation: 8 and 7 an epoch; test: 6, 6)
    for split, n, epochs in (("val", 15, 2), ("test", 12, 1)):
        rank0, rank1 = (read_ids(ids / f"{split}-rank{r}.txt") for r in (0, 1))
        assert not set(rank0) & set(rank1), split
        assert sorted(set(rank0) | set(rank1)) == list(range(n)), split
        assert len(rank0) + len(rank1) == n * epochs, split

    for out in ("one", "two"):
        main(["--out", str(tmp_path / out), "--resume", "--epochs", "3"])
    same_model(tmp_path / "one" / CHECKPOINT, tmp_path / "two" / CHECKPOINT)


class ReadBy(Subset):
    """A dataset that writes down which process read each item (a DataLoader worker's pid)."""

    def __init__(self, dataset, path: Path):
        super().__init__(dataset, range(len(dataset)))
        self.classes, self.path = dataset.classes, path

    def __getitem__(self, index):
        with open(self.path, "a") as f:
            f.write(f"{os.getpid()}\n")
        return self.dataset[index]

    def __getitems__(self, indices):
        return [self[i] for i in indices]


def test_loader_workers_live_through_the_run_and_change_nothing(tmp_path):
    """With ``--workers``, the training loader's worker processes are started once and serve
    every epoch (``persistent_workers``), not started again for every pass, and validation
    pictures are read in the main process (no second set of workers to start) -- what makes
    the ``spawn`` start method (macOS, Windows) affordable: benchmarks/bench_workers.py.  The
    run is the same as one without workers (stochastic depth on: the main process's draws)."""
    data = ReadBy(separable(16, 0), tmp_path / "train.txt")
    settings = TrainSettings(model="vit_digits", model_kwargs=dict(TINY, drop_path_rate=0.2),
                             epochs=3, batch_size=8, device="cpu", progress="off", threads=1,
                             baseline="none", workers=1, out=None)
    held_out = (ReadBy(separable(4, 1), tmp_path / "val.txt"), separable(4, 2))
    with_workers = train(settings, datasets=(data, *held_out), log=lambda *_: None)
    readers = (tmp_path / "train.txt").read_text().split()
    assert len(readers) == 3 * 16 and len(set(readers)) == 1
    assert readers[0] != str(os.getpid())  # a worker, not this process
    assert (tmp_path / "val.txt").read_text().split() == [str(os.getpid())] * 3 * 4
    held_out = (separable(4, 1), separable(4, 2))
    settings.workers = 0
    alone = train(settings, datasets=(separable(16, 0), *held_out), log=lambda *_: None)
    assert [h["train_loss"] for h in alone["history"]] == [
        h["train_loss"] for h in with_workers["history"]]
