"""A model's own facts (imagenot.train.facts): every consumer uses the weights' own protocol.

Offline throughout: torchvision's weights enums carry their transforms and metrics, timm's
pretrained configs their preprocessing, and models are built with random weights.
"""

from __future__ import annotations

import functools
import gzip
import io
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from imagenot.core.config import validate_config
from imagenot.train import facts
from imagenot.train.registry import MODELS, ModelSpec, _timm, build_model, head_module

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]
FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")
# timm's smallest config with mean = std = 0.5 (a test network of timm's own; 160 px, crop_pct
# 0.95, bilinear, head "fc"): built from its config, never downloaded
HALF = "test_resnet.r160_in1k"


def _config(repo_root: Path, name: str) -> dict:
    with open(repo_root / "config" / name) as f:
        return validate_config(yaml.safe_load(f))


def _real_image(size: int) -> bytes:
    """A JPEG of ``size`` px: a Fashion-MNIST test image (Debian's dataset-fashion-mnist, where
    installed), coloured and enlarged; else a generated scene of gradients and shapes."""
    from PIL import Image, ImageDraw

    if FASHION_MNIST.is_file():
        with gzip.open(FASHION_MNIST) as f:
            pixels = np.frombuffer(f.read(16 + 28 * 28 * 8), np.uint8, offset=16)
        grey = pixels.reshape(-1, 28, 28)[7]
        rgb = np.stack([grey, (grey * 0.7).astype(np.uint8), 255 - grey], axis=-1)
        image = Image.fromarray(rgb).resize((size, size), Image.Resampling.BICUBIC)
    else:
        yy, xx = np.mgrid[0:size, 0:size] / size
        rgb = np.stack([xx * 255, yy * 255, (1 - xx * yy) * 200], axis=-1).astype(np.uint8)
        image = Image.fromarray(rgb)
        draw = ImageDraw.Draw(image)
        draw.ellipse((size // 5, size // 4, size // 2, size // 2 + size // 5), fill=(200, 40, 60))
        draw.rectangle((size // 2, size // 3, 4 * size // 5, 3 * size // 4), fill=(20, 160, 90))
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


class _Recorder(torch.nn.Module):
    """A model of any input size that keeps the inputs it is given."""

    def __init__(self):
        super().__init__()
        self.seen: list[torch.Tensor] = []
        self.fc = torch.nn.Linear(3, 4)

    def forward(self, x):
        self.seen.append(x.clone())
        return self.fc(x.mean(dim=(2, 3)))


def _identity_input(preprocessing, dataset_dir: Path) -> torch.Tensor:
    """What the evaluation feeds a model for the untransformed stored test images."""
    from imagenot.evaluate.robustness import dataset_batches, evaluate_batches
    from imagenot.evaluate.transforms import build_transform

    identity = [build_transform("Identity")]
    recorder = _Recorder()
    batches = dataset_batches(dataset_dir, "test", 4)
    evaluate_batches(recorder, batches, identity, 0, preprocessing, channels_last=False)
    return recorder.seen[0]


def _one_image_dataset(root: Path, jpeg: bytes) -> Path:
    from imagenot.acquire.dataset import Record, write_dataset

    write_dataset(root, [Record("k0", "n01440764", "test", jpeg)], ["n01440764"], shard_size=10)
    return root


# ------------------------------------------------------------------------- the entries' facts


def test_the_shipped_table_is_derived_from_the_weights_themselves():
    """resources/published_weights.csv is what the readers make of the registry's weights
    (torchvision's enums, timm's configs): stale, it fails here; rewrite it with
    ``.venv/bin/python -m imagenot.train.facts``."""
    shipped = Path(facts.shipped_path()).read_text()
    assert shipped == facts.derived_table()
    rows = {row["model"]: row for row in facts.shipped_rows()}
    assert set(rows) == {name for name, spec in MODELS.items() if spec.weights}


def test_torchvision_facts_are_the_enums_own():
    from torchvision.models import get_weight

    for name, spec in MODELS.items():
        if not spec.weights or ":" in spec.weights:
            continue
        got = facts.weight_facts(spec.weights, name)
        weights = get_weight(spec.weights)
        metrics = weights.meta["_metrics"]["ImageNet-1K"]
        assert (got.top1, got.top5) == (metrics["acc@1"], metrics["acc@5"]), name
        assert got.weights_file == weights.url.rsplit("/", 1)[-1]
        t = weights.transforms()
        p = got.preprocessing
        assert (p.crop_size, p.resize_size) == (t.crop_size[0], t.resize_size[0]), name
        assert (list(p.mean), list(p.std)) == (list(t.mean), list(t.std)), name
        assert got.classifier == spec.head
    big = facts.weight_facts("EfficientNet_V2_L_Weights.IMAGENET1K_V1", None).preprocessing
    assert (big.mean, big.crop_size, big.resize_size, big.interpolation) == (
        (0.5, 0.5, 0.5),
        480,
        480,
        "bicubic",
    )


def test_timm_facts_are_its_pretrained_config_and_name_the_entrys_head():
    from timm.models import get_pretrained_cfg

    for name, spec in MODELS.items():
        if spec.weights and spec.weights.startswith("timm:"):
            cfg = get_pretrained_cfg(spec.weights.removeprefix("timm:"))
            got = facts.weight_facts(spec.weights, name)
            assert got.classifier == cfg.classifier == spec.head, name
            assert got.preprocessing.crop_size == cfg.input_size[-1]
            assert got.preprocessing.resize_size == int(cfg.input_size[-1] / cfg.crop_pct)
            assert got.top1 is None  # timm's configs carry no accuracy: none is made up


def test_a_file_source_states_its_facts_in_its_entry():
    from imagenot.core.registries import RegistryError

    own = {"mean": [0.5] * 3, "std": [0.25] * 3, "crop_size": 64, "resize_size": 72}
    spec = ModelSpec(
        "toy_file",
        "resnet",
        MODELS["resnet_mini"].build,
        "fc",
        1,
        "file:toy.safetensors",
        facts={**own, "interpolation": "bicubic", "top1": 12.5},
    )
    with MODELS.temporarily("toy_file", spec):
        got = facts.weight_facts("file:toy.safetensors", "toy_file")
        assert got.preprocessing == facts.Preprocessing((0.5,) * 3, (0.25,) * 3, 64, 72, "bicubic")
        assert (got.top1, got.classifier) == (12.5, "fc")
    bare = ModelSpec("toy_bare", "resnet", MODELS["resnet_mini"].build, "fc", 1, "file:x.pth")
    with MODELS.temporarily("toy_bare", bare), pytest.raises(RegistryError, match="facts"):
        facts.weight_facts("file:x.pth", "toy_bare")


def test_the_reference_dataset_is_stored_as_large_as_its_largest_weights_resize(repo_root):
    """The paper's ImageNet is evaluated by published weights: it must be stored at
    EfficientNet-V2-L's 480 px; at acquire.image_size's 256 the config check stops, naming the
    key and the size."""
    from imagenot.acquire.settings import MaterialiseSettings
    from imagenot.core.config import ConfigError
    from imagenot.train import checks, plan

    paper = _config(repo_root, "paper.yaml")
    assert checks.published_stored_size(paper, "imagenet") == 480
    assert checks.published_stored_size(paper, "cifar10") == 0
    plan.check(paper)
    paper["datasets"]["imagenet"]["path"] = str(repo_root)  # counted, never read, here
    assert MaterialiseSettings.from_config(paper, "imagenet").image_size == 480
    raw = yaml.safe_load((repo_root / "config" / "paper.yaml").read_text())
    del raw["datasets"]["imagenet"]["image_size"]
    with pytest.raises(ConfigError, match=r"datasets\.imagenet\.image_size: .* 256 px.*: 480$"):
        plan.check(validate_config(raw))


# ------------------------------------------------------------------ the evaluation's protocol


@pytest.mark.parametrize(
    "model", yaml.safe_load((REPO / "config" / "paper.yaml").read_text())["train"]["models"]
)
def test_evaluation_input_of_a_real_image_is_the_weights_own_transforms(model, tmp_path):
    """For every model of config/paper.yaml: a real image stored at the reference dataset's
    size, read by the evaluation and brought to the model's input as a published run records
    it, equals ``weights.transforms()`` of the same stored image."""
    from torchvision.io import ImageReadMode, decode_jpeg
    from torchvision.models import get_weight

    weights = MODELS[model].weights
    preprocessing = facts.run_preprocessing(
        {"preprocessing": facts.weight_facts(weights, model).preprocessing.to_dict()}, "run"
    )
    jpeg = _real_image(480)
    got = _identity_input(preprocessing, _one_image_dataset(tmp_path / "ds", jpeg))
    stored = decode_jpeg(torch.frombuffer(bytearray(jpeg), dtype=torch.uint8), ImageReadMode.RGB)
    expected = get_weight(weights).transforms()(stored).unsqueeze(0)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_transformations_act_on_the_image_the_model_sees(tmp_path):
    """A flip acts after the model's resize and centre crop, before its normalisation: the
    model is fed the flip of the image it sees (not the protocol of a flipped stored image,
    which an off-centre crop tells apart)."""
    from imagenot.evaluate.robustness import evaluate_batches, tensor_batches
    from imagenot.evaluate.transforms import build_transform

    p = facts.Preprocessing((0.5,) * 3, (0.5,) * 3, 24, 28, "bilinear")
    images = torch.randint(0, 256, (2, 3, 40, 48), dtype=torch.uint8)  # crop 4 px left, 5 right
    flip = [build_transform("HorizontalFlip", {"p": 1.0})]
    identity = [build_transform("Identity")]
    recorder = _Recorder()
    batches = tensor_batches(images, torch.zeros(2, dtype=torch.int64), ["a", "b"], 2)
    evaluate_batches(recorder, batches, identity + flip, 0, p, channels_last=False)
    assert recorder.seen[1].shape == (2, 3, 24, 24)
    seen = p.geometry(images.float() / 255)
    torch.testing.assert_close(recorder.seen[0], p.normalise(seen), rtol=0, atol=1e-6)
    torch.testing.assert_close(recorder.seen[1], p.normalise(seen.flip(-1)), rtol=0, atol=1e-6)
    stored_first = p.apply(images.flip(-1).float() / 255)
    assert (recorder.seen[1] - stored_first).abs().max() > 0.1


# ---------------------------------------------------- a timm weight with mean = std = 0.5


@pytest.fixture()
def half_entry():
    from timm.models import get_pretrained_cfg

    cfg = get_pretrained_cfg(HALF)
    arch = HALF.split(".")[0]
    build = functools.partial(_timm, arch)
    spec = ModelSpec("toy_half", "resnet", build, cfg.classifier, 1, f"timm:{HALF}")
    with MODELS.temporarily("toy_half", spec):
        yield "toy_half"


def test_a_timm_weight_with_statistics_half_flows_with_them(half_entry, repo_root, tmp_path):
    """One registry entry (``timm:test_resnet.r160_in1k``): FT/TL from it normalise with 0.5
    (plan -> JobSettings -> the loop's feed, and the TL features), a published run of it
    records and the evaluation applies its 168 px resize, 160 px crop and 0.5 statistics."""
    from safetensors.torch import save_file
    from torchvision.io import decode_jpeg
    from torchvision.transforms import functional as TF

    from imagenot.train import jobs
    from imagenot.train import settings as ts
    from imagenot.train.features import extract
    from imagenot.train.feed import InMemory, to_device
    from imagenot.train.files import PublishedFiles
    from imagenot.train.published import run_published

    raw = yaml.safe_load((repo_root / "config" / "config.yaml").read_text())
    raw["train"]["weights_dir"] = str(tmp_path / "weights")
    raw["train"]["experiments"].append(
        {"dataset": "fashion_mnist", "protocol": "tl-torchvision", "space": "probe"}
    )
    config = validate_config(raw)
    half = {"mean": [0.5] * 3, "std": [0.5] * 3}
    settings = ts.JobSettings.from_config(config, "fashion_mnist", "tl-torchvision", half_entry)
    assert settings.normalisation == half
    scratch = ts.JobSettings.from_config(config, "fashion_mnist", "tl-imagenot", "resnet_mini")
    assert scratch.normalisation == {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}

    # the hub's file where planning looks for it (random weights stand in for timm's)
    weights = Path(settings.init)
    assert weights == tmp_path / "weights" / "timm" / HALF / "model.safetensors"
    weights.parent.mkdir(parents=True)
    published = build_model(half_entry, 1000).state_dict()
    save_file({k: v.contiguous() for k, v in published.items()}, str(weights))
    job = jobs.make_job(settings, {}, 0, 3)
    images = torch.randint(0, 256, (3, 3, 64, 64), dtype=torch.uint8)
    fed, _ = to_device(
        images,
        torch.arange(3),
        torch.device("cpu"),
        job.settings.image_size,
        job.settings.normalisation,
    )
    torch.testing.assert_close(fed, (images.float() / 255 - 0.5) / 0.5, rtol=0, atol=1e-6)

    model = build_model(half_entry, 3)
    stored = extract(
        model,
        head_module(model, half_entry),
        InMemory(images, torch.arange(3)),
        job,
        torch.device("cpu"),
    )
    captured = []
    hook = head_module(model, half_entry).register_forward_pre_hook(
        lambda _m, a: captured.append(a[0])
    )
    with torch.no_grad():
        model.eval()((images.float() / 255 - 0.5) / 0.5)
    hook.remove()
    torch.testing.assert_close(stored.images, captured[0], rtol=1e-4, atol=1e-5)

    # a published run of the same weights: recorded, then evaluated, with their protocol
    ds = _one_image_dataset(tmp_path / "ds", _real_image(200))
    settings = ts.PublishedSettings(model=half_entry, weights=f"timm:{HALF}")
    files = PublishedFiles(
        weights=weights, classes=ds / "classes.txt", fingerprint=ds / "fingerprint.txt",
        model=tmp_path / "run/model.safetensors", result=tmp_path / "run/result.json",
    )  # fmt: skip
    result = run_published(settings, files, {"dataset": "d", "protocol": "st"})
    assert result["preprocessing"] == {
        **half,
        "crop_size": 160,
        "resize_size": 168,
        "interpolation": "bilinear",
    }
    protocol = facts.run_preprocessing(result, "result.json")
    seen = _identity_input(protocol, ds)
    assert seen.shape == (1, 3, 160, 160)
    stored_image = decode_jpeg(torch.frombuffer(bytearray(_real_image(200)), dtype=torch.uint8))
    manual = TF.center_crop(TF.resize(stored_image, [168], antialias=True), [160])
    torch.testing.assert_close(seen[0], (manual.float() / 255 - 0.5) / 0.5, rtol=0, atol=1e-5)


# ------------------------------------------------------- measured beside published, flagged


def test_a_deviation_from_the_published_top1_is_flagged_in_the_log_and_the_report(
    repo_root, caplog
):
    import logging

    import pandas as pd
    import pyarrow as pa

    from imagenot.evaluate.outputs import check_published
    from imagenot.figures import plan as figures_plan
    from imagenot.figures.settings import Options
    from imagenot.figures.tables import published_check

    info = {
        "model": "resnet18",
        "dataset": "imagenet",
        "weights": "ResNet18_Weights.IMAGENET1K_V1",
        "published_top1": 69.758,
        "published_source": "torchvision",
    }
    table = pa.table({"transform": ["Identity", "Invert"], "top1": [69.1, 20.0], "n": [50, 50]})
    with caplog.at_level(logging.INFO, logger="imagenot.evaluate.outputs"):
        assert check_published(table, info) == pytest.approx(69.1 - 69.758)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING and "published 69.758%" in record.message
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="imagenot.evaluate.outputs"):
        check_published(table, {**info, "published_top1": 69.2})
    assert caplog.records[0].levelno == logging.INFO
    assert check_published(table, {"model": "resnet_mini"}) is None  # a trained run

    paper, demo = _config(repo_root, "paper.yaml"), _config(repo_root, "config.yaml")
    assert figures_plan.published_datasets(paper) == ["imagenet"]
    assert "published_check" in figures_plan.table_names(paper)
    assert "published_check" not in figures_plan.table_names(demo)  # no published weights
    opts = Options.from_config(paper)
    acc = pd.DataFrame(
        {
            "model": ["resnet18", "alexnet", "resnet18"],
            "dataset": ["imagenet", "imagenet", "imagenot"],
            "protocol": ["st", "st", "st"],
            "transform": ["Identity"] * 3,
            "accuracy": [69.1, 56.6, 40.0],
            "imagenet_top1": [69.758, 56.522, 69.758],
            "n": [50000, 50000, 50000],
        }
    )
    check = published_check(acc, {}, opts)
    assert check["model"].tolist() == ["resnet18", "alexnet"]
    assert check["flagged"].tolist() == [True, False]
    assert check["deviation"].tolist() == pytest.approx([69.1 - 69.758, 56.6 - 56.522])


# ------------------------------------- the published accuracy is the weight's that ran, not the name's

V1, V1_TOP1 = "ResNet152_Weights.IMAGENET1K_V1", 78.312  # the registry's (the paper's recipe)
V2, V2_TOP1 = "ResNet152_Weights.IMAGENET1K_V2", 82.284  # torchvision's newer recipe


def _published_run_rows(
    model: str, weights: str | None, top1: float | None, measured: float, record: str | None = None
):
    """robustness.parquet rows of one evaluated run, as evaluate's summarise writes them from the
    run's record of digest ``record``."""
    import pyarrow as pa

    from imagenot.evaluate.robustness import ROBUSTNESS_SCHEMA, summarise

    n = 50_000
    per_image = pa.table(
        {
            "key": [f"k{i}" for i in range(n)],
            "transform": ["Identity"] * n,
            "label": [0] * n,
            "pred": [0] * n,
            "correct": [i < round(measured / 100 * n) for i in range(n)],
            "correct_top5": [True] * n,
        }
    )
    meta = {"model": model, "dataset": "imagenet", "protocol": "st", "seed": 0,
            "record_sha256": record}  # fmt: skip
    if weights is not None:
        meta |= {"source": "published", "weights": weights, "published_top1": top1}
    table = summarise(per_image, meta, 0.95)
    assert table.schema == ROBUSTNESS_SCHEMA
    return table.to_pandas()


def test_the_published_accuracy_is_the_weights_that_ran_not_the_models_name(repo_root):
    """train.weights.resnet152: IMAGENET1K_V2 (published 82.3): the reference check and the
    x-axis read the run's own record, and it is not compared with the registry's V1 (78.3)."""
    import pandas as pd

    from imagenot.analyse import PUBLISHED_DATASET
    from imagenot.analyse.accuracy import accuracy_table, read_published
    from imagenot.analyse.settings import AccuracySettings
    from imagenot.figures.data import published as x_axis
    from imagenot.figures.settings import Options
    from imagenot.figures.tables import published_check

    paper = _config(repo_root, "paper.yaml")
    paper["train"]["weights"]["resnet152"] = V2
    settings = AccuracySettings.from_config(paper)
    assert settings.weights["resnet152"] == V2
    robustness = pd.concat(
        [
            _published_run_rows("resnet152", V2, V2_TOP1, 82.2),
            _published_run_rows("resnet18", "ResNet18_Weights.IMAGENET1K_V1", 69.758, 69.7),
            _published_run_rows("resnet152", None, None, 40.0).assign(dataset="imagenot"),
        ],
        ignore_index=True,
    )
    acc = accuracy_table(robustness, read_published(facts.shipped_path()), settings)
    r152 = acc[acc.model == "resnet152"]
    assert (r152.imagenet_top1 == V2_TOP1).all()  # every dataset's x-axis: the weight that ran
    ref = acc[(acc.dataset == PUBLISHED_DATASET) & (acc.model == "resnet152")].iloc[0]
    assert (ref.weights, ref.accuracy) == (V2, V2_TOP1)
    assert x_axis(acc)["resnet152"] == V2_TOP1
    check = published_check(acc, {}, Options.from_config(paper)).set_index("model")
    assert check.loc["resnet152", "published_top1"] == V2_TOP1
    assert check.loc["resnet152", "weights"] == V2
    assert not check["flagged"].any()  # 82.2 against 82.3, not against V1's 78.3
    assert check.loc["resnet152", "deviation"] == pytest.approx(82.2 - V2_TOP1)

    # no published run: the config's weights, read by their reference (V2 is not shipped)
    trained_only = robustness[robustness.dataset == "imagenot"]
    acc = accuracy_table(trained_only, read_published(facts.shipped_path()), settings)
    assert (acc[acc.model == "resnet152"].imagenet_top1 == V2_TOP1).all()
    # the registry's weights where the config names none
    default = AccuracySettings.from_config(_config(repo_root, "paper.yaml"))
    acc = accuracy_table(trained_only, read_published(facts.shipped_path()), default)
    assert (acc[acc.model == "resnet152"].imagenet_top1 == V1_TOP1).all()


# ------------------------------------------- each published weight is the one of the paper's recipe


def test_each_paper_model_has_the_weights_of_the_recipe_the_paper_states(repo_root):
    """Every model of config/paper.yaml records the recipe the paper states for it, and its
    weights are ones torchvision says that recipe trained (ResNet-152: IMAGENET1K_V1)."""
    from imagenot.train.registry import RECIPES

    paper = _config(repo_root, "paper.yaml")["train"]["models"]
    assert len(paper) == 7
    for name in paper:
        spec = MODELS[name]
        assert spec.recipe in RECIPES, name
        assert facts.recipe_problem(spec) is None, name
    assert MODELS["resnet152"].weights == V1
    assert facts.weight_facts(MODELS["resnet152"].weights, "resnet152").top1 == V1_TOP1


def test_weights_whose_recipe_contradicts_the_recorded_one_are_refused(monkeypatch):
    """Planted: ResNet-152 with V2 (torchvision's newer recipe) under the classic recipe; the
    check names both, and rewriting the derived table refuses the entry."""
    from dataclasses import replace

    from imagenot.core.registries import RegistryError

    planted = replace(MODELS["resnet152"], weights=V2)
    problem = facts.recipe_problem(planted)
    assert "issues/3995#new-recipe" in problem and "'classic'" in problem, problem
    assert facts.recipe_problem(replace(planted, recipe=None)) is None  # no reason recorded
    monkeypatch.setitem(MODELS, "resnet152", planted)
    with pytest.raises(RegistryError, match=r"resnet152.*IMAGENET1K_V2"):
        facts.derived_table()


@pytest.mark.parametrize("measured, problem", [(78.2, False), (74.0, True)])
def test_a_published_gap_over_the_tolerance_is_a_problem_of_the_run_summary(
    repo_root, tmp_path, measured, problem
):
    """The run summary (and the report, which shows it) lists a measured-vs-published gap over
    the tolerance on the whole validation set as a problem, against the weights that ran."""

    from imagenot.evaluate.paths import ROBUSTNESS
    from imagenot.run import run_summary, summary_plan
    from imagenot.train.paths import FINAL_RESULT
    from imagenot.train.records import write_record

    config = _config(repo_root, "paper.yaml")
    config["train"]["weights"]["resnet152"] = V1
    layout = summary_plan.layout(config)
    run = {"dataset": "imagenet", "protocol": "st", "model": "resnet152", "seed": 0}
    (entry,) = [r for r in layout["runs"] if all(r[k] == v for k, v in run.items())]
    assert entry["evaluation"] == ROBUSTNESS.format(**run)
    assert entry["evaluation"] in summary_plan.inputs(config)
    result = tmp_path / FINAL_RESULT.format(**run)
    sealed = write_record(
        {**run, "num_classes": 1000, "image_size": 224, "dataset_fingerprint": "0" * 64,
         "weights_sha256": "1" * 64, "source": "published", "weights": V1,
         "published_top1": V1_TOP1},
        result,
    )  # fmt: skip
    evaluation = tmp_path / entry["evaluation"]
    evaluation.parent.mkdir(parents=True)
    rows = _published_run_rows("resnet152", V1, V1_TOP1, measured, sealed["record_sha256"])
    rows.to_parquet(evaluation)
    summary = run_summary.collect(layout, tmp_path)
    (check,) = summary["published_check"]
    assert (check["weights"], check["published_top1"]) == (V1, V1_TOP1)
    assert check["deviation"] == pytest.approx(measured - V1_TOP1)
    messages = [p["message"] for p in summary["problems"] if "published check" in p["message"]]
    assert bool(messages) == problem
    text = run_summary.format_text(summary)
    assert ("published check: resnet152" in text) == problem
    if problem:
        assert V1 in messages[0] and "82.2" not in messages[0]
        assert "published check" in run_summary.format_html(summary)
