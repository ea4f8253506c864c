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
from imagenot.figures.data import Options, cells, nice
from imagenot.figures.style import HIGHLIGHT, Style, paper_style

PLOT_IN = 1.4
"""Width of a panel's plotting area (inches), beside its model labels."""
ROW_IN = 0.22
"""Height of one model's row (inches): labels one font size below the base stay apart."""


@dataclass
class Panel:
    """One dataset's models with accuracy, error-bar bounds and interval kinds."""

    label: str
    models: list[str]
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    kinds: set[str]


def shown_rows(p: Panel, top: int, highlight: set[str]) -> tuple[list[int], list[int]]:
    """Indices of the models drawn in a panel: the best ``top``, then the highlighted models
    ranked below them (each in rank order)."""
    order = np.argsort(-p.mean, kind="stable")
    best = [int(i) for i in order[:top]]
    extra = [int(i) for i in order[top:] if p.models[i] in highlight]
    return best, extra


def draw_panels(panels: list[Panel], style: Style, title: str, per_row: int | None = None):
    """One horizontal error-bar panel per dataset, best model on top: the best ``style.top``
    models, then the highlighted ones (``style.highlight``) wherever they rank, below a dotted
    line. Labels are ``rank. model`` (rank among all the panel's models, ties averaged); the
    panels per row (at most ``per_row``) follow from the widest label, and a label wider than a
    panel allows is shortened in the middle."""
    import matplotlib.pyplot as plt

    from imagenot.analyse import stats
    from imagenot.figures import layout

    panels = [p for p in panels if p.models]
    highlight = set(style.highlight)
    tick_fs = style.font_size - 1
    rows = [shown_rows(p, style.top, highlight) for p in panels]
    labels = []
    for p, (best, extra) in zip(panels, rows, strict=True):
        ranks = stats.ranks(p.mean)
        labels.append([f"{ranks[i]:g}. {p.models[i]}" for i in best + extra])
    label_in = layout.text_width_in((x for ls in labels for x in ls), tick_fs) + 0.1
    need = label_in + PLOT_IN
    ncols = max(1, min(per_row or len(panels), len(panels), int(style.width_in // need)))
    panel_in = style.width_in / ncols
    if label_in > panel_in - PLOT_IN:  # one panel a row and still too wide: shorten
        labels = [layout.fit_texts(ls, panel_in - PLOT_IN - 0.1, tick_fs) for ls in labels]
    shown = max((len(b) + len(e) + (1 if e else 0) for b, e in rows), default=1)
    nrows = max(1, -(-len(panels) // ncols))
    titles = []
    for p, (best, _extra) in zip(panels, rows, strict=True):
        more = f" (best {len(best)} of {len(p.models)})" if len(best) < len(p.models) else ""
        titles.append(layout.wrap_text(nice(p.label) + more, panel_in - 0.3, style.font_size))
    title_lines = max((t.count("\n") + 1 for t in titles), default=1)
    kinds: set[str] = set().union(*(p.kinds for p in panels)) if panels else set()
    note = ", ".join(CELL_INTERVAL_NAMES.get(k, k) for k in sorted(kinds))
    suptitle = layout.wrap_text(
        f"{title}; error bars: {note}" if note else title, style.width_in - 0.2, style.font_size
    )
    with paper_style(style):
        row_in = 0.75 + 0.16 * title_lines + ROW_IN * shown
        height = row_in * nrows + 0.2 * (suptitle.count("\n") + 1)
        fig, axes = plt.subplots(nrows, ncols, figsize=(style.width_in, height), squeeze=False)
        for ax in axes.flat[len(panels) :]:
            ax.set_axis_off()
        if not panels:
            axes[0, 0].text(0.5, 0.5, "no results", ha="center", va="center")
        for ax, p, (best, extra), names, head in zip(
            axes.flat, panels, rows, labels, titles, strict=False
        ):
            idx = best + extra
            # y from the top: the best at 0, a gap before the highlighted ones below the best
            y = -np.array(list(range(len(best))) + [len(best) + 1 + k for k in range(len(extra))])
            m, lo, hi = p.mean[idx], p.lo[idx], p.hi[idx]
            marked = np.array([p.models[i] in highlight for i in idx], dtype=bool)
            for sel, color in ((~marked, "C0"), (marked, HIGHLIGHT)):
                if sel.any():
                    ax.errorbar(
                        m[sel],
                        y[sel],
                        xerr=[m[sel] - lo[sel], hi[sel] - m[sel]],
                        fmt="o",
                        color=color,
                        ecolor="0.3" if color == "C0" else color,
                        capsize=2,
                        lw=1,
                    )
            if extra:
                ax.axhline(-len(best), color="0.6", ls=":", lw=0.8)
            ax.set_yticks(y, names)
            ax.set_ylim(y.min() - 0.7, 0.7)
            for tick, hot in zip(ax.get_yticklabels(), marked, strict=True):
                if hot:
                    tick.set_color(HIGHLIGHT)
                    tick.set_fontweight("bold")
            ax.set_xlabel("top-1 accuracy (%)")
            ax.set_title(head)
            ax.grid(axis="y", visible=False)
        fig.suptitle(suptitle)
    return fig


def draw_st(acc: pd.DataFrame, opts: Options, style: Style):
    """Workflow figure ``rankings_st``: standard training on every dataset, best first."""
    from imagenot.figures.data import ordered_labels

    labels = ordered_labels(acc, opts, "st")
    return draw(acc, labels, opts, style, "Standard training (ST), test top-1")


def draw_transfer(acc: pd.DataFrame, opts: Options, style: Style):
    """Workflow figure ``rankings_transfer``: FT and TL on the downstream dataset."""
    from imagenot.figures.data import transfer_labels

    title = f"Fine-tuning (FT) and linear probe (TL) on {opts.downstream_dataset}"
    return draw(acc, transfer_labels(acc, opts), opts, style, title)


def draw(acc: pd.DataFrame, labels: list[str], opts: Options, style: Style, title: str):
    """The standard accuracy of each dataset label of accuracy.csv, one panel each."""
    c = cells(acc, "standard", opts)
    panels = []
    for d in labels:
        models = c.models_of(d)
        lo, hi = c.bounds(models, d)
        kinds = {c.cells[x, d].interval for x in models}
        panels.append(Panel(d, models, c.accuracy(models, d), lo, hi, kinds))
    return draw_panels(panels, style, title)
