"""GPUs per training job set per model: ``train.gpus_per_job`` for every model, a model in
``train.gpus_per_job_overrides`` at its own value. The value reaches the model's training jobs
(their GPU request, cores, launcher and settings' world size) in the workflow's own planning,
the plan's schedule, and the overlay the plan recommends; validate-config refuses a name that is
no registered model, naming the key and the closest name."""

from __future__ import annotations

import contextlib
import io

import pytest
import yaml
from conftest import REPO, snakemake_workflow

from imagenot.core.config import ConfigError, load_configs
from imagenot.train import estimate, experiments, launch
from imagenot.train.checks import check_nodes

DEMO = REPO / "config" / "config.yaml"
WIDE = "resnet_mini"  # the demo model given its own GPUs per job
OTHER = "vgg_mini"


def _overlay(tmp_path, train: dict, resources: dict | None = None):
    path = tmp_path / "gpus.yaml"
    resources = {"gpus": 1, "require_preflight": False, **(resources or {})}
    path.write_text(yaml.safe_dump({"train": train, "resources": resources}))
    return path


def test_the_models_value_and_the_default(tmp_path):
    config = load_configs(
        [DEMO, _overlay(tmp_path, {"gpus_per_job": 2, "gpus_per_job_overrides": {WIDE: 4}})]
    )
    assert experiments.gpus(config, WIDE) == 4 and experiments.gpus(config, OTHER) == 2
    assert experiments.widest(config) == 4
    assert "--nproc-per-node=4" in launch.launcher(config, WIDE)
    assert "--nproc-per-node=2" in launch.launcher(config, OTHER)
    assert estimate.job_gpus(config, WIDE) == 4 and estimate.job_gpus(config, OTHER) == 2
    cpu = load_configs(
        [DEMO, _overlay(tmp_path, {"gpus_per_job_overrides": {WIDE: 4}}, {"gpus": 0})]
    )
    assert experiments.gpus(cpu, WIDE) == 0 and launch.launcher(cpu, WIDE) == ""


def test_each_models_value_must_split_over_the_nodes(tmp_path):
    """With two nodes per job, the default (2) splits evenly and so must every model's value:
    3 is refused naming the model's key."""
    site = {"nodes_per_job": 2, "gpus_per_job": 2}
    ok = load_configs([DEMO, _overlay(tmp_path, {**site, "gpus_per_job_overrides": {WIDE: 4}})])
    ok["resources"]["site"] = "cluster"
    check_nodes(ok)
    assert experiments.gpus_per_node(ok, WIDE) == 2 and experiments.nodes(ok, WIDE) == 2
    bad = {**ok, "train": {**ok["train"], "gpus_per_job_overrides": {WIDE: 3}}}
    with pytest.raises(ConfigError, match=rf"train.gpus_per_job_overrides.{WIDE} \(3\) must split"):
        check_nodes(bad)


def test_validate_config_refuses_an_unknown_model(tmp_path):
    from imagenot.cli import main

    good = _overlay(tmp_path, {"gpus_per_job_overrides": {WIDE: 2}})
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["validate-config", str(DEMO), str(good)]) == 0
    bad = _overlay(tmp_path, {"gpus_per_job_overrides": {"resnet_mni": 2}})
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(["validate-config", str(DEMO), str(bad)]) == 2
    line = err.getvalue().strip()
    assert "config key train.gpus_per_job_overrides: 'resnet_mni' is not allowed" in line
    assert "(did you mean 'resnet_mini'?)" in line and len(line.splitlines()) == 1


def test_the_planned_jobs_carry_the_models_gpus(tmp_path):
    """The Snakefile planned in-process (nothing run) with one GPU per job and 4 for
    resnet_mini: its trial and final jobs ask for 4 GPUs and their cores, start under torchrun
    with 4 processes and check a world of 4; vgg_mini's ask for one GPU and no launcher."""
    from snakemake.settings.types import DAGSettings

    from imagenot.train.paths import FINAL_MODEL, SLOT

    overlay = _overlay(tmp_path, {"gpus_per_job_overrides": {WIDE: 4}})
    config = load_configs([DEMO, overlay])
    cores = config["resources"]["cpus_per_gpu"]
    slot = {"dataset": "imagenot", "protocol": "st", "stage": 0, "slot": 0}
    targets = {SLOT.format(model=m, **slot) for m in (WIDE, OTHER)}
    targets |= {
        FINAL_MODEL.format(dataset="imagenot", protocol="st", model=m, seed=0)
        for m in (WIDE, OTHER)
    }
    with snakemake_workflow(tmp_path / "work", [DEMO, overlay]) as api:
        api.dag(dag_settings=DAGSettings(targets=targets))
        workflow = api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        jobs = {
            (job.rule.name, job.wildcards.get("model")): job
            for job in workflow.dag.needrun_jobs()
            if job.rule.name in ("train_trial", "train_final")
        }
        seen = {}
        for key, job in jobs.items():
            seen[key] = (job.resources.get("gpu"), job.threads, job.shellcmd or "")
    for rule in ("train_trial", "train_final"):
        gpu, threads, shell = seen[(rule, WIDE)]
        assert gpu == 4 and threads == 4 * cores, (rule, gpu, threads)
        assert "torchrun --standalone --nnodes=1 --nproc-per-node=4" in shell
        assert '"world":4' in shell
        gpu, threads, shell = seen[(rule, OTHER)]
        assert gpu == 1 and threads == cores, (rule, gpu, threads)
        assert "torchrun" not in shell and '"world":1' in shell


def test_the_plan_schedules_each_model_at_its_gpus_and_prints_the_overlay(tmp_path):
    """The plan's training rows and chains take each model's configured GPUs per job (the
    paper's config: EfficientNet-V2-L and ConvNeXt-L data-parallel); the overlay the plan
    recommends, merged over the config, plans what it recommends."""
    from imagenot.plan.plan_cli import format_deadline, gpus_overlay

    paper = load_configs([REPO / "config" / "paper.yaml"])
    own = paper["train"]["gpus_per_job_overrides"]
    assert own, "config/paper.yaml sets GPUs per job per model"
    rows = estimate.training_rows(paper, paper["train"]["throughput"])
    for r in rows:
        if not r["experiment"].split("/")[1].startswith("tl-"):  # TL: one features pass
            want = own.get(r["model"], paper["train"]["gpus_per_job"])
            assert r["gpus"] == r["chain"].gpus == want, r["model"]
    uniform = {r["model"]: paper["train"]["gpus_per_job"] for r in rows}
    assert any(uniform[m] != g for m, g in own.items())

    per_model = {m: 1 for m in paper["train"]["models"]} | {"convnext_large": 4}
    overlay = gpus_overlay(paper, per_model)
    assert overlay["train"]["gpus_per_job"] == 1
    # every model the config names is written, so the merge cannot keep a stale value
    assert overlay["train"]["gpus_per_job_overrides"]["convnext_large"] == 4
    assert set(overlay["train"]["gpus_per_job_overrides"]) >= set(own)
    path = tmp_path / "recommended.yaml"
    path.write_text(yaml.safe_dump(overlay))
    merged = load_configs([REPO / "config" / "paper.yaml", path])
    assert {m: experiments.gpus(merged, m) for m in per_model} == per_model

    answer = {"gpus": 8, "hours": 10.0, "used": 0.9, "reserved_gpu_hours": 80.0}
    plan = {
        "deadline": {
            "deadline_hours": 72,
            "gpus": 32,
            "uniform": None,
            "per_model": {**answer, "per_model": per_model, "overlay": overlay},
            "on_gpus": None,
        }
    }
    text = " ".join(" ".join(format_deadline(plan)).split())
    assert "the overlay (--configfile) that plans it: {train: {gpus_per_job: 1, " in text
    assert "convnext_large: 4" in text


def test_a_tl_features_job_is_one_process_whatever_the_models_gpus(tmp_path):
    """train_features starts no launcher: its settings' world is 1 for a model of 4 GPUs per
    job, as a TL head fit's; the model's image-path job (a trial's) has 4."""
    from imagenot.train.settings import FeaturesSettings, JobSettings

    config = load_configs([DEMO, _overlay(tmp_path, {"gpus_per_job_overrides": {WIDE: 4}})])
    tl = next(e for e in config["train"]["experiments"] if e["protocol"].startswith("tl-"))
    st = next(e for e in config["train"]["experiments"] if e["protocol"] == "st")
    assert FeaturesSettings.from_config(config, tl["dataset"], tl["protocol"], WIDE).job.world == 1
    assert JobSettings.for_training(config, tl["dataset"], tl["protocol"], WIDE).world == 1
    assert JobSettings.for_training(config, st["dataset"], st["protocol"], WIDE).world == 4
