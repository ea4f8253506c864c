"""One rank of the CPU data-parallel tests (tests/test_train_ddp.py), started by torchrun as a
training job's ranks are: it joins the process group from torchrun's environment
(``distributed.joined``) and runs ``fit`` on the tests' toy data. Also the toy data, job and
helpers those tests share with the one-process runs they compare against.

    torchrun --standalone --nproc-per-node 2 tests/ddp_rank.py --checkpoint c.safetensors
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from toy_job import toy_job

from imagenot.train import search
from imagenot.train.feed import InMemory

# convnext_mini: LayerNorm and no active dropout, so per-process statistics cannot differ from
# one process's; AdamW-free plain SGD. Tolerance: gradients are averaged by an all-reduce
# instead of one reduction over the batch, so weights agree to float32 rounding, not bits.
TOLERANCE = 1e-5
HP = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}
JOB = toy_job("convnext_mini", 3, HP, seed=3, image_size=32, batch_size=8, max_epochs=2, patience=5)
# the same, long enough that a signal or a kill always comes while it trains
LONG = toy_job("convnext_mini", 3, HP, 3, 32, batch_size=8, max_epochs=500, patience=500)
PREEMPTED_EXIT = 75


def data(n=48, classes=3, size=32, seed=0) -> InMemory:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    base = (labels.view(-1, 1, 1, 1).float() * 80 + 40).expand(n, 3, size, size)
    noise = torch.randint(-30, 30, (n, 3, size, size), generator=g)
    return InMemory((base + noise).clamp(0, 255).to(torch.uint8), labels)


class SignalAt(torch.utils.data.Dataset):
    """The toy data; the process reading item number ``after`` signals itself (SIGUSR1, as
    SLURM's warning), in every rank."""

    def __init__(self, data: InMemory, after: int):
        self.data, self.after, self.reads = data, after, 0

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        self.reads += 1
        if self.reads == self.after:
            os.kill(os.getpid(), signal.SIGUSR1)
        return self.data.images[i], int(self.data.labels[i])


def weights(path) -> dict:
    return {k: v for k, v in load_file(str(path)).items() if k.startswith("model.")}


def max_difference(a: dict, b: dict) -> float:
    assert a and a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def main(argv=None) -> int:
    from imagenot.train.distributed import joined
    from imagenot.train.interrupts import Interrupts, Preempted
    from imagenot.train.loop import fit

    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", required=True, type=Path)
    p.add_argument("--signal-after", type=int, default=0, help="SIGUSR1 at this item read")
    p.add_argument("--long", action="store_true", help="train LONG (until stopped)")
    a = p.parse_args(argv)
    Interrupts.record_early()  # as imagenot.train.jobs does in a rank
    torch.set_num_threads(1)
    train = data()
    if a.signal_after:
        train = SignalAt(train, a.signal_after)
    with joined("gloo") as d:
        print(f"rank {d.rank} of {d.world} (local {d.local_rank} of {d.local_world})", flush=True)
        try:
            _, state = fit(
                LONG if a.long else JOB, train, data(12, seed=1), a.checkpoint, "fp", dist=d
            )
        except Preempted as exc:
            print(exc, flush=True)
            return PREEMPTED_EXIT
    print(f"rank {d.rank} done: epoch {state.epoch} step {state.step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
