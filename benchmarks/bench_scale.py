"""Scale benchmark: each job's peak memory and time on the scale world, projected to laion2B-en.

Runs the curation and dataset-building part of the DAG (up to each LAION-built dataset's
``results/datasets/<name>/manifest.parquet``, or its ``selection.parquet`` with --captions-only)
on the scale world (config/scale.yaml: shards with laion2B-en's real file names and schema) at
two sizes (numbers of parts, same rows per part), each in a work directory of its own:

    python benchmarks/bench_scale.py --json [--sizes 2,4] [--rows-per-part 2500000] [--workdir DIR]

Rerunning with the same --workdir and sizes reruns nothing that is up to date (Snakemake decides)
and projects again in seconds. Nothing here names a rule of the DAG: jobs come from ``snakemake -n
--forceall`` at the same config after the run (rule, wildcards, benchmark file, requested
resources; kept as ``bench_dry_run.log`` beside ``bench_run.log``); a resource printed as
``<TBD>`` there is taken from the run's own log, where Snakemake prints each job's evaluated
resources when it starts.

``--check`` runs the smaller size only and dry-runs both sizes, projecting nothing (``check``):
the DAG runs, every job writes its usage line, requests are evaluated, and per-part jobs grow in
proportion to the parts while the other rules' do not. It costs one run at the smaller size
instead of two (``--quick --check``: one part of 20,000 rows); ``tests/test_scale_world.py``
runs it. The projection needs both sizes measured.

Measurements: peak memory (MB) and CPU seconds come from the last line of each job's log, which
the job writes itself (imagenot.core.job_usage: ``getrusage`` of the job and its children, the
kernel's high-water mark, so the same job on the same input measures the same); wall seconds
``s`` from its Snakemake benchmark TSV. Snakemake's own ``max_rss`` and ``cpu_time`` sample the
process tree (every 0.5 s for the first 30 samples, then every 30 s): a short job is caught at a
random moment (the same job measured 111 MB in one run and 646 MB in another), so they are used
only for a job without the line, and the JSON says per rule which source each figure came from
(``peak_rss_source``, ``cpu_source``; ``peak_rss_sources`` counts the jobs). A job's *busy
seconds* are its exact CPU seconds, except for jobs that wait (downloads: the network) and jobs
with only a sampled figure, where they are max(cpu, s): on a shared machine wall time measures
the machine's load (3-4x the CPU time at a load average of 14 on 2 cores), not the job.

Projection to laion2B-en (2.32e9 captions in 128 parts), per rule, by the wildcards of its jobs:

- **per-part** (a ``shard`` wildcard): 128 jobs per group of its other wildcards (per dataset).
  Runtime = busy seconds per caption row (measured at the larger size, start-up included, so an
  over-estimate) x 2.32e9 / 128 rows. Memory = the measured peak at the larger size if it did not
  grow with the number of parts (at most 10 % + 64 MB more than at the smaller size): the job is
  bounded by its part. If it grew, the job is not bounded by one part and memory is extrapolated
  linearly in the number of parts to 128 (``memory_rule`` says which). The scale world's parts
  hold ``--rows-per-part`` rows where laion2B-en's hold 18.1 million; what the peak would be if
  the part-dependent share of it (above the smallest peak of any job, the interpreter's floor)
  grew linearly with rows per part is reported as ``peak_rss_mb_if_linear_in_part_rows``, an
  upper bound for jobs that read their part in bounded batches.
- **download parts** (a ``part`` wildcard): their work is the selected images, not LAION rows:
  ``acquire.download_parts`` of the paper config (config/paper.yaml) jobs per dataset. Runtime =
  busy seconds per selected image (larger size) x the paper's selected images per part
  (n_classes x ceil(images_per_class x (1 + oversample)) / download_parts). Memory = linear in
  selected images per part between the two sizes. The selection only differs between the sizes
  when it is not saturated; ``--images-per-class-per-part K`` sets each LAION-built dataset's
  images_per_class to K x parts so that it does. Images come from a loopback server, so runtime
  is a lower bound for real web downloads.
- **selection gathers** (downstream of download-part outputs, e.g. the dataset build): runtime =
  busy seconds per selected image x the paper's selected images. Memory: the peak at the larger
  size above the interpreter floor (the smallest peak of any job), scaled by the paper's
  selected images over the larger size's (an upper bound: the job's own fixed memory above the
  floor is scaled too). Not the line through the two sizes: their selections differ by ~1.7x
  while the paper's is ~46x the larger one, so a peak's run-to-run jitter of ~10 MB (the
  allocator, at identical input) moved that line's projection by ~1 GB. A streamed job that
  declares the most rows it holds at once (``rows_held`` of its usage line) scales by rows held
  (min(selected, rows_held)) instead.
- **gathers** (downstream of per-part outputs, per dataset): memory extrapolated linearly in the
  number of parts, runtime linearly in the total caption rows, from the two sizes to 128 parts
  and 2.32e9 rows (never below the larger size's value). A gather that declares the rows it
  holds (``rows_held``: the caption selection, whose memory follows classes x kept captions,
  ``per_class + reserve_per_class`` each, not the parts it streams) is extrapolated linearly in
  rows held instead, to the paper config's (``paper_selection``): in the scale model its
  selection grows with the parts (``--images-per-class-per-part``), so "linear in parts" to 128
  would project 64 x the paper's per-class depth, and the line in parts multiplied a peak's
  jitter by 62 (2.2 vs 6.9 GB in two runs at identical input). The line through two sizes
  keeps the fixed part (a read batch, the first pass's top-n numbers) fixed and scales the
  per-row part; it is exact for memory = fixed + rows x bytes per row, not a proven bound
  (the paper's captions are assumed as long as the scale world's).
- **Arrow data** (gathers and selection gathers whose jobs report ``arrow_peak_mb``, the Arrow
  pool's high-water mark): only that part of the peak is scaled by the rule above, the rest
  (interpreter, libraries, allocator slack: the larger of the two sizes) is kept as measured,
  unless the rest itself grew between the sizes (then the whole peak is scaled). The Arrow
  figure is the same in every run at identical input; the RSS peak is not (``_arrow_split``).
- **fixed** (not downstream of any per-part job, e.g. WordNet preparation): the measurement at
  the larger size; LAION's size does not change it.
- **embedding** (a rule whose name contains ``embed``): the stand-in encoder's CPU rate says
  nothing about the real encoder, so its runtime is projected from a published GPU rate for
  RoBERTa-large: 800 sentences/s for sentence-transformers/all-roberta-large-v1 on a V100
  (sbert.net Pretrained Models table, "Encoding speed (sentences / sec) on a V100 GPU";
  ``ROBERTA_LARGE_RATE``). That model is roberta-large with mean pooling: the same network, so
  the same cost per sentence, as a raw roberta-large encoder. Texts per job = its rows (per
  part, or all 2.32e9 for a gather) x ``--embed-fraction`` (default 1: every caption, an upper
  bound; step 6 keeps fewer; a per-part job's notes give the share the scale world embeds).

Requests: each job's mem_mb and runtime as Snakemake evaluated them for the scale model's inputs
(``requested_mem_mb``, ``requested_runtime_min``). Rules sized from their input (config
``resources.work.<rule>``, imagenot.plan.work) would request more on laion2B-en: their input is
projected like their work (per part: x rows per part; gathers: linear in parts; selection-driven:
x selected images) and ``requested_at_target`` is what imagenot.plan.work asks for that input.

``fits`` = projected peak <= the request at the target (else the evaluated one), and projected
runtime <= --max-runtime-min (the site's maximum; default the config's
resources.max_runtime_min) and <= the requested runtime. ``all_within_requests`` = all fit,
except the scale model's own jobs (outputs under results/scale_world: the world generator, which
a run on laion2B-en does not have; reported with ``scale_model_only: true``).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml
from snakemake_run import snakemake_cmd, snakemake_env

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from imagenot.curate.paths import SELECTION  # noqa: E402 (after the path)
from imagenot.demo.scale_plan import SCALE_DIR, run_targets  # noqa: E402 (after the path)

TARGET = {"captions": 2_320_000_000, "parts": 128}
ROBERTA_LARGE_RATE = {
    "model": "sentence-transformers/all-roberta-large-v1",
    "sentences_per_s": 800.0,
    "gpu": "NVIDIA V100",
    "applies_to": "RoBERTa-large (24 layers, 355M parameters) with mean pooling",
    "source": (
        "sbert.net Pretrained Models table, 'Encoding speed (sentences / sec) on a V100 GPU': "
        "https://github.com/UKPLab/sentence-transformers/blob/master/docs/_static/html/"
        "models_en_sentence_embeddings.html"
    ),
}
QUICK_ROWS_PER_PART = 20_000
QUICK_SIZES = (1, 2)
GROWTH_TOLERANCE = (1.10, 64.0)  # a peak "did not grow" if large <= small * 1.10 + 64 MB

# --- parsing Snakemake's output -------------------------------------------------------------

_RULE_LINE = re.compile(r"^\s*(?:local)?(?:checkpoint|rule) (\S+):\s*$")
_FIELD_LINE = re.compile(
    r"^\s+(input|output|log|benchmark|wildcards|resources|threads|jobid): (.*)$"
)


def _mapping(text: str) -> dict[str, str]:
    """``a=1, b=x y`` -> {'a': '1', 'b': 'x y'}."""
    out = {}
    for item in text.split(", "):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def parse_jobs(text: str) -> list[dict]:
    """Job blocks of a Snakemake dry run or run log: rule, wildcards, benchmark, resources,
    threads, input and output files (resources values as printed: numbers or ``<TBD>``)."""
    jobs: list[dict] = []
    job: dict | None = None
    for line in text.splitlines():
        m = _RULE_LINE.match(line)
        if m:
            job = {"rule": m.group(1), "wildcards": {}, "benchmark": None, "log": None}
            job["resources"] = {}
            job.update(threads=1, input=[], output=[])
            jobs.append(job)
            continue
        m = _FIELD_LINE.match(line)
        if job is None or not m:
            continue
        key, value = m.groups()
        if key in ("wildcards", "resources"):
            job[key] = _mapping(value)
        elif key in ("input", "output"):
            job[key] = [v.strip() for v in value.split(", ") if v.strip()]
        elif key in ("benchmark", "log"):
            job[key] = value.strip()
        elif key == "threads":
            job["threads"] = int(value)
    return jobs


def _number(value: str | None) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_benchmark(path: Path) -> dict[str, float | None]:
    """The first measurement row of a Snakemake benchmark TSV (``NA`` -> None)."""
    with open(path, newline="") as f:
        row = next(csv.DictReader(f, delimiter="\t"), None)
    if row is None:
        raise ValueError(f"{path}: benchmark file has no measurement row")
    return {k: _number(v) for k, v in row.items()}


SOURCE_JOB = "job getrusage (log line, imagenot.core.job_usage)"
SOURCE_SAMPLED = "Snakemake benchmark (sampled)"


def job_usage_of(workdir: Path, log: str | None) -> dict | None:
    """The usage line a job wrote at its end (imagenot.core.job_usage), or None without one."""
    from imagenot.core import job_usage

    path = workdir / log if log else None
    if path is None or not path.is_file():
        return None
    return job_usage.parse(path.read_text(errors="replace"))


def measured_jobs(dry_run: str, run_log: str, workdir: Path) -> list[dict]:
    """Every job of the dry run with its measurement and requested resources.

    Peak memory and CPU time come from the job's own usage line in its log (exact: the kernel's
    high-water mark of the job's processes, imagenot.core.job_usage); a job without one (killed, or
    run before the line existed) falls back to its Snakemake benchmark, which samples them.
    ``rss_source`` / ``cpu_source`` say which. Wall seconds ``s`` are the benchmark's."""
    evaluated = {
        (j["rule"], tuple(sorted(j["wildcards"].items()))): j["resources"]
        for j in parse_jobs(run_log)
    }
    out = []
    for job in parse_jobs(dry_run):
        if not job["benchmark"] or not (workdir / job["benchmark"]).is_file():
            continue
        bench = read_benchmark(workdir / job["benchmark"])
        own = job_usage_of(workdir, job.get("log"))
        resources = dict(job["resources"])
        later = evaluated.get((job["rule"], tuple(sorted(job["wildcards"].items()))), {})
        for key in ("mem_mb", "runtime"):
            if _number(resources.get(key)) is None and _number(later.get(key)) is not None:
                resources[key] = later[key]
        out.append(
            {
                "rule": job["rule"],
                "wildcards": job["wildcards"],
                "input": job["input"],
                "output": job["output"],
                "s": bench.get("s"),
                "cpu_time": own["cpu_s"] if own else bench.get("cpu_time"),
                "max_rss": own["peak_rss_mb"] if own else bench.get("max_rss"),
                "rss_source": SOURCE_JOB if own else SOURCE_SAMPLED,
                "rows_held": own.get("rows_held") if own else None,
                "arrow_peak": own.get("arrow_peak_mb") if own else None,
                "cpu_source": SOURCE_JOB if own else SOURCE_SAMPLED,
                "sampled_max_rss": bench.get("max_rss"),
                "mem_mb": _number(resources.get("mem_mb")),
                "runtime": _number(resources.get("runtime")),
                "input_mb": sum(_size_mb(workdir / f) for f in job["input"]),
                "input_rows": max(
                    map(_parquet_rows, (workdir / f for f in job["input"])), default=0
                ),
            }
        )
    return out


def _parquet_rows(path: Path) -> int:
    """Rows of a parquet file (0 for anything else)."""
    import pyarrow.parquet as pq

    if path.suffix != ".parquet" or not path.is_file():
        return 0
    return pq.ParquetFile(path).metadata.num_rows


def _size_mb(path: Path) -> float:
    """Size of a file, or of every file under a directory, in MB (0 if absent)."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20
    return path.stat().st_size / 2**20 if path.is_file() else 0.0


# --- projection (pure) ------------------------------------------------------------------------


def _sampled_peak(jobs: list[dict]) -> float | None:
    """Snakemake's sampled peak of the rule's jobs (for comparison with their own figure)."""
    values = [j["sampled_max_rss"] for j in jobs if j.get("sampled_max_rss") is not None]
    return round(max(values), 1) if values else None


def _source(job: dict, key: str) -> str:
    return job.get(key) or SOURCE_SAMPLED


def _busy(job: dict, waits: bool = False) -> float:
    """A job's busy seconds: its exact CPU seconds (its own usage line) unless it ``waits``
    (downloads: the network) or only Snakemake's sample is known; then max(CPU, wall)."""
    if job.get("cpu_source") == SOURCE_JOB and not waits:
        return job.get("cpu_time") or 0.0
    return max(job.get("cpu_time") or 0.0, job.get("s") or 0.0)


def _linear(x0: float, y0: float, x1: float, y1: float, x: float) -> float:
    """y at x on the line through (x0, y0), (x1, y1); never below y1 (no shrinking)."""
    if x1 == x0:
        return y1
    return max(y1, y1 + (y1 - y0) / (x1 - x0) * (x - x1))


def _downstream(jobs: list[dict], seed) -> set[str]:
    """Output files of the jobs ``seed`` accepts and of every job consuming them, transitively."""
    files = {f for j in jobs if seed(j) for f in j.get("output", [])}
    changed = True
    while changed:
        changed = False
        for j in jobs:
            outputs = set(j.get("output", []))
            if not outputs <= files and any(f in files for f in j.get("input", [])):
                files |= outputs
                changed = True
    return files


def _rule_class(jobs: list[dict], laion_files: set[str], image_files: set[str]) -> str:
    """per_part, download_part, selection_gather, gather or fixed (see the module docstring)."""
    names = set().union(*(j["wildcards"] for j in jobs))
    inputs = {f for j in jobs for f in j.get("input", [])}
    if "shard" in names:
        return "per_part"
    if "part" in names:
        return "download_part"
    if inputs & image_files:
        return "selection_gather"
    if inputs & laion_files:
        return "gather"
    return "fixed"


def _arrow_split(small: list[dict], large: list[dict]) -> dict | None:
    """A gather's peak as Arrow data plus the rest, when every job reported its Arrow pool's
    peak (``arrow_peak_mb`` of the usage line) and the rest did not grow between the sizes:
    ``{"arrow": (small, large), "rest": the larger rest}``; else None (the RSS rules apply).

    Why: the data a selection job holds lives in Arrow; the rest of its peak is the interpreter,
    the libraries and the allocator's slack, which does not follow the input but does vary from
    run to run (519-585 MB for one selection at identical input). Projecting the whole peak
    multiplied that jitter by the projection's factor (x62 for linear in parts), and two runs
    disagreed 3x; the Arrow figure is what the job asked for, the same in every run."""
    jobs = (small, large)
    if any(j.get("arrow_peak") is None or j.get("max_rss") is None for js in jobs for j in js):
        return None
    arrow = tuple(max(j["arrow_peak"] for j in js) for js in jobs)
    rest = tuple(max(j["max_rss"] - j["arrow_peak"] for j in js) for js in jobs)
    if rest[1] > rest[0] * GROWTH_TOLERANCE[0] + GROWTH_TOLERANCE[1]:
        return None  # memory outside Arrow grew with the input: project the whole peak
    return {"arrow": arrow, "rest": max(rest)}


def _groups(jobs: list[dict], drop: str) -> int:
    """Distinct combinations of a rule's wildcards other than ``drop`` (datasets, usually)."""
    return len(
        {tuple(sorted((k, v) for k, v in j["wildcards"].items() if k != drop)) for j in jobs}
    )


def project(
    small: list[dict],
    large: list[dict],
    sizes: tuple[int, int],
    rows_per_part: int,
    *,
    max_runtime_min: float,
    target: dict = TARGET,
    embed_rate: dict = ROBERTA_LARGE_RATE,
    embed_fraction: float = 1.0,
    selected: tuple[int, int] = (0, 0),
    paper_selected: int = 0,
    paper_download_parts: int = 1,
    paper_held: int = 0,
    work_request=None,
) -> dict:
    """Project measured jobs at two sizes to laion2B-en (rules in the module docstring).

    ``small`` / ``large``: measured jobs (``measured_jobs`` rows) at ``sizes`` parts of
    ``rows_per_part`` rows. ``selected``: selected images (selection rows) of a dataset at the
    two sizes; ``paper_selected``: those of the paper config, in ``paper_download_parts`` parts;
    ``paper_held``: the rows the paper config's caption selection holds (``paper_selection``).
    ``work_request(rule, input_mb)`` -> (mem_mb, runtime_min) or None: what a job of ``rule``
    requests for that input (work-sized resources); the projected input then sets the request
    the job would make on laion2B-en, which ``fits`` compares with.
    """
    n_small, n_large = sizes
    target_rows_per_part = target["captions"] / target["parts"]
    all_jobs = small + large
    floor = min((j["max_rss"] for j in all_jobs if j.get("max_rss") is not None), default=0.0)
    laion_files = _downstream(all_jobs, lambda j: "shard" in j["wildcards"])
    image_files = _downstream(
        all_jobs, lambda j: "part" in j["wildcards"] and "shard" not in j["wildcards"]
    )
    rules = []
    for rule in dict.fromkeys(j["rule"] for j in all_jobs):
        js = [j for j in small if j["rule"] == rule]
        jl = [j for j in large if j["rule"] == rule] or js
        js = js or jl
        kind = _rule_class(jl, laion_files, image_files)
        peak = [max(j["max_rss"] or 0.0 for j in js), max(j["max_rss"] or 0.0 for j in jl)]
        waits = kind == "download_part"
        busy = [sum(_busy(j, waits) for j in js), sum(_busy(j, waits) for j in jl)]
        input_mb = [
            sum(j.get("input_mb", 0.0) for j in js) / len(js),
            sum(j.get("input_mb", 0.0) for j in jl) / len(jl),
        ]
        projected: dict = {}
        notes: list[str] = []
        if kind == "per_part":
            groups = _groups(jl, "shard")
            item = "caption row"
            per_item = busy[1] / (len(jl) * rows_per_part)
            projected["jobs"] = target["parts"] * groups
            runtime_s = per_item * target_rows_per_part
            grew = peak[1] > peak[0] * GROWTH_TOLERANCE[0] + GROWTH_TOLERANCE[1]
            if grew and n_large != n_small:
                projected["peak_rss_mb"] = _linear(
                    n_small, peak[0], n_large, peak[1], target["parts"]
                )
                projected["memory_rule"] = (
                    "grew with parts: linear in parts (not bounded by one part)"
                )
            else:
                projected["peak_rss_mb"] = peak[1]
                projected["memory_rule"] = "bounded by one part: measured peak"
            projected["peak_rss_mb_if_linear_in_part_rows"] = floor + (peak[1] - floor) * (
                target_rows_per_part / rows_per_part
            )
            embed_items = target_rows_per_part
            projected["input_mb"] = input_mb[1] * target_rows_per_part / rows_per_part
        elif kind == "download_part":
            item = "selected image"
            parts = [len(js) / _groups(js, "part"), len(jl) / _groups(jl, "part")]
            images = [selected[0] / parts[0], max(selected[1], 1) / parts[1]]  # per job
            paper_images = paper_selected / max(paper_download_parts, 1)
            per_item = busy[1] / len(jl) / images[1]
            projected["jobs"] = paper_download_parts * _groups(jl, "part")
            runtime_s = per_item * paper_images
            projected["peak_rss_mb"] = _linear(images[0], peak[0], images[1], peak[1], paper_images)
            projected["memory_rule"] = "linear in selected images per part"
            notes.append("images served on loopback: a lower bound for real web downloads")
            embed_items = 0.0
            projected["input_mb"] = input_mb[1] * paper_selected / max(selected[1], 1)
        elif kind == "selection_gather":
            item = "selected image"
            per_item = busy[1] / len(jl) / max(selected[1], 1)
            projected["jobs"] = len(jl)
            runtime_s = per_item * paper_selected
            held = max((j.get("rows_held") or 0 for j in js + jl), default=0)
            rows = [min(n, held) if held else n for n in (paper_selected, max(selected[1], 1))]
            basis = f"streamed (holds at most {held} rows): " if held else ""
            data = _arrow_split(js, jl)
            if data:
                projected["peak_rss_mb"] = data["rest"] + data["arrow"][1] * max(
                    rows[0] / rows[1], 1.0
                )
                projected["memory_rule"] = basis + (
                    f"Arrow data ({data['arrow'][1]:.0f} MB) proportional in "
                    f"{'rows held' if held else 'selected images'}, the rest "
                    f"({data['rest']:.0f} MB) as measured"
                )
            else:
                projected["peak_rss_mb"] = max(
                    peak[1], floor + (peak[1] - floor) * rows[0] / rows[1]
                )
                projected["memory_rule"] = basis + (
                    f"proportional above the floor in {'rows held' if held else 'selected images'}"
                )
            embed_items = 0.0
            projected["input_mb"] = input_mb[1] * paper_selected / max(selected[1], 1)
        elif kind == "fixed":
            item = "job"
            per_item = busy[1] / len(jl)
            projected["jobs"] = len(jl)
            runtime_s = per_item
            projected["peak_rss_mb"] = peak[1]
            projected["memory_rule"] = "independent of LAION: measured peak"
            embed_items = 0.0
            projected["input_mb"] = input_mb[1]
        else:  # gather
            item = "caption row"
            rows = (n_small * rows_per_part, n_large * rows_per_part)
            per_item = busy[1] / (rows[1] * len(jl))
            projected["jobs"] = len(jl)
            runtime_s = _linear(
                rows[0], busy[0] / len(js), rows[1], busy[1] / len(jl), target["captions"]
            )
            data = _arrow_split(js, jl)
            held = [max(j.get("rows_held") or 0 for j in jobs) for jobs in (js, jl)]
            # what the Arrow data grows with: rows held where the job declares them, else parts
            if paper_held and 0 < held[0] < held[1]:
                x, target_x = held, paper_held
                basis = (
                    f"holds classes x kept captions ({held[0]} -> {held[1]} rows, paper "
                    f"{paper_held}): "
                )
                unit = "rows held"
            else:
                x, target_x, basis, unit = (n_small, n_large), target["parts"], "", "parts"
            if data and x[0] != x[1]:
                arrow = data["arrow"]
                grown = max(_linear(x[0], arrow[0], x[1], arrow[1], target_x), arrow[1])
                projected["peak_rss_mb"] = data["rest"] + grown
                projected["memory_rule"] = basis + (
                    f"Arrow data ({arrow[0]:.0f} -> {arrow[1]:.0f} MB) linear in {unit}, the rest "
                    f"({data['rest']:.0f} MB) as measured"
                )
            else:
                projected["peak_rss_mb"] = _linear(
                    n_small, peak[0], n_large, peak[1], target["parts"]
                )
                projected["memory_rule"] = "linear in parts"
            embed_items = float(target["captions"])
            projected["input_mb"] = _linear(
                n_small, input_mb[0], n_large, input_mb[1], target["parts"]
            )
        if "embed" in rule:
            texts = embed_items * embed_fraction
            if kind == "per_part":
                rows = max(j.get("input_rows", 0) for j in jl)
                notes.append(
                    f"texts embedded per part in the scale world: {rows} of {rows_per_part} rows "
                    f"(--embed-fraction {rows / rows_per_part:.3g} would use that share)"
                )
            runtime_s = texts / embed_rate["sentences_per_s"]
            notes.append(
                f"runtime from {embed_rate['sentences_per_s']:g} sentences/s "
                f"({embed_rate['model']} on {embed_rate['gpu']}) for {texts:.3g} texts per job"
            )
        projected["runtime_min"] = runtime_s / 60.0
        requested_mem = max((j["mem_mb"] for j in jl if j.get("mem_mb") is not None), default=None)
        requested_rt = max((j["runtime"] for j in jl if j.get("runtime") is not None), default=None)
        at_target = work_request(rule, projected["input_mb"]) if work_request else None
        need_mem, need_rt = at_target if at_target else (requested_mem, requested_rt)
        if at_target:
            notes.append(
                f"work-sized request for {projected['input_mb']:.0f} MB input: "
                f"{need_mem} MB, {need_rt:.0f} min"
            )
            if need_rt > max_runtime_min:
                notes.append("the estimate exceeds the site maximum: the run refuses this job")
        fits = (
            need_mem is not None
            and need_rt is not None
            and projected["peak_rss_mb"] <= need_mem
            and projected["runtime_min"] <= min(max_runtime_min, need_rt)
        )
        if need_mem is None or need_rt is None:
            notes.append("requested mem_mb or runtime unknown: counted as not fitting")
        scale_only = all(
            f.startswith(f"{SCALE_DIR}/") for j in jl for f in j.get("output", [])
        ) and any(j.get("output") for j in jl)
        rules.append(
            {
                "rule": rule,
                "class": kind,
                "scale_model_only": scale_only,
                "jobs": [len(js), len(jl)],
                "peak_rss_mb": [round(p, 1) for p in peak],
                "peak_rss_source": sorted({_source(j, "rss_source") for j in js + jl}),
                "sampled_peak_rss_mb": [_sampled_peak(js), _sampled_peak(jl)],
                "cpu_source": sorted({_source(j, "cpu_source") for j in js + jl}),
                "busy_s": [round(b, 2) for b in busy],
                "item": item,
                "cpu_s_per_item": per_item,
                "input_mb": [round(m, 2) for m in input_mb],
                "requested_mem_mb": requested_mem,
                "requested_runtime_min": requested_rt,
                "requested_at_target": (
                    {"mem_mb": at_target[0], "runtime_min": round(at_target[1], 2)}
                    if at_target
                    else None
                ),
                "projected": {
                    k: (round(v, 2) if isinstance(v, float) else v) for k, v in projected.items()
                },
                "fits": bool(fits),
                "notes": notes,
            }
        )
    return {
        "sizes": list(sizes),
        "rows_per_part": rows_per_part,
        "projection_target": dict(target),
        "max_runtime_min": max_runtime_min,
        "embedding_rate": dict(embed_rate),
        "embed_fraction": embed_fraction,
        "interpreter_floor_mb": floor,
        "selected_images": {"scale": list(selected), "paper": paper_selected},
        "selection_rows_held_paper": paper_held,
        "rules": rules,
        "peak_rss_sources": dict(Counter(_source(j, "rss_source") for j in all_jobs)),
        "all_within_requests": all(r["fits"] for r in rules if not r["scale_model_only"]),
    }


def check(
    measured: list[dict], plans: tuple[list[dict], list[dict]], sizes: tuple[int, int]
) -> dict:
    """What ``--check`` reports, projecting nothing: the DAG run and measured at the smaller
    size (``measured``: ``measured_jobs`` rows) and planned at both (``plans``: ``parse_jobs``
    rows of the two sizes' dry runs).

    Per rule: its class (as ``project`` classes it, from the planned jobs), its jobs planned at
    the two sizes and run at the smaller, what they requested, their peak and where it came
    from. ``scales_with_parts``: a per-part rule's jobs grow in proportion to the parts, any
    other rule's stay the same (a gather per dataset; download parts set by the config), so
    that 128 parts mean 128 jobs of each per-part rule and no more of the rest. ``not_run``:
    rules planned at the smaller size of which no job ran (their outputs were there before)."""
    planned_all = plans[0] + plans[1]
    laion_files = _downstream(planned_all, lambda j: "shard" in j["wildcards"])
    image_files = _downstream(
        planned_all, lambda j: "part" in j["wildcards"] and "shard" not in j["wildcards"]
    )
    rules = []
    for rule in dict.fromkeys(j["rule"] for j in planned_all):
        planned = [[j for j in plan if j["rule"] == rule] for plan in plans]
        ran = [j for j in measured if j["rule"] == rule]
        kind = _rule_class(planned[1] or planned[0], laion_files, image_files)
        jobs = [len(p) for p in planned]
        if kind == "per_part":
            scales = jobs[0] * sizes[1] == jobs[1] * sizes[0]
        else:
            scales = jobs[0] == jobs[1]
        peaks = [j["max_rss"] for j in ran if j.get("max_rss") is not None]
        rules.append(
            {
                "rule": rule,
                "class": kind,
                "jobs": jobs,
                "jobs_run": len(ran),
                "scales_with_parts": scales,
                "requested_mem_mb": max(
                    (j["mem_mb"] for j in ran if j.get("mem_mb") is not None), default=None
                ),
                "requested_runtime_min": max(
                    (j["runtime"] for j in ran if j.get("runtime") is not None), default=None
                ),
                "peak_rss_mb": round(max(peaks), 1) if peaks else None,
                "peak_rss_source": sorted({_source(j, "rss_source") for j in ran}),
            }
        )
    return {
        "sizes": list(sizes),
        "rules": rules,
        "jobs_scale_with_parts": all(r["scales_with_parts"] for r in rules),
        "not_run": [r["rule"] for r in rules if r["jobs"][0] and not r["jobs_run"]],
        "peak_rss_sources": dict(Counter(_source(j, "rss_source") for j in measured)),
    }


# --- running the DAG ------------------------------------------------------------------------


def _deep_update(base: dict, extra: dict) -> dict:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value
    return base


def _load_config(paths: list[Path]) -> dict:
    from imagenot.core.config import validate_config

    config: dict = {}
    for path in paths:
        _deep_update(config, yaml.safe_load(path.read_text()) or {})
    return validate_config(config)


def _snakemake(workdir: Path, configs: list[Path], targets: list[str], *extra: str):
    cmd = snakemake_cmd(workdir, configs, targets, *extra, cores=2)
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=snakemake_env())


def _selected(workdir: Path, config: dict) -> int:
    import pyarrow.parquet as pq

    names = [n for n, s in config["datasets"].items() if s["kind"] == "laion"]
    paths = [workdir / SELECTION.format(dataset=n) for n in names]
    return max((pq.ParquetFile(p).metadata.num_rows for p in paths if p.is_file()), default=0)


def _size_setup(
    root: Path,
    config_path: Path,
    n_parts: int,
    rows_per_part: int,
    captions_only: bool,
    images_per_class_per_part: int | None,
) -> tuple[Path, list[Path], dict, list[str]]:
    """The work directory ``root/parts-<n>`` of one size, with its config overlay written:
    (work directory, config files, the merged config, targets)."""
    workdir = root / f"parts-{n_parts}"
    # the rules find the clone's code by its own path, and a file the config names under
    # resources/ is the clone's (imagenot.core.paths.shipped): the folder needs no link to the clone
    workdir.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load(config_path.read_text()) or {}
    row_group = min(base.get("scale_world", {}).get("row_group_rows", rows_per_part), rows_per_part)
    overlay_cfg = {
        "laion": {"n_shards": n_parts},
        "scale_world": {
            "rows_per_shard": rows_per_part,
            "row_group_rows": row_group,
            "captions_only": captions_only,
        },
    }
    if images_per_class_per_part:
        overlay_cfg["datasets"] = {
            name: {"images_per_class": images_per_class_per_part * n_parts}
            for name, spec in base.get("datasets", {}).items()
            if spec.get("kind") == "laion"
        }
    overlay = workdir / "bench_overlay.yaml"
    overlay.write_text(yaml.safe_dump(overlay_cfg))
    configs = [config_path, overlay]
    config = _load_config(configs)
    return workdir, configs, config, run_targets(config)


def _dry_run(workdir: Path, configs: list[Path], targets: list[str], n_parts: int) -> str:
    """Snakemake's dry run of every job of the size (``--forceall``), kept beside the work
    directory's run log as ``bench_dry_run.log``: its job blocks."""
    dry = _snakemake(workdir, configs, targets, "--dry-run", "--forceall")
    (workdir / "bench_dry_run.log").write_text(dry.stdout + dry.stderr)
    if dry.returncode != 0:
        raise SystemExit(f"snakemake dry run at {n_parts} parts failed:\n{dry.stderr[-4000:]}")
    return dry.stdout + dry.stderr


def run_size(
    root: Path,
    config_path: Path,
    n_parts: int,
    rows_per_part: int,
    captions_only: bool,
    images_per_class_per_part: int | None = None,
) -> tuple[list[dict], int]:
    """Run the scale DAG at ``n_parts`` parts in ``root/parts-<n>``: (measured jobs, selected)."""
    measured, selected, _ = _run_and_plan(
        root, config_path, n_parts, rows_per_part, captions_only, images_per_class_per_part
    )
    return measured, selected


def _run_and_plan(
    root: Path,
    config_path: Path,
    n_parts: int,
    rows_per_part: int,
    captions_only: bool,
    images_per_class_per_part: int | None,
) -> tuple[list[dict], int, list[dict]]:
    """``run_size`` with the dry run's jobs (``parse_jobs``) beside its measured ones."""
    workdir, configs, config, targets = _size_setup(
        root, config_path, n_parts, rows_per_part, captions_only, images_per_class_per_part
    )
    run = _snakemake(workdir, configs, targets, "--rerun-incomplete")
    (workdir / "bench_run.log").write_text(run.stdout + run.stderr)
    if run.returncode != 0:
        raise SystemExit(
            f"snakemake run at {n_parts} parts failed (log: {workdir / 'bench_run.log'}):\n"
            f"{run.stderr[-4000:]}"
        )
    dry = _dry_run(workdir, configs, targets, n_parts)
    jobs = measured_jobs(dry, run.stdout + run.stderr, workdir)
    return jobs, _selected(workdir, config), parse_jobs(dry)


def planned_jobs(
    root: Path,
    config_path: Path,
    n_parts: int,
    rows_per_part: int,
    captions_only: bool,
    images_per_class_per_part: int | None = None,
) -> list[dict]:
    """Every job of the scale DAG at ``n_parts`` parts (``parse_jobs`` of a dry run in
    ``root/parts-<n>``), running nothing."""
    workdir, configs, _, targets = _size_setup(
        root, config_path, n_parts, rows_per_part, captions_only, images_per_class_per_part
    )
    return parse_jobs(_dry_run(workdir, configs, targets, n_parts))


def run_check(
    root: Path,
    config_path: Path,
    sizes: tuple[int, int],
    rows_per_part: int,
    captions_only: bool,
    images_per_class_per_part: int | None = None,
) -> dict:
    """``--check``: the DAG run at the smaller size and planned at both (``check``), with the
    rows per part and the images the run selected."""
    options = (rows_per_part, captions_only, images_per_class_per_part)
    measured, selected, small = _run_and_plan(root, config_path, sizes[0], *options)
    large = planned_jobs(root, config_path, sizes[1], *options)
    result = check(measured, (small, large), sizes)
    result.update(rows_per_part=rows_per_part, selected_images=selected)
    return result


def check_lines(result: dict) -> str:
    """``check``'s result as text, a line per rule."""
    lines = [
        f"{r['rule']:22s} {r['class']:16s} jobs {r['jobs'][0]} -> {r['jobs'][1]} "
        f"(scales with parts: {r['scales_with_parts']}), ran {r['jobs_run']}, "
        f"peak {r['peak_rss_mb']} MB (req {r['requested_mem_mb']} MB, "
        f"{r['requested_runtime_min']} min)"
        for r in result["rules"]
    ]
    lines.append(f"jobs scale with parts: {result['jobs_scale_with_parts']}")
    lines.append(f"planned but not run (outputs present): {result['not_run'] or 'none'}")
    return "\n".join(lines)


def paper_selection(paper_path: Path) -> tuple[int, int, int]:
    """(most selected images of one LAION-built dataset of the paper config, download parts,
    most rows its caption selection holds). Rows held = classes x (per_class + reserve_per_class)
    (imagenot.curate.settings.SelectSettings): each kept class's best captions with their keys,
    what ``curate-select`` declares as ``rows_held`` in its usage line."""
    paper = _load_config([paper_path])
    cur = paper["curate"]
    most = held = 0
    for spec in paper["datasets"].values():
        if spec["kind"] != "laion":
            continue
        n = spec.get("n_classes", cur["n_classes"])
        per = spec.get("images_per_class", cur["images_per_class"])
        selected = n * math.ceil(per * (1 + cur["oversample"]))
        most = max(most, selected)
        held = max(held, selected + n * math.ceil(per * cur["reserve"]))
    return most, paper["acquire"]["download_parts"], held


def work_requests(config: dict):
    """``work_request`` for ``project``: the request of a work-sized rule (config
    ``resources.work.<rule>``, imagenot.plan.work) for a given input; None for other rules."""
    from imagenot.plan import work

    costs = config["resources"].get("work", {})

    def request(rule: str, input_mb: float) -> tuple[int, float] | None:
        if rule not in costs:
            return None
        return work.mem_mb(config, rule, input_mb), work.estimated_min(config, rule, input_mb)

    return request


def agreement(a: dict, b: dict) -> list[dict]:
    """Per rule, two runs' projected peaks and runtimes and the larger over the smaller (1.0 =
    the same): the check that the projection is measured, not sampled (docs/scale.md)."""

    def ratio(x: float, y: float) -> float:
        lo, hi = sorted((x, y))
        return round(hi / lo, 3) if lo > 0 else (1.0 if hi == 0 else math.inf)

    runs = [{r["rule"]: r for r in result["rules"]} for result in (a, b)]
    out = []
    for rule in runs[0].keys() & runs[1].keys():
        pa_, pb = runs[0][rule]["projected"], runs[1][rule]["projected"]
        out.append(
            {
                "rule": rule,
                "peak_rss_mb": [pa_["peak_rss_mb"], pb["peak_rss_mb"]],
                "peak_ratio": ratio(pa_["peak_rss_mb"], pb["peak_rss_mb"]),
                "runtime_min": [pa_["runtime_min"], pb["runtime_min"]],
                "runtime_ratio": ratio(pa_["runtime_min"], pb["runtime_min"]),
            }
        )
    order = list(runs[0])
    return sorted(out, key=lambda r: order.index(r["rule"]))


def agreement_table(rows: list[dict]) -> str:
    """:func:`agreement` as a Markdown table."""
    lines = [
        "| rule | projected peak MB (run 1, run 2) | ratio | projected runtime min (run 1, "
        "run 2) | ratio |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['rule']} | {r['peak_rss_mb'][0]:.0f}, {r['peak_rss_mb'][1]:.0f} "
            f"| {r['peak_ratio']:.3f} | {r['runtime_min'][0]:.1f}, {r['runtime_min'][1]:.1f} "
            f"| {r['runtime_ratio']:.3f} |"
        )
    return "\n".join(lines)


def markdown_table(result: dict) -> str:
    """The projection as the Markdown table of docs/scale.md."""
    lines = [
        "| rule | class | jobs (small, large) | peak RSS MB (small, large) | projected jobs "
        "| projected peak MB | projected runtime min | requested MB | requested min | fits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rules"]:
        p = r["projected"]
        at_target = r.get("requested_at_target") or {}
        mem = at_target.get("mem_mb", r["requested_mem_mb"])
        runtime = at_target.get("runtime_min", r["requested_runtime_min"])
        fits = (
            "n/a (scale model only)"
            if r.get("scale_model_only")
            else ("yes" if r["fits"] else "**no**")
        )
        lines.append(
            f"| {r['rule']} | {r['class']} | {r['jobs'][0]}, {r['jobs'][1]} "
            f"| {r['peak_rss_mb'][0]:.0f}, {r['peak_rss_mb'][1]:.0f} | {p['jobs']} "
            f"| {p['peak_rss_mb']:.0f} | {p['runtime_min']:.1f} | {mem:.0f} | {runtime:.0f} | {fits} |"
        )
    lines.append("")
    lines.append(f"all_within_requests: **{str(result['all_within_requests']).lower()}**")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="two numbers of parts, e.g. 2,4")
    parser.add_argument("--rows-per-part", type=int, default=None, help="default 2500000")
    parser.add_argument("--workdir", type=Path, default=None, help="kept; default a temp dir")
    parser.add_argument("--config", type=Path, default=REPO / "config" / "scale.yaml")
    parser.add_argument("--paper-config", type=Path, default=REPO / "config" / "paper.yaml")
    parser.add_argument(
        "--max-runtime-min",
        type=float,
        default=None,
        help="the site's maximum job runtime (default: the config's resources.max_runtime_min)",
    )
    parser.add_argument("--embed-fraction", type=float, default=1.0)
    parser.add_argument("--captions-only", action="store_true", help="stop at the selection")
    parser.add_argument(
        "--images-per-class-per-part",
        type=int,
        default=None,
        help="set images_per_class to this x parts (selections that grow with the size)",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_ROWS_PER_PART} rows per part, sizes 1,2"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="run the smaller size only and dry-run both: the DAG runs, every job records its "
        "usage, per-part jobs grow with the parts (rules and requests as planned); projects "
        "nothing",
    )
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument(
        "--markdown", action="store_true", help="print the docs/scale.md table instead"
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar="JSON",
        help="compare two runs' --json outputs (per rule, larger / smaller projection); runs "
        "nothing",
    )
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        rows = agreement(a, b)
        print(json.dumps(rows, indent=2) if args.json else agreement_table(rows))
        return 0
    sizes = (
        tuple(int(s) for s in args.sizes.split(","))
        if args.sizes
        else (QUICK_SIZES if args.quick else (2, 4))
    )
    if len(sizes) != 2 or not 0 < sizes[0] < sizes[1]:
        parser.error("--sizes: two increasing numbers of parts, e.g. 2,4")
    if args.check and args.markdown:
        parser.error("--check projects nothing: no --markdown table")
    rows = args.rows_per_part or (QUICK_ROWS_PER_PART if args.quick else 2_500_000)
    paper_selected, paper_parts, paper_held = paper_selection(args.paper_config.resolve())
    scale_config = _load_config([args.config.resolve()])
    max_runtime_min = args.max_runtime_min or scale_config["resources"]["max_runtime_min"]
    tmp = None
    root = args.workdir
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench_scale_")
        root = Path(tmp.name)
    root = root.resolve()
    options = (rows, args.captions_only, args.images_per_class_per_part)
    try:
        if args.check:
            checked = run_check(root, args.config.resolve(), sizes, *options)
        else:
            measured = [run_size(root, args.config.resolve(), n, *options) for n in sizes]
    finally:
        if tmp is not None:
            tmp.cleanup()
    if args.check:
        print(json.dumps(checked, indent=2) if args.json else check_lines(checked))
        return 0
    result = project(
        measured[0][0],
        measured[1][0],
        sizes,
        rows,
        max_runtime_min=max_runtime_min,
        embed_fraction=args.embed_fraction,
        selected=(measured[0][1], measured[1][1]),
        paper_selected=paper_selected,
        paper_download_parts=paper_parts,
        paper_held=paper_held,
        work_request=work_requests(scale_config),
    )
    result["load_average_1min"] = round(os.getloadavg()[0], 2)
    if args.markdown:
        print(markdown_table(result))
    elif args.json:
        print(json.dumps(result, indent=2))
    else:
        for r in result["rules"]:
            p = r["projected"]
            print(
                f"{r['rule']:22s} {r['class']:16s} peak {r['peak_rss_mb']} MB -> "
                f"{p['peak_rss_mb']} MB (req {r['requested_mem_mb']}), "
                f"{p['runtime_min']} min (req {r['requested_runtime_min']}), "
                f"{p['jobs']} jobs, fits={r['fits']}"
            )
        print(f"all within requests: {result['all_within_requests']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
