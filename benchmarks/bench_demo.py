"""The demo from scratch: wall time, jobs, job-seconds by rule, per-job start-up.

Runs the README's demo command (`snakemake --profile profiles/local all`) in an empty temporary
working directory and prints one JSON object:

    python benchmarks/bench_demo.py --json [--markdown] [--cores 2]
    {"wall_s": ..., "jobs": ..., "job_seconds": ..., "by_rule": {...}, "startup": {...},
     "above_chance": ..., ...}

- ``by_rule``: from Snakemake's benchmark files (``results/benchmarks/<rule>/...tsv``): jobs,
  summed wall seconds (``s``) and summed CPU seconds (``cpu_time``) per rule. CPU seconds are
  the better measure on a shared machine; wall seconds add up the time each job held a core.
- ``startup``: the per-job start-up cost, measured in fresh interpreters (best of --repeat):
  wall and CPU seconds of importing the CLI, torch, torchvision, timm and the modules a training
  and an evaluation job import before any work, and the share of ``torch._dynamo`` in importing
  torchvision (``python -X importtime``; torchvision's ``ops`` package imports it).
- ``above_chance``: final models whose Clopper-Pearson 95% interval on the untransformed test
  split lies entirely above chance (1 / classes), from ``results/analyse/accuracy.csv``; the
  demo's guarantee is that this equals ``final_models``.

Quick modes for development: ``--results DIR`` summarises an existing run's folder (no run),
``--dry`` plans the demo (job counts by rule, no run), ``--startup-only`` measures start-up only.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from snakemake_run import SNAKEMAKE, snakemake_cmd, snakemake_env

REPO = Path(__file__).resolve().parents[1]
UNTRANSFORMED = "Identity"

# name -> the statement a fresh interpreter runs; what a job imports before its first line of work
STARTUP = {
    "cli": "import imagenot.cli",
    "acquire_job": "import imagenot.cli, imagenot.acquire.build, imagenot.acquire.download, "
    "imagenot.acquire.adapters",
    # a download's fetch child: WITHOUT_TORCH first on its path, then img2dataset's downloader
    "download_process": "import sys, imagenot.acquire.fetch as f; "
    "sys.path.insert(0, f.WITHOUT_TORCH); import imagenot.acquire.guarded",
    "torch": "import torch",
    "torchvision": "import torchvision",
    "timm": "import timm",
    "train_job": "import imagenot.cli, imagenot.train.loop, imagenot.train.registry as r; "
    "r.build_model('resnet_mini', 10)",
    "evaluate_job": "import imagenot.cli, imagenot.evaluate.robustness, imagenot.train.registry "
    "as r; r.build_model('resnet_mini', 10)",
}


def demo_cmd(workdir: Path, cores: int, configs: list[str], *extra: str) -> list[str]:
    """The README's demo command (``--profile profiles/local all``) in ``workdir``."""
    return snakemake_cmd(workdir, configs, ("all",), *extra, cores=cores, profile="local")


def run_demo(workdir: Path, cores: int, configs: list[str]) -> dict:
    """Run the demo in `workdir`; wall and CPU seconds of the whole Snakemake process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(
        demo_cmd(workdir, cores, configs),
        cwd=REPO,
        env=snakemake_env(),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    (workdir / "bench_demo.snakemake.log").write_text(run.stderr)
    if run.returncode != 0:
        sys.exit(f"bench_demo: the demo failed in {workdir}:\n{run.stderr[-4000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    steps = re.findall(r"(\d+) of (\d+) steps \(100%\) done", run.stderr)
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "snakemake_steps": int(steps[-1][1]) if steps else None,
    }


def planned_jobs(workdir: Path, cores: int, configs: list[str]) -> dict[str, int]:
    """Jobs by rule of a dry run (Snakemake's "Job stats" table)."""
    run = subprocess.run(
        demo_cmd(workdir, cores, configs, "--dry-run", "--quiet", "rules"),
        cwd=REPO,
        env=snakemake_env(),
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        sys.exit(f"bench_demo: the dry run failed:\n{run.stderr[-4000:]}")
    counts = {}
    for line in (run.stdout + run.stderr).splitlines():
        found = re.match(r"^(\w+)\s+(\d+)\s*$", line.strip())
        if found and found.group(1) not in ("total", "job", "all"):
            counts[found.group(1)] = int(found.group(2))
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def by_rule(results: Path) -> dict[str, dict]:
    """Jobs, wall seconds and CPU seconds per rule from Snakemake's benchmark files."""
    table: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "s": 0.0, "cpu_s": 0.0})
    root = results / "benchmarks"
    for path in sorted(root.rglob("*.tsv")):
        rule = path.relative_to(root).parts[0].removesuffix(".tsv")
        rows = list(csv.DictReader(path.read_text().splitlines(), delimiter="\t"))
        for row in rows[-1:]:  # a rerun appends a row; the last is the run that produced results
            entry = table[rule]
            entry["jobs"] += 1
            entry["s"] += float(row["s"])
            cpu = row.get("cpu_time", "NA")
            entry["cpu_s"] += float(cpu) if cpu not in ("NA", "", None) else 0.0
    out = {
        rule: {"jobs": v["jobs"], "s": round(v["s"], 1), "cpu_s": round(v["cpu_s"], 1)}
        for rule, v in table.items()
    }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["s"]))


def concurrency(results: Path) -> dict[str, float]:
    """Seconds during which 0, 1, 2, ... jobs ran, from each benchmark file's modification time
    (the job's end) and its wall seconds: time with fewer jobs than cores is idle capacity
    (a serial stretch of the DAG, or jobs that reserve every core but use one)."""
    spans = []
    for path in (results / "benchmarks").rglob("*.tsv"):
        rows = list(csv.DictReader(path.read_text().splitlines(), delimiter="\t"))
        if rows:
            end = path.stat().st_mtime
            spans.append((end - float(rows[-1]["s"]), end))
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running, last, seconds = 0, events[0][0] if events else 0.0, defaultdict(float)
    for moment, step in events:
        seconds[str(running)] += moment - last
        running, last = running + step, moment
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: int(kv[0]))}


def above_chance(results: Path) -> dict:
    """Final models whose 95% interval (untransformed test split) lies above chance."""
    table = results / "analyse" / "accuracy.csv"
    if not table.is_file():
        return {"final_models": None, "above_chance": None, "closest": None}
    classes = {}
    for listing in (results / "datasets").glob("*/classes.txt"):
        lines = [line for line in listing.read_text().splitlines() if line.strip()]
        classes[listing.parent.name] = len(lines)
    rows = [
        row
        for row in csv.DictReader(table.read_text().splitlines())
        if row["transform"] == UNTRANSFORMED and row["dataset"] in classes
    ]
    margins = []
    for row in rows:
        chance = 100.0 / classes[row["dataset"]]
        margins.append((float(row["ci_low"]) - chance, row, chance))
    margins.sort(key=lambda m: m[0])
    closest = None
    if margins:
        _, row, chance = margins[0]
        closest = {
            "model": row["model"],
            "dataset": row["dataset"],
            "protocol": row["protocol"],
            "accuracy": float(row["accuracy"]),
            "ci_low": float(row["ci_low"]),
            "chance": round(chance, 2),
        }
    return {
        "final_models": len(rows),
        "above_chance": sum(1 for margin, _, _ in margins if margin > 0),
        "closest": closest,
    }


def _timed_python(statement: str, *flags: str) -> tuple[float, float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, *flags, "-c", statement],
        cwd=REPO,
        env=snakemake_env(),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise RuntimeError(f"{statement!r} failed: {run.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, run.stderr


def importtime(stderr: str) -> dict[str, float]:
    """Cumulative seconds per module from `python -X importtime` output."""
    out = {}
    for line in stderr.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if found:
            out[found.group(3)] = int(found.group(1)) / 1e6
    return out


def startup(repeat: int) -> dict:
    """Best-of-`repeat` wall and CPU seconds of each STARTUP statement in a fresh interpreter,
    and `python -X importtime`'s cumulative seconds for torch, torchvision and torch._dynamo."""
    out = {}
    for name, statement in STARTUP.items():
        try:
            runs = [_timed_python(statement)[:2] for _ in range(repeat)]
        except RuntimeError as exc:  # e.g. run with a Python that lacks the package
            out[name] = {"error": str(exc)[-300:]}
            continue
        out[name] = {
            "wall_s": round(min(w for w, _ in runs), 2),
            "cpu_s": round(min(c for _, c in runs), 2),
        }
    # the import chain of a torch job: which part of it is torch._dynamo
    try:
        chains = [
            importtime(_timed_python(STARTUP["train_job"], "-X", "importtime")[2]) for _ in range(2)
        ]
    except RuntimeError as exc:
        out["importtime_train_job_s"] = {"error": str(exc)[-300:]}
        return out
    best = min(chains, key=lambda c: sum(c.values()))
    out["importtime_train_job_s"] = {
        module: round(best.get(module, 0.0), 2)
        for module in ("torch", "torchvision", "torchvision.ops", "torch._dynamo", "timm")
    }
    return out


def markdown(report: dict) -> str:
    lines = []
    if report.get("wall_s") is not None:
        lines.append(
            f"Wall {report['wall_s']:.0f} s ({report['wall_s'] / 60:.1f} min), "
            f"{report['jobs']} jobs, {report['job_seconds']:.0f} job-seconds, "
            f"{report['job_cpu_seconds']:.0f} job CPU-seconds, {report['cores']} cores."
        )
    if report.get("above_chance") is not None:
        lines.append(
            f"Final models above chance (95% interval): {report['above_chance']} of "
            f"{report['final_models']}; closest: {json.dumps(report['closest'])}."
        )
    if report.get("seconds_with_n_jobs_running"):
        lines.append(
            "Seconds with n jobs running: "
            + ", ".join(f"{n}: {v:.0f}" for n, v in report["seconds_with_n_jobs_running"].items())
            + "."
        )
    if report.get("by_rule"):
        lines += ["", "| rule | jobs | job-seconds | CPU-seconds |", "|---|---|---|---|"]
        for rule, v in report["by_rule"].items():
            lines.append(f"| `{rule}` | {v['jobs']} | {v['s']:.0f} | {v['cpu_s']:.0f} |")
    if report.get("planned"):
        lines += ["", "| rule | planned jobs |", "|---|---|"]
        lines += [f"| `{rule}` | {n} |" for rule, n in report["planned"].items()]
    if report.get("startup"):
        lines += [
            "",
            "| start-up (fresh interpreter, best of runs) | wall s | CPU s |",
            "|---|---|---|",
        ]
        for name, v in report["startup"].items():
            if name in STARTUP and "error" not in v:
                lines.append(f"| `{STARTUP[name]}` | {v['wall_s']:.2f} | {v['cpu_s']:.2f} |")
        chain = report["startup"]["importtime_train_job_s"]
        chain = {k: v for k, v in chain.items() if k != "error"}
        lines.append("")
        lines.append(
            "`python -X importtime` of a training job's imports (cumulative s): "
            + ", ".join(f"`{k}` {v:.2f}" for k, v in chain.items())
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables too")
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores (default 2)")
    parser.add_argument(
        "--configfile", nargs="+", default=[], help="config files (default: the demo's own)"
    )
    parser.add_argument("--workdir", type=Path, help="run here (kept) instead of a temp dir")
    parser.add_argument(
        "--results", type=Path, help="summarise this existing run folder (holding results/)"
    )
    parser.add_argument("--dry", action="store_true", help="plan only: jobs by rule")
    parser.add_argument("--startup-only", action="store_true", help="measure start-up only")
    parser.add_argument("--repeat", type=int, default=3, help="start-up runs (best of)")
    parser.add_argument("--no-startup", action="store_true", help="skip the start-up timings")
    args = parser.parse_args(argv)
    if not (args.startup_only or args.results) and not Path(SNAKEMAKE).is_file():
        sys.exit(f"bench_demo: no snakemake at {SNAKEMAKE}: run it with the .venv's python")
    # the Snakefile's own `configfile:` is relative to the working directory: name it
    configs = [str(Path(c).resolve()) for c in args.configfile] or [
        str(REPO / "config" / "config.yaml")
    ]

    report: dict = {"cores": args.cores, "configfile": configs}
    if not args.startup_only:
        if args.results:
            workdir, timing = args.results.resolve(), {"wall_s": None, "cpu_s": None}
        else:
            workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_demo-"))
            workdir.mkdir(parents=True, exist_ok=True)
            report["workdir"] = str(workdir)
            if args.dry:
                report["planned"] = planned_jobs(workdir, args.cores, configs)
                report["planned_jobs"] = sum(report["planned"].values())
                timing = None
            else:
                timing = run_demo(workdir, args.cores, configs)
        if timing is not None:
            rules = by_rule(workdir / "results")
            report.update(timing)
            report["jobs"] = sum(v["jobs"] for v in rules.values())
            report["job_seconds"] = round(sum(v["s"] for v in rules.values()), 1)
            report["job_cpu_seconds"] = round(sum(v["cpu_s"] for v in rules.values()), 1)
            report.update(above_chance(workdir / "results"))
            report["seconds_with_n_jobs_running"] = concurrency(workdir / "results")
            report["by_rule"] = rules
    if not args.no_startup:
        report["startup"] = startup(args.repeat)
    if args.json or not args.markdown:
        print(json.dumps(report, indent=1))
    if args.markdown:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
