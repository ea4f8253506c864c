"""`imagenot plan`: the jobs Snakemake plans for a config without its data, and what they cost.

The demo and paper configs are planned once each (Snakemake's dry run against placeholder
inputs, ~10-20 s each); the checks compare the plan with the stage plans' own counts and with
itself (totals are sums, more GPUs never lengthen the wall time).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import GPU_RULES

from imagenot import costs
from imagenot.config import load_config
from imagenot.curate import plan as curate_plan
from imagenot.plan_cli import build_plan, format_plan
from imagenot.planning import PlannedJob, parse_jobs, placeholder_overlay, rule_groups
from imagenot.train import plan as train_plan

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "config" / "config.yaml"
PAPER = REPO / "config" / "paper.yaml"


@pytest.fixture(scope="module")
def paper_plan():
    return build_plan(PAPER, gpus=16)


@pytest.fixture(scope="module")
def demo_plan():
    return build_plan(DEMO, gpus=2)


def _rules(plan: dict) -> dict[str, int]:
    return {rule: n for g in plan["groups"] for rule, n in g["rules"].items()}


def test_parse_jobs_reads_rule_threads_and_resources():
    text = """[Thu Nov 26 13:51:08 2026]
rule train_trial:
    input: a, b
    jobid: 3
    threads: 8
    resources: tmpdir=/tmp, gpu=1, runtime=1440, mem_mb=32000, mem=32 GB, mem_mib=30518
[Thu Nov 26 13:51:08 2026]
localrule curate_embed:
    jobid: 4
    resources: tmpdir=/tmp, runtime=<TBD>, mem_mb=<TBD>
rule train_final:
    resources: tmpdir=/tmp, gres=gpu:a100:4, nodes=2, runtime=60, mem_mb=64000
rule all:
    input: x
Job stats:
"""
    jobs = parse_jobs(text)
    assert [j.rule for j in jobs] == ["train_trial", "curate_embed", "train_final"]
    assert jobs[0].threads == 8 and jobs[0].gpus == 1 and jobs[0].resources["mem_mb"] == 32000
    assert jobs[1].threads == 1 and jobs[1].gpus == 0 and jobs[1].resources["runtime"] is None
    assert jobs[2].gpus == 8  # gres counts per node
    assert PlannedJob("x", resources={"gres": "tmpfs:10"}).gpus == 0


def test_every_rule_has_a_group():
    groups = rule_groups()
    text = "".join(p.read_text() for p in (REPO / "rules").glob("*.smk"))
    assert "train_head_trial" in groups and groups["acquire_topup_download"] == "acquire"
    assert text.count("\nrule ") + text.count("\n    rule ") + text.count("\nuse rule ") == len(
        groups
    )


@pytest.mark.parametrize("which", ["demo", "paper"])
def test_job_counts_are_the_stage_plans(which, demo_plan, paper_plan):
    plan, path = (demo_plan, DEMO) if which == "demo" else (paper_plan, PAPER)
    config = load_config(path)
    rules = _rules(plan)
    assert rules["curate_match"] == len(curate_plan.shard_ids(config))
    models = len(config["train"]["models"])
    trained = [e for e in train_plan.experiments(config) if not train_plan.is_published(e)]
    slots = sum(
        sum(train_plan.slot_counts(config, e["dataset"], e["protocol"])) * models for e in trained
    )
    assert rules["train_trial"] + rules["train_head_trial"] == slots
    finals = len(train_plan.final_runs(config))
    assert rules["evaluate_robustness"] == finals
    # one estimate per trained experiment and model; the demo's mini models have no throughput
    expected = len(trained) * models if which == "paper" else 0
    assert len(plan["training_estimate"]["rows"]) == expected


@pytest.mark.parametrize("which", ["demo", "paper"])
def test_totals_are_the_sums_of_the_groups(which, demo_plan, paper_plan):
    plan = demo_plan if which == "demo" else paper_plan
    groups, total = plan["groups"], plan["total"]
    assert total["jobs"] == sum(g["jobs"] for g in groups) == sum(_rules(plan).values())
    for g in groups:
        assert g["jobs"] == sum(g["rules"].values())
        assert 0 <= g["gpu_jobs"] <= g["jobs"]
    assert math.isclose(
        total["gpu_hours_requested"], sum(g["gpu_hours_requested"] for g in groups), abs_tol=0.5
    )
    assert plan["storage_total_bytes"] == sum(s["bytes"] or 0 for s in plan["storage"])
    est = plan["training_estimate"]
    assert math.isclose(est["gpu_hours"], sum(r["gpu_hours"] for r in est["rows"]), abs_tol=0.1)
    assert all(s["source"] for s in plan["storage"])


def test_paper_gpu_jobs_and_requests(paper_plan):
    rules = _rules(paper_plan)
    gpu_jobs = sum(n for rule, n in rules.items() if rule in GPU_RULES)
    assert paper_plan["total"]["gpu_jobs"] == gpu_jobs > 0
    # every GPU job asks for one GPU at most 24 h: the request bounds the estimate
    assert paper_plan["training_estimate"]["gpu_hours"] > 0
    assert paper_plan["total"]["gpu_hours_requested"] <= gpu_jobs * 24
    train = next(g for g in paper_plan["groups"] if g["group"] == "train")
    # a training process's memory and its batch rings (imagenot.train.rings), per GPU
    from imagenot.config import load_config
    from imagenot.train.rings import largest_ring_mb

    paper = load_config(REPO / "config" / "paper.yaml")
    own = paper["resources"]["train_trial"]["mem_mb"]
    assert train["peak_mem_mb_requested"] == own + largest_ring_mb(paper) > own
    # the input-sized curation rules take the scale model's request at laion2B-en
    curate = next(g for g in paper_plan["groups"] if g["group"] == "curate")
    assert "curate_embed: scale projection" in curate["notes"]
    items = " ".join(s["item"] for s in paper_plan["storage"])
    for what in (
        "LAION metadata (128 parts",
        "imagenot downloaded images",
        "TL features",
        "final weights",
    ):
        assert what in items


def test_demo_has_no_gpu_and_says_what_it_did_not_estimate(demo_plan):
    assert demo_plan["total"]["gpu_jobs"] == 0  # the demo config plans resources.gpus: 0
    assumptions = " ".join(demo_plan["training_estimate"]["assumptions"])
    assert "models without a throughput (not estimated): alexnet_mini" in assumptions
    curate = next(g for g in demo_plan["groups"] if g["group"] == "curate")
    assert "curate_match: floor (sized from its input at run time)" in curate["notes"]
    text = format_plan(demo_plan)
    assert "total" in text and "storage, estimate:" in text


def test_more_gpus_never_lengthen_the_wall_time(paper_plan):
    rows = paper_plan["training_estimate"]["rows"]
    hours = [costs.wall_time(rows, n)["hours"] for n in (1, 2, 4, 8, 16, 64, 256, 4096)]
    assert hours == sorted(hours, reverse=True)
    assert hours[-1] == paper_plan["wall_time"]["longest_chain_hours"]  # the chain bounds it
    assert hours[0] == pytest.approx(paper_plan["training_estimate"]["gpu_hours"], abs=0.2)
    with pytest.raises(ValueError, match="--gpus"):
        costs.wall_time(rows, 0)


def test_measured_throughput_replaces_the_table(tmp_path):
    config = load_config(PAPER)
    measured = tmp_path / "feed.json"
    measured.write_text(
        json.dumps(
            {
                "device": "NVIDIA H100",
                "size": 224,
                "models": [
                    {"model": "resnet18", "feed_img_per_s": 7000.0},
                    {"model": "vgg19", "batch_size": 256, "error": "out of device memory"},
                ],
            }
        )
    )
    table, source = costs.read_throughput(measured, config)
    assert table["resnet18"] == 7000.0 and table["vgg19"] == config["train"]["throughput"]["vgg19"]
    assert "NVIDIA H100" in source and "resnet18" in source
    base = {
        r["experiment"] + r["model"]: r["gpu_hours"]
        for r in costs.training_rows(config, config["train"]["throughput"])
    }
    faster = {
        r["experiment"] + r["model"]: r["gpu_hours"] for r in costs.training_rows(config, table)
    }
    assert faster["imagenot/stresnet18"] == pytest.approx(base["imagenot/stresnet18"] / 2, rel=0.01)
    assert faster["imagenot/stvgg19"] == base["imagenot/stvgg19"]
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match=r"bad\.json: neither an `imagenot preflight` report"):
        costs.read_throughput(tmp_path / "bad.json", config)


def test_cli_prints_json_and_refuses_bad_gpus(tmp_path, demo_plan):
    """--config takes a base and its overlays, merged as snakemake's --configfile merges them."""
    cmd = [sys.executable, "-m", "imagenot.cli", "plan", "--config", str(DEMO)]
    done = subprocess.run([*cmd, "--gpus", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and "imagenot plan: error: --gpus must be at least 1" in done.stderr
    overlay = tmp_path / "two-models.yaml"
    overlay.write_text("train:\n  models: [alexnet_mini, vgg_mini]\n")
    done = subprocess.run([*cmd, str(overlay), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["config"] == f"{DEMO}, {overlay}"
    draws = _rules(plan)["train_draw_trials"]
    demo_models = len(load_config(DEMO)["train"]["models"])
    assert draws * demo_models == _rules(demo_plan)["train_draw_trials"] * 2  # 2 of its models


# ---- what to request --------------------------------------------------------------------------


def _preflight_report(passed: bool = True) -> dict:
    """An `imagenot preflight` JSON report as the command writes it (imagenot.train.preflight's
    checks, the CLI's environment) on an 80 GB GPU: two models' feed and memory checks, one of
    which did not fit."""
    from dataclasses import asdict

    from imagenot.train.preflight import Check

    checks = [
        Check("cuda", "pass", "NVIDIA H100 80GB HBM3"),
        Check("feed resnet18 (256 px stored)", "pass", "...", {"feed_img_per_s": 7000.0}),
        Check("feed vgg19 (256 px stored)", "skip", "out of device memory at this batch"),
        Check(
            "memory convnext_large (imagenot_st, cifar10_st)",
            "pass",
            "64 per GPU: 38.2 of 79.1 GiB",
            {"per_gpu": 64, "peak_gib": 38.2, "device_gib": 79.1},
        ),
        Check(
            "memory efficientnet_v2_l (cifar10_tl; TL features)",
            "fail" if not passed else "pass",
            "...",
            {"per_gpu": 128, "peak_gib": 21.0, "device_gib": 79.1, "fits": 96},
        ),
    ]
    return {
        "site": "local",
        "passed": passed,
        "settings": {"image_size": 224},
        "checks": [asdict(c) for c in checks],
        "environment": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.10"},
    }


def test_a_preflight_report_gives_the_estimate_its_throughput_and_gpu_memory(tmp_path):
    config = load_config(PAPER)
    report = tmp_path / "preflight.json"
    report.write_text(json.dumps(_preflight_report(passed=False)))
    measured = costs.read_measurements(report, config)
    table = measured["throughput"]
    assert table["resnet18"] == 7000.0  # measured
    assert table["vgg19"] == config["train"]["throughput"]["vgg19"]  # skipped: the config's
    assert "imagenot preflight on NVIDIA H100 80GB HBM3 at 224 px" in measured["source"]
    assert "FAILED preflight" in measured["source"]
    assert costs.read_throughput(report, config) == (table, measured["source"])
    memory = {m["model"]: m for m in measured["memory"]}
    assert memory["convnext_large"]["peak_gib"] == 38.2
    assert memory["efficientnet_v2_l"]["status"] == "fail"
    (tmp_path / "bad.json").write_text(json.dumps({"checks": [{"nom": 1}]}))
    with pytest.raises(ValueError, match=r"bad\.json: neither an `imagenot preflight` report"):
        costs.read_measurements(tmp_path / "bad.json", config)


def test_the_plan_says_what_to_request(paper_plan, tmp_path):
    """GPU-hours: the estimate with its margin, not the requested sum; the longest single job
    (it decides the partition), the GPU memory (measured by a preflight when given), node-local
    disk; and the wall time against GPUs, flat past the knee, with the reason."""
    from imagenot.plan_cli import MARGIN, _request, format_request, format_wall_time

    request = paper_plan["request"]
    estimate = paper_plan["training_estimate"]["gpu_hours"]
    assert request["gpu_hours"] == pytest.approx(estimate * (1 + MARGIN), abs=5)
    assert request["gpu_hours_requested_sum"] == paper_plan["total"]["gpu_hours_requested"]
    job = request["longest_job"]
    rows = paper_plan["training_estimate"]["rows"]
    assert job["model"] == "convnext_large"  # the slowest model (config train.throughput)
    assert 0 < job["hours"] <= max(r["chain_hours"] for r in rows)
    assert request["gpu_memory"] == {"measured": False, "largest": None, "failed": []}
    text = " ".join(" ".join(format_request(paper_plan)).split())  # lines are wrapped
    assert f"GPU-hours: {request['gpu_hours']:,.0f}" in text
    assert "GPU memory: not measured" in text
    assert load_config(PAPER)["train"]["stage_to_local"]  # the paper stages datasets to nodes
    assert "node-local disk: " in text and "per node for train.stage_to_local" in text
    assert "longest single job: " + job["experiment"] in text
    assert f"{paper_plan['total']['gpu_hours_requested']:,.0f} GPU-h" in text  # not that

    config = load_config(PAPER)
    report = tmp_path / "preflight.json"
    report.write_text(json.dumps(_preflight_report(passed=False)))
    measured = costs.read_measurements(report, config)
    groups, storage = paper_plan["groups"], paper_plan["storage_total_bytes"]
    mine = _request(config, groups, estimate, measured["throughput"], measured, storage)
    assert mine["gpu_memory"]["largest"]["model"] == "convnext_large"
    disk = mine["node_local_disk"]
    assert disk["stage_to_local"] and disk["all_trained_bytes"] >= disk["largest_dataset_bytes"]
    assert set(disk["datasets"]) == {"imagenot", "cifar10"}  # imagenet: published weights only
    text = " ".join(" ".join(format_request({**paper_plan, "request": mine})).split())
    assert "GPU memory: 38.2 GiB for the largest job" in text
    assert "efficientnet_v2_l" in text and "fits: 96" in text
    assert "node-local disk: " in text and "per node for train.stage_to_local" in text

    by = paper_plan["wall_time_by_gpus"]
    knee, chain = by["knee_gpus"], paper_plan["wall_time"]["longest_chain_hours"]
    assert costs.wall_time(rows, knee)["hours"] == chain
    assert costs.wall_time(rows, knee - 1)["hours"] > chain
    assert {p["gpus"] for p in by["points"]} >= {1, knee, 16}
    wall = " ".join(" ".join(format_wall_time(paper_plan)).split())
    assert f"Past {knee} GPUs the wall time stays {chain:,.1f} h" in wall
    assert "critical path" in wall and "train.gpus_per_job" in wall
    assert "what to request" in format_plan(paper_plan)


@pytest.mark.parametrize("config", ["config.yaml", "scale.yaml", "paper.yaml"])
def test_placeholders_stand_in_for_external_inputs_only(config, tmp_path):
    """LAION parts a world rule writes (demo, scale) keep their config path; a LAION copy, the
    adapter datasets' folders and the published weights become empty placeholders."""
    raw = yaml.safe_load((REPO / "config" / config).read_text())
    overlay = placeholder_overlay(tmp_path, raw)
    assert ("laion" in overlay) == (config == "paper.yaml")
    if "laion" in overlay:
        assert len(list(Path(overlay["laion"]["dir"]).iterdir())) == raw["laion"]["n_shards"]
    for name, spec in overlay.get("datasets", {}).items():
        assert "path" in raw["datasets"][name] and Path(spec["path"]).is_dir()


def test_kept_originals_count_in_storage_node_disk_and_the_range_jobs(paper_plan):
    """A dataset published weights are evaluated on keeps its test images' original files: the
    storage estimate, a trained copy's node-local disk and its range jobs' disk request count
    them, sized from the published test split's files (ILSVRC2012_img_val.tar); a dataset
    without published weights, or whose adapter reads pixel arrays, keeps none."""
    import copy

    from imagenot.acquire import sizes

    config = load_config(PAPER)
    kept, source = sizes.originals_bytes(config, "imagenet")
    assert kept == 6_744_924_160 and "ILSVRC2012_img_val.tar" in source
    rows = [s for s in paper_plan["storage"] if "originals" in s["item"]]
    assert [(r["item"], r["bytes"]) for r in rows] == [
        ("imagenet test originals (50,000 files)", kept)
    ]
    stored = sizes.dataset_bytes(config, "imagenet")[0]
    acquire = next(g for g in paper_plan["groups"] if g["group"] == "acquire")
    assert acquire["disk_mb_requested"] >= (stored + kept) / 1e6  # every image by some job

    # without the published experiment: nothing kept, no row, a smaller range job
    plain = copy.deepcopy(config)
    plain["train"]["experiments"] = [
        e for e in plain["train"]["experiments"] if e.get("weights") != "published"
    ]
    assert sizes.originals_bytes(plain, "imagenet")[0] == 0
    assert not any("originals" in s["item"] for s in costs.storage(plain))
    per_job = config["acquire"]["classes_per_job"] / 1000  # a job's share of the classes
    gap = sizes.range_disk_mb(config, "imagenet") - sizes.range_disk_mb(plain, "imagenet")
    assert gap == pytest.approx(kept * per_job / 1e6, abs=1)
    # a capped test split keeps its share; CIFAR-10's adapter reads arrays: no file to keep
    capped = copy.deepcopy(config)
    capped["datasets"]["imagenet"]["test_per_class"] = 10
    assert sizes.originals_bytes(capped, "imagenet")[0] == kept // 5
    arrays = copy.deepcopy(config)
    arrays["train"]["experiments"] = [
        {"dataset": "cifar10", "protocol": "st", "weights": "published"}
    ]
    assert sizes.keeps_originals(arrays, "cifar10")
    assert sizes.originals_bytes(arrays, "cifar10")[0] == 0
    # a trained copy staged to a node is the whole folder: originals included
    trained = copy.deepcopy(config)
    fine_tuned = {"dataset": "imagenet", "protocol": "ft-imagenot", "space": "cifar10_ft"}
    trained["train"]["experiments"].append({**fine_tuned, "weights": "trained"})
    assert costs.node_local_disk(trained)["datasets"]["imagenet"] == stored + kept
