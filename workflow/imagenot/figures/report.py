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
from imagenot.figure_style import paper_style, save
from imagenot.figures import accuracy_vs_imagenet, rankings, tables
from imagenot.figures.registry import REPORT_FIGURES, REPORT_TABLES
from imagenot.settings import Style

ACCURACY_PAGE_ROWS = 4
"""Rows of panels on a page of the accuracy-vs-reference figure."""


def _pages(items: list, per_page: int) -> list[list]:
    """``items`` in pages of at most ``per_page`` (one empty page for none)."""
    return [items[i : i + per_page] for i in range(0, len(items), per_page)] or [[]]


def _page_note(k: int, n: int) -> str:
    return f" (page {k} of {n})" if n > 1 else ""


def _compared(rep: RankingsReport) -> list[str]:
    return [d for d, e in rep.compared().items() if e.delta_rank is not None]


def _grid(
    n: int, style: Style, aspect: float, ncols: int | None = None, height: float | None = None
):
    """Panels in rows of two (up to four datasets) or three (or ``ncols``), each ``aspect``
    high per wide (or ``height`` inches)."""
    import matplotlib.pyplot as plt

    if ncols is None:
        ncols = 1 if n <= 1 else 2 if n <= 4 else 3
    nrows = max(1, math.ceil(n / ncols))
    row = height if height is not None else style.width_in / ncols * aspect
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(style.width_in, row * nrows + 0.4), squeeze=False
    )
    for ax in axes.flat[n:]:
        ax.set_axis_off()
    return fig, list(axes.flat)


def _columns(n: int) -> int:
    return 1 if n <= 1 else 2 if n <= 4 else 3


def accuracy_vs_reference(rep: RankingsReport, style: Style):
    """One panel per dataset: accuracy against reference accuracy, OLS line, its band (on
    probit or logit axes when the report was fitted on them); pages of at most
    :data:`ACCURACY_PAGE_ROWS` rows of panels."""
    names = _compared(rep)
    pages = _pages(names, _columns(len(names)) * ACCURACY_PAGE_ROWS)
    figs = [
        _accuracy_page(rep, style, page, _page_note(k, len(pages)), _columns(len(names)))
        for k, page in enumerate(pages, 1)
    ]
    return figs if len(figs) > 1 else figs[0]


def _accuracy_page(rep: RankingsReport, style: Style, names: list[str], note: str, ncols: int):
    from imagenot.figures import layout

    ref = rep.reference
    pct = f"{rep.confidence * 100:g}%"
    with paper_style(style):
        fig, axes = _grid(len(names), style, 0.85, ncols=ncols)
        panel_in = style.width_in / ncols
        ref_acc = rep.datasets[ref].accuracy
        pending = []
        for ax, d in zip(axes, names, strict=False):
            e = rep.datasets[d]
            models = [m for m in e.accuracy if m in ref_acc]
            x = np.array([ref_acc[m] for m in models], dtype=float)
            y = np.array([e.accuracy[m] for m in models], dtype=float)
            iv = np.array([e.interval[m] for m in models], dtype=float).reshape(-1, 2)
            ok = stats.fit_problem(x, rep.axis) is None  # no slope drawn where none is fitted
            fit = stats.ols_fit(x, y, rep.axis, rep.confidence) if ok else None
            row = {"name": "models", "color": "C0", "marker": "o", "models": models}
            row.update(x=x, y=y, lo=iv[:, 0], hi=iv[:, 1], fit=fit)
            labels = accuracy_vs_imagenet.fit_panel(ax, [row], style, legend=False, axis=rep.axis)
            pending.append((ax, labels))
            ax.set_xlabel(layout.fit_text(f"{ref} (%)", panel_in - 0.6, style.font_size))
            ax.set_ylabel(layout.fit_text(f"{d} (%)", panel_in * 0.85 - 0.4, style.font_size))
            title = layout.fit_text(d, panel_in - 0.2, style.font_size)
            if fit is not None:
                s = fit.summary()
                title += f"\nslope {s['slope']:.2f}, adj. R² {s['adj_r2']:.2f}"
            ax.set_title(title)
        if not names:
            axes[0].text(0.5, 0.5, "only the reference", ha="center", transform=axes[0].transAxes)
        axis = "" if rep.axis == "linear" else f", {rep.axis} axes"
        fig.suptitle(
            layout.wrap_text(
                f"Accuracy on each dataset against accuracy on {ref}, one point per model: "
                f"OLS line with {pct} band{axis}{note}",
                style.width_in - 0.2,
                style.font_size,
            )
        )
        layout.freeze(fig)
        for ax, labels in pending:
            layout.place_point_labels(ax, labels, style.font_size - 2)
    return fig


def rank_changes(rep: RankingsReport, style: Style):
    """Slope chart per dataset (:func:`imagenot.figures.rank_changes.draw_slopes`): each
    model's rank on the reference (left) and on the dataset (right); climbs in blue, falls in
    red; the largest changes and the highlighted models named. Pages of a page's height
    (:func:`imagenot.figures.rank_changes.per_page`)."""
    from imagenot.figures.rank_changes import SlopePanel, draw_slopes, per_page

    ref = rep.reference
    panels = []
    for d in _compared(rep):
        e = rep.datasets[d]
        models = list(e.delta_rank)
        # ranks among the common models: the delta rank is their difference
        right = stats.ranks(np.array([e.accuracy[m] for m in models], dtype=float))
        left = right + np.array([e.delta_rank[m] for m in models], dtype=float)
        tau = e.correlations.kendall_tau if e.correlations is not None else None
        panels.append(SlopePanel(d, ref, d, models, models, left, right, tau))
    pages = _pages(panels, per_page(panels, style))
    figs = [
        draw_slopes(page, style, ref, _page_note(k, len(pages))) for k, page in enumerate(pages, 1)
    ]
    return figs if len(figs) > 1 else figs[0]


def rankings_figure(rep: RankingsReport, style: Style):
    """Accuracy with its error bar per dataset, best first (``rankings.draw_panels``), in
    pages of a page's proportions (``rankings.pages``)."""
    panels = []
    for d, e in rep.datasets.items():
        models = list(e.accuracy)
        iv = np.array([e.interval[m] for m in models], dtype=float).reshape(-1, 2)
        kinds = set(e.interval_kind.values())
        mean = np.array([e.accuracy[m] for m in models], dtype=float)
        lo = np.where(np.isfinite(iv[:, 0]), iv[:, 0], mean)
        hi = np.where(np.isfinite(iv[:, 1]), iv[:, 1], mean)
        panels.append(rankings.Panel(d, models, mean, lo, hi, kinds, title=d))  # as written
    title = "Accuracy of each model on each dataset, best first"
    pages = rankings.pages(panels, style, per_row=3)
    figs = [
        rankings.draw_panels(page, style, title + _page_note(k, len(pages)), per_row=3)
        for k, page in enumerate(pages, 1)
    ]
    return figs if len(figs) > 1 else figs[0]


def error_correlations(rep: RankingsReport, style: Style):
    """Heat map of Spearman rho between model errors on every pair of datasets (the values
    written in the cells while they fit)."""
    import matplotlib.pyplot as plt

    from imagenot.figures import layout

    names = list(rep.datasets)
    k = len(names)
    rho = np.eye(k)
    pos = {d: i for i, d in enumerate(names)}
    for row in rep.error_spearman:
        i, j = pos[row.a], pos[row.b]
        rho[i, j] = rho[j, i] = np.nan if row.rho is None else row.rho
    cell_fs = style.font_size - 2
    shown = layout.fit_texts(names, 1.6, style.font_size - 1)
    with paper_style(style):
        side = min(style.width_in - 0.8, 1.5 + 0.55 * k)
        fig, ax = plt.subplots(figsize=(side + 0.8, side + 0.3))
        im = ax.imshow(rho, cmap="RdBu_r", vmin=-1, vmax=1)
        # the plotting area is what remains of the side beside the longest name
        cell_in = (side - layout.text_width_in(shown, style.font_size - 1) * 0.75 - 0.4) / k
        numbers = cell_in > layout.text_width_in(["-0.00"], cell_fs) * 1.15
        for i in range(k):
            for j in range(k):
                if numbers and np.isfinite(rho[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{rho[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=cell_fs,
                        color="w" if abs(rho[i, j]) > 0.6 else "k",
                    )
        ax.set_xticks(range(k), shown, rotation=90)
        ax.set_yticks(range(k), shown)
        ax.grid(False)
        title = "Spearman ρ of model errors" + ("" if numbers else " (values: the report's JSON)")
        ax.set_title(layout.wrap_text(title, side, style.font_size))
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def write_report(rep: RankingsReport, outdir: str | os.PathLike, style: Style) -> list[str]:
    """Write every report figure (PDF and PNG, at ``style.dpi``; a figure of several pages as
    ``NAME``, ``NAME_2``, ...) and table (CSV and Markdown) into ``outdir``."""
    from imagenot.registries import resolve

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, code in REPORT_FIGURES.items():
        drawn = resolve(code)(rep, style)
        figs = drawn if isinstance(drawn, list) else [drawn]
        for k, fig in enumerate(figs, 1):
            stem = name if k == 1 else f"{name}_{k}"
            pdf, png = out / f"{stem}.pdf", out / f"{stem}.png"
            save(fig, pdf, png, style.dpi)
            written += [str(pdf), str(png)]
    for name, code in REPORT_TABLES.items():
        build = resolve(code)
        df, title = build(rep), build.__doc__.strip()
        csv, md = out / f"{name}.csv", out / f"{name}.md"
        tables.write(df, csv, md, title)
        written += [str(csv), str(md)]
    return written
