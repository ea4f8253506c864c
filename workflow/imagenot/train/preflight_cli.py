"""``imagenot preflight``: run the preflight's checks (``imagenot.train.preflight``) and write
its report, Markdown and JSON; the rule ``preflight`` calls it with ``--settings``, people and
``benchmarks/gpu_check.sh`` with ``--config`` (and ``--models`` / ``--spaces`` to narrow it).

The JSON is written only when every check passed: it is what the GPU rules wait for
(``imagenot.train.preflight_plan``). A failed preflight leaves ``<site>.failed.md`` and
``.failed.json`` beside it (no rule output: Snakemake would delete those of a failed job) and
ends in one line naming the failed checks.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import sys
from pathlib import Path

from imagenot.cli import subcommand
from imagenot.settings import parse
from imagenot.train.files import PreflightFiles


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subcommand(
        subparsers,
        "preflight",
        _main,
        files=PreflightFiles,
        description="Checks, on the GPU it runs on, what the config's training jobs need: "
        "CUDA, each model's memory at its per-GPU batch, the data feed's speed, bf16 against "
        "float32, and the node's shared memory. Writes the report (Markdown, and JSON when "
        "every check passed: `imagenot plan --throughput` reads it); a failed check names the "
        "config key that fixes it, and the report goes to <name>.failed.md/.json. The "
        "workflow's rule `preflight` runs it before any GPU job (docs/gpu.md).",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--settings", help="the workflow rule's settings (JSON); by hand, give --config"
    )
    source.add_argument(
        "--config",
        nargs="+",
        metavar="FILE",
        help="workflow config file(s), by hand: a base, then overlays (merged in order, later "
        "files winning, as snakemake's --configfile)",
    )
    p.add_argument(
        "--models", help="comma-separated: only these of the config's models (default: all)"
    )
    p.add_argument(
        "--spaces", help="comma-separated: only these train.spaces (default: all the config's)"
    )
    p.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        help="the device to check (default: the config's train.device)",
    )
    p.add_argument("--workers", type=int, help="loader workers (default: the config's)")
    p.add_argument("--feed-steps", type=int, default=20, help="timed feed steps per side")
    p.add_argument(
        "--feed-seconds",
        type=float,
        default=2.0,
        help="each side's timed window lasts this long at least (the fast models' steps are "
        "milliseconds; the workers' batches decoded ahead are drained first)",
    )
    p.add_argument("--feed-warmup", type=int, default=5, help="untimed steps before them")
    p.add_argument("--feed-images", type=int, default=512, help="JPEGs written per stored size")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the job's cores)")
    p.add_argument(
        "--both-decoders",
        action="store_true",
        help="measure the feed decoding in the workers and on the device on the CPU too (on "
        "CUDA always)",
    )
    p.add_argument(
        "--datasets-root",
        help="the folder holding the datasets the jobs read (default: the config's, "
        "results/datasets): the feed check reads a sample there",
    )
    p.add_argument(
        "--progress",
        metavar="FILE",
        help="append each check to FILE as one JSON line the moment it finishes (one model's "
        "checks after the other's): a run stopped part-way keeps what it finished "
        "(benchmarks/gpu_check.sh reads it)",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="print one row per model (benchmarks/gpu_check.sh) instead of the whole report",
    )


def _settings(args):
    from imagenot.config import load_configs
    from imagenot.train.settings import PreflightSettings

    if args.settings:
        settings = parse(PreflightSettings, args.settings)
    else:
        settings = PreflightSettings.from_config(load_configs(args.config), None)
    for flag, key in (("models", "model"), ("spaces", "space")):
        wanted = getattr(args, flag)
        if wanted:
            names = wanted.split(",")
            known = {r[key] for r in settings.runs}
            if unknown := [n for n in names if n not in known]:
                raise ValueError(
                    f"--{flag}: {unknown} not trained by this config; it has {sorted(known)}"
                )
            if flag == "models":
                settings = settings.narrowed(names)
            else:
                runs = [r for r in settings.runs if r[key] in names]
                settings = dataclasses.replace(settings, runs=runs)
    if args.device:
        settings = dataclasses.replace(settings, device=args.device)
    return settings


def _main(args: argparse.Namespace) -> None:
    """Check one GPU against the config's training jobs before submitting them."""
    from imagenot.io import write_json, write_text
    from imagenot.train import preflight, preflight_plan
    from imagenot.train.device import configure, deterministic_for

    settings = _settings(args)
    for flag in ("feed_steps", "feed_images", "threads"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1")
    configure(deterministic_for(None, "cuda" if settings.gpu_job else "cpu"), args.threads)
    options = preflight.Options(
        args.feed_steps,
        args.feed_warmup,
        args.feed_images,
        args.workers,
        both_decoders=True if args.both_decoders else None,
        datasets_root=args.datasets_root,
        feed_seconds=args.feed_seconds,
    )
    on_check = progress_writer(Path(args.progress)) if args.progress else None
    report = {**preflight.run_checks(settings, options, on_check), "environment": environment()}
    text = markdown(report)
    print(summary(report) if args.table else text)
    files = PreflightFiles.from_args(args)
    json_out, md_out = Path(files.json), Path(files.md)
    if report["passed"]:
        for path in (json_out, md_out):
            Path(preflight_plan.failed_file(str(path))).unlink(missing_ok=True)
        write_text(text, md_out)
        write_json(report, json_out)
        return
    json_out.unlink(missing_ok=True)
    md_out.unlink(missing_ok=True)
    failed_md = preflight_plan.failed_file(str(md_out))
    write_text(text, failed_md)
    write_json(report, preflight_plan.failed_file(str(json_out)))
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    raise preflight.PreflightFailed(
        f"preflight failed ({len(failed)} checks: {', '.join(c['name'] for c in failed)}): "
        f"{' | '.join(c['detail'] for c in failed)}; {_held(settings, failed)} "
        f"(report: {failed_md}; "
        "resources.require_preflight: false overrides, docs/gpu.md)"
    )


def progress_writer(path: Path):
    """A ``run_checks`` hook that appends each finished check to ``path`` as one JSON line
    (the file emptied first), written through at once: what a killed run had finished."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")

    def on_check(check) -> None:
        with path.open("a") as f:
            f.write(json.dumps(dataclasses.asdict(check), default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())
        print(f"[preflight] {check.status}: {check.name}", file=sys.stderr, flush=True)

    return on_check


def _held(settings, failed: list[dict]) -> str:
    """Which GPU jobs wait for this preflight (``preflight_plan.waiting``)."""
    from imagenot.train.preflight_plan import waiting

    return waiting([c["name"] for c in failed], settings.checked_models)


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
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        return out[0] if out else None
    return None


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
        mem = by.get("memory", {}).get("values", {})
        feed = by.get("feed", {}).get("values", {})
        prec = by.get("precision", {}).get("values", {})
        worst = {c["status"] for c in by.values()}
        status = next((s for s in ("fail", "warn", "pass", "info", "skip") if s in worst), "")
        cells = [
            model,
            mem.get("per_gpu"),
            mem.get("peak_gib"),
            mem.get("device_gib"),
            mem.get("largest_fit"),
            mem.get("micro_batches"),
            feed.get("feed_img_per_s"),
            feed.get("device_img_per_s"),
            feed.get("ratio"),
            prec.get("loss_rel_diff"),
            prec.get("grad_cosine"),
            prec.get("top1_agreement"),
            status,
        ]
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
