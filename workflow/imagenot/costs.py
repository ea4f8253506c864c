"""What a config will cost: ``imagenot plan``'s summary per rule group, estimates labelled.

Two kinds of figure, never mixed:

* **requested** (an upper bound a scheduler must be ready for): from the jobs Snakemake plans
  (:mod:`imagenot.planning`), each job's requested runtime x GPUs (GPU-hours) or x cores
  (core-hours) and its requested memory. Rules that size their request from their input when
  the job is ready (``resources.work``) take the scale model's projection at laion2B-en
  (docs/scale.json) for a paper-shaped LAION source, else their floor (said so).
* **estimated**: training GPU-hours from epochs x images / throughput (no trial stops early;
  :mod:`imagenot.train.budget`), the throughput table ``train.throughput`` of the config or
  what the user's own GPU measured (:mod:`imagenot.measured`: the preflight's report); the
  longest single job; node-local disk; storage from image counts x bytes per image, the
  published test split's files where a dataset keeps its originals, and model sizes; the wall
  time of the longest chain, and against the number of GPUs. Each carries its source and
  assumptions.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

from imagenot.acquire.sizes import (
    BYTES_PER_PIXEL,
    BYTES_PER_PIXEL_SOURCE,
    dataset_bytes,
    dataset_images,
    originals_bytes,
)
from imagenot.measured import read_measurements, read_throughput  # noqa: F401 (plan's names)
from imagenot.planning import REPO, PlannedJob, rule_groups, world_rows_per_part

SCALE_JSON = REPO / "docs" / "scale.json"
DDP_EFFICIENCY = 0.9  # imagenot.train.budget.hours' assumption for gpus_per_job > 1


def scale_projection() -> dict | None:
    """The scale model's projection to laion2B-en (docs/scale.json), None without it."""
    return json.loads(SCALE_JSON.read_text()) if SCALE_JSON.is_file() else None


def paper_shaped(config: dict, scale: dict | None) -> bool:
    """Whether the config's LAION source is laion2B-en's parts (the scale model's target)."""
    if scale is None or world_rows_per_part(config) or not config["laion"].get("n_shards"):
        return False
    return config["laion"]["n_shards"] == scale["projection_target"]["parts"]


def _work_request(
    config: dict, job: PlannedJob, scale: dict | None, paper: bool
) -> tuple[dict, str]:
    """Memory and runtime of a job of an input-sized rule: the projection at laion2B-en, else
    the rule's floor (the request grows with the input at run time)."""
    from imagenot import work

    rule = job.rule
    projected = {r["rule"]: r for r in (scale or {}).get("rules", [])}.get(rule, {})
    if paper and projected.get("requested_at_target"):
        at = projected["requested_at_target"]
        return {"mem_mb": at["mem_mb"], "runtime": at["runtime_min"]}, "scale projection"
    return {
        "mem_mb": work.mem_mb(config, rule, 0.0),
        "runtime": work.runtime_min(config, rule, 0.0),
    }, "floor (sized from its input at run time)"


def group_rows(config: dict, jobs: list[PlannedJob]) -> list[dict]:
    """One row per rule group (stage file): jobs, GPU jobs, requested GPU-hours and core-hours,
    the largest requested memory of a job, and the scale model's projected peak where known;
    the disk its jobs request (``disk_mb``, the rules that declare it: what the job writes)."""
    groups = rule_groups()
    scale = scale_projection()
    paper = paper_shaped(config, scale)
    projected = {r["rule"]: r["projected"] for r in (scale or {}).get("rules", [])}
    sized = set(config["resources"]["work"])
    rows: dict[str, dict] = {}
    for job in jobs:
        res, source = dict(job.resources), "request"
        if job.rule in sized:
            got, source = _work_request(config, job, scale, paper)
            res.update(got)
        group = groups.get(job.rule, "other")
        row = rows.setdefault(
            group,
            {
                "group": group,
                "rules": Counter(),
                "jobs": 0,
                "gpu_jobs": 0,
                "gpu_hours_requested": 0.0,
                "core_hours_requested": 0.0,
                "peak_mem_mb_requested": 0,
                "peak_mem_mb_projected": None,
                "disk_mb_requested": 0,
                "notes": set(),
            },
        )
        hours = (res.get("runtime") or 0) / 60
        row["rules"][job.rule] += 1
        row["jobs"] += 1
        row["gpu_jobs"] += job.gpus > 0
        row["gpu_hours_requested"] += job.gpus * hours
        row["core_hours_requested"] += job.threads * hours
        row["peak_mem_mb_requested"] = max(row["peak_mem_mb_requested"], res.get("mem_mb") or 0)
        row["disk_mb_requested"] += res.get("disk_mb") or 0
        if res.get("runtime") is None or res.get("mem_mb") is None:
            row["notes"].add(f"{job.rule}: request unknown until its input exists")
        if source != "request":
            row["notes"].add(f"{job.rule}: {source}")
        if paper and job.rule in projected:
            peak = projected[job.rule]["peak_rss_mb"]
            row["peak_mem_mb_projected"] = max(row["peak_mem_mb_projected"] or 0, round(peak))
    out = []
    for row in rows.values():
        row["rules"] = dict(sorted(row["rules"].items()))
        row["gpu_hours_requested"] = round(row["gpu_hours_requested"], 1)
        row["core_hours_requested"] = round(row["core_hours_requested"], 1)
        row["notes"] = sorted(row["notes"])
        out.append(row)
    return out


def training_rows(config: dict, throughput: dict) -> list[dict]:
    """Estimated GPU-hours per trained experiment and model (an upper bound: no trial stops
    early), with ``train.gpus_per_job`` GPUs per job, and its chain: one trial through every
    stage, then a final seed. A TL experiment's GPU work is its one features pass over the train
    and val splits (``plan.FEATURE_SPLITS``), counted at the training throughput (a forward pass
    costs about a third of a step)."""
    from imagenot.train import budget, plan

    gpus = max(1, plan.gpus_per_node(config) * plan.nodes(config))
    rows = []
    for exp in plan.experiments(config):
        if plan.is_published(exp):
            continue
        d, p = exp["dataset"], exp["protocol"]
        sizes = dataset_images(config, d)
        if sizes is None:
            continue
        for model in config["train"]["models"]:
            if model not in throughput:
                continue
            epochs = budget.trial_epochs(config, d, p) + budget.final_epochs(config, d, p)
            chain, n = budget.chain_epochs(config, d, p), sizes["train"]
            if plan.is_tl(p):
                epochs, chain = 1, 1
                n = sum(sizes[split] for split in plan.FEATURE_SPLITS)
            rate = throughput[model]
            rows.append(
                {
                    "experiment": f"{d}/{p}",
                    "model": model,
                    "epochs": epochs,
                    "images_per_epoch": n,
                    "gpu_hours": round(gpus * budget.hours(epochs, n, rate, gpus), 2),
                    "chain_hours": round(budget.hours(chain, n, rate, gpus), 2),
                }
            )
    return rows


def wall_time(rows: list[dict], gpus: int) -> dict:
    """Training's wall time on ``gpus`` GPUs: the longer of its longest chain and its GPU-hours
    spread over every GPU (a lower bound of any schedule: queueing, rung barriers and the data
    stages before training add to it). More GPUs never lengthen it."""
    if gpus < 1:
        raise ValueError(f"--gpus must be at least 1, got {gpus}")
    total = sum(r["gpu_hours"] for r in rows)
    longest = max(rows, key=lambda r: r["chain_hours"], default=None)
    chain = longest["chain_hours"] if longest else 0.0
    return {
        "gpus": gpus,
        "longest_chain": f"{longest['experiment']} {longest['model']}" if longest else None,
        "longest_chain_hours": round(chain, 1),
        "gpu_hours_over_gpus": round(total / gpus, 1),
        "hours": round(max(chain, total / gpus), 1),
    }


def wall_time_by_gpus(rows: list[dict], gpus: int) -> dict:
    """The wall time as a function of the GPUs: at 1, 2, 4, ... GPUs up to past ``gpus`` and
    the knee, and the knee itself: the fewest GPUs at which the longest chain (the critical
    path) bounds the wall time, past which more GPUs shorten nothing. None without rows."""
    if not rows:
        return {"knee_gpus": None, "points": []}
    total = sum(r["gpu_hours"] for r in rows)
    chain = max(r["chain_hours"] for r in rows)
    knee = max(1, math.ceil(total / chain)) if chain > 0 else 1
    counts, n = {gpus, knee}, 1
    while n <= max(gpus, knee) * 2:
        counts.add(n)
        n *= 2
    points = [{"gpus": g, "hours": wall_time(rows, g)["hours"]} for g in sorted(counts)]
    return {"knee_gpus": knee, "knee_hours": round(chain, 1), "points": points}


def longest_job(config: dict, throughput: dict) -> dict | None:
    """The longest single training job, estimated (no early stopping): per trained experiment
    and model, a trial's longest halving stage (one job: the stage's epochs after the rung
    before) and a final seed's training (a job of its own when the space has several seeds),
    at ``train.gpus_per_job`` GPUs. It decides the partition: a time limit at least this long
    runs it in one go. None when nothing is estimated."""
    from imagenot.train import budget, experiments, plan, search

    gpus = max(1, plan.gpus_per_node(config) * plan.nodes(config))
    best = None
    for exp in plan.experiments(config):
        if plan.is_published(exp) or plan.is_tl(exp["protocol"]):
            continue  # TL: a features pass (short) and head fits on CPU cores
        d, p = exp["dataset"], exp["protocol"]
        sizes = dataset_images(config, d)
        if sizes is None:
            continue
        space = experiments.space(config, d, p)
        jobs = [("trial stage", max(budget.stage_epochs(space)))]
        if len(space["seeds"]) > 1:
            jobs.append(("final seed", search.training_epochs(space)))
        for model in config["train"]["models"]:
            if model not in throughput:
                continue
            for what, epochs in jobs:
                h = budget.hours(epochs, sizes["train"], throughput[model], gpus, DDP_EFFICIENCY)
                if best is None or h > best["hours"]:
                    best = {
                        "experiment": f"{d}/{p}",
                        "model": model,
                        "job": what,
                        "epochs": epochs,
                        "gpus": gpus,
                        "hours": round(h, 1),
                    }
    return best


def node_local_disk(config: dict) -> dict:
    """Node-local disk ($TMPDIR) the training jobs need: with ``train.stage_to_local`` each
    node keeps one copy of every dataset its jobs train on (named by the dataset's fingerprint;
    the whole folder, kept originals included), so up to every trained dataset; without it,
    none (datasets are read in place)."""
    from imagenot.train import plan

    trained = list(
        dict.fromkeys(e["dataset"] for e in plan.experiments(config) if not plan.is_published(e))
    )
    sizes = {d: _with_originals(config, d) for d in trained}
    known = [b for b in sizes.values() if b is not None]
    return {
        "stage_to_local": bool(config["train"]["stage_to_local"]),
        "largest_dataset_bytes": max(known, default=None),
        "all_trained_bytes": sum(known) if known else None,
        "datasets": sizes,
    }


def _with_originals(config: dict, dataset: str) -> int | None:
    """The bytes a node's copy of ``dataset`` holds: the stored images and the kept originals
    (the copy is of the whole dataset folder)."""
    stored, kept = dataset_bytes(config, dataset)[0], originals_bytes(config, dataset)[0]
    return None if stored is None or kept is None else stored + kept


def model_facts(models: list[str]) -> dict[str, dict]:
    """Parameters and head input width of each model, built on torch's meta device (no memory,
    no weights)."""
    import torch

    from imagenot.train.registry import build_model, head_module

    out = {}
    for name in models:
        with torch.device("meta"):
            model = build_model(name, 1000)
        out[name] = {
            "parameters": sum(p.numel() for p in model.parameters()),
            "features": head_module(model, name).in_features,
        }
    return out


def storage(config: dict) -> list[dict]:
    """Bytes of each stage's outputs (and the LAION input), each with its source."""
    from imagenot.curate.settings import SelectSettings
    from imagenot.train import plan as train_plan

    scale = scale_projection()
    rows: list[dict] = []
    laion = config["laion"]
    names = [n for n, s in config["datasets"].items() if s["kind"] == "laion"]
    if names:
        on_disk = [Path(laion["dir"]) / f for f in _shard_names(config)]
        parts = len(on_disk)
        if on_disk and all(p.is_file() and p.stat().st_size for p in on_disk):
            size, source = sum(p.stat().st_size for p in on_disk), "measured on disk"
        elif scale:
            rows_per_part = world_rows_per_part(config) or (
                scale["projection_target"]["captions"] / scale["projection_target"]["parts"]
            )
            match = {r["rule"]: r for r in scale["rules"]}["curate_match"]
            per_row = (
                match["projected"]["input_mb"]
                * 1e6
                / (scale["projection_target"]["captions"] / scale["projection_target"]["parts"])
            )
            size = parts * rows_per_part * per_row
            source = "scale model's parquet bytes per caption row (docs/scale.json) x rows"
        else:
            size, source = None, "unknown (no docs/scale.json)"
        rows.append(
            {
                "stage": "curate",
                "item": f"LAION metadata ({parts} parts, input)",
                "bytes": size,
                "source": source,
            }
        )
        rows.append(
            {
                "stage": "curate",
                "item": "caption embeddings",
                "bytes": None,
                "source": "not estimated: the share of one-class captions is unknown "
                "before matching (2-39 % of rows, docs/scale.md)",
            }
        )
    pixel = BYTES_PER_PIXEL
    for name in config["datasets"]:
        sizes = dataset_images(config, name)
        side = config["acquire"]["image_size"]
        if sizes is None:
            rows.append(
                {
                    "stage": "acquire",
                    "item": f"{name} images",
                    "bytes": None,
                    "source": "unknown until the dataset is read",
                }
            )
            continue
        if name in names:
            select = SelectSettings.from_config(config, dataset=name)
            wanted = select.n_classes * math.ceil(select.images_per_class * (1 + select.oversample))
            rows.append(
                {
                    "stage": "acquire",
                    "item": f"{name} downloaded images ({wanted:,})",
                    "bytes": wanted * side * side * pixel,
                    "source": BYTES_PER_PIXEL_SOURCE,
                }
            )
        total = sizes["train"] + sizes["val"] + sizes["test"]
        stored, source = dataset_bytes(config, name)  # at the dataset's own stored size
        rows.append(
            {
                "stage": "acquire",
                "item": f"{name} dataset ({total:,} images)",
                "bytes": stored,
                "source": source,
            }
        )
        kept, source = originals_bytes(config, name)
        if kept != 0:  # the test originals of a dataset published weights are evaluated on
            rows.append(
                {
                    "stage": "acquire",
                    "item": f"{name} test originals ({sizes['test']:,} files)",
                    "bytes": kept,
                    "source": source,
                }
            )
    trained = [e for e in train_plan.experiments(config) if not train_plan.is_published(e)]
    models = list(config["train"]["models"])
    facts = model_facts(models)
    width = 2 if config["resources"]["gpus"] > 0 else 4  # bf16 under CUDA autocast, else fp32
    tl = [e for e in trained if train_plan.is_tl(e["protocol"])]
    feats = 0
    for exp in tl:
        sizes = dataset_images(config, exp["dataset"])
        n = sum(sizes[split] for split in train_plan.FEATURE_SPLITS) if sizes else 0
        feats += sum(n * facts[m]["features"] * width for m in models)
    if tl:
        rows.append(
            {
                "stage": "train",
                "item": f"TL features ({len(tl)} experiments)",
                "bytes": feats,
                "source": f"images x head input width x {width} bytes",
            }
        )
    finals = sum(len(train_plan.seeds(config, e)) for e in trained)
    weights = sum(facts[m]["parameters"] for m in models) * 4
    if not trained:
        return rows
    rows.append(
        {
            "stage": "train",
            "item": f"final weights ({finals} runs per model, and each selected trial)",
            "bytes": weights * (finals + len(trained)),
            "source": "parameters x 4 bytes (float32), built on torch's meta device; "
            "trial checkpoints are deleted as trials end",
        }
    )
    return rows


def _shard_names(config: dict) -> list[str]:
    from imagenot.curate import plan as curate_plan

    try:
        return curate_plan.shard_files(config)
    except (KeyError, ValueError):
        return []
