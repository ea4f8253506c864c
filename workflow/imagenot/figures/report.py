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
from imagenot.figures.style import HIGHLIGHT, Style, paper_style, save

LINE_LABELS = 12
"""Rank-change lines named per panel: the largest climbs and falls (then the highlighted)."""
ALL_LINES = 50
"""Up to this many models every rank-change line is drawn in colour; with more, the others are
a faint grey background, so that thousands of lines do not merge into one block."""
LINES_IN = 1.3
"""Width (inches) of a rank-change panel's lines, between its two rank axes."""


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


def accuracy_vs_reference(rep: RankingsReport, style: Style):
    """One panel per dataset: accuracy against reference accuracy, OLS line, its band (on
    probit or logit axes when the report was fitted on them)."""
    from imagenot.figures import layout

    ref = rep.reference
    names = _compared(rep)
    pct = f"{rep.confidence * 100:g}%"
    with paper_style(style):
        fig, axes = _grid(len(names), style, 0.85)
        panel_in = style.width_in / (1 if len(names) <= 1 else 2 if len(names) <= 4 else 3)
        ref_acc = rep.datasets[ref].accuracy
        pending = []
        for ax, d in zip(axes, names, strict=False):
            e = rep.datasets[d]
            models = [m for m in e.accuracy if m in ref_acc]
            x = np.array([ref_acc[m] for m in models], dtype=float)
            y = np.array([e.accuracy[m] for m in models], dtype=float)
            iv = np.array([e.interval[m] for m in models], dtype=float).reshape(-1, 2)
            fit = stats.ols_fit(x, y, rep.axis, rep.confidence) if len(models) >= 3 else None
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
                f"Accuracy against {ref}: OLS line with {pct} band{axis}",
                style.width_in - 0.2,
                style.font_size,
            )
        )
        layout.freeze(fig)
        for ax, labels in pending:
            layout.place_point_labels(ax, labels, style.font_size - 2)
    return fig


def rank_changes(rep: RankingsReport, style: Style):
    """Slope chart per dataset: each model's rank on the reference (left) and on the dataset
    (right); climbs in blue, falls in red. Named beside the right axis, spread apart: the
    largest changes and the highlighted models; with many models only those are drawn in
    colour, over the others in faint grey."""
    from matplotlib.collections import LineCollection

    from imagenot.figures import layout

    ref = rep.reference
    names = _compared(rep)
    label_fs = style.font_size - 2
    line_in = label_fs * 1.35 / 72  # a label's row
    highlight = set(style.highlight)
    panels = []
    for d in names:
        e = rep.datasets[d]
        models = list(e.delta_rank)
        # ranks among the common models: the delta rank is their difference
        right = stats.ranks(np.array([e.accuracy[m] for m in models], dtype=float))
        left = right + np.array([e.delta_rank[m] for m in models], dtype=float)
        change = left - right
        hot = [i for i, m in enumerate(models) if m in highlight]
        if len(models) <= LINE_LABELS:
            named = hot + [i for i in range(len(models)) if i not in hot]
        else:
            by_size = [int(i) for i in np.argsort(-np.abs(change), kind="stable")]
            named = hot + [i for i in by_size[:LINE_LABELS] if change[i] != 0 and i not in hot]
        text = {i: f"{models[i]} ({change[i]:+g})" for i in named}
        panels.append((d, e, models, left, right, change, named, text))
    label_in = layout.text_width_in((t for p in panels for t in p[7].values()), label_fs) + 0.1
    n = max(len(panels), 1)
    ncols = max(1, min(3, n, int(style.width_in // (label_in + LINES_IN + 0.5))))
    panel_in = style.width_in / ncols
    most = max((len(p[6]) for p in panels), default=0)
    height = max(min(panel_in * 1.1, 3.2), 1.2 + most * line_in * 1.15)
    with paper_style(style):
        fig, axes = _grid(len(names), style, 1.1, ncols=ncols, height=height)
        for ax, (d, e, models, left, right, change, named, _text) in zip(
            axes, panels, strict=False
        ):
            colors = np.where(change > 0, "C0", np.where(change < 0, "C3", "0.6"))
            segs = np.stack(
                [
                    np.stack([np.zeros_like(left), left], 1),
                    np.stack([np.ones_like(right), right], 1),
                ],
                1,
            )
            if len(models) <= ALL_LINES:
                ax.add_collection(LineCollection(segs, colors=colors, linewidths=0.8, alpha=0.9))
            else:
                faint = min(0.4, 30 / len(models))
                ax.add_collection(LineCollection(segs, colors="0.55", linewidths=0.4, alpha=faint))
                ax.add_collection(
                    LineCollection(segs[named], colors=colors[named], linewidths=1.0, alpha=0.95)
                )
            hot = [i for i in named if models[i] in highlight]
            if hot:
                ax.add_collection(LineCollection(segs[hot], colors=HIGHLIGHT, linewidths=1.8))
            ax.set_xlim(-0.04, 1.0)
            ax.set_ylim(len(models) + 0.5, 0.5)
            ax.set_xticks([0, 1], [ref, d])
            ax.get_xticklabels()[0].set_ha("left")
            ax.get_xticklabels()[1].set_ha("right")
            ax.set_ylabel("rank (1 = best)")
            ax.grid(False)
            tau = e.correlations.kendall_tau if e.correlations is not None else None
            title = d + (f", Kendall τ-b {tau:.2f}" if tau is not None else "")
            ax.set_title(layout.wrap_text(title, panel_in - 0.2, style.font_size))
        if not names:
            axes[0].text(0.5, 0.5, "only the reference", ha="center", transform=axes[0].transAxes)
        crowded = any(len(p[2]) > ALL_LINES for p in panels)
        head = f"Rank changes against {ref} (blue: climbs, red: falls"
        head += "; grey: the models not named)" if crowded else ")"
        fig.suptitle(layout.wrap_text(head, style.width_in - 0.2, style.font_size))
        layout.freeze(fig)
        for ax, panel in zip(axes, panels, strict=False):
            _name_lines(ax, panel, label_in, label_fs, line_in, highlight)
    return fig


def _name_lines(ax, panel, label_in: float, label_fs: float, line_in: float, highlight) -> None:
    """Name the lines of one laid-out rank-change panel beside its right axis: the x range
    makes room for the labels, which are spread at least a row apart and joined to their lines;
    as many as the panel's height holds, the first of ``named`` first."""
    from imagenot.figures import layout

    _d, _e, models, _left, right, change, named, text = panel
    fig = ax.figure
    box = ax.get_window_extent(fig.canvas.get_renderer())
    width, height = box.width / fig.dpi, box.height / fig.dpi
    gap = 0.08
    label_in = min(label_in, max(width - 0.7 - gap, 0.3))
    x0 = -0.04
    x1 = x0 + (1 - x0) * width / max(width - label_in - gap, 0.3)
    ax.set_xlim(x0, x1)
    per_in = (x1 - x0) / width
    lines_in = (1 - x0) / per_in
    ticks = [
        layout.fit_text(t.get_text(), lines_in / 2, t.get_fontsize()) for t in ax.get_xticklabels()
    ]
    ax.set_xticks([0, 1], ticks)
    ax.get_xticklabels()[0].set_ha("left")
    ax.get_xticklabels()[1].set_ha("right")
    keep = named[: max(int(height / line_in) - 1, 0)]
    if not keep:
        return
    count = len(models)
    desired = (right[keep] - 0.5) / count * height  # inches from the top
    y_in = layout.spread(desired, line_in, line_in / 2, height - line_in / 2)
    y = 0.5 + y_in / height * count
    tx = 1 + gap * per_in
    for i, yy in zip(keep, y, strict=True):
        hot = models[i] in highlight
        color = HIGHLIGHT if hot else "C0" if change[i] > 0 else "C3" if change[i] < 0 else "0.3"
        ax.plot([1, tx], [right[i], yy], color="0.6", lw=0.4)
        ax.text(
            tx,
            yy,
            layout.fit_text(text[i], label_in - 0.02, label_fs),
            va="center",
            ha="left",
            fontsize=label_fs,
            color=color,
            fontweight="bold" if hot else "normal",
        )


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
    """Write every report figure (PDF and PNG, at ``style.dpi``) and table (CSV and Markdown)
    into ``outdir``."""
    from imagenot.registries import resolve

    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, code in REPORT_FIGURES.items():
        fig = resolve(code)(rep, style)
        pdf, png = out / f"{name}.pdf", out / f"{name}.png"
        save(fig, pdf, png, style.dpi)
        written += [str(pdf), str(png)]
    for name, code in REPORT_TABLES.items():
        build = resolve(code)
        df, title = build(rep), build.__doc__.strip()
        csv, md = out / f"{name}.csv", out / f"{name}.md"
        tables.write(df, csv, md, title)
        written += [str(csv), str(md)]
    return written
