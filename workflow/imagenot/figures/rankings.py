"""Rankings with error bars: one panel per dataset, models sorted best first.

:func:`draw_panels` is the one implementation, used by the workflow's ``rankings_st`` and
``rankings_transfer`` figures (from accuracy.csv) and by ``imagenot rankings --report`` (from
any results table).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from imagenot.figures.data import Options, cells, nice
from imagenot.figures.style import Style, paper_style

INTERVAL_NAMES = {
    "seed_se": "mean ± 1 s.e. over seeds",
    "clopper_pearson": "Clopper-Pearson",
    "given": "evaluation interval",
    "none": "no interval",
}
MAX_MODELS = 40
"""Models drawn per panel; with more, the best ones are drawn and the title says so."""


@dataclass
class Panel:
    """One dataset's models with accuracy, error-bar bounds and interval kinds."""

    label: str
    models: list[str]
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    kinds: set[str]


def draw_panels(
    panels: list[Panel],
    style: Style,
    title: str,
    max_models: int = MAX_MODELS,
    per_row: int | None = None,
):
    """One horizontal error-bar panel per dataset, best model on top (``per_row`` panels in
    a row; default all in one)."""
    import matplotlib.pyplot as plt

    panels = [p for p in panels if p.models]
    with paper_style(style):
        shown = min(max((len(p.models) for p in panels), default=1), max_models)
        ncols = max(min(len(panels), per_row or len(panels)), 1)
        nrows = max(1, -(-len(panels) // ncols))
        fig, axes = plt.subplots(
            nrows, ncols, figsize=(style.width_in, (0.9 + 0.22 * shown) * nrows), squeeze=False
        )
        for ax in axes.flat[len(panels) :]:
            ax.set_axis_off()
        if not panels:
            axes[0, 0].text(0.5, 0.5, "no results", ha="center", va="center")
        kinds: set[str] = set()
        for ax, p in zip(axes.flat, panels, strict=False):
            order = np.argsort(-p.mean, kind="stable")[:max_models]
            ms = [p.models[i] for i in order]
            m, lo, hi = p.mean[order], p.lo[order], p.hi[order]
            kinds |= p.kinds
            y = np.arange(len(ms))[::-1]
            ax.errorbar(
                m, y, xerr=[m - lo, hi - m], fmt="o", color="C0", ecolor="0.3", capsize=2, lw=1
            )
            ax.set_yticks(y, [f"{i + 1}. {x}" for i, x in enumerate(ms)])
            ax.set_xlabel("top-1 accuracy (%)")
            more = f" (best {len(ms)} of {len(p.models)})" if len(ms) < len(p.models) else ""
            ax.set_title(nice(p.label) + more)
            ax.grid(axis="y", visible=False)
        note = ", ".join(INTERVAL_NAMES.get(k, k) for k in sorted(kinds))
        fig.suptitle(f"{title}; error bars: {note}" if note else title)
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
