"""Rankings with error bars: one panel per dataset, models sorted best first."""

from __future__ import annotations

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


def draw(acc: pd.DataFrame, labels: list[str], opts: Options, style: Style, title: str):
    """One horizontal error-bar panel per dataset label (standard accuracy)."""
    import matplotlib.pyplot as plt

    c = cells(acc, "standard", opts)
    labels = [d for d in labels if c.models_of(d)]
    with paper_style(style):
        n_models = max((len(c.models_of(d)) for d in labels), default=1)
        ncols = max(len(labels), 1)
        fig, axes = plt.subplots(
            1,
            ncols,
            figsize=(style.width_in, 0.9 + 0.22 * n_models),
            squeeze=False,
        )
        if not labels:
            axes[0, 0].text(0.5, 0.5, "no results", ha="center", va="center")
            axes[0, 0].set_axis_off()
        kinds = set()
        for ax, d in zip(axes[0], labels, strict=False):
            models = c.models_of(d)
            mean = c.accuracy(models, d)
            order = np.argsort(-mean, kind="stable")
            ms = [models[i] for i in order]
            m = mean[order]
            lo = np.array([c.cells[x, d].lo for x in ms])
            hi = np.array([c.cells[x, d].hi for x in ms])
            kinds |= {c.cells[x, d].interval for x in ms}
            y = np.arange(len(ms))[::-1]
            ax.errorbar(
                m,
                y,
                xerr=[m - lo, hi - m],
                fmt="o",
                color="C0",
                ecolor="0.3",
                capsize=2,
                lw=1,
            )
            ax.set_yticks(y, [f"{i + 1}. {x}" for i, x in enumerate(ms)])
            ax.set_xlabel("top-1 accuracy (%)")
            ax.set_title(nice(d))
            ax.grid(axis="y", visible=False)
        note = ", ".join(INTERVAL_NAMES.get(k, k) for k in sorted(kinds))
        fig.suptitle(f"{title}; error bars: {note}" if note else title)
    return fig
