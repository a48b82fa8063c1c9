"""Several processes, on one machine or many: PyTorch's DistributedDataParallel, started by
``torchrun``.

    torchrun --standalone --nproc_per_node 2 -m vit_scratch.train --model vit_digits --out runs/ddp
    torchrun --nnodes 2 --node_rank 0 --master_addr HOST --master_port 29500 \\
        --nproc_per_node 4 -m vit_scratch.train ...          # and --node_rank 1 on the other machine

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` in each
process; the trainer then joins the process group (gloo on the CPU, NCCL on CUDA GPUs), gives
each process its share of every batch (:class:`BatchShares`), wraps the model in
``DistributedDataParallel`` (which averages the gradients), adds the evaluation counts of every
process together, and lets rank 0 alone print, draw and write the run folder.

What is equal to one process: the global batches (:class:`BatchShares`), the augmentation of
every picture (seeded by ``(seed, epoch, index)``, not by the process), the losses and
accuracies (every image counted once), and so the weights, to float rounding (the processes
add their gradients up in another order).  What is not: dropout and stochastic depth, which
each process draws for its own share of a batch.

Infrastructure from PyTorch (``torch.distributed``, ``DistributedDataParallel``), not teaching
code: this module only wires it to the trainer.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

#: The environment variables torchrun sets in every process it starts.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass(frozen=True)
class World:
    """Where this process stands: ``rank`` of ``size`` processes in all, ``local_rank`` of
    ``local_size`` on this machine.  ``World()`` is a single process."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    launched: bool = False  # started by torchrun (then the trainer joins a process group)

    @property
    def main(self) -> bool:
        """Rank 0: the process that prints, draws and writes."""
        return self.rank == 0


def world_from_env(environ=os.environ) -> World:
    """The ``World`` that torchrun's environment variables describe (a single process
    without them)."""
    if not all(name in environ for name in TORCHRUN_VARIABLES):
        return World()
    size = int(environ["WORLD_SIZE"])
    return World(rank=int(environ["RANK"]), size=size, local_rank=int(environ["LOCAL_RANK"]),
                 local_size=int(environ.get("LOCAL_WORLD_SIZE", size)), launched=True)


def device_for(world: World, device: torch.device) -> torch.device:
    """Each process of a machine takes its own GPU (``cuda:LOCAL_RANK``); the CPU is shared."""
    if world.launched and device.type == "cuda":
        if device.index not in (None, world.local_rank) and world.local_size > 1:
            raise ValueError(f"--device {device} under torchrun: each process uses the GPU of "
                             f"its LOCAL_RANK; pass --device cuda")
        if world.local_rank >= torch.cuda.device_count():
            raise ValueError(f"torchrun started {world.local_size} processes on this machine "
                             f"but it has {torch.cuda.device_count()} GPU(s)")
        return torch.device("cuda", world.local_rank)
    return device


def join(world: World, device: torch.device) -> bool:
    """Join the process group torchrun prepared (when it started more than one process): NCCL
    for CUDA, gloo otherwise.  Returns whether this call created it (then :func:`leave`
    destroys it)."""
    if world.size == 1 or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return True


def leave(created: bool) -> None:
    if created and dist.is_initialized():
        dist.destroy_process_group()


def active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def sum_over_processes(values: list[float], device: torch.device) -> list[float]:
    """Each value added up over all processes (float64; the values themselves when alone)."""
    if not active():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def broadcast(obj, device: torch.device):
    """Rank 0's ``obj`` (anything picklable), in every process."""
    if not active():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=device if device.type == "cuda" else None)
    return box[0]


def same_everywhere(error: str | None, device: torch.device) -> str | None:
    """Rank 0's verdict (an error message or ``None``) in every process, so that all of them
    stop when the checks rank 0 alone can make (the run folder) fail."""
    return broadcast(error, device)


class BatchShares:
    """The training batches of one process: every process's share of the same global batches,
    whatever the number of processes -- a batch sampler for ``DataLoader(batch_sampler=...)``.

    Each epoch, the ``n`` items are shuffled by a permutation that depends only on ``seed`` and
    the epoch (:meth:`set_epoch`, called by the trainer before every epoch) and cut into global
    batches of ``batch_size`` (the last one smaller when ``batch_size`` does not divide ``n``);
    process ``r`` of ``W`` takes items ``r, r + W, r + 2W, ...`` of each.  Nothing is padded or
    repeated, so every item is counted once per epoch.  A process whose share of a short last
    batch is empty gets one *stand-in* item instead, marked as not counted (it takes part in the
    step's gradient exchange with a zero loss).  Each item comes as a key
    ``(epoch, index, counted)``, which :class:`vit_scratch.data.SeededSamples` turns into the
    item with its augmentation seeded by ``(seed, epoch, index)``.

    (PyTorch's ``DistributedSampler`` would give the same global order, but pads the shares to
    equal lengths by repeating items, which are then counted twice.)

    ``labels`` (one per item) turn on class-balanced sampling (``--balanced-sampling``): each
    epoch draws ``n`` items, as many of every class (:func:`balanced_draws`), instead of every
    item once."""

    def __init__(self, n: int, batch_size: int, world: World = World(), seed: int = 0,
                 labels=None):
        self.n, self.batch_size, self.world, self.seed = n, batch_size, world, seed
        self.labels = None if labels is None else torch.as_tensor(labels, dtype=torch.int64)
        if self.labels is not None and len(self.labels) != n:
            raise ValueError(f"labels: {len(self.labels)} for {n} items")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def global_batches(self) -> list[list[int]]:
        """This epoch's global batches of item indices (the same in every process)."""
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        if self.labels is None:
            order = torch.randperm(self.n, generator=generator).tolist()
        else:
            order = balanced_draws(self.labels, generator).tolist()
        return [order[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)]

    def __iter__(self):
        for batch in self.global_batches():
            share = batch[self.world.rank::self.world.size]
            if share:
                yield [(self.epoch, i, True) for i in share]
            else:  # a short last batch leaves this process nothing: one stand-in, not counted
                yield [(self.epoch, batch[0], False)]


def balanced_draws(labels: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """As many draws as ``labels`` has items, shuffled, every class drawn equally often (to one
    draw: the remainder goes to classes picked at random).  Within a class the draws go
    through its items in a random order, again and again: a class smaller than its share
    repeats each item once before any twice, and a larger one leaves some out, a different
    sample each epoch.  A picture drawn twice in an epoch is augmented the same way both times
    (its augmentation is seeded by the picture and the epoch)."""
    n = len(labels)
    classes = torch.unique(labels)
    quota = torch.full((len(classes),), n // len(classes), dtype=torch.int64)
    quota[torch.randperm(len(classes), generator=generator)[:n % len(classes)]] += 1
    draws = []
    for c, q in zip(classes.tolist(), quota.tolist()):  # one class at a time
        members = torch.nonzero(labels == c).flatten()
        rounds = -(-q // len(members))
        passes = [members[torch.randperm(len(members), generator=generator)]
                  for _ in range(rounds)]
        draws.append(torch.cat(passes)[:q])
    drawn = torch.cat(draws)
    return drawn[torch.randperm(n, generator=generator)]


def shard(dataset, world: World):
    """Every ``world.size``-th item, from ``world.rank``: the evaluation shares (no padding, so
    the added-up counts are exact)."""
    if world.size == 1:
        return dataset
    from torch.utils.data import Subset

    return Subset(dataset, range(world.rank, len(dataset), world.size))
