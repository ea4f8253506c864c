"""The preflight's feed checks read where the training jobs read: a sample of the dataset at
its real location (here a folder standing for a shared filesystem, every read below it logged,
the loader workers' too) against node-local $TMPDIR. The check decides on the read rates it
measures (``judge_source``); the tests give it the rates (``Samples(measure=...)``), so that
what they decide never rests on how fast this machine reads, and check the real measurement
for well-formed numbers only. The check names train.stage_to_local as the rates say, the feed
check then reads where the jobs will, and a job whose $TMPDIR lacks the room reads in place.
On the CPU, as the cluster would run it; the GPU figures are benchmarks/gpu_check.py's."""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
from pathlib import Path

import pytest
import torch

from imagenot.core.config import load_config
from imagenot.core.dataset import ShardReader
from imagenot.train import feed_bench, preflight, preflight_feed
from imagenot.train.feed import stage_to_local
from imagenot.train.preflight_feed import STAGE_GAIN, STAGE_LOSS, judge_source
from imagenot.train.settings import PreflightSettings

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A shared filesystem stand-in (``shared/results/datasets``; every read's folder logged,
    the loader workers' too) and a node-local ``$TMPDIR``."""
    shared = tmp_path / "shared" / "results" / "datasets"
    local = tmp_path / "local"
    local.mkdir()
    monkeypatch.setenv("TMPDIR", str(local))
    reads = tmp_path / "reads.log"
    original = ShardReader.read

    def read(self, shard, offset, length):
        where = "shared" if str(self.root).startswith(str(tmp_path / "shared")) else "local"
        with reads.open("a") as f:
            f.write(f"{where}\n")
        return original(self, shard, offset, length)

    monkeypatch.setattr(ShardReader, "read", read)
    return shared, local, reads


def rates(shared: float, local: float, root: Path):
    """A measurement giving ``shared`` images/s for a dataset below ``root`` (the shared
    stand-in) and ``local`` for one elsewhere (``$TMPDIR``), as ``read_rate`` reports them;
    it reads nothing."""

    def measure(dataset, readers: int) -> dict:
        folder = Path(getattr(dataset, "dataset", dataset).dataset_dir)
        rate = shared if folder.is_relative_to(root) else local
        return {"img_per_s": rate, "mb_per_s": round(rate * 0.002, 2)}

    return measure


def _settings(stage: bool) -> PreflightSettings:
    config = load_config(REPO / "config" / "config.yaml")
    settings = PreflightSettings.from_config(config, None)
    return dataclasses.replace(settings, stage_to_local=stage, in_memory=False)


def _built(shared: Path, n: int = 40) -> Path:
    """A built dataset ``imagenot`` at the shared location, stored at the demo's 64 px."""
    feed_bench.write_jpeg_dataset(shared / "imagenot", n, 64)
    return shared / "imagenot"


@pytest.mark.parametrize(
    "stage, room, gain, status, says, staged",
    [
        (False, True, 1.0, "pass", "the jobs read in place", False),
        (False, True, STAGE_GAIN - 0.01, "pass", "the jobs read in place", False),
        (False, True, STAGE_GAIN, "warn", "set train.stage_to_local: true", False),
        (False, False, 10.0, "warn", "set train.stage_to_local: true", False),
        (True, True, 1.0, "pass", "the jobs read a node-local copy", True),
        (True, True, STAGE_LOSS, "pass", "the jobs read a node-local copy", True),
        (True, True, STAGE_LOSS - 0.01, "warn", "set train.stage_to_local: false", True),
        (True, False, 10.0, "warn", "too little room, the jobs read in place", False),
    ],
)
def test_the_source_check_names_the_setting_the_rates_favour(
    stage, room, gain, status, says, staged
):
    verdict = judge_source(stage, room, gain)
    assert verdict[0] == status and says in verdict[1] and verdict[2] is staged


def test_the_read_rate_measured_is_well_formed(tmp_path):
    """The real measurement (what the preflight uses): finite positive rates whose ratio is
    the sample's bytes per image. No bound on how fast: that is benchmarks/' business."""
    dataset = feed_bench.write_jpeg_dataset(tmp_path / "sample", 12, 64)
    measured = preflight_feed.read_rate(dataset, 2)
    assert set(measured) == {"img_per_s", "mb_per_s"}
    assert all(math.isfinite(v) and v > 0 for v in measured.values())
    size = sum(len(dataset.read_bytes(i)) for i in range(len(dataset))) / len(dataset)
    assert measured["mb_per_s"] * 1e6 / measured["img_per_s"] == pytest.approx(size, rel=0.05)


def test_a_slow_shared_filesystem_asks_for_staging_and_the_staged_copy_is_what_is_fed(cluster):
    shared, local, reads = cluster
    slow = rates(100.0, 1000.0, shared.parent)  # node-local reads 10x faster
    with preflight_feed.Samples(_settings(False), 24, 2, CPU, str(shared), slow) as samples:
        dataset, _ = samples.get(64)
        check = samples.checks[0]
    assert check.name == "feed source (64 px)" and check.status == "warn"
    assert "set train.stage_to_local: true" in check.detail
    assert "not built yet" in check.detail  # no dataset there: a sample written beside them
    values = check.values
    assert values["real"]["img_per_s"] == 100.0 and values["local_over_real"] == 10.0
    assert values["jobs_read"] == "in place"
    assert Path(dataset.dataset_dir).is_relative_to(shared.parent)  # fed where the jobs read
    # the samples are removed, the datasets' folder the check made too
    assert not shared.exists() and not list(local.iterdir())

    reads.unlink()
    with preflight_feed.Samples(_settings(True), 24, 2, CPU, str(shared), slow) as samples:
        dataset, _ = samples.get(64)
        check = samples.checks[0]
        fed = [dataset.read_bytes(i) for i in range(len(dataset))]
    assert check.status == "pass" and check.values["jobs_read"] == "node-local copy"
    assert Path(dataset.dataset_dir).is_relative_to(local) and len(fed) == 24
    lines = reads.read_text().split()
    assert lines[-24:] == ["local"] * 24 and "shared" in lines  # copied from shared, fed local


def test_staging_slower_than_reading_in_place_is_named_and_the_jobs_still_stage(cluster):
    shared, local, _ = cluster
    fast_shared = rates(1000.0, 500.0, shared.parent)
    with preflight_feed.Samples(_settings(True), 16, 2, CPU, str(shared), fast_shared) as samples:
        dataset, _ = samples.get(64)
        check = samples.checks[0]
    assert check.status == "warn" and "set train.stage_to_local: false" in check.detail
    assert check.values["local_over_real"] == 0.5
    assert check.values["jobs_read"] == "node-local copy"  # as the jobs will, until it changes
    assert Path(dataset.dataset_dir).is_relative_to(local)


def test_a_built_dataset_is_sampled_where_it_lies_and_tmpdir_without_room_reads_in_place(
    cluster, monkeypatch
):
    shared, local, _ = cluster
    folder = _built(shared)
    even = rates(500.0, 500.0, shared.parent)
    with preflight_feed.Samples(_settings(True), 16, 2, CPU, str(shared), even) as samples:
        dataset, _ = samples.get(64)
        check = samples.checks[0]
    assert check.values["where"] == "dataset imagenot" and check.status == "pass"
    assert check.values["dataset_gb"] > 0 and folder.is_dir()  # the dataset is left as it was
    assert len(dataset) == 16

    usage = shutil.disk_usage(local)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage._replace(free=1000))
    with preflight_feed.Samples(_settings(True), 16, 2, CPU, str(shared), even) as samples:
        dataset, _ = samples.get(64)
        check = samples.checks[0]
    assert check.status == "warn" and "too little room, the jobs read in place" in check.detail
    assert check.values["jobs_read"] == "in place"
    assert Path(dataset.dataset.dataset_dir) == folder


def test_a_job_stages_where_there_is_room_and_reads_in_place_where_there_is_not(
    cluster, monkeypatch, caplog
):
    from imagenot.core.dataset import read_fingerprint

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


def test_the_preflight_feeds_each_model_from_where_its_jobs_read(cluster, monkeypatch):
    """The whole preflight on the CPU (one model, one loader worker, its own measurement) with
    the dataset at the shared location: the feed check's worker reads there when the jobs read
    in place, and the node-local copy when they stage (the setting decides, not the rates).
    The memory check's training steps, which read no dataset, are tests/test_preflight.py's."""
    shared, _, reads = cluster
    _built(shared)

    def memory(runs, *_):
        model = runs[0]["model"]
        return preflight.Check(
            f"memory {model}", "skip", "not run here", {"model": model, "mode": "train"}
        )

    monkeypatch.setattr(preflight, "check_memory", memory)
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
