"""`imagenot` subcommands of the figures stage: one figure or one table per call.

Both are rule commands: everything from config arrives as one ``--settings`` JSON object, a
:class:`imagenot.figures.settings.FigureSettings` / ``TableSettings`` the rule built with
``from_config``; the files by role (:mod:`imagenot.figures.files`).
"""

from __future__ import annotations

import argparse

from imagenot.cli import subcommand
from imagenot.figures.files import FigureFiles, TableFiles
from imagenot.figures.plan import FIGURE_KINDS, TABLE_NAMES
from imagenot.figures.settings import FigureSettings, TableSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``figure`` and ``table``."""
    subcommand(subparsers, "figure", _figure, files=FigureFiles, settings=FigureSettings)
    subcommand(subparsers, "table", _table, files=TableFiles, settings=TableSettings)


def _settings(cls, text: str, command: str, field: str, names):
    """The parsed settings; a wrong key or an unregistered name exits with one line."""
    from imagenot.settings import parse_or_exit

    settings = parse_or_exit(cls, text, command)
    if getattr(settings, field) not in names:
        raise SystemExit(
            f"imagenot {command}: --settings.{field} {getattr(settings, field)!r} is not "
            f"registered ({', '.join(names)}; imagenot.figures.registry)"
        )
    return settings


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


def _figure(args: argparse.Namespace) -> int:
    """Draw one figure (PDF + PNG) from accuracy.csv."""
    from imagenot.figures.registry import WORKFLOW_FIGURES
    from imagenot.figures.style import save
    from imagenot.registries import resolve

    s = _settings(FigureSettings, args.settings, "figure", "kind", FIGURE_KINDS)
    opts, style = s.options, s.figure_options
    f = FigureFiles.from_args(args)
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


def _table(args: argparse.Namespace) -> int:
    """Write one table (CSV + Markdown)."""
    from imagenot.figures import tables

    s = _settings(TableSettings, args.settings, "table", "table", TABLE_NAMES)
    opts = s.options
    f = TableFiles.from_args(args)
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
