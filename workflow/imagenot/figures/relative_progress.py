"""Relative progress: each model's accuracy divided by the baseline model's, per dataset."""

from __future__ import annotations

import numpy as np
import pandas as pd

from imagenot.core.figure_style import HIGHLIGHT, paper_style
from imagenot.core.settings import Style
from imagenot.figures import layout
from imagenot.figures.data import Options, cells, imagenet_x, ordered_labels

NAME_IN = 2.0
"""Longest model name under the x axis (inches); longer ones are shortened in the middle."""


def draw(acc: pd.DataFrame, opts: Options, style: Style):
    """Lines of accuracy / baseline accuracy over models ordered by ImageNet accuracy; the
    models named under the axis (every k-th when they would crowd), highlighted ones in
    colour."""
    import matplotlib.pyplot as plt

    c = cells(acc, "standard", opts)
    labels = [opts.reference] + [d for d in ordered_labels(acc, opts, "st") if d != opts.reference]
    labels = [d for d in dict.fromkeys(labels) if (opts.baseline_model, d) in c.cells]
    pub = imagenet_x(acc, opts)
    models = sorted(
        {m for d in labels for m in c.models_of(d)}, key=lambda m: (pub.get(m, np.inf), m)
    )
    tick_fs = style.font_size - 1
    names = [layout.fit_text(opts.model(m), NAME_IN, tick_fs) for m in models]
    name_in = layout.text_width_in(names, tick_fs)
    width = style.column_in * 1.3
    # names stand upright, one text line apart at least: every step-th model when they crowd
    step = max(1, int(np.ceil(len(models) * tick_fs * 1.4 / 72 / max(width - 1.0, 0.5))))
    shown = list(range(0, len(models), step))
    highlight = set(style.highlight)
    baseline = opts.model(opts.baseline_model)
    ref = opts.dataset(opts.reference)
    order = (
        "published ImageNet accuracy" if opts.imagenet_axis == "published" else f"accuracy on {ref}"
    )
    with paper_style(style):
        fig, ax = plt.subplots(figsize=(width, style.column_in + name_in))
        for i, d in enumerate(labels):
            base = c.cells[opts.baseline_model, d].mean
            x = [j for j, m in enumerate(models) if (m, d) in c.cells]
            y = [c.cells[models[j], d].mean / base for j in x]
            marker = "o" if len(models) <= 60 else None
            ax.plot(x, y, marker=marker, color=f"C{i}", label=opts.dataset(d))
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_xticks(shown, [names[j] for j in shown], rotation=90)
        layout.highlight_ticks(ax.get_xticklabels(), [models[j] in highlight for j in shown])
        for j, m in enumerate(models):
            if m in highlight:
                ax.axvline(j, color=HIGHLIGHT, lw=0.8, alpha=0.6)
        ylabel = f"accuracy / accuracy of {baseline}"
        ax.set_ylabel(layout.wrap_text(ylabel, style.column_in * 0.9, style.font_size))
        title = f"Accuracy relative to {baseline} on each dataset, models in the order of their "
        title += order + (f" (every {step}th model named)" if step > 1 else "")
        # over the figure: a title over the axes is off-centre beside the y label
        fig.suptitle(layout.wrap_text(title, width - 0.3, style.font_size))
        if labels:
            ax.legend(frameon=False)
        else:
            layout.note(ax, f"{baseline} has no results")
    return fig
