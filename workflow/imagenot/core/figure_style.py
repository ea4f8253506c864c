"""The one figure style (paper size, fonts, frame, box plots, integer count axes) and atomic
PDF + PNG saving, shared by every figure the project draws: the curation calibration, the
workflow's and the toolbox's figures, the diagnostics and the audit. It sits below every stage,
so that each draws in it; the style's settings are :class:`imagenot.core.settings.Style`
(``analyse.figure_options``).

Matplotlib reads how fonts are embedded (``pdf.fonttype``) when a figure is written, not when it
is drawn: the rc settings of :func:`paper_style` have ended by the time a figure is saved, so
the two writers every figure goes through (:func:`save`, :func:`write_pdf`) apply
:data:`SAVE_RC` around ``savefig`` themselves. No PDF the project writes embeds a Type 3 font, which
journals and conference sites refuse.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from imagenot.core.io import atomic_path

if TYPE_CHECKING:
    from imagenot.core.settings import Style

HIGHLIGHT = "C1"
"""Colour of the highlighted models (``analyse.figure_options.highlight``) in every figure."""

PAGE_RATIO = 9.0 / 6.75
"""Tallest figure per unit of width: a page's text block (6.75 x 9 inches in a two-column
journal). A figure drawn at ``style.width_in`` is at most ``PAGE_RATIO`` times as high."""

BOX_STYLE = {
    "medianprops": {"color": "k", "lw": 1.2},
    **{f"{part}props": {"color": "0.2", "lw": 0.8} for part in ("box", "whisker", "cap")},
    "flierprops": dict(marker=".", markersize=2, markerfacecolor="0.4", markeredgecolor="none"),
}
"""How every box plot is drawn: black medians, thin grey boxes and whiskers, small outliers."""

SAVE_RC = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}
"""The rc settings a figure is written under: fonts embedded as TrueType (Type 42) in PDF and
PostScript, kept as text in SVG, never as Type 3 (matplotlib's default for PDF)."""


@contextmanager
def paper_style(style: Style) -> Iterator[None]:
    """Matplotlib rc settings readable when printed at ``style.width_in`` inches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fs = style.font_size
    rc = {
        # figure.titlesize: the size texts are wrapped for (imagenot.figures.layout)
        **dict.fromkeys(("font.size", "axes.titlesize", "figure.titlesize", "axes.labelsize"), fs),
        **dict.fromkeys(("xtick.labelsize", "ytick.labelsize", "legend.fontsize"), fs - 1),
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "lines.markersize": 4,
        **SAVE_RC,
        "figure.constrained_layout.use": True,
        # Labels are names from configs and users' tables (a model "m$\\frac$"): shown as
        # written, never parsed as mathtext (which would fail the figure or render markup).
        "text.parse_math": False,
    }
    with plt.rc_context(rc):
        yield


def boxplot(ax, data, labels) -> None:
    """Box plots of ``data`` (one array each) named ``labels``, in :data:`BOX_STYLE`."""
    ax.boxplot(data, tick_labels=labels, **BOX_STYLE)
    ax.grid(axis="x", visible=False)


def integer_ticks(axis) -> None:
    """Whole-number ticks on a count axis (``ax.xaxis`` / ``ax.yaxis``)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def write_pdf(fig, pdf: str | os.PathLike, metadata: dict | None = None) -> None:
    """Write ``fig`` as a PDF atomically under :data:`SAVE_RC` (TrueType fonts, no creation
    date; ``metadata`` adds or blanks further entries). fontTools, which subsets the embedded
    fonts, reports warnings only (its INFO lines run to hundreds per PDF)."""
    import matplotlib.pyplot as plt

    logging.getLogger("fontTools").setLevel(logging.WARNING)
    with atomic_path(pdf, ".pdf") as tmp, plt.rc_context(SAVE_RC):
        fig.savefig(tmp, format="pdf", metadata={"CreationDate": None, **(metadata or {})})


def save(fig, pdf: str | os.PathLike, png: str | os.PathLike, dpi: int) -> None:
    """Write ``fig`` as PDF (:func:`write_pdf`) and PNG at ``dpi`` atomically, without the
    producing software's name or a date (stable bytes), then close it."""
    import matplotlib.pyplot as plt

    write_pdf(fig, pdf, {"Producer": None})
    with atomic_path(png, ".png") as tmp:
        fig.savefig(tmp, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(fig)
