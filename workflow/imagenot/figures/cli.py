"""The handlers of the figures stage's steps (declared in :mod:`imagenot.steps`): one figure or
one table per call, each from its files by role (:mod:`imagenot.figures.files`) and the settings
object its rule built (:class:`imagenot.figures.settings.FigureSettings`, ``TableSettings``).
"""

from __future__ import annotations

from imagenot.figures.files import FigureFiles, TableFiles
from imagenot.figures.plan import FIGURE_KINDS, TABLE_NAMES
from imagenot.figures.settings import FigureSettings, TableSettings


def _registered(settings, command: str, field: str, names) -> None:
    """An unregistered name in ``settings`` exits with one line."""
    if getattr(settings, field) not in names:
        raise SystemExit(
            f"imagenot {command}: --settings.{field} {getattr(settings, field)!r} is not "
            f"registered ({', '.join(names)}; imagenot.figures.registry)"
        )


def _load(path: str, command: str):
    """accuracy.csv, or None after a one-line error on stderr."""
    import sys

    from imagenot.analyse.table import TableError
    from imagenot.figures import data

    try:
        return data.load_accuracy(path)
    except TableError as exc:
        print(f"imagenot {command}: {exc}", file=sys.stderr)
        return None


def figure(f: FigureFiles, s: FigureSettings) -> int:
    """Draw one figure (PDF + PNG) from accuracy.csv."""
    from imagenot.figures.registry import WORKFLOW_FIGURES
    from imagenot.figures.style import save
    from imagenot.registries import resolve

    _registered(s, "figure", "kind", FIGURE_KINDS)
    opts, style = s.options, s.figure_options
    acc = _load(f.accuracy, "figure")
    if acc is None:
        return 2
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
    from imagenot.figures import tables

    _registered(s, "table", "table", TABLE_NAMES)
    opts = s.options
    acc = _load(f.accuracy, "table")
    if acc is None:
        return 2
    from imagenot.analyse.report import read_report

    reports = {}
    if len(f.rankings) != 2:
        raise ValueError(f"--rankings: give the standard then the robust report, not {f.rankings}")
    for variant, path in zip(("standard", "robust"), f.rankings, strict=True):
        reports[variant] = read_report(path)
    builder = tables.builder(s.table)
    df = builder(acc, reports, opts)
    title = (builder.__doc__ or s.table).strip().rstrip(".")
    tables.write(df, f.csv, f.md, title, workflow_labels=True)
    print(f"wrote {f.csv} and {f.md}: {len(df)} rows")
    return 0
