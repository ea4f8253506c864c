"""``imagenot run-summary``: what a run built and whether it is usable (:mod:`imagenot.run_summary`),
for the rule that writes it for the report and for people."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from imagenot.cli import subcommand
from imagenot.files import Files, given, made
from imagenot.run_summary import SUMMARY_HTML, SUMMARY_JSON, SUMMARY_MD


@dataclass(frozen=True)
class SummaryFiles(Files):
    """``run-summary``: the rankings statistics it answers "Do rankings transfer?" from (none
    given: the layout's), and the summary's three forms (none given: printed only; one given:
    the others at the workflow's paths)."""

    rankings: str | None = given(
        "the rankings statistics (rule: results/analyse/rankings_standard.json; none where "
        "the config plans no final run)",
        optional=True,
    )
    md: str | None = made(f"the Markdown (rule: {SUMMARY_MD})", optional=True)
    json: str | None = made(f"the JSON (rule: {SUMMARY_JSON})", optional=True)
    html: str | None = made(f"the HTML page (rule: {SUMMARY_HTML})", optional=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subcommand(
        subparsers,
        "run-summary",
        _run_summary,
        files=SummaryFiles,
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
    p.add_argument("--strict", action="store_true", help="exit 1 when there is an error")


def _run_summary(args: argparse.Namespace) -> int:
    """Whether rankings transfer, per comparison; what a run built, per dataset images per split and download success, per model the best
    validation/test accuracy, and every problem."""
    from imagenot.run_summary import collect, format_text, write
    from imagenot.settings import load

    f = SummaryFiles.from_args(args)
    summary = collect(load(args.settings), rankings=f.rankings)
    print(format_text(summary))
    if f.md or f.json or f.html:
        write(
            summary,
            Path(f.md or SUMMARY_MD),
            Path(f.json or SUMMARY_JSON),
            Path(f.html or SUMMARY_HTML),
        )
    return 1 if args.strict and summary["errors"] else 0
