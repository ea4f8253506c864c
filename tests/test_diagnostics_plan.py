"""Diagnostics config lookups, tables, caption statistics and figures (no WordNet needed)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.core import paths
from imagenot.core.config import schema_default, validate_config
from imagenot.core.files import INPUT
from imagenot.core.registries import RegistryError
from imagenot.core.settings import Style
from imagenot.diagnostics import captions, figures, plan, table
from imagenot.diagnostics.files import FigureFiles, TableFiles
from imagenot.diagnostics.settings import EmbedSettings, FigureSettings, ImageSimilaritySettings

DEMO_DATASETS = {
    "imagenot": {"kind": "laion", "classes": "discover"},
    "imagenet": {"kind": "laion", "classes": "imagenet"},
    "fashion_mnist": {"kind": "fashion_mnist", "path": "/x"},
}


def config_with(diagnostics=None, datasets=None, runs=None, monkeypatch=None):
    config = {"datasets": datasets or DEMO_DATASETS, "diagnostics": diagnostics or {}}
    validate_config(config)
    if monkeypatch is not None:
        monkeypatch.setattr("imagenot.train.plan.final_runs", lambda _c: runs or [])
    return config


def test_defaults_in_the_schema():
    config = config_with()
    d = config["diagnostics"]
    assert d["reference_dataset"] == "imagenet" and d["class_lists"] == {}
    assert d["encoder"]["kind"] == "backbone"
    assert d["image_similarity"] == {
        "split": "test",
        "max_images_per_class": None,
        "batch_size": 256,
    }


def test_unknown_key_is_refused():
    from imagenot.core.config import ConfigError

    with pytest.raises(ConfigError, match="diagnostics"):
        config_with({"encodr": {}})


def test_demo_targets_without_a_trained_backbone(monkeypatch):
    config = config_with(monkeypatch=monkeypatch)
    assert plan.contrast_datasets(config) == ["imagenot"]
    assert plan.caption_datasets(config) == ["imagenot", "imagenet"]
    assert plan.image_datasets(config) == []  # no final run to take a backbone from
    targets = plan.targets(config)
    assert "results/diagnostics/imagenot/wordnet_stats.json" in targets
    assert "results/tables/diagnostics_imagenot.md" in targets
    assert "results/figures/diagnostics_caption_similarity.png" in targets
    assert not any("image_similarity" in t for t in targets)


def test_backbone_encoder_is_taken_from_the_final_runs(monkeypatch):
    runs = [
        {"dataset": "imagenot", "protocol": "ft-imagenet", "model": "resnet18", "seed": 0},
        {"dataset": "imagenot", "protocol": "st", "model": "tiny", "seed": 0},
        {"dataset": "imagenot", "protocol": "st", "model": "tiny", "seed": 1},
    ]
    config = config_with({"encoder": {"backbone_seed": 1}}, runs=runs, monkeypatch=monkeypatch)
    checkpoint = "results/train/imagenot/st/tiny/final/seed-1/model.safetensors"
    assert plan.encoder_checkpoint(config) == [checkpoint]
    assert EmbedSettings.from_config(config, split="train").kind == "backbone"
    assert plan.encoder_result(config) == [checkpoint.replace("model.safetensors", "result.json")]
    assert plan.image_datasets(config) == ["imagenot", "imagenet"]
    assert "results/figures/diagnostics_image_similarity.pdf" in plan.targets(config)
    inputs = plan.table_inputs(config, "imagenot")
    assert inputs["reference_images"] == "results/diagnostics/imagenet/image_similarity.json"
    assert inputs["reference_captions"] == "results/diagnostics/imagenet/caption_similarity.json"


def test_paper_like_config_with_clip_and_class_lists(monkeypatch):
    datasets = {
        "imagenot": {"kind": "laion", "classes": "discover"},
        "imagenet": {"kind": "imagenet", "path": "/data/ILSVRC2012"},
    }
    diagnostics = {
        "class_lists": {"published": "lists/list.txt"},
        "encoder": {"kind": "clip", "clip_model": "/models/clip"},
        "image_similarity": {"max_images_per_class": 10},
    }
    config = config_with(diagnostics, datasets, monkeypatch=monkeypatch)
    assert plan.wordnet_subjects(config) == ["imagenot", "list-published"]
    assert plan.class_list_file(config, "list-published") == "lists/list.txt"
    assert plan.class_list_file(config, "imagenot") == "results/datasets/imagenot/classes.txt"
    assert plan.caption_datasets(config) == ["imagenot"]  # ILSVRC has no captions
    assert plan.encoder_checkpoint(config) == []
    assert EmbedSettings.from_config(config, split="test") == EmbedSettings(
        kind="clip",
        clip_model="/models/clip",
        split="test",
        batch_size=schema_default("diagnostics.image_similarity.batch_size"),
        clip_image_size=schema_default("diagnostics.encoder.clip_image_size"),
    )
    assert ImageSimilaritySettings.from_config(config).max_images_per_class == 10
    assert plan.similarity_embeddings(config, "imagenot") == (
        "results/diagnostics/imagenot/image_embeddings_test.npz"
    )
    assert plan.encoder_result(config) == []
    assert "reference_captions" not in plan.table_inputs(config, "imagenot")
    assert plan.table_inputs(config, "list-published") == {
        "wordnet": "results/diagnostics/list-published/wordnet_stats.json"
    }
    assert "results/tables/diagnostics_list-published.csv" in plan.targets(config)


def test_one_rule_per_diagnostics_figure_gets_its_inputs_from_the_plan(monkeypatch):
    runs = [{"dataset": "imagenot", "protocol": "st", "model": "tiny", "seed": 0}]
    config = config_with(runs=runs, monkeypatch=monkeypatch)
    assert plan.figures(config) == list(plan.FIGURES)
    roles = FigureFiles.roles(INPUT)
    for name in plan.FIGURES:
        labels = plan.figure_labels(config, name)
        inputs = {role: plan.figure_inputs(config, name, role) for role in roles}
        # every role the figure reads holds one file per label, the others none
        assert labels and any(inputs.values()), name
        assert all(len(paths) in (0, len(labels)) for paths in inputs.values()), name
        settings = FigureSettings.from_config(config, name=name)
        assert (settings.name, settings.reference_name) == (name, "imagenet")
        assert settings.figure_options == Style.from_config(config)  # the workflow's one style
        assert settings.dataset_names["imagenot"] == "ImageNot"
    assert plan.figure_labels(config, "siblings") == ["imagenot"]
    assert plan.figure_inputs(config, "siblings", "tables") == [
        "results/diagnostics/imagenot/wordnet_classes.parquet"
    ]
    assert plan.figure_inputs(config, "siblings", "classes") == []
    assert plan.figure_labels(config, "caption_similarity") == ["imagenot", "imagenet"]
    assert plan.figure_inputs(config, "caption_similarity", "selection") == [
        "results/curate/imagenot/selection.parquet",
        "results/curate/imagenet/selection.parquet",
    ]
    assert plan.figure_inputs(config, "caption_similarity", "tables") == []
    with pytest.raises(
        RegistryError, match="unknown diagnostics figure 'pie'; registered: class_depth"
    ):
        plan.figure_inputs(config, "pie", "tables")


def test_a_shipped_class_list_is_read_from_the_clone_in_any_working_directory(
    tmp_path, monkeypatch
):
    """config/paper.yaml names the authors' lists as resources/class_lists/...: from a working
    directory of its own they are the clone's files (imagenot.core.paths.shipped); a list that the
    working directory holds is its own, and a list found nowhere is left as named, for the check
    to refuse naming the key."""
    shipped = "resources/class_lists/imagenot_classes_2024-05-25.txt"
    mine, absent = "resources/class_lists/mine.txt", "resources/class_lists/absent.txt"
    lists = {"absent": absent, "shipped": shipped, "mine": mine}  # checked in this order
    monkeypatch.chdir(tmp_path)
    (tmp_path / mine).parent.mkdir(parents=True)
    (tmp_path / mine).write_text("n01828556\n")
    config = config_with({"class_lists": lists, "reference_classes": shipped})
    assert plan.class_list_file(config, "list-shipped") == str(paths.CLONE / shipped)
    assert (paths.CLONE / shipped).is_file() and not (tmp_path / shipped).exists()
    assert plan.class_list_file(config, "list-mine") == mine
    assert plan.class_list_file(config, "list-absent") == absent
    assert plan.reference_classes_input(config) == [str(paths.CLONE / shipped)]
    with pytest.raises(ValueError, match=r"diagnostics\.class_lists\.absent: no file "):
        plan.check(config)


def test_reference_classes_input(monkeypatch):
    config = config_with({"reference_classes": "lists/ref.txt"}, monkeypatch=monkeypatch)
    assert plan.reference_classes_input(config) == ["lists/ref.txt"]
    assert plan.reference_classes_input(config_with()) == []


def test_a_table_is_handed_the_statistics_the_config_produces(monkeypatch):
    config = config_with(monkeypatch=monkeypatch)
    roles = TableFiles.roles(INPUT)
    assert set(plan.table_inputs(config, "imagenot")) <= set(roles)
    assert plan.table_input(config, "imagenot", "wordnet") == [
        "results/diagnostics/imagenot/wordnet_stats.json"
    ]
    assert plan.table_input(config, "imagenot", "images") == []  # no encoder: no embeddings


WORDNET_DOC = {
    "classes": dict.fromkeys(
        ("nodes", "edges", "min_depth", "median_depth", "max_depth", "density", "modularity",
         "n_classes", "n_leaf_classes", "n_parents"), 2),
    "reference": dict.fromkeys(
        ("nodes", "edges", "min_depth", "median_depth", "max_depth", "density", "modularity",
         "n_classes", "n_leaf_classes", "n_parents"), 4),
    "synset_overlap": 0.0,
    "parent_overlap": 0.25,
}  # fmt: skip


def test_table_rows_and_ratios():
    rows = table.diagnostics_rows(
        wordnet=WORDNET_DOC,
        captions={"class_score": {"min": 0.8, "mean": 0.9, "median": 0.9, "max": 1.0}},
        reference_captions=None,
        images={"intra_class_similarity": 0.6, "inter_class_similarity": 0.3,
                "intra_inter_ratio": 2.0, "n_images": 10, "encoder": "clip:x"},
        reference_images={"intra_class_similarity": 0.8, "inter_class_similarity": 0.2,
                          "intra_inter_ratio": 4.0, "n_images": 20},
    )  # fmt: skip
    by_metric = {r["metric"]: r for r in rows}
    assert by_metric["nodes"]["ratio"] == 0.5
    assert by_metric["parent_overlap"]["reference"] is None
    assert by_metric["mean over classes"]["ratio"] is None  # no reference curation
    assert by_metric["intra-class image similarity"]["ratio"] == pytest.approx(0.75)
    text = table.to_csv(rows, "imagenot", "imagenet")
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert list(parsed[0]) == ["group", "metric", "imagenot", "imagenet", "ratio"]
    assert len(parsed) == len(rows) == 12 + 4 + 4
    md = table.to_markdown(rows, "imagenot", "imagenet")
    assert md.splitlines()[0] == "| group | metric | imagenot | imagenet | ratio |"
    assert "| WordNet | nodes | 2 | 4 | 0.5 |" in md


@pytest.fixture
def curate_dir(tmp_path):
    d = tmp_path / "curate"
    d.mkdir()
    pq.write_table(pa.table({"wnid": ["n1", "n2"], "score": [0.9, 0.85]}), d / "classes.parquet")
    pq.write_table(
        pa.table(
            {
                "wnid": ["n1", "n1", "n2", "n2", "n2"],
                "similarity": pa.array([0.95, 0.85, 0.9, 0.8, 0.85], pa.float32()),
            }
        ),
        d / "selection.parquet",
    )
    return d


def test_caption_stats(curate_dir):
    stats = captions.caption_stats(
        *captions.read_curation(curate_dir / "classes.parquet", curate_dir / "selection.parquet")
    )
    assert stats["n_classes"] == 2 and stats["n_captions"] == 5
    assert stats["class_score"]["mean"] == pytest.approx(0.875)
    assert stats["class_score"]["min"] == pytest.approx(0.85)
    assert stats["class_mean_selected_similarity"]["max"] == pytest.approx(0.9)
    assert stats["caption_similarity"]["median"] == pytest.approx(0.85)


def test_grouped_quantiles_match_numpy():
    rng = np.random.default_rng(1)
    groups = rng.integers(0, 4, 200).astype(str)
    values = rng.random(200)
    ids, q = figures.grouped_quantiles(groups, values)
    for i, g in enumerate(ids):
        v = np.sort(values[groups == g])
        assert q[i, 0] == v[0] and q[i, 4] == v[-1]
        assert q[i, 2] == v[(len(v) - 1) // 2]


def test_cli_table_and_figures(tmp_path, curate_dir, capsys):
    from imagenot.cli import main

    wordnet = tmp_path / "wordnet.json"
    wordnet.write_text(json.dumps(WORDNET_DOC))
    caption_json = tmp_path / "captions.json"
    assert (
        main(
            [
                "caption-similarity-stats",
                "--classes",
                str(curate_dir / "classes.parquet"),
                "--selection",
                str(curate_dir / "selection.parquet"),
                "--stats",
                str(caption_json),
            ]
        )
        == 0
    )
    out = tmp_path / "t"
    argv = [
        "diagnostics-table",
        "--settings",
        json.dumps({"subject": "a", "reference_name": "b"}),
        "--wordnet",
        str(wordnet),
    ]
    argv += ["--captions", str(caption_json), "--csv", f"{out}.csv", "--md", f"{out}.md"]
    assert main(argv) == 0
    table = (tmp_path / "t.md").read_text()
    assert "caption-gloss similarity" in table
    # a statistic the config does not produce is handed as its flag alone (an empty input)
    empty = ["--images", "--reference-images", "--reference-captions"]
    argv[-4:-4] = empty
    assert main([*argv[:-4], "--csv", f"{out}2.csv", "--md", f"{out}2.md"]) == 0
    assert (tmp_path / "t2.md").read_text() == table

    per_class = tmp_path / "per_class.parquet"
    pq.write_table(
        pa.table({"role": ["classes", "classes", "reference"], "depth": [3, 5, 4],
                  "n_siblings": [0, 10, 3]}), per_class)  # fmt: skip
    sims = tmp_path / "sim.parquet"
    pq.write_table(pa.table({"intra": [0.5, None], "inter": [0.1, 0.2]}), sims)
    # the shared figure style (at a low resolution) and the datasets' display names
    figure_style = {
        "figure_options": {**dataclasses.asdict(Style.schema_defaults()), "dpi": 60},
        "dataset_names": {"a": "Set A"},
    }
    curation = ["--classes", str(curate_dir / "classes.parquet")]
    curation += ["--selection", str(curate_dir / "selection.parquet")]
    for figure, files in [
        ("class_depth", ["--tables", str(per_class), "--classes", "--selection"]),
        ("siblings", ["--tables", str(per_class)]),
        ("caption_similarity", ["--tables", *curation]),
        ("image_similarity", ["--tables", str(sims)]),
    ]:
        pdf, png = tmp_path / f"{figure}.pdf", tmp_path / f"{figure}.png"
        settings = json.dumps({"name": figure, "reference_name": "imagenet", **figure_style})
        argv = ["diagnostics-figure", "--labels", "a", *files, "--settings", settings]
        assert main([*argv, "--pdf", str(pdf), "--png", str(png)]) == 0
        assert pdf.read_bytes()[:4] == b"%PDF" and png.read_bytes()[:4] == b"\x89PNG"
    # a figure handed a file count other than its labels' is refused, naming the role
    argv = ["diagnostics-figure", "--labels", "a", "b", "--tables", str(sims)]
    settings = {"name": "image_similarity", "reference_name": "x", **figure_style}
    argv += ["--settings", json.dumps(settings)]
    assert main([*argv, "--pdf", str(tmp_path / "x.pdf"), "--png", str(tmp_path / "x.png")]) == 2
    assert "--tables: 1 file(s) for 2 label(s) (a b)" in capsys.readouterr().err


@pytest.mark.parametrize("name", plan.FIGURES)
def test_every_diagnostics_figure_has_its_report_caption(repo_root, name):
    from types import SimpleNamespace

    from jinja2 import Environment

    template = (repo_root / "report" / "diagnostics_figure.rst").read_text()
    job = SimpleNamespace(wildcards=SimpleNamespace(name=name), config={})
    text = (
        Environment(trim_blocks=True, lstrip_blocks=True)
        .from_string(template)
        .render(snakemake=job)
    )
    assert len(text.strip()) > 100
