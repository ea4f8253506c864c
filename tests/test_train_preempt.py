"""Preemption: a signalled job writes a step-level checkpoint and exits; resuming mid-epoch
reproduces the uninterrupted run exactly (CPU, deterministic algorithms)."""

from __future__ import annotations

import os
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

# vgg_mini has dropout: an exact resume needs the random state of the interrupted step too
HP = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}


def _data(n=48, classes=3, size=32, seed=0) -> InMemory:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    base = (labels.view(-1, 1, 1, 1).float() * 80 + 40).expand(n, 3, size, size)
    noise = torch.randint(-30, 30, (n, 3, size, size), generator=g)
    return InMemory((base + noise).clamp(0, 255).to(torch.uint8), labels)


def _job() -> Job:
    return Job("vgg_mini", 3, HP, seed=1, image_size=32, batch_size=8, max_epochs=2, patience=5)


class _Served(torch.utils.data.Dataset):
    """The toy data as a Dataset; after ``after`` items, ``action`` happens once."""

    def __init__(self, data: InMemory, after: int = 10**9, action=None):
        self.data, self.after, self.action, self.reads = data, after, action, 0

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        self.reads += 1
        if self.reads == self.after and self.action is not None:
            self.action()
        return self.data.images[i], int(self.data.labels[i])


class _Killed(RuntimeError):
    pass


def _kill():
    raise _Killed


@pytest.fixture
def deterministic():
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(previous)


def _same(a, b, ckpt_a, ckpt_b):
    strip = [{k: v for k, v in row.items() if k != "images_per_s"} for row in a.history]
    assert strip == [{k: v for k, v in row.items() if k != "images_per_s"} for row in b.history]
    wa, wb = load_file(str(ckpt_a)), load_file(str(ckpt_b))
    assert all(torch.equal(wa[k], wb[k]) for k in wa if k.startswith("model."))


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGTERM"])
def test_signal_mid_epoch_writes_a_step_checkpoint_and_resumes_identically(
    name, tmp_path, deterministic
):
    data, val, job = _data(), _data(24, seed=1), _job()
    _, straight = fit(job, _Served(data), val, tmp_path / "a.safetensors", "fp")
    # SLURM's warning (or a SIGTERM) arrives while batch 3 of epoch 2 is read (48 per epoch)
    number = getattr(signal, name)
    previous = signal.getsignal(number)
    served = _Served(data, 48 + 20, lambda: os.kill(os.getpid(), number))
    with pytest.raises(Preempted, match=f"{name} received"):
        fit(job, served, val, tmp_path / "b.safetensors", "fp")
    assert signal.getsignal(number) == previous  # handlers restored after the job
    paused = read_state(tmp_path / "b.safetensors")
    assert (paused.epoch, paused.batch) == (1, 3)  # mid-epoch, after the step under way
    _, resumed = fit(job, _Served(data), val, tmp_path / "b.safetensors", "fp")
    assert resumed.epoch == straight.epoch == 2
    _same(straight, resumed, tmp_path / "a.safetensors", tmp_path / "b.safetensors")


def test_recovery_checkpoints_bound_what_a_kill_loses(tmp_path, deterministic):
    data, val, job = _data(), _data(24, seed=1), _job()
    _, straight = fit(job, _Served(data), val, tmp_path / "a.safetensors", "fp")
    # a checkpoint after every step (a tiny interval), then SIGKILL-like death in epoch 1
    with pytest.raises(_Killed):
        fit(job, _Served(data, 30, _kill), val, tmp_path / "c.safetensors", "fp",
            checkpoint_minutes=1e-9)  # fmt: skip
    paused = read_state(tmp_path / "c.safetensors")
    assert (paused.epoch, paused.batch) == (0, 3)  # items 25-30 were being read for batch 4
    _, resumed = fit(job, _Served(data), val, tmp_path / "c.safetensors", "fp")
    _same(straight, resumed, tmp_path / "a.safetensors", tmp_path / "c.safetensors")


def test_a_stopped_job_exits_with_the_retry_status():
    from imagenot.train.cli import PREEMPTED_EXIT, _preemptible

    def stopped():
        raise Preempted("SIGUSR1 received")

    with pytest.raises(SystemExit) as exc:
        _preemptible(stopped)
    assert exc.value.code == PREEMPTED_EXIT == 75


def test_a_signalled_training_process_checkpoints_and_exits_75(tmp_path):
    """`imagenot train-trial` as the rule runs it, sent SIGUSR1 while it trains."""
    import io
    import json
    import subprocess
    import sys
    import time

    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.config import validate_config
    from imagenot.train import plan

    records = []
    for i in range(60):
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), (80 * (i % 3), 40, 40)).save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", f"c{i % 3}", "train" if i % 5 else "val", buf.getvalue()))  # fmt: skip
    data = tmp_path / "toy"
    write_dataset(data, records, ["c0", "c1", "c2"])
    config = validate_config(
        {
            "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
            "train": {
                "models": ["resnet_mini"],
                "image_size": 32,
                "experiments": [{"dataset": "toy", "protocol": "st", "space": "s"}],
                "spaces": {"s": {"budget": 1, "max_epochs": 200, "batch_size": 4}},
            },
        }
    )
    trial = json.dumps(plan.trial_settings(config, "toy", "st", "resnet_mini", 0))
    run = tmp_path / "run"
    from imagenot.cli import main

    draw = json.dumps(plan.draw_settings(config, "toy", "st", "resnet_mini"))
    main(["train-draw-trials", "--settings", draw, "--record", str(tmp_path / "p.json"), "--out", str(run / "trials.parquet")])  # fmt: skip
    out, log = run / "stage-0/slot-0.json", tmp_path / "job.log"
    cmd = [sys.executable, "-m", "imagenot.cli", "train-trial", "--settings", trial, "--dataset-dir", str(data), "--trials", str(run / "trials.parquet"), "--stage", "0", "--slot", "0", "--threads", "1", "--out", str(out)]  # fmt: skip
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "epoch 2" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        proc.send_signal(signal.SIGUSR1)
        assert proc.wait(timeout=60) == 75, log.read_text()[-2000:]
    finally:
        proc.kill()
    assert "SIGUSR1 received: step-level checkpoint written" in log.read_text()
    assert not out.exists()
    saved = read_state(run / "trial-0/checkpoint.safetensors")
    assert saved.epoch >= 1 and saved.step > 0
