"""Do rankings transfer? The run summary's first section (:mod:`imagenot.run.run_summary`) and the
report's landing page, read from a rankings report (``rankings_standard.json``, which
:func:`imagenot.run.summary_plan.transfer` names with each comparison's protocol and figure).

Per comparison with the reference that has a Kendall tau-b: the tau-b, its bootstrap interval
(or the reason the bootstrap refused one), the p-value, the number of common models, a verdict
by one rule (:data:`RULE`) and the figure that shows it, in protocol order (ST, FT, TL, then
the rest). A comparison without a tau-b (too few common models) is left out and counted with
the report's reason, never shown as an empty line. A file that is not a rankings report is an
error naming the file and the key (:func:`imagenot.analyse.report.read_report`).
"""

from __future__ import annotations

import os
from pathlib import Path

from imagenot.analyse.report import ReportError, p_text, read_report
from imagenot.core.names import PUBLISHED_DATASET

ALPHA = 0.05  # the verdict's significance level (RULE)
RULE = (
    f"yes where Kendall tau-b > 0 at p < {ALPHA}, no where tau-b < 0 at p < {ALPHA} (rankings "
    "reversed), inconclusive otherwise; the bootstrap interval is shown, the verdict reads the "
    "p-value alone (it tests the models' order, the interval resamples what the bootstrap names)"
)
PROTOCOL_ORDER = ("st", "ft", "tl")  # the summary lists standard training, fine-tuning, transfer


def answer(
    where: dict | None, root: Path, problems: list[dict], rankings: str | os.PathLike | None
) -> dict | None:
    """Do rankings transfer: one row per comparison of the rankings statistics with a Kendall
    tau-b (``where``: :func:`imagenot.run.summary_plan.transfer`), the others left out with their
    reason; None where the config plans no final run."""
    if where is None:
        return None
    source = str(rankings) if rankings is not None else where["report"]
    out: dict = {"source": source, "rule": RULE, "built": False, "rows": [], "left_out": []}
    path = root / source
    if not path.is_file():
        return out
    try:
        rep = read_report(path)
    except ReportError as exc:
        problems.append({"level": "error", "message": str(exc)})
        return out
    except (OSError, ValueError) as exc:  # a stand-in, or a file being rewritten
        problems.append({"level": "warning", "message": f"{source} unreadable ({exc})"})
        return out
    out |= {"built": True, "reference": rep.reference, "variant": rep.variant}
    for label, entry in rep.compared().items():
        known = where["comparisons"].get(label, {})
        protocol = known.get("protocol") or (
            "published" if label == PUBLISHED_DATASET else label.partition("/")[2] or "st"
        )
        tests, boot = entry.correlations, entry.bootstrap
        tau = tests.kendall_tau if tests is not None else None
        if tau is None:
            why = [f"{k}: {v}" for k, v in rep.not_computed.items() if k.startswith(f"{label}:")]
            reason = (
                "; ".join(why) or f"no Kendall tau-b ({entry.common_models or 0} common model(s))"
            )
            out["left_out"].append({"label": label, "reason": reason})
            continue
        ci = boot.kendall_tau_ci if boot is not None else None
        ci = None if ci is None or None in ci else ci
        refused = ((boot.refused or {}).get("kendall_tau_ci") if boot is not None else None) or (
            None if ci is not None else rep.not_computed.get(f"{label}: bootstrap", "no bootstrap")
        )
        p = tests.kendall_p
        out["rows"].append(
            {
                "protocol": protocol,
                "comparison": label,
                "reference": rep.reference,
                "kendall_tau": tau,
                "interval": ci,
                "interval_confidence": rep.confidence,
                "interval_method": (
                    f"{boot.interval_name}, resampling {boot.method}" if boot is not None else None
                ),
                "interval_refused": refused,
                "p": p,
                "p_method": tests.p_method,
                "models": entry.common_models,
                "verdict": verdict(tau, p),
                "figure": known.get("figure"),
            }
        )
    order = {k: i for i, k in enumerate(PROTOCOL_ORDER)}  # stable: the report's order within
    out["rows"].sort(key=lambda row: order.get(row["protocol"].split("-")[0], len(order)))
    return out


def verdict(tau: float | None, p: float | None) -> str:
    """Whether rankings transfer, by :data:`RULE`: yes, no or inconclusive."""
    if tau is None or p is None or not p < ALPHA or tau == 0:
        return "inconclusive"
    return "yes" if tau > 0 else "no"


def transfer_lines(summary: dict) -> list[str]:
    """One line per comparison of the summary's transfer section (the Markdown's and the
    report's landing page's), the reference named in each."""
    t = summary.get("transfer")
    lines = []
    for row in t["rows"] if t and t["built"] else []:
        tag = row["protocol"].split("-")[0].upper()
        interval = f"(no interval: {row['interval_refused']})"
        if row["interval"] is not None:
            low, high = row["interval"]
            level = f"{row['interval_confidence']:.0%}" if row["interval_confidence"] else ""
            interval = f"[{low:.2f}, {high:.2f}] ({level} bootstrap: {row['interval_method']})"
        figure = f"; figure: {row['figure']}" if row["figure"] else ""
        lines.append(
            f"{tag}, {row['comparison']} vs {row['reference']}: Kendall tau-b "
            f"{row['kendall_tau']:.2f} {interval}, {p_text(row['p'])}, {row['models']} models: "
            f"{row['verdict']}{figure}"
        )
    return lines


def section(summary: dict) -> list[str]:
    """The summary's first section: do rankings transfer, per comparison."""
    t = summary.get("transfer")
    out = ["## Do rankings transfer?", ""]
    if t is None:
        return [*out, "No final run planned: nothing to compare.", ""]
    if not t["built"]:
        return [*out, f"Not built yet: {t['source']} (the rankings statistics).", ""]
    out += [f"- {line}" for line in transfer_lines(summary)] or ["No comparison has a tau-b."]
    out += ["", f"Rule: {t['rule']}. Statistics: {t['source']} ({t['variant']} accuracy)."]
    if t["left_out"]:
        why = "; ".join(f"{x['label']} ({x['reason']})" for x in t["left_out"])
        out.append(f"Left out, {len(t['left_out'])} comparison(s) without a Kendall tau-b: {why}.")
    return [*out, ""]
