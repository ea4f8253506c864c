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


def draw(acc: pd.DataFrame, dataset: str, protocol: str, opts: Options, style: Style):
    """Scatter with OLS line and confidence band; slope and adjusted R^2 in the legend."""
    import matplotlib.pyplot as plt

    rows = fit_rows(acc, dataset, protocol, opts)
    pct = round(opts.confidence * 100)
    with paper_style(style):
        fig, ax = plt.subplots(figsize=(style.column_in, style.column_in * 0.9))
        all_x = np.concatenate([r["x"] for r in rows])
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
        std = rows[0]
        for m, x, y in zip(std["models"], std["x"], std["y"], strict=True):
            ax.annotate(
                m, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=style.font_size - 2
            )
        if not len(all_x):
            ax.text(
                0.5,
                0.5,
                "no model with an\nImageNet accuracy",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
        lo, hi = ax.get_ylim()
        ax.set_ylim(max(lo, 0.0), min(hi, 100.0))
        ax.set_xlabel(imagenet_x_label(opts))
        ax.set_ylabel(f"{nice(label_of(dataset, protocol))} top-1 (%)")
        axis_note = "" if opts.axis == "linear" else f", {opts.axis} fit"
        ax.set_title(f"OLS with {pct}% band{axis_note}")
        ax.legend(frameon=False, loc="upper left")
    return fig
