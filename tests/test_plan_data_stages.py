"""imagenot plan's data stages on the plan's CPU cores, and the whole run's wall time through
them (imagenot.plan.data_stages): curation, LAION download and build, materialisation of the datasets
on disk, each scheduled before the GPU stages that need it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from imagenot.core.config import ConfigError, load_config, validate_config
from imagenot.plan import data_stages
from imagenot.plan.planning import PlannedJob
from imagenot.plan.schedule import place

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper() -> dict:
    return load_config(REPO / "config" / "paper.yaml")


def _jobs() -> list[PlannedJob]:
    """The paper's data jobs as its dry run plans them (rules, counts, threads, requests)."""
    out = []
    for rule, n, threads, runtime, gpus in (
        ("curate_match", 128, 1, None, 0),
        ("curate_candidates", 1, 1, None, 0),
        ("curate_captions", 128, 1, None, 0),
        ("curate_queries", 1, 2, 30, 0),
        ("curate_embed", 128, 8, None, 1),
        ("curate_select", 1, 1, None, 0),
        ("acquire_download", 256, 2, 120, 0),
        ("acquire_write", 256, 1, 30, 0),
        ("acquire_split", 1, 1, None, 0),
        ("acquire_build", 1, 1, 30, 0),
        ("acquire_materialise_range", 2, 1, 30, 0),
        ("acquire_materialise", 2, 1, 30, 0),
        ("diagnostics_embed_images", 7, 8, 240, 1),
        ("audit_thumbnails", 7, 2, 240, 0),
        ("audit_search", 24, 2, None, 0),
    ):
        res = {"runtime": runtime, **({"gpu": gpus} if gpus else {})}
        out += [PlannedJob(rule, threads, res)] * n
    return out


def test_schedule_runs_stages_in_order_on_the_cores(paper):
    # two jobs of 1 h on 2 cores, then one of 2 h: 3 h; the other chain's job waits for a core
    spans = place({"a": [(2, 1, 1.0), (1, 1, 2.0)], "b": [(1, 1, 0.5)]}, 2)
    assert spans["a"] == [(0.0, 1.0), (1.0, 3.0)]
    assert spans["b"] == [(1.0, 1.5)]  # the longer chain first
    # a wait of no cores (the caption embedding on the GPUs) holds none
    spans = place({"a": [(1, 0, 4.0)], "b": [(3, 1, 1.0)]}, 1)
    assert spans["a"] == [(0.0, 4.0)] and spans["b"] == [(0.0, 3.0)]
    # jobs of their own hours: the longest first, then the others beside it
    assert place({"a": [(3, 1, [1.0, 3.0, 1.0])]}, 2)["a"] == [(0.0, 3.0)]
    # planted: one core runs the four 1 h jobs one after another
    assert place({"a": [(4, 1, 1.0)]}, 1)["a"] == [(0.0, 4.0)]
    # planted: no cores at all is refused by the config's schema, naming the key
    bad = copy.deepcopy(paper)
    bad["resources"]["plan_cores"] = 0
    with pytest.raises(ConfigError, match=r"resources\.plan_cores"):
        validate_config(bad)


def test_materialisation_rate_is_the_benchmark_s():
    for side, rate in data_stages.MATERIALISE_MEASURED.items():
        assert data_stages.materialise_rate(side) == pytest.approx(rate)
    assert data_stages.materialise_rate(224) > data_stages.materialise_rate(256)


def test_data_stages_run_before_the_training_that_needs_them(paper):
    """The paper on the schema's cores: the curation, then the download of the LAION-built
    dataset; ImageNet and CIFAR-10 materialised beside them; the whole run's critical path goes
    through the data stages its training needs, and says so."""
    rows = {d["stage"]: d for d in data_stages.data_stage_rows(paper, _jobs(), gpus=32)}
    assert set(rows) == {
        "curate",
        "download imagenot",
        "materialise imagenet",
        "materialise cifar10",
        "audit imagenot",
    }
    assert rows["download imagenot"]["start"] == pytest.approx(rows["curate"]["end"], abs=0.01)
    assert rows["materialise imagenet"]["start"] == 0.0
    imagenet = rows["materialise imagenet"]["rules"][0]
    assert imagenet["jobs"] == 20 and imagenet["images"] == 1_331_167  # 1000 classes / 50
    assert "bench_materialise.py" in rows["materialise imagenet"]["source"]
    download = rows["download imagenot"]["rules"][0]
    assert download["urls"] == 2_000_000 and download["images"] == 1_000_000
    assert "Gbit/s" in rows["download imagenot"]["source"]
    assert f"on {paper['resources']['plan_cores']} cores" in rows["curate"]["source"]

    wall = {"hours": 24.0}
    gpu = [{"stage": "evaluate", "gpu_hours": 6.4}, {"stage": "audit", "gpu_hours": 0.5}]
    whole = data_stages.whole_run(paper, list(rows.values()), wall, gpu, 32)
    assert whole["critical_path"] == ["curate", "download imagenot", "train", "evaluate"]
    assert whole["hours"] == pytest.approx(rows["download imagenot"]["end"] + 24.0 + 0.2, abs=0.1)
    assert whole["ready"]["imagenet"] == rows["materialise imagenet"]["end"]

    # planted: on one core the 20 ImageNet ranges and the curation's parts queue for it, and a
    # slow materialisation puts CIFAR-10's (trained) on the critical path
    slow = copy.deepcopy(paper)
    slow["resources"]["plan_cores"] = 1
    one = {d["stage"]: d for d in data_stages.data_stage_rows(slow, _jobs(), gpus=32)}
    assert one["materialise imagenet"]["end"] > 5 * rows["materialise imagenet"]["end"]
    assert one["curate"]["end"] > rows["curate"]["end"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(data_stages, "MATERIALISE_MEASURED", {224: 2.0, 480: 1.0})
        crawl = data_stages.data_stage_rows(paper, _jobs(), gpus=32)
    whole = data_stages.whole_run(paper, crawl, wall, gpu, 32)
    assert whole["critical_path"] == ["materialise cifar10", "train", "evaluate"]


def _overlay(config: dict, **audit) -> dict:
    out = copy.deepcopy(config)
    out["audit"].update(audit)
    return out


def test_the_audit_is_a_data_stage_with_its_verification(paper):
    """The paper's audit (imagenot against ImageNet's three splits, CIFAR-10's test split and its
    own later splits) starts when the last dataset it reads is ready, embeds its sets on the
    GPUs, then searches on the cores. Planted: the verification on adds its measured CPU per
    verified pair (up to 10 candidates by embedding and 10 by thumbnail per image and target
    set) and the thumbnails of each of its seven sets, decoded once at its stored side, and puts
    the audit on the whole run's critical path; without pixel_candidates no thumbnails and half
    the pairs; the audit off removes its line and its path."""
    from imagenot.audit import cost

    off = {d["stage"]: d for d in data_stages.data_stage_rows(paper, _jobs(), gpus=32)}
    audit = off["audit imagenot"]
    assert audit["start"] == pytest.approx(off["download imagenot"]["end"], abs=0.01)
    assert [f["rule"] for f in audit["rules"]] == ["diagnostics_embed_images", "audit_search"]
    search = audit["rules"][1]
    assert search["jobs"] == 3 * 8  # 3 splits x query_parts
    assert search["verify_core_h"] == 0 and search["search_core_h"] > 1
    assert audit["core_hours"] == pytest.approx(search["search_core_h"], abs=0.1)  # embed: GPUs
    assert "no verification" in audit["source"]

    verified = _overlay(paper, verification={**paper["audit"]["verification"], "enabled": True})
    on = {d["stage"]: d for d in data_stages.data_stage_rows(verified, _jobs(), gpus=32)}
    # train: 850,000 images x 6 target sets, val: 50,000 x 5, test: 100,000 x 4; 20 candidates
    queried = 850_000 * 6 + 50_000 * 5 + 100_000 * 4
    thumbnails = on["audit imagenot"]["rules"][1]
    assert thumbnails["rule"] == "audit_thumbnails" and thumbnails["jobs"] == 7
    # imagenot's three splits and CIFAR-10's test at 256 px, ImageNet's train and val at 224,
    # its test at 480: 2,341,167 images, each decoded once
    assert thumbnails["images"] == 2_341_167
    pixels = 1_010_000 * 256**2 + 1_281_167 * 224**2 + 50_000 * 480**2
    decoding = pixels / cost.THUMB_SIDE**2 * cost.THUMB_CORE_S / 3600
    assert thumbnails["core_h"] == pytest.approx(decoding) and decoding > 1
    added = on["audit imagenot"]["core_hours"] - audit["core_hours"]
    verify_h = 20 * queried * cost.VERIFY_CORE_S / 3600
    assert added == pytest.approx(verify_h + decoding, abs=0.1)
    assert on["audit imagenot"]["hours"] > 4 * audit["hours"]
    assert "raise audit.query_parts to at least" in on["audit imagenot"]["source"]
    assert "2,341,167 images decoded once per set" in on["audit imagenot"]["source"]
    # planted: no pixel candidates, no thumbnails and 10 candidates a set
    embedding_only = {**verified["audit"]["verification"], "pixel_candidates": 0}
    fewer = data_stages.data_stage_rows(
        _overlay(verified, verification=embedding_only), _jobs(), gpus=32
    )
    fewer = {d["stage"]: d for d in fewer}["audit imagenot"]
    assert "audit_thumbnails" not in [f["rule"] for f in fewer["rules"]]
    added = fewer["core_hours"] - audit["core_hours"]
    assert added == pytest.approx(10 * queried * cost.VERIFY_CORE_S / 3600, abs=0.1)

    wall = {"hours": 10.0}
    gpu = [{"stage": "evaluate", "gpu_hours": 6.4}]
    whole = data_stages.whole_run(verified, list(on.values()), wall, gpu, 32)
    assert whole["critical_path"] == ["curate", "download imagenot", "audit imagenot"]
    whole = data_stages.whole_run(paper, list(off.values()), wall, gpu, 32)
    assert whole["critical_path"] == ["curate", "download imagenot", "train", "evaluate"]

    gone = {
        d["stage"] for d in data_stages.data_stage_rows(_overlay(paper, enabled=False), _jobs(), 32)
    }
    assert "audit imagenot" not in gone and "download imagenot" in gone
