"""``imagenot preflight``: run the preflight's checks (``imagenot.train.preflight``) and write
its report, Markdown and JSON; the rule ``preflight`` calls it with ``--settings``, people and
``benchmarks/gpu_check.sh`` with ``--config`` (and ``--models`` / ``--spaces`` to narrow it).

The JSON is written only when every check passed: it is what the GPU rules wait for
(``imagenot.train.preflight_plan``). A failed preflight leaves ``<site>.failed.md`` and
``.failed.json`` beside it (no rule output: Snakemake would delete those of a failed job) and
ends in one line naming the failed checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from imagenot.core.config import load_configs
from imagenot.core.io import write_json, write_text
from imagenot.train import preflight_plan
from imagenot.train.settings import PreflightSettings


def _settings(settings, config, models, spaces, device):
    """The rule's settings, or those of the ``config`` files typed by hand, narrowed to
    ``models`` and ``spaces`` (comma-separated) and checked on ``device``."""
    if (settings is None) == (config is None):
        raise ValueError("give either --config or --settings (the workflow rule's), not both")
    if settings is None:
        settings = PreflightSettings.from_config(load_configs(config), None)
    for flag, key, wanted in (("models", "model", models), ("spaces", "space", spaces)):
        names = wanted.split(",") if wanted else []
        known = {r[key] for r in settings.runs}
        if unknown := [n for n in names if n not in known]:
            raise ValueError(
                f"--{flag}: {unknown} not trained by this config; it has {sorted(known)}"
            )
        if names and flag == "models":
            settings = settings.narrowed(names)
        elif names:
            settings = dataclasses.replace(
                settings, runs=[r for r in settings.runs if r[key] in names]
            )
    return dataclasses.replace(settings, device=device) if device else settings


def run(files, settings, *, config, models, spaces, device, threads, progress, table, **feed):
    """Check one GPU against the config's training jobs before submitting them; ``feed``: the
    measured checks' :class:`imagenot.train.preflight.Options`."""
    from imagenot.train import preflight
    from imagenot.train.device import configure, deterministic_for

    settings = _settings(settings, config, models, spaces, device)
    for flag in ("feed_steps", "feed_images", "threads"):
        if {**feed, "threads": threads}[flag] < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1")
    configure(deterministic_for(None, "cuda" if settings.gpu_job else "cpu"), threads)
    options = preflight.Options(**{**feed, "both_decoders": feed["both_decoders"] or None})
    on_check = progress_writer(Path(progress)) if progress else None
    report = {**preflight.run_checks(settings, options, on_check), "environment": environment()}
    text = markdown(report)
    print(summary(report) if table else text)
    passed = report["passed"]
    json_out, md_out = (  # a pass writes the rule's outputs, a failure the .failed files
        Path(f if passed else preflight_plan.failed_file(str(f))) for f in (files.json, files.md)
    )
    for path in (files.json, files.md):  # the other outcome's files go
        Path(preflight_plan.failed_file(str(path)) if passed else path).unlink(missing_ok=True)
    write_text(text, md_out)
    write_json(report, json_out)
    if passed:
        return
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    raise preflight.PreflightFailed(
        f"preflight failed ({len(failed)} checks: {', '.join(c['name'] for c in failed)}): "
        f"{' | '.join(c['detail'] for c in failed)}; "
        f"{preflight_plan.waiting([c['name'] for c in failed], settings.checked_models)} "
        f"(report: {md_out}; "
        "resources.require_preflight: false overrides, docs/gpu.md)"
    )


def progress_writer(path: Path):
    """A ``run_checks`` hook that appends each finished check to ``path`` as one JSON line
    (the file emptied first), written through at once: what a killed run had finished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")

    def on_check(check) -> None:
        with path.open("a") as f:
            f.write(json.dumps(dataclasses.asdict(check), default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        print(f"[preflight] {check.status}: {check.name}", file=sys.stderr, flush=True)

    return on_check


def environment() -> dict:
    """What ran the checks: the env's torch and CUDA builds, the node, the container."""
    import torch

    from imagenot.train.preflight import GIB

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "host": platform.node(),
        "prefix": sys.prefix,
        "container": os.environ.get("APPTAINER_CONTAINER")
        or os.environ.get("SINGULARITY_CONTAINER"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cpus": len(os.sched_getaffinity(0)),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env |= {
            "gpu": props.name,
            "gpu_memory_gib": round(props.total_memory / GIB, 1),
            "capability": f"{props.major}.{props.minor}",
            "driver": _driver_version(),
        }
    return env


def _driver_version() -> str | None:
    """The node's NVIDIA driver, from nvidia-smi (on the node, or bound into the container by
    Apptainer's --nv); None where there is none."""
    query = [shutil.which("nvidia-smi"), "--query-gpu=driver_version", "--format=csv,noheader"]
    with contextlib.suppress(OSError, subprocess.SubprocessError, TypeError):  # (TypeError: none)
        out = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout.split()
        return out[0] if out else None
    return None


# The summary table's measured columns: (check, its values' keys)
COLUMNS = (
    ("memory", ("per_gpu", "peak_gib", "device_gib", "largest_fit", "micro_batches")),
    ("feed", ("feed_img_per_s", "device_img_per_s", "ratio")),
    ("precision", ("loss_rel_diff", "grad_cosine", "top1_agreement")),
)


def summary(report: dict) -> str:
    """One Markdown table, a row per model: its memory at the per-GPU batch (the peak, the
    largest batch measured to fit and the micro-batches its jobs take), the feed against
    device-resident data, bf16 against float32; then the checks that failed or warned."""
    env = report["environment"]
    rows: dict[str, dict] = {}
    for c in report["checks"]:
        kind, _, rest = c["name"].partition(" ")
        if kind in ("memory", "feed", "precision"):
            rows.setdefault(rest.split(" ")[0], {}).setdefault(kind, c)  # training's first
    head = (
        f"Preflight on {env.get('gpu', 'the CPU')} (torch {env['torch']}, CUDA "
        f"{env['torch_cuda']}): {'passed' if report['passed'] else 'FAILED'}"
    )
    lines = [
        head,
        "",
        "| model | batch/GPU | peak GiB | of GiB | largest fit | micro-batches | feed img/s "
        "| device img/s | ratio | bf16 loss diff | grad cosine | eval top-1 agree | status |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for model, by in rows.items():
        worst = {c["status"] for c in by.values()}
        status = next((s for s in ("fail", "warn", "pass", "info", "skip") if s in worst), "")
        measured = [by.get(kind, {}).get("values", {}).get(k) for kind, ks in COLUMNS for k in ks]
        cells = [model, *measured, status]
        lines.append("| " + " | ".join("-" if v is None else str(v) for v in cells) + " |")
    lines += [
        f"\n{c['status']}: {c['name']}: {c['detail']}"
        for c in report["checks"]
        if c["status"] in ("fail", "warn")
    ]
    return "\n".join(lines) + "\n"


def markdown(report: dict) -> str:
    """The report as Markdown: verdict, environment, then one table of every check."""
    env = report["environment"]
    verdict = "passed" if report["passed"] else "**FAILED**"
    lines = [
        f"# Preflight `{report['site']}`: {verdict}",
        "",
        'Written by `imagenot preflight` (docs/gpu.md, "First hour on a GPU").',
        "",
        "| environment | |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in env.items()),
        "",
        "| check | status | detail |",
        "|---|---|---|",
        *(
            f"| {c['name']} | {c['status']} | {c['detail'].replace('|', '/')} |"
            for c in report["checks"]
        ),
        "",
    ]
    return "\n".join(lines)
