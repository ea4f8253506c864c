"""Paper-scale planning benchmark: how long `snakemake -n` takes to plan the whole study.

Points config/paper.yaml at placeholder inputs in a temporary folder (empty LAION shard files
named as the config lists them, empty ImageNet / CIFAR-10 / weights folders, and any other input
file the DAG asks for under that folder; imagenot.plan.planning, which `imagenot plan` uses), then
times a dry run of `all`:

    python benchmarks/bench_dag.py --json
    {"jobs": ..., "planning_seconds": ..., "rules": {...}, ...}

planning_seconds is the wall time of the whole `snakemake -n` process (start-up, parsing, DAG),
the best of --repeat runs; planning_cpu_seconds is its CPU time (user + system), the better
measure on a shared machine. Target: under 30 s on one core (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from snakemake_run import snakemake_cmd, snakemake_env

from imagenot.plan.planning import missing_inputs, placeholder_workdir

REPO = Path(__file__).resolve().parents[1]


def dry_run(
    workdir: Path, configs: list[Path], cores: int
) -> tuple[float, subprocess.CompletedProcess]:
    cmd = snakemake_cmd(workdir, configs, ("all",), "--dry-run", "--quiet", "rules", cores=cores)
    start = time.perf_counter()
    cpu0 = _children_cpu()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=snakemake_env())
    LAST_CPU[0] = _children_cpu() - cpu0
    return time.perf_counter() - start, proc


LAST_CPU = [0.0]  # CPU seconds (user + system) of the last dry run


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def job_stats(output: str) -> dict[str, int]:
    rules = {}
    for line in output.splitlines():
        m = re.fullmatch(r"(\S+)\s+(\d+)", line.strip())
        if m:
            rules[m.group(1)] = int(m.group(2))
    return rules


def bench(config: Path, repeat: int, cores: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_dag_") as tmp:
        workdir, configs = placeholder_workdir(Path(tmp), config)
        created: list[str] = []
        for _ in range(50):  # create further placeholder inputs the DAG asks for
            seconds, proc = dry_run(workdir, configs, cores)
            if proc.returncode == 0:
                break
            files = [f for f in missing_inputs(proc.stdout + proc.stderr) if f.startswith(tmp)]
            if not files:
                raise SystemExit(f"dry run failed:\n{(proc.stdout + proc.stderr)[-5000:]}")
            for f in files:
                Path(f).parent.mkdir(parents=True, exist_ok=True)
                Path(f).touch()
                created.append(os.path.relpath(f, tmp))
        times, cpus = [seconds], [LAST_CPU[0]]
        for _ in range(repeat - 1):
            t, proc = dry_run(workdir, configs, cores)
            assert proc.returncode == 0, proc.stderr[-3000:]
            times.append(t)
            cpus.append(LAST_CPU[0])
        rules = job_stats(proc.stdout + proc.stderr)
    total = rules.pop("total", sum(rules.values()))
    return {
        "config": str(config.relative_to(REPO) if config.is_relative_to(REPO) else config),
        "jobs": total,
        "planning_seconds": round(min(times), 2),
        "planning_seconds_all": [round(t, 2) for t in times],
        "planning_cpu_seconds": round(min(cpus), 2),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "rules": rules,
        "extra_placeholders": created,
        "cpus_available": len(os.sched_getaffinity(0)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "config" / "paper.yaml")
    parser.add_argument("--repeat", type=int, default=1, help="dry runs to time (best is kept)")
    parser.add_argument("--cores", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    result = bench(args.config.resolve(), args.repeat, args.cores)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['jobs']} jobs planned in {result['planning_seconds']} s")
        for rule, n in sorted(result["rules"].items()):
            print(f"  {rule:40s} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
