"""Where the run summary reads and writes (stage plan of rule ``run_summary``), and the end of
every workflow run: the Snakefile's ``onsuccess:`` calls :func:`on_success`.

Kept apart from :mod:`imagenot.run_summary`, which the rule's job runs: this module knows every
stage's paths (importing their plans), that one only reads the files named here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from imagenot.run_summary import REPORT, SUMMARY_HTML, SUMMARY_JSON, SUMMARY_MD
from imagenot.train.paths import FINAL_RESULT


def targets(config: dict) -> list[str]:
    """The summary's files, built last by rule ``run_summary``."""
    return [SUMMARY_MD, SUMMARY_JSON, SUMMARY_HTML]


def layout(config: dict) -> dict:
    """What the summary reads for ``config``: per dataset its manifest, its download report
    (LAION-built) and the validation images per class it asks for; per final run its
    ``result.json`` (the acquire and train stages' own paths), and for a run of published
    weights its evaluation (``robustness.parquet``: the measured top-1 the summary sets beside
    the published one)."""
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
    from imagenot.train.experiments import is_published

    published = {
        (e["dataset"], e["protocol"]) for e in config["train"]["experiments"] if is_published(e)
    }
    runs = []
    for run in train_plan.final_runs(config):
        entry = {**run, "result": FINAL_RESULT.format(**run)}
        if (run["dataset"], run["protocol"]) in published:
            # a published weight's measured top-1 beside its published one (the summary's check)
            entry["evaluation"] = ROBUSTNESS.format(**run)
        runs.append(entry)
    return {"description": config.get("description", ""), "datasets": datasets, "runs": runs}


def inputs(config: dict) -> list[str]:
    """The files the summary reads (not the figures and tables: editing a figure's code reruns
    that figure alone, docs/contracts.md)."""
    where = layout(config)
    files = [d[k] for d in where["datasets"].values() for k in ("manifest", "download_stats")]
    runs = where["runs"]
    return [f for f in files if f] + [
        run[k] for run in runs for k in ("result", "evaluation") if k in run
    ]


def on_success(config: dict) -> None:
    """The end of a workflow run (in its working directory): print the summary and where the
    report is; exit 1 when the results are unusable (an error of the summary)."""
    from imagenot.run_summary import collect, format_text

    snakemake = Path(sys.executable).parent / "snakemake"
    shown = os.path.relpath(snakemake) if snakemake.is_file() else "snakemake"
    summary = collect(layout(config))
    print("\n" + format_text(summary, shown), file=sys.stderr)
    if summary["errors"]:
        raise SystemExit(
            f"imagenot: the run finished with UNUSABLE RESULTS ({summary['errors']} error(s) "
            f"above; {SUMMARY_MD} once rule run_summary ran; report: {REPORT})"
        )
