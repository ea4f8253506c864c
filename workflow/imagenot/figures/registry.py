"""The one list of figure and table names (config schema enums and CLI choices derive from it).

Each is an :class:`imagenot.core.registries.Registry` (a dict). Workflow figures and tables are drawn
from ``results/analyse/accuracy.csv`` by the rules of ``rules/analyse.smk`` and ``rules/figures.smk`` (names are config
values of ``analyse.figures`` / ``analyse.tables``, which the schema loader fills from these
registries). Report figures and tables are what
``imagenot rankings TABLE --report DIR`` writes for any results table. Both kinds are drawn by
the same panel and table functions (``imagenot.figures.accuracy_vs_imagenet.fit_panel``,
``imagenot.figures.rankings.draw_panels``, ``imagenot.figures.rank_changes.draw_slopes``,
``imagenot.figures.tables.agreement_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.registries import Registry

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

    ``code``: ``"module:function"``, drawn by ``function(accuracy, options, style, **drawn_for)``
    (``dataset=`` / ``protocol=`` as keywords when drawn for them); built-in and plugin figures
    alike, through the one call of ``imagenot figure``. The module file is the rule's input.
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
        if ":" not in self.code:
            raise ValueError(f"figure code {self.code!r}: 'module:function'")
        if self.drawn_for not in DRAWN_FOR:
            raise ValueError(f"figure drawn_for {self.drawn_for!r}: one of {DRAWN_FOR}")
        if self.when not in WHEN:
            raise ValueError(f"figure when {self.when!r}: one of {', '.join(WHEN)}")
        if self.against_imagenet and self.drawn_for != ("dataset", "protocol"):
            raise ValueError("figure against_imagenet: only for drawn_for=('dataset', 'protocol')")


class FigureRegistry(Registry):
    """A :class:`Registry` whose entries are :class:`FigureKind`; a plain string entry (a
    plugin's ``"module:draw"``) is taken as ``FigureKind(code)``: drawn once, always. Entries
    are checked as they are registered (the built-in ones below are written as FigureKinds)."""

    def __setitem__(self, name: str, entry) -> None:
        if isinstance(entry, str):
            entry = FigureKind(entry)
        if not isinstance(entry, FigureKind):
            raise TypeError(f"figure {name!r}: entry must be a FigureKind, not {entry!r}")
        super().__setitem__(name, entry)


_FIGURES = "imagenot.figures"
WORKFLOW_FIGURES: FigureRegistry = FigureRegistry(
    "figure",
    {
        "rankings_st": FigureKind(f"{_FIGURES}.rankings:draw_st", when="st_runs"),
        "rank_changes_st": FigureKind(f"{_FIGURES}.rank_changes:draw_st", when="st_runs"),
        "rankings_transfer": FigureKind(f"{_FIGURES}.rankings:draw_transfer", when="transfer_runs"),
        "rank_changes_transfer": FigureKind(
            f"{_FIGURES}.rank_changes:draw_transfer", when="transfer_runs"
        ),
        "relative_progress": FigureKind(f"{_FIGURES}.relative_progress:draw", when="baseline_run"),
        "accuracy_vs_imagenet": FigureKind(
            f"{_FIGURES}.accuracy_vs_imagenet:draw", ("dataset", "protocol"), against_imagenet=True
        ),
        "per_transform": FigureKind(f"{_FIGURES}.per_transform:draw", ("dataset",), when="st_runs"),
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
            "accuracy rankings agreement fits relative_progress error_correlations published_check"
        ).split()
    },
)
"""Workflow table name -> its builder ``(accuracy, rankings reports, Options) -> DataFrame``
(``"module:function"``, imported when the table is written; its docstring is the caption; the
reports: :class:`imagenot.analyse.report.RankingsReport` by variant)."""

REPORT_FIGURES: Registry = Registry(
    "report figure",
    {
        "accuracy_vs_reference": f"{_FIGURES}.report:accuracy_vs_reference",
        "rank_changes": f"{_FIGURES}.report:rank_changes",
        "rankings": f"{_FIGURES}.report:rankings_figure",
        "error_correlations": f"{_FIGURES}.report:error_correlations",
    },
)
"""Report figure -> its drawing function ``(rankings report, Style) -> figure`` (or a list of
figures, its pages) (``"module:function"``, as every other figure; its docstring describes
it)."""
REPORT_TABLES: Registry = Registry(
    "report table",
    {name: f"{_TABLES}:report_{name}" for name in ("statistics", "ranks", "across_datasets")},
)
"""Report table -> its builder ``(rankings report) -> DataFrame`` (``"module:function"``, as
every workflow table; its docstring is the title)."""
