"""Per-transformation rankings of the models trained on one dataset (heat map of ranks)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from imagenot.analyse import stats
from imagenot.analyse.table import is_standard
from imagenot.core.figure_style import integer_ticks, paper_style
from imagenot.core.settings import Style
from imagenot.figures import layout
from imagenot.figures.data import Options


def draw(acc: pd.DataFrame, opts: Options, style: Style, *, dataset: str):
    """Heat map of ranks (1 = best) with accuracies written in the cells: the best
    ``style.top`` models by standard accuracy, then the highlighted ones below them."""
    import matplotlib.pyplot as plt

    # models by standard accuracy; transforms: the standard first, then table order, then Robust
    d = acc[(acc["dataset"] == dataset) & (acc["protocol"] == "st")]
    mean = d.groupby(["model", "transform"], sort=False)["accuracy"].mean().unstack("transform")
    transforms = list(dict.fromkeys(d["transform"]))
    std = [t for t in transforms if is_standard(pd.Series([t]), opts.standard_transform)[0]]
    mean = mean[std + [t for t in transforms if t not in std]]
    mean["Robust"] = mean.mean(axis=1)
    if std:
        mean = mean.sort_values(std[0], ascending=False, kind="stable")
    models, transforms, values = list(mean.index), list(mean.columns), mean.to_numpy(dtype=float)
    ranks = np.apply_along_axis(stats.ranks, 0, values)  # per transform, 1 = best
    total = len(models)
    highlight = set(style.highlight)
    rows = list(range(min(style.top, total)))
    rows += [i for i in range(len(rows), total) if models[i] in highlight]
    models = [models[i] for i in rows]
    ranks, values = ranks[rows], values[rows]
    tick_fs = style.font_size - 1
    names = [layout.fit_text(opts.model(m), 2.2, tick_fs) for m in models]
    columns = [layout.fit_text(t, 1.2, tick_fs) for t in transforms]
    with paper_style(style):
        height = 1.2 + layout.text_width_in(columns, tick_fs) + 0.28 * max(len(models), 1)
        fig, ax = plt.subplots(figsize=(style.width_in, height))
        if not models:
            layout.note(ax, "no results")
            return fig
        texts = [[f"{v:.0f}" for v in row] for row in values]
        colors = np.where(ranks <= (total + 1) / 2, "k", "w")
        look = {"cmap": "viridis_r", "aspect": "auto", "vmin": 1, "vmax": max(total, 2)}
        im = layout.heat_map(ax, ranks, columns, names, texts, colors, style.font_size - 2, **look)
        layout.highlight_ticks(ax.get_yticklabels(), [m in highlight for m in models])
        more = f"; the best {min(style.top, total)} of {total} models" if total > style.top else ""
        title = "Rank (colour) and top-1 % (text) under each test-time transformation of the "
        title += f"models trained on {opts.dataset(dataset)}{more}"
        # over the figure: the axes are narrower beside long names
        fig.suptitle(layout.wrap_text(title, style.width_in - 0.3, style.font_size))
        bar = fig.colorbar(im, ax=ax, label="rank (1 = best)", shrink=0.8)
        integer_ticks(bar.ax.yaxis)
    return fig
