"""The preflight (issue 34, sections 1 and 4): its checks on the CPU (the GPU-only ones skipped
with their reason), its verdicts on stand-in measurements (a model that does not fit, a /dev/shm
or the job's memory limit too small), and the gate: with resources.gpus > 0 a failed preflight runs no GPU job,
resources.require_preflight: false lifts the gate, and a CPU config plans no preflight at all.
No GPU here: the GPU branch (CUDA, peak device memory, bf16 on CUDA) is the thin part that
benchmarks/gpu_check.py runs on a lent GPU (tests/test_gpu_check.py: its CPU smoke run)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

from imagenot.cli import main
from imagenot.config import load_config
from imagenot.train import experiments, plan, preflight, preflight_plan, rings
from imagenot.train.distributed import Dist
from imagenot.train.feed import Feeder
from imagenot.train.settings import PreflightSettings

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "paper.yaml"
GIB = preflight.GIB


def _config(tmp_path: Path, overlay: dict, base: Path = REPO / "config" / "config.yaml") -> Path:
    config = yaml.safe_load(base.read_text())
    for section, values in overlay.items():
        config.setdefault(section, {}).update(values)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_ring_arithmetic_is_the_feeders():
    assert rings.FEED_PREFETCH == Feeder.PREFETCH
    # paper: 7 workers, micro-batch 256 + eval 256 at 256 px stored: ~5.8 GB per process
    assert rings.ring_bytes(7, 256, 256, 256) == 29 * 512 * 3 * 256 * 256
    assert rings.ring_bytes(0, 256, 256, 256) == 0


@pytest.mark.parametrize(
    ("batch", "world", "cap"), [(256, 1, None), (256, 1, 64), (256, 2, 96), (250, 3, 32), (7, 2, 2)]
)
def test_per_gpu_batch_is_the_loops_largest_micro_batch(batch, world, cap):
    from imagenot.train.loop import _largest_piece

    job = SimpleNamespace(settings=SimpleNamespace(batch_size=batch))
    largest = max(
        _largest_piece(10_000, job, Dist(rank=r, world=world, local_rank=r), cap)
        for r in range(world)
    )
    assert experiments.per_gpu_batch(batch, world, cap) == largest


def test_the_paper_runs_cap_convnext_l_and_efficientnet_v2_l_and_keep_the_others_whole():
    config = load_config(PAPER)
    runs = {(r["model"], r["space"]): r for r in preflight_plan.runs(config)}
    caps = config["train"]["max_batch_per_gpu_overrides"]
    assert set(caps) == {"convnext_large", "efficientnet_v2_l"}
    for model, cap in caps.items():
        st = runs[(model, "imagenot_st")]
        assert st["batch_size"] == 256 and st["per_gpu"] <= cap and st["stored_size"] == 256
    assert runs[("alexnet", "imagenot_st")]["per_gpu"] == 256  # no cap, the batch whole
    tl = runs[("resnet18", "cifar10_tl")]  # TL: the backbone's feature pass at the eval batch
    assert tl["mode"] == "features" and tl["per_gpu"] == config["train"]["eval_batch_size"]
    assert not any(r["space"] is None for r in runs.values())  # published ImageNet: nothing run
    # the training jobs read the same cap
    settings = PreflightSettings.from_config(config, None)
    assert settings.gpu_job and settings.num_workers == experiments.num_workers(config)


def test_a_cap_for_an_unregistered_model_is_refused_by_name():
    from imagenot.config import ConfigError

    config = load_config(PAPER)
    config["train"]["max_batch_per_gpu_overrides"] = {"convnext_lrage": 64}
    with pytest.raises(ConfigError, match=r"train\.max_batch_per_gpu_overrides: 'convnext_lrage'"):
        plan.check(config)


def test_a_model_that_does_not_fit_names_the_key_and_the_largest_batch_measured_to_fit():
    run = {"model": "convnext_large", "mode": "train", "per_gpu": 256, "space": "s"}
    total = 80 * GIB

    def peak_of(batch):  # 2 GiB fixed + 0.5 GiB per image; beyond 160 the allocator gives up
        return None if batch > 160 else int((2 + 0.5 * batch) * GIB)

    check = preflight.memory_verdict("memory convnext_large (s)", run, total, peak_of)
    assert check.status == "fail"
    # 0.9 x 80 GiB = 72 GiB: (72 - 2) / 0.5 = 140 images fit; the search gets within 1/16
    assert 128 <= check.values["fits"] <= 140
    assert f"train.max_batch_per_gpu_overrides.convnext_large: {check.values['fits']}" in (
        check.detail
    )
    assert "train.max_batch_per_gpu:" in check.detail and "out of device memory" in check.detail
    ok = preflight.memory_verdict("m", {**run, "per_gpu": 64}, total, peak_of)
    assert ok.status == "pass" and ok.values["peak_gib"] == 34.0
    tl = preflight.memory_verdict("m", {**run, "mode": "features"}, total, peak_of)
    assert "train.eval_batch_size:" in tl.detail
    none = preflight.memory_verdict("m", run, total, lambda b: None)
    assert none.status == "fail" and "not even one image fits" in none.detail


def test_host_check_names_what_is_too_small():
    settings = PreflightSettings.from_config(load_config(PAPER), None)
    ring = rings.ring_bytes(7, 256, 256, 256)
    # a node of more processes than /dev/shm holds rings for
    shm = os.statvfs("/dev/shm")
    crowded = dataclasses.replace(settings, gpus_per_node=shm.f_frsize * shm.f_blocks // ring + 1)
    check = preflight.check_host(crowded, workers=7)
    assert check.status == "fail" and "/dev/shm is smaller than the rings" in check.detail
    assert check.values["ring_gb_per_process"] == round(ring / 1e9, 2)
    assert preflight.check_host(settings, workers=0).status == "pass"  # no ring


def test_rings_above_mem_mb_are_not_a_fault():
    """Every training job asks for ``resources.train_trial.mem_mb`` plus its own rings
    (``plan.process_mem_mb``): rings larger than mem_mb are paid for, so the host check passes
    where /dev/shm and the job's limit hold them."""
    settings = PreflightSettings.from_config(load_config(PAPER), None)
    ring = rings.ring_bytes(7, 256, 256, 256)
    small = dataclasses.replace(settings, mem_mb=ring // 2_000_000, gpus_per_node=1)
    check = preflight.check_host(small, workers=7)
    shm = os.statvfs("/dev/shm")
    if shm.f_frsize * shm.f_blocks < ring:
        pytest.skip(f"this machine's /dev/shm holds less than one process's rings ({ring} bytes)")
    limit = preflight._cgroup_limit()
    if limit is not None and limit < ring:
        pytest.skip(f"this process's cgroup limit ({limit} bytes) is below the rings ({ring})")
    assert check.status == "pass", check.detail


def test_bf16_against_float32_agree_on_a_tiny_model_on_the_cpu():
    """The comparison the preflight runs on CUDA, here under the CPU's bf16 autocast."""
    values = preflight.compare_precision(
        "resnet_mini",
        32,
        load_config(REPO / "config" / "config.yaml")["train"]["normalisation"],
        torch.device("cpu"),
        batch=4,
    )
    assert len(values["loss_fp32"]) == len(values["loss_bf16"]) == preflight.PRECISION_STEPS
    assert values["loss_fp32"] != values["loss_bf16"]  # bf16 really ran
    assert values["loss_rel_diff"] <= preflight.LOSS_RTOL
    assert values["grad_cosine"] >= preflight.GRAD_COSINE
    assert values["logits_rel_diff"] <= preflight.LOGITS_RTOL
    assert 0 <= values["top1_agreement"] <= 1


def test_the_cpu_preflight_runs_every_check_and_skips_the_gpu_only_ones(tmp_path, capsys):
    config = _config(tmp_path, {"train": {"in_memory": False, "num_workers": 1}})
    out = tmp_path / "preflight"
    args = ["preflight", "--config", str(config), "--models", "resnet_mini", "--spaces", "st"]
    args += ["--feed-steps", "2", "--feed-warmup", "1", "--feed-images", "16"]
    args += ["--json", str(out / "local.json"), "--md", str(out / "local.md")]
    args += ["--datasets-root", str(tmp_path / "datasets")]  # where the feed's sample is read
    args += ["--feed-seconds", "0"]  # the steps asked for, no more
    assert main(args) == 0
    report = json.loads((out / "local.json").read_text())
    assert report["passed"] and report["environment"]["torch"] == torch.__version__
    checks = {c["name"].split(" (")[0].replace(" resnet_mini", ""): c for c in report["checks"]}
    assert checks["feed source"]["status"] == "pass" and not (tmp_path / "datasets").exists()
    assert checks["cuda"]["status"] == "skip" and "resources.gpus is 0" in checks["cuda"]["detail"]
    assert checks["precision"]["status"] == "skip" and "CUDA only" in checks["precision"]["detail"]
    assert checks["memory"]["status"] == "info"
    feed = checks["feed"]
    assert feed["status"] == "info" and feed["values"]["feed_images"] == 2 * 16
    assert len(feed["values"]["feed_worker_pids"]) == 1  # decoded in the one loader worker
    assert "64 px stored" in feed["name"]
    assert (
        checks["host"]["status"] == "pass" and checks["host"]["values"]["ring_gb_per_process"] > 0
    )
    md = (out / "local.md").read_text()
    assert md.startswith("# Preflight `local`: passed") and "| feed resnet_mini" in md
    assert md in capsys.readouterr().out


def test_a_gpu_config_without_a_gpu_fails_in_one_line_and_leaves_no_pass(tmp_path, capsys):
    out = tmp_path / "preflight"
    (out).mkdir()
    (out / "local.json").write_text("{}")  # an earlier pass: removed, it no longer holds
    args = ["preflight", "--config", str(PAPER), "--models", "alexnet", "--spaces", "imagenot_st"]
    args += ["--json", str(out / "local.json"), "--md", str(out / "local.md")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("imagenot preflight: error: preflight failed")
    assert "sees no CUDA device" in err[0] and "resources.require_preflight: false" in err[0]
    assert not (out / "local.json").exists() and not (out / "local.md").exists()
    failed = json.loads((out / "local.failed.json").read_text())
    assert not failed["passed"] and failed["checks"][0]["status"] == "fail"
    assert "**FAILED**" in (out / "local.failed.md").read_text()
    assert main([*args[:4], "nope", *args[5:]]) == 2  # a model the config does not train
    assert "--models: ['nope'] not trained by this config" in capsys.readouterr().err


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


def _snakemake(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = ["snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
    cmd += ["--configfile", str(config), *args]
    return subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)


def test_gpu_rules_wait_for_the_preflight_unless_the_config_lifts_the_gate(tmp_path):
    """The plan: with GPUs every GPU rule's job takes the preflight's report as an input (one
    preflight job); resources.require_preflight: false and a CPU config plan none."""
    target = "results/train/imagenot/st/resnet_mini/stage-0/slot-0.json"
    plans = {}
    for name, resources in {
        "gated": {"gpus": 1},
        "lifted": {"gpus": 1, "require_preflight": False},
        "cpu": {"gpus": 0},
    }.items():
        config = _config(tmp_path / name, {"resources": resources})
        done = _snakemake(tmp_path / name, config, "-n", "--", target)
        assert done.returncode == 0, done.stderr[-3000:]
        plans[name] = done.stdout
    block = plans["gated"].split("rule train_trial:")[1].split("\n\n")[0]
    assert "results/preflight/local.json" in block
    assert "rule preflight:" in plans["gated"]
    for name in ("lifted", "cpu"):
        assert "rule preflight:" not in plans[name] and "results/preflight/" not in plans[name]


def test_a_failed_preflight_runs_no_gpu_job_and_the_override_runs_it(tmp_path):
    """For real, on this GPU-less machine, under a config that plans GPUs and trains on `auto`:
    the preflight fails (no CUDA device), its report is left as <site>.failed.md, and the GPU
    job that waits for it never runs; with resources.require_preflight: false the same job runs
    (an empty slot: it writes its result without torch, tests/test_slurm_profile.py)."""
    results = {}
    for name, lifted in (("refused", False), ("override", True)):
        work = tmp_path / name
        run = work / "results" / "train" / "imagenot" / "st" / "resnet_mini"
        (run / "halving").mkdir(parents=True)
        (work / "results" / "datasets" / "imagenot").mkdir(parents=True)
        for stand_in in ("manifest.parquet", "fingerprint.txt"):
            (work / "results" / "datasets" / "imagenot" / stand_in).touch()
        (run / "trials.parquet").touch()
        time.sleep(1.1)  # the decision is newer than its stand-in inputs
        (run / "halving" / "rung-0.json").write_text('{"promoted": []}')
        resources = {"gpus": 1, "require_preflight": not lifted}
        config = _config(work, {"resources": resources, "train": {"device": "auto"}})
        target = "results/train/imagenot/st/resnet_mini/stage-1/slot-0.json"
        done = _snakemake(
            work,
            config,
            "--cores",
            "2",
            "--allowed-rules",
            "train_trial",
            "preflight",
            "--",
            target,
        )
        results[name] = (done, work / target, work / "results" / "preflight")
    done, slot, reports = results["refused"]
    assert done.returncode != 0
    assert not slot.exists() and not (reports / "local.json").exists()
    assert "sees no CUDA device" in (reports / "local.failed.md").read_text()
    done, slot, reports = results["override"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert slot.exists() and not reports.exists()
