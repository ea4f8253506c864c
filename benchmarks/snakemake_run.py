"""The one Snakemake command line of the benchmarks that run the workflow (bench_demo, bench_dag,
bench_scale): this checkout's Snakefile, run in a working folder of its own.

A benchmark is run as a script (``python benchmarks/bench_x.py``, which puts this folder on
``sys.path``) or imported by a test (``conftest.load_benchmark``, which does the same).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

# the environment for that command, as `imagenot plan`'s dry run has it: jobs find `imagenot`
# and `snakemake` without an activated venv
from imagenot.plan.planning import snakemake_env  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
# the snakemake of the environment running the benchmark (the .venv's when run with its python,
# whatever PATH says), else the one on PATH
_OWN = Path(sys.executable).parent / "snakemake"
SNAKEMAKE = str(_OWN) if _OWN.is_file() else (shutil.which("snakemake") or str(_OWN))


def snakemake_cmd(
    workdir: Path,
    configs: Sequence[str | Path],
    targets: Sequence[str] = ("all",),
    *extra: str,
    cores: int,
    profile: str | None = None,
) -> list[str]:
    """``snakemake`` on this checkout's Snakefile in ``workdir`` with ``configs`` (later files
    override earlier ones), ``extra`` options, then ``targets``; ``profile`` a folder under
    profiles/ (none: Snakemake's own defaults and profiles/default, as on a cluster)."""
    cmd = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir)]
    if profile is not None:
        cmd += ["--profile", str(REPO / "profiles" / profile)]
    cmd += ["--cores", str(cores), *extra, "--configfile", *map(str, configs)]
    return [*cmd, "--", *targets]
