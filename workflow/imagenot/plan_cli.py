"""``imagenot plan``: what a config will cost before launch, without its data on disk.

Per rule group: jobs, GPU jobs, requested GPU-hours and core-hours (upper bounds), the largest
memory a job asks for; training's estimated GPU-hours with their assumptions; what to ask for in
an allocation request (GPU-hours, the longest single job and so the partition, GPU memory,
node-local disk); storage of every stage's outputs; the wall time of training as a function of
the GPUs. Library: :mod:`imagenot.planning` (the jobs, from Snakemake's own dry run) and
:mod:`imagenot.costs` (the figures).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

THROUGHPUT_HELP = (
    "your GPU's measured speed: the JSON report of `imagenot preflight` run on it (or the "
    "output of `benchmarks/bench_feed_models.py --json`); the estimate then uses its fed "
    "images/s for the models it measured, and the GPU memory its memory checks measured "
    "(default: the config's train.throughput, an RTX 3090's)"
)
# headroom on the estimate for the allocation request: reruns of failed or preempted jobs
MARGIN = 0.2


def register(subparsers: argparse._SubParsersAction) -> None:
    from imagenot.cli import subcommand

    p = subcommand(
        subparsers,
        "plan",
        _plan,
        description="Plans the config's `all` with Snakemake's dry run against empty "
        "placeholder inputs in a temporary folder (no data is read), then sums per rule group "
        "and says what to request: GPU-hours, the longest single job (which decides the "
        "partition), the GPU memory, node-local disk, and the wall time as a function of the "
        "GPUs. Requested figures are upper bounds; estimates say their source.",
    )
    p.add_argument(
        "--config",
        required=True,
        nargs="+",
        type=Path,
        metavar="FILE",
        help="workflow config file(s): a base, then overlays that change a few keys (merged in "
        "order, later files winning, as snakemake's --configfile)",
    )
    p.add_argument(
        "--gpus", type=int, default=8, help="GPUs at once, for the wall time (default: 8)"
    )
    p.add_argument("--throughput", type=Path, metavar="FILE", help=THROUGHPUT_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object (default: text)")


def build_plan(config_path: Path | list[Path], gpus: int, measured: Path | None = None) -> dict:
    """The whole plan of ``config_path`` (one file, or a base and its overlays) as one
    JSON-ready dict."""
    from imagenot import costs
    from imagenot.config import load_configs
    from imagenot.planning import config_paths, planned_jobs

    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    paths = config_paths(config_path)
    config = load_configs(paths)
    measurements = costs.read_measurements(measured, config)
    table, source = measurements["throughput"], measurements["source"]
    jobs = planned_jobs(paths)
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
    estimate = round(sum(r["gpu_hours"] for r in rows), 1)
    storage_total = sum(s["bytes"] or 0 for s in stored)
    return {
        "config": ", ".join(map(str, paths)),
        "groups": groups,
        "total": total,
        "training_estimate": {
            "gpu_hours": estimate,
            "rows": rows,
            "throughput": table,
            "throughput_source": source,
            "assumptions": [
                "every trial of every halving stage trains to its end (no early stopping): "
                "an upper bound of the search",
                "images per epoch: the dataset's training split as the config sizes it",
                "TL: one features pass over the train and val splits at the training throughput",
                f"train.gpus_per_job > 1 scales at {costs.DDP_EFFICIENCY:.0%} of linear",
                "throughput measured at 224 px; other image sizes are not rescaled",
                *left_out,
            ],
        },
        "request": _request(config, groups, estimate, table, measurements, storage_total),
        "wall_time": costs.wall_time(rows, gpus),
        "wall_time_by_gpus": costs.wall_time_by_gpus(rows, gpus),
        "storage": stored,
        "storage_total_bytes": storage_total,
    }


def _request(config, groups, estimate, table, measurements, storage_total) -> dict:
    """What to ask for in an allocation request: GPU-hours (the estimate with a margin, not the
    requested sum), the longest single job against the partitions' limit, the GPU memory the
    largest job needs, node-local disk, and storage."""
    from imagenot import costs
    from imagenot.slurm_profile import load_site, max_runtime_min

    site = config["resources"]["site"]
    memory = measurements["memory"]
    largest = None
    if memory:
        measured = [m for m in memory if m["peak_gib"] is not None]
        largest = max(measured, key=lambda m: m["peak_gib"], default=None)
    return {
        "gpu_hours": round(estimate * (1 + MARGIN), -1 if estimate > 100 else 0),
        "gpu_hours_estimate": estimate,
        "margin": MARGIN,
        "gpu_hours_requested_sum": round(sum(g["gpu_hours_requested"] for g in groups), 1),
        "longest_job": costs.longest_job(config, table),
        "max_runtime_hours": round(max_runtime_min(config, load_site(site)) / 60, 1),
        "gpu_memory": {
            "measured": memory is not None,
            "largest": largest,
            "failed": [m for m in memory or [] if m["status"] == "fail"],
        },
        "node_local_disk": costs.node_local_disk(config),
        "storage_bytes": storage_total,
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
    out += ["", *format_request(plan)]
    out += ["", *format_wall_time(plan)]
    out += ["", "storage, estimate:"]
    for s in plan["storage"]:
        out.append(f"  {s['stage']:<8} {s['item']:<52} {_gb(s['bytes']):>14}  ({s['source']})")
    out.append(f"  total {_gb(plan['storage_total_bytes'])}")
    return "\n".join(out)


def _wrapped(lines: list[str]) -> list[str]:
    """Each ``  item: ...`` line wrapped at 100 columns, its continuation indented."""
    import textwrap

    out = []
    for line in lines:
        out += (
            textwrap.wrap(line, 100, subsequent_indent="    ", break_on_hyphens=False)
            if line.startswith("  ")
            else [line]
        )
    return out


def format_request(plan: dict) -> list[str]:
    """The allocation request, one line per thing to ask for, each with why."""
    return _wrapped(_request_lines(plan))


def _request_lines(plan: dict) -> list[str]:
    r, est = plan["request"], plan["training_estimate"]
    out = ["what to request (an allocation):"]
    if not est["rows"]:
        out.append("  GPU-hours: not estimated (no trained model has a throughput)")
    else:
        out.append(
            f"  GPU-hours: {r['gpu_hours']:,.0f}: the training estimate above "
            f"({r['gpu_hours_estimate']:,.1f}, every trial to its end, at the throughput of "
            f"{est['throughput_source'].split(' (')[0]}) plus {r['margin']:.0%} for reruns of "
            f"failed or preempted jobs. Not the {r['gpu_hours_requested_sum']:,.0f} GPU-h "
            "requested above: that sum of each job's time limit x GPUs is what the scheduler "
            "must let a job ask for, not what the run uses"
        )
    job = r["longest_job"]
    if job:
        gpus = f"{job['gpus']} GPU{'s' if job['gpus'] > 1 else ''}"
        fits = (
            f"within the {r['max_runtime_hours']:g} h time limit jobs ask for "
            "(resources.max_runtime_min, or the site profile's)"
            if job["hours"] <= r["max_runtime_hours"]
            else f"longer than the {r['max_runtime_hours']:g} h jobs ask for (resources."
            "max_runtime_min, or the site profile's): it checkpoints before its limit and its "
            "next attempt resumes there (train.deadline_margin_minutes), so any GPU partition "
            f"works; one whose limit is at least {job['hours']:,.0f} h runs it without requeueing"
        )
        out.append(
            f"  longest single job: {job['experiment']} {job['model']}, a {job['job']} of "
            f"{job['epochs']} epochs: {job['hours']:,.1f} h on {gpus} (train.gpus_per_job); "
            f"{fits}"
        )
    mem = r["gpu_memory"]
    if mem["largest"]:
        m = mem["largest"]
        out.append(
            f"  GPU memory: {m['peak_gib']:,.1f} GiB for the largest job ({m['check']}, "
            f"{m['per_gpu']} images per GPU; measured by the preflight on a "
            f"{m['device_gib']:,.0f} GiB GPU): ask for GPUs with at least that much"
        )
        for f in mem["failed"]:
            out.append(
                f"  GPU memory: {f['check']} did not fit at {f['per_gpu']} per GPU on that GPU "
                f"(fits: {f['fits'] or 'not one image'}): see the preflight's report"
            )
    else:
        out.append(
            "  GPU memory: not measured: `imagenot preflight --config ... --json R.json --md "
            "R.md` on one of your GPUs measures every model's peak at its per-GPU batch "
            "(docs/gpu.md); give its report to --throughput and this line says how much"
        )
    disk = r["node_local_disk"]
    if disk["stage_to_local"]:
        out.append(
            f"  node-local disk: {_gb(disk['all_trained_bytes'])} per node for "
            f"train.stage_to_local (one copy of each dataset a node trains on; the largest "
            f"alone {_gb(disk['largest_dataset_bytes'])})"
        )
    else:
        out.append(
            "  node-local disk: none (train.stage_to_local is off: datasets are read in place; "
            f"turned on, up to {_gb(disk['all_trained_bytes'])} per node)"
        )
    out.append(f"  shared storage: {_gb(r['storage_bytes'])} (the storage estimate below)")
    return out


def format_wall_time(plan: dict) -> list[str]:
    """Training's wall time against the GPUs, and where more GPUs stop helping, and why."""
    from imagenot.costs import DDP_EFFICIENCY

    w, by = plan["wall_time"], plan["wall_time_by_gpus"]
    if not w["longest_chain"]:
        return ["wall time of training: not estimated (no GPU-hours estimate)"]
    points = by["points"]
    table = [
        "wall time of training against GPUs, estimate (queueing and data stages not included):",
        "  GPUs   " + "".join(f"{p['gpus']:>8}" for p in points),
        "  hours  " + "".join(f"{p['hours']:>8,.0f}" for p in points),
    ]
    out = [
        f"  on --gpus {w['gpus']}: {w['hours']:,.1f} h",
        f"  Past {by['knee_gpus']} GPUs the wall time stays {by['knee_hours']:,.1f} h, the "
        f"critical path: one trial of {w['longest_chain']} trains its halving stages one "
        "after another (each stage waits for the rung's decision and resumes the stage "
        "before), then its final seed, however many GPUs run the other trials beside it. "
        "train.gpus_per_job > 1 shortens it (data-parallel, about "
        f"{DDP_EFFICIENCY:.0%} of linear).",
    ]
    return table + _wrapped(out)


def _plan(args: argparse.Namespace) -> None:
    """What a config will cost, and what to ask for, before launch (no data needed)."""
    plan = build_plan(args.config, args.gpus, args.throughput)
    print(json.dumps(plan, indent=1) if args.json else format_plan(plan))
