"""What each process of tests/test_distributed.py's torchrun launch runs: the trainer's command
line (``vit_scratch.train.main``) on its arguments, with two things watched:

* every item each process reads from the training, validation and test splits is written to
  ``$IDS_DIR/<split>-rank<R>.txt`` (one index a line, in order), so that the test can check
  which pictures each process saw;
* the CPU clock each process's trainer reads (``time.process_time``) advances by ``rank + 1``
  seconds a reading, so that the test can tell the sum over processes from rank 0's own.

    torchrun --standalone --nproc_per_node 2 tests/ddp_child.py --data ... --out ...
"""
import itertools
import os
import sys
import time
from pathlib import Path

from torch.utils.data import Subset

from vit_scratch.training import loop
from vit_scratch.train import main

RANK = int(os.environ["RANK"])
IDS = Path(os.environ["IDS_DIR"])


class Recorded(Subset):
    """``dataset`` itself, each item read written to ``path``; a ``Subset`` of all its items, so
    that the trainer reads its labels without reading its pictures."""

    def __init__(self, dataset, path: Path):
        super().__init__(dataset, range(len(dataset)))
        self.classes, self.path = dataset.classes, path

    def __getitem__(self, index):
        with open(self.path, "a") as f:
            f.write(f"{index}\n")
        return self.dataset[index]

    def __getitems__(self, indices):
        return [self[i] for i in indices]


def recorded_datasets(*args, **kwargs):
    splits = make_datasets(*args, **kwargs)
    return tuple(Recorded(d, IDS / f"{name}-rank{RANK}.txt")
                 for name, d in zip(("train", "val", "test"), splits))


clock = itertools.count(step=RANK + 1)
make_datasets = loop.make_datasets
loop.make_datasets = recorded_datasets
time.process_time = lambda: float(next(clock))
main(sys.argv[1:])
