"""torchrun plumbing for the training loop: one process per GPU (or CPU processes with gloo),
the process's rank, a barrier, sums over the processes, any-process flags so that every process stops at the same step,
and the end of the process group once the training is done."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

@dataclass
class Dist:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device: torch.device) -> tuple[Dist, torch.device]:
    """Under torchrun (WORLD_SIZE > 1): one process per GPU (or CPU process with gloo)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(), device
    import torch.distributed as dist

    if device.type == "cuda":  # the process's own GPU first, so that NCCL's communicator is made on it
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size()), device


def barrier(d: Dist) -> None:
    if d.world > 1:
        import torch.distributed as dist

        dist.barrier()


def finish_distributed() -> None:
    """End this process's part of a torchrun run: wait for every process, then destroy the process group. A process
    that exits with it alive may abort as the interpreter shuts down (gloo's worker threads still hold tensors:
    "terminate called without an active exception", SIGABRT), failing the whole run after its work is done. Called on
    success only: destroying it while other processes are still in a collective would hang them."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def any_process(d: Dist, flags: list[bool], device: torch.device) -> list[bool]:
    """Each flag, true when any process raises it (processes must stop at the same step under DDP): one all-reduce."""
    if d.world <= 1:
        return list(flags)
    import torch.distributed as dist

    t = torch.tensor([float(f) for f in flags], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def summed(d: Dist, values: list[float], device: torch.device) -> list[float]:
    """Each value summed over the processes (in float64), every process getting the sums: one all-reduce. What a
    validation split across the processes adds up."""
    if d.world <= 1:
        return list(values)
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()
