"""The one list of figure and table names (config schema enums and CLI choices derive from it).

Each is an :class:`imagenot.registries.Registry` (a dict). Workflow figures and tables are drawn
from ``results/analyse/accuracy.csv`` by the rules of ``rules/figures.smk`` (names are config
values of ``analyse.figures`` / ``analyse.tables``, which the schema loader fills from these
registries). Report figures and tables are what
``imagenot rankings TABLE --report DIR`` writes for any results table. Both kinds are drawn by
the same panel and table functions (``imagenot.figures.accuracy_vs_imagenet.fit_panel``,
``imagenot.figures.rankings.draw_panels``, ``imagenot.figures.tables.agreement_rows``).
"""

from __future__ import annotations

from imagenot.registries import Registry

WORKFLOW_FIGURES: Registry = Registry(
    "figure",
    {
        "rankings_st": "rankings",
        "rankings_transfer": "rankings",
        "relative_progress": "relative_progress",
        "accuracy_vs_imagenet": "accuracy_vs_imagenet",
        "per_transform": "per_transform",
    },
)
"""Workflow figure kind -> its plotting module (a rule input): a module of ``imagenot.figures``
by its bare name, or ``"module:function"`` for a figure drawn by ``function(accuracy, options,
style) -> matplotlib figure`` (a plugin's). A kind other than these five is planned as one figure
``results/figures/<kind>.pdf``."""

_TABLES = "imagenot.figures.tables"
WORKFLOW_TABLES: Registry = Registry(
    "table",
    {
        name: f"{_TABLES}:{name}"
        for name in (
            "accuracy",
            "rankings",
            "agreement",
            "fits",
            "relative_progress",
            "error_correlations",
        )
    },
)
"""Workflow table name -> its builder ``(accuracy, rankings reports, Options) -> DataFrame``
(``"module:function"``, imported when the table is written; its docstring is the caption)."""

REPORT_FIGURES: Registry = Registry(
    "report figure",
    {
        "accuracy_vs_reference": "accuracy on each dataset against the reference, OLS line, band",
        "rank_changes": "rank on the reference and on each dataset, one line per model",
        "rankings": "accuracy with error bars per dataset, best first",
        "error_correlations": "Spearman rho of model errors between datasets (heat map)",
    },
)
"""Report figure -> its description; drawn by ``imagenot.figures.report.FIGURE_FUNCTIONS``."""
REPORT_TABLES: Registry = Registry(
    "report table",
    {
        "statistics": "Rank agreement and fit of each dataset against the reference",
        "ranks": "Accuracy, rank and delta rank of every model on every dataset",
        "across_datasets": "Size-weighted and geometric means across datasets, ranks, rank changes",
    },
)
"""Report table -> its title; built by ``imagenot.figures.tables.REPORT_BUILDERS``."""
