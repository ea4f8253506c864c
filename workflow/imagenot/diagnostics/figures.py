"""Diagnostics figures (matplotlib, Agg): each function takes tables, returns a Figure, drawn in
the style of every figure of the project (:mod:`imagenot.core.figure_style`: paper width, fonts,
frame, box plots, resolution) and checked by the same layout test."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from imagenot.core.figure_style import boxplot, integer_ticks, paper_style
from imagenot.core.io import read_parquet
from imagenot.core.settings import Style
from imagenot.diagnostics.files import FigureFiles
from imagenot.figures.layout import wrap_text

if TYPE_CHECKING:
    from imagenot.diagnostics.settings import FigureSettings


def shown(label: str, names: dict[str, str] | None = None) -> str:
    """The display name of a diagnosed source: a dataset's display name
    (:func:`imagenot.figures.names.show_dataset`), a class list as ``class list NAME``."""
    from imagenot.diagnostics.plan import LIST_PREFIX
    from imagenot.figures.names import show_dataset

    if label.startswith(LIST_PREFIX):
        return f"class list {label[len(LIST_PREFIX) :]}"
    return show_dataset(label, names or {})


def _per_label(labels: list[str], paths: list[str], role: str) -> dict[str, str]:
    """``{label: path}``: one file of ``role`` per label, in order (else an error saying so)."""
    if len(paths) != len(labels):
        raise ValueError(
            f"--{role.replace('_', '-')}: {len(paths)} file(s) for {len(labels)} label(s) "
            f"({' '.join(labels)}); one per label"
        )
    return dict(zip(labels, paths, strict=True))


def draw_wordnet_figure(name: str, labels: list[str], files: FigureFiles, s: FigureSettings):
    """``class_depth`` / ``siblings``: one per-class WordNet table per subject (its ``classes``
    rows; the first table's ``reference`` rows are the reference list)."""
    import pyarrow.compute as pc

    column = "depth" if name == "class_depth" else "n_siblings"
    paths = _per_label(labels, files.tables, "tables")
    tables = {k: read_parquet(path, columns=["role", column]) for k, path in paths.items()}

    def rows(t, role: str) -> np.ndarray:
        return t.filter(pc.equal(t["role"], role))[column].to_numpy()

    series = {shown(k, s.dataset_names): rows(t, "classes") for k, t in tables.items()}
    if tables:  # the subjects, then the reference
        first = next(iter(tables.values()))
        series[shown(s.reference_name, s.dataset_names)] = rows(first, "reference")
    draw = class_depth_figure if name == "class_depth" else siblings_figure
    return draw(series, s.figure_options)


def draw_caption_figure(name: str, labels: list[str], files: FigureFiles, s: FigureSettings):
    """``caption_similarity``: one curation (classes and selection) per dataset."""
    from imagenot.diagnostics.captions import read_curation

    classes = _per_label(labels, files.classes, "classes")
    selection = _per_label(labels, files.selection, "selection")
    curations = {shown(k, s.dataset_names): read_curation(classes[k], selection[k]) for k in labels}
    return caption_similarity_figure(curations, s.figure_options)


def draw_image_figure(name: str, labels: list[str], files: FigureFiles, s: FigureSettings):
    """``image_similarity``: one per-class image-similarity table per dataset."""
    paths = _per_label(labels, files.tables, "tables")
    tables = {
        shown(label, s.dataset_names): read_parquet(path, columns=["intra", "inter"]).to_pandas()
        for label, path in paths.items()
    }
    return image_similarity_figure(tables, s.figure_options)


def _title(ax, text: str, width_in: float, style: Style) -> None:
    """A title wrapped to the axes' share of ``width_in`` (less its y axis labels): centred
    over the axes, it stays inside the figure."""
    ax.set_title(wrap_text(text, width_in - 1.0, style.font_size))


def class_depth_figure(series: dict[str, np.ndarray], style: Style):
    """Grouped bars: fraction of classes at each WordNet depth, one bar per list."""
    import matplotlib.pyplot as plt

    with paper_style(style):
        fig, ax = plt.subplots(figsize=(style.width_in, style.width_in * 0.45))
        all_depths = np.concatenate([np.asarray(v, dtype=int) for v in series.values()])
        lo, hi = (all_depths.min(), all_depths.max()) if all_depths.size else (0, 0)
        depths = np.arange(lo, hi + 1)
        width = 0.8 / max(len(series), 1)
        for i, (label, values) in enumerate(series.items()):
            values = np.asarray(values, dtype=int)
            counts = np.bincount(values - depths[0], minlength=len(depths))[: len(depths)]
            fraction = counts / max(values.size, 1)
            offset = (i - (len(series) - 1) / 2) * width
            ax.bar(depths + offset, fraction, width, label=f"{label} (n={values.size})")
        ax.set_xlabel("class depth in WordNet (shortest path to entity.n.01)")
        ax.set_ylabel("fraction of classes")
        ax.set_xticks(depths)
        integer_ticks(ax.xaxis)
        ax.grid(axis="x", visible=False)
        ax.legend(frameon=False)
        _title(ax, "Depth of the classes in WordNet", style.width_in, style)
    return fig


def _box_figure(data: list[np.ndarray], names, ylabel: str, title: str, style: Style, log=False):
    """Box plots of ``data`` side by side, named ``names(box_in)`` (``box_in``: the inches each
    box's name may take): a column wide for a few, the text width for many."""
    import matplotlib.pyplot as plt

    width = min(style.width_in, max(style.column_in, 0.9 * len(data) + 1.0))
    box_in = (width - 0.8) / max(len(data), 1) - 0.1  # beside the y axis's labels
    with paper_style(style):
        fig, ax = plt.subplots(figsize=(width, style.column_in * 0.9))
        boxplot(ax, data, names(box_in))
        if log:
            ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        _title(ax, title, width, style)
    return fig


def siblings_figure(series: dict[str, np.ndarray], style: Style):
    """Side-by-side box plots of the number of WordNet siblings per class (log scale)."""
    data = [np.asarray(v, dtype=float) + 1 for v in series.values()]

    def names(box_in: float) -> list[str]:
        return [
            wrap_text(f"{k} (median {np.median(v) - 1:.0f})", box_in, style.font_size - 1)
            for k, v in zip(series, data, strict=True)
        ]

    ylabel, title = "WordNet siblings per class + 1", "WordNet siblings per class"
    return _box_figure(data, names, ylabel, title, style, log=True)


def grouped_quantiles(groups: np.ndarray, values: np.ndarray, qs=(0.0, 0.25, 0.5, 0.75, 1.0)):
    """(group ids, quantiles array G x len(qs)) of ``values`` per group: the lower-index
    quantile (no interpolation) of each group's sorted values."""
    import pandas as pd

    by = pd.Series(np.asarray(values, dtype=np.float64)).groupby(np.asarray(groups).astype(str))
    q = by.quantile(list(qs), interpolation="lower").unstack()
    return q.index.to_numpy(), q.to_numpy()


def caption_similarity_figure(curations: dict[str, tuple[dict, dict]], style: Style):
    """Left: per-class caption similarity distributions (classes sorted by score: min-max band,
    quartile band, median); right: histogram of class scores with min/mean/median/max."""
    import matplotlib.pyplot as plt

    with paper_style(style):
        fig, (left, right) = plt.subplots(1, 2, figsize=(style.width_in, style.width_in * 0.5))
        for label, (classes, selection) in curations.items():
            ids, quant = grouped_quantiles(selection["wnid"], selection["similarity"])
            score = dict(zip(classes["wnid"].astype(str), classes["score"], strict=True))
            order = np.argsort([-score.get(i, np.nan) for i in ids], kind="stable")
            x = np.linspace(0, 1, len(ids)) if len(ids) > 1 else np.zeros(len(ids))
            q = quant[order]
            (line,) = left.plot(x, q[:, 2], lw=1, label=f"{label}: median")
            left.fill_between(x, q[:, 0], q[:, 4], color=line.get_color(), alpha=0.15, lw=0)
            left.fill_between(x, q[:, 1], q[:, 3], color=line.get_color(), alpha=0.3, lw=0)
            s = np.asarray(classes["score"], dtype=float)
            spread = f"min {s.min():.3f}, mean {s.mean():.3f},\nmedian {np.median(s):.3f}"
            right.hist(s, bins=30, alpha=0.6, label=f"{label}: {spread}, max {s.max():.3f}")
        left.set(xlabel="classes by class score (fraction)", ylabel="caption-gloss similarity")
        left.legend(frameon=False, loc="lower left")
        right.set(xlabel="class score", ylabel="classes")
        integer_ticks(right.yaxis)
        right.legend(frameon=False, loc="upper left")
        half = style.width_in / 2
        _title(left, "Similarity of the selected captions per class", half, style)
        _title(right, "Class scores (mean of the top captions)", half, style)
    return fig


def image_similarity_figure(tables: dict, style: Style):
    """Side-by-side box plots of per-class intra- and inter-class image similarity (``tables``:
    per label, its ``intra`` and ``inter`` columns: a data frame or a dict of arrays)."""
    boxes = [
        (k, kind, np.asarray(t[kind], dtype=float))
        for k, t in tables.items()
        for kind in ("intra", "inter")
    ]

    def names(box_in: float) -> list[str]:
        out = []
        for label, kind, v in boxes:
            mean = f" ({np.nanmean(v):.3f})" if np.isfinite(v).any() else ""
            name = wrap_text(label, box_in, style.font_size - 1)
            out.append(f"{name}\n{wrap_text(kind + mean, box_in, style.font_size - 1)}")
        return out

    data = [v[np.isfinite(v)] for _, _, v in boxes]
    title = "Image similarity per class: within the class (intra) and with other classes (inter)"
    return _box_figure(data, names, "mean inner product of\nnormalised embeddings", title, style)
