"""Nothing stored that nothing reads: a dataset on disk stores the splits some rule of the config
reads (imagenot.plan.split_readers), and imagenot plan's storage table names each line's readers."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import numpy as np
import pytest
import snakemake_rules
from PIL import Image

from imagenot.acquire import sizes
from imagenot.core.config import load_config
from imagenot.plan import split_readers as readers

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "paper.yaml"
AUDIT = "diagnostics_embed_images (audit_search)"


@pytest.fixture(scope="module")
def paper() -> dict:
    return load_config(PAPER)


def _rules() -> set[str]:
    """The rules of the paper's workflow, as Snakemake holds them (tests/snakemake_rules.py)."""
    return set(snakemake_rules.rules(snakemake_rules.PAPER))


def _two_class_folder(root: Path) -> Path:
    """An image folder of two classes, six seeded 20 x 24 JPEGs each."""
    rng = np.random.default_rng(0)
    for c in ("cat", "dog"):
        (root / c).mkdir(parents=True)
        for i in range(6):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(buf, "JPEG")
            (root / c / f"{i}.jpg").write_bytes(buf.getvalue())
    return root


def _imagenet_lines(rows: list[dict]) -> list[str]:
    return [r["item"] for r in rows if r["item"].startswith("imagenet ")]


def test_each_storage_line_names_the_rules_that_read_it(paper):
    """config/paper.yaml: ImageNet's test split is read by the evaluation and the diagnostics;
    its train and val splits by the audit alone (audit.reference_splits); every line of the
    table names existing rules."""
    from imagenot.plan import costs

    rows = costs.storage(paper)
    rules = _rules()
    for row in rows:
        assert row["read_by"], row["item"]
        for reader in row["read_by"]:
            assert reader.split(" (")[0] in rules, (row["item"], reader)
    by_item = {r["item"]: r["read_by"] for r in rows}
    assert by_item["imagenet test split (50,000 images, 480 px)"][0] == "evaluate_robustness"
    assert by_item["imagenet train split (1,231,167 images, 224 px)"] == [AUDIT]
    assert by_item["imagenet test originals (50,000 files)"] == ["evaluate_robustness"]
    total = sum(sizes.split_bytes(paper, "imagenet", s) for s in ("train", "val", "test"))
    assert sizes.dataset_bytes(paper, "imagenet")[0] == total


def test_a_split_nothing_reads_is_not_stored(paper):
    """Without the audit of ImageNet's training images nothing of the paper config reads them:
    no ImageNet train or val line, the materialised splits and the range jobs' disk follow."""
    from imagenot.plan import costs

    config = copy.deepcopy(paper)
    config["audit"]["reference_splits"] = ["test"]
    read = readers.split_readers(config)["imagenet"]
    assert (read["train"], read["val"]) == ((), ())
    assert readers.materialise_settings(config, "imagenet").splits == ("test",)
    assert _imagenet_lines(costs.storage(config)) == [
        "imagenet test split (50,000 images, 480 px)",
        "imagenet test originals (50,000 files)",
    ]
    assert readers.range_disk_mb(config, "imagenet") < readers.range_disk_mb(paper, "imagenet") / 2

    # planted: an experiment trains on ImageNet, and its train and val splits are stored
    planted = copy.deepcopy(config)
    (published,) = [e for e in planted["train"]["experiments"] if e["dataset"] == "imagenet"]
    published.update(weights="trained", space="imagenot_st")
    read = readers.split_readers(planted)["imagenet"]
    assert read["train"] == read["val"] == ("train_trial", "train_final")
    assert readers.materialise_settings(planted, "imagenet").splits == ("train", "val", "test")
    assert "imagenet train split (1,231,167 images, 480 px)" in _imagenet_lines(
        costs.storage(planted)
    )


def test_the_range_job_writes_only_the_splits_read(tmp_path):
    """A range job with splits ("test",) writes test images only, drawn as with every split (the
    same test keys); the classes' training images are still checked for."""
    from conftest import materialise

    from imagenot.core.dataset import read_manifest

    root = _two_class_folder(tmp_path / "folder")
    common = {"image_size": 16, "test_per_class": 2, "val_per_class": 1}
    materialise("imagefolder", root, tmp_path / "all", **common)
    materialise("imagefolder", root, tmp_path / "test", splits=("test",), **common)
    every = read_manifest(tmp_path / "all").to_pandas()
    only = read_manifest(tmp_path / "test").to_pandas()
    assert sorted(every.split.unique()) == ["test", "train", "val"]
    assert only.split.unique().tolist() == ["test"]
    assert sorted(only.key) == sorted(every[every.split == "test"].key)


def test_a_dataset_nothing_reads_is_not_built(paper):
    """A configured dataset on disk that no rule of the config reads (here: without the audit,
    which compares every dataset's test split) is no target of the workflow (its manifest is
    not among the stages' targets) and has no line in the storage table; once an experiment
    reads it, it is built and its lines name the experiment's rules."""
    from imagenot.core.paths import MANIFEST
    from imagenot.core.stages import stage_plans
    from imagenot.plan import costs

    def targets(config: dict) -> set[str]:
        return {t for plan in stage_plans() for t in plan.targets(config)}

    config = copy.deepcopy(paper)
    config["datasets"]["spare"] = dict(config["datasets"]["cifar10"])
    config["audit"]["enabled"] = False
    assert readers.read_splits(config, "spare") == ()
    assert "spare" not in readers.read_datasets(config)
    assert readers.stored_splits(config, "spare") == ()
    assert MANIFEST.format(dataset="spare") not in targets(config)
    assert MANIFEST.format(dataset="cifar10") in targets(config)
    assert not [r for r in costs.storage(config) if r["item"].startswith("spare ")]

    planted = copy.deepcopy(config)
    planted["train"]["experiments"].append(
        {"dataset": "spare", "protocol": "st", "weights": "trained", "space": "imagenot_st"}
    )
    assert MANIFEST.format(dataset="spare") in targets(planted)
    spare = [r for r in costs.storage(planted) if r["item"].startswith("spare ")]
    assert len(spare) == 3
    assert all(r["read_by"][:2] == ["train_trial", "train_final"] for r in spare[:2])


def test_every_dataset_of_the_demo_config_is_built():
    """config/config.yaml: each configured dataset is read by some rule, and the acquire
    stage's targets hold its manifest."""
    from imagenot.acquire import plan as acquire_plan
    from imagenot.core.paths import MANIFEST

    demo = load_config(REPO / "config" / "config.yaml")
    assert readers.read_datasets(demo) == list(demo["datasets"])
    made = acquire_plan.targets(demo)
    assert all(MANIFEST.format(dataset=name) in made for name in demo["datasets"])


def test_caption_embeddings_have_a_labelled_estimate_where_the_workflow_writes_the_parts():
    """The demo's LAION parts (the demo world, rows known from the config): the caption
    embeddings' storage is an estimate at the scale model's bytes per embedded caption; a LAION
    copy of unknown rows says it is not estimated."""
    from imagenot.plan import costs

    demo = load_config(REPO / "config" / "config.yaml")
    row = costs.caption_embeddings(demo, costs.scale_projection())
    assert row["bytes"] > 0 and row["source"].startswith("estimate:"), row
    assert row["read_by"] == ["curate_select"]
    copy_on_disk = copy.deepcopy(demo)
    copy_on_disk["demo_world"]["enabled"] = False
    row = costs.caption_embeddings(copy_on_disk, costs.scale_projection())
    assert row["bytes"] is None and row["source"].startswith("not estimated"), row


def test_each_split_is_stored_at_the_side_its_readers_need(paper, monkeypatch):
    """config/paper.yaml: ImageNet's train and val splits, read by the audit's CLIP embedding
    alone, are stored at the encoder's input side (diagnostics.encoder.clip_image_size, 224
    px); its test split, read by the published weights' evaluation, at the dataset's 480 px.
    The range rule's settings, the storage table and its saving say so. Planted: an
    experiment that trains on ImageNet needs its train and val splits at 480 px, and a
    backbone encoder (prepared from the stored copy as its training was) shrinks nothing."""
    from imagenot.plan import costs

    monkeypatch.setattr(costs, "model_facts", lambda models: dict.fromkeys(models, _FACTS))
    assert readers.split_sizes(paper, "imagenet") == {"train": 224, "val": 224, "test": 480}
    assert readers.split_sizes(paper, "cifar10") == dict.fromkeys(("train", "val", "test"), 256)
    assert readers.materialise_settings(paper, "imagenet").split_sizes == {"train": 224, "val": 224}
    assert readers.materialise_settings(paper, "cifar10").split_sizes == {}
    rows = {r["item"]: r for r in costs.storage(paper)}
    train = rows["imagenet train split (1,231,167 images, 224 px)"]
    assert train["bytes"] == sizes.split_bytes(paper, "imagenet", "train", 224)
    assert train["bytes_at_own_side"] / train["bytes"] == pytest.approx((480 / 224) ** 2, 1e-3)
    assert "480 px where a model reads it" in train["source"]
    saving = sum(r["bytes_at_own_side"] - r["bytes"] for r in rows.values() if "side" in r)
    assert 140e9 < saving < 150e9  # ImageNet's train and val at 224 instead of 480 px

    bigger = copy.deepcopy(paper)
    bigger["diagnostics"]["encoder"]["clip_image_size"] = 336
    assert readers.split_sizes(bigger, "imagenet")["train"] == 336

    planted = copy.deepcopy(paper)
    (published,) = [e for e in planted["train"]["experiments"] if e["dataset"] == "imagenet"]
    published.update(weights="trained", space="imagenot_st")
    assert readers.split_sizes(planted, "imagenet") == dict.fromkeys(("train", "val", "test"), 480)
    assert readers.materialise_settings(planted, "imagenet").split_sizes == {}

    backbone = copy.deepcopy(paper)
    backbone["diagnostics"]["encoder"]["kind"] = "backbone"
    assert readers.encoder_side(backbone) is None
    assert readers.split_sizes(backbone, "imagenet")["train"] == 480


_FACTS = {"parameters": 1, "features": 1}


def test_the_range_job_stores_each_split_at_its_side(tmp_path):
    """A range job with split_sizes {"train": 8} writes its training images at 8 px and the
    other splits at image_size (16 px), and records the sides in its part manifest's settings;
    without split_sizes every split is at image_size."""
    import tarfile

    from conftest import materialise

    root = _two_class_folder(tmp_path / "folder")
    common = {"image_size": 16, "test_per_class": 2, "val_per_class": 1}

    def sides(out: Path) -> dict[str, set[int]]:
        found: dict[str, set[int]] = {}
        for shard in sorted((out / "shards").glob("*.tar")):
            with tarfile.open(shard) as tar:
                for member in tar.getmembers():
                    if member.name.endswith(".jpg"):
                        image = Image.open(io.BytesIO(tar.extractfile(member).read()))
                        found.setdefault(shard.name.split("-")[0], set()).add(image.size[0])
        return found

    materialise("imagefolder", root, tmp_path / "small", split_sizes={"train": 8}, **common)
    materialise("imagefolder", root, tmp_path / "same", **common)
    assert sides(tmp_path / "small") == {"train": {8}, "val": {16}, "test": {16}}
    assert sides(tmp_path / "same") == {"train": {16}, "val": {16}, "test": {16}}


def test_a_split_side_field_left_empty_keeps_the_settings_text(paper):
    """``split_sizes`` and ``clip_image_size`` are left out of a job's settings JSON while empty
    (imagenot.core.settings.omitted_when), so a run whose splits are all stored at ``image_size``
    keeps its jobs' settings text, and is not rematerialised; set, they are written and read
    back."""
    import dataclasses
    import json

    from imagenot.acquire.settings import MaterialiseSettings
    from imagenot.core.settings import parse, to_json
    from imagenot.diagnostics.settings import EmbedSettings

    demo = load_config(REPO / "config" / "config.yaml")
    plain = MaterialiseSettings.from_config(demo, "fashion_mnist")
    assert "split_sizes" not in json.loads(to_json(plain))
    assert parse(MaterialiseSettings, to_json(plain)) == plain
    smaller = dataclasses.replace(plain, split_sizes={"train": 32})
    assert json.loads(to_json(smaller))["split_sizes"] == {"train": 32}
    assert parse(MaterialiseSettings, to_json(smaller)) == smaller
    backbone = EmbedSettings.from_config(demo, "test")
    assert "clip_image_size" not in json.loads(to_json(backbone))
    clip = EmbedSettings.from_config(paper, "test")
    assert json.loads(to_json(clip))["clip_image_size"] == clip.clip_image_size == 224
    # a field without the mark is written even when empty
    assert "clip_model" in json.loads(to_json(backbone))
