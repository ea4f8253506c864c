"""The audit's figure: the closest pairs side by side (an audited image, its closest image in a
target set, their score), drawn in the shared figure style (:mod:`imagenot.core.figure_style`)."""

from __future__ import annotations

import numpy as np


def draw_pairs(pairs: list[dict], images: list[tuple], threshold: float, settings):
    """A figure of ``pairs`` (rows of the audit's closest table) with their ``images``
    ((query uint8 HWC, target uint8 HWC) each), two columns a pair."""
    import matplotlib.pyplot as plt

    from imagenot.core.figure_style import paper_style

    names = settings.dataset_names
    n = max(1, len(pairs))
    cols = 2 if n > 1 else 1
    rows = int(np.ceil(n / cols))
    width = settings.figure_options.width_in
    with paper_style(settings.figure_options):
        fig, axes = plt.subplots(rows, 2 * cols, figsize=(width, width / (2 * cols) * rows * 1.25))
        axes = np.atleast_2d(axes)
        for ax in axes.flat:
            ax.axis("off")
        for i, (pair, (query, target)) in enumerate(zip(pairs, images, strict=True)):
            r, c = divmod(i, cols)
            left, right = axes[r, 2 * c], axes[r, 2 * c + 1]
            left.imshow(query)
            right.imshow(target)
            target_name, target_split = pair["target"].split("/")
            mark = "≥" if pair["score"] >= threshold else "<"
            left.set_title(
                f"{names.get(settings.dataset, settings.dataset)} {pair['split']}", loc="left"
            )
            right.set_title(f"{names.get(target_name, target_name)} {target_split}", loc="left")
            left.text(
                0.0,
                -0.08,
                f"score {pair['score']:.3f} {mark} {threshold:.3f}",
                transform=left.transAxes,
                va="top",
            )
        if not pairs:
            axes.flat[0].text(0.5, 0.5, "no pairs", ha="center", va="center")
    return fig
