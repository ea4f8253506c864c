"""A model built for one input side (``ModelSpec.image_size``: a timm ViT at 224 px) trains,
fits its TL head, is checked by the preflight and is evaluated at that side, beside the models
that take ``train.image_size`` (the demo's 64 px), from datasets stored at their own size; a side
below a model's minimum is refused once, in one line naming the key."""

from __future__ import annotations

import contextlib
import dataclasses
import io
from pathlib import Path

import pytest
import torch
import yaml
from conftest import REPO, snakemake_workflow
from final_run import write_final_run, write_toy_dataset

from imagenot.core.registries import RegistryError
from imagenot.core.stages import check_workflow_config
from imagenot.train import features, preflight, preflight_plan, search
from imagenot.train.feed import InMemory, to_device
from imagenot.train.jobs import make_job
from imagenot.train.loop import fit
from imagenot.train.registry import MODELS, ModelSpec, build_model, head_module
from imagenot.train.settings import JobSettings

torch.set_num_threads(1)

VIT = "toy_vit"
HP = {**search.DEFAULTS, "optimizer": "sgd", "lr": 0.05}
CPU = torch.device("cpu")


def build_vit(num_classes: int) -> torch.nn.Module:
    """timm's vit_tiny_patch16_224 (randomly initialised; its 14 x 14 patch grid takes 224 px
    inputs and asserts so) with one transformer block instead of 12: the tests' cost."""
    import timm

    return timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, num_classes=num_classes, depth=1
    )


@pytest.fixture()
def vit():
    """The ViT registered as a user's plugin registers it: min_size and image_size 224."""
    with MODELS.temporarily(VIT, ModelSpec(VIT, "vit", build_vit, "head", 224, image_size=224)):
        yield VIT


def _config(**train) -> dict:
    """The demo config with the ViT listed after its five models, ``train`` keys set."""
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["train"]["models"].append(VIT)
    config["train"].update(train)
    return config


def _images(n: int = 4, side: int = 64, classes: int = 3) -> InMemory:
    """``n`` uint8 images stored at ``side`` px (the demo's datasets: 64)."""
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, side, side), dtype=torch.uint8, generator=g)
    return InMemory(images, torch.arange(n) % classes)


def _trained(settings: JobSettings, data: InMemory, where: Path):
    job = make_job(settings, HP, seed=0, num_classes=3)
    return fit(job, data, data, where / f"{settings.model}-{settings.image_size}.safetensors", "fp")


def test_a_model_built_for_224_px_trains_at_it_beside_64_px_models(vit, tmp_path):
    """The demo config with the ViT added: every job of the ViT (ST, FT, the TL feature pass)
    takes 224 px, resnet_mini's the config's 64; each trains one step from images stored at
    64 px, resized as the job loads them."""
    config = check_workflow_config(_config(), against_results=False)
    for dataset, protocol in [("imagenot", "st"), ("fashion_mnist", "ft-imagenot")]:
        assert JobSettings.for_training(config, dataset, protocol, VIT).image_size == 224
        assert JobSettings.for_training(config, dataset, protocol, "resnet_mini").image_size == 64
    data = _images()  # stored at 64 px, as the demo's datasets
    # TL: the backbone's features are computed on images at its side
    tl = JobSettings.from_config(config, "fashion_mnist", "tl-imagenot", VIT)
    assert tl.image_size == 224
    backbone, job = build_model(VIT, 3), make_job(dataclasses.replace(tl, init=None), HP, 0, 3)
    # a random backbone (init None): the source run's weights are not on disk here
    found = features.extract(backbone, head_module(backbone, VIT), data, job, CPU)
    assert tuple(found.images.shape) == (4, backbone.embed_dim)
    for model, side in [(VIT, 224), ("resnet_mini", 64)]:
        settings = JobSettings.for_training(config, "imagenot", "st", model)
        x, _ = to_device(data.images, data.labels, CPU, settings.image_size, settings.normalisation)
        assert tuple(x.shape) == (4, 3, side, side), model  # resized as the job loads them
        one_step = dataclasses.replace(settings, max_epochs=1, batch_size=4)
        _, state = _trained(one_step, data, tmp_path)
        assert (state.epoch, state.step) == (1, 1), model

    # the side is the model's own: at train.image_size the ViT cannot take its input
    vit_step = dataclasses.replace(
        JobSettings.for_training(config, "imagenot", "st", VIT), max_epochs=1, batch_size=4
    )
    at_64 = dataclasses.replace(vit_step, image_size=64)
    with pytest.raises(AssertionError, match=r"Input height \(64\) doesn't match model \(224\)"):
        _trained(at_64, data, tmp_path)


def test_the_preflight_measures_each_model_at_its_side(vit):
    """The memory check's steps (run on the CPU here) and the report's values: the ViT's at
    224 px, resnet_mini's at train.image_size."""
    config = check_workflow_config(_config(), against_results=False)
    runs = {(r["model"], r["space"]): r for r in preflight_plan.runs(config)}
    for model, side in [(VIT, 224), ("resnet_mini", 64)]:
        run = {**runs[(model, "st")], "per_gpu": 2}
        check = preflight.check_memory([run], config["train"]["image_size"], CPU, None)
        assert check.status == "info" and check.values["image_size"] == side, check


def test_the_evaluation_feeds_a_model_the_side_it_trained_at(vit, tmp_path):
    """A final ViT run recorded at 224 px, evaluated under every transformation on a dataset
    stored at 20 px: its images reach it at 224 (the ViT refuses any other side), the pixel-sized
    strengths scaled from train.image_size's 64 to 224. A record at 64 px feeds it 64."""
    from imagenot.core.config import validate_config
    from imagenot.core.dataset import read_fingerprint
    from imagenot.evaluate.files import RobustnessFiles
    from imagenot.evaluate.robustness import evaluate_checkpoint
    from imagenot.evaluate.settings import RobustnessSettings
    from imagenot.evaluate.transforms import names

    ds = write_toy_dataset(tmp_path / "results" / "datasets" / "toy")
    settings = RobustnessSettings.from_config(validate_config({"train": {"image_size": 64}}))
    settings = dataclasses.replace(settings, batch_size=6, device="cpu")
    assert settings.strength_side == 64
    model = build_model(VIT, 3)
    for seed, side in [(0, 224), (1, 64)]:
        run = write_final_run(
            tmp_path, model, name=VIT, seed=seed, image_size=side, fingerprint=read_fingerprint(ds)
        )
        out = tmp_path / f"out-{seed}"
        files = RobustnessFiles(
            model=run / "model.safetensors", result=run / "result.json",
            manifest=ds / "manifest.parquet", classes=ds / "classes.txt",
            fingerprint=ds / "fingerprint.txt", robustness=out / "robustness.parquet",
            per_image=out / "per_image.parquet",
        )  # fmt: skip
        if side == 224:
            table = evaluate_checkpoint(files, settings, workers=0, gpu_job=False)
            assert table.num_rows == len(names()) and set(table["n"].to_pylist()) == {6}
        else:
            with pytest.raises(AssertionError, match=r"doesn.t match model \(224\)"):
                evaluate_checkpoint(files, settings, workers=0, gpu_job=False)


def test_the_overlay_plans_each_model_at_its_side(vit, tmp_path):
    """The workflow's own planning (the Snakefile through Snakemake's API, nothing run) of the
    demo config and an overlay listing the ViT: its trial and TL feature jobs carry 224 px,
    resnet_mini's trial the config's 64 (an evaluation reads the side from its run's record)."""
    from snakemake.settings.types import DAGSettings

    from imagenot.train.paths import FEATURES, SLOT

    overlay = tmp_path / "vit.yaml"
    overlay.write_text(yaml.safe_dump({"train": {"models": _config()["train"]["models"]}}))
    slot = {"dataset": "imagenot", "protocol": "st", "stage": 0, "slot": 0}
    targets = {SLOT.format(model=m, **slot) for m in (VIT, "resnet_mini")}
    targets.add(
        FEATURES.format(dataset="fashion_mnist", protocol="tl-imagenot", model=VIT, split="train")
    )
    with snakemake_workflow(tmp_path / "work", [REPO / "config" / "config.yaml", overlay]) as api:
        api.dag(dag_settings=DAGSettings(targets=targets))
        workflow = api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        jobs = {
            (job.rule.name, job.wildcards.get("model")): job.shellcmd or ""
            for job in workflow.dag.needrun_jobs()
        }
    for model, side in [(VIT, 224), ("resnet_mini", 64)]:
        assert f'"image_size":{side}' in jobs[("train_trial", model)], model
    assert '"image_size":224' in jobs[("train_features", VIT)]


def test_a_side_below_a_models_minimum_is_refused_once_naming_the_key(vit, tmp_path):
    """train.image_size 32: alexnet_mini (35 px at least) is refused, the ViT (its own 224) is
    not; validate-config and the workflow's planning each say so once, in one line. A registry
    entry built for a side below its own minimum is refused where it is made."""
    from snakemake.settings.types import DAGSettings

    from imagenot.cli import main

    overlay = tmp_path / "small.yaml"
    overlay.write_text(
        yaml.safe_dump({"train": {"models": _config()["train"]["models"], "image_size": 32}})
    )
    line = (
        "config key train.image_size: model 'alexnet_mini' needs inputs of at least 35 px; "
        "train.image_size is 32"
    )
    work = tmp_path / "work"
    work.mkdir()
    err = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stderr(err):
        mp.chdir(work)
        with contextlib.redirect_stdout(io.StringIO()):
            assert (
                main(["validate-config", str(REPO / "config" / "config.yaml"), str(overlay)]) == 2
            )
    assert err.getvalue().strip().endswith(f"{overlay}: {line}"), err.getvalue()
    assert len(err.getvalue().strip().splitlines()) == 1 and err.getvalue().count(line) == 1
    with (
        pytest.raises(SystemExit) as stopped,
        snakemake_workflow(work, [REPO / "config" / "config.yaml", overlay]) as api,
    ):
        api.dag(dag_settings=DAGSettings())
    planned = str(stopped.value)  # the workflow's refusal names the file that set the key
    assert planned.startswith("invalid workflow config: ") and planned.endswith(line), planned
    assert "\n" not in planned and planned.count("config key") == 1, planned

    with pytest.raises(RegistryError, match=r"'bad_vit': image_size 16 is below its min_size 224"):
        ModelSpec("bad_vit", "vit", build_vit, "head", 224, image_size=16)
