"""``imagenot run-summary``: what a run built and whether it is usable (:mod:`imagenot.run_summary`),
for the rule that writes it for the report and for people."""

from __future__ import annotations

import argparse
from pathlib import Path

from imagenot.run_summary import SUMMARY_HTML, SUMMARY_JSON, SUMMARY_MD


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "run-summary",
        help="what a run built, per dataset images per split and download success, per model "
        "the best validation/test accuracy, and every problem",
        description="Reads the results tree of the working directory. Errors (unusable "
        "results) come first; the exit status is 0 unless --strict (the rule writes the report's "
        "page either way; the workflow's end exits 1 on errors).",
    )
    p.add_argument(
        "--settings",
        required=True,
        metavar="JSON",
        help="what to read, as the rule passes it (imagenot.summary_plan.layout of the config; "
        "@FILE reads it from a file)",
    )
    p.add_argument("--md", type=Path, help=f"write the Markdown here (rule: {SUMMARY_MD})")
    p.add_argument("--json", type=Path, help=f"write the JSON here (rule: {SUMMARY_JSON})")
    p.add_argument("--html", type=Path, help=f"write the HTML page here (rule: {SUMMARY_HTML})")
    p.add_argument("--strict", action="store_true", help="exit 1 when there is an error")
    p.set_defaults(func=_run_summary)


def _run_summary(args: argparse.Namespace) -> int:
    from imagenot.run_summary import collect, format_text, write
    from imagenot.settings import load

    summary = collect(load(args.settings))
    print(format_text(summary))
    if args.md or args.json or args.html:
        write(
            summary,
            args.md or Path(SUMMARY_MD),
            args.json or Path(SUMMARY_JSON),
            args.html or Path(SUMMARY_HTML),
        )
    return 1 if args.strict and summary["errors"] else 0
