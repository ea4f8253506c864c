"""The text of ``imagenot plan``'s sections that stand apart from the allocation request:
GPU-hours of every GPU stage with their sources, the data stages, the deadline's answer; and
the helpers every section shares (bytes, wrapped lines). :mod:`imagenot.plan.plan_cli` prints them.
"""

from __future__ import annotations


def _gb(n: float | None) -> str:
    if n is None:
        return "not estimated"
    return f"{n / 1e9:,.1f} GB" if n >= 1e9 else f"{n / 1e6:,.1f} MB"


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
    out = [
        "data stages, estimate (scheduled on "
        + (f"{cores} CPU cores, resources.plan_cores" if cores else "the plan's CPU cores")
        + "; hours from the start of the run):"
    ]
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
        widths = sorted(set(r["per_model"].values()))
        per = (
            f"gpus_per_job {widths[0]}"
            if len(widths) == 1
            else ", ".join(f"{m} {g}" for m, g in sorted(r["per_model"].items()) if g > 1)
            + " GPUs per job, the others 1"
        )
        out.append(
            f"  {how}: {r['gpus']} GPUs ({per}): training ends after {r['hours']:,.1f} h and "
            f"uses {r['used']:.0%} of the {r['reserved_gpu_hours']:,.0f} GPU-hours reserved"
        )
        if r.get("overlay"):
            out.append(f"    the overlay (--configfile) that plans it: {_flow(r['overlay'])}")
    return _wrapped(out)


def _flow(value) -> str:
    """``value`` as one line of YAML flow style (a config overlay)."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1e9).strip()
