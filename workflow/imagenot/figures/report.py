"""``imagenot rankings TABLE --report DIR``: every figure and table for any results table.

Everything is drawn from the rankings report (:func:`imagenot.analyse.rankings.rankings_report`)
alone, so a table with only ``model, dataset, accuracy`` gets the same figures as the
workflow's run: the accuracy-vs-reference panels and the error-bar rankings are drawn by the
functions the workflow's figure rules use (``accuracy_vs_imagenet.fit_panel``,
``rankings.draw_panels``), the statistics table by ``tables.agreement_rows``. Names and
descriptions come from :mod:`imagenot.figures.registry`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from imagenot.analyse import stats
from imagenot.analyse.report import RankingsReport
from imagenot.figures import accuracy_vs_imagenet, rankings, tables
from imagenot.figures.registry import REPORT_FIGURES, REPORT_TABLES
from imagenot.figures.style import Style, paper_style, save

LINE_LABELS = 12
"""Rank-change lines labelled per panel: the largest climbs and falls."""


def _compared(rep: RankingsReport) -> list[str]:
    return [d for d, e in rep.compared().items() if e.delta_rank is not None]


def _grid(n: int, style: Style, aspect: float):
    """Panels in rows of two (up to four datasets) or three, each ``aspect`` high per wide."""
    import matplotlib.pyplot as plt

    ncols = 1 if n <= 1 else 2 if n <= 4 else 3
    nrows = max(1, math.ceil(n / ncols))
    height = style.width_in / ncols * aspect * nrows + 0.4
    fig, axes = plt.subplots(nrows, ncols, figsize=(style.width_in, height), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_axis_off()
    return fig, list(axes.flat)


def accuracy_vs_reference(rep: RankingsReport, style: Style):
    """One panel per dataset: accuracy against reference accuracy, OLS line, its band."""
    ref = rep.reference
    names = _compared(rep)
    pct = f"{rep.confidence * 100:g}%"
    with paper_style(style):
        fig, axes = _grid(len(names), style, 0.85)
        ref_acc = rep.datasets[ref].accuracy
        for ax, d in zip(axes, names, strict=False):
            e = rep.datasets[d]
            models = [m for m in e.accuracy if m in ref_acc]
            x = np.array([ref_acc[m] for m in models], dtype=float)
            y = np.array([e.accuracy[m] for m in models], dtype=float)
            iv = np.array([e.interval[m] for m in models], dtype=float).reshape(-1, 2)
            fit = stats.ols_fit(x, y, rep.axis, rep.confidence) if len(models) >= 3 else None
            row = {"name": "models", "color": "C0", "marker": "o", "models": models}
            row.update(x=x, y=y, lo=iv[:, 0], hi=iv[:, 1], fit=fit)
            accuracy_vs_imagenet.fit_panel(ax, [row], style, legend=False)
            ax.set_xlabel(f"{ref} (%)")
            ax.set_ylabel(f"{d} (%)")
            title = d
            if fit is not None:
                s = fit.summary()
                title += f"\nslope {s['slope']:.2f}, adj. $R^2$ {s['adj_r2']:.2f}"
            ax.set_title(title)
        if not names:
            axes[0].text(0.5, 0.5, "only the reference", ha="center", transform=axes[0].transAxes)
        axis = "" if rep.axis == "linear" else f", {rep.axis} fit"
        fig.suptitle(f"Accuracy against {ref}: OLS line with {pct} band{axis}")
    return fig


def rank_changes(rep: RankingsReport, style: Style):
    """Slope chart per dataset: each model's rank on the reference (left) and on the dataset
    (right); climbs in blue, falls in red, the largest changes labelled."""
    from matplotlib.collections import LineCollection

    ref = rep.reference
    names = _compared(rep)
    with paper_style(style):
        fig, axes = _grid(len(names), style, 1.1)
        for ax, d in zip(axes, names, strict=False):
            e = rep.datasets[d]
            delta = e.delta_rank
            models = list(delta)
            # ranks among the common models: the delta rank is their difference
            right = stats.ranks(np.array([e.accuracy[m] for m in models], dtype=float))
            left = right + np.array([delta[m] for m in models], dtype=float)
            change = left - right
            colors = np.where(change > 0, "C0", np.where(change < 0, "C3", "0.6"))
            alpha = 0.9 if len(models) <= 50 else 0.25
            segs = np.stack(
                [
                    np.stack([np.zeros_like(left), left], 1),
                    np.stack([np.ones_like(right), right], 1),
                ],
                1,
            )
            ax.add_collection(LineCollection(segs, colors=colors, linewidths=0.8, alpha=alpha))
            top = np.argsort(-np.abs(change), kind="stable")[:LINE_LABELS]
            for i in top if len(models) > LINE_LABELS else range(len(models)):
                ax.annotate(
                    f"{models[i]} ({change[i]:+g})",
                    (1, right[i]),
                    xytext=(3, 0),
                    textcoords="offset points",
                    va="center",
                    fontsize=style.font_size - 2.5,
                )
            ax.set_xlim(-0.05, 1.6)
            ax.set_ylim(len(models) + 0.5, 0.5)
            ax.set_xticks([0, 1], [ref, d])
            ax.set_ylabel("rank (1 = best)")
            ax.grid(False)
            tau = e.correlations.kendall_tau if e.correlations is not None else None
            ax.set_title(d + (f", tau-b {tau:.2f}" if tau is not None else ""))
        if not names:
            axes[0].text(0.5, 0.5, "only the reference", ha="center", transform=axes[0].transAxes)
        fig.suptitle(f"Rank changes against {ref} (blue: climbs, red: falls)")
    return fig


def rankings_figure(rep: RankingsReport, style: Style):
    """Accuracy with its error bar per dataset, best first (``rankings.draw_panels``)."""
    panels = []
    for d, e in rep.datasets.items():
        models = list(e.accuracy)
        iv = np.array([e.interval[m] for m in models], dtype=float).reshape(-1, 2)
        kinds = set(e.interval_kind.values())
        mean = np.array([e.accuracy[m] for m in models], dtype=float)
        lo = np.where(np.isfinite(iv[:, 0]), iv[:, 0], mean)
        hi = np.where(np.isfinite(iv[:, 1]), iv[:, 1], mean)
        panels.append(rankings.Panel(d, models, mean, lo, hi, kinds))
    return rankings.draw_panels(panels, style, "Rankings", per_row=3)


def error_correlations(rep: RankingsReport, style: Style):
    """Heat map of Spearman rho between model errors on every pair of datasets."""
    import matplotlib.pyplot as plt

    names = list(rep.datasets)
    k = len(names)
    rho = np.eye(k)
    pos = {d: i for i, d in enumerate(names)}
    for row in rep.error_spearman:
        i, j = pos[row.a], pos[row.b]
        rho[i, j] = rho[j, i] = np.nan if row.rho is None else row.rho
    with paper_style(style):
        side = min(style.width_in, 1.5 + 0.55 * k)
        fig, ax = plt.subplots(figsize=(side + 0.8, side))
        im = ax.imshow(rho, cmap="RdBu_r", vmin=-1, vmax=1)
        for i in range(k):
            for j in range(k):
                if np.isfinite(rho[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{rho[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=style.font_size - 2,
                        color="w" if abs(rho[i, j]) > 0.6 else "k",
                    )
        ax.set_xticks(range(k), names, rotation=45, ha="right")
        ax.set_yticks(range(k), names)
        ax.grid(False)
        ax.set_title("Spearman rho of model errors")
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def write_report(
    rep: RankingsReport, outdir: str | os.PathLike, *, dpi: int, style: Style | None = None
) -> list[str]:
    """Write every report figure (PDF and PNG) and table (CSV and Markdown) into ``outdir``."""
    from imagenot.config import schema_default
    from imagenot.registries import resolve

    if style is None:
        options = "analyse.figure_options"
        style = Style(
            width_in=schema_default(f"{options}.width_in"),
            font_size=schema_default(f"{options}.font_size"),
            dpi=dpi,
        )
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, code in REPORT_FIGURES.items():
        fig = resolve(code)(rep, style)
        pdf, png = out / f"{name}.pdf", out / f"{name}.png"
        save(fig, pdf, png, dpi)
        written += [str(pdf), str(png)]
    for name, code in REPORT_TABLES.items():
        build = resolve(code)
        df, title = build(rep), build.__doc__.strip()
        csv, md = out / f"{name}.csv", out / f"{name}.md"
        tables.write(df, csv, md, title)
        written += [str(csv), str(md)]
    return written
