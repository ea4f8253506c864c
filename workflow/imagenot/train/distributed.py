"""Data-parallel training: one process per GPU (or CPU processes with gloo), on one node or many.

Who starts the processes: ``torchrun`` (``torch.distributed.run``, shipped with torch), the
engine users already have, on one node and on many; a job of one process runs without it. The
rule's shell line carries the launcher (``imagenot.train.launch.launcher``):

* one process: ``imagenot train-trial ...`` (no launcher, no process group);
* one node, N processes: ``torchrun --standalone --nproc-per-node N --no-python imagenot ...``
  (c10d rendezvous on a free localhost port);
* M nodes: ``srun --nodes M --ntasks-per-node 1 torchrun --nnodes M --nproc-per-node N
  --rdzv-backend c10d --rdzv-endpoint <first node>:<port> ...``, one launcher per node.

Every rank runs the same command; :func:`joined` reads ``RANK``, ``WORLD_SIZE`` and
``LOCAL_RANK`` from torchrun's environment, binds the rank's GPU, joins the process group
(``nccl`` on CUDA, ``gloo`` on the CPU) and yields its :class:`Dist`. Every rank configures its
own process (threads, cuDNN autotuning or deterministic algorithms: ``device.configure``), since
nothing of a parent's torch settings reaches a rank that torchrun starts.

Signals: torchrun is told to handle SIGUSR1 (a site's ``--signal`` warning) as well as SIGTERM
(``--signals-to-handle``); it forwards the signal to its ranks, which agree on a step, write one
checkpoint and exit, and waits :data:`SHUTDOWN_S` for them before killing. A rank that dies ends
the job: its launcher stops the node's other ranks and exits non-zero; the ranks of other nodes
see the broken collective (gloo at once; NCCL through its watchdog) and exit, and under SLURM
``srun --kill-on-bad-exit`` ends the other nodes' launchers at once.

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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagenot.train.experiments import accumulation  # noqa: F401 (the loop's; arithmetic, torch-free)

if TYPE_CHECKING:
    import torch

# torch is imported where a process group is used: a process that only asks its rank (a final
# run copying its trial's weights, imagenot.train.finals) never imports it


@dataclass(frozen=True)
class Dist:
    """This process's place in a data-parallel job (rank 0 of 1 when not distributed): its
    rank among all, the world size, and its rank and the process count on its own node."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduce ``tensor`` in place (sum over ranks); identity for one process."""
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` is true on any rank (one small all-reduce)."""
        if self.world == 1:
            return flag
        import torch
        import torch.distributed as dist

        t = torch.tensor([int(flag)], device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return bool(t.item())

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()


SINGLE = Dist()


def shard(indices: torch.Tensor, d: Dist) -> torch.Tensor:
    """This rank's contiguous part of a global batch (near-equal parts, in rank order)."""
    return indices.tensor_split(d.world)[d.rank]


def micro_batches(indices: torch.Tensor, pieces: int) -> list[torch.Tensor]:
    """``indices`` (this rank's part) cut into ``pieces`` near-equal micro-batches."""
    return list(indices.tensor_split(pieces))


class LaunchError(ValueError):
    """A data-parallel job started without the launcher its plan names (or a broken one): a
    ValueError, so the command ends in one line naming it (``imagenot.cli``)."""


# torchrun's variables (torch.distributed.run): every rank gets them, a plain process none
_TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def from_environment(environ=os.environ) -> Dist:
    """This process's Dist from torchrun's environment; rank 0 of 1 without torchrun."""
    if "WORLD_SIZE" not in environ:
        return SINGLE
    missing = [k for k in _TORCHRUN if k not in environ]
    if missing:
        raise LaunchError(f"WORLD_SIZE is set but {', '.join(missing)} not: start with torchrun")
    return Dist(*(int(environ[k]) for k in _TORCHRUN[:4]))  # (the fields' order)


@contextlib.contextmanager
def joined(backend: str, planned: int | None = None) -> Iterator[Dist]:
    """This rank's :class:`Dist`, its GPU bound (``nccl``) and its process group joined for the
    duration (rendezvous address from torchrun: ``env://``). ``planned``: the world size the
    job's plan launches; a process started without torchrun, or by one with another
    ``--nproc-per-node`` / ``--nnodes``, stops with one line instead of training alone."""
    d = from_environment()
    if planned is not None and d.world != planned:
        how = "without torchrun" if d.world == 1 else f"by a launcher of {d.world} processes"
        raise LaunchError(
            f"this job plans {planned} data-parallel processes (train.gpus_per_job) but was "
            f"started {how}; run the rule's own command line (imagenot.train.launch.launcher)"
        )
    if d.world == 1:
        yield d
        return
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(d.local_rank)
    dist.init_process_group(backend)
    try:
        yield d
    finally:
        dist.destroy_process_group()


NO_CONTEXT = contextlib.nullcontext()


def accumulates(forward) -> bool:
    """Whether ``forward`` is DDP's (its ``no_sync`` defers the gradient all-reduce)."""
    return hasattr(getattr(forward, "_orig_mod", forward), "no_sync")


def no_sync_unless(forward, skip: bool):
    """DDP's no_sync during gradient accumulation (all micro-batches but the last; ``skip``
    only where :func:`accumulates`): one shared empty context otherwise, built once, not per
    micro-batch."""
    return getattr(forward, "_orig_mod", forward).no_sync() if skip else NO_CONTEXT
