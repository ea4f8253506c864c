"""benchmarks/bench_feed_models.py: the one command that compares each
model's training speed under the real feed with the same model fed from device memory. Run here
on the CPU with a tiny model and one worker; its rates are not checked (no timing assertions),
only that both sides trained the steps asked for and that the feed really decoded in a worker
process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

from imagenot.core.config import load_config
from imagenot.train.registry import MODELS

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    out = subprocess.run(
        [sys.executable, "benchmarks/bench_feed_models.py", "--json", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


@pytest.mark.parametrize("encoded", [False, True], ids=["decoded-in-workers", "encoded"])
def test_feed_against_device_resident_on_the_cpu(encoded):
    steps, batch = 3, 8
    args = ["--device", "cpu", "--models", "resnet_mini", "--size", "32", "--images", "20"]
    args += ["--batch-size", str(batch), "--steps", str(steps), "--warmup", "1", "--workers", "1"]
    args += ["--threads", "1"]
    result = _run(*args, *(["--encoded"] if encoded else []))
    assert result["device"] == "cpu"
    assert result["workers"] == 1 and result["threads"] == 1
    assert result["decode_floor_img_per_s_per_core"] > 0
    assert result["feed"].startswith("encoded" if encoded else "decoded in workers")
    (row,) = result["models"]
    assert row["model"] == "resnet_mini" and row["batch_size"] == batch
    # every timed step trained a whole batch on both sides (batches cycle over the 20 images)
    assert row["feed_images"] == row["device_images"] == steps * batch
    assert row["feed_img_per_s"] > 0 and row["device_img_per_s"] > 0
    assert row["ratio"] == pytest.approx(row["feed_img_per_s"] / row["device_img_per_s"], rel=0.01)
    # the items came from one DataLoader worker process, none from the training process
    assert len(row["feed_worker_pids"]) == 1
    assert row["feed_worker_pids"][0] != os.getpid()
    assert row["feed_main_process_items"] is False


def test_default_models_and_batches_come_from_the_config():
    """Without --models and --batch-size: the paper config's models and their ImageNot ST
    batch (read through the config, not a copy of its list)."""
    bench_feed_models = load_benchmark("bench_feed_models")

    config = load_config(REPO / "config/paper.yaml")
    models = list(config["train"]["models"])
    assert "convnext_large" in models
    batches = bench_feed_models._batch_sizes(config, models, "imagenot_st", None)
    # the space's batch whole: no per-model cap in the config (the preflight measures the cut)
    whole = config["train"]["spaces"]["imagenot_st"]["batch_size"]
    assert batches == dict.fromkeys(models, whole)
    cifar = bench_feed_models._batch_sizes(config, models, "cifar10_st", None)
    assert cifar["efficientnet_v2_l"] == 32 and cifar["resnet18"] == 256
    assert bench_feed_models._batch_sizes(config, models, "imagenot_st", 16) == dict.fromkeys(
        models, 16
    )
    with pytest.raises(SystemExit, match=r"--space 'nope' is not a key of train\.spaces"):
        bench_feed_models._batch_sizes(config, models, "nope", None)


def test_an_unknown_model_is_a_one_line_error_before_any_work():
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_feed_models.py", "--device", "cpu", "--models", "nope"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"--models/--size: unknown model 'nope'; registered: {', '.join(MODELS)}"
    ]
