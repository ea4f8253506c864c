"""Relative progress: each model's accuracy divided by the baseline model's, per dataset."""

from __future__ import annotations

import numpy as np
import pandas as pd

from imagenot.figures.data import Options, cells, imagenet_x, nice, ordered_labels
from imagenot.figures.style import Style, paper_style


def draw(acc: pd.DataFrame, opts: Options, style: Style):
    """Lines of accuracy / baseline accuracy over models ordered by ImageNet accuracy."""
    import matplotlib.pyplot as plt

    c = cells(acc, "standard", opts)
    labels = [opts.reference] + [d for d in ordered_labels(acc, opts, "st") if d != opts.reference]
    labels = [d for d in dict.fromkeys(labels) if (opts.baseline_model, d) in c.cells]
    pub = imagenet_x(acc, opts)
    models = sorted(
        {m for d in labels for m in c.models_of(d)},
        key=lambda m: (pub.get(m, np.inf), m),
    )
    with paper_style(style):
        fig, ax = plt.subplots(figsize=(style.column_in * 1.3, style.column_in))
        for i, d in enumerate(labels):
            base = c.cells[opts.baseline_model, d].mean
            x = [j for j, m in enumerate(models) if (m, d) in c.cells]
            y = [c.cells[models[j], d].mean / base for j in x]
            ax.plot(x, y, marker="o", color=f"C{i}", label=nice(d))
        ax.axhline(1.0, color="0.5", lw=0.8, ls="--")
        ax.set_xticks(range(len(models)), models, rotation=35, ha="right")
        ax.set_ylabel(f"accuracy / accuracy of {opts.baseline_model}")
        ax.set_title(f"Relative progress over {opts.baseline_model}")
        if labels:
            ax.legend(frameon=False)
        else:
            ax.text(
                0.5,
                0.5,
                f"{opts.baseline_model} has no results",
                ha="center",
                transform=ax.transAxes,
            )
    return fig
