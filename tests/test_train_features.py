"""Transfer learning over stored features (imagenot.train.features): the head fitted over the
backbone's features computed once gives what the per-epoch image path gives."""

from __future__ import annotations

import dataclasses
import io
import json

import numpy as np
import pytest
import torch
from toy_job import toy_job, with_fields

from imagenot.core.settings import to_json
from imagenot.train import plan
from imagenot.train import settings as train_settings
from imagenot.train.registry import MODELS

torch.set_num_threads(1)

# every family's CPU-sized member (the demo trains five of them)
MINI_MODELS = [name for name in MODELS if name.endswith("_mini")]
SIZE = 40  # above every mini model's minimum input side (alexnet_mini: 35)


def _job(model: str, num_classes: int, **fields):

    return toy_job(model, num_classes, {}, 0, SIZE, 8, 2, 1, trainable="head", **fields)


@pytest.mark.parametrize("name", MINI_MODELS)
def test_the_head_over_stored_features_gives_the_models_logits(name):
    """The features are the head's input: head(features) is the eval-mode model's output for
    every family (dropout before the head in AlexNet/VGG, BatchNorm, timm heads)."""
    from imagenot.train.features import extract
    from imagenot.train.feed import InMemory, preprocess
    from imagenot.train.registry import build_model, head_module

    torch.manual_seed(0)
    model = build_model(name, 5)
    images = torch.randint(0, 256, (5, 3, SIZE + 8, SIZE + 8), dtype=torch.uint8)
    data = InMemory(images, torch.arange(5))
    job = _job(name, 5, eval_batch_size=2)  # three batches, the last short
    stored = extract(model, head_module(model, name), data, job, torch.device("cpu"))
    assert stored.images.dtype == torch.float32 and stored.labels.tolist() == list(range(5))
    with torch.no_grad():
        model.eval()
        expected = model(preprocess(images, SIZE, job.settings.normalisation))
        got = head_module(model, name)(stored.images)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_a_features_file_of_other_weights_is_an_error_naming_it(tmp_path):
    from imagenot.train import features

    job = _job("resnet_mini", 3, init="w.safetensors sha256:aa")
    meta = features.describe(job, "fp", "train")
    path = tmp_path / "train.safetensors"
    features.write(
        features.Features(torch.ones(3, 4, dtype=torch.bfloat16), torch.arange(3)), meta, path
    )
    read = features.read(path, meta)
    assert read.images.dtype == torch.float32 and read.labels.tolist() == [0, 1, 2]
    other = {**meta, "init": "w.safetensors sha256:bb"}
    with pytest.raises(features.FeaturesError, match=r"train\.safetensors: metadata init"):
        features.read(path, other)
    # features of a backbone fed with other statistics are stale too
    half = features.describe(
        with_fields(job, normalisation={"mean": [0.5] * 3, "std": [0.5] * 3}), "fp", "train"
    )
    with pytest.raises(features.FeaturesError, match=r"metadata normalisation"):
        features.read(path, half)


def test_a_head_is_fitted_on_the_datasets_splits_but_test():
    from imagenot.core.dataset import SPLITS

    assert set(plan.FEATURE_SPLITS) < set(SPLITS)  # never the test split


# ------------------------------------------------------------------ feature path = image path


def _config(model: str) -> dict:
    return {
        "seed": 0,
        "datasets": {
            "src": {"kind": "imagefolder", "path": "x"},
            "toy": {"kind": "imagefolder", "path": "y"},
        },
        "resources": {"gpus": 0},
        "train": {
            "models": [model],
            "image_size": SIZE,
            "eval_batch_size": 16,
            "experiments": [
                {"dataset": "src", "protocol": "st", "space": "s"},
                {"dataset": "toy", "protocol": "tl-src", "space": "s"},
            ],
            "spaces": {
                "s": {
                    "budget": 3,
                    "max_epochs": 3,
                    "patience": 2,
                    "batch_size": 8,
                    "seeds": [0, 1],
                    "halving": {"enabled": True, "min_epochs": 1, "eta": 2},
                    "hyperparameters": {
                        "optimizer": {"value": "adam"},
                        "lr": {"log_uniform": [0.003, 0.03]},
                        "scheduler": {"value": "cosine"},
                    },
                }
            },
        },
    }


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    """Three noisy colour classes, 30 images each (18 train, 6 val, 6 test): not separable at
    a glance, so the accuracies and the selection depend on the fitted heads."""
    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset

    rng = np.random.default_rng(0)
    out = tmp_path_factory.mktemp("ds") / "toy"
    colours = np.array([(170, 90, 90), (90, 170, 90), (90, 90, 170)])
    records = []
    for i in range(90):
        c, split = i % 3, ["train"] * 3 + ["val", "test"]
        pixels = colours[c] + rng.normal(0, 60, (SIZE + 8, SIZE + 8, 3))
        buf = io.BytesIO()
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", f"c{c}", split[(i // 3) % 5], buf.getvalue()))
    write_dataset(out, records, ["c0", "c1", "c2"], shard_size=5000)
    return out


def _cli(*args):
    from imagenot.cli import main

    assert main(list(args)) == 0


def _experiment(config, model, dataset_dir, run, image_path: bool) -> dict:
    """Every slot, halving, selection and two final runs of the toy TL experiment under
    ``run``: over the stored features as the workflow plans it, or (``image_path``) with
    today's per-epoch backbone (the same settings without the features folder)."""

    def settings(s) -> str:
        if image_path:
            job = train_settings.JobSettings.from_config(config, "toy", "tl-src", model)
            s = dataclasses.replace(s, job=job)
            assert s.job.features is None
        return to_json(s)

    data = ["--manifest", str(dataset_dir / "manifest.parquet"), "--classes", str(dataset_dir / "classes.txt"), "--fingerprint", str(dataset_dir / "fingerprint.txt"), "--threads", "1", "--trials", str(run / "trials.parquet")]  # fmt: skip
    data += ["--init-record", *plan.init_record(config, "tl-src", model)]  # the weights' record
    data += ["--features", *([] if image_path else plan.feature_files("toy", "tl-src", model))]
    out: dict = {"slots": [], "rungs": []}
    for stage in plan.stage_ids(config, "toy", "tl-src"):
        s = settings(
            train_settings.TrialSettings.from_config(config, "toy", "tl-src", model, stage)
        )
        promoted = ["--previous", str(run / f"halving/rung-{stage - 1}.json")] if stage else []
        results = []
        for slot in plan.slot_ids(config, "toy", "tl-src", stage):
            results.append(run / f"stage-{stage}/slot-{slot}.json")
            _cli("train-trial", "--settings", s, *data, "--stage", str(stage), "--slot", str(slot), *promoted, "--result", str(results[-1]))  # fmt: skip
            out["slots"].append(json.loads(results[-1].read_text()))
        if stage < len(plan.stage_ids(config, "toy", "tl-src")) - 1:
            rung = run / f"halving/rung-{stage}.json"
            _cli("train-halve", "--results", *map(str, results), "--rung", str(stage), "--settings", to_json(train_settings.HalveSettings.from_config(config, "toy", "tl-src")), "--decision", str(rung))  # fmt: skip
            out["rungs"].append(json.loads(rung.read_text())["promoted"])
    every = sorted(run.glob("stage-*/slot-*.json"))
    _cli("train-select", "--results", *map(str, every), "--selection", str(run / "selection.json"))
    out["selected"] = json.loads((run / "selection.json").read_text())["trial"]
    out["finals"] = []
    for seed in (0, 1):
        s = settings(train_settings.FinalSettings.from_config(config, "toy", "tl-src", model, seed))
        final = run / f"final/seed-{seed}"
        _cli("train-final", "--settings", s, *data, "--selection", str(run / "selection.json"), "--run", f"toy/tl-src/{model}/{seed}", "--model", str(final / "model.safetensors"), "--result", str(final / "result.json"))  # fmt: skip
        out["finals"].append(json.loads((final / "result.json").read_text()))
    return out


@pytest.mark.parametrize("model", ["resnet_mini", "alexnet_mini"])
def test_tl_over_features_selects_and_scores_as_the_image_path(
    model, dataset_dir, tmp_path, monkeypatch
):
    """The demo's TL protocol (halving, selection, a reused and a retrained final run) over
    features computed once gives the image path's trials, selection, accuracies and weights
    to float tolerance; both write the full model (backbone + head) with the same keys.
    resnet_mini has BatchNorm in the backbone, alexnet_mini dropout before the head."""
    from final_run import write_final_run
    from safetensors.torch import load_file

    from imagenot.core.config import validate_config
    from imagenot.train.registry import build_model

    monkeypatch.chdir(tmp_path)
    config = validate_config(_config(model))
    torch.manual_seed(1)  # the "ST source" weights: any backbone will do
    init = plan.init_weights(config, "tl-src", model)[0]
    source = write_final_run(
        tmp_path, build_model(model, 7), dataset="src", name=model, num_classes=7
    )
    assert source / "model.safetensors" == tmp_path / init
    assert plan.init_record(config, "tl-src", model) == [
        init.replace("model.safetensors", "result.json")
    ]
    draw = to_json(train_settings.DrawSettings.from_config(config, "toy", "tl-src", model))
    features_run = tmp_path / plan.run_dir("toy", "tl-src", model)
    _cli("train-draw-trials", "--settings", draw, "--record", plan.PREREGISTRATION, "--trials", str(features_run / "trials.parquet"))  # fmt: skip
    # the slot layout's tail ({model}/stage-{k}/slot-{s}.json) wherever it lies: its model's own
    image_run = tmp_path / "image-path" / model
    image_run.mkdir(parents=True)
    (image_run / "trials.parquet").write_bytes((features_run / "trials.parquet").read_bytes())

    job = to_json(train_settings.FeaturesSettings.from_config(config, "toy", "tl-src", model))
    handed = ["--manifest", str(dataset_dir / "manifest.parquet"), "--classes", str(dataset_dir / "classes.txt"), "--fingerprint", str(dataset_dir / "fingerprint.txt")]  # fmt: skip
    (record,) = plan.init_record(config, "tl-src", model)
    handed += ["--init-record", record]
    _cli("train-features", "--settings", job, *handed, "--threads", "1", "--features", *plan.feature_files("toy", "tl-src", model))  # fmt: skip
    assert all((tmp_path / f).is_file() for f in plan.feature_files("toy", "tl-src", model))
    ours = _experiment(config, model, dataset_dir, features_run, image_path=False)
    today = _experiment(config, model, dataset_dir, image_run, image_path=True)

    assert ours["rungs"] == today["rungs"] and ours["selected"] == today["selected"]
    assert len(ours["slots"]) == len(today["slots"]) == 3 + 2
    for a, b in zip(ours["slots"] + ours["finals"], today["slots"] + today["finals"], strict=True):
        for key in ("trial", "epochs", "best_epoch", "stopped_by", "identity", "n_val"):
            assert a[key] == b[key], key
        assert a["val_accuracy"] == pytest.approx(b["val_accuracy"], abs=1e-6)
        history = [
            (run / f"trial-{a['trial']}/metrics.csv").read_text().splitlines()[1:]
            for run in (features_run, image_run)
        ]
        assert len(history[0]) == len(history[1])
    for a, b in zip(ours["finals"], today["finals"], strict=True):
        assert (a["reused_trial"], a["train_seed"]) == (b["reused_trial"], b["train_seed"])
    assert [f["reused_trial"] for f in ours["finals"]] == [True, False]
    for seed in (0, 1):
        mine = load_file(features_run / f"final/seed-{seed}/model.safetensors")
        theirs = load_file(image_run / f"final/seed-{seed}/model.safetensors")
        assert mine.keys() == theirs.keys() == build_model(model, 3).state_dict().keys()
        for key in mine:
            torch.testing.assert_close(mine[key], theirs[key], rtol=1e-4, atol=1e-5)


class _Killed(RuntimeError):
    pass


def test_a_head_fit_killed_mid_epoch_resumes_to_the_uninterrupted_run(tmp_path):
    """Resumption works unchanged over features: a head fit that dies after a step
    checkpoint mid-epoch resumes to the uninterrupted run's history and weights (CPU,
    deterministic)."""
    from safetensors.torch import load_file

    from imagenot.train import search
    from imagenot.train.checkpoints import read_state
    from imagenot.train.features import Features
    from imagenot.train.feed import InMemory
    from imagenot.train.loop import fit
    from imagenot.train.registry import build_model, head_module

    width = head_module(build_model("vgg_mini", 3), "vgg_mini").in_features
    g = torch.Generator().manual_seed(0)
    train = Features(torch.randn(48, width, generator=g), torch.arange(48) % 3)
    val = Features(torch.randn(24, width, generator=g), torch.arange(24) % 3)
    hp = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}
    job = toy_job("vgg_mini", 3, hp, seed=1, image_size=32, batch_size=8, max_epochs=2, patience=5)
    job = with_fields(job, trainable="head")
    calls = []

    def dies_in_epoch_2(model):  # head calls: 6 steps, 1 validation batch, then 4 steps
        def hook(*_):
            calls.append(1)
            if len(calls) == 6 + 1 + 4:
                raise _Killed

        head_module(model, "vgg_mini").register_forward_hook(hook)

    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        _, straight = fit(job, train, val, tmp_path / "a.safetensors", "fp", head_only=True)
        with pytest.raises(_Killed):
            often = with_fields(job, checkpoint_minutes=1e-9)
            fit(often, train, val, tmp_path / "b.safetensors", "fp", init=dies_in_epoch_2,
                head_only=True)  # fmt: skip
        paused = read_state(tmp_path / "b.safetensors")
        assert (paused.epoch, paused.batch) == (1, 3)  # killed in the 4th step of epoch 2
        _, resumed = fit(job, train, val, tmp_path / "b.safetensors", "fp", head_only=True)
    finally:
        torch.use_deterministic_algorithms(previous)
    strip = [{k: v for k, v in r.items() if k != "images_per_s"} for r in straight.history]
    assert strip == [{k: v for k, v in r.items() if k != "images_per_s"} for r in resumed.history]
    a, b = load_file(tmp_path / "a.safetensors"), load_file(tmp_path / "b.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a if k.startswith("model."))
    images = InMemory(train.images, train.labels)  # not Features: would be preprocessed
    with pytest.raises(ValueError, match="only over Features"):
        fit(job, images, val, tmp_path / "c.safetensors", "fp", head_only=True)
