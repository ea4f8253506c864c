"""Figures and tables: config lookups, every figure kind and table from synthetic results."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import synthetic_runs as synthetic
from PIL import Image

from imagenot.analyse.accuracy import (
    accuracy_table,
    read_per_image,
    read_published,
    read_robustness,
)
from imagenot.analyse.settings import AccuracySettings, RankingsSettings
from imagenot.cli import main
from imagenot.core.config import load_config, validate_config
from imagenot.core.settings import Style, to_json
from imagenot.figures import plan
from imagenot.figures.settings import FigureSettings, Options
from imagenot.figures.tables import to_markdown

DATASETS = ["imagenet", "imagenot", "fashion_mnist"]


@pytest.fixture(scope="module")
def config(repo_root):
    config = load_config(repo_root / "config" / "config.yaml")
    # the synthetic runs use the paper's model names, which have published accuracies
    config["analyse"].update(baseline_model="alexnet", imagenet_axis="published")
    return config


@pytest.fixture(scope="module")
def runs():
    return synthetic.runs_grid(
        DATASETS,
        synthetic.MODELS,
        (0,),
        downstream="fashion_mnist",
        sources=("imagenet", "imagenot"),
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory, runs):
    """accuracy.csv, per-image results and both rankings reports of a synthetic run."""
    root = tmp_path_factory.mktemp("results")
    paths = synthetic.robustness_results(
        root, runs, transforms=synthetic.TRANSFORMS, n_images=150, seed=0
    )
    published = synthetic.published_accuracy(root / "published.csv", synthetic.MODELS)
    acc = accuracy_table(
        read_robustness(paths),
        read_published(published),
        AccuracySettings.from_config(validate_config({})),
    )
    acc_path = root / "accuracy.csv"
    acc.to_csv(acc_path, index=False)
    per_image = root / "per_image.parquet"
    read_per_image(paths, per_image_beside(paths)).to_parquet(per_image)
    reports = []
    for variant in ("standard", "robust"):
        out = root / f"rankings_{variant}.json"
        argv = ["rankings", str(acc_path), "--variant", variant, "--reference", "imagenet"]
        argv += ["--baseline", "alexnet", "--per-image", str(per_image)]
        assert main([*argv, "--bootstrap-reps", "50", "--out", str(out)]) == 0
        reports.append(str(out))
    return {"root": root, "accuracy": acc_path, "rankings": reports, "paths": paths}


def options(config: dict) -> dict:
    """The shared figure/table options the rules build, as the JSON they pass."""
    opts = json.loads(to_json(Options.from_config(config)))
    assert opts["datasets"] == DATASETS and opts["reference"] == "imagenet"
    return opts


def style(config: dict) -> dict:
    """The rules' figure style (analyse.figure_options), at a low dpi for speed."""
    return {**dataclasses.asdict(Style.from_config(config)), "dpi": 60}


def figure_options(config: dict, **changes) -> Options:
    """The Options the rules build, with ``changes``."""
    return dataclasses.replace(Options.from_config(config), **changes)


def figure_argv(config, kind, dataset=None, protocol=None) -> list[str]:
    settings = {"kind": kind, "dataset": dataset, "protocol": protocol}
    settings |= {"options": options(config), "figure_options": style(config)}
    return ["figure", "--settings", json.dumps(settings)]


def table_argv(config, name) -> list[str]:
    return ["table", "--settings", json.dumps({"table": name, "options": options(config)})]


def test_accuracy_table_follows_the_contract(results, runs):
    acc = pd.read_csv(results["accuracy"])
    assert list(acc.columns[:6]) == [
        "model",
        "dataset",
        "protocol",
        "seed",
        "transform",
        "accuracy",
    ]
    assert {"n", "ci_low", "ci_high", "imagenet_top1"} <= set(acc.columns)
    runs_rows = acc[acc.protocol != "published"]
    assert len(runs_rows) == len(runs) * len(synthetic.TRANSFORMS)
    published = acc[acc.dataset == "imagenet_published"]
    assert set(published.model) == set(synthetic.MODELS)
    assert (published.accuracy == published.imagenet_top1).all()
    alex = runs_rows[runs_rows.model == "alexnet"]
    assert np.allclose(alex.imagenet_top1, 56.522)
    per = pd.read_parquet(results["root"] / "per_image.parquet")
    # per-image correctness reproduces each accuracy
    g = per.groupby(["model", "dataset", "protocol", "transform"])["correct"].mean() * 100
    merged = runs_rows.set_index(["model", "dataset", "protocol", "transform"])["accuracy"]
    assert np.allclose(g.reindex(merged.index), merged)


def test_figure_outputs_come_from_config(config, runs):
    from imagenot.train import plan as train_plan

    assert plan.outputs(config, []) == []
    assert plan.targets(config) == plan.outputs(config, train_plan.final_runs(config))
    names = plan.figure_names(config, runs)
    assert names[:5] == [
        "rankings_st",
        "rank_changes_st",
        "rankings_transfer",
        "rank_changes_transfer",
        "relative_progress",
    ]
    assert "accuracy_vs_imagenet_fashion_mnist_ft-imagenot" in names
    assert "per_transform_imagenot" in names
    out = plan.outputs(config, runs)
    assert plan.ACCURACY in out and "results/analyse/rankings_robust.json" in out
    assert "results/tables/agreement.md" in out and "results/figures/rankings_st.png" in out
    # a config without the downstream protocols or the baseline asks for fewer figures
    st_only = [r for r in runs if r["protocol"] == "st" and r["model"] != "alexnet"]
    fewer = plan.figure_names(config, st_only)
    assert "rankings_transfer" not in fewer and "relative_progress" not in fewer
    assert "rank_changes_transfer" not in fewer
    cfg = copy.deepcopy(config)
    cfg["analyse"]["figures"] = ["per_transform"]
    assert plan.figure_names(cfg, runs) == [f"per_transform_{d}" for d in DATASETS]


def test_figure_names_parse_back_unambiguously(config, runs):
    protocols = "|".join(re.escape(p) for p in sorted({r["protocol"] for r in runs}))
    for run in runs:
        name = plan.figure_name("accuracy_vs_imagenet", run["dataset"], run["protocol"])
        assert plan.figure_request(name, protocols) == {
            "kind": "accuracy_vs_imagenet",
            "dataset": run["dataset"],
            "protocol": run["protocol"],
        }
    # underscores in both the dataset and the source of the protocol
    request = plan.figure_request(
        "accuracy_vs_imagenet_my_data_tl-fashion_mnist", "tl-fashion_mnist"
    )
    assert (request["dataset"], request["protocol"]) == ("my_data", "tl-fashion_mnist")
    assert (
        plan.figure_request("per_transform_fashion_mnist", protocols)["dataset"] == "fashion_mnist"
    )
    assert plan.figure_request("rankings_st", protocols) == {
        "kind": "rankings_st",
        "dataset": None,
        "protocol": None,
    }
    # the rule's wildcard takes every planned name and none of the diagnostics figures
    wildcard = re.compile(plan.figure_regex())
    for name in plan.figure_names(config, runs):
        assert wildcard.fullmatch(name), name
        assert plan.figure_name(**plan.figure_request(name, protocols)) == name
    assert not wildcard.fullmatch("diagnostics_class_depth")
    with pytest.raises(ValueError, match="protocol"):
        plan.figure_request("accuracy_vs_imagenet_imagenot", protocols)
    with pytest.raises(ValueError, match="no registered figure kind"):
        plan.figure_request("diagnostics_siblings", protocols)


def test_reference_falls_back_to_published_accuracies(config, runs):
    from imagenot.analyse.settings import reference

    assert reference(config, runs) == "imagenet"
    no_imagenet = [r for r in runs if r["dataset"] != "imagenet"]
    assert reference(config, no_imagenet) == "imagenet_published"
    assert plan.dataset_order(config)[:2] == ["imagenet", "imagenot"]
    settings = RankingsSettings.from_config(config, variant="robust")
    assert settings.reps == config["analyse"]["bootstrap"]["reps"]
    assert settings.reference == reference(config)
    assert plan.code("rankings_transfer").endswith("figures/rankings.py")


# One request of each workflow figure kind
FIGURE_REQUESTS = [
    ("rankings_st",),
    ("rank_changes_st",),
    ("rankings_transfer",),
    ("rank_changes_transfer",),
    ("relative_progress",),
    ("accuracy_vs_imagenet", "imagenot", "st"),
    ("per_transform", "imagenet"),
]


@pytest.mark.parametrize(
    "request_", [*FIGURE_REQUESTS, ("accuracy_vs_imagenet", "fashion_mnist", "tl-imagenet")]
)
def test_every_figure_kind_writes_pdf_and_png(config, results, tmp_path, request_):
    pdf, png = tmp_path / "f.pdf", tmp_path / "f.png"
    kind = request_[0]
    cmd = [*figure_argv(config, *request_), str(results["accuracy"])]
    assert main([*cmd, "--pdf", str(pdf), "--png", str(png)]) == 0
    assert pdf.read_bytes()[:5] == b"%PDF-"
    with Image.open(png) as im:
        width, height = im.size
    # paper size: the text width (6.75 in) or a column (0.55 of it), at the requested dpi
    inches = {"relative_progress": 6.75 * 0.55 * 1.3, "accuracy_vs_imagenet": 6.75 * 0.55}
    assert width == pytest.approx(60 * inches.get(kind, 6.75), abs=2)
    assert height > 100
    assert not list(tmp_path.glob(".*"))  # no temporary files left behind


def test_the_transfer_slope_chart_links_each_protocol_to_the_reference(config, results):
    """rank_changes_transfer: a panel per FT/TL protocol of the synthetic transfer runs, each
    model's ST rank on the reference (left) joined to its rank after transfer (right), with
    Kendall tau-b in the title; the ranks are those of the accuracies."""
    import matplotlib.pyplot as plt

    from imagenot.analyse.stats import ranks
    from imagenot.figures import rank_changes
    from imagenot.figures.data import cells, load_accuracy, transfer_labels

    acc = load_accuracy(results["accuracy"])
    opts = figure_options(config)
    fig = rank_changes.draw_transfer(acc, opts, Style.from_config(config))
    labels = transfer_labels(acc, opts)
    assert len(labels) == 4  # FT and TL from imagenet and from imagenot
    shown = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert len(shown) == len(labels)
    c = cells(acc, "standard", opts)
    for ax, label in zip(shown, labels, strict=True):
        assert ax.get_title().startswith(opts.dataset(label)) and "τ-b" in ax.get_title()
        left, right = (t.get_text() for t in ax.get_xticklabels())  # shortened to fit
        assert left == opts.dataset("imagenet") and right[:5] == opts.dataset(label)[:5]
        (lines,) = ax.collections[:1]
        models = c.models_of(label)
        expected = np.stack(
            [ranks(c.accuracy(models, "imagenet")), ranks(c.accuracy(models, label))]
        )
        drawn = np.array([seg[:, 1] for seg in lines.get_segments()]).T
        assert np.allclose(np.sort(drawn, axis=1), np.sort(expected, axis=1))
    assert "fine-tuning (FT)" in fig._suptitle.get_text()
    plt.close(fig)


def test_fit_in_figure_matches_the_fits_table(config, results, tmp_path):
    from imagenot.figures import accuracy_vs_imagenet
    from imagenot.figures.data import load_accuracy

    acc = load_accuracy(results["accuracy"])
    rows = accuracy_vs_imagenet.fit_rows(acc, "imagenot", "st", figure_options(config))
    assert [r["variant"] for r in rows] == ["standard", "robust"]
    csv, md = tmp_path / "fits.csv", tmp_path / "fits.md"
    cmd = [
        *table_argv(config, "fits"),
        str(results["accuracy"]),
        "--rankings",
        *results["rankings"],
    ]
    assert main([*cmd, "--csv", str(csv), "--md", str(md)]) == 0
    fits = pd.read_csv(csv).set_index(["dataset", "protocol", "variant"])
    assert fits.loc[("imagenot", "st", "standard"), "slope"] == pytest.approx(
        rows[0]["fit"].summary()["slope"]
    )
    assert fits.loc[("imagenot", "st", "robust"), "adj_r2"] == pytest.approx(
        rows[1]["fit"].summary()["adj_r2"]
    )


@pytest.mark.parametrize("name", plan.WORKFLOW_TABLES)
def test_every_table_writes_csv_and_markdown(config, results, tmp_path, name):
    csv, md = tmp_path / f"{name}.csv", tmp_path / f"{name}.md"
    argv = table_argv(config, name)
    if name == "published_check":  # the synthetic ImageNet runs stand for published weights
        settings = json.loads(argv[2])
        settings["options"]["published_datasets"] = ["imagenet"]
        argv[2] = json.dumps(settings)
    cmd = [*argv, str(results["accuracy"]), "--rankings", *results["rankings"]]
    assert main([*cmd, "--csv", str(csv), "--md", str(md)]) == 0
    df = pd.read_csv(csv)
    assert len(df) > 0
    lines = md.read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| "))
    assert lines[header + 1].startswith("|---")
    assert len(lines) - header - 2 == len(df)
    if name == "rankings":
        report = json.loads(Path(results["rankings"][0]).read_text())
        ranks = df.set_index("model")
        for label, entry in report["datasets"].items():
            for model, rank in entry["ranks"].items():
                assert ranks.loc[model, label] == rank
        # config order: datasets (then their protocols), the published accuracies last
        assert list(ranks.columns[:3]) == ["imagenet", "imagenot", "fashion_mnist"]
        assert ranks.columns[-1] == "imagenet_published"


def test_markdown_escapes_and_formats():
    df = pd.DataFrame({"a|b": ["x|y"], "rank": [2.0], "r": [0.12345], "acc": [71.234]})
    md = to_markdown(df)
    assert "| x\\|y | 2 | 0.123 | 71.23 |" in md


def test_reference_axis_for_models_without_published_weights(results, config, runs, tmp_path):
    """The demo's models have no published ImageNet accuracy: the x-axis is the reference's."""
    from imagenot.figures import accuracy_vs_imagenet
    from imagenot.figures.data import load_accuracy

    acc = load_accuracy(results["accuracy"])
    acc["imagenet_top1"] = np.nan
    opts = figure_options(config, imagenet_axis="reference")
    rows = accuracy_vs_imagenet.fit_rows(acc, "imagenot", "st", opts)
    ref = acc[(acc["dataset"] == "imagenet") & (acc["transform"] == "Identity")].set_index("model")
    assert rows[0]["x"] == pytest.approx(ref.loc[rows[0]["models"], "accuracy"].to_numpy())
    assert rows[0]["fit"] is not None
    cfg = copy.deepcopy(config)
    cfg["analyse"]["imagenet_axis"] = "reference"
    names = plan.figure_names(cfg, runs)
    assert "accuracy_vs_imagenet_imagenet_st" not in names  # the reference against itself
    assert "accuracy_vs_imagenet_imagenot_st" in names
    assert Options.from_config(cfg).imagenet_axis == "reference"


def test_settings_name_a_wrong_key_and_an_unregistered_kind(config, results, tmp_path, capsys):
    out = ["--pdf", str(tmp_path / "f.pdf"), "--png", str(tmp_path / "f.png")]
    settings = {
        "kind": "rankings_st",
        "dataset": None,
        "protocol": None,
        "options": options(config),
        "figure_options": style(config),
    }
    bad = {**settings, "options": {**options(config), "colour": "red"}}
    with pytest.raises(SystemExit, match=r"--settings: unknown key\(s\) \['options\.colour'\]"):
        main(["figure", "--settings", json.dumps(bad), str(results["accuracy"]), *out])
    bad = {**settings, "figure_options": {**style(config), "dpi": "high"}}
    with pytest.raises(SystemExit, match=r"--settings: key figure_options\.dpi must be an integer"):
        main(["figure", "--settings", json.dumps(bad), str(results["accuracy"]), *out])
    bad = {**settings, "figure_options": {**style(config)}}
    del bad["figure_options"]["font_size"]
    with pytest.raises(
        SystemExit, match=r"--settings: missing key\(s\) \['figure_options\.font_size'\]"
    ):
        main(["figure", "--settings", json.dumps(bad), str(results["accuracy"]), *out])
    with pytest.raises(SystemExit, match="not registered"):
        wrong = {**settings, "kind": "pie_chart"}
        main(["figure", "--settings", json.dumps(wrong), str(results["accuracy"]), *out])
    rule = FigureSettings.from_config(config, figure="per_transform_imagenot")
    assert (rule.kind, rule.dataset, rule.protocol) == ("per_transform", "imagenot", None)


@pytest.mark.parametrize("kind", [*plan.WORKFLOW_FIGURES, "a_plugin_kind"])
def test_every_registered_figure_has_its_report_caption(config, repo_root, kind):
    """report/figure.rst, the one figure rule's caption, says something for every kind (rendered
    as Snakemake renders captions: Jinja with the job's params and the config)."""
    from types import SimpleNamespace

    from jinja2 import Environment

    template = (repo_root / "report" / "figure.rst").read_text()
    request = {"kind": kind, "dataset": "imagenot", "protocol": "st"}
    job = SimpleNamespace(params=SimpleNamespace(figure=request), config=config)
    text = (
        Environment(trim_blocks=True, lstrip_blocks=True)
        .from_string(template)
        .render(snakemake=job)
    )
    assert len(text.strip()) > 100 and config["description"] in text


def many_models_accuracy(models: int) -> pd.DataFrame:
    """An accuracy.csv of a run with ``models`` models of 40-60 character names (and alexnet,
    the baseline): ST on three datasets, FT and TL on fashion_mnist, four transformations,
    the published rows; every accuracy a count of its test set."""
    from imagenot.analyse.synthetic import long_model_names

    rng = np.random.default_rng(5)
    names = ["alexnet", *long_model_names(models - 1, seed=5)]
    quality = dict(zip(names, rng.uniform(0.2, 0.9, models), strict=True))
    published = {m: round(q * 50_000 * 0.95) / 500 for m, q in quality.items()}
    labels = [(d, "st") for d in DATASETS] + [("fashion_mnist", "ft-imagenet")]
    labels += [("fashion_mnist", "tl-imagenet")]
    rows = []
    for (dataset, protocol), m, (t, transform) in itertools.product(
        labels, names, enumerate(synthetic.TRANSFORMS)
    ):
        p = np.clip(quality[m] - 0.1 * t + rng.normal(0, 0.05), 0.01, 0.99)
        rows.append(
            {"model": m, "dataset": dataset, "protocol": protocol, "seed": 0}
            | {"transform": transform, "accuracy": round(p * 500) / 5, "n": 500}
            | {"imagenet_top1": published[m]}
        )
    for m in names:
        rows.append(
            {"model": m, "dataset": "imagenet_published", "protocol": "published", "seed": 0}
            | {"transform": "Identity", "accuracy": published[m], "n": 50_000}
            | {"imagenet_top1": published[m]}
        )
    return pd.DataFrame(rows)


def demo_accuracy(models: list[str]) -> pd.DataFrame:
    """An accuracy.csv of the demo's models: ST on three datasets, four transformations, every
    accuracy a count of a 500-image test set."""
    rng = np.random.default_rng(3)
    rows = [
        {"model": m, "dataset": d, "protocol": "st", "seed": 0, "transform": t}
        | {"accuracy": round((30 + 5 * i + rng.normal(0, 1)) * 5) / 5, "n": 500}
        for d in DATASETS
        for i, m in enumerate(models)
        for t in synthetic.TRANSFORMS
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("request_", FIGURE_REQUESTS, ids=lambda r: r[0])
def test_every_workflow_figure_is_readable_with_the_demo_s_names(repo_root, tmp_path, request_):
    """The demo config as it is (its baseline model and display names, its style's dpi): each
    figure kind keeps every text inside the figure and off the others."""
    import matplotlib.pyplot as plt

    from imagenot.core.registries import resolve
    from imagenot.figures.data import load_accuracy
    from imagenot.figures.layout import layout_problems
    from imagenot.figures.registry import WORKFLOW_FIGURES

    demo = load_config(repo_root / "config" / "config.yaml")
    path = tmp_path / "accuracy.csv"
    demo_accuracy(demo["train"]["models"]).to_csv(path, index=False)
    opts, style_ = Options.from_config(demo), Style.from_config(demo)
    assert opts.model(opts.baseline_model) != opts.baseline_model  # a display name is drawn
    request = dict(zip(("dataset", "protocol"), request_[1:], strict=False))
    fig = resolve(WORKFLOW_FIGURES[request_[0]].code)(load_accuracy(path), opts, style_, **request)
    assert layout_problems(fig) == [], request_
    plt.close(fig)


@pytest.mark.parametrize("models", [5, 150])
@pytest.mark.parametrize("request_", FIGURE_REQUESTS, ids=lambda r: r[0])
def test_every_workflow_figure_is_readable_with_long_names(config, tmp_path, models, request_):
    """Each workflow figure kind, on a run of 5 and of 150 models with real-length
    names and a highlighted model, draws no text over another and none outside the figure;
    with the probit axis the fit figure draws probit axes."""
    import matplotlib.pyplot as plt

    from imagenot.core.registries import resolve
    from imagenot.figures.data import load_accuracy
    from imagenot.figures.layout import layout_problems
    from imagenot.figures.registry import WORKFLOW_FIGURES

    path = tmp_path / "accuracy.csv"
    many_models_accuracy(models).to_csv(path, index=False)
    acc = load_accuracy(path)
    kind = request_[0]
    request = dict(zip(("dataset", "protocol"), request_[1:], strict=False))
    hot = sorted(set(acc["model"]))[1]
    style_ = dataclasses.replace(Style.from_config(config), dpi=60, highlight=[hot])
    for axis in ("linear", "probit") if kind == "accuracy_vs_imagenet" else ("linear",):
        opts = figure_options(config, axis=axis)
        with warnings.catch_warnings():  # "constrained_layout not applied" and its kin
            warnings.simplefilter("error", UserWarning)
            fig = resolve(WORKFLOW_FIGURES[kind].code)(acc, opts, style_, **request)
            assert layout_problems(fig) == [], (kind, models, axis)
        if axis == "probit":
            assert fig.axes[0].get_xscale() == "function"
        plt.close(fig)


def test_a_run_at_chance_below_one_percent_is_read_as_percent(config, results, tmp_path):
    """A dataset of 1,000 classes at chance scores 0.1%: the workflow's accuracy.csv is in
    percent, so the figures and the rankings rule read it so rather than ask for a scale."""
    from imagenot.figures.data import load_accuracy

    acc = pd.read_csv(results["accuracy"])
    low = acc["dataset"] == "imagenot"
    acc.loc[low, "accuracy"] = 100 / acc.loc[low, "n"]  # one image right
    acc.loc[low, ["ci_low", "ci_high"]] = [0.0, 4.0]
    path = tmp_path / "accuracy.csv"
    acc.to_csv(path, index=False)
    assert load_accuracy(path)["accuracy"][low.to_numpy()].max() < 1
    settings = RankingsSettings.from_config(config, variant="standard")
    argv = ["rankings", str(path), "--settings", to_json(settings), "--out", str(tmp_path / "r")]
    assert main(argv) == 0


def per_image_beside(robustness_paths):
    """The per-image results the synthetic evaluation writes beside each robustness file."""
    from pathlib import Path

    from imagenot.evaluate.paths import PER_IMAGE

    return [Path(p).with_name(Path(PER_IMAGE).name) for p in robustness_paths]
