"""What a run made, and whether it is usable: the summary printed at the end of every workflow
run (the Snakefile's ``onsuccess:``, :func:`imagenot.run.summary_plan.on_success`) and written for
the report (rule ``run_summary``). This module reads only the files its layout names
(:func:`imagenot.run.summary_plan.layout` knows the stages' paths), so the rule's environment needs
no stage's libraries.

Why: a run can end with exit 0 and results nobody can use (a dataset split without images, a
model at chance everywhere, a download part that fetched almost nothing). timm's ``train.py``
ends with a best-metric line and img2dataset with its success statistics; this is both, for the
whole study, read from the results tree alone (no rule's state), so it can be printed after any
run, however partial.

Problems have two levels. **error**: the results cannot be used as they are (a train or test
split with 0 images; a validation split with 0 images where the config asks for some); the
workflow then exits 1 after printing, the summary and report still written. **warning**: usable
but suspect (a model at chance on an experiment, which the preregistration's amendments allow
to retry, docs/method.md guardrail 4, and the models table marks "(at chance)"; a download part
whose success rate is under half its dataset's; a part below ``acquire.min_success_rate`` already
failed its own job; a published weight whose top-1 measured on the whole validation set lies more
than ``imagenot.train.facts.PUBLISHED_TOLERANCE`` points from its published one: the reference is
not the published protocol, and every comparison with it inherits the gap).

A final run's numbers are shown only as their producers wrote them: its ``result.json`` (the
validation accuracy) is checked as every reader checks it (:mod:`imagenot.train.records`: its
seal, under which its numbers are those its writer checked, and its identity against the
plan's run), and its test accuracy is its
evaluation's Identity row (``robustness.parquet``, measured once, for trained and published
weights alike), shown only when that evaluation measured the record read (the record's digest,
which every evaluation row names), its numbers checked as numbers read in. A failed check is an
error naming the file and the key, and each best test accuracy names the evaluation it was read
from and the digest of the record that evaluation measured.

The summary opens with the study's question, **do rankings transfer?**, per comparison with
the reference (:mod:`imagenot.analyse.transfer`, read from the rankings statistics its layout
names); the report's landing page (:func:`landing`) shows the same lines before the counts.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from imagenot.core.io import read_json, write_json, write_text
from imagenot.core.paths import RESULTS, SPLITS
from imagenot.train.records import (
    IDENTITY,
    SEAL_KEY,
    RecordError,
    read_record,
)

SUMMARY_MD = f"{RESULTS}/summary.md"
SUMMARY_JSON = f"{RESULTS}/summary.json"
SUMMARY_HTML = f"{RESULTS}/summary.html"
REPORT = f"{RESULTS}/report.html"
# the command that writes the demo's report from the clone's root, as README spells it
REPORT_COMMAND = f".venv/bin/snakemake --report {REPORT}"
FAR_BELOW = 0.5  # a part under this share of its dataset's download success rate is a warning
MIN_PART_ROWS = 50  # as acquire.min_success_rate: smaller parts say little
# what the summary reads of a final run's result.json: the keys every final run's result holds
SUMMARY_KEYS = (*IDENTITY, "num_classes")


def _split_counts(manifest: Path) -> dict[str, int]:
    import pyarrow.parquet as pq

    splits = pq.read_table(manifest, columns=["split"])["split"].to_pylist()
    return {s: splits.count(s) for s in SPLITS}


def _download(stats: Path) -> dict:
    """Overall success rate of a LAION dataset's download, and its parts far below it."""
    import pandas as pd

    df = pd.read_parquet(stats)
    df = df.assign(ok=df["count"].where(df["reason"] == "success", 0))
    parts = df.assign(round=df.get("round", 0)).groupby(["round", "part"])[["ok", "count"]].sum()
    ok, total = int(parts["ok"].sum()), int(parts["count"].sum())
    rate = ok / total if total else 0.0
    low = parts[
        (parts["count"] >= MIN_PART_ROWS) & (parts["ok"] / parts["count"] < FAR_BELOW * rate)
    ]
    low_parts = [
        {"round": int(r), "part": p, "success_rate": round(o / n, 3), "rows": int(n)}
        for (r, p), o, n in zip(low.index, low["ok"], low["count"], strict=True)
    ]
    return {
        "attempted": total,
        "success": ok,
        "success_rate": round(rate, 4),
        "low_parts": low_parts,
    }


def collect(
    layout: dict, root: str | os.PathLike = ".", rankings: str | os.PathLike | None = None
) -> dict:
    """The summary of the results under ``root`` (the workflow's working directory) laid out as
    ``layout`` says (:func:`imagenot.run.summary_plan.layout`: each dataset's manifest and download
    report, each final run's result, the rankings statistics): what exists is summarised, what
    does not is listed as not built. ``rankings``: the rankings statistics' file where it is
    not the layout's (the rule hands it by its role)."""
    from imagenot.analyse.transfer import answer
    from imagenot.train.search import at_chance

    root = Path(root)
    problems: list[dict] = []

    def warn(message: str, level: str = "warning") -> None:
        problems.append({"level": level, "message": message})

    def read(path: Path, reader: Callable[[Path], Any], what: str = "") -> Any:
        """``reader(path)``; None where ``path`` is not built, or is a record refused (an
        error) or a file unreadable (a warning: a stand-in, or a file being rewritten)."""
        if not path.is_file():
            return None
        try:
            return reader(path)
        except RecordError as exc:  # a record's or a number's refusal names the file itself
            warn(str(exc), "error")
        except (OSError, ValueError, KeyError) as exc:
            warn(f"{what}{path} unreadable ({exc})")
        return None

    datasets: dict[str, dict] = {}
    for name, where in layout["datasets"].items():
        images = read(root / where["manifest"], _split_counts, f"dataset {name}: ")
        if images is None:
            datasets[name] = {"built": False}
            continue
        entry = datasets[name] = {"built": True, "kind": where["kind"], "images": images}
        if where.get("download_stats") and (stats := root / where["download_stats"]).is_file():
            failed = {"attempted": 0, "success": 0, "success_rate": 0.0, "low_parts": []}
            entry["download"] = read(stats, _download, f"dataset {name}: ") or failed
            for part in entry["download"]["low_parts"]:
                warn(
                    f"dataset {name}: download part {part['part']} (round {part['round']}) "
                    f"fetched {part['success_rate']:.0%} of {part['rows']} images, under "
                    f"half the dataset's {entry['download']['success_rate']:.0%}"
                )
        for split, n in images.items():
            if n == 0 and (split != "val" or where["val_per_class"]):
                warn(f"dataset {name}: the {split} split has 0 images", "error")
    runs, missing, checks = [], 0, []
    for run in layout["runs"]:
        # the records' one reader (train.records): its seal, numbers and identity
        result = read(
            root / run["result"], partial(read_record, expected=run, required=SUMMARY_KEYS)
        )
        if result is None:
            missing += 1
            continue
        # the test accuracy: the evaluation's Identity row, read back like a number read in
        evaluation = root / run["evaluation"]
        measured = read(evaluation, _identity_row)
        if measured is not None and measured["record_sha256"] != result.get(SEAL_KEY):
            warn(
                f"{evaluation} measured another record of this run than {root / run['result']} "
                f"(its {SEAL_KEY}); its test accuracy is not shown: run the workflow again"
            )
            measured = None
        if measured is not None and result.get("published_top1") is not None:
            check = _published_check(run, result, measured)
            checks.append(check)
            if check["problem"]:
                warn(check["problem"])
        test = measured["top1"] if measured else None
        classes = result.get("num_classes")
        chance = bool(measured and classes and at_chance(test, classes, measured["n"]))
        row = {k: run[k] for k in ("dataset", "protocol", "model")} | {"at_chance": chance}
        row |= {"val_accuracy": result.get("val_accuracy"), "test_accuracy": test}
        # where the test accuracy comes from: the evaluation, and the digest of the final run's
        # record it measured (sealed by that record's producer)
        row["record"] = {"path": run["evaluation"], SEAL_KEY: result.get(SEAL_KEY)}
        runs.append(row | {"chance_accuracy": 100.0 / classes if classes else None})
    models = _best_per_model(runs)
    problems += _chance_warnings(models)
    audits = {  # per audited dataset, its near-duplicate audit's sentence (None: not built)
        name: read(root / path, lambda p: str(read_json(p)["sentence"]), f"audit {name}: ")
        for name, path in layout.get("audits", {}).items()
    }
    transfer = answer(layout.get("rankings"), root, problems, rankings)
    built = {
        "datasets": sum(d["built"] for d in datasets.values()),
        "final_runs": len(runs),
        "final_runs_not_built": missing,
    }
    return {
        "description": layout.get("description", ""),
        "transfer": transfer,
        "built": built,
        "datasets": datasets,
        "models": models,
        "audits": audits,
        "published_check": checks,
        "problems": problems,
        "errors": sum(p["level"] == "error" for p in problems),
        "warnings": sum(p["level"] == "warning" for p in problems),
        "report": REPORT if (root / REPORT).is_file() else None,
    }


def _identity_row(evaluation: Path) -> dict:
    """The Identity row of a final run's evaluation (the test split as the model sees it, the
    run's test accuracy), read by the evaluations' one reader
    (:func:`imagenot.evaluate.outputs.read_evaluation`: a RecordError names what is wrong). An
    unreadable file raises OSError or ValueError, one without an Identity row KeyError."""
    from imagenot.evaluate.outputs import read_evaluation

    rows = read_evaluation(evaluation).to_dict("records")
    row = next((r for r in rows if r["transform"] == "Identity"), None)
    if row is None:
        raise KeyError("no Identity row")
    return row


def _published_check(run: dict, result: dict, row: dict) -> dict:
    """A published weight's measured top-1 (its evaluation's Identity ``row``) beside the
    published top-1 its ``result.json`` records (the weights that ran, never the model's name),
    with the problem when it lies more than the tolerance off on the whole validation set (a
    subset of ImageNet's classes or images scores differently by design: shown, not a
    problem)."""
    from imagenot.train.facts import PUBLISHED_TEST_SIZE, PUBLISHED_TOLERANCE

    published = result["published_top1"]
    weights = result.get("weights")  # the weights that ran
    deviation = row["top1"] - float(published)
    whole = row["n"] >= PUBLISHED_TEST_SIZE
    problem = None
    if whole and abs(deviation) > PUBLISHED_TOLERANCE:
        problem = (
            f"published check: {run['model']} ({weights}) on {run['dataset']}: "
            f"measured top-1 {row['top1']:.2f}% (n={row['n']:,}), published "
            f"{float(published):.2f}%: {deviation:+.2f} points, over the tolerance of "
            f"{PUBLISHED_TOLERANCE}: the reference is not the published protocol"
        )
    check = {"model": run["model"], "dataset": run["dataset"], "weights": weights, "n": row["n"]}
    check |= {"measured_top1": row["top1"], "published_top1": float(published)}
    return check | {"deviation": deviation, "whole_validation_set": whole, "problem": problem}


def _chance_warnings(models: list[dict]) -> list[dict]:
    """One warning per model at chance on an experiment (every seed at chance: it did not train
    there), so that the table's "(at chance)" marks and the count of warnings (the report's
    landing page) are one verdict; a model at chance on every experiment it ran, one warning."""
    messages, by_model = [], {}
    for row in models:
        by_model.setdefault(row["model"], []).append(row)
    for model, rows in by_model.items():
        at = [r for r in rows if r["at_chance"]]
        if at and len(at) == len(rows):
            messages.append(f"model {model} is at chance on every experiment it ran")
            continue
        messages += [
            f"model {model} is at chance on {r['experiment']} (test "
            f"{_pct(r['best_test_accuracy'])}% against chance {_pct(r['chance_accuracy'])}%): "
            "it did not train there; an amendment may retry it (README section 5)"
            for r in at
        ]
    return [{"level": "warning", "message": message} for message in messages]


def _best_per_model(runs: list[dict]) -> list[dict]:
    """Per experiment and model, the best validation and test accuracy over its seeds, and where
    the best test accuracy was read from (the evaluation's path and the digest of the final run's
    record it measured)."""
    seeds: dict[tuple, list[dict]] = {}
    for run in runs:
        seeds.setdefault((run["dataset"], run["protocol"], run["model"]), []).append(run)
    out = []
    for (dataset, protocol, model), mine in seeds.items():
        tested = [r for r in mine if r["test_accuracy"] is not None]
        best = max(tested, key=lambda r: r["test_accuracy"], default=None)
        val = max((r["val_accuracy"] for r in mine if r["val_accuracy"] is not None), default=None)
        row = {"experiment": f"{dataset}/{protocol}", "model": model, "seeds": len(mine)}
        row |= {"best_val_accuracy": val, "best_test_accuracy": best and best["test_accuracy"]}
        row |= {"best_test_record": best and best["record"]}
        at_chance = all(r["at_chance"] for r in mine)
        out.append(row | {"chance_accuracy": mine[0]["chance_accuracy"], "at_chance": at_chance})
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _table(columns: list[str], rows: list[list]) -> list[str]:
    """A Markdown table of ``columns``, a line per row of cells."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]


def format_text(summary: dict, command: str | None = None, report: str | None = None) -> str:
    """The summary as Markdown (also what the console shows). ``command``: the one that writes
    the run's report (its Snakemake and config files: the job builds it with
    :func:`imagenot.run.summary_plan.report_command`; none: :data:`REPORT_COMMAND`, the
    demo's); ``report``: its last line, where the report is (the end of a run says whether it
    is stale: imagenot.run.summary_plan)."""
    from imagenot.analyse.transfer import section

    b = summary["built"]
    out = ["# Run summary", ""]
    if summary["errors"]:
        out += [f"**UNUSABLE RESULTS: {summary['errors']} error(s), see Problems.**", ""]
    out += section(summary)
    out.append(
        f"Built: {b['datasets']} dataset(s), {b['final_runs']} final run(s)"
        + (f" ({b['final_runs_not_built']} not built)" if b["final_runs_not_built"] else "")
        + "."
    )
    out += ["", "## Problems", ""]
    ordered = sorted(summary["problems"], key=lambda p: p["level"] != "error")  # errors first
    out += [f"- {p['level'].upper()}: {p['message']}" for p in ordered] or ["none"]
    datasets = []
    for name, d in summary["datasets"].items():
        dl = d.get("download")
        rate = f"{dl['success_rate']:.1%} of {dl['attempted']:,}" if dl else "n/a (read from disk)"
        counts = [f"{d['images'][split]:,}" for split in SPLITS] if d["built"] else []
        datasets.append([name, *counts, rate] if d["built"] else [name, "not built", "", "", ""])
    out += ["", "## Datasets", "", *_table(["dataset", *SPLITS, "download success"], datasets)]
    if summary.get("audits"):
        out += ["", "## Near-duplicate audit", ""]
        out += [
            f"- {line}" if line else f"- {name}: not built"
            for name, line in summary["audits"].items()
        ]
    models = [
        [m["experiment"], m["model"], m["seeds"], _pct(m["best_val_accuracy"]), test, chance]
        for m in summary["models"]
        for test in [_pct(m["best_test_accuracy"]) + (" (at chance)" if m["at_chance"] else "")]
        for chance in [_pct(m["chance_accuracy"])]
    ] or [["(no final run yet)", "", "", "", "", ""]]
    out += ["", "## Models: best over seeds (accuracy %)", ""]
    out += _table(["experiment", "model", "seeds", "validation", "test", "chance"], models)
    out.append("")
    # without ``report`` (the file the rule writes, read after the report may have been
    # written or refreshed): a line true whether the report exists, is current or is stale
    out.append(
        report
        or f"Report: {REPORT}, written and refreshed from these files by "
        f"`{command or REPORT_COMMAND}`; the end of each run says whether it exists and is "
        "current."
    )
    return "\n".join(out) + "\n"


def format_html(summary: dict, command: str | None = None) -> str:
    """The summary as a standalone HTML page (the report shows it on its Summary tab), its
    Markdown rendered by markdown-it (raw HTML in a message escaped); ``command``: as :func:`format_text`'s."""
    from markdown_it import MarkdownIt

    # its headings, lists, tables and the bold line, no other syntax: a message shows as written
    markdown = MarkdownIt("zero").enable(["heading", "list", "table", "emphasis"])
    body = markdown.render(format_text(summary, command))
    css = "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
    css += "strong{color:#b00}"  # the one bold line: UNUSABLE RESULTS
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{css}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def write(summary: dict, md: Path, js: Path, page: Path, command: str | None = None) -> None:
    """The summary's three forms, each written atomically; ``command``: as
    :func:`format_text`'s."""
    write_text(format_text(summary, command), md)
    write_json(summary, js)
    write_text(format_html(summary, command), page)


def landing(root: str | os.PathLike = ".") -> dict:
    """The report's landing page (its ``--report-metadata`` template), from the summary rule's
    JSON: first whether rankings transfer, one entry per comparison (the summary's line as the
    heading, Kendall tau-b as the value), then the counts. Values are numbers only: Snakemake
    renders a text value there as docutils internals, a key as plain text."""
    path = Path(root) / SUMMARY_JSON
    if not path.is_file():
        return {"run summary built": 0}
    from imagenot.analyse.transfer import transfer_lines

    s = read_json(path)  # the JSON files' one reader (a damaged file is named and moved aside)
    answer: dict = {}
    t = s.get("transfer")
    if t is not None and not t["built"]:
        answer["Do rankings transfer? rankings statistics built"] = 0
    elif t is not None:
        for row, line in zip(t["rows"], transfer_lines(s), strict=True):
            tau = round(row["kendall_tau"], 3)
            answer[f"Do rankings transfer? {line} (value: Kendall tau-b)"] = tau
        if left := len(t["left_out"]):
            answer["comparisons left out (no Kendall tau-b; results/summary.md says why)"] = left
    return answer | {
        "errors (unusable results)": s["errors"],
        "warnings": s["warnings"],
        "datasets built": s["built"]["datasets"],
        "final runs": s["built"]["final_runs"],
    }
