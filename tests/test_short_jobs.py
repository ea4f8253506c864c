"""Short GPU jobs are sized like their work, not like a day: a CIFAR-10
stage-0 slot of a fast model trains for about a minute and a first-seed final run that reuses
its trial's weights only tests them, yet both asked SLURM for 24 h, and a 24 h job waits for a
24 h hole in the queue. They ask for startup_min + runtime_estimate_factor x their estimated
work (imagenot.train.resources), at most runtime_min; a retry asks for runtime_min. Checked on
the paper config's plan with the functions the rules call, and with Snakemake's own dry run."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from conftest import dry_run, planned_jobs

from imagenot.core.config import load_config
from imagenot.train import resources

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def paper():
    return load_config(REPO / "config" / "paper.yaml")


def _slot(config, dataset, protocol, model, stage, attempt=1):
    return resources.slot_runtime_min(config, [], 0, attempt, None,
                                      (dataset, protocol, model, stage))  # fmt: skip


def test_a_fast_models_cifar_stage_0_slot_asks_for_minutes_and_a_slow_one_for_the_cap(paper):
    own = paper["resources"]["train_trial"]
    alexnet = _slot(paper, "cifar10", "st", "alexnet", 0)
    # 10 epochs x 50,000 images at 5,873 images/s (train.throughput): about 1.4 minutes of work
    work = resources.stage_work(paper, "cifar10", "st", "alexnet", 0)
    assert 1 < work < 2
    assert alexnet == own["startup_min"] + int(-(-own["runtime_estimate_factor"] * work // 1))
    assert alexnet <= 30
    vgg19 = _slot(paper, "cifar10", "st", "vgg19", 0)  # about half AlexNet's images/s
    assert alexnet < vgg19 < 60
    # ImageNot's longest EfficientNet-V2-L stage (40 epochs) is more than a day of estimated work
    # on one GPU per job; on its configured GPUs per job (train.gpus_per_job_overrides) the
    # data-parallel speed-up's share of that (budget.hours)
    from imagenot.train import budget, experiments

    epochs = budget.stage_epochs(experiments.space(paper, "imagenot", "st"))
    longest = epochs.index(max(epochs))
    one = {**paper, "train": {**paper["train"], "gpus_per_job_overrides": {}}}
    work = resources.stage_work(one, "imagenot", "st", "efficientnet_v2_l", longest)
    assert work > 24 * 60
    assert _slot(one, "imagenot", "st", "efficientnet_v2_l", longest) == own["runtime_min"]
    wide = experiments.gpus(paper, "efficientnet_v2_l")
    assert resources.stage_work(paper, "imagenot", "st", "efficientnet_v2_l", longest) == (
        pytest.approx(work * budget.hours(1, 1, 1.0, wide) / budget.hours(1, 1, 1.0, 1))
    )
    # a retry (the estimate was short: the job stopped at its deadline, checkpointed) asks for
    # runtime_min, grown and capped as every retry
    growth = paper["resources"]["attempt_growth"]
    assert _slot(paper, "cifar10", "st", "alexnet", 0, attempt=2) == min(
        int(own["runtime_min"] * growth), paper["resources"]["max_runtime_min"]
    )
    off = {**paper, "resources": {**paper["resources"],
                                  "train_trial": {**own, "runtime_estimate_factor": 0}}}  # fmt: skip
    assert _slot(off, "cifar10", "st", "alexnet", 0) == own["runtime_min"]
    # the rules' callers before this sizing (no job given): runtime_min
    assert resources.slot_runtime_min(paper, [], 0, 1) == own["runtime_min"]


def test_a_first_seed_reusing_its_trials_weights_asks_for_its_start_up_alone(paper, tmp_path):
    selection = tmp_path / "selection.json"
    selection.write_text('{"trial": 3, "result": {"stopped_by": "early_stopping"}}')
    own = paper["resources"]["train_trial"]
    first, second = paper["train"]["spaces"]["cifar10_st"]["seeds"][:2]

    def final(seed, model="convnext_large", sel=selection, attempt=1):
        wc = SimpleNamespace(dataset="cifar10", protocol="st", model=model, seed=str(seed))
        return resources.final_runtime_min(paper, wc, str(sel), attempt)

    reused = final(first)
    assert resources.reuses_trial(paper, "cifar10", "st", first, str(selection))
    assert reused == own["startup_min"]  # a file copy, even for ConvNeXt-L
    assert final(second) == own["runtime_min"]  # retrains 1,000 epochs at most: the cap
    assert final(first, model="alexnet") == reused
    assert final(first, model="resnet_mini") == reused  # no throughput needed to copy
    # a trial stopped at a rung, or no selection yet: the full run's estimate
    selection.write_text('{"trial": 3, "result": {"stopped_by": null}}')
    assert final(first) == own["runtime_min"]
    assert final(first, sel=tmp_path / "missing.json") == own["runtime_min"]
    # the retry of a reused final (it had to retrain after all) asks for runtime_min
    selection.write_text('{"trial": 3, "result": {"stopped_by": "early_stopping"}}')
    assert final(first, attempt=2) == min(
        int(own["runtime_min"] * paper["resources"]["attempt_growth"]),
        paper["resources"]["max_runtime_min"],
    )


def test_snakemake_asks_for_a_sized_slot_in_the_plan(tmp_path):
    """The workflow's own dry run under a GPU config: a stage-0 slot of a model with a
    throughput asks for its estimate, one without (the demo's others) for runtime_min."""
    overlay = yaml.safe_load((REPO / ".test" / "config-slurm.yaml").read_text())
    overlay.setdefault("train", {})["throughput"] = {"resnet_mini": 50000}
    (tmp_path / "overlay.yaml").write_text(yaml.safe_dump(overlay))
    targets = [f"results/train/imagenot/st/{m}/stage-0/slot-0.json"
               for m in ("resnet_mini", "vgg_mini")]  # fmt: skip
    stdout = dry_run(tmp_path, [tmp_path / "overlay.yaml"], targets)
    jobs = planned_jobs(stdout, "train_trial", r"output: \S+/st/(\w+)/stage-0/slot-0\.json")
    runtime = {m: int(re.search(r"runtime=(\d+)", b).group(1)) for m, b in jobs.items()}
    config = load_config(REPO / "config" / "config.yaml")
    own = config["resources"]["train_trial"]
    assert runtime["vgg_mini"] == own["runtime_min"]
    assert own["startup_min"] <= runtime["resnet_mini"] < own["startup_min"] + 5, runtime
