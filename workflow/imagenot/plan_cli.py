"""``imagenot plan``: what a config will cost before launch, without its data on disk.

Per rule group: jobs, GPU jobs, requested GPU-hours and core-hours (upper bounds), the largest
memory a job asks for; training's estimated GPU-hours with their assumptions; storage of every
stage's outputs; the wall time of training on ``--gpus`` GPUs. Library: :mod:`imagenot.planning`
(the jobs, from Snakemake's own dry run) and :mod:`imagenot.costs` (the figures).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

THROUGHPUT_HELP = (
    "output of `benchmarks/bench_feed_models.py --json` on your GPU: its fed images/s replace "
    "train.throughput for the models it measured"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("plan", help=__doc__.splitlines()[0].split(": ", 1)[1])
    p.description = (
        "Plans the config's `all` with Snakemake's dry run against empty placeholder inputs in a "
        "temporary folder (no data is read), then sums per rule group. Requested figures are "
        "upper bounds; estimates say their source."
    )
    p.add_argument("--config", required=True, type=Path, help="workflow config (YAML)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs at once, for the wall time (8)")
    p.add_argument("--throughput", type=Path, help=THROUGHPUT_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_plan)


def build_plan(config_path: Path, gpus: int, measured: Path | None = None) -> dict:
    """The whole plan of ``config_path`` as one JSON-ready dict."""
    from imagenot import costs
    from imagenot.config import load_config
    from imagenot.planning import planned_jobs

    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    config = load_config(config_path)
    table, source = costs.read_throughput(measured, config)
    jobs = planned_jobs(config_path)
    groups = costs.group_rows(config, jobs)
    rows = costs.training_rows(config, table)
    keys = ("jobs", "gpu_jobs", "gpu_hours_requested", "core_hours_requested")
    total = {k: round(sum(g[k] for g in groups), 1) for k in keys}
    total["jobs"], total["gpu_jobs"] = int(total["jobs"]), int(total["gpu_jobs"])
    stored = costs.storage(config)
    unmeasured = [m for m in config["train"]["models"] if m not in table]
    unsized = [d for d in config["datasets"] if costs.dataset_images(config, d) is None]
    left_out = [f"models without a throughput (not estimated): {', '.join(unmeasured)}"]
    left_out = left_out[: bool(unmeasured)]
    if unsized:
        left_out.append(f"datasets of unknown size (not estimated): {', '.join(unsized)}")
    return {
        "config": str(config_path),
        "groups": groups,
        "total": total,
        "training_estimate": {
            "gpu_hours": round(sum(r["gpu_hours"] for r in rows), 1),
            "rows": rows,
            "throughput": table,
            "throughput_source": source,
            "assumptions": [
                "every trial of every halving stage trains to its end (no early stopping): "
                "an upper bound of the search",
                "images per epoch: the dataset's training split as the config sizes it",
                "TL: one features pass over every split at the training throughput",
                f"train.gpus_per_job > 1 scales at {costs.DDP_EFFICIENCY:.0%} of linear",
                "throughput measured at 224 px; other image sizes are not rescaled",
                *left_out,
            ],
        },
        "wall_time": costs.wall_time(rows, gpus),
        "storage": stored,
        "storage_total_bytes": sum(s["bytes"] or 0 for s in stored),
    }


def _gb(n: float | None) -> str:
    if n is None:
        return "not estimated"
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def format_plan(plan: dict) -> str:
    """The plan as text for a terminal or the top of a log."""
    out = [f"imagenot plan: {plan['config']}", ""]
    head = f"{'group':<12} {'jobs':>6} {'GPU jobs':>8} {'GPU-h req':>10} {'core-h req':>10} "
    out.append(head + f"{'peak mem/job':>13}")
    for g in plan["groups"]:
        mem = f"{g['peak_mem_mb_requested'] / 1000:,.1f} GB"
        if g["peak_mem_mb_projected"]:
            mem += f" (proj. {g['peak_mem_mb_projected'] / 1000:,.1f})"
        out.append(
            f"{g['group']:<12} {g['jobs']:>6} {g['gpu_jobs']:>8} "
            f"{g['gpu_hours_requested']:>10,.0f} {g['core_hours_requested']:>10,.0f} {mem:>13}"
        )
    t = plan["total"]
    out.append(
        f"{'total':<12} {t['jobs']:>6} {t['gpu_jobs']:>8} {t['gpu_hours_requested']:>10,.0f} "
        f"{t['core_hours_requested']:>10,.0f}"
    )
    out.append("  req = requested runtime x GPUs (or cores): what the scheduler must allow")
    notes = sorted({n for g in plan["groups"] for n in g["notes"]})
    out += [f"  note: {n}" for n in notes]
    est = plan["training_estimate"]
    out += ["", f"training GPU-hours, estimate: {est['gpu_hours']:,.1f}"]
    out.append(f"  throughput: {est['throughput_source']}")
    out += [f"  assumes: {a}" for a in est["assumptions"]]
    w = plan["wall_time"]
    if w["longest_chain"]:
        out += [
            "",
            f"wall time of training on {w['gpus']} GPUs, estimate: {w['hours']:,.1f} h "
            f"(longest chain {w['longest_chain']}: {w['longest_chain_hours']:,.1f} h; "
            f"GPU-hours / GPUs: {w['gpu_hours_over_gpus']:,.1f} h; queueing and data stages not "
            "included)",
        ]
    else:
        out += ["", "wall time of training: not estimated (no GPU-hours estimate)"]
    out += ["", "storage, estimate:"]
    for s in plan["storage"]:
        out.append(f"  {s['stage']:<8} {s['item']:<52} {_gb(s['bytes']):>14}  ({s['source']})")
    out.append(f"  total {_gb(plan['storage_total_bytes'])}")
    return "\n".join(out)


def _plan(args: argparse.Namespace) -> None:
    plan = build_plan(args.config, args.gpus, args.throughput)
    print(json.dumps(plan, indent=1) if args.json else format_plan(plan))
