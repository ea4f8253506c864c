"""Slope charts of rank changes: each model's rank on the reference (left) and on a dataset
(right), one panel per dataset, a line per model linking its two ranks.

:func:`draw_slopes` is the one implementation, used by the workflow's ``rank_changes_st``
and ``rank_changes_transfer`` figures (:func:`draw_st`, :func:`draw_transfer`, from
accuracy.csv) and by ``imagenot rankings --report``'s
``rank_changes`` (:func:`imagenot.figures.report.rank_changes`, from any results table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from imagenot.analyse import stats
from imagenot.analyse.compare import MIN_MODELS
from imagenot.core.figure_style import HIGHLIGHT, PAGE_RATIO, integer_ticks, paper_style
from imagenot.core.settings import Style
from imagenot.figures import layout
from imagenot.figures.data import Options, cells, ordered_labels, transfer_labels

LINE_LABELS = 12
"""Rank-change lines named per panel: the largest climbs and falls (then the highlighted)."""
ALL_LINES = 50
"""Up to this many models every rank-change line is drawn in colour; with more, the others are
a faint grey background, so that thousands of lines do not merge into one block."""
LINES_IN = 1.3
"""Width (inches) of a rank-change panel's lines, between its two rank axes."""
PANEL_MAX_IN = 2.7
"""Tallest panel (inches) beside the room its named lines need: three rows of panels and the
title fit a page's height."""


@dataclass
class SlopePanel:
    """One dataset against the reference on their common models: ``models`` (keys, for the
    highlight) shown as ``names``, their ranks among those models on the reference (``left``)
    and on the dataset (``right``), 1 = best; ``title``, ``left_label`` and ``right_label``
    say which datasets; ``tau``: Kendall tau-b of the two rankings (None: too few models)."""

    title: str
    left_label: str
    right_label: str
    models: list[str]
    names: list[str]
    left: np.ndarray
    right: np.ndarray
    tau: float | None = None


def _named(panels: list[SlopePanel], style: Style) -> list[tuple]:
    """Per panel: (panel, rank changes, the indices of the lines named, their labels)."""
    highlight = set(style.highlight)
    prepared = []
    for p in panels:
        change = p.left - p.right
        hot = [i for i, m in enumerate(p.models) if m in highlight]
        if len(p.models) <= LINE_LABELS:
            named = hot + [i for i in range(len(p.models)) if i not in hot]
        else:
            by_size = [int(i) for i in np.argsort(-np.abs(change), kind="stable")]
            named = hot + [i for i in by_size[:LINE_LABELS] if change[i] != 0 and i not in hot]
        text = {i: f"{p.names[i]} ({change[i]:+g})" for i in named}
        prepared.append((p, change, named, text))
    return prepared


HEAD_IN = 0.4
"""Height of the figure's title (inches)."""
ROW_MIN_IN = 1.6
"""Lowest row of panels (inches) before panels go on to another page: about a dozen named
lines."""


def _grid(panels: list[SlopePanel], style: Style) -> tuple[list[tuple], float, int, float]:
    """The panels' named lines (:func:`_named`), the width of their labels (inches), the panels
    side by side (as many as those labels leave room for, at most 3) and the height of a row of
    panels: room for the named lines' labels, within a page for the rows these panels fill
    (:data:`imagenot.core.figure_style.PAGE_RATIO`), not below :data:`ROW_MIN_IN`."""
    prepared = _named(panels, style)
    texts = (t for x in prepared for t in x[3].values())
    label_in = layout.text_width_in(texts, style.font_size - 2) + 0.1
    ncols = max(1, min(3, len(panels), int(style.width_in // (label_in + LINES_IN + 0.5))))
    line_in = (style.font_size - 2) * 1.35 / 72  # a label's row
    most = max((len(x[2]) for x in prepared), default=0)
    height = max(min(style.width_in / ncols * 1.1, PANEL_MAX_IN), 1.2 + most * line_in * 1.15)
    nrows = max(1, -(-len(panels) // ncols))
    page_in = style.width_in * PAGE_RATIO - HEAD_IN
    return prepared, label_in, ncols, max(min(height, page_in / nrows), min(ROW_MIN_IN, height))


def per_page(panels: list[SlopePanel], style: Style) -> int:
    """Panels on a page: whole rows of panels side by side (:func:`_grid`), each at least
    :data:`ROW_MIN_IN` high, within a page's height."""
    rows = int((style.width_in * PAGE_RATIO - HEAD_IN) // ROW_MIN_IN)
    return _grid(panels, style)[2] * max(1, rows)


def draw_slopes(
    panels: list[SlopePanel], style: Style, against: str, note: str = "", right: str = ""
):
    """Slope chart per panel: climbs in blue, falls in red. Named beside the right axis, spread
    apart: the largest changes and the highlighted models; with many models only those are
    drawn in colour, over the others in faint grey. ``against``: the reference's name, for the
    figure's title (``note`` ends it; ``right`` says what the right axes are, each dataset
    unless given)."""
    from matplotlib.collections import LineCollection

    label_fs = style.font_size - 2
    line_in = label_fs * 1.35 / 72  # a label's row
    highlight = set(style.highlight)
    prepared, label_in, ncols, height = _grid(panels, style)
    panel_in = style.width_in / ncols
    with paper_style(style):
        fig, axes = layout.panel_grid(len(panels), ncols, style.width_in, height, HEAD_IN)
        for ax, (p, change, named, _text) in zip(axes, prepared, strict=False):
            colors = np.where(change > 0, "C0", np.where(change < 0, "C3", "0.6"))
            ends = np.stack([p.left, p.right], 1)  # a line per model: (0, left) to (1, right)
            segs = np.stack([np.broadcast_to([0.0, 1.0], ends.shape), ends], 2)
            if len(p.models) <= ALL_LINES:
                ax.add_collection(LineCollection(segs, colors=colors, linewidths=0.8, alpha=0.9))
            else:
                faint = min(0.4, 30 / len(p.models))
                ax.add_collection(LineCollection(segs, colors="0.55", linewidths=0.4, alpha=faint))
                ax.add_collection(
                    LineCollection(segs[named], colors=colors[named], linewidths=1.0, alpha=0.95)
                )
            if hot := [i for i in named if p.models[i] in highlight]:
                ax.add_collection(LineCollection(segs[hot], colors=HIGHLIGHT, linewidths=1.8))
            ax.set_xlim(-0.04, 1.0)
            ax.set_ylim(len(p.models) + 0.5, 0.5)
            _end_labels(ax, [p.left_label, p.right_label])
            ax.set_ylabel("rank (1 = best)")
            integer_ticks(ax.yaxis)
            ax.grid(False)
            title = p.title + (f", Kendall τ-b {p.tau:.2f}" if p.tau is not None else "")
            ax.set_title(layout.wrap_text(title, panel_in - 0.2, style.font_size))
        if not panels:
            layout.note(axes[0], "only the reference")
        crowded = any(len(p.models) > ALL_LINES for p in panels)
        head = f"Rank of each model on {against} (left) and {right or 'on each dataset'} (right); "
        head += "blue: climbs, red: falls" + ("; grey: the models not named" if crowded else "")
        fig.suptitle(layout.wrap_text(head + note, style.width_in - 0.2, style.font_size))
        layout.freeze(fig)
        for ax, panel in zip(axes, prepared, strict=False):
            _name_lines(ax, panel, label_in, label_fs, line_in, highlight)
    return fig


def _end_labels(ax, labels: list[str]) -> None:
    """The names of a panel's two rank axes under its ends, each aligned inward."""
    ax.set_xticks([0, 1], labels)
    for tick, ha in zip(ax.get_xticklabels(), ("left", "right"), strict=True):
        tick.set_ha(ha)


def _name_lines(ax, panel, label_in: float, label_fs: float, line_in: float, highlight) -> None:
    """Name the lines of one laid-out rank-change panel beside its right axis: the x range
    makes room for the labels, which are spread at least a row apart and joined to their lines;
    as many as the panel's height holds, the first of ``named`` first."""
    p, change, named, text = panel
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
    _end_labels(ax, ticks)
    keep = named[: max(int(height / line_in) - 1, 0)]
    if not keep:
        return
    count = len(p.models)
    desired = (p.right[keep] - 0.5) / count * height  # inches from the top
    y_in = layout.spread(desired, line_in, line_in / 2, height - line_in / 2)
    y = 0.5 + y_in / height * count
    tx = 1 + gap * per_in
    for i, yy in zip(keep, y, strict=True):
        hot = p.models[i] in highlight
        color = HIGHLIGHT if hot else "C0" if change[i] > 0 else "C3" if change[i] < 0 else "0.3"
        ax.plot([1, tx], [p.right[i], yy], color="0.6", lw=0.4)
        look = {"fontsize": label_fs, "color": color, "fontweight": "bold" if hot else "normal"}
        shown = layout.fit_text(text[i], label_in - 0.02, label_fs)
        ax.text(tx, yy, shown, va="center", ha="left", **look)


def draw_st(acc: pd.DataFrame, opts: Options, style: Style):
    """Workflow figure ``rank_changes_st``: each model's standard-training rank on the
    reference dataset and on every other dataset it was trained on, linked by a line."""
    labels = [d for d in ordered_labels(acc, opts, "st") if d != opts.reference]
    return _against_reference(acc, labels, opts, style)


def draw_transfer(acc: pd.DataFrame, opts: Options, style: Style):
    """Workflow figure ``rank_changes_transfer``: each model's standard-training rank on the
    reference dataset and its rank after each fine-tuning (FT) and linear probe (TL) on the
    downstream dataset, linked by a line (a panel per protocol)."""
    down = opts.dataset(opts.downstream_dataset)
    right = f"on {down} after each fine-tuning (FT) or linear probe (TL)"
    return _against_reference(acc, transfer_labels(acc, opts), opts, style, right)


def _against_reference(
    acc: pd.DataFrame, labels: list[str], opts: Options, style: Style, right: str = ""
):
    """Slope chart of the reference's standard ranking against each dataset label of
    ``labels`` (accuracy.csv's ``dataset`` or ``dataset/protocol``), on their common models."""
    from scipy.stats import kendalltau

    c = cells(acc, "standard", opts)
    ref = opts.reference
    ref_models = set(c.models_of(ref))
    shown_ref = opts.dataset(ref)
    panels = []
    for d in labels:
        models = [m for m in c.models_of(d) if m in ref_models]
        if not models:
            continue
        names, shown = [opts.model(m) for m in models], opts.dataset(d)
        on_ref, on_d = c.accuracy(models, ref), c.accuracy(models, d)
        tau = None  # as the rankings report computes it (imagenot.analyse.compare.MIN_MODELS)
        if len(models) >= MIN_MODELS and np.ptp(on_ref) > 0 and np.ptp(on_d) > 0:
            tau = float(kendalltau(on_d, on_ref, variant="b").statistic)
        ranks = stats.ranks(on_ref), stats.ranks(on_d)
        panels.append(SlopePanel(shown, shown_ref, shown, models, names, *ranks, tau))
    return draw_slopes(panels, style, shown_ref, right=right)
