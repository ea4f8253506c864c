"""``imagenot plan``: what a config will cost before launch, without its data on disk.

Per rule group: jobs, GPU jobs, requested GPU-hours and core-hours (upper bounds), the largest
host memory a job asks for; the estimated GPU-hours of every GPU stage (training three ways:
low, expected with early stopping, and the bound where no trial stops early), each with its
source; the data stages' time; what to ask for in an allocation request (GPU-hours, the longest
single job and so the partition, GPU memory, node-local disk); storage of every stage's
outputs, each line with the rules that read it (a dataset line per stored split); training's schedule on the GPUs (when it ends, and the share of the reserved GPU-hours
it uses), and with ``--deadline-hours`` the GPU count that meets the deadline at the least
cost. Once a run has finished trials or final runs in its working directory, their epochs and
images/s re-estimate what is left. Library: :mod:`imagenot.plan.planning` (the jobs, from
Snakemake's own dry run), :mod:`imagenot.plan.costs` (the figures), :mod:`imagenot.plan.measured` (what
was measured) and :mod:`imagenot.plan.schedule` (the schedule).
"""

from __future__ import annotations

import json as _json
import textwrap
from collections import Counter
from functools import partial
from pathlib import Path

import yaml

from imagenot.acquire.sizes import dataset_images
from imagenot.audit.cost import audit_cost, format_audit
from imagenot.core.config import load_configs
from imagenot.plan import costs
from imagenot.plan.data_stages import data_stage_rows, whole_run
from imagenot.plan.measured import median_rate, read_measurements
from imagenot.plan.planning import config_paths, planned_jobs
from imagenot.plan.schedule import recommend, speed
from imagenot.plan.slurm_profile import load_site, max_runtime_min
from imagenot.train import estimate

# headroom on the estimate for the allocation request: reruns of failed or preempted jobs
MARGIN = 0.2


def build_plan(
    config_path: Path | list[Path],
    gpus: int,
    measured: Path | list[Path] | None = None,
    deadline_hours: float | None = None,
    directory: Path | str = ".",
    cores: int | None = None,
) -> dict:
    """The whole plan of ``config_path`` (one file, or a base and its overlays) as one
    JSON-ready dict. ``directory``: the working directory of the run, whose finished trials
    and final runs (their records and metrics) re-estimate what is left; ``cores``: the CPU
    cores the data stages run on, in place of the config's ``resources.plan_cores``."""
    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    if deadline_hours is not None and deadline_hours <= 0:
        raise ValueError(f"--deadline-hours must be positive, got {deadline_hours}")
    if cores is not None and cores < 1:
        raise ValueError(f"--cores must be at least 1, got {cores}")
    paths = config_paths(config_path)
    config = load_configs(paths)
    if cores is not None:
        config["resources"]["plan_cores"] = cores
    measurements = read_measurements(measured, config)
    table, source = dict(measurements["throughput"]), measurements["source"]
    records = estimate.run_records(config, directory)
    from_run = {}
    # a job's metrics count the images of all its GPUs: one GPU's share, as the estimate scales
    # a data-parallel job (the run's jobs at the model's GPUs per job, estimate.job_gpus)
    for model in config["train"]["models"]:
        got = median_rate(records, model)
        if got:
            per_gpu = speed(estimate.job_gpus(config, model), estimate.DDP_EFFICIENCY)
            table[model], from_run[model] = got[0] / per_gpu, got[1]
    if from_run:
        source += (
            f"; measured by this run ({Path(directory) / 'results/train'}, median training "
            f"images/s of its epochs, per GPU) for {', '.join(sorted(from_run))}"
        )
    jobs = planned_jobs(paths)
    groups = costs.group_rows(config, jobs)
    rows = estimate.training_rows(config, table, records)
    keys = ("jobs", "gpu_jobs", "gpu_hours_requested", "core_hours_requested")
    total = {k: round(sum(g[k] for g in groups), 1) for k in keys}  # (counts stay int)
    stored = costs.storage(config)
    unmeasured = [m for m in config["train"]["models"] if m not in table]
    unsized = [d for d in config["datasets"] if dataset_images(config, d) is None]
    left_out = [f"models without a throughput (not estimated): {', '.join(unmeasured)}"]
    left_out = left_out[: bool(unmeasured)]
    if unsized:
        left_out.append(f"datasets of unknown size (not estimated): {', '.join(unsized)}")
    training = {
        s: round(sum(r["gpu_hours" + ("" if s == "expected" else f"_{s}")] for r in rows), 1)
        for s in estimate.SCENARIOS
    }
    done = round(sum(r["done_gpu_hours"] for r in rows), 1)
    stages = costs.gpu_stage_rows(config, jobs, table)
    others = round(sum(g["gpu_hours"] for g in stages), 1)
    storage_total = sum(s["bytes"] or 0 for s in stored)
    stops = {r["experiment"]: r["stop_epochs"] for r in reversed(rows)}
    expected = training["expected"]
    wall = estimate.wall_time(rows, gpus)
    data = data_stage_rows(config, jobs, gpus)
    saving = sum(s["bytes_at_own_side"] - s["bytes"] for s in stored if "side" in s)
    deadline = None
    if deadline_hours and rows:  # each answer with its overlay, the YAML to write over the config
        deadline = recommend(estimate.chains(rows), deadline_hours, estimate.DDP_EFFICIENCY, gpus)
        for key in ("uniform", "per_model", "on_gpus"):
            if deadline.get(key):
                deadline[key]["overlay"] = gpus_overlay(config, deadline[key]["per_model"])
    return {
        "config": ", ".join(map(str, paths)),
        "groups": groups,
        "total": total,
        "training_estimate": {
            "gpu_hours": expected,
            "gpu_hours_low": training["low"],
            "gpu_hours_bound": training["bound"],
            "done_gpu_hours": done,
            "left_gpu_hours": round(expected - done, 1),
            "from_run": {
                "records": sum(len(r["slots"]) + len(r["finals"]) for r in records.values()),
                "models_measured": from_run,
            },
            "stop_epochs": stops,
            "rows": [{k: v for k, v in r.items() if k != "chain"} for r in rows],
            "throughput": table,
            "throughput_source": source,
            "assumptions": [*estimate.assumptions(config), *left_out],
        },
        "gpu_stages": stages,
        "gpu_hours": {
            "training": expected,
            "other_stages": others,
            "total": round(expected + others, 1),
            "total_low": round(training["low"] + others, 1),
            "total_bound": round(training["bound"] + others, 1),
        },
        "data_stages": data,
        "audit": audit_cost(config),
        "whole_run": whole_run(config, data, wall, stages, gpus),
        "request": _request(
            config, groups, rows, expected + others, table, measurements, storage_total, done
        ),
        "wall_time": wall,
        "wall_time_by_gpus": estimate.wall_time_by_gpus(rows, gpus),
        "deadline": deadline,
        "storage": stored,
        "storage_total_bytes": storage_total,
        "storage_saving_bytes": saving,
    }


def gpus_overlay(config: dict, per_model: dict[str, int]) -> dict:
    """The config overlay that gives each model of ``per_model`` its GPUs per job: the value
    most models take as ``train.gpus_per_job``, the others (and every model the config already
    names) in ``train.gpus_per_job_overrides``; merged over ``config`` (``--configfile``) it
    plans what ``per_model`` says."""
    counts = Counter(per_model.values())
    default = max(counts, key=lambda g: (counts[g], -g))
    named = config["train"]["gpus_per_job_overrides"]
    own = {m: g for m, g in sorted(per_model.items()) if g != default or m in named}
    train: dict = {"gpus_per_job": default}
    if own:
        train["gpus_per_job_overrides"] = own
    return {"train": train}


def _request(config, groups, rows, expected, table, measurements, storage_total, done) -> dict:
    """What to ask for in an allocation request: GPU-hours (the expected estimate of every GPU
    stage, less what the run has done, with a margin; not the bound, nor the requested sum),
    the longest single job against the partitions' limit, the GPU memory the largest job
    needs, node-local disk, and storage."""
    site = config["resources"]["site"]
    memory = measurements["memory"]
    left = expected - done
    return {
        "gpu_hours": round(left * (1 + MARGIN), -1 if left > 100 else 0),
        "gpu_hours_estimate": round(left, 1),
        "margin": MARGIN,
        "gpu_hours_requested_sum": round(sum(g["gpu_hours_requested"] for g in groups), 1),
        "longest_job": estimate.longest_job(config, table),
        "longest_job_expected": estimate.longest_expected_job(rows),
        "max_runtime_hours": round(max_runtime_min(config, load_site(site)) / 60, 1),
        "gpu_memory": {
            **estimate.gpu_memory(config, memory),
            "measured": memory is not None,
            "failed": [m for m in memory or [] if m["status"] == "fail"],
        },
        "node_local_disk": estimate.node_local_disk(config),
        "storage_bytes": storage_total,
    }


def format_plan(plan: dict) -> str:
    """The plan as text for a terminal or the top of a log."""
    out = [f"imagenot plan: {plan['config']}", ""]
    head = f"{'group':<12} {'jobs':>6} {'GPU jobs':>8} {'GPU-h req':>10} {'core-h req':>10} "
    out.append(head + f"{'host mem/job':>13}")
    for g in [*plan["groups"], {**plan["total"], "group": "total"}]:
        mem = f"{g['peak_mem_mb_requested'] / 1000:,.1f} GB" if "notes" in g else ""
        if g.get("peak_mem_mb_projected"):
            mem += f" (proj. {g['peak_mem_mb_projected'] / 1000:,.1f})"
        out.append(
            f"{g['group']:<12} {g['jobs']:>6} {g['gpu_jobs']:>8} {g['gpu_hours_requested']:>10,.0f}"
            f" {g['core_hours_requested']:>10,.0f} {mem:>13}".rstrip()
        )
    out.append("  req = requested runtime x GPUs (or cores): what the scheduler must allow")
    out.append("  host mem/job: the host memory (RAM) a job asks for; GPU memory: see below")
    notes = sorted({n for g in plan["groups"] for n in g["notes"]})
    out += [f"  note: {n}" for n in notes]
    out += ["", *format_gpu_hours(plan)]
    out += ["", *format_data_stages(plan)]
    out += ["", *_wrapped(format_audit(plan["audit"]))]
    out += ["", *format_request(plan)]
    out += ["", *format_wall_time(plan)]
    if plan.get("deadline"):
        out += ["", *format_deadline(plan)]
    out += ["", "storage, estimate:"]
    for s in plan["storage"]:
        read = ", ".join(s.get("read_by") or ["nothing"])
        out.append(f"  {s['stage']:<8} {s['item']:<52} {_gb(s['bytes']):>14}  read by {read}")
        out.append(f"  {'':<8} ({s['source']})")
    out.append(f"  total {_gb(plan['storage_total_bytes'])}")
    if plan.get("storage_saving_bytes"):
        saving = f"{_gb(plan['storage_saving_bytes'])} less than every split at its dataset's"
        line = "  each split on disk is stored at the side its readers need (its line's px): "
        out += _wrapped([f"{line}{saving} image_size (the same bytes per pixel, an estimate)"])
    return "\n".join(out)


def format_request(plan: dict) -> list[str]:
    """The allocation request, one line per thing to ask for, each with why."""
    r, est, h = plan["request"], plan["training_estimate"], plan["gpu_hours"]
    out = ["what to request (an allocation):"]
    if not est["rows"]:
        out.append("  GPU-hours: not estimated (no trained model has a throughput)")
    else:
        done = ""
        if est["done_gpu_hours"]:
            done = f", less the {est['done_gpu_hours']:,.1f} this run has done: "
            done += f"{r['gpu_hours_estimate']:,.1f} left"
        out.append(
            f"  GPU-hours: {r['gpu_hours']:,.0f}: the expected estimate of every GPU stage above "
            f"({h['total']:,.1f}{done}; throughput: {est['throughput_source'].split(' (')[0]}) "
            f"plus {r['margin']:.0%} for reruns of failed or preempted jobs. Between "
            f"{h['total_low']:,.0f} (every trial stops at its first chance) and "
            f"{h['total_bound']:,.0f} (none stops early, the bound). Not the "
            f"{r['gpu_hours_requested_sum']:,.0f} GPU-h requested above (the time limits the "
            "scheduler must allow, not what the run uses)"
        )
    job, expected, limit = r["longest_job"], r["longest_job_expected"], r["max_runtime_hours"]
    if job:
        asked = f"the {limit:g} h limit jobs ask for (resources.max_runtime_min, or the site's)"
        fits = f"within {asked}"
        if job["hours"] > limit:
            fits = f"longer than {asked}: it checkpoints and its next attempt resumes (train."
            fits += f"deadline_margin_minutes); a limit of {job['hours']:,.0f} h avoids requeues"
        first = "  longest single job: "
        if expected:
            first += f"expected {expected['experiment']} {expected['model']}, a {expected['job']}"
            first += f" of {expected['hours']:,.1f} h; "
        out.append(
            f"{first}at the bound {job['experiment']} {job['model']}, a {job['job']} of "
            f"{job['epochs']} epochs: {job['hours']:,.1f} h on {job['gpus']} GPU(s) (its GPUs "
            f"per job); {fits}"
        )
    mem = r["gpu_memory"]
    m = mem["largest"]
    ask = "ask for GPUs with at least that much"
    if mem["measured"] and m:
        out.append(
            f"  GPU memory (device): {m['peak_gib']:,.1f} GiB for the largest job ({m['check']}, "
            f"{m['per_gpu']} images per GPU; preflight on a {m['device_gib']:,.0f} GiB GPU): {ask}"
        )
        out += [
            f"  GPU memory: {f['check']} did not fit at {f['per_gpu']} per GPU on that GPU (fits: "
            f"{f['fits'] or 'not one image'}): see the preflight's report"
            for f in mem["failed"]
        ]
    elif m:
        how = f"measured at {m['per_gpu']} images per GPU"
        if m["kind"] != "measured":
            how = f"an estimate: {m['measured_gib']:,.1f} GiB measured at {m['measured_at']} "
            how += f"images per GPU, scaled to {m['per_gpu']}"
        out.append(
            f"  GPU memory (device): {m['peak_gib']:,.1f} GiB for the largest job ({m['model']}, "
            f"{how}; {mem['source']}): {ask}, or set train.max_batch_per_gpu (micro-batches)"
        )
    else:
        out.append(
            "  GPU memory (device): not estimated for these models: `imagenot preflight --config "
            "... --json R.json` on one of your GPUs measures each model's peak (docs/gpu.md); "
            "give its report to --throughput"
        )
    host = max((g["peak_mem_mb_requested"] for g in plan["groups"]), default=0)
    out.append(f"  host memory (RAM): {host / 1000:,.1f} GB for the largest job (host mem/job)")
    disk, gb = r["node_local_disk"], _gb(r["node_local_disk"]["all_trained_bytes"])
    if disk["stage_to_local"]:
        largest = _gb(disk["largest_dataset_bytes"])
        out.append(f"  node-local disk: {gb} per node for train.stage_to_local (largest {largest})")
    else:
        out.append(f"  node-local disk: none (train.stage_to_local off; on, up to {gb} per node)")
    out.append(f"  shared storage: {_gb(r['storage_bytes'])} (the storage estimate below)")
    return _wrapped(out)


def format_wall_time(plan: dict) -> list[str]:
    """Training's schedule against GPUs: when it ends and the share of the reserved GPU-hours
    it uses; where more GPUs stop helping, and why."""
    w, by, whole = plan["wall_time"], plan["wall_time_by_gpus"], plan.get("whole_run")
    if not w["longest_chain"]:
        return ["wall time of training: not estimated (no GPU-hours estimate)"]
    points = by["points"]
    table = [
        "training's schedule against GPUs, estimate (expected stop epochs; longest chain first;",
        "queueing not included, the data stages apart):",
        "  GPUs   " + "".join(f"{p['gpus']:>8}" for p in points),
        "  hours  " + "".join(f"{_cell(p['hours'], ',.0f'):>8}" for p in points),
        "  used   " + "".join(f"{_cell(p['used'], '.0%'):>8}" for p in points),
    ]
    on = f"  on --gpus {w['gpus']}: "
    if w["hours"] is None:
        on += "fewer GPUs than one job asks for (train.gpus_per_job, its overrides)"
    else:
        on += f"training ends after {w['hours']:,.1f} h and uses {w['used']:.0%} of the "
        on += f"{w['reserved_gpu_hours']:,.0f} GPU-hours reserved"
    if whole:
        steps = " -> ".join(f"{k} {v:,.1f} h" for k, v in whole["parts"].items())
        on += f". The whole run: about {whole['hours']:,.1f} h, its critical path {steps}"
    knee = (
        f"  Past {by['knee_gpus']} GPUs the wall time stays at least {by['knee_hours']:,.1f} h: "
        f"one trial of {w['longest_chain']} trains its halving stages, then its final seeds, "
        "one after another. More GPUs per job for its model (train.gpus_per_job_overrides, "
        f"{estimate.DDP_EFFICIENCY:.0%} of linear per doubling) shorten it; --deadline-hours H "
        "says the GPUs that end within H hours at the least cost."
    )
    return table + _wrapped([on, knee])


def plan(config, gpus, cores, deadline_hours, directory, throughput, json) -> None:
    """What a config will cost, and what to ask for, before launch (no data needed)."""
    found = build_plan(config, gpus, throughput, deadline_hours, Path(directory or "."), cores)
    print(_json.dumps(found, indent=1) if json else format_plan(found))


# ---- text helpers and the sections apart from the request ----------------------------------
def _gb(n: float | None) -> str:
    if n is None:
        return "not estimated"
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


def _wrapped(lines: list[str]) -> list[str]:
    """Each ``  item: ...`` line wrapped at 100 columns, its continuation indented."""
    wrap = partial(textwrap.wrap, width=100, subsequent_indent="    ", break_on_hyphens=False)
    return [part for line in lines for part in (wrap(line) if line.startswith("  ") else [line])]


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def format_gpu_hours(plan: dict) -> list[str]:
    """GPU-hours of every GPU stage: training low / expected / bound with the stop-epoch
    assumption of each experiment, and the other GPU stages with their sources."""
    est, h = plan["training_estimate"], plan["gpu_hours"]
    rows = [("train", "", est["gpu_hours_low"], est["gpu_hours"], est["gpu_hours_bound"])]
    rows += [(g["stage"], g["gpu_jobs"], *[g["gpu_hours"]] * 3) for g in plan["gpu_stages"]]
    rows.append(("total", "", h["total_low"], h["total"], h["total_bound"]))
    out = ["GPU-hours, estimate (every GPU stage):"]
    out.append(f"  {'stage':<28} {'GPU jobs':>8} {'low':>9} {'expected':>9} {'bound':>9}")
    out += [f"  {s:<28} {n:>8} {low:>9,.1f} {e:>9,.1f} {b:>9,.1f}" for s, n, low, e, b in rows]
    lines = [f"  throughput: {est['throughput_source']}"]
    for exp, stop in est["stop_epochs"].items():
        lines.append(
            f"  stop epoch, {exp}: low {stop['low']}, expected {stop['expected']}, bound "
            f"{stop['bound']} (expected: {stop['source']})"
        )
    for g in plan["gpu_stages"]:
        lines.append(f"  {g['stage']}: {g['source']}")
    if est["from_run"]["records"] or est["from_run"]["models_measured"]:
        lines.append(
            f"  this run so far: {est['from_run']['records']} finished trial slot(s) and final "
            f"run(s) read; {est['done_gpu_hours']:,.1f} GPU-h of training done, "
            f"{est['left_gpu_hours']:,.1f} expected left"
        )
    lines += [f"  assumes: {a}" for a in est["assumptions"]]
    return out + _wrapped(lines)


def format_data_stages(plan: dict) -> list[str]:
    """The data stages as scheduled on the plan's CPU cores (start and end hour of each), with
    their assumptions; then the whole run's wall time through them, its critical path named."""
    whole = plan.get("whole_run")
    cores = whole["cores"] if whole else None
    on = f"{cores} CPU cores, resources.plan_cores" if cores else "the plan's CPU cores"
    out = [f"data stages, estimate (scheduled on {on}; hours from the start of the run):"]
    for d in plan["data_stages"]:
        if d["hours"] is None:
            out.append(f"  {d['stage']}: not estimated: {d['source']}")
            continue
        out.append(
            f"  {d['stage']}: {d['hours']:,.1f} h (hours {d['start']:,.1f} to {d['end']:,.1f}; "
            f"{d['jobs']:,} jobs, {d['core_hours']:,.0f} core-h estimated): {d['source']}"
        )
    if len(out) == 1:
        out.append("  none (the config reads no dataset)")
    if whole:
        path = " -> ".join(f"{k} {v:,.1f} h" for k, v in whole["parts"].items())
        ready = ", ".join(f"{n} at {h:,.1f} h" for n, h in whole["ready"].items())
        out.append(
            f"  whole run, estimate: about {whole['hours']:,.1f} h on these cores and the "
            f"GPUs; critical path: {path}. Datasets ready: {ready}. ({whole['source']})"
        )
    return _wrapped(out)


def format_deadline(plan: dict) -> list[str]:
    """The GPU count that meets the deadline at the least reserved GPU-hours, both ways: one
    train.gpus_per_job for every model, and one per model."""
    d = plan["deadline"]
    out = [f"to end training within {d['deadline_hours']:g} h, at the least cost:"]
    for key, how in (
        ("uniform", "train.gpus_per_job, one value for every model"),
        ("per_model", "GPUs per job chosen per model"),
        ("on_gpus", f"on --gpus {d['gpus']}, the GPUs per job that end soonest"),
    ):
        r = d.get(key)
        if r is None:
            out.append(f"  {how}: nothing tried ends within the deadline")
            continue
        per = f"gpus_per_job {min(r['per_model'].values())}"
        if len(set(r["per_model"].values())) > 1:
            per = ", ".join(f"{m} {g}" for m, g in sorted(r["per_model"].items()) if g > 1)
            per += " GPUs per job, the others 1"
        out.append(
            f"  {how}: {r['gpus']} GPUs ({per}): training ends after {r['hours']:,.1f} h and "
            f"uses {r['used']:.0%} of the {r['reserved_gpu_hours']:,.0f} GPU-hours reserved"
        )
        if r.get("overlay"):  # one line of YAML flow style
            flow = yaml.safe_dump(r["overlay"], default_flow_style=True, sort_keys=False, width=1e9)
            out.append(f"    the overlay (--configfile) that plans it: {flow.strip()}")
    return _wrapped(out)
