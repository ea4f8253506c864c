"""Data-parallel training on the CPU (gloo), launched as the training rules launch it: torchrun
with the launcher's own command line on one node (``launch.launch_line``), and two torchrun launchers
with ``--nnodes 2`` meeting at a c10d rendezvous on 127.0.0.1 as two SLURM nodes would. Each
gives the weights of one process with the same global batch; a job stopped mid-epoch resumes to
identical metrics with any world size; a signal to a launcher stops every rank at one
checkpoint; a killed rank ends the whole job."""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
import torch
from ddp_rank import (
    JOB,
    LONG,
    TOLERANCE,
    data,
    max_difference,
    weights,
)
from safetensors.torch import load_file

from imagenot.core.settings import to_json
from imagenot.train import launch as train_launch
from imagenot.train import settings as train_settings
from imagenot.train.checkpoints import read_state
from imagenot.train.loop import fit

torch.set_num_threads(1)

RANK = Path(__file__).with_name("ddp_rank.py")
# every test here waits on processes: a hang fails the test instead of the suite
pytestmark = pytest.mark.timeout(600)
# the tests that start torchrun launchers and their ranks: `make test-cluster` runs them, with
# the real SLURM of tests/test_slurm.py (pyproject.toml's marker `cluster`)
CLUSTER = pytest.mark.cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_node(*args: str) -> list[str]:
    """Two ranks on this machine, under the launcher the plan puts in the rules' shell line."""
    return [*train_launch.launch_line(1, 2, 2).split(), sys.executable, str(RANK), *args]


def _two_nodes(*args: str) -> list[list[str]]:
    """Two launchers of one rank each, meeting as two nodes would (c10d on 127.0.0.1): the
    plan's multi-node torchrun options without srun and the SLURM job id."""
    endpoint = f"127.0.0.1:{_free_port()}"
    line = train_launch.launch_line(2, 1, 1).split()
    torchrun = line[line.index("torchrun") :]
    torchrun = [o for o in torchrun if not o.startswith(("--rdzv-endpoint", "--rdzv-id"))]
    torchrun += [f"--rdzv-endpoint={endpoint}", f"--rdzv-id=test-{endpoint}"]
    return [[*torchrun, sys.executable, str(RANK), *args]] * 2


class Launched:
    """Launcher processes started together, each writing its own log."""

    def __init__(self, commands: list[list[str]], logs: Path):
        self.logs = [logs.with_suffix(f".{i}.log") for i in range(len(commands))]
        self.procs, self.seen = [], []
        for command, log in zip(commands, self.logs, strict=True):
            with open(log, "w") as out:
                self.procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))

    def text(self) -> str:
        return "\n".join(log.read_text(errors="replace") for log in self.logs)

    def wait(self, timeout: float = 300) -> list[int]:
        """The launchers' exit statuses; whatever still runs afterwards (a launcher, a rank it
        left behind) is killed, so a failing test leaves no process either."""
        try:
            return [p.wait(timeout=timeout) for p in self.procs]
        finally:
            for p in [*self.procs, *self.seen]:
                with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                    p.kill()

    def wait_for(self, text: str, count: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.text().count(text) < count:
            assert all(p.poll() is None for p in self.procs), self.text()[-3000:]
            assert time.monotonic() < deadline, self.text()[-3000:]
            time.sleep(0.2)
        self.ranks()

    def ranks(self) -> list[psutil.Process]:
        """The ranks (the launchers' children), remembered for the clean-up of ``wait``."""
        ranks = [c for p in self.procs for c in psutil.Process(p.pid).children(recursive=True)]
        self.seen.extend(ranks)
        return ranks


def _run(commands: list[list[str]], logs: Path) -> tuple[list[int], str]:
    launched = Launched(commands, logs)
    codes = launched.wait()
    return codes, launched.text()


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The job in one process, over two epochs: the weights every data-parallel run must give."""
    tmp = tmp_path_factory.mktemp("ddp")
    _, one = fit(JOB, data(), data(12, seed=1), tmp / "one.safetensors", "fp")
    return tmp, one


@pytest.fixture(scope="module")
def runs(one_process):
    """The one-process run, then two ranks on one node and two nodes of one rank, each over two
    epochs of the same global batch."""
    tmp, one = one_process
    codes, log = _run([_one_node("--checkpoint", str(tmp / "two.safetensors"))], tmp / "two")
    assert codes == [0], log[-3000:]
    codes, log = _run(_two_nodes("--checkpoint", str(tmp / "nodes.safetensors")), tmp / "nodes")
    assert codes == [0, 0], log[-3000:]
    assert "rank 1 of 2 (local 0 of 1)" in log  # one rank per launcher: two "nodes"
    return tmp, one


@CLUSTER
@pytest.mark.parametrize("name", ["two", "nodes"])
def test_data_parallel_ranks_train_the_weights_of_one_process(runs, name):
    tmp, one = runs
    state = read_state(tmp / f"{name}.safetensors")
    assert state.epoch == one.epoch == 2 and state.step == one.step == 12
    assert max_difference(weights(tmp / "one.safetensors"), weights(tmp / f"{name}.safetensors")) < TOLERANCE  # fmt: skip
    for x, y in zip(one.history, state.history, strict=True):
        assert x["val_accuracy"] == y["val_accuracy"]
        assert x["train_loss"] == pytest.approx(y["train_loss"], abs=TOLERANCE)


def test_gradient_accumulation_keeps_the_global_batch(one_process, tmp_path):
    tmp, one = one_process
    _, acc = fit(JOB, data(), data(12, seed=1), tmp_path / "acc.safetensors", "fp", max_batch=3)  # 3+3+2  # fmt: skip
    assert max_difference(weights(tmp / "one.safetensors"), weights(tmp_path / "acc.safetensors")) < TOLERANCE  # fmt: skip
    assert acc.step == one.step


@CLUSTER
def test_two_process_job_stopped_mid_epoch_resumes_identically_with_any_world_size(runs, tmp_path):
    tmp, _ = runs
    two = read_state(tmp / "two.safetensors")
    ckpt = tmp_path / "stopped.safetensors"
    # 6 steps per epoch, each rank reads 4 items per step: the signal comes in global step 7
    # (epoch 2, batch 1); the ranks agree at the next check (every 8 steps in a data-parallel
    # job), so the step-level checkpoint is written after epoch 2's second batch
    codes, log = _run([_one_node("--checkpoint", str(ckpt), "--signal-after", "26")], tmp_path / "s")  # fmt: skip
    assert codes[0] != 0 and log.count("SIGUSR1 received: step-level checkpoint") == 2, log[-3000:]
    paused = read_state(ckpt)
    assert (paused.epoch, paused.batch, paused.step) == (1, 2, 8)
    other = tmp_path / "one-process.safetensors"
    shutil.copyfile(ckpt, other)
    codes, log = _run([_one_node("--checkpoint", str(ckpt))], tmp_path / "r")
    assert codes == [0], log[-3000:]
    resumed = read_state(ckpt)
    strip = [{k: v for k, v in r.items() if k != "images_per_s"} for r in two.history]
    assert strip == [{k: v for k, v in r.items() if k != "images_per_s"} for r in resumed.history]
    a, b = weights(tmp / "two.safetensors"), weights(ckpt)
    assert all(torch.equal(a[k], b[k]) for k in a)

    # the same checkpoint resumed by one process: the one-process run, within the tolerance
    _, single = fit(JOB, data(), data(12, seed=1), other, "fp")
    assert single.step == 12
    assert max_difference(weights(tmp / "one.safetensors"), weights(other)) < TOLERANCE


@CLUSTER
@pytest.mark.parametrize(
    ("nodes", "number"), [(False, signal.SIGTERM), (True, signal.SIGUSR1)], ids=["one-node-TERM", "two-nodes-USR1"]
)  # fmt: skip
def test_a_signal_to_a_launcher_stops_every_rank_at_one_checkpoint(tmp_path, nodes, number):
    """SLURM signals the job's launchers (scancel, preemption: SIGTERM; the warning before the
    time limit: SIGUSR1, which torchrun forwards because the plan asks it to). One launcher
    signalled is enough: its rank asks for the stop, the ranks agree on a step, rank 0 writes
    one checkpoint and every rank exits with the preemption status."""
    ckpt = tmp_path / "c.safetensors"
    args = ("--checkpoint", str(ckpt), "--long")
    launched = Launched(_two_nodes(*args) if nodes else [_one_node(*args)], tmp_path / "l")
    launched.wait_for("epoch 1", 1)
    launched.wait_for("epoch 2", 1)  # both ranks are in the training loop
    launched.procs[0].send_signal(number)
    codes = launched.wait()
    log = launched.text()
    assert all(c != 0 for c in codes), log[-3000:]
    assert f"{number.name} received: step-level checkpoint written" in log, log[-3000:]
    stopped = log.count("received: step-level checkpoint written")
    assert stopped == 2, log[-3000:]
    paused = read_state(ckpt)
    # stopped where the ranks agree: a check step (every 8 steps), an epoch's end (batch 0),
    # or in validation, which asks before each batch: the epoch's steps all kept (batch 6 of
    # 6), its validation to rerun
    steps_per_epoch = len(data()) // LONG.settings.batch_size
    assert paused.step > 0
    assert paused.step % 8 == 0 or paused.batch in (0, steps_per_epoch), paused
    assert paused.stopped_by is None


@CLUSTER
def test_a_killed_rank_ends_the_whole_job(tmp_path):
    """A rank killed outright (out of memory, a node lost): both launchers end with a failure
    status, no rank is left running and nothing hangs (the module's timeout)."""
    launched = Launched(_two_nodes("--checkpoint", str(tmp_path / "k.safetensors"), "--long"), tmp_path / "k")  # fmt: skip
    launched.wait_for("epoch 1", 1)
    ranks = launched.ranks()
    assert len(ranks) == 2
    victim = psutil.Process(launched.procs[1].pid).children(recursive=True)[0]
    victim.send_signal(signal.SIGKILL)
    codes = launched.wait()
    assert all(c != 0 for c in codes), launched.text()[-3000:]
    _, alive = psutil.wait_procs(ranks, timeout=30)
    assert not alive, [p.pid for p in alive]


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


def test_a_rank_reads_its_place_from_torchrun_and_refuses_the_wrong_launch(monkeypatch):
    from imagenot.train.distributed import SINGLE, Dist, LaunchError, from_environment, joined

    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    assert from_environment() == SINGLE
    with (
        pytest.raises(LaunchError, match=r"plans 2 data-parallel processes .* without torchrun"),
        joined("gloo", planned=2),
    ):
        pass
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert from_environment({**env, "MASTER_ADDR": "h", "MASTER_PORT": "1"}) == Dist(3, 4, 1, 2)
    with pytest.raises(LaunchError, match="MASTER_ADDR"):
        from_environment(env)


@CLUSTER
def test_a_training_rule_runs_its_ranks_under_the_plans_launcher(tmp_path):
    """``imagenot train-trial`` as the rule runs it for a two-GPU job, on the CPU: behind the
    plan's launcher, each rank configures its own process (half the job's cores), rank 0
    alone writes the result, and the weights are those of the same job in one process."""
    import io
    import json

    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset
    from imagenot.cli import main
    from imagenot.core.config import validate_config

    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    records = []
    for i in range(48):
        c, split = i % 3, ["train", "train", "train", "val"][(i // 3) % 4]
        pixels = Image.new("RGB", (32, 32), colours[c])
        pixels.putpixel((i % 32, i // 32), (i * 5 % 255, 0, 0))
        buf = io.BytesIO()
        pixels.save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", f"c{c}", split, buf.getvalue()))
    dataset = tmp_path / "toy"
    write_dataset(dataset, records, ["c0", "c1", "c2"], shard_size=5000)
    space = {"budget": 1, "max_epochs": 2, "schedule_epochs": 2, "batch_size": 8,
             "hyperparameters": {"optimizer": {"value": "sgd"}, "lr": {"value": 0.05}}}  # fmt: skip
    config = validate_config(
        {
            "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
            "train": {
                "models": ["convnext_mini"],
                "image_size": 32,
                "experiments": [{"dataset": "toy", "protocol": "st", "space": "s"}],
                "spaces": {"s": space},
            },
        }
    )
    settings = train_settings.TrialSettings.from_config(config, "toy", "st", "convnext_mini", 0)
    draw = to_json(train_settings.DrawSettings.from_config(config, "toy", "st", "convnext_mini"))
    outs = {}
    for world in (1, 2):
        run = tmp_path / f"world-{world}"
        assert main(["train-draw-trials", "--settings", draw, "--record", str(tmp_path / f"p{world}.json"), "--trials", str(run / "trials.parquet")]) == 0  # fmt: skip
        job = to_json(replace(settings, job=replace(settings.job, world=world)))
        out = run / "stage-0/slot-0.json"
        command = [sys.executable, "-m", "imagenot.cli", "train-trial", "--settings", job, "--manifest", str(dataset / "manifest.parquet"), "--classes", str(dataset / "classes.txt"), "--fingerprint", str(dataset / "fingerprint.txt"), "--trials", str(run / "trials.parquet"), "--stage", "0", "--slot", "0", "--threads", "2", "--result", str(out)]  # fmt: skip
        launcher = train_launch.launch_line(1, world, 2).split()
        log = tmp_path / f"world-{world}.log"
        with open(log, "w") as f:
            assert subprocess.run([*launcher, *command], stdout=f, stderr=subprocess.STDOUT, timeout=300).returncode == 0, log.read_text()[-3000:]  # fmt: skip
        text = log.read_text()
        threads = 2 // world
        assert text.count(f"torch configured: {threads} threads, deterministic") == world, text[-3000:]  # fmt: skip
        assert text.count("stage 0 slot 0 (trial 0)") == 1  # rank 0 alone reports and writes
        outs[world] = (json.loads(out.read_text()), load_file(run / "trial-0/best.safetensors"))
    (one, w1), (two, w2) = outs[1], outs[2]
    assert (one["epochs"], one["stopped_by"]) == (two["epochs"], two["stopped_by"]) == (2, "max_epochs")  # fmt: skip
    assert one["val_accuracy"] == two["val_accuracy"] and one["best_epoch"] == two["best_epoch"]
    assert max_difference(w1, w2) < TOLERANCE
