"""The paper's exact search: grid draws, the schedule horizon, published ImageNet weights."""

from __future__ import annotations

import copy

import pytest
import snakemake_rules
import yaml
from toy_job import toy_job

from imagenot.core.config import ConfigError, validate_config
from imagenot.train import experiments, plan, search
from imagenot.train import settings as train_settings
from imagenot.train.facts import torchvision_weights_filename
from imagenot.train.loop import schedule_ended
from imagenot.train.schedules import learning_rate


@pytest.fixture()
def paper_config(repo_root):
    with open(repo_root / "config" / "paper.yaml") as f:
        return validate_config(yaml.safe_load(f))


def _space(**kw):
    """A space as validation leaves it: every whitelisted hyperparameter present (those not
    searched at the schema's default value)."""
    fixed = {name: {"value": value} for name, value in search.DEFAULTS.items()}
    searched = kw.pop("hyperparameters", {"lr": {"grid": [0.5, 0.1, 0.01, 0.0001]}})
    space = {
        "budget": 4,
        "max_epochs": 1000,
        "schedule_epochs": None,
        "halving": {"enabled": False, "min_epochs": 10, "eta": 2},
        "hyperparameters": {**fixed, **searched},
    }
    return {**space, **kw}


def test_paper_imagenot_space_runs_each_learning_rate_exactly_once(paper_config):
    definition = experiments.definition(paper_config, "imagenot", "st")
    trials = search.draw_trials(definition, paper_config["seed"], "imagenot", "st")
    assert [t["lr"] for t in trials] == [0.5, 0.1, 0.01, 0.0001]
    assert {t["optimizer"] for t in trials} == {"sgd"}
    assert len({t["seed"] for t in trials}) == 4  # each trial its own seed


def test_several_grids_give_their_product_and_random_draws_are_unchanged():
    hps = {
        "lr": {"grid": [0.1, 0.01]},
        "weight_decay": {"grid": [0.0, 1e-4, 1e-3]},
        "momentum": {"uniform": [0.8, 0.99]},
    }
    trials = search.draw_trials(_space(budget=6, hyperparameters=hps), 0, "d", "st")
    points = [(t["lr"], t["weight_decay"]) for t in trials]
    assert points == [(lr, wd) for lr in (0.1, 0.01) for wd in (0.0, 1e-4, 1e-3)]
    # the grid consumes no random numbers: momentum is drawn as in the same space without grids
    plain = {"momentum": hps["momentum"]}
    same = search.draw_trials(_space(budget=6, hyperparameters=plain), 0, "d", "st")
    assert [t["momentum"] for t in trials] == [t["momentum"] for t in same]


def test_grid_budget_must_equal_its_size_named_by_key(paper_config):
    bad = copy.deepcopy(paper_config)
    bad["train"]["spaces"]["imagenot_st"]["budget"] = 3
    with pytest.raises(ConfigError, match=r"train\.spaces\.imagenot_st\.budget: 3 trials, .*4"):
        plan.check(bad)
    bad["train"]["spaces"]["imagenot_st"]["hyperparameters"]["optimizer"] = {"grid": ["sgd", "x"]}
    with pytest.raises(ConfigError, match=r"optimizer: grid \['sgd', 'x'\] is not allowed"):
        plan.check(bad)
    with pytest.raises(ConfigError, match=r"lr\.grid: .*non-unique"):
        bad = copy.deepcopy(paper_config)
        bad["train"]["spaces"]["imagenot_st"]["hyperparameters"]["lr"] = {"grid": [0.1, 0.1]}
        validate_config(bad)


def test_schedule_horizon_is_its_own_key_with_the_expected_length_as_default():
    # explicit
    assert search.schedule_epochs(_space(schedule_epochs=90)) == 90
    # no halving: max_epochs
    assert search.schedule_epochs(_space()) == 1000
    # halving 4 -> 2 (rung at 10) -> 1 (rung at 20): the search is decided at 20 epochs
    halving = {"enabled": True, "min_epochs": 10, "eta": 2}
    assert search.schedule_epochs(_space(halving=halving)) == 20
    # a cosine with floor 0 ends every run at the horizon: no rung at or after it
    assert search.rungs(_space(halving=halving, schedule_epochs=90)) == [10, 20, 40, 80]
    assert search.training_epochs(_space(halving=halving, schedule_epochs=90)) == 90
    restarts = {"scheduler": {"value": "cosine_restarts"}}
    assert search.training_epochs(_space(schedule_epochs=90, hyperparameters=restarts)) == 1000


def test_learning_rate_follows_the_horizon_not_max_epochs():
    hp = {**search.DEFAULTS, "lr": 1.0}
    # halfway through a 10-epoch horizon the cosine is at half the rate, whatever max_epochs
    assert learning_rate(50, 10, 10, hp) == pytest.approx(0.5)
    assert learning_rate(100, 10, 10, hp) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(150, 10, 10, hp) == pytest.approx(0.0, abs=1e-12)  # stays at floor
    job = toy_job("resnet_mini", 3, hp, 0, 32, 8, max_epochs=1000, patience=10, schedule_epochs=10)
    assert not schedule_ended(job, 9) and schedule_ended(job, 10)
    floor = toy_job("resnet_mini", 3, {**hp, "min_lr_factor": 0.1}, 0, 32, 8, 1000, 10, 10)
    assert not schedule_ended(floor, 10)  # a positive floor keeps learning


def test_job_settings_carry_the_horizon(paper_config):
    job = train_settings.JobSettings.from_config(paper_config, "imagenot", "st", "resnet18")
    assert (job.schedule_epochs, job.max_epochs) == (90, 1000)


def test_paper_imagenet_models_are_published_weights(paper_config):
    runs = [r for r in plan.final_runs(paper_config) if r["dataset"] == "imagenet"]
    assert {r["protocol"] for r in runs} == {"st"} and {r["seed"] for r in runs} == {0}
    assert len(runs) == len(paper_config["train"]["models"])
    assert not [t for t in plan.trials_tables(paper_config) if "/imagenet/" in t]
    assert plan.published_pattern(paper_config) == "imagenet"
    name = experiments.published_weights(paper_config["train"], "resnet152")
    assert name.startswith("ResNet152_Weights.IMAGENET1K_")
    weights = plan.published_weights_file(paper_config, "resnet152")
    assert weights == f"/data/torchvision_weights/{torchvision_weights_filename(name)}"
    assert train_settings.PublishedSettings.from_config(
        paper_config, "resnet152"
    ) == train_settings.PublishedSettings(model="resnet152", weights=name)
    bad = copy.deepcopy(paper_config)
    bad["train"]["experiments"][1]["space"] = "imagenot_st"
    with pytest.raises(ConfigError, match=r"train\.experiments\.1: weights: published takes"):
        plan.check(bad)
    bad["train"]["experiments"][1]["weights"] = "trained"  # from scratch: still available
    plan.check(bad)
    assert any("/imagenet/st/" in t for t in plan.trials_tables(bad))


def test_published_job_keeps_the_head_rows_of_the_datasets_wnids(tmp_path):
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from imagenot.core.wordnet import imagenet_wnids
    from imagenot.train.files import PublishedFiles
    from imagenot.train.published import run_published
    from imagenot.train.registry import build_model

    wnids = imagenet_wnids()
    published = build_model("resnet_mini", 1000).state_dict()
    weights = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in published.items()}, str(weights))
    data = tmp_path / "ds"
    data.mkdir()
    (data / "classes.txt").write_text("\n".join([wnids[7], wnids[3]]) + "\n")
    (data / "fingerprint.txt").write_text("fp\n")
    out = tmp_path / "final/seed-0"
    # the facts of a real enum (read offline from torchvision): resnet_mini stands in for it
    settings = train_settings.PublishedSettings(
        model="resnet_mini", weights="ResNet18_Weights.IMAGENET1K_V1"
    )
    files = PublishedFiles(
        weights=weights, classes=data / "classes.txt", fingerprint=data / "fingerprint.txt",
        model=out / "model.safetensors", result=out / "result.json",
    )  # fmt: skip
    result = run_published(settings, files, {"dataset": "d", "protocol": "st"})
    # the run records the weights' own protocol and published accuracy for the evaluation
    assert result["preprocessing"] == {
        "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "crop_size": 224,
        "resize_size": 256, "interpolation": "bilinear",
    }  # fmt: skip
    assert (result["image_size"], result["published_top1"]) == (224, 69.758)
    got = load_file(str(out / "model.safetensors"))
    assert torch.equal(got["fc.weight"], published["fc.weight"][[7, 3]])
    assert torch.equal(got["conv1.weight"], published["conv1.weight"])
    assert result["num_classes"] == 2
    assert json.loads((out / "result.json").read_text())["source"] == "published"
    (data / "classes.txt").write_text("n99999999\n")
    with pytest.raises(ValueError, match=r"classes.txt: class 'n99999999' is not an ILSVRC"):
        run_published(settings, files, {"dataset": "d"})


# A config that plans GPUs, its cores per GPU a count no rule writes by hand.
GPU_OVERLAY = {"resources": {"gpus": 1, "cpus_per_gpu": 7}}


def _threads(workflow, rule, model: str) -> int:
    """The cores a job of ``rule`` asks for with wildcard ``model``, evaluated as Snakemake does
    (a train_trial slot whose promotion input is not written yet trains)."""
    from snakemake.iocontainers import Namedlist, Wildcards

    cores = rule.resources["_cores"]
    if not cores.is_evaluable():
        return cores.value
    wildcards = Wildcards(
        fromdict={"dataset": "d", "protocol": "st", "model": model, "stage": "0", "slot": "0"}
    )
    return workflow.evaluate(
        cores._evaluator,
        wildcards=wildcards,
        input=Namedlist(fromdict={"previous": "not-written-yet"}),
        attempt=1,
    )


def test_only_training_evaluation_and_embedding_rules_request_a_gpu():
    """Every rule that asks for a GPU trains, evaluates or embeds; halving, selection, drawing
    and published weights run without one (tests/test_planning.py checks that the paper's
    plan has exactly one train_trial job per trained slot, so none merely copies a result).
    Read on the rules as Snakemake holds them under a config that plans GPUs
    (tests/snakemake_rules.py)."""
    import re

    from conftest import GPU_RULES

    workflow = snakemake_rules.loaded(overlay=GPU_OVERLAY)
    models = workflow.config["train"]["models"]
    assert models
    gpu_rules = set()
    for name, rule in workflow.rules.items():
        if not {"gpu", "gres"} & set(rule.resources):
            continue
        gpu_rules.add(name)
        # the cores that feed its GPUs: resources.cpus_per_gpu per GPU
        for model in models:
            assert _threads(workflow, rule, model) == 7, (name, model)
        # a GPU job without a GPU stops (imagenot.core.device); training jobs and the
        # preflight carry gpu_job in their settings (tests/test_train_device.py,
        # tests/test_preflight.py)
        if not name.startswith(("train_", "preflight")):
            assert re.search(r"\{params\.gpu_job(?::q)?\}", rule.shellcmd), name
            assert rule.params.gpu_job == "--gpu-job", name
    assert gpu_rules == GPU_RULES


def test_gpu_time_of_the_paper_search_counts_slots_and_stages(paper_config):
    from imagenot.train import budget

    sp = plan.space(paper_config, "imagenot", "st")
    assert budget.stage_epochs(sp) == [10, 10, 20, 40, 10]  # rungs 10, 20, 40, 80; end 90
    assert plan.slot_counts(paper_config, "imagenot", "st") == [4, 2, 1, 1, 1]
    assert budget.trial_epochs(paper_config, "imagenot", "st") == 4 * 10 + 2 * 10 + 20 + 40 + 10
    assert budget.final_epochs(paper_config, "imagenot", "st") == 0  # seed 0 reuses the trial
    assert budget.final_epochs(paper_config, "cifar10", "st") == 2 * 1000
    assert budget.hours(10, 3600, 10.0, 1) == pytest.approx(1.0)
    assert budget.hours(10, 3600, 10.0, gpus=2, efficiency=1.0) == pytest.approx(0.5)
