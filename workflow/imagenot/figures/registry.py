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

from dataclasses import dataclass

from imagenot.registries import Registry

#: What one file of a figure kind can be drawn for, in the order its name spells them
#: (``accuracy_vs_imagenet_{dataset}_{protocol}``).
DRAWN_FOR = ((), ("dataset",), ("dataset", "protocol"))

#: Which of the config's final runs feed a kind (it is drawn when some do), as
#: ``imagenot.figures.plan`` reads them: ``always`` (every run); ``st_runs`` (standard-training
#: runs); ``transfer_runs`` (FT/TL runs on ``analyse.downstream_dataset``); ``baseline_run``
#: (runs of ``analyse.baseline_model``). A closed list, so that planning stays a pure function
#: of the config that tests can enumerate.
WHEN = ("always", "st_runs", "transfer_runs", "baseline_run")


@dataclass(frozen=True)
class FigureKind:
    """A workflow figure kind: what draws it, what one file is drawn for, when it is drawn.

    ``code``: its plotting module (a rule input), a module of ``imagenot.figures`` by its bare
    name, or ``"module:function"`` for a figure drawn by ``function(accuracy, options, style,
    **drawn_for)`` (a plugin's; ``dataset=`` / ``protocol=`` as keywords when drawn for them).
    ``drawn_for``: one of :data:`DRAWN_FOR`: one file for the run, or one per dataset (in drawing
    order) or per (dataset, protocol) pair of the runs that ``when`` selects.
    ``when``: one of :data:`WHEN`, the runs that feed it (none: the kind is not planned).
    """

    code: str
    drawn_for: tuple[str, ...] = ()
    when: str = "always"
    against_imagenet: bool = False
    """The x axis is ImageNet accuracy (``analyse.imagenet_axis``): when that axis is the
    reference dataset's own ST accuracy, the reference's ST file (a point cloud on the diagonal)
    is not planned. Only for a kind drawn per (dataset, protocol)."""

    def __post_init__(self) -> None:
        if self.drawn_for not in DRAWN_FOR:
            raise ValueError(f"figure drawn_for {self.drawn_for!r}: one of {DRAWN_FOR}")
        if self.when not in WHEN:
            raise ValueError(f"figure when {self.when!r}: one of {', '.join(WHEN)}")
        if self.against_imagenet and self.drawn_for != ("dataset", "protocol"):
            raise ValueError("figure against_imagenet: only for drawn_for=('dataset', 'protocol')")


class FigureRegistry(Registry):
    """A :class:`Registry` whose entries are :class:`FigureKind`; a plain string entry (a
    plugin's ``"module:draw"``) is taken as ``FigureKind(code)``: drawn once, always."""

    def __init__(self, what: str, entries=()):
        super().__init__(what)
        for name, entry in dict(entries).items():
            self[name] = entry

    def __setitem__(self, name: str, entry) -> None:
        if isinstance(entry, str):
            entry = FigureKind(entry)
        if not isinstance(entry, FigureKind):
            raise TypeError(f"figure {name!r}: entry must be a FigureKind, not {entry!r}")
        super().__setitem__(name, entry)


WORKFLOW_FIGURES: FigureRegistry = FigureRegistry(
    "figure",
    {
        "rankings_st": FigureKind("rankings", when="st_runs"),
        "rankings_transfer": FigureKind("rankings", when="transfer_runs"),
        "relative_progress": FigureKind("relative_progress", when="baseline_run"),
        "accuracy_vs_imagenet": FigureKind(
            "accuracy_vs_imagenet", ("dataset", "protocol"), against_imagenet=True
        ),
        "per_transform": FigureKind("per_transform", ("dataset",), when="st_runs"),
    },
)
"""Workflow figure kind -> its :class:`FigureKind` (plotting module, what one file is drawn for,
when it is drawn): the plan's file names, the figure rule's wildcard and the config enum all
derive from it, so adding a figure is this entry and its code."""

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
