"""Shared figure style (paper size) and atomic PDF + PNG saving."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from imagenot.figures.settings import Style
from imagenot.io import atomic_path

__all__ = ["HIGHLIGHT", "Style", "paper_style", "save"]

HIGHLIGHT = "C1"
"""Colour of the highlighted models (``analyse.figure_options.highlight``) in every figure."""


@contextmanager
def paper_style(style: Style) -> Iterator[None]:
    """Matplotlib rc settings readable when printed at ``style.width_in`` inches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fs = style.font_size
    rc = {
        "font.size": fs,
        "axes.titlesize": fs,
        "figure.titlesize": fs,  # the size texts are wrapped for (imagenot.figures.layout)
        "axes.labelsize": fs,
        "xtick.labelsize": fs - 1,
        "ytick.labelsize": fs - 1,
        "legend.fontsize": fs - 1,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "lines.markersize": 4,
        "pdf.fonttype": 42,
        "svg.fonttype": "none",
        "figure.constrained_layout.use": True,
        # Labels are names from configs and users' tables (a model "m$\\frac$"): shown as
        # written, never parsed as mathtext (which would fail the figure or render markup).
        "text.parse_math": False,
    }
    with plt.rc_context(rc):
        yield


def save(fig, pdf: str | os.PathLike, png: str | os.PathLike, dpi: int) -> None:
    """Write ``fig`` as PDF and PNG atomically, then close it."""
    import matplotlib.pyplot as plt

    with atomic_path(pdf, ".pdf") as tmp:
        fig.savefig(tmp, format="pdf", metadata={"CreationDate": None})
    with atomic_path(png, ".png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)
