"""``imagenot rankings TABLE --report DIR``: every figure and table for any results table.

Everything is drawn from the rankings report (:func:`imagenot.analyse.rankings.rankings_report`)
alone, so a table with only ``model, dataset, accuracy`` gets the same figures as the
workflow's run: the accuracy-vs-reference panels and the error-bar rankings are drawn by the
functions the workflow's figure rules use (``accuracy_vs_imagenet.fit_panel``,
``rankings.draw_panels``), the statistics table by ``tables.agreement_rows``. Names and
descriptions come from :mod:`imagenot.figures.registry`.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from imagenot.analyse import stats
from imagenot.analyse.report import RankingsReport
from imagenot.core.figure_style import paper_style, save
from imagenot.core.settings import Style
from imagenot.figures import accuracy_vs_imagenet, layout, rankings, tables
from imagenot.figures.registry import REPORT_FIGURES, REPORT_TABLES

ACCURACY_PAGE_ROWS = 4
"""Rows of panels on a page of the accuracy-vs-reference figure."""


def _drawn(pages: list[list], draw):
    """``draw(page, note)`` of each page: one figure, or the list of them (``note`` numbers
    the pages where there are several)."""
    n = len(pages)
    figs = [draw(page, f" (page {k} of {n})" if n > 1 else "") for k, page in enumerate(pages, 1)]
    return figs if n > 1 else figs[0]


def _compared(rep: RankingsReport) -> list[str]:
    return [d for d, e in rep.compared().items() if e.delta_rank is not None]


def accuracy_vs_reference(rep: RankingsReport, style: Style):
    """One panel per dataset: accuracy against reference accuracy, OLS line, its band (on
    probit or logit axes when the report was fitted on them); pages of at most
    :data:`ACCURACY_PAGE_ROWS` rows of panels."""
    names = _compared(rep)
    ncols = 1 if len(names) <= 1 else 2 if len(names) <= 4 else 3

    pages = layout.pages(names, ncols * ACCURACY_PAGE_ROWS)
    return _drawn(pages, lambda page, note: _accuracy_page(rep, style, page, note, ncols))


def _accuracy_page(rep: RankingsReport, style: Style, names: list[str], note: str, ncols: int):
    ref = rep.reference
    pct = f"{rep.confidence * 100:g}%"
    panel_in = style.width_in / ncols
    with paper_style(style):
        fig, axes = layout.panel_grid(len(names), ncols, style.width_in, panel_in * 0.85, 0.4)
        ref_acc = rep.datasets[ref].accuracy
        pending = []
        for ax, d in zip(axes, names, strict=False):
            e = rep.datasets[d]
            models = [m for m in e.accuracy if m in ref_acc]
            x = np.array([ref_acc[m] for m in models], dtype=float)
            y = np.array([e.accuracy[m] for m in models], dtype=float)
            iv = np.array([e.interval[m] for m in models], dtype=float).reshape(-1, 2)
            fit = accuracy_vs_imagenet.fit_or_none(x, y, rep.axis, rep.confidence)
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
            layout.note(axes[0], "only the reference")
        axis = "" if rep.axis == "linear" else f", {rep.axis} axes"
        title = f"Accuracy on each dataset against accuracy on {ref}, one point per model: "
        title += f"OLS line with {pct} band{axis}{note}"
        fig.suptitle(layout.wrap_text(title, style.width_in - 0.2, style.font_size))
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
    pages = layout.pages(panels, per_page(panels, style))
    return _drawn(pages, lambda page, note: draw_slopes(page, style, ref, note))


def rankings_figure(rep: RankingsReport, style: Style):
    """Accuracy with its error bar per dataset, best first (``rankings.draw_panels``), in
    pages of a page's proportions (``rankings.pages``)."""
    panels = []
    for d, e in rep.datasets.items():
        models = list(e.accuracy)
        iv = np.array([e.interval[m] for m in models], dtype=float).reshape(-1, 2)
        kinds = set(e.interval_kind.values())
        mean = np.array([e.accuracy[m] for m in models], dtype=float)
        lo, hi = np.where(np.isfinite(iv), iv, mean[:, None]).T  # no interval: a point
        panels.append(rankings.Panel(models, mean, lo, hi, kinds, d, models))  # as written
    title = "Accuracy of each model on each dataset, best first"
    pages = rankings.pages(panels, style, per_row=3)
    return _drawn(pages, lambda page, note: rankings.draw_panels(page, style, title + note, 3))


def error_correlations(rep: RankingsReport, style: Style):
    """Heat map of Spearman rho between model errors on every pair of datasets (the values
    written in the cells while they fit)."""
    import matplotlib.pyplot as plt

    names = list(rep.datasets)
    k = len(names)
    rho = np.eye(k)
    pos = {d: i for i, d in enumerate(names)}
    for row in rep.error_spearman:
        i, j = pos[row.a], pos[row.b]
        rho[i, j] = rho[j, i] = np.nan if row.rho is None else row.rho
    cell_fs = style.font_size - 2
    shown = [layout.fit_text(d, 1.6, style.font_size - 1) for d in names]
    with paper_style(style):
        side = min(style.width_in - 0.8, 1.5 + 0.55 * k)
        fig, ax = plt.subplots(figsize=(side + 0.8, side + 0.3))
        # the plotting area is what remains of the side beside the longest name
        cell_in = (side - layout.text_width_in(shown, style.font_size - 1) * 0.75 - 0.4) / k
        numbers = cell_in > layout.text_width_in(["-0.00"], cell_fs) * 1.15
        texts = [[f"{v:.2f}" if numbers and np.isfinite(v) else "" for v in row] for row in rho]
        colors = np.where(np.abs(rho) > 0.6, "w", "k")
        im = layout.heat_map(
            ax, rho, shown, shown, texts, colors, cell_fs, cmap="RdBu_r", vmin=-1, vmax=1
        )
        title = "Spearman ρ of model errors" + ("" if numbers else " (values: the report's JSON)")
        ax.set_title(layout.wrap_text(title, side, style.font_size))
        fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def write_report(rep: RankingsReport, outdir: str | os.PathLike, style: Style) -> list[str]:
    """Write every report figure (PDF and PNG, at ``style.dpi``; a figure of several pages as
    ``NAME``, ``NAME_2``, ...) and table (CSV and Markdown) into ``outdir``."""
    from imagenot.core.registries import resolve

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
