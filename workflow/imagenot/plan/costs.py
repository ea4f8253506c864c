"""What a config will cost: ``imagenot plan``'s summary per rule group, estimates labelled.

Two kinds of figure, never mixed:

* **requested** (an upper bound a scheduler must be ready for): from the jobs Snakemake plans
  (:mod:`imagenot.plan.planning`), each job's requested runtime x GPUs (GPU-hours) or x cores
  (core-hours) and its requested memory. Rules that size their request from their input when
  the job is ready (``resources.work``) take the scale model's projection at laion2B-en
  (docs/scale.json) for a paper-shaped LAION source, else their floor (said so).
* **estimated**: training GPU-hours, low / expected / bound by when trials stop, its chains,
  schedule and longest job (:mod:`imagenot.train.estimate`), at the throughput table
  ``train.throughput`` of the config, what the user's own GPU measured
  (:mod:`imagenot.plan.measured`: the preflight's report) or what the run itself measured; the GPU
  stages beside training (evaluation, caption embedding, diagnostics, preflight); the data
  stages' time (:mod:`imagenot.plan.data_stages`); the GPU memory of the largest job; node-local disk;
  storage from image counts x bytes per image, the published test split's files where a dataset
  keeps its originals, and model sizes. Each carries its source and assumptions.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from imagenot.acquire.sizes import (
    BYTES_PER_PIXEL,
    BYTES_PER_PIXEL_SOURCE,
    dataset_images,
    originals_bytes,
    split_bytes,
    stored_size,
)
from imagenot.audit import cost as audit_cost
from imagenot.audit import plan as audit_plan
from imagenot.curate import plan as curate_plan
from imagenot.curate.settings import SelectSettings
from imagenot.plan import split_readers as readers
from imagenot.plan import work
from imagenot.plan.planning import REPO, PlannedJob, rule_groups, world_rows_per_part
from imagenot.train import experiments
from imagenot.train import plan as train_plan
from imagenot.train.estimate import FORWARD_SPEEDUP

SCALE_JSON = REPO / "docs" / "scale.json"


def scale_projection() -> dict | None:
    """The scale model's projection to laion2B-en (docs/scale.json), None without it."""
    return json.loads(SCALE_JSON.read_text()) if SCALE_JSON.is_file() else None


def paper_shaped(config: dict, scale: dict | None) -> bool:
    """Whether the config's LAION source is laion2B-en's parts (the scale model's target)."""
    if scale is None or world_rows_per_part(config) or not config["laion"].get("n_shards"):
        return False
    return config["laion"]["n_shards"] == scale["projection_target"]["parts"]


def group_rows(config: dict, jobs: list[PlannedJob]) -> list[dict]:
    """One row per rule group (stage file): jobs, GPU jobs, requested GPU-hours and core-hours,
    the largest requested memory of a job, and the scale model's projected peak where known;
    the disk its jobs request (``disk_mb``, the rules that declare it: what the job writes).

    A job of an input-sized rule (``resources.work``) asks for the scale model's projection at
    laion2B-en on a paper-shaped config; else what the input the plan knows asks for (the
    audit's search: its largest job's embeddings); else the rule's floor (the request grows
    with the input at run time)."""
    groups = rule_groups()
    scale = scale_projection()
    paper = paper_shaped(config, scale)
    at_scale = {r["rule"]: r for r in (scale or {}).get("rules", [])}
    projected = {rule: r["projected"] for rule, r in at_scale.items()}
    searches = audit_cost.search_jobs(config)
    input_mb = {"audit_search": max((j["input_mb"] for j in searches), default=0.0)}
    read = "embeddings and thumbnails" if audit_plan.thumbnails_used(config) else "embeddings"
    requests: dict[str, list] = {}  # group -> (job, its resources, their source) per job
    for job in jobs:
        rule, res, source = job.rule, dict(job.resources), "request"
        at = at_scale.get(rule, {}).get("requested_at_target")
        if rule in config["resources"]["work"] and paper and at:
            res |= {"mem_mb": at["mem_mb"], "runtime": at["runtime_min"]}
            source = "scale projection"
        elif rule in config["resources"]["work"]:
            mb = input_mb.get(rule, 0.0)
            res |= {"mem_mb": work.mem_mb(config, rule, mb)}
            res |= {"runtime": work.runtime_min(config, rule, mb)}
            source = "floor (sized from its input at run time)"
            if mb:
                source = f"sized from its largest input, {mb / 1e3:,.1f} GB of {read} (audit.cost)"
        requests.setdefault(groups.get(rule, "other"), []).append((job, res, source))
    out = []
    for group, mine in requests.items():
        hours = [(j, (res.get("runtime") or 0) / 60) for j, res, _ in mine]
        notes = {f"{j.rule}: {source}" for j, _, source in mine if source != "request"}
        notes |= {
            f"{j.rule}: request unknown until its input exists"
            for j, res, _ in mine
            if res.get("runtime") is None or res.get("mem_mb") is None
        }
        peaks = [round(projected[j.rule]["peak_rss_mb"]) for j, _, _ in mine if j.rule in projected]
        row = {"group": group, "rules": dict(sorted(Counter(j.rule for j, _, _ in mine).items()))}
        row |= {"jobs": len(mine), "gpu_jobs": sum(j.gpus > 0 for j, _, _ in mine)}
        row["gpu_hours_requested"] = round(sum(j.gpus * h for j, h in hours), 1)
        row["core_hours_requested"] = round(sum(j.threads * h for j, h in hours), 1)
        row["peak_mem_mb_requested"] = max(res.get("mem_mb") or 0 for _, res, _ in mine)
        row["peak_mem_mb_projected"] = max(peaks, default=None) if paper else None
        row["disk_mb_requested"] = sum(res.get("disk_mb") or 0 for _, res, _ in mine)
        out.append(row | {"notes": sorted(notes)})
    return out


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
    """Bytes of each stage's outputs (and the LAION input), each with its source and the rules
    that read it (``read_by``): a dataset line per stored split, whose readers
    (:func:`imagenot.plan.split_readers.split_readers`) are why it is stored; a dataset nothing
    reads has no line (not built: :func:`imagenot.plan.split_readers.read_datasets`)."""
    read_by = readers.split_readers(config)
    scale = scale_projection()
    rows: list[dict] = []
    names = readers.curated_datasets(config)
    if names:
        on_disk = [Path(config["laion"]["dir"]) / f for f in _shard_names(config)]
        parts = len(on_disk)
        if on_disk and all(p.is_file() and p.stat().st_size for p in on_disk):
            size, source = sum(p.stat().st_size for p in on_disk), "measured on disk"
        elif scale:
            target = scale["projection_target"]["captions"] / scale["projection_target"]["parts"]
            match = {r["rule"]: r for r in scale["rules"]}["curate_match"]
            per_row = match["projected"]["input_mb"] * 1e6 / target
            size = parts * (world_rows_per_part(config) or target) * per_row
            source = "scale model's parquet bytes per caption row (docs/scale.json) x rows"
        else:
            size, source = None, "unknown (no docs/scale.json)"
        rows.append(
            _row("curate", f"LAION metadata ({parts} parts, input)", size, source, ["curate_match"])
        )
        rows.append(caption_embeddings(config, scale))
    for name in readers.read_datasets(config):
        sizes = dataset_images(config, name)
        side = config["acquire"]["image_size"]
        if sizes is None:
            rows.append(_row("acquire", f"{name} images", None, "unknown until it is read"))
            continue
        if name in names:
            select = SelectSettings.from_config(config, dataset=name)
            wanted = select.n_classes * select.per_class
            item = f"{name} downloaded images ({wanted:,})"
            nbytes = wanted * side * side * BYTES_PER_PIXEL
            rows.append(_row("acquire", item, nbytes, BYTES_PER_PIXEL_SOURCE, ["acquire_write"]))
        own = stored_size(config, name)
        for split in readers.stored_splits(config, name):  # one line per stored split, its readers
            side = readers.split_size(config, name, split)
            why = "the size its readers need"
            if side != own:
                why = f"the largest input of its readers; {own} px where a model reads it"
            item = f"{name} {split} split ({sizes[split]:,} images, {side} px)"
            source = f"{sizes[split]:,} images at {side} px ({why}); {sizes['source']}; "
            source += BYTES_PER_PIXEL_SOURCE
            row = _row("acquire", item, split_bytes(config, name, split, side), source)
            row |= {"side": side, "bytes_at_own_side": split_bytes(config, name, split, own)}
            rows.append(row | {"read_by": list(read_by[name][split])})
        kept, source = originals_bytes(config, name)
        if kept != 0:  # the test originals of a dataset published weights are evaluated on
            item = f"{name} test originals ({sizes['test']:,} files)"
            rows.append(_row("acquire", item, kept, source, [readers.EVALUATE]))
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
        item = f"TL features ({len(tl)} experiments)"
        source = f"images x head input width x {width} bytes"
        rows.append(_row("train", item, feats, source, ["train_head_trial", "train_head_final"]))
    if not trained:
        return rows
    finals = sum(len(train_plan.seeds(config, e)) for e in trained)
    weights = sum(facts[m]["parameters"] for m in models) * 4
    item = f"final weights ({finals} runs per model, and each selected trial)"
    source = "parameters x 4 bytes (float32), built on torch's meta device; trial checkpoints "
    source += "are deleted as trials end"
    rows.append(_row("train", item, weights * (finals + len(trained)), source, [readers.EVALUATE]))
    return rows


def _row(stage: str, item: str, nbytes=None, source: str = "", read_by=None) -> dict:
    """One line of the storage estimate (``read_by``: the rules that read it, where known)."""
    row = {"stage": stage, "item": item, "bytes": nbytes, "source": source}
    return row if read_by is None else row | {"read_by": read_by}


def caption_embeddings(config: dict, scale: dict | None) -> dict:
    """Storage row of the caption embedding's outputs at laion2B-en: per embedded caption (the
    scale model's share of one-class captions, docs/scale.json ``embed_fraction``) a float32
    similarity, the parts' score tables (the selection's projected input), and with
    ``curate.encoder.keep_vectors`` its float16 vector (RoBERTa-large: 1,024 wide)."""
    world, paper = world_rows_per_part(config), paper_shaped(config, scale)
    if not (scale and (paper or world)):
        source = "not estimated: the scale model projects laion2B-en's parts, and this LAION "
        source += "copy's caption rows are unknown until read"
        return _row("curate", "caption embeddings", None, source, ["curate_select"])
    share = scale["embed_fraction"]
    target = share * scale["projection_target"]["captions"]
    tables = {r["rule"]: r["projected"] for r in scale["rules"]}["curate_select"]["input_mb"]
    keep = config["curate"]["encoder"]["keep_vectors"]
    per_row = 4 + tables * 1e6 / target + (1024 * 2 if keep else 0)
    if paper:
        rows, item = target, f"caption embeddings ({target / 1e6:,.0f} M captions)"
        source = f"{share:.0%} of laion2B-en's rows embedded (docs/scale.json) x 4 bytes of "
        source += f"similarity, and the parts' score tables ({tables / 1e3:,.1f} GB); "
        source += "float16 vectors kept, 1,024 per caption" if keep else "vectors not kept"
    else:  # a LAION source the workflow writes (demo or scale world): its own caption rows
        rows = share * world * len(_shard_names(config))
        item = f"caption embeddings ({rows:,.0f} captions)"
        vector = ", float16 vector" if keep else ""
        source = f"estimate: {share:.0%} of the parts' caption rows embedded x {per_row:,.0f} "
        source += f"bytes each (similarity, score tables{vector}; docs/scale.json); measured: "
        source += "du -sh results/curate after the run"
    return _row("curate", item, round(rows * per_row), source, ["curate_select"])


def _shard_names(config: dict) -> list[str]:
    try:
        return curate_plan.shard_files(config)
    except (KeyError, ValueError):
        return []


# ---- the GPU stages beside training ----------------------------------------------------------


def gpu_stage_rows(config: dict, jobs: list[PlannedJob], throughput: dict) -> list[dict]:
    """Estimated GPU-hours of each GPU stage beside training, each with its source:
    evaluation (one pass per transformation over the test split of every final run, at
    :data:`FORWARD_SPEEDUP` x the model's training images/s, scaled by pixels to the model's
    input side, or the stored size of a dataset published weights are evaluated on), caption
    embedding (the scale model's projected runtime per part at laion2B-en, docs/scale.json), and
    every other stage's GPU jobs (the diagnostics, the audit, the preflight: at their requested time, short jobs, an
    upper bound)."""
    from imagenot.evaluate import transforms

    groups = rule_groups()
    out = []
    passes = len(transforms.names())
    hours, missing = 0.0, set()
    for run in train_plan.final_runs(config):
        d, model, key = run["dataset"], run["model"], (run["dataset"], run["protocol"])
        sizes = dataset_images(config, d)
        if sizes is None or model not in throughput:
            missing.add(model if model not in throughput else d)
            continue
        mine = [e for e in train_plan.experiments(config) if (e["dataset"], e["protocol"]) == key]
        published = any(train_plan.is_published(e) for e in mine)
        side = stored_size(config, d) if published else experiments.image_size(config, model)
        rate = throughput[model] * FORWARD_SPEEDUP * (224 / side) ** 2
        hours += passes * sizes["test"] / rate / 3600
    n_eval = sum(1 for j in jobs if j.rule == "evaluate_robustness" and j.gpus)
    source = f"{passes} passes (one per transformation) over each final run's test split at "
    source += f"{FORWARD_SPEEDUP}x the model's training images/s, scaled by pixels to the size "
    source += "evaluated (a published model's: its dataset's stored size, an upper bound)"
    if missing:
        source += f"; not estimated: {', '.join(sorted(missing))}"
    out.append(_gpu_row("evaluate", n_eval, hours, source))
    scale = scale_projection()
    embed = [j for j in jobs if j.rule == "curate_embed" and j.gpus]
    if embed:
        projected = {r["rule"]: r["projected"] for r in (scale or {}).get("rules", [])}
        if paper_shaped(config, scale) and "curate_embed" in projected:
            per = projected["curate_embed"]["runtime_min"] / 60
            rate = scale["embedding_rate"]
            source = f"the scale model's projected {per * 60:.0f} min per part at laion2B-en "
            source += f"(docs/scale.json: {scale['embed_fraction']:.0%} of rows embedded at "
            source += f"{rate['sentences_per_s']:.0f} sentences/s, {rate['model']} on a "
            source += f"{rate['gpu']}, sbert.net's published rate)"
        else:
            per = sum((j.resources.get("runtime") or 0) for j in embed) / 60 / len(embed)
            source = "requested time (an upper bound; no projection for this LAION source)"
        out.append(_gpu_row("curate (caption embedding)", len(embed), per * len(embed), source))
    estimated = {"train", "evaluate", "curate"}  # the rows above
    for stage in dict.fromkeys(groups.get(j.rule) for j in jobs if j.gpus):
        mine = [j for j in jobs if groups.get(j.rule) == stage and j.gpus]
        if stage not in estimated:
            hours = sum(j.gpus * (j.resources.get("runtime") or 0) for j in mine) / 60
            source = "requested time x GPUs (short jobs: an upper bound)"
            out.append(_gpu_row(stage, len(mine), hours, source))
    return out


def _gpu_row(stage: str, jobs: int, hours: float, source: str) -> dict:
    return {"stage": stage, "gpu_jobs": jobs, "gpu_hours": round(hours, 1), "source": source}
