"""Several processes, on one machine or many: PyTorch's DistributedDataParallel, started by
``torchrun``.

    torchrun --standalone --nproc_per_node 2 -m vit_scratch.train --model vit_digits --out runs/ddp
    torchrun --nnodes 2 --node_rank 0 --master_addr HOST --master_port 29500 \\
        --nproc_per_node 4 -m vit_scratch.train ...          # and --node_rank 1 on the other machine

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` in each
process; the trainer then joins the process group (gloo on the CPU, NCCL on CUDA GPUs), gives
each process its share of every batch (``DistributedSampler``), wraps the model in
``DistributedDataParallel`` (which averages the gradients), adds the evaluation counts of every
process together, and lets rank 0 alone print, draw and write the run folder.

Infrastructure from PyTorch (``torch.distributed``, ``DistributedDataParallel``,
``DistributedSampler``), not teaching code: this module only wires it to the trainer.
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


def train_sampler(dataset, world: World, seed: int):
    """Every process's share of a global order that depends only on ``seed`` and the epoch
    (``sampler.set_epoch``): with a per-process batch of ``batch_size / world.size``, the
    processes' batches together are the same global batches for any number of processes."""
    from torch.utils.data import DistributedSampler

    return DistributedSampler(dataset, num_replicas=world.size, rank=world.rank, shuffle=True,
                              seed=seed, drop_last=False)


def shard(dataset, world: World):
    """Every ``world.size``-th item, from ``world.rank``: the evaluation shares (no padding, so
    the added-up counts are exact)."""
    if world.size == 1:
        return dataset
    from torch.utils.data import Subset

    return Subset(dataset, range(world.rank, len(dataset), world.size))
