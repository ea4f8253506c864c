"""Rankings with error bars: one panel per dataset, models sorted best first.

:func:`draw_panels` is the one implementation, used by the workflow's ``rankings_st`` and
``rankings_transfer`` figures (from accuracy.csv) and by ``imagenot rankings --report`` (from
any results table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from imagenot.analyse.cells import CELL_INTERVAL_NAMES
from imagenot.analyse.stats import ranks
from imagenot.core.figure_style import HIGHLIGHT, PAGE_RATIO, paper_style
from imagenot.core.settings import Style
from imagenot.figures import layout
from imagenot.figures.data import Options, cells, ordered_labels, transfer_labels

PLOT_IN = 1.4
"""Width of a panel's plotting area (inches), beside its model labels."""
ROW_IN = 0.22
"""Height of one model's row (inches): labels one font size below the base stay apart."""
PANEL_HEAD_IN = 0.75
"""Height of a panel beside its model rows: its title's first line, x axis and label."""
TITLE_LINE_IN = 0.16
"""Height of each further line of a panel title."""
MAX_COLUMNS = 3
"""Most panels side by side."""
MIN_SHOWN = 8
"""Fewest models a panel shows (its best) before its datasets go on to another page."""
HEAD_IN = 0.5
"""Height of the figure's title (inches), two lines."""
LABEL_MIN_IN = 0.8
"""Narrowest model labels (inches) a panel is given to fit more panels side by side."""


@dataclass
class Panel:
    """One dataset's models with accuracy, error-bar bounds and interval kinds; ``title`` and
    ``names`` are what the panel shows for the dataset and the models."""

    models: list[str]
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    kinds: set[str]
    title: str
    names: list[str]

    def ranked(self, idx) -> list[str]:
        """``rank. name`` of the models ``idx`` (rank among all the panel's, ties averaged)."""
        rank = ranks(self.mean)
        return [f"{rank[i]:g}. {self.names[i]}" for i in idx]


def shown_rows(p: Panel, top: int, highlight: set[str]) -> tuple[list[int], list[int]]:
    """Indices of the models drawn in a panel: the best ``top``, then the highlighted models
    ranked below them (each in rank order)."""
    order = np.argsort(-p.mean, kind="stable")
    best = [int(i) for i in order[:top]]
    extra = [int(i) for i in order[top:] if p.models[i] in highlight]
    return best, extra


def _fit(nrows: int, style: Style) -> int:
    """Models a panel shows in one of ``nrows`` rows of panels on a page (its best, less a
    row for the gap before the highlighted ones)."""
    per_row_in = (style.width_in * PAGE_RATIO - HEAD_IN) / max(nrows, 1)
    return int((per_row_in - PANEL_HEAD_IN - 2 * TITLE_LINE_IN) // ROW_IN) - 1


def _columns(panels: list[Panel], style: Style, per_row: int | None) -> tuple[int, float]:
    """Panels per row and the width of their model labels (inches): as many as the widest
    label allows beside :data:`PLOT_IN`, at most ``per_row`` and :data:`MAX_COLUMNS`; more
    (the labels then shortened in the middle, to :data:`LABEL_MIN_IN`) where the rows of panels
    would otherwise leave a panel fewer than :data:`MIN_SHOWN` models within a page."""
    tick_fs = style.font_size - 1
    texts = [t for p in panels for t in p.ranked(range(min(len(p.models), style.top)))]
    label_in = layout.text_width_in(texts, tick_fs) + 0.1
    most = min(per_row or MAX_COLUMNS, MAX_COLUMNS, max(len(panels), 1))
    ncols = max(1, min(most, int(style.width_in // (label_in + PLOT_IN))))
    wanted = min(MIN_SHOWN, style.top, max((len(p.models) for p in panels), default=1))
    while (
        ncols < most
        and _fit(-(-len(panels) // ncols), style) < wanted
        and style.width_in / (ncols + 1) - PLOT_IN >= LABEL_MIN_IN
    ):
        ncols += 1
    return ncols, label_in


def pages(panels: list[Panel], style: Style, per_row: int | None = None) -> list[list[Panel]]:
    """The panels in pages: as many rows of panels a page as leave each panel
    :data:`MIN_SHOWN` models (or all it has) within a page's height (:data:`PAGE_RATIO`)."""
    panels = [p for p in panels if p.models]
    if not panels:
        return [[]]
    ncols, _ = _columns(panels, style, per_row)
    wanted = min(MIN_SHOWN, style.top, max(len(p.models) for p in panels))
    rows = 1
    while _fit(rows + 1, style) >= wanted:
        rows += 1
    return layout.pages(panels, rows * ncols)


def draw_panels(panels: list[Panel], style: Style, title: str, per_row: int | None = None):
    """One horizontal error-bar panel per dataset, best model on top, in a grid of at most
    :data:`MAX_COLUMNS` columns whose height stays within a page (:data:`PAGE_RATIO`): the
    best ``style.top`` models (fewer where the page holds fewer rows, the title then saying
    "best K of N"), then the highlighted ones (``style.highlight``) wherever they rank, below
    a dotted line. Labels are ``rank. model`` (rank among all the panel's models, ties
    averaged); a label wider than its panel allows is shortened in the middle. For more
    panels than a page holds, draw each of :func:`pages`."""
    panels = [p for p in panels if p.models]
    highlight = set(style.highlight)
    tick_fs = style.font_size - 1
    ncols, label_in = _columns(panels, style, per_row)
    panel_in = style.width_in / ncols
    nrows = max(1, -(-len(panels) // ncols))
    kinds: set[str] = set().union(*(p.kinds for p in panels)) if panels else set()
    note = ", ".join(CELL_INTERVAL_NAMES.get(k, k) for k in sorted(kinds))
    head = f"{title}; error bars: {note}" if note else title
    suptitle = layout.wrap_text(head, style.width_in - 0.2, style.font_size)
    head_in = 0.2 * (suptitle.count("\n") + 1) + 0.1
    # the models a panel can show within a page: its rows, less its head and a highlight gap
    top = max(1, min(style.top, _fit(nrows, style) - len(highlight)))
    rows = [shown_rows(p, top, highlight) for p in panels]
    labels = [p.ranked(best + extra) for p, (best, extra) in zip(panels, rows, strict=True)]
    fit_in = panel_in - PLOT_IN - 0.1  # a label wider: shortened in the middle to this
    if label_in > panel_in - PLOT_IN:
        labels = [[layout.fit_text(t, fit_in, tick_fs) for t in ls] for ls in labels]
    shown = max((len(b) + len(e) + (1 if e else 0) for b, e in rows), default=1)
    titles = []
    for p, (best, _extra) in zip(panels, rows, strict=True):
        more = f" (best {len(best)} of {len(p.models)})" if len(best) < len(p.models) else ""
        titles.append(layout.wrap_text(p.title + more, panel_in - 0.3, style.font_size))
    title_lines = max((t.count("\n") + 1 for t in titles), default=1)
    with paper_style(style):
        row_in = PANEL_HEAD_IN + TITLE_LINE_IN * title_lines + ROW_IN * shown
        fig, axes = layout.panel_grid(len(panels), ncols, style.width_in, row_in, head_in)
        if not panels:
            layout.note(axes[0], "no results", va="center")
        for ax, p, (best, extra), names, head in zip(
            axes, panels, rows, labels, titles, strict=False
        ):
            idx = best + extra
            # y from the top: the best at 0, a gap before the highlighted ones below the best
            y = -np.array(list(range(len(best))) + [len(best) + 1 + k for k in range(len(extra))])
            m, lo, hi = p.mean[idx], p.lo[idx], p.hi[idx]
            marked = np.array([p.models[i] in highlight for i in idx], dtype=bool)
            for sel, color, ecolor in ((~marked, "C0", "0.3"), (marked, HIGHLIGHT, HIGHLIGHT)):
                if sel.any():
                    xerr = [m[sel] - lo[sel], hi[sel] - m[sel]]
                    bar = {"fmt": "o", "color": color, "ecolor": ecolor, "capsize": 2, "lw": 1}
                    ax.errorbar(m[sel], y[sel], xerr=xerr, **bar)
            if extra:
                ax.axhline(-len(best), color="0.6", ls=":", lw=0.8)
            ax.set_yticks(y, names)
            ax.set_ylim(y.min() - 0.7, 0.7)
            layout.highlight_ticks(ax.get_yticklabels(), marked)
            ax.set_xlabel("top-1 accuracy (%)")
            ax.set_title(head, loc="right")  # over its labels too: the axes is narrower
            ax.grid(axis="y", visible=False)
        fig.suptitle(suptitle)
    return fig


def draw_st(acc: pd.DataFrame, opts: Options, style: Style):
    """Workflow figure ``rankings_st``: standard training on every dataset, best first."""
    labels = ordered_labels(acc, opts, "st")
    title = "Test top-1 accuracy of the models trained from scratch (ST), best first"
    return draw(acc, labels, opts, style, title)


def draw_transfer(acc: pd.DataFrame, opts: Options, style: Style):
    """Workflow figure ``rankings_transfer``: FT and TL on the downstream dataset."""
    down = opts.dataset(opts.downstream_dataset)
    title = f"Test top-1 accuracy on {down} after fine-tuning (FT) or a linear probe (TL)"
    return draw(acc, transfer_labels(acc, opts), opts, style, title)


def draw(acc: pd.DataFrame, labels: list[str], opts: Options, style: Style, title: str):
    """The standard accuracy of each dataset label of accuracy.csv, one panel each, named by
    their display names (:class:`imagenot.figures.settings.Options`)."""
    c = cells(acc, "standard", opts)
    panels = []
    for d in labels:
        models = c.models_of(d)
        lo, hi = c.bounds(models, d)
        kinds = {c.cells[x, d].interval for x in models}
        names = [opts.model(m) for m in models]
        mean = c.accuracy(models, d)
        panels.append(Panel(models, mean, lo, hi, kinds, opts.dataset(d), names))
    return draw_panels(panels, style, title)
