"""Data-parallel training on the CPU (gloo, 2 processes): the same steps as one process with the
same global batch, and a 2-process job stopped mid-epoch resumes to identical metrics."""

from __future__ import annotations

import os
import shutil
import signal

import pytest
import torch
from safetensors.torch import load_file

from imagenot.train import search
from imagenot.train.checkpoints import read_state
from imagenot.train.feed import InMemory
from imagenot.train.interrupts import Preempted
from imagenot.train.loop import Job, fit

torch.set_num_threads(1)

# convnext_mini: LayerNorm and no active dropout, so per-process statistics cannot differ from
# one process's; AdamW-free plain SGD. Tolerance: gradients are averaged by an all-reduce
# instead of one reduction over the batch, so weights agree to float32 rounding, not bits.
TOLERANCE = 1e-5
HP = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}


def _data(n=48, classes=3, size=32, seed=0) -> InMemory:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    base = (labels.view(-1, 1, 1, 1).float() * 80 + 40).expand(n, 3, size, size)
    noise = torch.randint(-30, 30, (n, 3, size, size), generator=g)
    return InMemory((base + noise).clamp(0, 255).to(torch.uint8), labels)


JOB = Job("convnext_mini", 3, HP, seed=3, image_size=32, batch_size=8, max_epochs=2, patience=5)


class SignalAt(torch.utils.data.Dataset):
    """The toy data; the process reading item number ``after`` signals itself (SIGUSR1, as
    SLURM's warning), in every rank. Module level: spawned workers unpickle it."""

    def __init__(self, data: InMemory, after: int):
        self.data, self.after, self.reads = data, after, 0

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        self.reads += 1
        if self.reads == self.after:
            os.kill(os.getpid(), signal.SIGUSR1)
        return self.data.images[i], int(self.data.labels[i])


def _weights(path):
    return {k: v for k, v in load_file(str(path)).items() if k.startswith("model.")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One process, and two processes (gloo), each over two epochs of the same global batch."""
    tmp = tmp_path_factory.mktemp("ddp")
    data, val = _data(), _data(12, seed=1)
    _, one = fit(JOB, data, val, tmp / "one.safetensors", "fp")
    _, two = fit(JOB, data, val, tmp / "two.safetensors", "fp", world=2)
    return tmp, one, two


def test_two_processes_train_the_weights_of_one(runs):
    tmp, one, two = runs
    assert two.epoch == one.epoch == 2 and two.step == one.step == 12
    a, b = _weights(tmp / "one.safetensors"), _weights(tmp / "two.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < TOLERANCE
    for x, y in zip(one.history, two.history, strict=True):
        assert x["val_accuracy"] == y["val_accuracy"]
        assert x["train_loss"] == pytest.approx(y["train_loss"], abs=TOLERANCE)


def test_gradient_accumulation_keeps_the_global_batch(runs, tmp_path):
    tmp, one, _ = runs
    data, val = _data(), _data(12, seed=1)
    _, acc = fit(JOB, data, val, tmp_path / "acc.safetensors", "fp", max_batch=3)  # 3+3+2
    a, b = _weights(tmp / "one.safetensors"), _weights(tmp_path / "acc.safetensors")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < TOLERANCE
    assert acc.step == one.step


def test_two_process_job_stopped_mid_epoch_resumes_identically_with_any_world_size(runs, tmp_path):
    tmp, _, two = runs
    data, val = _data(), _data(12, seed=1)
    ckpt = tmp_path / "stopped.safetensors"
    # 6 steps per epoch, each rank reads 4 items per step: the signal comes in global step 7
    # (epoch 2, batch 1); the ranks agree at the next check (every 8 steps in a data-parallel
    # job), so the step-level checkpoint is written after epoch 2's second batch
    with pytest.raises(Preempted):
        fit(JOB, SignalAt(data, 24 + 2), val, ckpt, "fp", world=2)
    paused = read_state(ckpt)
    assert (paused.epoch, paused.batch, paused.step) == (1, 2, 8)
    other = tmp_path / "one-process.safetensors"
    shutil.copyfile(ckpt, other)
    _, resumed = fit(JOB, data, val, ckpt, "fp", world=2)
    strip = [{k: v for k, v in r.items() if k != "images_per_s"} for r in two.history]
    assert strip == [{k: v for k, v in r.items() if k != "images_per_s"} for r in resumed.history]
    a, b = _weights(tmp / "two.safetensors"), _weights(ckpt)
    assert all(torch.equal(a[k], b[k]) for k in a)

    # the same checkpoint resumed by one process: the one-process run, within the tolerance
    tmp_one = tmp / "one.safetensors"
    _, single = fit(JOB, data, val, other, "fp")
    a, b = _weights(tmp_one), _weights(other)
    assert single.step == 12
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < TOLERANCE


def test_a_signal_to_the_launcher_stops_every_worker(tmp_path):
    """SLURM signals the job's process (the launcher): it forwards to the workers, which agree
    on a step, write one checkpoint and stop."""
    import threading
    import time

    job = Job("convnext_mini", 3, HP, 3, 32, batch_size=8, max_epochs=500, patience=500)
    default = signal.getsignal(signal.SIGTERM)

    def send_once_forwarding():
        deadline = time.monotonic() + 60
        while signal.getsignal(signal.SIGTERM) == default and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the workers are training
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send_once_forwarding, daemon=True).start()
    with pytest.raises(Preempted, match="SIGTERM"):
        fit(job, _data(), _data(12, seed=1), tmp_path / "c.safetensors", "fp", world=2)
    assert signal.getsignal(signal.SIGTERM) == default  # the launcher's forwarding is undone
    paused = read_state(tmp_path / "c.safetensors")
    # stopped where the ranks agree: a check step (every 8) or an epoch's end (batch 0)
    assert paused.step > 0 and (paused.step % 8 == 0 or paused.batch == 0)
    assert paused.stopped_by is None


def test_every_rank_runs_the_same_number_of_micro_batches():
    """Ranks hold collectives in each forward pass (SyncBatchNorm): their micro-batch counts
    must agree even when a global batch does not split evenly."""
    from imagenot.train.distributed import Dist, accumulation, micro_batches, shard

    batch = torch.arange(9)  # a short last batch: 5 + 4 over two ranks
    k = accumulation(len(batch), 2, max_batch=2)
    parts = [micro_batches(shard(batch, Dist(r, 2)), k) for r in range(2)]
    assert [[len(p) for p in ps] for ps in parts] == [[2, 2, 1], [2, 1, 1]]
    assert torch.equal(torch.cat([p for ps in parts for p in ps]), batch)  # each item once
    assert accumulation(256, 4, None) == 1 and accumulation(256, 1, 96) == 3
