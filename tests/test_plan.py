"""`imagenot plan`: the jobs Snakemake plans for a config without its data, and what they cost.

The demo and paper configs are planned once each (Snakemake's dry run against placeholder
inputs, ~10-20 s each); the checks compare the plan with the stage plans' own counts and with
itself (totals are sums, the bound of the wall time never grows with the GPUs, low <= expected
<= bound). The early-stopping model, the re-estimate from a run's records and the schedule are
pure functions, tested on hand-made inputs with known answers.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import snakemake_rules
import yaml
from conftest import GPU_RULES

from imagenot.core.config import load_config
from imagenot.curate import plan as curate_plan
from imagenot.plan import costs
from imagenot.plan.measured import read_measurements
from imagenot.plan.plan_cli import build_plan, format_plan
from imagenot.plan.planning import PlannedJob, parse_jobs, placeholder_overlay, rule_groups
from imagenot.train import estimate
from imagenot.train import plan as train_plan

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "config" / "config.yaml"
PAPER = REPO / "config" / "paper.yaml"


@pytest.fixture(scope="module")
def paper_jobs():
    """The paper's jobs, planned once by Snakemake (the other paper plans reuse them)."""
    from imagenot.plan.planning import planned_jobs

    return planned_jobs(PAPER)


@pytest.fixture(scope="module")
def paper_plan(paper_jobs, tmp_path_factory):
    """The paper on 32 GPUs with a 72 h deadline, in an empty working directory."""
    empty = tmp_path_factory.mktemp("empty_workdir")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("imagenot.plan.planning.planned_jobs", lambda paths: paper_jobs)
        return build_plan(PAPER, gpus=32, deadline_hours=72, directory=empty)


@pytest.fixture(scope="module")
def demo_jobs():
    from imagenot.plan.planning import planned_jobs

    return planned_jobs(DEMO)


@pytest.fixture(scope="module")
def demo_plan(demo_jobs, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("imagenot.plan.planning.planned_jobs", lambda paths: demo_jobs)
        return build_plan(DEMO, gpus=2, directory=tmp_path_factory.mktemp("demo_workdir"))


def test_a_deadline_without_a_training_estimate_is_not_answered(demo_jobs, tmp_path, monkeypatch):
    """The demo's models have no throughput: --deadline-hours has no schedule to answer from,
    and the plan says so instead of failing (the paper's answer: test_the_paper_on_32_gpus)."""
    monkeypatch.setattr("imagenot.plan.planning.planned_jobs", lambda paths: demo_jobs)
    plan = build_plan(DEMO, gpus=2, deadline_hours=72, directory=tmp_path)
    assert plan["deadline"] is None and not plan["training_estimate"]["rows"]
    assert "GPU-hours: not estimated (no trained model has a throughput)" in format_plan(plan)


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
    """Each rule of rules/*.smk, as Snakemake holds it (tests/snakemake_rules.py: the demo config
    with the scale world on, so every rule), has the group of the file that defines it."""
    groups = rule_groups()
    assert "train_head_trial" in groups and groups["acquire_topup_download"] == "acquire"
    held = {
        name: Path(rule.snakefile).stem
        for name, rule in snakemake_rules.rules().items()
        if Path(rule.snakefile).parent == REPO / "rules"
    }
    assert "scale_world" in held
    assert groups == held


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
    from imagenot.core.config import load_config
    from imagenot.train.experiments import gpus_per_node, widest
    from imagenot.train.rings import ring_mb

    paper = load_config(REPO / "config" / "paper.yaml")
    # every GPU job asks for at most the widest model's GPUs for at most 24 h: the request
    # bounds the estimate
    assert paper_plan["training_estimate"]["gpu_hours"] > 0
    assert paper_plan["total"]["gpu_hours_requested"] <= gpu_jobs * 24 * widest(paper)
    train = next(g for g in paper_plan["groups"] if g["group"] == "train")
    # a training process's memory and its batch rings (imagenot.train.rings), for each of the
    # processes of its node (the model's GPUs per job)
    own = paper["resources"]["train_trial"]["mem_mb"]
    peak = max(
        (own + ring_mb(paper, e["dataset"], e["protocol"], m)) * gpus_per_node(paper, m)
        for e in paper["train"]["experiments"]
        if e["weights"] == "trained"
        for m in paper["train"]["models"]
    )
    assert train["peak_mem_mb_requested"] == peak > own * widest(paper)
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


def test_more_gpus_never_lengthen_the_bound_and_the_schedule_meets_it(paper_plan):
    config = load_config(PAPER)
    rows = estimate.training_rows(config, config["train"]["throughput"])
    walls = [estimate.wall_time(rows, n) for n in (1, 2, 4, 8, 16, 64, 256, 4096)]
    bounds = [w["bound_hours"] for w in walls]
    assert bounds == sorted(bounds, reverse=True)
    assert bounds[-1] == paper_plan["wall_time"]["longest_chain_hours"]  # the chain bounds it
    assert bounds[0] == pytest.approx(paper_plan["training_estimate"]["gpu_hours"], abs=0.2)
    widest = max(r["gpus"] for r in rows)  # config/paper.yaml's widest model's GPUs per job
    for w in walls:  # no schedule beats its lower bounds; fewer GPUs than a job asks: none
        if w["gpus"] < widest:
            assert w["hours"] is None
        else:
            assert w["hours"] >= w["bound_hours"] - 0.1
    # one GPU per job for every model: one GPU is never idle
    config["train"]["gpus_per_job_overrides"] = {}
    one = estimate.wall_time(estimate.training_rows(config, config["train"]["throughput"]), 1)
    assert one["used"] == pytest.approx(1.0, abs=0.001)
    with pytest.raises(ValueError, match="--gpus"):
        estimate.wall_time(rows, 0)


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
    found = read_measurements(measured, config)
    table, source = found["throughput"], found["source"]
    assert table["resnet18"] == 7000.0 and table["vgg19"] == config["train"]["throughput"]["vgg19"]
    assert "NVIDIA H100" in source and "resnet18" in source
    base = {
        r["experiment"] + r["model"]: r["gpu_hours"]
        for r in estimate.training_rows(config, config["train"]["throughput"])
    }
    faster = {
        r["experiment"] + r["model"]: r["gpu_hours"] for r in estimate.training_rows(config, table)
    }
    slower = config["train"]["throughput"]["resnet18"] / 7000.0
    assert faster["imagenot/stresnet18"] == pytest.approx(
        base["imagenot/stresnet18"] * slower, rel=0.01
    )
    assert faster["imagenot/stvgg19"] == base["imagenot/stvgg19"]
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match=r"bad\.json: neither an `imagenot preflight` report"):
        read_measurements(tmp_path / "bad.json", config)


def test_cli_prints_json_and_refuses_bad_gpus(tmp_path, demo_plan):
    """--config takes a base and its overlays, merged as snakemake's --configfile merges them."""
    cmd = [sys.executable, "-m", "imagenot.cli", "plan", "--config", str(DEMO)]
    done = subprocess.run([*cmd, "--gpus", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and "imagenot plan: error: --gpus must be at least 1" in done.stderr
    done = subprocess.run([*cmd, "--cores", "0"], capture_output=True, text=True)
    assert (
        done.returncode == 2 and "imagenot plan: error: --cores must be at least 1" in done.stderr
    )
    overlay = tmp_path / "two-models.yaml"
    overlay.write_text("train:\n  models: [alexnet_mini, vgg_mini]\n")
    done = subprocess.run(
        [*cmd, str(overlay), "--cores", "3", "--json"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["config"] == f"{DEMO}, {overlay}"
    # --cores stands in for the config's resources.plan_cores in the data stages' schedule
    assert load_config(DEMO)["resources"]["plan_cores"] != 3
    scheduled = [r for r in plan["data_stages"] if not r["source"].startswith("not estimated")]
    assert scheduled and all(r["source"].startswith("on 3 cores, ") for r in scheduled)
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
    measured = read_measurements(report, config)
    table = measured["throughput"]
    assert table["resnet18"] == 7000.0  # measured
    assert table["vgg19"] == config["train"]["throughput"]["vgg19"]  # skipped: the config's
    assert "imagenot preflight on NVIDIA H100 80GB HBM3 at 224 px" in measured["source"]
    assert "FAILED preflight" in measured["source"]
    memory = {m["model"]: m for m in measured["memory"]}
    assert memory["convnext_large"]["peak_gib"] == 38.2
    assert memory["efficientnet_v2_l"]["status"] == "fail"
    # two reports (benchmarks/gpu_check.sh writes preflight.json and preflight_large.json):
    # each replaces the models it measured
    large = _preflight_report()
    large["checks"] = [
        {**c, "values": {"feed_img_per_s": 800.0}} if c["name"].startswith("feed resnet18") else c
        for c in large["checks"]
    ]
    large["checks"][1]["name"] = "feed convnext_large (256 px stored)"
    (tmp_path / "large.json").write_text(json.dumps(large))
    both = read_measurements([report, tmp_path / "large.json"], config)
    assert both["throughput"]["resnet18"] == 7000.0 and both["throughput"]["convnext_large"] == 800
    assert both["throughput"]["vgg19"] == config["train"]["throughput"]["vgg19"]
    assert both["measured"] == ["convnext_large", "resnet18"] and len(both["memory"]) == 4
    assert both["source"].count("imagenot preflight on NVIDIA H100") == 2
    (tmp_path / "bad.json").write_text(json.dumps({"checks": [{"nom": 1}]}))
    with pytest.raises(ValueError, match=r"bad\.json: neither an `imagenot preflight` report"):
        read_measurements(tmp_path / "bad.json", config)
    with pytest.raises(ValueError, match=r"bad\.json: neither"):
        read_measurements([report, tmp_path / "bad.json"], config)


def test_the_plan_says_what_to_request(paper_plan, tmp_path):
    """GPU-hours: the expected estimate of every GPU stage with its margin, its range beside
    it, not the requested sum; the longest single job (it decides the partition), the GPU
    memory (the H200's measured peaks by default, a preflight's when given) apart from the
    host memory, node-local disk; and the schedule against GPUs, with the reason it flattens."""
    from imagenot.plan.plan_cli import MARGIN, _request, format_request, format_wall_time

    request, h = paper_plan["request"], paper_plan["gpu_hours"]
    assert request["gpu_hours"] == pytest.approx(h["total"] * (1 + MARGIN), abs=5)
    assert h["total_low"] < h["total"] < h["total_bound"]
    assert request["gpu_hours_requested_sum"] == paper_plan["total"]["gpu_hours_requested"]
    job = request["longest_job"]
    rows = paper_plan["training_estimate"]["rows"]
    assert job["model"] == "efficientnet_v2_l"  # the slowest model (config train.throughput)
    assert 0 < job["hours"] <= max(r["chain_hours_bound"] for r in rows)
    expected = request["longest_job_expected"]
    assert 0 < expected["hours"] <= job["hours"]
    memory = request["gpu_memory"]
    assert not memory["measured"] and "H200" in memory["source"]
    # ImageNot ST's batch of 256 over EfficientNet-V2-L's 8 GPUs per job (config/paper.yaml):
    # 32 images per GPU, as measured
    effnet = next(m for m in memory["models"] if m["model"] == "efficientnet_v2_l")
    assert effnet["per_gpu"] == 256 // 8 and effnet["peak_gib"] == pytest.approx(8.7)
    largest = memory["largest"]
    assert largest["peak_gib"] == max(m["peak_gib"] for m in memory["models"])
    text = " ".join(" ".join(format_request(paper_plan)).split())  # lines are wrapped
    assert f"GPU-hours: {request['gpu_hours']:,.0f}" in text
    assert f"Between {h['total_low']:,.0f}" in text and f"{h['total_bound']:,.0f} (none" in text
    assert (
        f"GPU memory (device): {largest['peak_gib']:,.1f} GiB for the largest job "
        f"({largest['model']}" in text
    )
    assert "host memory (RAM): " in text
    assert load_config(PAPER)["train"]["stage_to_local"]  # the paper stages datasets to nodes
    assert "node-local disk: " in text and "per node for train.stage_to_local" in text
    assert f"at the bound {job['experiment']} {job['model']}" in text
    assert f"{paper_plan['total']['gpu_hours_requested']:,.0f} GPU-h" in text  # not that

    config = load_config(PAPER)
    report = tmp_path / "preflight.json"
    report.write_text(json.dumps(_preflight_report(passed=False)))
    measured = read_measurements(report, config)
    groups, storage = paper_plan["groups"], paper_plan["storage_total_bytes"]
    mine_rows = estimate.training_rows(config, measured["throughput"])
    mine = _request(
        config, groups, mine_rows, h["total"], measured["throughput"], measured, storage, 0.0
    )
    assert mine["gpu_memory"]["largest"]["model"] == "convnext_large"
    disk = mine["node_local_disk"]
    assert disk["stage_to_local"] and disk["all_trained_bytes"] >= disk["largest_dataset_bytes"]
    assert set(disk["datasets"]) == {"imagenot", "cifar10"}  # imagenet: published weights only
    text = " ".join(" ".join(format_request({**paper_plan, "request": mine})).split())
    assert "GPU memory (device): 38.2 GiB for the largest job" in text
    assert "efficientnet_v2_l" in text and "fits: 96" in text
    assert "node-local disk: " in text and "per node for train.stage_to_local" in text

    by = paper_plan["wall_time_by_gpus"]
    knee, chain = by["knee_gpus"], paper_plan["wall_time"]["longest_chain_hours"]
    rows = estimate.training_rows(config, config["train"]["throughput"])
    assert estimate.wall_time(rows, knee)["bound_hours"] == chain
    assert estimate.wall_time(rows, knee - 1)["bound_hours"] > chain
    assert {p["gpus"] for p in by["points"]} >= {1, knee, 32}
    wall = " ".join(" ".join(format_wall_time(paper_plan)).split())
    assert f"Past {knee} GPUs the wall time stays at least {chain:,.1f} h" in wall
    assert "critical path" in wall and "train.gpus_per_job" in wall
    w = paper_plan["wall_time"]
    assert f"on --gpus 32: training ends after {w['hours']:,.1f} h and uses {w['used']:.0%}" in wall
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
    from imagenot.plan.split_readers import split_sizes

    config = load_config(PAPER)
    kept, source = sizes.originals_bytes(config, "imagenet")
    assert kept == 6_744_924_160 and "ILSVRC2012_img_val.tar" in source
    rows = [s for s in paper_plan["storage"] if "originals" in s["item"]]
    assert [(r["item"], r["bytes"]) for r in rows] == [
        ("imagenet test originals (50,000 files)", kept)
    ]
    sides = split_sizes(config, "imagenet")  # each split at the side its readers need
    stored = sizes.dataset_bytes(config, "imagenet", tuple(sides), sides)[0]
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
    every = sizes.dataset_bytes(trained, "imagenet")[0]  # trained: every split at 480 px
    assert estimate.node_local_disk(trained)["datasets"]["imagenet"] == every + kept


# ---- early stopping: the range of the estimate ------------------------------------------------


def test_stop_epochs_give_a_range_with_its_source():
    """ImageNot ST's cosine ends at its 90-epoch horizon: expected = bound; CIFAR-10's restarts
    do not end: the expected stop is the named source's best epoch + patience 10; the floor is
    patience + 1 (the loop's rule). A run's own median replaces the assumption."""
    config = load_config(PAPER)
    imagenot = estimate.stop_epochs(config, "imagenot", "st")
    assert (imagenot["low"], imagenot["expected"], imagenot["bound"]) == (11, 90, 90)
    assert "horizon" in imagenot["source"]
    st = estimate.stop_epochs(config, "cifar10", "st")
    assert (st["low"], st["expected"], st["bound"]) == (11, 182 + 10, 1000)
    assert "He et al. 2016" in st["source"]
    ft = estimate.stop_epochs(config, "cifar10", "ft-imagenot")
    assert ft["expected"] == 102 + 10 and "Kornblith et al. 2019" in ft["source"]
    mine = estimate.stop_epochs(config, "cifar10", "st", {"epochs": 57, "trials": 4})
    assert mine["expected"] == 57 and "4 trial(s) of this run" in mine["source"]
    assert (
        estimate.stop_epochs(config, "cifar10", "st", {"epochs": 5000, "trials": 1})["expected"]
        == 1000
    )  # never past the bound


def test_stage_epochs_stop_with_the_trials():
    config = load_config(PAPER)
    from imagenot.train import budget, experiments

    space = experiments.space(config, "cifar10", "st")  # rungs 10, 30, 90, 270, 810; 1000
    assert budget.stage_epochs(space, 50) == [10, 20, 20, 0, 0, 0]
    assert budget.stage_epochs(space, 1000) == budget.stage_epochs(space)


def test_training_rows_low_expected_bound(paper_plan):
    """Per row low <= expected <= bound; the bound is imagenot.train.budget's epochs (no trial
    stops early), the expected figure is the plan's headline."""
    from imagenot.train import budget, plan

    config = load_config(PAPER)
    rows = estimate.training_rows(config, config["train"]["throughput"])
    for r in rows:
        assert r["gpu_hours_low"] <= r["gpu_hours"] <= r["gpu_hours_bound"]
        assert r["chain_hours_low"] <= r["chain_hours"] <= r["chain_hours_bound"]
        d, p = r["experiment"].split("/")
        if not plan.is_tl(p):
            assert r["epochs_bound"] == budget.trial_epochs(config, d, p) + budget.final_epochs(
                config, d, p
            )
    est = paper_plan["training_estimate"]
    assert est["gpu_hours_low"] < est["gpu_hours"] < est["gpu_hours_bound"]
    stops = est["stop_epochs"]
    assert stops["cifar10/st"]["expected"] == 192 and stops["imagenot/st"]["expected"] == 90


# ---- a plan that learns from the run ----------------------------------------------------------


def _write_run(root: Path, rate: float = 2000.0) -> Path:
    """A working directory where CIFAR-10 ST ResNet-18 has finished stage 0 (24 slots, 6 of
    which early stopping ended at epoch 8... and 40 of the others: the stop-epoch median) and
    one final seed, with metrics.csv at ``rate`` images/s."""
    run = root / "results/train/cifar10/st/resnet18"
    for slot in range(24):
        stopped = "early_stopping" if slot < 6 else None
        record = {"stage": 0, "slot": slot, "trial": slot, "epochs": 10, "stopped_by": stopped}
        path = run / f"stage-0/slot-{slot}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record))
        metrics = run / f"trial-{slot}/metrics.csv"
        metrics.parent.mkdir(parents=True, exist_ok=True)
        metrics.write_text(f"epoch,images_per_s\n1,{rate}\n2,0\n")  # 2: resumed, unscored
    final = run / "final/seed-1/result.json"
    final.parent.mkdir(parents=True)
    final.write_text(json.dumps({"seed": 1, "epochs": 30, "stopped_by": "early_stopping"}))
    (run / "final/seed-1/metrics.csv").write_text(f"epoch,images_per_s\n1,{rate}\n")
    return run


def test_a_run_s_records_re_estimate_what_is_left(tmp_path):
    from imagenot.plan.measured import median_rate
    from imagenot.train.estimate import run_records

    config = load_config(PAPER)
    run = _write_run(tmp_path)
    records = run_records(config, tmp_path)
    assert set(records) == {("cifar10", "st", "resnet18")}
    rec = records[("cifar10", "st", "resnet18")]
    assert len(rec["slots"]) == 24 and rec["finals"] == [
        {"epochs": 30, "stopped_by": "early_stopping", "seed": 1}
    ]
    assert median_rate(records, "resnet18") == (2000.0, 25)  # the resumed epoch left out
    assert estimate.measured_stops(records) == {("cifar10", "st"): {"epochs": 10, "trials": 7}}

    table = {**config["train"]["throughput"], "resnet18": 2000.0}
    before = {r["experiment"] + r["model"]: r for r in estimate.training_rows(config, table)}
    after = {
        r["experiment"] + r["model"]: r for r in estimate.training_rows(config, table, records)
    }
    mine, was = after["cifar10/stresnet18"], before["cifar10/stresnet18"]
    assert mine["stop_epochs"]["expected"] == 11  # the median 10, at least patience + 1
    assert "measured" in mine["stop_epochs"]["source"]
    assert 0 < mine["done_gpu_hours"] <= mine["gpu_hours"] < was["gpu_hours"]
    stage0 = mine["chain"].stages[0]
    assert stage0.jobs == 0  # all 24 slots of stage 0 done
    assert mine["chain"].stages[-1].jobs == 1  # seed 1 done, seed 2 left
    # another experiment's rows keep the assumption
    assert (
        after["imagenot/stresnet18"]["stop_epochs"] == before["imagenot/stresnet18"]["stop_epochs"]
    )

    # planted: a record that is not JSON, a metrics file without the column
    (run / "stage-0/slot-3.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"slot-3\.json: JSON file is truncated or damaged"):
        run_records(config, tmp_path)
    (run / "stage-0/slot-3.json").write_text(json.dumps({"stage": 0, "trial": 3}))
    with pytest.raises(ValueError, match=r"slot-3\.json: record without epochs, stopped_by"):
        run_records(config, tmp_path)
    (run / "stage-0/slot-3.json").write_text(json.dumps({"stage": 0, "slot": 3, "trial": None}))
    (run / "trial-4/metrics.csv").write_text("epoch,loss\n1,0.5\n")
    with pytest.raises(ValueError, match=r"trial-4/metrics\.csv: no images_per_s column"):
        run_records(config, tmp_path)


def test_the_plan_reads_the_run_in_its_directory(paper_jobs, tmp_path, monkeypatch):
    _write_run(tmp_path, rate=1234.0)
    monkeypatch.setattr("imagenot.plan.planning.planned_jobs", lambda paths: paper_jobs)
    plan = build_plan(PAPER, gpus=32, directory=tmp_path)
    est = plan["training_estimate"]
    assert est["throughput"]["resnet18"] == 1234.0
    assert est["from_run"] == {"records": 25, "models_measured": {"resnet18": 25}}
    assert "measured by this run" in est["throughput_source"]
    assert est["done_gpu_hours"] > 0
    assert est["left_gpu_hours"] == pytest.approx(est["gpu_hours"] - est["done_gpu_hours"], abs=0.1)
    text = " ".join(format_plan(plan).split())
    assert "this run so far: 25 finished trial slot(s) and final run(s) read" in text
    assert f"less the {est['done_gpu_hours']:,.1f} this run has done" in text
    # a data-parallel job's metrics count all its GPUs' images: one GPU's share is the rate
    overlay = tmp_path / "two-gpus.yaml"
    overlay.write_text("train:\n  gpus_per_job: 2\n")
    two = build_plan([PAPER, overlay], gpus=32, directory=tmp_path)["training_estimate"]
    assert two["throughput"]["resnet18"] == pytest.approx(1234.0 / (2 * estimate.DDP_EFFICIENCY))


# ---- every GPU stage, the data stages ---------------------------------------------------------


def test_every_gpu_stage_is_in_the_gpu_hours(paper_plan):
    stages = {s["stage"]: s for s in paper_plan["gpu_stages"]}
    rules = _rules(paper_plan)
    assert stages["evaluate"]["gpu_jobs"] == rules["evaluate_robustness"] == 119
    assert stages["curate (caption embedding)"]["gpu_jobs"] == rules["curate_embed"] == 128
    assert {"diagnostics", "preflight"} <= set(stages)
    assert all(s["gpu_hours"] > 0 and s["source"] for s in stages.values())
    h = paper_plan["gpu_hours"]
    others = sum(s["gpu_hours"] for s in stages.values())
    assert h["total"] == pytest.approx(
        paper_plan["training_estimate"]["gpu_hours"] + others, abs=0.1
    )
    # caption embedding: the scale model's projected minutes per part x parts
    scale = costs.scale_projection()
    per = {r["rule"]: r["projected"] for r in scale["rules"]}["curate_embed"]["runtime_min"]
    assert stages["curate (caption embedding)"]["gpu_hours"] == pytest.approx(128 * per / 60, 0.01)


def test_data_stages_have_a_time(paper_plan):
    """The data stages are scheduled on the plan's cores (resources.plan_cores) before the
    training that needs them: the whole run's wall time runs through them, its parts add up."""
    stages = {d["stage"]: d for d in paper_plan["data_stages"]}
    download = stages["download imagenot"]["rules"][0]
    assert download["urls"] == 2_000_000 and download["images"] == 1_000_000  # oversample 1.0
    assert "img2dataset" in stages["download imagenot"]["source"]
    assert "Gbit/s" in stages["download imagenot"]["source"]
    assert stages["curate"]["hours"] > 0 and "docs/scale.json" in stages["curate"]["source"]
    assert stages["materialise imagenet"]["hours"] > 0
    whole = paper_plan["whole_run"]  # the critical path through the data stages
    assert whole["parts"]["train"] == paper_plan["wall_time"]["hours"]
    assert whole["critical_path"][:2] == ["curate", "download imagenot"]
    assert whole["hours"] == pytest.approx(sum(whole["parts"].values()), abs=0.1)
    embeddings = next(s for s in paper_plan["storage"] if "caption embeddings" in s["item"])
    scale = costs.scale_projection()
    rows = scale["embed_fraction"] * scale["projection_target"]["captions"]
    assert embeddings["bytes"] > rows * 4 and "docs/scale.json" in embeddings["source"]
    text = " ".join(format_plan(paper_plan).split())
    assert "data stages, estimate (scheduled on 256 CPU cores" in text
    assert "whole run, estimate: about" in text and "critical path: curate" in text
    assert "less than every split at its dataset's image_size" in text


# ---- the schedule and the deadline ------------------------------------------------------------


def test_schedule_barriers_and_the_critical_chain_first():
    from imagenot.plan.schedule import Chain, Stage, simulate

    # two slots of 1 h, then one of 2 h after the rung: 3 h on 2 GPUs, 4 of 6 GPU-hours used
    one = Chain("x/st", "m", 1, (Stage(2, 1.0), Stage(1, 2.0)))
    got = simulate([one], 2)
    assert (got["hours"], got["gpu_hours"], got["used"]) == (3.0, 4.0, pytest.approx(0.667, 0.01))
    # the long chain starts first: 6 h on 2 GPUs (7 h if the short jobs went first)
    long = Chain("a/st", "big", 1, (Stage(1, 1.0), Stage(1, 5.0)))
    short = Chain("b/st", "small", 1, (Stage(3, 1.0),))
    assert simulate([short, long], 2)["hours"] == 6.0
    # a job of two GPUs waits for two free GPUs; none fits on fewer
    wide = Chain("c/st", "wide", 2, (Stage(2, 1.0),))
    assert simulate([wide], 3)["hours"] == 2.0
    with pytest.raises(ValueError, match="c/st wide asks for 2 GPUs per job, more than 1"):
        simulate([wide], 1)


def test_with_gpus_scales_the_jobs():
    from imagenot.plan.schedule import Chain, Stage, speed, with_gpus

    chain = Chain("x/st", "m", 1, (Stage(4, 9.0),))
    (two,) = with_gpus([chain], {"m": 2}, 0.9)
    assert two.gpus == 2 and two.stages[0].hours == pytest.approx(9.0 / 1.8)
    assert speed(4, 0.9) == pytest.approx(4 * 0.81) and speed(1, 0.9) == 1.0


def test_the_fewest_gpus_that_meet_a_deadline():
    from imagenot.plan.schedule import Chain, Stage, fewest_gpus, simulate

    chains = [Chain(f"e{i}/st", "m", 1, (Stage(4, 2.0), Stage(1, 3.0))) for i in range(3)]
    got = fewest_gpus(chains, deadline=5.0)
    assert got["hours"] <= 5.0
    assert simulate(chains, got["gpus"] - 1)["hours"] > 5.0
    assert fewest_gpus(chains, deadline=4.0) is None  # the chain alone takes 5 h


def test_the_paper_on_32_gpus_within_three_days(paper_plan):
    """On 32 GPUs the plan says when training ends and how much of the reservation it uses,
    and which GPUs per job end it within 72 h using at least 70 % of the GPU-hours reserved;
    at the least cost, fewer GPUs."""
    w, d = paper_plan["wall_time"], paper_plan["deadline"]
    assert w["gpus"] == 32 and w["hours"] > 0 and 0 < w["used"] <= 1
    on = d["on_gpus"]
    assert on["gpus"] == 32 and on["hours"] <= 72 and on["used"] >= 0.7
    for key in ("uniform", "per_model"):
        r = d[key]
        assert r["hours"] <= 72 and r["reserved_gpu_hours"] == pytest.approx(
            r["gpus"] * r["hours"], abs=1
        )
    assert json.loads(json.dumps(paper_plan))["deadline"] == d  # --json prints it all
    text = " ".join(format_plan(paper_plan).split())
    assert "to end training within 72 h, at the least cost:" in text
    assert "on --gpus 32, the GPUs per job that end soonest: 32 GPUs" in text
    assert "the overlay (--configfile) that plans it: {train: {gpus_per_job: 1" in text
    # config/paper.yaml takes that answer: its own plan on 32 GPUs ends within 72 h and uses
    # at least 70 % of the reservation
    assert w["hours"] <= 72 and w["used"] >= 0.7
    assert (
        on["overlay"]["train"]["gpus_per_job_overrides"]
        == load_config(PAPER)["train"]["gpus_per_job_overrides"]
    )


def test_the_default_device_figures_are_docs_gpu_md_s_measurements():
    """train.throughput's default and the H200 memory record are the H200 run that docs/gpu.md
    records ("Measured on a GPU"): the preflight's table (batch, peak GiB, fed images/s) for
    four models, the plain loop's sentence (images/s, GiB at 256) for the other three."""
    import re

    from imagenot.core.config import schema_default
    from imagenot.plan.measured import H200_MEMORY

    text = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    section = text[text.index("## Measured on a GPU") : text.index("## One GPU check")]
    default = schema_default("train.throughput")
    rows = re.findall(r"^\| (\w+) \| (\d+) \| ([\d.]+) \| ([\d,]+) \|", section, re.M)
    assert {r[0] for r in rows} == {"alexnet", "resnet18", "convnext_large", "efficientnet_v2_l"}
    for model, batch, peak, feed in rows:
        assert H200_MEMORY[model] == (int(batch), float(peak))
        assert default[model] == int(feed.replace(",", ""))
    gave = " ".join(section[section.index("The plain loop also gave") :].split("`")[0].split())
    plain = re.findall(r"(\w+) ([\d,]+)(?: img/s)? \(([\d.]+) GiB", gave)
    assert {p[0] for p in plain} == {"resnet152", "densenet161", "vgg19"}, plain
    for model, rate, peak in plain:
        assert H200_MEMORY[model] == (256, float(peak))
        assert default[model] == int(rate.replace(",", ""))


def test_a_model_with_its_own_input_side_is_estimated_at_it(monkeypatch):
    """The throughput is measured at 224 px: a model whose jobs resize to 448 px (its registry
    entry's own side, experiments.image_size) trains a quarter as many images per second."""
    from imagenot.train import experiments

    config = load_config(PAPER)
    table = config["train"]["throughput"]
    before = {r["experiment"] + r["model"]: r for r in estimate.training_rows(config, table)}
    side = experiments.image_size
    monkeypatch.setattr(
        experiments, "image_size", lambda c, m: 448 if m == "resnet18" else side(c, m)
    )
    after = {r["experiment"] + r["model"]: r for r in estimate.training_rows(config, table)}
    for scenario in ("gpu_hours_low", "gpu_hours", "gpu_hours_bound"):
        assert after["cifar10/stresnet18"][scenario] == pytest.approx(
            4 * before["cifar10/stresnet18"][scenario], rel=0.01
        )
        assert after["cifar10/stvgg19"][scenario] == before["cifar10/stvgg19"][scenario]


def test_the_plan_states_the_audits_cost_at_paper_scale(paper_plan):
    from imagenot.audit.cost import format_audit

    (row,) = paper_plan["audit"]
    assert row["dataset"] == "imagenot" and row["images"] == 1_000_000
    # each split of ImageNot against ImageNet's test and training splits and CIFAR-10's test
    # split (and its own later splits): more than 1 M x 1.29 M pairs
    assert row["pairs"] > 1_000_000 * 1_290_000
    assert row["core_hours"] > 0 and row["index_bytes"] > 1_200_000 * 768 * 4  # ImageNet train
    assert row["verified_pairs"] == row["verify_core_hours"] == 0  # verification off
    text = "\n".join(format_audit(paper_plan["audit"]))
    assert "core-h of search" in text and "benchmarks/bench_audit.py" in text
    assert "verification off" in text
    assert "none (audit.enabled false" in format_audit([])[1]
    # its jobs: the search's request sized from its largest input (the train split's part and
    # its six target sets' embeddings), its embedding and search a data stage of the whole run
    (group,) = [g for g in paper_plan["groups"] if g["group"] == "audit"]
    assert any(n.startswith("audit_search: sized from its largest input") for n in group["notes"])
    (stage,) = [d for d in paper_plan["data_stages"] if d["stage"] == "audit imagenot"]
    assert stage["hours"] > 0 and "imagenot.audit.cost" in stage["source"]
    assert "audit imagenot: " in format_plan(paper_plan)
