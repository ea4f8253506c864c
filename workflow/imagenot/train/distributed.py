"""Data-parallel training inside one job: N processes, one per GPU (or CPU processes with gloo).

Why self-launched rather than ``torchrun`` on the command line: the rule's shell command stays
the same for 1 and N GPUs, the launcher forwards SLURM's signals to its workers, and a test can
start two CPU processes exactly as a GPU job starts eight. Each worker joins a process group on
a free localhost port (one node: the rule asks for N GPUs on one node), ``nccl`` on CUDA and
``gloo`` on the CPU.

How the work is split (see ``imagenot.train.loop``): the epoch's seeded order is cut into the
paper's global batches; each global batch is split into ``world`` contiguous near-equal parts,
one per rank; a rank's part is cut into micro-batches of at most ``max_batch_per_gpu`` whose
gradients accumulate. Every loss is summed and scaled by ``world / global batch size``, so after
DDP's gradient average the step is that of the whole global batch, whatever the world size.
Checkpoints hold the global step, so a job resumes with another world size.

BatchNorm: on CUDA the model's BatchNorm layers become SyncBatchNorm when ``world > 1``, so
their statistics are those of the per-step batch across GPUs (as on one GPU) and the result
does not depend on how many GPUs a job got; torch's SyncBatchNorm runs on GPUs only, so CPU
(gloo) runs keep per-process statistics. Micro-batches of gradient accumulation necessarily
normalise over the micro-batch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Dist:
    """This process's place in a data-parallel job (rank 0 of 1 when not distributed)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduce ``tensor`` in place (sum over ranks); identity for one process."""
        if self.world > 1:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` is true on any rank (one small all-reduce)."""
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


SINGLE = Dist()


def shard(indices: torch.Tensor, d: Dist) -> torch.Tensor:
    """This rank's contiguous part of a global batch (near-equal parts, in rank order)."""
    return indices.tensor_split(d.world)[d.rank]


def micro_batches(indices: torch.Tensor, pieces: int) -> list[torch.Tensor]:
    """``indices`` (this rank's part) cut into ``pieces`` near-equal micro-batches."""
    return list(indices.tensor_split(pieces))


def accumulation(global_size: int, world: int, max_batch: int | None) -> int:
    """Micro-batches per rank for a global batch: enough that the largest part fits in
    ``max_batch``. The same on every rank, so the ranks run the same forward passes (SyncBatchNorm
    and DDP hold collectives in them)."""
    largest = -(-global_size // world)
    return max(1, -(-largest // max_batch)) if max_batch else 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, backend: str, threads: int, fn, args, kwargs) -> None:
    from imagenot.train.interrupts import Interrupts

    Interrupts.record_early()  # a signal forwarded while this worker starts is not lost
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        fn(*args, dist=Dist(rank, world), **kwargs)
    finally:
        dist.destroy_process_group()


class WorkerStopped(RuntimeError):
    """A worker raised; ``preempted`` when it was a stop request (checkpoint written)."""

    def __init__(self, message: str, preempted: bool):
        super().__init__(message)
        self.preempted = preempted


def launch(world: int, backend: str, fn, *args, **kwargs) -> None:
    """Run ``fn(*args, dist=Dist(rank, world), **kwargs)`` in ``world`` spawned processes.

    SIGUSR1 and SIGTERM received by this (launching) process are forwarded to the workers, which
    write a step-level checkpoint and stop; a worker's exception is raised here as
    :class:`WorkerStopped`.
    """
    import torch.multiprocessing as mp

    port = _free_port()
    context = mp.start_processes(
        _worker,
        # the job's CPU threads shared among the workers (each also runs its own loader)
        args=(world, port, backend, max(1, torch.get_num_threads() // world), fn, args, kwargs),
        nprocs=world,
        join=False,
        # CUDA cannot be used in a forked child; CPU (gloo) workers fork, which starts in a
        # fraction of a second instead of re-importing torch in each worker
        start_method="spawn" if backend == "nccl" else "fork",
    )

    def forward(number, frame) -> None:
        for pid in context.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, number)

    previous = {n: signal.signal(n, forward) for n in (signal.SIGUSR1, signal.SIGTERM)}
    try:
        while not context.join():
            pass
    except mp.ProcessRaisedException as exc:
        raise WorkerStopped(str(exc).strip().splitlines()[-1], "Preempted" in str(exc)) from None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
