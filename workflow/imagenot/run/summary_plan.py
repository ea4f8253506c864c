"""Where the run summary reads and writes (stage plan of rule ``run_summary``), and the end of
every workflow run: the Snakefile's ``onsuccess:`` calls :func:`on_success`.

Kept apart from :mod:`imagenot.run.run_summary`, which the rule's job runs: this module knows every
stage's paths (importing their plans), that one only reads the files named here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from imagenot.core.paths import CLONE, FIGURES, TABLES
from imagenot.run.run_summary import REPORT, SUMMARY_HTML, SUMMARY_JSON, SUMMARY_MD
from imagenot.train.paths import FINAL_RESULT


def targets(config: dict) -> list[str]:
    """The summary's files, built last by rule ``run_summary``."""
    return [SUMMARY_MD, SUMMARY_JSON, SUMMARY_HTML]


def layout(config: dict) -> dict:
    """What the summary reads for ``config``: per dataset its manifest, its download report
    (LAION-built) and the validation images per class it asks for; per final run its
    ``result.json`` (the acquire and train stages' own paths) and its evaluation
    (``robustness.parquet``: its Identity row is the run's test accuracy, and for published
    weights the measured top-1 the summary sets beside the published one)."""
    from imagenot.acquire import plan as acquire_plan
    from imagenot.acquire.settings import FillSettings
    from imagenot.train import plan as train_plan

    made = acquire_plan.targets(config)
    datasets = {}
    for name, spec in config["datasets"].items():
        own = [t for t in made if t.startswith(acquire_plan.dataset_dir(name) + "/")]
        report = [t for t in made if t.startswith(acquire_plan.acquire_dir(name) + "/")]
        if not own:
            continue
        datasets[name] = {
            "kind": spec["kind"],
            "manifest": next(t for t in own if t.endswith(".parquet")),
            "download_stats": report[0] if report else None,
            "val_per_class": FillSettings.config_values(config, dataset=name)["val_per_class"],
        }
    from imagenot.evaluate.paths import ROBUSTNESS

    # each run's test accuracy is its evaluation's Identity row (for published weights, the
    # measured top-1 the summary sets beside the published one)
    runs = [
        {**run, "result": FINAL_RESULT.format(**run), "evaluation": ROBUSTNESS.format(**run)}
        for run in train_plan.final_runs(config)
    ]
    return {
        "description": config.get("description", ""),
        "datasets": datasets,
        "runs": runs,
        "rankings": transfer(config),
        "audits": audits(config),
    }


def audits(config: dict) -> dict[str, str]:
    """Per audited dataset, the near-duplicate audit's summary (its sentence is the run
    summary's line: imagenot.audit.tables.sentence)."""
    from imagenot.audit import plan as audit_plan

    return {d: audit_plan.summary_file(d) for d in audit_plan.audited_datasets(config)}


def transfer(config: dict) -> dict | None:
    """What the summary's "Do rankings transfer?" reads: the rankings statistics of standard
    accuracy (the analyse stage's file) and, per comparison label of the final runs
    (``imagenot.analyse.table.dataset_label``), its dataset, protocol and the figure that shows
    it; None where the config plans no final run."""
    from imagenot.analyse.plan import RANKINGS, VARIANTS
    from imagenot.analyse.table import dataset_label
    from imagenot.figures import plan as figures_plan
    from imagenot.train import plan as train_plan

    runs = train_plan.final_runs(config)
    if not runs:
        return None
    planned = set(figures_plan.figure_names(config, runs))
    comparisons: dict[str, dict] = {}
    for run in runs:
        label = dataset_label(run["dataset"], run["protocol"])
        if label not in comparisons:
            figure = _figure(config, run, planned)
            comparisons[label] = {k: run[k] for k in ("dataset", "protocol")} | {"figure": figure}
    return {"report": RANKINGS.format(variant=VARIANTS[0]), "comparisons": comparisons}


def _figure(config: dict, run: dict, planned: set[str]) -> str | None:
    """The figure that shows a comparison's rankings: the planned slope chart of rank changes
    that ``run``'s experiment feeds (its ranking linked model by model to the reference's),
    else the planned figure of the rankings module it feeds, else its planned
    accuracy-against-ImageNet figure."""
    from imagenot.figures.plan import FIGURE_PDF, kind_names
    from imagenot.figures.registry import WORKFLOW_FIGURES

    def module(kind: str) -> str:
        return WORKFLOW_FIGURES.entry(kind).code.partition(":")[0].rsplit(".", 1)[-1]

    kinds = [k for m in ("rank_changes", "rankings") for k in WORKFLOW_FIGURES if module(k) == m]
    kinds += [k for k in WORKFLOW_FIGURES if WORKFLOW_FIGURES.entry(k).against_imagenet]
    for kind in kinds:
        for name in kind_names(config, [run], kind):
            if name in planned:
                return FIGURE_PDF.format(figure=name)
    return None


def rankings_input(config: dict) -> list[str]:
    """The rankings statistics the summary reads (rule ``run_summary``'s ``rankings``): none
    where the config plans no final run."""
    where = transfer(config)
    return [where["report"]] if where else []


def inputs(config: dict) -> list[str]:
    """The files the summary reads (not the figures and tables: editing a figure's code reruns
    that figure alone, docs/contracts.md)."""
    where = layout(config)
    files = [d[k] for d in where["datasets"].values() for k in ("manifest", "download_stats")]
    files += [*where["audits"].values()]
    return [f for f in files if f] + [r[k] for r in where["runs"] for k in ("result", "evaluation")]


def on_success(config: dict, workflow=None) -> None:
    """The end of a workflow run (in its working directory): print the summary and where the
    report is (and whether it is older than the results, with the command that refreshes it);
    exit 1 when the results are unusable (an error of the summary). A run of a few files (a
    figure rerun) prints a short summary: what it built, the study's problem counts and the
    report line. ``workflow``: Snakemake's, for the targets, config files and Snakefile."""
    from imagenot.run.run_summary import collect, format_text

    summary = collect(layout(config))
    command = run_report_command(workflow)
    line = report_line(Path("."), command)
    # the files named on the command line (a one-figure rerun); none for the default target
    # or rules given by name
    files = sorted(map(str, getattr(getattr(workflow, "dag", None), "targetfiles", None) or []))
    text = short_text(summary, files, line) if files else format_text(summary, command, line)
    print("\n" + text, file=sys.stderr)
    if summary["errors"]:
        raise SystemExit(
            f"imagenot: the run finished with UNUSABLE RESULTS ({summary['errors']} error(s) "
            f"{'above' if not files else f'in {SUMMARY_MD}'}; {SUMMARY_MD} once rule run_summary "
            f"ran; report: {REPORT})"
        )


def run_report_command(workflow=None) -> str:
    """The command that (re)writes the report of the run ``workflow`` (Snakemake's: its config
    files and Snakefile), as the end of a run prints it: :func:`report_command` with
    :func:`config_files`, from this working directory."""
    return report_command(config_files(workflow), _clone(workflow))


def _clone(workflow) -> Path:
    """The clone whose Snakefile ``workflow`` runs (none: this package's)."""
    return Path(getattr(workflow, "main_snakefile", None) or CLONE / "Snakefile").resolve().parent


def config_files(workflow=None) -> list[str]:
    """The run's config files as a report command names them: one inside the clone by its path
    from the clone's root (``config/paper.yaml``), any other as given. Rule ``run_summary``
    records these, not the command, so that moving the clone or the working directory reruns
    nothing (tests/test_moved_run.py); the job builds the command where it runs."""
    clone, out = _clone(workflow), []
    for f in getattr(workflow, "configfiles", None) or []:
        path = Path(f).resolve()
        out.append(str(path.relative_to(clone)) if path.is_relative_to(clone) else str(f))
    return out


def report_command(configfiles: list[str], clone: Path = CLONE) -> str:
    """The command that (re)writes the report of this run, with its Snakemake typed so that it
    runs without an activated venv: from the clone's root, ``.venv/bin/snakemake`` with the
    run's config files (none for the demo's default); from a working directory of its own, the
    Snakemake, Snakefile, workflow profile, config files and folder by absolute path, so that
    it works typed anywhere (from the clone's root Snakemake would find ``profiles/default`` by
    a relative path, and its report metadata would be looked for in the working directory)."""
    import shlex

    here = Path.cwd().resolve()
    venv = Path(sys.executable).parent / "snakemake"
    if clone.resolve() == here:
        words = [os.path.relpath(venv) if venv.is_file() else "snakemake"]
        if configfiles and configfiles != ["config/config.yaml"]:
            words += ["--configfile", *configfiles]
    else:
        words = [str(venv) if venv.is_file() else "snakemake", "--snakefile"]
        words += [str(clone / "Snakefile"), "--workflow-profile", str(clone / "profiles/default")]
        words += ["--directory", str(here)]
        if configfiles:  # (an absolute path stays as it is under clone / f)
            words += ["--configfile", *(str(clone / f) for f in configfiles)]
    return " ".join(map(shlex.quote, words)) + f" --report {REPORT}"


# what the report shows, whose files a run may change after the report was written
REPORTED = (SUMMARY_JSON, f"{FIGURES}", f"{TABLES}")


def report_line(root: Path, command: str) -> str:
    """Where the report is: current, stale (older than a figure, table or the summary it
    shows; say which and how to refresh it), or not written yet (how to write it); the command
    with what it trusts, and none where ``root``'s Snakemake metadata holds a record the report
    would run code from (imagenot.run.report_trust)."""
    from imagenot.run import report_trust

    report = root / REPORT
    records = report_trust.untrusted(root)
    if records:
        return f"Report: NOT to be written yet: {report_trust.refusal(root, records)}"
    trust = (
        f" The command trusts {report_trust.METADATA} (checked here: no record in it runs code; "
        "docs/security.md)."
    )
    if not report.is_file():
        return f"Report: `{command}` writes it.{trust}"
    written = report.stat().st_mtime
    newer = []
    for item in REPORTED:
        path = root / item
        found = [path] if path.is_file() else (path.rglob("*") if path.is_dir() else [])
        newer += [p for p in found if p.is_file() and p.stat().st_mtime > written]
    if not newer:
        return f"Report: {REPORT}"
    newest = max(newer, key=lambda p: p.stat().st_mtime)
    return (
        f"Report: {REPORT} is STALE: older than {len(newer)} of the files it shows (the newest "
        f"{newest.relative_to(root)}); refresh it with `{command}`.{trust}"
    )


def short_text(summary: dict, files: list[str], report: str) -> str:
    """The end of a run of a few named files: what was asked for, the study's problem counts
    (the whole summary: results/summary.md) and the report line."""
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    counts = f"{summary['errors']} error(s), {summary['warnings']} warning(s)"
    out = [f"Done: {shown}.", f"The study: {counts} ({SUMMARY_MD} has the whole summary)."]
    out += [f"- {p['level'].upper()}: {p['message']}" for p in summary["problems"]]
    return "\n".join([*out, report]) + "\n"
