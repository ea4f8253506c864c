"""`imagenot` subcommands of the figures stage: one figure or one table per call.

Both are rule commands: everything from config arrives as one ``--settings`` JSON object, a
:class:`imagenot.figures.settings.FigureSettings` / ``TableSettings`` the rule built with
``from_config``; file paths stay arguments (they are the rule's inputs and outputs).
"""

from __future__ import annotations

import argparse

from imagenot.analyse.plan import ACCURACY
from imagenot.figures.plan import FIGURE_KINDS, TABLE_NAMES
from imagenot.figures.settings import FigureSettings, TableSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``figure`` and ``table``."""
    p = subparsers.add_parser("figure", help="draw one figure (PDF + PNG) from accuracy.csv")
    p.add_argument("accuracy", help=f"the accuracy table ({ACCURACY})")
    p.add_argument(
        "--settings", required=True, help="JSON of imagenot.figures.settings.FigureSettings"
    )
    p.add_argument("--pdf", required=True)
    p.add_argument("--png", required=True)
    p.set_defaults(func=_figure)

    p = subparsers.add_parser("table", help="write one table (CSV + Markdown)")
    p.add_argument("accuracy", help=f"the accuracy table ({ACCURACY})")
    p.add_argument(
        "--settings", required=True, help="JSON of imagenot.figures.settings.TableSettings"
    )
    p.add_argument("--rankings", nargs=2, required=True, metavar=("STANDARD", "ROBUST"))
    p.add_argument("--csv", required=True)
    p.add_argument("--md", required=True)
    p.set_defaults(func=_table)


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
    from imagenot.figures.registry import WORKFLOW_FIGURES
    from imagenot.figures.style import save
    from imagenot.registries import resolve

    s = _settings(FigureSettings, args.settings, "figure", "kind", FIGURE_KINDS)
    opts, style = s.options, s.figure_options
    acc = _load(args.accuracy, "figure")
    if acc is None:
        return 2
    request = {field: getattr(s, field) for field in WORKFLOW_FIGURES[s.kind].drawn_for}
    for field, value in request.items():
        if not value:
            raise SystemExit(f"imagenot figure {s.kind}: --settings.{field} is required")
    # built-in and plugin figures alike: the registered "module:draw"
    fig = resolve(WORKFLOW_FIGURES[s.kind].code)(acc, opts, style, **request)
    save(fig, args.pdf, args.png, style.dpi)
    print(f"wrote {args.pdf} and {args.png}")
    return 0


def _table(args: argparse.Namespace) -> int:
    from imagenot.figures import tables

    s = _settings(TableSettings, args.settings, "table", "table", TABLE_NAMES)
    opts = s.options
    acc = _load(args.accuracy, "table")
    if acc is None:
        return 2
    from imagenot.analyse.report import read_report

    reports = {}
    for variant, path in zip(("standard", "robust"), args.rankings, strict=True):
        reports[variant] = read_report(path)
    builder = tables.builder(s.table)
    df = builder(acc, reports, opts)
    tables.write(df, args.csv, args.md, (builder.__doc__ or s.table).strip().rstrip("."))
    print(f"wrote {args.csv} and {args.md}: {len(df)} rows")
    return 0
