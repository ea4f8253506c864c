"""Accuracy on one dataset and protocol against ImageNet accuracy (published, or
the models' own on the reference dataset; config ``analyse.imagenet_axis``), with OLS fits."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from imagenot.analyse import stats
from imagenot.analyse.table import dataset_label
from imagenot.core.figure_style import HIGHLIGHT, paper_style
from imagenot.core.settings import Style
from imagenot.figures import layout
from imagenot.figures.data import Options, cells, imagenet_x
from imagenot.figures.names import show_protocol

SERIES = (("standard", "Standard", "C0", "o"), ("robust", "Robust", "C3", "s"))


def fit_rows(acc: pd.DataFrame, dataset: str, protocol: str, opts: Options) -> list[dict]:
    """Per series: the models (and their display ``names``), x (ImageNet accuracy), y, error
    bars and the OLS fit (or None)."""
    pub = imagenet_x(acc, opts)
    label = dataset_label(dataset, protocol)
    rows = []
    for variant, name, color, marker in SERIES:
        c = cells(acc, variant, opts)
        models = [m for m in c.models_of(label) if m in pub]
        x = np.array([pub[m] for m in models])
        y = c.accuracy(models, label)
        lo, hi = c.bounds(models, label)
        row = {"variant": variant, "name": name, "color": color, "marker": marker}
        row.update(models=models, names=[opts.model(m) for m in models], x=x, y=y, lo=lo, hi=hi)
        rows.append(row | {"fit": fit_or_none(x, y, opts.axis, opts.confidence)})
    return rows


def fit_or_none(x: np.ndarray, y: np.ndarray, axis: str, confidence: float):
    """The OLS fit of ``y`` on ``x`` on the scale ``axis``, or None where it cannot be fitted
    (no slope is drawn where none is fitted)."""
    return stats.ols_fit(x, y, axis, confidence) if stats.fit_problem(x, axis) is None else None


LABEL_MAX_MODELS = 15
"""Points are named up to this many models; beyond, only the highlighted ones (the figure's
``highlight``). A name goes where it overlaps no other (:func:`imagenot.figures.layout.
place_point_labels`), else it is left out."""
TICK_CANDIDATES = (50, 10, 90, 1, 99, 20, 80, 30, 70, 40, 60, 5, 95, 2, 98, 0.1, 99.9, 0.5, 99.5,
                   0.01, 99.99)  # fmt: skip
"""Accuracies (percent) where a probit or logit axis may put a tick, as Taori et al. and
Miller et al. label theirs; the first that fit are taken (50 first, then 10 and 90, ...)."""


def accuracy_scale(ax, axis: str, x: np.ndarray, y: np.ndarray) -> None:
    """Draw ``ax`` on the fitting scale ``axis`` (``analyse.axis``): on ``probit`` or ``logit``
    the positions are ``stats.to_axis`` of the accuracies (norm.ppf of the fraction for probit),
    the ticks are accuracies in percent, so that the OLS line on that scale is a straight line
    (Taori et al., Miller et al.); limits a little beyond the data (``x``, ``y``: every plotted
    value, error bars included). ``linear`` keeps percent axes, limited to 0-100."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

    if axis == "linear":
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, 0.0), min(hi, 100.0))
        return

    forward, inverse = partial(stats.to_axis, axis=axis), partial(stats.from_axis, axis=axis)
    for values, set_scale, set_lim, which in (
        (x, ax.set_xscale, ax.set_xlim, ax.xaxis),
        (y, ax.set_yscale, ax.set_ylim, ax.yaxis),
    ):
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v)]
        set_scale("function", functions=(forward, inverse))
        if not len(v):
            continue
        t = forward(v)
        pad = max(0.05 * (t.max() - t.min()), 0.05)
        lo, hi = float(inverse(t.min() - pad)), float(inverse(t.max() + pad))
        set_lim(lo, hi)
        span = float(forward(hi) - forward(lo))
        candidates = [c for c in TICK_CANDIDATES if lo <= c <= hi]
        candidates += [float(c) for c in MaxNLocator(5).tick_values(lo, hi) if lo <= c <= hi]
        ticks: list[float] = []
        for c in candidates:  # at least a seventh of the axis apart, on the drawn scale
            if all(abs(forward(c) - forward(t)) >= span / 7 for t in ticks):
                ticks.append(c)
        which.set_major_locator(FixedLocator(sorted(ticks)))
        which.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))
        which.set_minor_locator(NullLocator())


def fit_panel(ax, rows: list[dict], style: Style, *, legend: bool, axis: str) -> list:
    """One panel: per series the points with error bars, the OLS line and its confidence band,
    slope and adjusted R² in the legend, on the fitting scale ``axis``
    (:func:`accuracy_scale`). Shared by the workflow's accuracy-vs-ImageNet figures and
    ``imagenot rankings --report``. Highlighted models (``style.highlight``) are drawn in
    colour. Returns the point labels to place once the figure is laid out
    (:func:`imagenot.figures.layout.place_point_labels`): every model of the first series up
    to :data:`LABEL_MAX_MODELS`, else the highlighted ones.

    ``rows``: dicts with ``name``, ``color``, ``marker``, ``models``, ``x``, ``y``, ``lo``,
    ``hi`` (error bar bounds of y) and ``fit`` (:class:`imagenot.analyse.stats.OLSFit` or None),
    optionally ``names`` (what the point labels say; default: the models).
    """
    all_x = np.concatenate([[], *(r["x"] for r in rows)])
    all_y = np.concatenate([[], *(v for r in rows for v in (r["lo"], r["hi"], r["y"]))])
    many = max((len(r["models"]) for r in rows), default=0) > 200
    highlight = set(style.highlight)
    for r in rows:
        if not len(r["models"]):
            continue
        label = r["name"]
        if r["fit"] is not None:
            s = r["fit"].summary()
            label += f": slope {s['slope']:.2f}, adj. R² {s['adj_r2']:.2f}"
            t = stats.to_axis(all_x, axis)
            pad = max(0.05 * (t.max() - t.min()), 0.05)
            grid = stats.from_axis(np.linspace(t.min() - pad, t.max() + pad, 100), axis)
            mean, lo, hi = r["fit"].band(grid)
            ax.plot(grid, mean, color=r["color"], lw=1)
            ax.fill_between(grid, lo, hi, color=r["color"], alpha=0.15, lw=0)
        else:
            label += " (fit needs ≥ 3 models)"
        look = {"color": r["color"], "label": label}
        if many:  # thousands of models: points only, error bars would hide them
            ax.scatter(r["x"], r["y"], s=3, alpha=0.5, lw=0, **look)
        else:
            yerr = [r["y"] - r["lo"], r["hi"] - r["y"]]
            ax.errorbar(r["x"], r["y"], yerr=yerr, fmt=r["marker"], capsize=1.5, lw=0.8, **look)
        hot = np.array([m in highlight for m in r["models"]], dtype=bool)
        if hot.any():
            ax.scatter(
                r["x"][hot], r["y"][hot], s=22, color=HIGHLIGHT, edgecolor="k", lw=0.5, zorder=3
            )
    if not len(all_x):
        layout.note(ax, "no model with both\naccuracies", va="center")
    accuracy_scale(ax, axis, all_x, all_y)
    if len(all_x) and legend:
        ax.legend(frameon=False, loc="upper left")
    first = rows[0] if rows else {"models": [], "x": [], "y": []}
    models, names = first["models"], first.get("names") or first["models"]
    x, y = (np.asarray(first[k], dtype=float) for k in ("x", "y"))
    hot = [i for i, m in enumerate(models) if m in highlight]
    labels = [layout.PointLabel(names[i], x[i], y[i], HIGHLIGHT, "bold") for i in hot]
    if len(models) <= LABEL_MAX_MODELS:  # then the others, best first
        best = np.argsort(-y, kind="stable")
        labels += [
            layout.PointLabel(names[i], x[i], y[i]) for i in best if models[i] not in highlight
        ]
    return labels


def draw(acc: pd.DataFrame, opts: Options, style: Style, *, dataset: str, protocol: str):
    """Scatter of a dataset's accuracy against ImageNet accuracy, one point per model, with the
    OLS line and its confidence band per series; slope and adjusted R² in the legend."""
    import matplotlib.pyplot as plt

    rows = fit_rows(acc, dataset, protocol, opts)
    shown = opts.dataset(dataset)
    how = show_protocol(protocol, opts.dataset_names)
    published = opts.imagenet_axis == "published"
    against = "published ImageNet" if published else opts.dataset(opts.reference)
    x_label = f"{against} top-1 (%)" + ("" if published else ", ST")
    with paper_style(style):
        fig, ax = plt.subplots(figsize=(style.column_in, style.column_in * 0.9))
        labels = fit_panel(ax, rows, style, legend=True, axis=opts.axis)
        ax.set_xlabel(layout.wrap_text(x_label, style.column_in - 0.5, style.font_size))
        ax.set_ylabel(
            layout.wrap_text(f"{shown} top-1 (%), {how}", style.column_in - 0.6, style.font_size)
        )
        title = f"{shown} ({how}) against {against} accuracy"
        ax.set_title(layout.wrap_text(title, style.column_in - 0.2, style.font_size))
        layout.freeze(fig)
        layout.place_point_labels(ax, labels, style.font_size - 2)
    return fig
