"""The preflight's feed checks read where the training jobs read: a sample
of the dataset at its real location, here a folder whose reads are slowed as a shared
filesystem's are (every read of a file below it waits), against node-local $TMPDIR; the check
names train.stage_to_local as the measurement says, the feed check then reads where the jobs
will, and a job whose $TMPDIR lacks the room reads in place. On the CPU, as the cluster would
run it; the GPU figures are benchmarks/gpu_check.py's."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path

import pytest
import torch

from imagenot.config import load_config
from imagenot.dataset import ShardReader
from imagenot.train import feed_bench, preflight, preflight_feed
from imagenot.train.feed import stage_to_local
from imagenot.train.settings import PreflightSettings

REPO = Path(__file__).resolve().parents[1]
DELAY_S = 0.005  # per read below the "shared" folder
CPU = torch.device("cpu")


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A shared filesystem stand-in (``shared/results/datasets``: each read waits
    :data:`DELAY_S`; every read's folder logged, the loader workers' too) and a node-local
    ``$TMPDIR``."""
    shared = tmp_path / "shared" / "results" / "datasets"
    local = tmp_path / "local"
    local.mkdir()
    monkeypatch.setenv("TMPDIR", str(local))
    reads = tmp_path / "reads.log"
    original = ShardReader.read

    def read(self, shard, offset, length):
        slow = str(self.root).startswith(str(tmp_path / "shared"))
        if slow:
            time.sleep(DELAY_S)
        with reads.open("a") as f:
            f.write(f"{'shared' if slow else 'local'}\n")
        return original(self, shard, offset, length)

    monkeypatch.setattr(ShardReader, "read", read)
    return shared, local, reads


def _settings(stage: bool) -> PreflightSettings:
    config = load_config(REPO / "config" / "config.yaml")
    settings = PreflightSettings.from_config(config, None)
    return dataclasses.replace(settings, stage_to_local=stage, in_memory=False)


def _built(shared: Path, n: int = 40) -> Path:
    """A built dataset ``imagenot`` at the shared location, stored at the demo's 64 px."""
    feed_bench.write_jpeg_dataset(shared / "imagenot", n, 64)
    return shared / "imagenot"


def test_a_slow_shared_filesystem_asks_for_staging_and_the_staged_copy_is_what_is_fed(cluster):
    shared, local, reads = cluster
    with preflight_feed.Samples(_settings(False), 24, 2, CPU, str(shared)) as samples:
        dataset, _ = samples.get(64)
        check = preflight.Check(*samples.checks[0])
    assert check.name == "feed source (64 px)" and check.status == "warn"
    assert "set train.stage_to_local: true" in check.detail
    assert "not built yet" in check.detail  # no dataset there: a sample written beside them
    values = check.values
    assert values["local_over_real"] >= preflight_feed.STAGE_GAIN
    assert values["real"]["img_per_s"] <= 2 / DELAY_S * 1.2  # two readers, one wait per read
    assert values["jobs_read"] == "in place"
    assert Path(dataset.dataset_dir).is_relative_to(shared.parent)  # fed where the jobs read
    # the samples are removed, the datasets' folder the check made too
    assert not shared.exists() and not list(local.iterdir())

    reads.unlink()
    with preflight_feed.Samples(_settings(True), 24, 2, CPU, str(shared)) as samples:
        dataset, _ = samples.get(64)
        check = preflight.Check(*samples.checks[0])
        fed = [dataset.read_bytes(i) for i in range(len(dataset))]
    assert check.status == "pass" and check.values["jobs_read"] == "node-local copy"
    assert Path(dataset.dataset_dir).is_relative_to(local) and len(fed) == 24
    lines = reads.read_text().split()
    assert lines[-24:] == ["local"] * 24 and "shared" in lines  # measured both, fed local


def test_a_built_dataset_is_sampled_where_it_lies_and_tmpdir_without_room_reads_in_place(
    cluster, monkeypatch
):
    shared, local, _ = cluster
    folder = _built(shared)
    with preflight_feed.Samples(_settings(True), 16, 2, CPU, str(shared)) as samples:
        dataset, _ = samples.get(64)
        check = preflight.Check(*samples.checks[0])
    assert check.values["where"] == "dataset imagenot" and check.status == "pass"
    assert check.values["dataset_gb"] > 0 and folder.is_dir()  # the dataset is left as it was
    assert len(dataset) == 16

    usage = shutil.disk_usage(local)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))
    with preflight_feed.Samples(_settings(True), 16, 2, CPU, str(shared)) as samples:
        dataset, _ = samples.get(64)
        check = preflight.Check(*samples.checks[0])
    assert check.status == "warn" and "too little room, the jobs read in place" in check.detail
    assert check.values["jobs_read"] == "in place"
    assert Path(dataset.dataset.dataset_dir) == folder


def test_a_job_stages_where_there_is_room_and_reads_in_place_where_there_is_not(
    cluster, monkeypatch, caplog
):
    from imagenot.dataset import read_fingerprint

    shared, local, _ = cluster
    folder = _built(shared)
    fingerprint = read_fingerprint(folder)
    usage = shutil.disk_usage(local)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))
    with caplog.at_level(logging.WARNING):
        assert stage_to_local(folder, fingerprint) == folder
    assert "GB free" in caplog.text and "reading" in caplog.text
    assert not (local / "imagenot-datasets").exists()
    monkeypatch.undo()
    monkeypatch.setenv("TMPDIR", str(local))
    staged = stage_to_local(folder, fingerprint)
    assert staged.is_relative_to(local) and read_fingerprint(staged) == fingerprint


def test_the_preflight_feeds_each_model_from_where_its_jobs_read(cluster, tmp_path):
    """The whole preflight on the CPU (one model, one loader worker) with the dataset at the
    slow location: the feed check's worker reads there when the jobs read in place, and the
    node-local copy when they stage."""
    shared, _, reads = cluster
    _built(shared)
    for stage, where in ((False, "shared"), (True, "local")):
        settings = _settings(stage)
        runs = [r for r in settings.runs if (r["model"], r["space"]) == ("resnet_mini", "st")]
        settings = dataclasses.replace(settings, runs=runs)
        reads.unlink(missing_ok=True)
        options = preflight.Options(
            2, 1, 16, workers=1, datasets_root=str(shared), feed_seconds=0.0
        )
        report = preflight.run_checks(settings, options)
        checks = {c["name"]: c for c in report["checks"]}
        feed = next(c for name, c in checks.items() if name.startswith("feed resnet_mini"))
        assert feed["values"]["feed_images"] == 2 * 16 and len(feed["values"]["feed_worker_pids"])
        source = checks["feed source (64 px)"]
        assert source["values"]["jobs_read"] == ("node-local copy" if stage else "in place")
        # the last reads are the feed check's (its worker, then the resident copy's decode)
        assert reads.read_text().split()[-16:] == [where] * 16
