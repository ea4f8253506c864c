"""``imagenot run-summary`` (declared in :mod:`imagenot.core.steps`): what a run built and whether it
is usable (:mod:`imagenot.run.run_summary`), for the rule that writes it for the report and for
people."""

from __future__ import annotations

import json
from dataclasses import dataclass

from imagenot.core.files import Files, given, made
from imagenot.run.run_summary import SUMMARY_HTML, SUMMARY_JSON, SUMMARY_MD


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


def run_summary(f: SummaryFiles, layout: dict, strict: bool, configfiles: str | None = None) -> int:
    """Print the summary of the run whose ``layout`` (:func:`imagenot.run.summary_plan.layout`) is
    given and write its forms, ending with the command that writes the report of this run
    (its ``configfiles``, a JSON list: :func:`imagenot.run.summary_plan.report_command`); 1 with
    ``strict`` when it has an error."""
    from imagenot.run.run_summary import collect, format_text, write
    from imagenot.run.summary_plan import report_command as command

    report_command = command(json.loads(configfiles)) if configfiles else None
    summary = collect(layout, rankings=f.rankings)
    print(format_text(summary, report_command))
    if f.md or f.json or f.html:
        paths = (f.md or SUMMARY_MD, f.json or SUMMARY_JSON, f.html or SUMMARY_HTML)
        write(summary, *paths, report_command)
    return 1 if strict and summary["errors"] else 0
