"""Figures a journal accepts: display names, labels by their own points, figures of a page's
proportions, the diagnostics in the one style, the workflow's slope chart of rank changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from imagenot.analyse.checks import validate_table
from imagenot.analyse.rankings import rankings_report
from imagenot.analyse.settings import RankingsSettings
from imagenot.core.config import ConfigError, load_config, validate_config
from imagenot.core.figure_style import BOX_STYLE, PAGE_RATIO
from imagenot.core.settings import Style
from imagenot.figures import layout, names, report
from imagenot.figures.settings import Options


def small_style(**changes) -> Style:
    return dataclasses.replace(Style.schema_defaults(), dpi=40, **changes)


# ------------------------------------------------------------------------- display names


@pytest.mark.parametrize(
    "key, shown",
    [
        ("resnet_mini", "ResNet-mini"),
        ("fashion_mnist", "Fashion-MNIST"),
        ("cifar10", "CIFAR-10"),
        ("vgg19", "VGG-19"),
        ("efficientnet_v2_l", "EfficientNet-V2-L"),
        ("imagenot", "ImageNot"),
        ("my_data", "My-data"),
    ],
)
def test_a_key_without_a_display_name_is_shown_readably(key, shown):
    assert names.readable(key) == shown


def test_display_names_come_from_the_config_and_the_model_registry(repo_root, monkeypatch):
    from imagenot.train import registry

    config = load_config(repo_root / "config" / "config.yaml")
    opts = Options.from_config(config)
    assert opts.dataset("fashion_mnist") == "Fashion-MNIST"  # derived from the key
    assert opts.dataset("fashion_mnist/ft-imagenet") == "Fashion-MNIST, FT from ImageNet"
    assert opts.model("resnet_mini") == "ResNet-mini"
    config["datasets"]["imagenot"]["display_name"] = "ImageNot (demo)"
    spec = dataclasses.replace(registry.MODELS["resnet_mini"], display_name="ResNet-10")
    monkeypatch.setitem(registry.MODELS, "resnet_mini", spec)
    opts = Options.from_config(validate_config(config))
    assert opts.dataset("imagenot") == "ImageNot (demo)"
    assert opts.dataset("fashion_mnist/tl-imagenot") == "Fashion-MNIST, TL from ImageNot (demo)"
    assert opts.model("resnet_mini") == "ResNet-10"
    config["datasets"]["imagenot"]["display_name"] = ""  # a name must say something
    with pytest.raises(ConfigError, match="display_name"):
        validate_config(config)


# -------------------------------------------------------------------------- point labels


label_problems = layout.label_problems


def crowded_axes():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.7, 3.3))
    rng = np.random.default_rng(4)
    # two tight clusters of five and a few loners: the demo's five models twice over
    x = np.concatenate([34 + rng.normal(0, 0.15, 5), 31 + rng.normal(0, 0.15, 5), [30, 35.5]])
    y = np.concatenate([26 + rng.normal(0, 0.3, 5), 23 + rng.normal(0, 0.3, 5), [22, 27.5]])
    ax.plot(x, y, "o", markersize=4)
    ax.set_xlim(29.5, 36)
    ax.set_ylim(21, 28.5)
    layout.freeze(fig)
    labels = [layout.PointLabel(f"model_{i}_mini", float(a), float(b)) for i, (a, b) in
              enumerate(zip(x, y, strict=True))]  # fmt: skip
    return fig, ax, labels


def test_point_labels_cover_no_marker_and_sit_nearest_their_own_point():
    import matplotlib.pyplot as plt

    fig, ax, labels = crowded_axes()
    placed = layout.place_point_labels(ax, labels, 6)
    assert len(placed) >= 6  # most are named
    assert label_problems(ax, placed) == []
    plt.close(fig)


def test_the_label_check_catches_a_label_by_another_point():
    """Planted: the first model's label written, without a leader line, just beside the
    second model's point (how a reader swaps two names)."""
    import matplotlib.pyplot as plt

    fig, ax, labels = crowded_axes()
    a, b = labels[0], labels[1]
    bx, by = b.x, b.y
    t = ax.annotate(a.text, (a.x, a.y), xytext=(bx, by), textcoords="data", fontsize=6)
    t.set_position((bx, by))
    problems = label_problems(ax, [t])
    assert any("covers a marker" in p or "times farther" in p for p in problems)
    plt.close(fig)


def demo_accuracy(models: list[str], seed: int) -> pd.DataFrame:
    """ST accuracies of the demo's models on its three datasets (500 test images each, so
    error bars of about four points), drawn at random from ``seed``: points that crowd."""
    rng = np.random.default_rng(seed)
    quality = rng.uniform(25, 60, len(models))
    rows = [
        {"model": m, "dataset": d, "protocol": "st", "seed": 0, "transform": "Identity"}
        | {"accuracy": round(float(np.clip(q + lift + rng.normal(0, 3), 1, 99)) * 5) / 5}
        | {"n": 500}
        for d, lift in (("imagenet", 0), ("imagenot", 0), ("fashion_mnist", 20))
        for m, q in zip(models, quality, strict=True)
    ]
    return validate_table(pd.DataFrame(rows), scale_of={"*": "percent"})


CROWDED_SEEDS = (27, 33, 35, 36, 38, 39)
"""Seeds of :func:`demo_accuracy` whose points lie close, under long error bars."""


def test_fit_figures_label_each_point_unambiguously_with_the_demo_s_names(repo_root):
    """The workflow's accuracy_vs_imagenet and the toolbox's accuracy_vs_reference, drawn
    with the demo's display names over several crowded seeds: every label is placed, none
    covers a marker or crosses an error bar, and each without a leader line is clearly nearer
    its own point than any other (layout.label_problems)."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Annotation

    from imagenot.figures.accuracy_vs_imagenet import draw

    config = load_config(repo_root / "config" / "config.yaml")
    opts = Options.from_config(config)
    style = dataclasses.replace(Style.from_config(config), dpi=72)
    models = config["train"]["models"]
    for seed in CROWDED_SEEDS:
        acc = demo_accuracy(models, seed)
        fig = draw(acc, opts, style, dataset="imagenot", protocol="st")
        table = acc[acc["protocol"] == "st"][["model", "dataset", "accuracy", "n"]]
        table = table.assign(model=table["model"].map(opts.model))
        settings = RankingsSettings.hand_typed(reference="imagenet", reps=0)
        toolbox = report.accuracy_vs_reference(rankings_report(table, settings), style)
        for f in (fig, toolbox):
            for ax in (ax for ax in f.axes if ax.get_visible() and ax.axison):
                placed = [t for t in ax.texts if isinstance(t, Annotation)]
                assert len(placed) >= len(models) - 1, seed  # a label may find no room
                assert layout.label_problems(ax) == [], seed
            assert layout.layout_problems(f) == [], seed
            plt.close(f)


def test_the_label_check_catches_an_ambiguous_label_and_one_across_an_error_bar():
    """Planted, each alone: a label without a leader line only 1.2 times farther from another
    point than from its own (a reader may pair it with either), and one written across
    another point's error bar; the same label far enough from both passes."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 3), dpi=72)  # a pixel a point
    ax.set_xlim(0, 216)
    ax.set_ylim(0, 216)
    ax.set_position([0, 0, 1, 1])  # data units are points
    ax.plot([50, 50], [50, 72], "o", markersize=2)
    layout.freeze(fig)

    def label(x, y):
        return ax.annotate("name", (50, 50), xytext=(x, y), textcoords="data", fontsize=6,
                           va="bottom", ha="left")  # fmt: skip

    t = label(60, 56)  # its box 10 points right of its point and 6 above it
    box = layout.text_extent(t, fig.canvas.get_renderer())
    own = layout._distance(box, ax.transData.transform((50, 50)))
    other = layout._distance(box, ax.transData.transform((50, 72)))
    assert 1.0 < other / own < layout.OWN_POINT_MARGIN
    assert any("1.5 times farther" in p for p in layout.label_problems(ax))
    t.remove()
    t = label(60, 20)
    assert layout.label_problems(ax) == []
    ax.errorbar([70], [30], yerr=[[20], [20]], fmt="none", capsize=0)  # through the label
    assert layout.label_problems(ax) == ["'name' crosses an error bar"]
    plt.close(fig)


# -------------------------------------------------------------------- page proportions


def many_datasets_report(k: int, models: int = 30):
    rng = np.random.default_rng(k)
    quality = rng.uniform(40, 90, models)
    rows = [
        {"model": f"resnet{i}_a_rather_long_model_name_{i}", "dataset": f"dataset_{j}"}
        | {"accuracy": round(float(np.clip(q - 3 * j + rng.normal(0, 3), 1, 99)), 2), "n": 10_000}
        for j in range(k)
        for i, q in enumerate(quality)
    ]
    settings = RankingsSettings.hand_typed(reference="dataset_0", reps=0)
    return rankings_report(validate_table(pd.DataFrame(rows)), settings)


@pytest.mark.parametrize("k", [6, 20])
def test_toolbox_figures_have_a_page_s_proportions_however_many_datasets(k, tmp_path, monkeypatch):
    """The rankings figure of 6 and of 20 datasets (each of 30 models, default --top 40), and
    the rank changes and accuracy panels of 6: a grid of panels in pages no taller than a
    page's text block, every dataset on one, no text over another or off the page; the report
    writes the pages as NAME, NAME_2, ..."""
    import matplotlib.pyplot as plt

    rep = many_datasets_report(k)
    style = small_style()
    draws = [report.rankings_figure]
    if k == 6:
        draws += [report.rank_changes, report.accuracy_vs_reference]
    for draw in draws:
        drawn = draw(rep, style)
        figs = drawn if isinstance(drawn, list) else [drawn]
        titles = []
        for fig in figs:
            width, height = fig.get_size_inches()
            assert width == pytest.approx(6.75) and height <= width * PAGE_RATIO + 0.01
            assert layout.layout_problems(fig) == [], draw.__name__
            titles += [ax.get_title(loc=loc) for ax in fig.axes for loc in ("center", "right")]
            plt.close(fig)
        shown = {d for d in rep.datasets if any(t.startswith(d) for t in titles)}
        expected = set(rep.datasets if draw is report.rankings_figure else rep.compared())
        assert shown == expected, draw.__name__
        assert (len(figs) == 1) == (k == 6), draw.__name__  # 20 datasets take pages
    if k == 20:
        monkeypatch.setattr(report, "REPORT_FIGURES", {"rankings": "x:y"})
        monkeypatch.setattr(report, "REPORT_TABLES", {})
        monkeypatch.setattr("imagenot.core.registries.resolve", lambda code: report.rankings_figure)
        written = report.write_report(rep, tmp_path, style)
        stems = [p.rsplit("/", 1)[-1] for p in written]
        pages = ["", *(f"_{n}" for n in range(2, len(stems) // 2 + 1))]
        assert len(pages) > 1
        assert stems == [f"rankings{s}.{e}" for s in pages for e in ("pdf", "png")]


# --------------------------------------------------------------------------- diagnostics


def diagnostics_figures(style: Style):
    from imagenot.diagnostics import figures

    rng = np.random.default_rng(0)
    wnids = np.array([f"n{i:08d}" for i in range(40)])
    curation = (
        {"wnid": wnids, "score": rng.uniform(0.2, 0.4, 40)},
        {"wnid": np.repeat(wnids, 5), "similarity": rng.uniform(0.1, 0.5, 200)},
    )
    two = {"ImageNot": 0, "ImageNet (LAIONet-style stand-in)": 1}
    return {
        "class_depth": figures.class_depth_figure({k: rng.integers(3, 12, 50) for k in two}, style),
        "siblings": figures.siblings_figure({k: rng.integers(0, 40, 50) for k in two}, style),
        "caption_similarity": figures.caption_similarity_figure({k: curation for k in two}, style),
        "image_similarity": figures.image_similarity_figure(
            {
                k: {"intra": rng.uniform(0.3, 0.6, 20), "inter": rng.uniform(0, 0.3, 20)}
                for k in two
            },
            style,
        ),
    }


def test_diagnostics_figures_share_the_style_and_keep_their_text_inside(tmp_path):
    """Every diagnostics figure: no title cut, no text over another, at most the text width,
    black medians, whole-number ticks on a count axis, the PNG at the style's resolution."""
    import matplotlib.pyplot as plt
    from PIL import Image

    from imagenot.core.figure_style import save

    style = dataclasses.replace(Style.schema_defaults(), dpi=72)
    for name, fig in diagnostics_figures(style).items():
        assert layout.layout_problems(fig) == [], name
        width, height = fig.get_size_inches()
        assert width <= style.width_in + 0.01 and height <= width * PAGE_RATIO, name
        for ax in fig.axes:
            assert not ax.spines["top"].get_visible(), name  # the one frame
        if name in ("siblings", "image_similarity"):
            medians = [line for line in fig.axes[0].lines if line.get_color() == "k"]
            boxes = 2 if name == "siblings" else 4  # two sources (intra and inter each)
            assert len(medians) == boxes and BOX_STYLE["medianprops"]["color"] == "k", name
        if name == "caption_similarity":
            ticks = fig.axes[1].get_yticks()
            assert np.allclose(ticks, np.round(ticks)), ticks  # a count of classes
        save(fig, tmp_path / f"{name}.pdf", tmp_path / f"{name}.png", style.dpi)
        with Image.open(tmp_path / f"{name}.png") as im:
            assert im.info["dpi"][0] == pytest.approx(72, abs=0.5)
        plt.close(fig)


def test_the_layout_check_catches_a_clipped_title():
    """Planted: a title wider than its figure (how a box-plot title was cut at "(inter")."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    ax.set_title("per-class image similarity: within a class (intra) and across classes (inter)")
    assert any("leaves the figure" in p for p in layout.layout_problems(fig))
    plt.close(fig)


# ------------------------------------------------------------- the workflow's slope chart


def test_workflow_rank_changes_link_each_model_across_datasets(repo_root):
    """rank_changes_st: each model's rank on the reference (left) and on another dataset
    (right) among their common models; a planted swap of two models shows as two crossing
    lines of +1 and -1."""
    import matplotlib.pyplot as plt

    from imagenot.figures.rank_changes import draw_st

    config = load_config(repo_root / "config" / "config.yaml")
    opts = Options.from_config(config)
    models = config["train"]["models"]
    base = dict(zip(models, (30.0, 32.0, 34.0, 36.0, 38.0), strict=True))
    swapped = {**base, models[1]: base[models[2]], models[2]: base[models[1]]}
    rows = [
        {"model": m, "dataset": d, "protocol": "st", "seed": 0, "transform": "Identity"}
        | {"accuracy": acc[m], "n": 500}
        for d, acc in (("imagenet", base), ("imagenot", swapped))
        for m in models
    ]
    acc = validate_table(pd.DataFrame(rows), scale_of={"*": "percent"})
    fig = draw_st(acc, opts, small_style())
    ax = fig.axes[0]
    assert ax.get_title().startswith("ImageNot, Kendall τ-b")
    texts = {t.get_text() for t in ax.texts}
    assert f"{opts.model(models[1])} (+1)" in texts and f"{opts.model(models[2])} (-1)" in texts
    assert f"{opts.model(models[4])} (+0)" in texts
    assert not any(m in t for t in texts for m in models)  # display names, never keys
    assert layout.layout_problems(fig) == []
    plt.close(fig)
