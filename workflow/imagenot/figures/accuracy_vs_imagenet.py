"""Accuracy on one dataset and protocol against ImageNet accuracy (published, or
the models' own on the reference dataset; config ``analyse.imagenet_axis``), with OLS fits."""

from __future__ import annotations

import numpy as np
import pandas as pd

from imagenot.analyse import stats
from imagenot.figures.data import Options, cells, imagenet_x, imagenet_x_label, label_of, nice
from imagenot.figures.style import Style, paper_style

SERIES = (("standard", "Standard", "C0", "o"), ("robust", "Robust", "C3", "s"))


def fit_rows(acc: pd.DataFrame, dataset: str, protocol: str, opts: Options) -> list[dict]:
    """Per series: the models, x (ImageNet accuracy), y, error bars and the OLS fit (or None)."""
    pub = imagenet_x(acc, opts)
    label = label_of(dataset, protocol)
    rows = []
    for variant, name, color, marker in SERIES:
        c = cells(acc, variant, opts)
        models = [m for m in c.models_of(label) if m in pub]
        x = np.array([pub[m] for m in models])
        y = c.accuracy(models, label)
        fit = stats.ols_fit(x, y, opts.axis, opts.confidence) if len(models) >= 3 else None
        rows.append(
            {
                "variant": variant,
                "name": name,
                "color": color,
                "marker": marker,
                "models": models,
                "x": x,
                "y": y,
                "lo": np.array([c.cells[m, label].lo for m in models]),
                "hi": np.array([c.cells[m, label].hi for m in models]),
                "fit": fit,
            }
        )
    return rows


LABEL_MAX_MODELS = 15
"""Points are labelled with model names up to this many models (beyond, labels would overlap)."""


def fit_panel(ax, rows: list[dict], style: Style, legend: bool = True) -> None:
    """One panel: per series the points with error bars, the OLS line and its confidence band,
    slope and adjusted R^2 in the legend (the paper's Figure 8c). Shared by the workflow's
    accuracy-vs-ImageNet figures and ``imagenot rankings --report``.

    ``rows``: dicts with ``name``, ``color``, ``marker``, ``models``, ``x``, ``y``, ``lo``,
    ``hi`` (error bar bounds of y) and ``fit`` (:class:`imagenot.analyse.stats.OLSFit` or None).
    """
    all_x = np.concatenate([r["x"] for r in rows]) if rows else np.array([])
    many = max((len(r["models"]) for r in rows), default=0) > 200
    for r in rows:
        if not len(r["models"]):
            continue
        label = r["name"]
        if r["fit"] is not None:
            s = r["fit"].summary()
            label += f": slope {s['slope']:.2f}, adj. $R^2$ {s['adj_r2']:.2f}"
            grid = np.linspace(all_x.min() - 1, all_x.max() + 1, 100)
            mean, lo, hi = r["fit"].band(grid)
            ax.plot(grid, mean, color=r["color"], lw=1)
            ax.fill_between(grid, lo, hi, color=r["color"], alpha=0.15, lw=0)
        else:
            label += " (fit needs ≥ 3 models)"
        if many:  # thousands of models: points only, error bars would hide them
            ax.scatter(r["x"], r["y"], s=3, color=r["color"], alpha=0.5, lw=0, label=label)
        else:
            ax.errorbar(
                r["x"],
                r["y"],
                yerr=[r["y"] - r["lo"], r["hi"] - r["y"]],
                fmt=r["marker"],
                color=r["color"],
                capsize=1.5,
                lw=0.8,
                label=label,
            )
    first = rows[0] if rows else {"models": []}
    if 0 < len(first["models"]) <= LABEL_MAX_MODELS:
        for m, x, y in zip(first["models"], first["x"], first["y"], strict=True):
            ax.annotate(
                m, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=style.font_size - 2
            )
    if not len(all_x):
        ax.text(
            0.5,
            0.5,
            "no model with both\naccuracies",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
    lo, hi = ax.get_ylim()
    ax.set_ylim(max(lo, 0.0), min(hi, 100.0))
    if len(all_x) and legend:
        ax.legend(frameon=False, loc="upper left")


def draw(acc: pd.DataFrame, opts: Options, style: Style, *, dataset: str, protocol: str):
    """Scatter with OLS line and confidence band; slope and adjusted R^2 in the legend."""
    import matplotlib.pyplot as plt

    rows = fit_rows(acc, dataset, protocol, opts)
    pct = round(opts.confidence * 100)
    with paper_style(style):
        fig, ax = plt.subplots(figsize=(style.column_in, style.column_in * 0.9))
        fit_panel(ax, rows, style)
        ax.set_xlabel(imagenet_x_label(opts))
        ax.set_ylabel(f"{nice(label_of(dataset, protocol))} top-1 (%)")
        axis_note = "" if opts.axis == "linear" else f", {opts.axis} fit"
        ax.set_title(f"OLS with {pct}% band{axis_note}")
    return fig
