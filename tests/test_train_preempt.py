"""Preemption: a signalled job writes a step-level checkpoint and exits; resuming mid-epoch
reproduces the uninterrupted run exactly (CPU, deterministic algorithms)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from toy_job import toy_job, with_fields

from imagenot.core.settings import to_json
from imagenot.train import search
from imagenot.train import settings as train_settings
from imagenot.train.checkpoints import read_state
from imagenot.train.feed import InMemory
from imagenot.train.interrupts import Preempted
from imagenot.train.loop import fit

torch.set_num_threads(1)

# vgg_mini has dropout: an exact resume needs the random state of the interrupted step too
HP = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}


def _data(n=48, classes=3, size=32, seed=0) -> InMemory:
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    base = (labels.view(-1, 1, 1, 1).float() * 80 + 40).expand(n, 3, size, size)
    noise = torch.randint(-30, 30, (n, 3, size, size), generator=g)
    return InMemory((base + noise).clamp(0, 255).to(torch.uint8), labels)


def _job():
    return toy_job("vgg_mini", 3, HP, seed=1, image_size=32, batch_size=8, max_epochs=2, patience=5)


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


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGTERM", "SIGINT"])
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
        often = with_fields(job, checkpoint_minutes=1e-9)
        fit(often, _Served(data, 30, _kill), val, tmp_path / "c.safetensors", "fp")
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


def _toy_trial(tmp_path: Path, **train) -> tuple[list[str], Path]:
    """`imagenot train-trial` of a toy dataset as the rule runs it (its command, the trial's
    folder), the config's train section extended by ``train``."""
    import io
    import sys

    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.cli import main
    from imagenot.core.config import validate_config

    records = []
    for i in range(60):
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), (80 * (i % 3), 40, 40)).save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", f"c{i % 3}", "train" if i % 5 else "val", buf.getvalue()))  # fmt: skip
    data = tmp_path / "toy"
    write_dataset(data, records, ["c0", "c1", "c2"], shard_size=5000)
    config = validate_config(
        {
            "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
            "train": {
                "models": ["resnet_mini"],
                "image_size": 32,
                "experiments": [{"dataset": "toy", "protocol": "st", "space": "s"}],
                "spaces": {"s": {"budget": 1, "max_epochs": 200, "batch_size": 4}},
                **train,
            },
        }
    )
    trial = to_json(train_settings.TrialSettings.from_config(config, "toy", "st", "resnet_mini", 0))
    run = tmp_path / "run"
    draw = to_json(train_settings.DrawSettings.from_config(config, "toy", "st", "resnet_mini"))
    main(["train-draw-trials", "--settings", draw, "--record", str(tmp_path / "p.json"), "--trials", str(run / "trials.parquet")])  # fmt: skip
    out = run / "stage-0/slot-0.json"
    cmd = [sys.executable, "-m", "imagenot.cli", "train-trial", "--settings", trial, "--manifest", str(data / "manifest.parquet"), "--classes", str(data / "classes.txt"), "--fingerprint", str(data / "fingerprint.txt"), "--trials", str(run / "trials.parquet"), "--stage", "0", "--slot", "0", "--threads", "1", "--result", str(out)]  # fmt: skip
    return cmd, run


def test_a_signalled_training_process_checkpoints_and_exits_75(tmp_path):
    """`imagenot train-trial` as the rule runs it, sent SIGUSR1 while it trains."""
    import subprocess
    import time

    cmd, run = _toy_trial(tmp_path)
    log = tmp_path / "job.log"
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
    assert not (run / "stage-0/slot-0.json").exists()
    saved = read_state(run / "trial-0/checkpoint.safetensors")
    assert saved.epoch >= 1 and saved.step > 0


@pytest.mark.parametrize("streamed", [False, True], ids=["in-memory", "streamed-with-a-worker"])
def test_ctrl_c_to_a_training_process_group_is_a_stop_like_sigterm(tmp_path, streamed):
    """Ctrl-C at a terminal sends SIGINT to the whole foreground group (the trainer and its
    loader workers): it is SIGTERM's stop, never a KeyboardInterrupt traceback: a step-level checkpoint, one short line, exit 75; the workers (forked with
    the stop handler) keep serving until the checkpoint is written."""
    import subprocess
    import time

    extra = {"in_memory": False, "num_workers": 1} if streamed else {}
    cmd, run = _toy_trial(tmp_path, **extra)
    log = tmp_path / "job.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while "epoch 2" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: every process of the group
        assert proc.wait(timeout=60) == 75, log.read_text()[-2000:]
    finally:
        proc.kill()
    text = log.read_text()
    assert "SIGINT received: step-level checkpoint written" in text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-2000:]
    saved = read_state(run / "trial-0/checkpoint.safetensors")
    assert saved.epoch >= 1 and saved.step > 0


def test_ctrl_c_outside_the_training_loop_is_one_line_and_the_stop_exit():
    from imagenot.train.cli import PREEMPTED_EXIT, _preemptible

    def loading():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as exc:
        _preemptible(loading)
    assert exc.value.code == PREEMPTED_EXIT


def test_a_training_process_stops_at_its_time_limit_less_the_margin(tmp_path):
    """`imagenot train-trial` in a SLURM job (its environment) that ends in a minute, with
    train.deadline_margin_minutes 1: the deadline has come, so the job checkpoints after one
    step and exits 75, no signal sent."""
    import subprocess
    import time

    cmd, run = _toy_trial(tmp_path, deadline_margin_minutes=1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SLURM_JOB_ID="1", SLURM_JOB_END_TIME=str(int(time.time()) + 60))
    done = subprocess.run([*cmd, "--runtime-min", "1"], capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 75, done.stderr[-2000:]
    assert "deadline reached: step-level checkpoint written" in done.stderr
    saved = read_state(run / "trial-0/checkpoint.safetensors")
    assert (saved.epoch, saved.step) == (0, 1)


def test_the_deadline_stops_a_job_without_any_signal_and_it_resumes_identically(
    tmp_path, deterministic
):
    """A job past its own deadline (its time limit less the margin) checkpoints after the step
    under way and raises Preempted, whether or not SLURM's signal reaches it."""
    import time

    data, val, job = _data(), _data(24, seed=1), _job()
    _, straight = fit(job, _Served(data), val, tmp_path / "a.safetensors", "fp")
    with pytest.raises(Preempted, match="deadline reached"):
        fit(job, _Served(data), val, tmp_path / "b.safetensors", "fp", deadline=time.time())
    paused = read_state(tmp_path / "b.safetensors")
    assert (paused.epoch, paused.batch) == (0, 1)
    _, resumed = fit(job, _Served(data), val, tmp_path / "b.safetensors", "fp")
    _same(straight, resumed, tmp_path / "a.safetensors", tmp_path / "b.safetensors")


def test_checkpoints_at_the_interval_and_the_end_not_after_every_epoch(
    tmp_path, deterministic, monkeypatch
):
    """Without an interval due or a stop, a 3-epoch job writes one checkpoint: at its end (the
    next stage resumes there). A job killed in epoch 3 then has no checkpoint and starts
    afresh, to the same result."""
    from imagenot.train import loop

    writes = []
    real = loop.save_checkpoint
    monkeypatch.setattr(loop, "save_checkpoint", lambda p, *a: (writes.append(p), real(p, *a))[1])
    data, val = _data(), _data(24, seed=1)
    job = toy_job("vgg_mini", 3, HP, seed=1, image_size=32, batch_size=8, max_epochs=3, patience=5)
    _, straight = fit(job, _Served(data), val, tmp_path / "a.safetensors", "fp")
    assert writes == [tmp_path / "a.safetensors"]
    with pytest.raises(_Killed):
        fit(job, _Served(data, 2 * 48 + 10, _kill), val, tmp_path / "b.safetensors", "fp")
    assert not (tmp_path / "b.safetensors").exists()
    # a stage ending at a rung (stop_epoch) saves there, and the next stage resumes from it
    writes.clear()
    fit(job, _Served(data), val, tmp_path / "c.safetensors", "fp", stop_epoch=2)
    assert writes == [tmp_path / "c.safetensors"] and read_state(writes[0]).epoch == 2
    _, resumed = fit(job, _Served(data), val, tmp_path / "c.safetensors", "fp")
    _same(straight, resumed, tmp_path / "a.safetensors", tmp_path / "c.safetensors")


def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, deterministic):
    """Each save keeps the one before as <name>.prev; a newest checkpoint cut short (a crash
    while the filesystem wrote it) is set aside and the job resumes one step earlier, to the
    uninterrupted run's weights."""
    from imagenot.train.checkpoints import previous

    data, val, job = _data(), _data(24, seed=1), _job()
    _, straight = fit(job, _Served(data), val, tmp_path / "a.safetensors", "fp")
    ckpt = tmp_path / "b.safetensors"
    with pytest.raises(_Killed):
        fit(with_fields(job, checkpoint_minutes=1e-9), _Served(data, 30, _kill), val, ckpt, "fp")
    assert (read_state(ckpt).batch, read_state(previous(ckpt)).batch) == (3, 2)
    ckpt.write_bytes(ckpt.read_bytes()[:1000])  # truncated
    _, resumed = fit(job, _Served(data), val, ckpt, "fp")
    assert (tmp_path / "b.safetensors.set-aside-unreadable").is_file()
    _same(straight, resumed, tmp_path / "a.safetensors", ckpt)


def test_a_crash_while_writing_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    """The new checkpoint goes to a temporary file first: a failure while writing it leaves the
    current checkpoint in place and no temporary file behind."""
    from imagenot.train import checkpoints
    from imagenot.train.checkpoints import State, previous, save_checkpoint
    from imagenot.train.loop import make_model

    model, optimizer = make_model(_job())
    ckpt = tmp_path / "c.safetensors"
    save_checkpoint(ckpt, model, optimizer, State("id", "fp", epoch=1))

    def broken(tensors, path, metadata=None):
        Path(path).write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoints, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(ckpt, model, optimizer, State("id", "fp", epoch=2))
    assert read_state(ckpt).epoch == 1 and not previous(ckpt).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.safetensors"]


def test_an_interrupt_at_any_step_of_a_save_leaves_a_complete_checkpoint(tmp_path, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) may land between any two steps of a save: the checkpoint's
    own name always holds a complete checkpoint, the old one or the new one, and ``.prev`` one
    from before. (Renaming the checkpoint away first would leave no checkpoint between the two
    renames.)"""
    from imagenot.train.checkpoints import State, previous, save_checkpoint
    from imagenot.train.loop import make_model

    model, optimizer = make_model(_job())
    real_replace = os.replace
    for interrupted in range(2):  # at the first rename of the third save (to .prev), the second
        folder = tmp_path / str(interrupted)
        ckpt = folder / "c.safetensors"
        monkeypatch.setattr(os, "replace", real_replace)
        save_checkpoint(ckpt, model, optimizer, State("id", "fp", epoch=1))
        save_checkpoint(ckpt, model, optimizer, State("id", "fp", epoch=2))
        calls = []

        def interrupt_at(src, dst, calls=calls, interrupted=interrupted):
            calls.append(dst)
            if len(calls) > interrupted:
                raise KeyboardInterrupt
            real_replace(src, dst)

        monkeypatch.setattr(os, "replace", interrupt_at)  # io.atomic_path's renames
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint(ckpt, model, optimizer, State("id", "fp", epoch=3))
        monkeypatch.setattr(os, "replace", real_replace)
        assert len(calls) == interrupted + 1
        assert read_state(ckpt).epoch in (2, 3) and read_state(previous(ckpt)).epoch in (1, 2)
        assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temp files
    # a save that completes: the newest at the name, the one before at .prev
    save_checkpoint(ckpt, model, optimizer, State("id", "fp", epoch=4))
    assert (read_state(ckpt).epoch, read_state(previous(ckpt)).epoch) == (4, 2)


def test_the_deadline_comes_from_slurm_when_it_knows_the_end(tmp_path):
    """job_deadline: SLURM_JOB_END_TIME, else squeue's end time of the job (an array task's
    environment lacks the variable), else start + runtime; minus the margin."""
    import stat
    from datetime import datetime

    from imagenot.train.interrupts import job_deadline

    assert job_deadline(60, 10, started=1000.0, env={}) is None  # a local run: no limit
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_END_TIME": "5000"}
    assert job_deadline(60, 10, started=1000.0, env=env) == 5000.0 - 600
    end = datetime(2030, 1, 2, 3, 4, 5)
    squeue = tmp_path / "squeue"
    squeue.write_text(f'#!/bin/sh\necho "$*" > {tmp_path}/args\necho {end.isoformat()}\n')
    squeue.chmod(squeue.stat().st_mode | stat.S_IEXEC)
    env = {"SLURM_JOB_ID": "8", "SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "1"}
    path = os.environ["PATH"]
    try:
        os.environ["PATH"] = f"{tmp_path}{os.pathsep}{path}"
        assert job_deadline(60, 10, 1000.0, env) == end.timestamp() - 600
        assert (tmp_path / "args").read_text().split() == ["-h", "-j", "7_1", "-o", "%e"]
        squeue.write_text("#!/bin/sh\nexit 1\n")  # SLURM cannot say: start + runtime
        assert job_deadline(60, 10, 1000.0, env) == 1000.0 + 50 * 60
    finally:
        os.environ["PATH"] = path
