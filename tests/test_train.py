"""Training stage: registry, search, preregistration, the loop's checkpoints and resumption."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import snakemake_rules
import torch
import yaml
from toy_job import toy_job

from imagenot.core.config import ConfigError, validate_config
from imagenot.core.registries import RegistryError
from imagenot.train import experiments, identity, plan, prereg, search
from imagenot.train import settings as train_settings
from imagenot.train.facts import torchvision_weights_filename
from imagenot.train.feed import InMemory, preprocess
from imagenot.train.loop import fit
from imagenot.train.prereg import PreregistrationError, record_table, register
from imagenot.train.registry import (
    MODELS,
    build_model,
    head_module,
    load_backbone,
    read_state_dict,
)
from imagenot.train.schedules import learning_rate

torch.set_num_threads(1)

HP = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}


@pytest.fixture()
def demo_config(repo_root):
    with open(repo_root / "config" / "config.yaml") as f:
        return validate_config(yaml.safe_load(f))


def _data(n=48, classes=3, size=64, seed=0) -> InMemory:
    """Learnable toy images: each class a different mean colour, plus noise."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    base = (labels.view(-1, 1, 1, 1).float() * 80 + 40).expand(n, 3, size, size)
    noise = torch.randint(-30, 30, (n, 3, size, size), generator=g)
    return InMemory((base + noise).clamp(0, 255).to(torch.uint8), labels)


def _job(**kw):
    args = dict(
        model="resnet_mini", num_classes=3, hyperparameters=HP, seed=1, image_size=32,
        batch_size=16, max_epochs=3, patience=5,
    )  # fmt: skip
    return toy_job(**{**args, **kw})


# ---------------------------------------------------------------------------------- registry


def test_registry_builds_every_model_with_its_head():
    for name in MODELS:  # the paper's full-size models too: their heads are found by name
        model = build_model(name, 5)
        assert isinstance(head_module(model, name), torch.nn.Linear), name
        assert head_module(model, name).out_features == 5, name
        if name.endswith("_mini"):  # a forward pass of the small ones
            x = torch.zeros(2, 3, max(MODELS[name].min_size, 32), 64)
            assert model.eval()(x).shape == (2, 5), name


def test_unknown_model_and_small_input_are_refused(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["train"]["models"] = ["alexnet", "resnet19"]
    with pytest.raises(
        ConfigError, match=r"'resnet19' is not allowed.*; allowed values: .*resnet18"
    ):
        validate_config(bad)
    bad = copy.deepcopy(demo_config)
    bad["train"]["image_size"] = 32
    with pytest.raises(ConfigError, match="alexnet_mini' needs inputs of at least 35 px"):
        plan.check(bad)
    bad["train"]["models"], bad["train"]["image_size"] = ["alexnet"], 62
    with pytest.raises(ConfigError, match="alexnet' needs inputs of at least 63 px"):
        plan.check(bad)


@pytest.mark.parametrize("name", ["alexnet_mini", "vgg_mini", "densenet_mini", "alexnet"])
def test_min_size_is_the_smallest_input_the_model_takes(name):
    model = build_model(name, 3).eval()
    side = MODELS[name].min_size
    with torch.no_grad():
        assert model(torch.zeros(1, 3, side, side)).shape == (1, 3)
        with pytest.raises(RuntimeError):
            model(torch.zeros(1, 3, side - 1, side - 1))


def test_hyperparameter_outside_whitelist_is_refused(demo_config):
    bad = copy.deepcopy(demo_config)
    bad["train"]["spaces"]["st"]["hyperparameters"]["label_smoothing"] = {"value": 0.1}
    with pytest.raises(ConfigError, match=r"'label_smoothing' under .*allowed keys: .*lr"):
        validate_config(bad)


def test_a_batch_size_override_names_a_registered_model(demo_config):
    space = next(iter(demo_config["train"]["spaces"]))
    for models, refused in (({"resnet_mini": 8}, False), ({"nope": 8}, True)):
        config = copy.deepcopy(demo_config)
        config["train"]["spaces"][space]["batch_size_overrides"] = models
        if not refused:
            validate_config(config)
            continue
        with pytest.raises(ConfigError, match=r"batch_size_overrides: 'nope' is not allowed"):
            validate_config(config)


def test_named_hyperparameter_values_are_checked_at_validation(demo_config):
    from imagenot.core.registries import resolve
    from imagenot.train.optim_registry import OPTIMIZERS, SCHEDULERS

    # every registered name resolves to the loop's code (planning checks names without torch)
    assert all(callable(resolve(ref)) for ref in (*OPTIMIZERS.values(), *SCHEDULERS.values()))
    assert search.NAMED_HYPERPARAMETERS == {"optimizer": OPTIMIZERS, "scheduler": SCHEDULERS}
    for spec in ({"value": "rmsprop"}, {"choice": ["sgd", "rmsprop"]}, {"uniform": [0, 1]}):
        bad = copy.deepcopy(demo_config)
        bad["train"]["spaces"]["st"]["hyperparameters"]["optimizer"] = spec
        with pytest.raises(
            ConfigError, match=r"train\.spaces\.\w+\.hyperparameters\.optimizer: .*adam, sgd"
        ):
            plan.check(bad)
    good = copy.deepcopy(demo_config)
    good["train"]["spaces"]["st"]["hyperparameters"]["scheduler"] = {"choice": ["step", "cosine"]}
    plan.check(good)


def test_schema_model_names_are_the_registry():
    from imagenot.core.config import load_schema

    schema = load_schema("train.schema.yaml")
    assert schema["properties"]["models"]["items"]["enum"] == list(MODELS)


def test_torchvision_weights_load_from_a_local_file(tmp_path):
    """FT/TL from published weights: a .pth written here under torchvision's file name."""
    name = torchvision_weights_filename("ResNet18_Weights.IMAGENET1K_V1")
    assert name == "resnet18-f37072fd.pth"
    published = build_model("resnet18", 1000)
    torch.save(published.state_dict(), tmp_path / name)
    model = build_model("resnet18", 10)
    load_backbone(model, "resnet18", read_state_dict(tmp_path / name), name)
    assert torch.equal(model.conv1.weight, published.conv1.weight)
    assert model.fc.out_features == 10
    with pytest.raises(RegistryError, match="do not fit model 'alexnet'"):
        load_backbone(build_model("alexnet", 10), "alexnet", published.state_dict(), name)


def test_a_timm_model_starts_ft_and_tl_from_its_published_weights_in_one_entry(
    demo_config, tmp_path
):
    """The recipe of docs/contributing.md ("a timm model, pre-trained on ImageNet"): one
    registry entry naming ``timm:<model.tag>`` weights; planning then finds the file under
    ``train.weights_dir`` as the hub stores it, and the FT/TL start loads it (a randomly
    initialised timm model written here is the stand-in for the hub's file)."""
    import functools

    from safetensors.torch import save_file

    from imagenot.train import jobs
    from imagenot.train.registry import ModelSpec, _timm

    spec = ModelSpec(
        "toy_timm",
        "resnet",
        functools.partial(_timm, "resnet10t"),
        "fc",
        1,
        "timm:resnet10t.c3_in1k",
    )
    config = copy.deepcopy(demo_config)
    config["train"]["weights_dir"] = str(tmp_path)
    with MODELS.temporarily("toy_timm", spec):
        for protocol in ("ft-torchvision", "tl-torchvision"):
            (init,) = plan.init_weights(config, protocol, "toy_timm")
            assert init == str(tmp_path / "timm/resnet10t.c3_in1k/model.safetensors")
        published = build_model("toy_timm", 1000)
        Path(init).parent.mkdir(parents=True)
        save_file({k: v.contiguous() for k, v in published.state_dict().items()}, init)
        model = build_model("toy_timm", 10)
        assert plan.init_record(config, protocol, "toy_timm") == []  # published: none
        jobs.backbone_loader(SimpleNamespace(init=init, model="toy_timm"), None)(model)
        with pytest.raises(ValueError, match=r"--init-record r\.json: the job starts from no"):
            jobs.backbone_loader(SimpleNamespace(init=None, model="toy_timm"), "r.json")
        assert torch.equal(model.conv1[0].weight, published.conv1[0].weight)
        assert model.fc.out_features == 10
    config["train"]["weights"] = {"resnet_mini": "hub:somewhere"}
    with pytest.raises(ConfigError, match=r"train\.weights\.resnet_mini: unknown weights source"):
        plan.init_weights(config, "ft-torchvision", "resnet_mini")


# ------------------------------------------------------------------------------------ search


def test_trials_tables_are_identical_across_reruns(demo_config, tmp_path):
    definition = {
        **experiments.definition(demo_config, "fashion_mnist", "ft-imagenot"),
        "budget": 3,
    }
    drawing = train_settings.DrawSettings.from_config(
        demo_config, "fashion_mnist", "ft-imagenot", "vgg_mini"
    )
    drawing = dataclasses.replace(drawing, definition=definition, amendments=[])
    paths = []
    for run in range(2):
        out = tmp_path / f"r{run}" / "fashion_mnist/ft-imagenot/vgg_mini/trials.parquet"
        prereg.draw(drawing, tmp_path / "p.json", out)
        paths.append(out)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    trials = search.draw_trials(definition, 0, "fashion_mnist", "ft-imagenot")
    assert len(trials) == 3 and all(0.0005 <= t["lr"] <= 0.003 for t in trials)
    assert trials != search.draw_trials(definition, 1, "fashion_mnist", "ft-imagenot")


def test_halving_rungs_and_promotion():
    space = {
        "max_epochs": 1000,
        "budget": 24,
        "halving": {"enabled": True, "min_epochs": 10, "eta": 3},
        "hyperparameters": {"scheduler": {"value": "step"}, "min_lr_factor": {"value": 0.0}},
    }
    assert search.rungs(space) == [10, 30, 90, 270, 810]
    assert search.rungs({**space, "halving": {**space["halving"], "enabled": False}}) == []
    assert search.promote({0: 50.0, 1: 70.0, 2: 70.0, 3: 10.0}, 2) == [1, 2]
    assert search.promote({4: 1.0}, 3) == [4]
    assert search.best_trial({0: 5.0, 1: 9.0, 2: 9.0}) == 1


def test_learning_rate_warmup_and_schedules():
    hp = {**HP, "lr": 1.0, "warmup_steps": 10, "warmup_decay": 0.1}
    assert learning_rate(0, 10, 5, hp) == pytest.approx(0.1)
    assert learning_rate(10, 10, 5, hp) == pytest.approx(1.0)
    assert learning_rate(50, 10, 5, hp) == pytest.approx(0.0, abs=1e-9)
    step = {**HP, "lr": 1.0, "scheduler": "step", "step_epochs": 2}
    assert learning_rate(25, 10, 9, step) == pytest.approx(0.1)
    assert learning_rate(45, 10, 9, step) == pytest.approx(0.01)


# ---------------------------------------------------------------------------- preregistration


def _results(run_dir, model, accuracies, num_classes=10, n_val=100, stage=0):
    """Slot results of one stage (slot s = trial s), as the train_trial rule writes them; their
    paths."""
    from trial_records import write_slot

    paths = []
    for t, acc in enumerate(accuracies):
        path = run_dir / model / f"stage-{stage}" / f"slot-{t}.json"
        write_slot(path, val_accuracy=acc, num_classes=num_classes, n_val=n_val)
        paths.append(path)
    return paths


def test_space_change_after_results_is_refused_then_accepted_with_amendment(tmp_path):
    record, exp_dir = tmp_path / "preregistration.json", tmp_path / "cifar10/st"
    space = {"seed": 0, "budget": 2, "hyperparameters": {"lr": {"log_uniform": [0.001, 0.1]}}}
    wider = {**space, "hyperparameters": {"lr": {"log_uniform": [0.0001, 1.0]}}}
    register(record, "cifar10/st", space, "alexnet", [], exp_dir)
    register(record, "cifar10/st", wider, "alexnet", [], exp_dir)  # no results yet: re-register
    register(record, "cifar10/st", space, "alexnet", [], exp_dir)
    _results(exp_dir, "alexnet", [10.0, 11.0])  # at chance (10 classes)
    _results(exp_dir, "resnet18", [60.0, 45.0])
    with pytest.raises(PreregistrationError, match="changed after results exist"):
        register(record, "cifar10/st", wider, "alexnet", [], exp_dir)
    trained = [{"experiment": "cifar10/st", "model": "resnet18", "reason": "x", "scope": "space"}]
    with pytest.raises(PreregistrationError, match="trained above chance"):
        register(record, "cifar10/st", wider, "alexnet", trained, exp_dir)
    amendment = [
        {"experiment": "cifar10/st", "model": "alexnet", "reason": "lr too small", "scope": "space"}
    ]
    entry = register(record, "cifar10/st", wider, "alexnet", amendment, exp_dir)
    assert entry["definition"] == wider
    saved = json.loads(record.read_text())["experiments"]["cifar10/st"]["amendments"]
    assert saved[0]["model"] == "alexnet" and saved[0]["evidence_val_accuracy"] == [10.0, 11.0]
    register(record, "cifar10/st", wider, "resnet18", amendment, exp_dir)  # now registered


def test_an_amendment_covers_one_change_and_the_report_table_lists_it(tmp_path):
    record, exp_dir = tmp_path / "preregistration.json", tmp_path / "cifar10/st"
    space = {"seed": 0, "budget": 2, "hyperparameters": {"lr": {"log_uniform": [0.001, 0.1]}}}
    wider = {**space, "hyperparameters": {"lr": {"log_uniform": [0.0001, 1.0]}}}
    widest = {**space, "hyperparameters": {"lr": {"log_uniform": [0.00001, 1.0]}}}
    register(record, "cifar10/st", space, "alexnet", [], exp_dir)
    assert record_table(record)[0]["amendment_details"] == "none"
    _results(exp_dir, "alexnet", [10.0, 11.0])
    first = [
        {"experiment": "cifar10/st", "model": "alexnet", "reason": "lr too small", "scope": "space"}
    ]
    register(record, "cifar10/st", wider, "alexnet", first, exp_dir)
    with pytest.raises(PreregistrationError, match="already recorded does not cover"):
        register(record, "cifar10/st", widest, "alexnet", first, exp_dir)
    second = [
        *first,
        {
            "experiment": "cifar10/st",
            "model": "alexnet",
            "reason": "still at chance",
            "scope": "space",
        },
    ]
    assert (
        register(record, "cifar10/st", widest, "alexnet", second, exp_dir)["definition"] == widest
    )
    (row,) = record_table(record)
    assert row["experiment"] == "cifar10/st" and row["amendments"] == 2 and row["budget"] == 2
    assert "alexnet: lr too small" in row["amendment_details"]
    assert "alexnet: still at chance" in row["amendment_details"]
    assert "[10.0, 11.0]" in row["amendment_details"]


def test_a_model_scope_amendment_reaches_that_models_draw_only_and_covers_no_space_change(
    demo_config, tmp_path
):
    """docs/reruns.md, "Amending the pre-registered search": recording the amendment of one
    model's batch size must change that model's trials-drawing job alone (any other changed job
    would redraw and retrain its model); an amendment of the experiment's space reaches every
    model's job."""
    config = copy.deepcopy(demo_config)
    config["train"]["amendments"] = [
        {"experiment": "imagenot/st", "model": "vgg_mini", "reason": "batch", "scope": "model"}
    ]
    validate_config(config)
    before = {
        m: train_settings.DrawSettings.from_config(demo_config, "imagenot", "st", m)
        for m in demo_config["train"]["models"]
    }
    after = {
        m: train_settings.DrawSettings.from_config(config, "imagenot", "st", m)
        for m in demo_config["train"]["models"]
    }
    assert [m for m in demo_config["train"]["models"] if before[m] != after[m]] == ["vgg_mini"]
    config["train"]["amendments"][0]["scope"] = "space"
    assert all(
        train_settings.DrawSettings.from_config(config, "imagenot", "st", m) != before[m]
        for m in before
    )
    # a model-scope amendment covers that model's settings, not a change of the shared space
    record, exp_dir = tmp_path / "preregistration.json", tmp_path / "cifar10/st"
    space = {"seed": 0, "budget": 2, "hyperparameters": {"lr": {"log_uniform": [0.001, 0.1]}}}
    wider = {**space, "hyperparameters": {"lr": {"log_uniform": [0.0001, 1.0]}}}
    register(record, "cifar10/st", space, "alexnet", [], exp_dir, {"batch_size": 16})
    _results(exp_dir, "alexnet", [10.0, 11.0])
    own = [{"experiment": "cifar10/st", "model": "alexnet", "reason": "b", "scope": "model"}]
    with pytest.raises(PreregistrationError, match="changed after results exist"):
        register(record, "cifar10/st", wider, "alexnet", own, exp_dir, {"batch_size": 16})
    entry = register(record, "cifar10/st", space, "alexnet", own, exp_dir, {"batch_size": 8})
    assert entry["model_settings"]["alexnet"] == {"batch_size": 8}


def test_halving_rung_results_count_as_results(tmp_path):
    """Trials stopped at a rung have results of early stages only: their space is guarded all
    the same, and the evidence is each trial's latest (highest-stage) result. The search as its
    producers write it: four trials, rung 0 (eta 2) promotes the best two into stage 1."""
    from trial_records import write_slot

    from imagenot.train.trials import halve, slot_trial

    record, exp_dir = tmp_path / "preregistration.json", tmp_path / "cifar10/st"
    space = {"seed": 0, "budget": 4, "hyperparameters": {"lr": {"log_uniform": [0.001, 0.1]}}}
    wider = {**space, "hyperparameters": {"lr": {"log_uniform": [0.0001, 1.0]}}}
    register(record, "cifar10/st", space, "alexnet", [], exp_dir)
    stage0 = _results(exp_dir, "alexnet", [50.0, 60.0, 10.0, 10.0], stage=0)
    rung = exp_dir / "alexnet" / "halving" / "rung-0.json"
    assert halve(stage0, 0, 2, rung)["promoted"] == [1, 0]
    with pytest.raises(PreregistrationError, match="changed after results exist"):
        register(record, "cifar10/st", wider, "alexnet", [], exp_dir)
    amendment = [{"experiment": "cifar10/st", "model": "alexnet", "reason": "x", "scope": "space"}]
    with pytest.raises(PreregistrationError, match=r"trial\(s\) \[0, 1\] trained above chance"):
        register(record, "cifar10/st", wider, "alexnet", amendment, exp_dir)
    for slot in range(2):  # the promoted trials, at chance at the later stage
        path = exp_dir / "alexnet" / "stage-1" / f"slot-{slot}.json"
        write_slot(path, trial=slot_trial(slot, rung), val_accuracy=10.0)
    assert register(record, "cifar10/st", wider, "alexnet", amendment, exp_dir)["hash"]


def test_one_models_settings_change_is_guarded_by_its_own_results(tmp_path):
    record, exp_dir = tmp_path / "preregistration.json", tmp_path / "cifar10/st"
    space = {"seed": 0, "budget": 2, "hyperparameters": {"lr": {"value": 0.1}}}
    register(record, "cifar10/st", space, "alexnet", [], exp_dir, {"batch_size": 32})
    register(record, "cifar10/st", space, "resnet18", [], exp_dir, {"batch_size": 32})
    _results(exp_dir, "resnet18", [60.0, 45.0])
    # alexnet has no results yet: its own batch size may still change
    register(record, "cifar10/st", space, "alexnet", [], exp_dir, {"batch_size": 64})
    with pytest.raises(PreregistrationError, match="settings of model 'resnet18'"):
        register(record, "cifar10/st", space, "resnet18", [], exp_dir, {"batch_size": 16})
    saved = json.loads(record.read_text())["experiments"]["cifar10/st"]["model_settings"]
    assert saved == {"alexnet": {"batch_size": 64}, "resnet18": {"batch_size": 32}}


def test_a_refused_change_stops_at_planning_and_touches_no_file(demo_config, tmp_path, monkeypatch):
    """The workflow's config check (the Snakefile's, and validate-config's) refuses what a
    trials-drawing job would refuse, before any job could delete a trials table; a valid
    amendment passes and is left for the job to record."""
    from imagenot.core.stages import check_workflow_config

    monkeypatch.chdir(tmp_path)  # the working directory holds results/
    check_workflow_config(copy.deepcopy(demo_config))  # no record yet: nothing to check
    record = tmp_path / plan.PREREGISTRATION
    for run in plan._drawn(demo_config):
        s = train_settings.DrawSettings.from_config(demo_config, *run)
        register(
            record, s.experiment, s.definition, s.model, [],
            tmp_path / plan.TRAIN / s.experiment, s.model_settings,
        )  # fmt: skip
    budget = train_settings.DrawSettings.from_config(demo_config, "imagenot", "st", "vgg_mini")
    _results(
        tmp_path / plan.TRAIN / "imagenot/st", "vgg_mini", [0.0] * budget.definition["budget"],
        num_classes=12,
    )  # fmt: skip
    # the slots' results lie beside their run's trials table (drawn from the registered space)
    assert (tmp_path / plan.run_dir("imagenot", "st", "vgg_mini") / "trials.parquet").is_file()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    check_workflow_config(copy.deepcopy(demo_config))  # unchanged config: accepted

    changed = copy.deepcopy(demo_config)
    space = next(e["space"] for e in changed["train"]["experiments"] if e["dataset"] == "imagenot")
    changed["train"]["spaces"][space]["batch_size_overrides"] = {"vgg_mini": 8}
    with pytest.raises(PreregistrationError, match="settings of model 'vgg_mini' in imagenot/st"):
        check_workflow_config(copy.deepcopy(changed))
    # the job-side processes (a cluster job's own Snakemake) leave the check to the job
    check_workflow_config(copy.deepcopy(changed), against_results=False)
    changed["train"]["amendments"] = [
        {"experiment": "imagenot/st", "model": "vgg_mini", "reason": "b", "scope": "model"}
    ]
    check_workflow_config(copy.deepcopy(changed))  # at chance: the amendment is allowed
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


# ------------------------------------------------------------------------------------ loop


def test_preprocess_normalises_and_resizes():
    stats = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    x = preprocess(torch.full((2, 3, 28, 28), 255, dtype=torch.uint8), 64, stats)
    assert x.shape == (2, 3, 64, 64)
    assert x[0, 0, 0, 0].item() == pytest.approx((1 - 0.485) / 0.229, rel=1e-4)


class _Killed(RuntimeError):
    pass


class _KillingData(torch.utils.data.Dataset):
    """Serves the toy data but dies after ``after`` items (a job killed mid-epoch)."""

    def __init__(self, data: InMemory, after: int):
        self.data, self.after, self.reads = data, after, 0

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        self.reads += 1
        if self.reads > self.after:
            raise _Killed
        return self.data.images[i], int(self.data.labels[i])


@pytest.fixture
def deterministic_algorithms():
    """torch's deterministic algorithms on for one test, the previous setting restored after."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(previous)


def test_killed_job_resumes_to_identical_metrics(tmp_path, deterministic_algorithms):
    data, val = _data(), _data(24, seed=1)
    job = _job()
    _, straight = fit(job, _KillingData(data, 10**9), val, tmp_path / "a.safetensors", "fp")
    with pytest.raises(_Killed):  # dies in epoch 2 (48 images per epoch)
        fit(job, _KillingData(data, 48 + 20), val, tmp_path / "b.safetensors", "fp")
    _, resumed = fit(job, _KillingData(data, 10**9), val, tmp_path / "b.safetensors", "fp")
    assert resumed.epoch == straight.epoch == 3
    assert resumed.history == [
        {**row, "images_per_s": r["images_per_s"]}
        for row, r in zip(straight.history, resumed.history, strict=True)
    ]
    assert resumed.best_val == straight.best_val


def _ckpt_epoch(path):
    from imagenot.train.checkpoints import read_state

    return read_state(path).epoch


@pytest.mark.parametrize("change", ["data-changed", "other-job", "unreadable", "damaged"])
def test_stale_or_unreadable_checkpoint_is_set_aside_and_training_starts_afresh(
    tmp_path, change, caplog
):
    """A checkpoint for other data, another job or a truncated one never blocks a
    rerun; it is renamed with the reason (and logged) and the trial trains from epoch 0."""
    ckpt = tmp_path / "c.safetensors"
    job = _job(max_epochs=3)
    fit(job, _data(16), _data(8), ckpt, "fingerprint-1", stop_epoch=1)
    assert _ckpt_epoch(ckpt) == 1
    before = ckpt.read_bytes()
    fingerprint, rerun_job = "fingerprint-1", job
    if change == "data-changed":
        fingerprint = "fingerprint-2"
    elif change == "other-job":
        rerun_job = _job(max_epochs=3, seed=job.seed + 1)
    elif change == "unreadable":
        ckpt.write_bytes(before[: len(before) // 2])  # a job killed while copying, a full disk
    else:  # one bit flipped in the last tensor's bytes (a bad disk, a bad copy)
        flipped = bytearray(before)
        flipped[-3] ^= 0x10
        ckpt.write_bytes(bytes(flipped))
    planted = ckpt.read_bytes()
    with caplog.at_level("WARNING", logger="imagenot.train.checkpoints"):
        _, state = fit(rerun_job, _data(16), _data(8), ckpt, fingerprint, stop_epoch=2)
    aside = tmp_path / f"c.safetensors.set-aside-{change}"
    assert aside.is_file()
    assert aside.read_bytes() == planted
    assert [row["epoch"] for row in state.history] == [1, 2]  # afresh, not resumed at 1
    assert _ckpt_epoch(ckpt) == 2
    assert any(change in r.getMessage() and "afresh" in r.getMessage() for r in caplog.records)


def _rewrite_checkpoint(path, edit=None):
    """The checkpoint at ``path`` written again without its digest (as checkpoints were before
    they carried one), its tensors through ``edit``."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from imagenot.train.checkpoints import DIGEST_KEY

    with safe_open(str(path), framework="pt") as f:
        meta = {k: v for k, v in f.metadata().items() if k != DIGEST_KEY}
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    save_file(edit(tensors) if edit else tensors, str(path), metadata=meta)


def test_a_checkpoint_without_a_digest_resumes_unless_a_value_is_not_finite(tmp_path, caplog):
    """A checkpoint written before checkpoints carried a digest still resumes; one holding NaN
    is set aside (damaged) and the trial trains afresh."""
    job = _job(max_epochs=3)
    ckpt = tmp_path / "c.safetensors"
    fit(job, _data(16), _data(8), ckpt, "fp", stop_epoch=1)
    _rewrite_checkpoint(ckpt)
    with caplog.at_level("INFO", logger="imagenot.train.loop"):
        _, state = fit(job, _data(16), _data(8), ckpt, "fp", stop_epoch=2)
    assert f"resumed {ckpt} at epoch 1" in caplog.text
    assert [row["epoch"] for row in state.history] == [1, 2]
    assert not list(tmp_path.glob("*set-aside*"))
    caplog.clear()

    def poison(tensors):
        name = next(k for k in sorted(tensors) if k.startswith("model.") and "weight" in k)
        tensors[name] = torch.full_like(tensors[name], float("nan"))
        return tensors

    ckpt = tmp_path / "d.safetensors"
    fit(job, _data(16), _data(8), ckpt, "fp", stop_epoch=1)
    _rewrite_checkpoint(ckpt, poison)
    with caplog.at_level("WARNING", logger="imagenot.train.checkpoints"):
        _, state = fit(job, _data(16), _data(8), ckpt, "fp", stop_epoch=2)
    assert (tmp_path / "d.safetensors.set-aside-damaged").is_file()
    assert [row["epoch"] for row in state.history] == [1, 2]  # afresh: both epochs trained
    assert "non-finite value(s)" in caplog.text and "training starts afresh" in caplog.text


def test_checkpoint_of_the_same_job_and_data_is_resumed_not_set_aside(tmp_path):
    ckpt = tmp_path / "c.safetensors"
    job = _job(max_epochs=3)
    fit(job, _data(16), _data(8), ckpt, "fp", stop_epoch=1)
    _, state = fit(job, _data(16), _data(8), ckpt, "fp", stop_epoch=2)
    assert [row["epoch"] for row in state.history] == [1, 2]
    assert not list(tmp_path.glob("*set-aside*"))
    assert _ckpt_epoch(ckpt) == 2


def test_training_learns_and_stops_early(tmp_path):
    job = _job(hyperparameters={**HP, "optimizer": "adam", "lr": 0.003}, max_epochs=6, patience=1)
    _, state = fit(job, _data(), _data(24, seed=1), tmp_path / "d.safetensors", "fp")
    assert state.best_val > 100 / 3 + 10  # above chance
    assert state.stopped_by in {"early_stopping", "max_epochs"}
    assert state.history[-1]["epoch"] == state.epoch


def test_early_stopping_ends_a_run_that_stopped_improving(tmp_path):
    # lr 0: the weights never change, so validation accuracy cannot beat epoch 1's
    job = _job(hyperparameters={**HP, "lr": 0.0}, max_epochs=6, patience=2)
    _, state = fit(job, _data(), _data(24, seed=1), tmp_path / "s.safetensors", "fp")
    assert state.stopped_by == "early_stopping"
    assert (
        state.epoch == 3 < job.settings.max_epochs
    )  # best at epoch 1, then `patience` epochs without
    assert [row["epoch"] for row in state.history] == [1, 2, 3]


def test_linear_probe_trains_only_the_head(tmp_path):
    source = build_model("resnet_mini", 3).state_dict()
    job = _job(trainable="head", max_epochs=1)

    def init(model):
        load_backbone(model, "resnet_mini", source, "source")

    model, _ = fit(job, _data(16), _data(8), tmp_path / "e.safetensors", "fp", init=init)
    after = model.state_dict()
    assert torch.equal(after["conv1.weight"], source["conv1.weight"])
    assert torch.equal(after["bn1.running_mean"], source["bn1.running_mean"])
    assert not torch.equal(after["fc.weight"], build_model("resnet_mini", 3).fc.weight)


# ------------------------------------------------------------------------------------ plan


def test_one_protocol_constraint_from_the_configured_experiments(demo_config):
    import re

    pattern = re.compile(plan.protocol_regex(demo_config))
    for protocol in ("st", "ft-imagenot", "tl-imagenot"):
        assert pattern.fullmatch(protocol), protocol
    for protocol in ("ft-imagenet", "tl-nope", "st-x", "ft"):
        assert not pattern.fullmatch(protocol), protocol
    none = copy.deepcopy(demo_config)
    none["train"]["experiments"] = []
    assert not re.fullmatch(plan.protocol_regex(none), "st")
    # the rules write no regex of their own: the Snakefile's global constraint is the one
    # (train_published narrows it to st, the only protocol of published weights; the TL
    # feature and head-fitting rules to the configured TL protocols), read on the workflow as
    # Snakemake holds it under the demo config (tests/snakemake_rules.py)
    workflow = snakemake_rules.loaded(snakemake_rules.DEMO)
    assert workflow.wildcard_constraints["protocol"] == plan.protocol_regex(workflow.config)
    narrowed = {
        name: rule.wildcard_constraints["protocol"]
        for name, rule in workflow.rules.items()
        if "protocol" in rule.wildcard_constraints
    }
    assert narrowed["train_published"] == "st"
    assert set(narrowed.values()) == {"st", plan.tl_protocol_regex(workflow.config)}
    tl = re.compile(plan.tl_protocol_regex(demo_config))
    assert [p for p in ("st", "ft-imagenot", "tl-imagenot") if tl.fullmatch(p)] == ["tl-imagenot"]
    assert not re.fullmatch(plan.tl_protocol_regex(none), "tl-imagenot")


def test_plan_lists_final_runs_and_transfer_inputs(demo_config):
    runs = plan.final_runs(demo_config)
    train = demo_config["train"]  # one seed per experiment on the demo
    assert len(runs) == len(train["experiments"]) * len(train["models"])
    assert plan.targets(demo_config)[0].endswith("final/seed-0/result.json")
    weights = plan.init_weights(demo_config, "ft-imagenot", "vgg_mini")
    run = "results/train/imagenot/st/vgg_mini/final/seed-0"
    assert weights == [f"{run}/model.safetensors"]
    # the weights' record, read with them: a role of the job, not a path found from theirs
    assert plan.init_record(demo_config, "ft-imagenot", "vgg_mini") == [f"{run}/result.json"]
    assert plan.init_record(demo_config, "st", "vgg_mini") == []
    job = train_settings.JobSettings.from_config(
        demo_config, "fashion_mnist", "tl-imagenot", "vgg_mini"
    )
    assert (job.trainable, job.init) == ("head", weights[0])
    from imagenot.core.settings import parse, to_json

    final = train_settings.FinalSettings.from_config(
        demo_config, "fashion_mnist", "tl-imagenot", "vgg_mini", 0
    )
    # what the rule passes is what the command parses: the class's keys, no more
    assert parse(train_settings.FinalSettings, to_json(final)) == final
    # TL trials and final runs fit the head over stored features on the CPU, in one process;
    # the features job is the image path's job
    features = "results/train/fashion_mnist/tl-imagenot/vgg_mini/features"
    trial = train_settings.TrialSettings.from_config(
        demo_config, "fashion_mnist", "tl-imagenot", "vgg_mini", 0
    )
    for head in (trial.job, final.job):
        where = (head.features, head.device, head.gpu_job, head.world)
        assert where == (features, "cpu", False, 1)
        assert dataclasses.replace(
            head, features=None, device=job.device, gpu_job=job.gpu_job, world=job.world,
            num_workers=job.num_workers, compile=job.compile,
        ) == job  # fmt: skip
    assert train_settings.FeaturesSettings.from_config(
        demo_config, "fashion_mnist", "tl-imagenot", "vgg_mini"
    ) == train_settings.FeaturesSettings(job=job)
    assert plan.feature_files("fashion_mnist", "tl-imagenot", "vgg_mini") == [
        f"{features}/{split}.safetensors" for split in ("train", "val")
    ]
    ft = train_settings.TrialSettings.from_config(
        demo_config, "fashion_mnist", "ft-imagenot", "vgg_mini", 0
    )
    assert ft.job.features is None
    # only TL protocols have a features rule (its wildcard constraint)
    assert "ft-imagenot" not in plan.tl_protocol_regex(demo_config).split("|")


def test_job_identity_is_every_field_but_the_transient_ones(monkeypatch):
    """Job.identity() is derived (a checkpoint or trial of a different job is never reused):
    every field of the job and of its settings counts unless named in JOB_TRANSIENT_FIELDS,
    which names existing fields only, and a field added to Job or to JobSettings joins the
    identity with no other edit."""
    own = {f.name for f in dataclasses.fields(identity.Job)} - {"settings"}
    held = {f.name for f in dataclasses.fields(train_settings.JobSettings)}
    names = own | held
    assert names >= identity.JOB_TRANSIENT_FIELDS
    job = toy_job("resnet_mini", 3, {"lr": 0.1}, 0, 32, 8, 2, 1)
    assert set(json.loads(job.identity())) == names - identity.JOB_TRANSIENT_FIELDS
    changes = {
        bool: lambda v: not v,
        str: lambda v: v + "x",
        int: lambda v: v + 1,
        float: lambda v: v + 1.0,
        dict: lambda v: {**v, "lr": 0.2},
        type(None): lambda v: "x",
    }
    for name in own:
        other = dataclasses.replace(
            job, **{name: changes[type(getattr(job, name))](getattr(job, name))}
        )
        assert (other.identity() == job.identity()) == (name in identity.JOB_TRANSIENT_FIELDS), name
    for name in held - {"init", "device"}:  # these two: the job's own stand in the identity
        value = getattr(job.settings, name)
        settings = dataclasses.replace(job.settings, **{name: changes[type(value)](value)})
        other = dataclasses.replace(job, settings=settings)
        assert (other.identity() == job.identity()) == (name in identity.JOB_TRANSIENT_FIELDS), name

    @dataclasses.dataclass(frozen=True)
    class Extended(identity.Job):
        extra_option: int = 0

    fields = {f.name: getattr(job, f.name) for f in dataclasses.fields(job)}
    one, two = Extended(**fields, extra_option=1), Extended(**fields, extra_option=2)
    assert one.identity() != two.identity()
    monkeypatch.setattr(
        identity,
        "JOB_TRANSIENT_FIELDS",
        identity.JOB_TRANSIENT_FIELDS | {"extra_option"},
    )
    assert one.identity() == two.identity()


# A job's identity as every checkpoint, trial result and final run's result.json on disk holds
# it: a change to this string makes every user's training jobs start afresh.
PINNED_IDENTITY = (
    '{"batch_size": 8, "hyperparameters": {"lr": 0.1, "optimizer": "sgd"}, "image_size": 32, '
    '"init": "w.safetensors '
    'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", '
    '"max_epochs": 2, "model": "resnet_mini", "normalisation": {"mean": [0.5, 0.5, 0.5], '
    '"std": [0.25, 0.25, 0.25]}, "num_classes": 3, "patience": 1, "schedule_epochs": 4, '
    '"seed": 7, "trainable": "head"}'
)


def test_a_jobs_identity_is_the_one_its_checkpoints_and_results_hold(tmp_path, monkeypatch):
    """The identity JSON, key for key and byte for byte, of a job made as a rule makes it
    (``jobs.make_job`` of the rule's settings: the starting weights' sha256, the trial's
    hyperparameters and seed, the dataset's classes), whatever the transient settings say."""
    from imagenot.train import jobs

    monkeypatch.chdir(tmp_path)
    Path("w.safetensors").write_bytes(b"abc")
    toy = toy_job("resnet_mini", 3, {}, 0, 32, 8, 2, 1, schedule_epochs=4, trainable="head",
                  normalisation={"mean": [0.5] * 3, "std": [0.25] * 3})  # fmt: skip
    settings = dataclasses.replace(toy.settings, init="w.safetensors")
    job = jobs.make_job(settings, {"optimizer": "sgd", "lr": 0.1}, 7, 3)
    assert job.identity() == PINNED_IDENTITY
    elsewhere = dataclasses.replace(
        settings, device="auto", eval_batch_size=3, num_workers=5, world=2, features="f",
        in_memory=False, max_batch_per_gpu=2, checkpoint_minutes=9.0,
    )  # fmt: skip
    assert jobs.make_job(elsewhere, {"lr": 0.1, "optimizer": "sgd"}, 7, 3).identity() == (
        PINNED_IDENTITY
    )
