"""The workflow's jobs for a config, planned by Snakemake itself without the data on disk.

Why: a user with an allocation asks what a run will cost before submitting ~3,000 jobs, usually
before ImageNet, CIFAR-10 or laion2B-en are copied to the cluster, and `snakemake -n` refuses a
config whose data paths do not exist. So the config's external inputs (LAION parts, adapter
datasets' folders, published weights) are pointed at empty placeholders in a temporary folder,
and Snakemake's own dry run lists every job with its rule, threads and resources: the jobs are
exactly those a real run plans (the same Snakefile, rules, profile and stage plans), not a
re-derivation that could drift from them. ``benchmarks/bench_dag.py`` times the same procedure.

Resources a rule sizes from its input when the job is ready (``resources.work``, docs/scale.md)
are not known at planning time (Snakemake prints ``<TBD>``, or sizes them from an empty
placeholder): :mod:`imagenot.plan.costs` fills them from the scale model's projection.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
SNAKEFILE = REPO / "Snakefile"
RULES_DIR = REPO / "rules"
# cores of the dry run: more than any job asks, so Snakemake prints each job's own threads
# (a local run caps them at --cores)
PLAN_CORES = 4096


@dataclass
class PlannedJob:
    """One planned job: its rule, cores and resources as Snakemake printed them (a value
    Snakemake could not compute yet, ``<TBD>``, is None)."""

    rule: str
    threads: int = 1
    resources: dict = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        """GPUs the job asks for: ``gpu=N``, or ``gres=gpu[:model]:N`` on each of ``nodes``."""
        if self.resources.get("gpu"):
            return int(self.resources["gpu"])
        gres = self.resources.get("gres")
        if gres and str(gres).startswith("gpu"):
            return int(str(gres).rsplit(":", 1)[-1]) * int(self.resources.get("nodes") or 1)
        return 0


def rule_groups() -> dict[str, str]:
    """Each rule's group: the stage file under rules/ that defines it (rules/train.smk: train)."""
    defined = re.compile(r"^(?:\s*(?:rule|checkpoint)\s+(\w+)\s*:|use rule \w+ as (\w+))", re.M)
    return {
        new or old: path.stem
        for path in sorted(RULES_DIR.glob("*.smk"))
        for old, new in defined.findall(path.read_text())
    }


def world_rows_per_part(config: dict) -> int | None:
    """Caption rows per LAION part when the workflow writes the parts itself (the demo world or
    the scale world, each a rule of its own); None for a LAION copy on disk."""
    for world in ("demo_world", "scale_world"):
        if config[world]["enabled"]:
            return config[world]["rows_per_shard"]
    return None


def placeholder_overlay(root: Path, config: dict) -> dict:
    """A config overlay that points every external input of ``config`` into ``root``, creating
    them empty: the LAION parts (unless a demo or scale world writes them), each adapter
    dataset's folder and the published weights the config starts from."""
    from imagenot.core.config import validate_config
    from imagenot.curate import plan as curate_plan
    from imagenot.train.experiments import published_weights
    from imagenot.train.registry import weights_filename

    full = validate_config(copy.deepcopy(config))  # the schema's defaults; config left as is
    overlay: dict = {"datasets": {}, "laion": {}, "train": {}}
    if world_rows_per_part(full) is None:
        laion_dir = root / "laion"
        laion_dir.mkdir(parents=True)
        for name in curate_plan.shard_files(full):
            (laion_dir / name).touch()
        overlay["laion"]["dir"] = str(laion_dir)
    for name, spec in full["datasets"].items():
        if "path" in spec:
            path = root / "datasets" / name
            path.mkdir(parents=True)
            (path / "PLACEHOLDER").touch()  # the config check refuses an empty data folder
            overlay["datasets"][name] = {"path": str(path)}
    if full["train"]["weights_dir"]:
        weights = root / "weights"
        weights.mkdir()
        overlay["train"]["weights_dir"] = str(weights)
        for model in full["train"]["models"]:  # the published weights FT/TL runs start from
            if chosen := published_weights(full["train"], model):
                (weights / weights_filename(chosen)).touch()
    return {k: v for k, v in overlay.items() if v}


def snakemake_env() -> dict[str, str]:
    """This interpreter's bin folder first on PATH and this checkout's package importable, so
    the dry run is this install's Snakemake and imagenot, activated virtualenv or not."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    workflow = str(REPO / "workflow")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (workflow, env.get("PYTHONPATH")) if p)
    return env


def missing_inputs(output: str) -> list[str]:
    """Files a MissingInputException names ('affected files:' block)."""
    m = re.search(r"affected files:\n((?:\s+\S.*\n?)+)", output)
    return [line.strip() for line in m.group(1).splitlines()] if m else []


def config_paths(config: Path | str | list) -> list[Path]:
    """One config file, or a base and its overlays (merged in order, as ``--configfile``)."""
    return [Path(p) for p in config] if isinstance(config, list | tuple) else [Path(config)]


def placeholder_workdir(tmp: Path, config: Path | list[Path]) -> tuple[Path, list[Path]]:
    """A working folder in ``tmp`` and the config files that plan ``config`` (one file, or a
    base and its overlays) there against placeholder inputs. Rules and config files name some
    repository files by relative path (``workflow/``, ``resources/``: resolved in the working
    folder), so both are linked there."""
    from imagenot.core.config import read_config_files

    paths = config_paths(config)
    overlay = tmp / "placeholders.yaml"
    overlay.write_text(
        yaml.safe_dump(placeholder_overlay(tmp / "inputs", read_config_files(paths)))
    )
    workdir = tmp / "work"
    workdir.mkdir()
    for name in ("workflow", "resources"):
        (workdir / name).symlink_to(REPO / name)
    return workdir, [*(p.resolve() for p in paths), overlay]


def dry_run(workdir: Path, configs: list[Path], *extra: str) -> subprocess.CompletedProcess:
    """Snakemake's dry run of ``all`` of this checkout's Snakefile in ``workdir``; an input the
    DAG asks for that lies under the temporary folder (a placeholder the overlay did not know
    of) is created empty and the run repeated."""
    root = str(workdir.parent)
    cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(SNAKEFILE), "--dry-run"]
    cmd += ["--directory", str(workdir), "--cores", str(PLAN_CORES), *extra, "--configfile"]
    cmd += [*map(str, configs), "--", "all"]
    for _ in range(50):
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=snakemake_env())
        if proc.returncode == 0:
            return proc
        files = [f for f in missing_inputs(proc.stdout + proc.stderr) if f.startswith(root)]
        if not files:
            break
        for f in files:
            Path(f).parent.mkdir(parents=True, exist_ok=True)
            Path(f).touch()
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    message = next((ln for ln in reversed(lines) if "config" in ln.lower()), lines[-1])
    raise ValueError(f"snakemake -n refused the config: {message.strip()}")


def parse_jobs(output: str) -> list[PlannedJob]:
    """The jobs of a dry run's output (``rule NAME:`` blocks with ``threads:`` and
    ``resources:`` lines), the target rule ``all`` left out."""
    jobs: list[PlannedJob] = []
    for line in output.splitlines():
        m = re.fullmatch(r"(?:local)?rule (\w+):", line.strip())
        if m and not line.startswith(" "):
            jobs.append(PlannedJob(m.group(1)))
        elif jobs and line.startswith("    "):
            key, _, value = line.strip().partition(": ")
            if key == "threads":
                jobs[-1].threads = int(value)
            elif key == "resources":
                jobs[-1].resources = _resources(value)
    return [job for job in jobs if job.rule != "all"]


def _resources(text: str) -> dict:
    out: dict = {}
    for item in re.split(r",\s*(?=\w+=)", text):
        key, _, value = item.partition("=")
        value = value.strip()
        for read in (int, float):
            with contextlib.suppress(ValueError):
                value = read(value)
                break
        out[key.strip()] = None if value == "<TBD>" else value
    return out


def planned_jobs(config: Path | list[Path]) -> list[PlannedJob]:
    """Every job of ``all`` for ``config`` (one file, or a base and its overlays), planned by
    Snakemake against placeholder inputs in a temporary folder (no data needed; nothing is
    written beside the config)."""
    with tempfile.TemporaryDirectory(prefix="imagenot_plan_") as tmp:
        workdir, configs = placeholder_workdir(Path(tmp), config)
        proc = dry_run(workdir, configs)
    return parse_jobs(proc.stdout + proc.stderr)
