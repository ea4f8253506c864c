"""Fail fast and the GPU risks of a training job, on the CPU: a diverging trial ends at once as
the worst result of its rung; faults no retry can fix are recorded and their retries ask for no
GPU and exit at once; deadline stops do not grow memory; best weights wait in host memory for
the checkpoint; the deadline reaches into validation and staging."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from test_train_jobs import dataset_dir  # noqa: F401  (the module's tiny dataset fixture)
from test_train_preempt import (
    HP,
    _data,
    _Served,
    deterministic,  # noqa: F401  (a fixture)
)
from toy_job import toy_job

from imagenot.train import failfast, search
from imagenot.train.checkpoints import read_state
from imagenot.train.interrupts import Preempted
from imagenot.train.loop import fit
from imagenot.train.records import write_record

torch.set_num_threads(1)


def _job(**fields):
    fields = {"max_epochs": 3, "patience": 5, **fields}
    return toy_job("resnet_mini", 3, HP, seed=1, image_size=32, batch_size=8, **fields)


def _model_tensors(path):
    return {k[6:]: v for k, v in load_file(str(path)).items() if k.startswith("model.")}


# ---- divergence --------------------------------------------------------------------------------
def test_a_diverging_learning_rate_ends_the_trial_at_once_as_diverged(tmp_path):
    """A learning rate that blows the loss up: the job stops within CHECK_EVERY steps of the
    first non-finite loss, in its first epoch, saves nothing (its weights are NaN) and says
    why; a sane rate on the same data trains on."""
    from imagenot.train.loop import CHECK_EVERY

    job = _job(hyperparameters={**HP, "lr": 1e6})
    best = tmp_path / "best.safetensors"
    _, state = fit(job, _data(), _data(24, seed=1), tmp_path / "ck.safetensors", "fp",
                   best_weights=best)  # fmt: skip
    assert state.stopped_by == search.DIVERGED
    assert state.epoch == 0 and state.step <= CHECK_EVERY  # 6 steps per epoch: the first
    assert not best.exists() and not (tmp_path / "ck.safetensors").exists()
    _, sane = fit(_job(max_epochs=1), _data(), _data(24, seed=1), tmp_path / "ok.safetensors", "fp")
    assert sane.stopped_by == "max_epochs"


def test_a_diverged_trial_is_the_worst_of_its_rung_and_never_selected(tmp_path):
    """Halving never promotes a diverged trial, whatever its accuracy before; selection ranks it
    below every other; a search whose every trial diverged names the key to change."""
    from trial_records import write_slot

    from imagenot.train import trials

    run = tmp_path / "toy/st/m"
    rows = {0: (60.0, None), 1: (90.0, search.DIVERGED), 2: (40.0, None), 3: (10.0, None)}
    paths = []
    for t, (acc, stopped) in rows.items():
        path = run / f"stage-0/slot-{t}.json"
        write_slot(path, val_accuracy=acc, stopped_by=stopped)
        paths.append(path)
    decision = trials.halve(paths, 0, 2, tmp_path / "rung-0.json")
    assert decision["promoted"] == [0, 2]  # 1 diverged: out, though its accuracy was the best
    assert search.standing({"val_accuracy": 90.0, "stopped_by": search.DIVERGED}) == -float("inf")
    assert trials.select(paths, tmp_path / "selection.json")["trial"] == 0
    with pytest.raises(trials.JobError, match=r"hyperparameters\.lr"):
        trials.select([paths[1]], tmp_path / "none.json")


# ---- best weights: in host memory until the checkpoint ---------------------------------------------
@pytest.mark.usefixtures("deterministic")
def test_best_weights_are_written_with_the_checkpoint_not_at_each_improvement(
    tmp_path, monkeypatch
):
    """Three improving epochs without a checkpoint interval: the best weights are written once,
    at the end (with the checkpoint), and hold the best epoch's weights, the same bytes as the
    model's weights saved at that epoch."""
    from imagenot.train import loop

    writes = []
    real = loop.save_tensors
    monkeypatch.setattr(loop, "save_tensors", lambda t, p: (writes.append(p), real(t, p))[1])
    data, val, job = _data(), _data(24, seed=1), _job()
    best = tmp_path / "best.safetensors"
    _, state = fit(job, data, val, tmp_path / "a.safetensors", "fp", best_weights=best)
    assert writes == [best]
    # the model at the best epoch: the same job stopped there (its checkpoint's weights)
    fit(job, data, val, tmp_path / "b.safetensors", "fp", stop_epoch=state.best_epoch)
    at_best, written = _model_tensors(tmp_path / "b.safetensors"), load_file(str(best))
    assert written.keys() == at_best.keys()
    assert all(torch.equal(written[k], at_best[k]) for k in written)


@pytest.mark.usefixtures("deterministic")
def test_a_stop_writes_the_held_best_weights_with_its_checkpoint(tmp_path, monkeypatch):
    """The deadline stops the job in epoch 2 (no save since epoch 1 improved): the checkpoint
    names best epoch 1, and epoch 1's weights are on disk beside it."""
    from imagenot.train import interrupts

    data, val, job = _data(), _data(24, seed=1), _job()
    best = tmp_path / "best.safetensors"
    fit(job, data, val, tmp_path / "one.safetensors", "fp", stop_epoch=1)
    real = time.time
    # the clock jumps past the deadline while epoch 2 reads its 3rd batch
    served = _Served(data, 48 + 20, lambda: monkeypatch.setattr(interrupts.time, "time", lambda: real() + 7200))  # fmt: skip
    with pytest.raises(Preempted, match="deadline reached"):
        fit(job, served, val, tmp_path / "b.safetensors", "fp", best_weights=best,
            deadline=real() + 3600)  # fmt: skip
    monkeypatch.undo()
    saved = read_state(tmp_path / "b.safetensors")
    assert (saved.epoch, saved.best_epoch) == (1, 1)
    one, written = _model_tensors(tmp_path / "one.safetensors"), load_file(str(best))
    assert written.keys() == one.keys()
    assert all(torch.equal(written[k], one[k]) for k in one)


# ---- the deadline in validation and in staging ---------------------------------------------------
@pytest.mark.usefixtures("deterministic")
def test_the_deadline_during_validation_checkpoints_and_resumes_identically(tmp_path, monkeypatch):
    """The deadline comes while epoch 1 is being validated: the job stops before the next
    validation batch, checkpoints the epoch's training (all its steps, unscored) and raises
    Preempted; its resumption validates that epoch and ends as an uninterrupted run."""
    from imagenot.train import interrupts

    data, val, job = _data(), _data(24, seed=1), _job(eval_batch_size=8)
    _, straight = fit(job, data, val, tmp_path / "a.safetensors", "fp")
    real = time.time
    late = _Served(val, 10, lambda: monkeypatch.setattr(interrupts.time, "time", lambda: real() + 7200))  # fmt: skip
    with pytest.raises(Preempted, match="deadline reached"):
        fit(job, data, late, tmp_path / "b.safetensors", "fp", deadline=real() + 3600)
    monkeypatch.undo()
    paused = read_state(tmp_path / "b.safetensors")
    assert (paused.epoch, paused.batch, paused.step) == (0, 6, 6)  # trained, not yet scored
    assert late.reads < len(val)  # validation stopped part-way
    _, resumed = fit(job, data, val, tmp_path / "b.safetensors", "fp")
    strip = [{k: v for k, v in r.items() if k != "images_per_s"} for r in straight.history]
    assert strip == [{k: v for k, v in r.items() if k != "images_per_s"} for r in resumed.history]
    a, b = _model_tensors(tmp_path / "a.safetensors"), _model_tensors(tmp_path / "b.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_staging_stops_at_the_deadline_and_leaves_no_partial_copy(tmp_path):
    from imagenot.train.feed import stage_to_local

    data = tmp_path / "ds"
    data.mkdir()
    for i in range(3):
        (data / f"shard-{i}.tar").write_bytes(b"x" * 100)
    (data / "fingerprint.txt").write_text("f" * 64)
    local = tmp_path / "local"
    with pytest.raises(Preempted, match="staging"):
        stage_to_local(data, "f" * 64, str(local), deadline=time.time() - 1)
    assert not list((local / "imagenot-datasets").iterdir())
    staged = stage_to_local(data, "f" * 64, str(local), deadline=time.time() + 3600)
    assert sorted(p.name for p in staged.iterdir()) == sorted(p.name for p in data.iterdir())


# ---- faults no retry can fix -----------------------------------------------------------------------
def test_out_of_memory_at_the_first_step_names_the_batch_key(tmp_path, monkeypatch):
    """CUDA out of memory before the job's first step completes is permanent and names
    train.max_batch_per_gpu; after a step it stays a plain (retried) out-of-memory error."""
    from imagenot.train import loop

    calls = []
    real = loop.F.cross_entropy

    def oom_at(n):
        def cross_entropy(*a, **k):
            calls.append(1)
            if len(calls) == n:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
            return real(*a, **k)

        return cross_entropy

    monkeypatch.setattr(loop.F, "cross_entropy", oom_at(1))
    with pytest.raises(failfast.StartupOutOfMemory, match=r"train\.max_batch_per_gpu below 8"):
        fit(_job(), _data(), _data(24, seed=1), tmp_path / "a.safetensors", "fp")
    assert failfast.permanent_cause(failfast.StartupOutOfMemory("x")) == "x"
    calls.clear()
    monkeypatch.setattr(loop.F, "cross_entropy", oom_at(3))
    with pytest.raises(torch.cuda.OutOfMemoryError) as caught:
        fit(_job(), _data(), _data(24, seed=1), tmp_path / "b.safetensors", "fp")
    assert not isinstance(caught.value, failfast.PermanentFailure)
    assert failfast.permanent_cause(caught.value) is None  # a retry may fit


def test_a_retry_of_a_permanent_fault_asks_no_gpu_and_exits_at_once(tmp_path, repo_root):
    """A GPU job that sees no GPU: the fault is recorded beside the job's output; Snakemake's
    retry of it (attempt 2) asks for no GPU, one core and the empty slot's memory and
    runtime, and the job ends at once with the same message. The first attempt of a run is
    sized as usual, and a new run (onstart) forgets the fault."""
    from imagenot.core.config import load_config
    from imagenot.train import cli
    from imagenot.train import resources as train_resources
    from imagenot.train.device import DeviceError

    out = tmp_path / "results/train/d/st/m/stage-0/slot-0.json"
    out.parent.mkdir(parents=True)
    status = failfast.status_for(out)

    def no_gpu():
        raise DeviceError("this job is a GPU job (resources.gpus > 0) but sees no CUDA device")

    with pytest.raises(DeviceError):
        cli._preemptible(no_gpu, out)
    assert "resources.gpus" in failfast.read(status)["permanent"]
    ran = []
    with pytest.raises(failfast.PermanentFailure, match=r"sees no CUDA device.*not retried"):
        cli._preemptible(lambda: ran.append(1), out)
    assert not ran  # the retry did nothing
    config = load_config(repo_root / "config" / "config.yaml")
    config["resources"]["gpus"] = 1
    own = config["resources"]["train_trial"]
    gets_gpu = train_resources.slot_gets_gpu
    assert gets_gpu([], 0, status, 1) and not gets_gpu([], 0, status, 2)
    assert train_resources.slot_threads(config, [], 0, status, 2) == 1
    assert train_resources.slot_mem_mb(config, [], 0, 2, status, ring=500) == own["empty_mem_mb"]
    assert train_resources.slot_runtime_min(config, [], 0, 3, status) == own["empty_runtime_min"]
    assert train_resources.slot_mem_mb(config, [], 0, 1, status, ring=500) == own["mem_mb"] + 500
    assert failfast.clear_all(tmp_path / "results") == 1 and not status.exists()
    assert gets_gpu([], 0, status, 2)  # a new run tries again
    # a fault a retry may fix (a lost node, a driver error) is not recorded
    with pytest.raises(RuntimeError):
        cli._preemptible(lambda: (_ for _ in ()).throw(RuntimeError("NCCL timeout")), out)
    assert not status.exists()


def test_a_deadline_stop_grows_the_runtime_of_its_retry_not_its_memory(tmp_path, repo_root):
    from imagenot.core.config import load_config
    from imagenot.train import cli
    from imagenot.train import resources as train_resources

    out = tmp_path / "slot-0.json"
    status = failfast.status_for(out)

    def stopped():
        raise Preempted("deadline reached: step-level checkpoint written, exiting")

    with pytest.raises(SystemExit) as exited:
        cli._preemptible(stopped, out)
    assert exited.value.code == cli.PREEMPTED_EXIT
    config = load_config(repo_root / "config" / "config.yaml")
    config["resources"].update(gpus=1, max_runtime_min=10**6)
    own, growth = config["resources"]["train_trial"], config["resources"]["attempt_growth"]
    mem_mb, runtime_min = train_resources.slot_mem_mb, train_resources.slot_runtime_min
    assert mem_mb(config, [], 0, 2, status) == own["mem_mb"]  # not grown
    assert runtime_min(config, [], 0, 2, status) == int(own["runtime_min"] * growth)
    assert mem_mb(config, [], 0, 2) == int(own["mem_mb"] * growth)  # an OOM kill: grown
    cli._preemptible(lambda: None, out)  # it then succeeds: its status goes
    assert not status.exists()


def test_a_missing_weights_file_is_permanent_and_names_the_keys(tmp_path, repo_root):
    from imagenot.core.config import load_config
    from imagenot.train import identity
    from imagenot.train import settings as train_settings

    config = load_config(repo_root / "config" / "config.yaml")
    dataset = next(iter(config["datasets"]))
    model = config["train"]["models"][0]
    settings = replace(
        train_settings.JobSettings.from_config(config, dataset, "st", model),
        init=str(tmp_path / "gone.safetensors"),
    )
    with pytest.raises(failfast.MissingWeights, match=r"train\.weights_dir") as caught:
        identity.init_description(settings)
    assert failfast.permanent_cause(caught.value) == str(caught.value)


# ---- the batch rings in a training job's memory request --------------------------------------------
def test_the_rings_memory_is_part_of_a_training_slot_request(repo_root):
    """The paper config: images stored at 256 px, 7 loader workers (8 cores per GPU), batches of
    256 for training and validation: two rings of (7 x 4 + 1) slots x 256 x 3 x 256 x 256
    bytes, 1.46 GB each (docs/gpu.md), on top of the per-GPU memory of every slot that trains."""
    from imagenot.acquire.sizes import stored_size
    from imagenot.core.config import load_config
    from imagenot.train import experiments, plan, rings
    from imagenot.train import resources as train_resources
    from imagenot.train.feed import Feeder

    assert rings.FEED_PREFETCH == Feeder.PREFETCH  # the copy of the feed's constant
    config = load_config(repo_root / "config" / "paper.yaml")
    exp = next(e for e in plan.experiments(config) if e["protocol"] == "st")
    on_gpu = config["train"]["decode_on_gpu"]  # their JPEG bytes cross the queue: no ring
    at_256 = [
        m for m in config["train"]["models"]
        if experiments.model_settings(config, exp["dataset"], "st", m)["batch_size"] == 256
    ]  # fmt: skip
    model = next(m for m in at_256 if m not in on_gpu)
    assert {rings.ring_mb(config, exp["dataset"], "st", m) for m in on_gpu} == {0}
    assert stored_size(config, exp["dataset"]) == 256
    assert experiments.num_workers(config) == 7 and config["train"]["eval_batch_size"] == 256
    ring = rings.ring_mb(config, exp["dataset"], "st", model)
    assert ring == 2 * 29 * 256 * 3 * 256 * 256 // 2**20 == 2784
    own = config["resources"]["train_trial"]["mem_mb"]
    assert train_resources.slot_mem_mb(config, [], 0, 1, None, ring) == own + ring
    # a head fit over stored features has no loader workers, and so no ring
    tl = next((e for e in plan.experiments(config) if plan.is_tl(e["protocol"])), None)
    if tl is not None:
        assert rings.ring_mb(config, tl["dataset"], tl["protocol"], model) == 0


# ---- the feed's defaults on a GPU job ------------------------------------------------------------
def test_a_gpu_job_decodes_on_the_cpu_unless_told_otherwise(tmp_path, repo_root, monkeypatch):
    """train.decode_on_gpu is false by default: a CUDA job streams decoded images from the
    loader workers' ring (nvJPEG's stream bug, imagenot.train.feed); only the explicit
    choice hands the workers' JPEG bytes to the GPU."""
    from imagenot.core.config import load_config, schema_default
    from imagenot.train import jobs
    from imagenot.train import settings as train_settings

    assert schema_default("train.decode_on_gpu") is False
    config = load_config(repo_root / "config" / "config.yaml")
    config["resources"]["gpus"] = 1
    dataset = next(iter(config["datasets"]))
    settings = train_settings.JobSettings.from_config(
        config, dataset, "st", config["train"]["models"][0]
    )
    assert settings.decode_on_gpu is False and settings.gpu_job
    monkeypatch.setattr(jobs, "job_device", lambda s: "cuda")  # as on a GPU node
    settings = replace(settings, stage_to_local=False)
    assert jobs._data_source(settings, tmp_path, "fp") == (tmp_path, False)
    assert jobs._data_source(replace(settings, decode_on_gpu=True), tmp_path, "fp") == (
        tmp_path,
        True,
    )


def _pinning() -> str | None:
    """Why this torch cannot pin host memory (None: it can)."""
    try:
        torch.empty(1).pin_memory()
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    return None


@pytest.mark.skipif(
    _pinning() is not None,
    reason=f"pinned memory needs a CUDA device and driver ({_pinning()})",
)
def test_the_dataloaders_pin_thread_hands_out_pinned_copies_of_ring_slots():
    """A CUDA job's feed as it runs there: loader workers fill ring slots and the DataLoader's
    own pin-memory thread turns each slot into pinned copies (``_Filled.pin_memory``) before
    the slot may be refilled; every batch arrives pinned, with the images it was given."""
    from imagenot.train.feed import Feeder

    data = _data(40)
    feeder = Feeder(_Served(data), num_workers=2, largest=8, pin=True)
    pieces = list(torch.randperm(40, generator=torch.Generator().manual_seed(0)).split(8))
    for _ in range(2):  # two epochs: the persistent workers and the ring serve both
        served = [(x.clone(), y, x.is_pinned()) for x, y in feeder.epoch(pieces)]
        assert all(pinned for *_, pinned in served)
        for idx, (images, labels, _) in zip(pieces, served, strict=True):
            assert torch.equal(images, data.images[idx]) and torch.equal(labels, data.labels[idx])


def test_a_training_jobs_memory_is_per_gpu_with_its_rings_and_not_grown_by_deadline_stops(
    repo_root, tmp_path
):
    """train_trial, train_final and train_features ask resources.process_mem_mb: the per-GPU memory
    and the process's rings for each GPU of the node, grown per attempt except after deadline
    stops, and the least for the retry of a job that failed for good."""
    from imagenot.core.config import load_config
    from imagenot.train import failfast, rings
    from imagenot.train import resources as train_resources

    config = load_config(repo_root / "config" / "paper.yaml")
    assert rings.largest_ring_mb(config) >= 2784
    own, growth = config["resources"]["train_trial"]["mem_mb"], 1.5
    config["resources"]["attempt_growth"] = growth
    status = tmp_path / "final" / f"seed-0{failfast.STATUS_SUFFIX}"
    status.parent.mkdir()
    assert train_resources.process_mem_mb(config, status, 1, 2784, 4) == 4 * (own + 2784)
    assert train_resources.process_mem_mb(config, status, 2, 2784, 1) == int((own + 2784) * growth)
    status.write_text(json.dumps({"stops": 1}))  # attempt 1 stopped by its deadline (exit 75)
    assert train_resources.process_mem_mb(config, status, 2, 2784, 1) == own + 2784
    status.write_text(json.dumps({"permanent": "no CUDA device"}))
    empty = config["resources"]["train_trial"]["empty_mem_mb"]
    assert train_resources.process_mem_mb(config, status, 2, 2784, 4) == empty
    config["train"]["num_workers"] = 0  # no loader workers: no ring
    assert rings.largest_ring_mb(config) == 0


# ---- divergence through the commands the rules run -------------------------------------------------
def test_a_diverging_trial_ends_its_job_and_a_diverging_final_run_is_not_retried(
    dataset_dir,  # noqa: F811  (the fixture imported from test_train_jobs)
    tmp_path,
):
    """`imagenot train-trial` with a learning rate of 10^6: the job succeeds (its result is
    data: stopped_by diverged, no weights, no checkpoint left). A final run of the same
    hyperparameters fails with the key to change, recorded so that its retry ends at once."""
    import json

    from test_train_jobs import _cli, _config

    from imagenot.cli import main
    from imagenot.core.config import validate_config
    from imagenot.core.settings import to_json
    from imagenot.train import settings as train_settings

    raw = _config()
    raw["train"]["spaces"]["s"]["hyperparameters"] = {
        "optimizer": {"value": "sgd"},
        "lr": {"value": 1e6},
    }
    raw["train"]["spaces"]["s"]["budget"] = 1
    config = validate_config(raw)
    run = tmp_path / "toy/st/resnet_mini"
    draw = to_json(train_settings.DrawSettings.from_config(config, "toy", "st", "resnet_mini"))
    _cli("train-draw-trials", "--settings", draw, "--record", str(tmp_path / "prereg.json"),
         "--trials", str(run / "trials.parquet"))  # fmt: skip
    trial = to_json(train_settings.TrialSettings.from_config(config, "toy", "st", "resnet_mini", 0))
    common = ["--manifest", str(dataset_dir / "manifest.parquet"), "--classes", str(dataset_dir / "classes.txt"), "--fingerprint", str(dataset_dir / "fingerprint.txt"), "--trials", str(run / "trials.parquet"), "--threads", "1"]  # fmt: skip
    out = run / "stage-0/slot-0.json"
    _cli("train-trial", "--settings", trial, *common, "--stage", "0", "--slot", "0", "--result", str(out))  # fmt: skip
    result = json.loads(out.read_text())
    assert result["stopped_by"] == search.DIVERGED and "best_sha256" not in result
    assert not list((run / "trial-0").glob("*.safetensors*"))
    # the final run of a (here: forced) selection of it
    chosen = {k: result[k] for k in ("trial", "model", "val_accuracy", "hyperparameters")}
    write_record({**chosen, "result": result}, run / "selection.json", "selection")
    final = to_json(train_settings.FinalSettings.from_config(config, "toy", "st", "resnet_mini", 1))
    out_dir = run / "final/seed-1"
    args = ["train-final", "--settings", final, *common, "--selection", str(run / "selection.json"),
            "--run", "toy/st/resnet_mini/1", "--model", str(out_dir / "model.safetensors"), "--result", str(out_dir / "result.json")]  # fmt: skip
    assert main(args) == 2
    recorded = failfast.read(failfast.status_for(out_dir))["permanent"]
    assert "hyperparameters.lr" in recorded and "NaN or infinite" in recorded
    assert main(args) == 2  # the retry: the same message at once, nothing trained
    assert not (out_dir / "checkpoint.safetensors").exists()


def test_snakemake_retries_a_gpu_less_gpu_job_without_a_gpu_and_it_exits_at_once(
    tmp_path, repo_root
):
    """The rule as Snakemake runs it (local executor, --retries 1) under a config that plans
    GPUs, on this GPU-less machine: attempt 1 asks for the GPU and fails on the device check,
    recording why; attempt 2 asks for no GPU, one core and the empty slot's memory and
    runtime, and its log says it was not retried. Only train_trial may run; the dataset files
    are stand-ins (the device check comes first)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    import pyarrow as pa

    from imagenot.core.config import load_config
    from imagenot.core.io import write_parquet
    from imagenot.train import experiments
    from imagenot.train.paths import PREREGISTRATION
    from imagenot.train.prereg import register
    from imagenot.train.settings import DrawSettings

    overlay = tmp_path / "gpus.yaml"
    # no preflight gate: this test is about the retry of a GPU job that finds no GPU
    overlay.write_text("resources: {gpus: 1, cpus_per_gpu: 2, require_preflight: false}\n")
    config = load_config(repo_root / "config" / "config.yaml")
    results = tmp_path / "results"
    run = results / "train" / "imagenot" / "st" / "resnet_mini"
    (results / "datasets" / "imagenot").mkdir(parents=True)
    for stand_in in ("manifest.parquet", "classes.txt", "fingerprint.txt"):
        (results / "datasets" / "imagenot" / stand_in).touch()
    definition = experiments.definition(config, "imagenot", "st")
    drawn = search.draw_trials(definition, definition["seed"], "imagenot", "st")
    write_parquet(pa.table(search.trial_columns(drawn)), run / "trials.parquet")
    # registered as the drawing job registers it (the table is read against it)
    s = DrawSettings.from_config(config, "imagenot", "st", "resnet_mini")
    register(tmp_path / PREREGISTRATION, s.experiment, s.definition, s.model, s.amendments,
             run.parent, s.model_settings)  # fmt: skip
    # a status file left by an earlier run: the run's start (onstart) removes it
    stale = failfast.status_for(run / "stage-0/slot-1.json")
    failfast.record_failure(stale, "from an earlier run")
    target = "results/train/imagenot/st/resnet_mini/stage-0/slot-0.json"
    cmd = ["snakemake", "--snakefile", str(repo_root / "Snakefile"),
           "--directory", str(tmp_path), "--allowed-rules", "train_trial", "--cores", "4",
           "--retries", "1", "--configfile", "config/config.yaml", str(overlay), "--", target]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = subprocess.run(cmd, cwd=repo_root, env=env, capture_output=True, text=True, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-4000:]
    asked = re.findall(r"rule train_trial:(?:\n    .*)*?\n    resources: (.*)", log)
    cores = re.findall(r"--threads (\d+) --runtime-min", log)  # (each command shown twice)
    assert len(asked) == 2, log[-4000:]
    assert "gpu=1" in asked[0] and cores[0] == "2", (asked, cores)
    own = config["resources"]["train_trial"]
    assert "gpu" not in asked[1] and cores[-1] == "1", (asked, cores)
    assert f"mem_mb={own['empty_mem_mb']}," in asked[1], asked
    assert f"runtime={own['empty_runtime_min']}," in asked[1], asked
    job_log = (results / "logs/train_trial/imagenot/st/resnet_mini/0-0.log").read_text()
    assert "sees no CUDA device" in job_log and "not retried" in job_log, job_log[-2000:]
    assert "resources.gpus" in failfast.read(failfast.status_for(run / "stage-0/slot-0.json"))["permanent"]  # fmt: skip
    assert not stale.exists()
