"""The handlers of the figures stage's steps (declared in :mod:`imagenot.core.steps`): one figure or
one table per call, each from its files by role (:mod:`imagenot.figures.files`) and the settings
object its rule built (:class:`imagenot.figures.settings.FigureSettings`, ``TableSettings``).
"""

from __future__ import annotations

from imagenot.figures.files import FigureFiles, TableFiles
from imagenot.figures.registry import WORKFLOW_FIGURES, WORKFLOW_TABLES
from imagenot.figures.settings import FigureSettings, TableSettings


def _registered(settings, command: str, field: str, names) -> None:
    """An unregistered name in ``settings`` exits with one line."""
    if getattr(settings, field) not in names:
        raise SystemExit(
            f"imagenot {command}: --settings.{field} {getattr(settings, field)!r} is not "
            f"registered ({', '.join(names)}; imagenot.figures.registry)"
        )


def figure(f: FigureFiles, s: FigureSettings) -> int:
    """Draw one figure (PDF + PNG) from accuracy.csv."""
    from imagenot.core.figure_style import save
    from imagenot.core.registries import resolve
    from imagenot.figures.data import load_accuracy

    _registered(s, "figure", "kind", WORKFLOW_FIGURES)
    opts, style = s.options, s.figure_options
    acc = load_accuracy(f.accuracy)
    request = {field: getattr(s, field) for field in WORKFLOW_FIGURES[s.kind].drawn_for}
    for field, value in request.items():
        if not value:
            raise SystemExit(f"imagenot figure {s.kind}: --settings.{field} is required")
    # built-in and plugin figures alike: the registered "module:draw"
    fig = resolve(WORKFLOW_FIGURES[s.kind].code)(acc, opts, style, **request)
    save(fig, f.pdf, f.png, style.dpi)
    print(f"wrote {f.pdf} and {f.png}")
    return 0


def table(f: TableFiles, s: TableSettings) -> int:
    """Write one table (CSV + Markdown)."""
    from imagenot.analyse.report import read_report
    from imagenot.figures import tables
    from imagenot.figures.data import load_accuracy

    _registered(s, "table", "table", WORKFLOW_TABLES)
    acc = load_accuracy(f.accuracy)
    if len(f.rankings) != 2:
        raise ValueError(f"--rankings: give the standard then the robust report, not {f.rankings}")
    reports = dict(zip(("standard", "robust"), map(read_report, f.rankings), strict=True))
    builder = tables.builder(s.table)
    df = builder(acc, reports, s.options)
    title = (builder.__doc__ or s.table).strip().rstrip(".")
    tables.write(df, f.csv, f.md, title, workflow_labels=True)
    print(f"wrote {f.csv} and {f.md}: {len(df)} rows")
    return 0
