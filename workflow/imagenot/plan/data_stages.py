"""The data stages' time on the plan's CPU cores, and the whole run's wall time through them.

``imagenot plan`` schedules every data stage a config runs on ``resources.plan_cores`` CPU
cores (the schema's default, or an overlay's) and ``--gpus`` GPUs, then the GPU stages that
depend on them:

- the curation of the LAION-built datasets some rule reads
  (:func:`imagenot.plan.split_readers.curated_datasets`): each rule's projected runtime per part at
  laion2B-en (docs/scale.json), the parts' jobs side by side on the cores, the caption
  embedding's on the GPUs;
- the LAION download of each LAION-built dataset whose images are read: the URLs at a per-core
  rate and a site bandwidth (:data:`DOWNLOAD_SAMPLES_PER_S`, :data:`DOWNLOAD_GBIT_PER_S`), the
  share of URLs that serve an image being the one ``curate.oversample`` plans for; then the
  write of its parts, the split and the build (their projected runtimes);
- the materialisation of each dataset on disk some rule reads: its range jobs, each a share of
  the stored images at :func:`materialise_rate` (benchmarks/bench_materialise.py), then the
  gather;
- the near-duplicate audit of each audited dataset (:func:`audit_chains`), from when the
  datasets it reads are ready: the embedding of the sets it compares, their thumbnails (with
  the verification's pixel candidates), then its search jobs at :mod:`imagenot.audit.cost`'s
  core-seconds (the search, and the verification when it is on).

Jobs are started longest-remaining-chain first on the cores
(:func:`imagenot.plan.schedule.place`); a dataset is ready when its last job ends. Training
starts when every dataset it trains on is ready (an upper estimate: a chain of an earlier
dataset could start sooner), the evaluation follows it; the audit and the diagnostics follow
the datasets they read. The whole run's wall time is the
longest of these paths, and the plan names it (the critical path). Every figure is an estimate,
labelled with its source and the command that replaces it.
"""

from __future__ import annotations

import math

from imagenot.acquire.kinds import DATASET_KINDS
from imagenot.acquire.ranges import class_count_hint, n_range_jobs
from imagenot.acquire.settings import MaterialiseSettings
from imagenot.acquire.sizes import BYTES_PER_PIXEL, dataset_images
from imagenot.audit import cost
from imagenot.audit import plan as audit_plan
from imagenot.curate.settings import SelectSettings
from imagenot.plan import split_readers as readers
from imagenot.plan import work
from imagenot.plan.costs import paper_shaped, scale_projection
from imagenot.plan.schedule import place

# LAION image download (each assumption stated in the plan): img2dataset's own benchmarks
# (dataset_examples/laion400m.md: 1,300 samples/s on one 16-core 2 Gbps machine; laion5B.md:
# about 1,000 samples/s per 16-core instance)
DOWNLOAD_SAMPLES_PER_S = 1000
DOWNLOAD_NODE_CORES = 16
DOWNLOAD_SOURCE = (
    "img2dataset's benchmarks: ~1,000 samples/s per 16-core node (dataset_examples/laion5B.md), "
    "1,300 on one 2 Gbps machine (laion400m.md)"
)
DOWNLOAD_GBIT_PER_S = 1.0
# the mean JPEG the download keeps: ILSVRC-2012 train's mean image (469 x 387 px)
MEAN_PHOTO_PIXELS = 469 * 387

# one core's materialisation (decode a photo-sized JPEG, centre-crop resize, encode at quality
# 95): seconds per image = A + B x side^2, fitted to benchmarks/bench_materialise.py's images/s
# at 224 px (268) and 480 px (107) on the dev machine (2 cores, load ~10), 2026-12-02
MATERIALISE_MEASURED = {224: 268.0, 480: 107.0}
MATERIALISE_SOURCE = (
    "benchmarks/bench_materialise.py on the dev machine's CPU (one core; 268 images/s at 224 px, "
    "107 at 480 px; 2026-12-02, under load), photo-sized JPEGs; rerun it where the jobs run"
)

CURATE_CHAIN = (
    "curate_match",
    "curate_candidates",
    "curate_captions",
    "curate_queries",
    "curate_embed",
    "curate_select",
)
LAION_BUILD = ("acquire_write", "acquire_split", "acquire_build")


def materialise_rate(side: int) -> float:
    """Images per second one core materialises at ``side`` px (:data:`MATERIALISE_MEASURED`,
    seconds per image linear in the pixels stored)."""
    (s1, r1), (s2, r2) = sorted(MATERIALISE_MEASURED.items())
    per_px = (1 / r2 - 1 / r1) / (s2 * s2 - s1 * s1)
    fixed = 1 / r1 - per_px * s1 * s1
    return 1 / (fixed + per_px * side * side)


def _threads(jobs: list, rule: str) -> int:
    return max((j.threads for j in jobs if j.rule == rule), default=1)


def _count(jobs: list, rule: str) -> int:
    return sum(1 for j in jobs if j.rule == rule)


def _requested_hours(jobs: list, rule: str) -> float:
    return max(((j.resources.get("runtime") or 0) / 60 for j in jobs if j.rule == rule), default=0)


def _stage(jobs: int, width: int, hours: float, gpus: int, on_gpus: bool) -> tuple:
    """A stage of :func:`imagenot.plan.schedule.place`: ``jobs`` jobs of ``hours`` on
    ``width`` cores each, or on the GPUs one job per GPU at a time (a wait of no cores)."""
    return (1, 0, math.ceil(jobs / gpus) * hours) if on_gpus else (jobs, width, hours)


def _fact(rule: str, jobs: int, cores: int, hours: float, source: str, **more) -> dict:
    """What the plan says of one stage: its rule, jobs, cores per job (0: on the GPUs), hours
    per job and where they come from (``from``)."""
    return {"rule": rule, "jobs": jobs, "cores": cores, "hours": hours, "from": source, **more}


def data_chains(config: dict, jobs: list, gpus: int) -> tuple[dict, dict]:
    """The data stages as chains for :func:`imagenot.plan.schedule.place` and the rows of the
    plan: ``({chain: stages}, {row: (chain, first stage, [facts per stage])})``. Chain
    ``laion``: the curation (row ``curate``), then the download, write, split and build of each
    LAION-built dataset whose images are read (row ``download <name>``; one after another, as
    they share the bandwidth); a chain per materialised dataset on disk (``materialise
    <name>``)."""
    chains: dict[str, list] = {}
    facts: dict[str, list] = {}
    scale = scale_projection()
    paper = paper_shaped(config, scale)
    projected = {r["rule"]: r["projected"] for r in (scale or {}).get("rules", [])}
    curated = readers.curated_datasets(config)

    def rule_hours(rule: str) -> tuple[float, str]:
        """One job's hours of ``rule``: the scale model's projection on a paper-shaped config,
        else the rule's requested runtime."""
        if paper and rule in projected:
            return projected[rule]["runtime_min"] / 60, "projection"
        return _requested_hours(jobs, rule), "request"

    def by_rule(rules: tuple[str, ...]) -> tuple[list, list]:
        """The stage and the facts of each rule of ``rules`` that has jobs (the caption
        embedding's parts on the GPUs when the config plans them, one per GPU at a time: a
        wait of no cores)."""
        stages, about = [], []
        for rule in rules:
            n = _count(jobs, rule)
            if n:
                hours, source = rule_hours(rule)
                on_gpus = rule == "curate_embed" and config["resources"]["gpus"] > 0
                stages.append(_stage(n, _threads(jobs, rule), hours, gpus, on_gpus))
                about.append(_fact(rule, n, stages[-1][1], hours, source))
        return stages, about

    stages, about = by_rule(CURATE_CHAIN) if curated else ([], [])
    if stages:
        chains["laion"], facts["curate"] = stages, ("laion", 0, about)
    for name in [n for n in curated if n in readers.read_datasets(config)]:
        select = SelectSettings.from_config(config, dataset=name)
        urls = select.n_classes * select.per_class
        success = 1 / (1 + select.oversample)
        nbytes = urls * success * MEAN_PHOTO_PIXELS * BYTES_PER_PIXEL
        parts = max(_count(jobs, "acquire_download"), 1)
        width = _threads(jobs, "acquire_download")
        at_once = max(1, min(parts, config["resources"]["plan_cores"] // width))
        per_core = DOWNLOAD_SAMPLES_PER_S / DOWNLOAD_NODE_CORES
        by_rate = urls / parts / (per_core * width) / 3600
        by_bytes = nbytes / parts * 8 / (DOWNLOAD_GBIT_PER_S * 1e9 / at_once) / 3600
        hours = max(by_rate, by_bytes)
        built, about = by_rule(LAION_BUILD)
        download = _fact("acquire_download", parts, width, hours, "download", urls=urls)
        download |= {"images": round(urls * success), "bytes": round(nbytes)}
        download |= {"success": success, "oversample": select.oversample}
        laion = chains.setdefault("laion", [])
        facts[f"download {name}"] = ("laion", len(laion), [download, *about])
        laion += [(parts, width, hours), *built]
    for name in readers.read_datasets(config):
        sizes = dataset_images(config, name)
        if not DATASET_KINDS[config["datasets"][name]["kind"]].adapter or sizes is None:
            continue
        values = MaterialiseSettings.config_values(config, dataset=name)
        ranges = n_range_jobs(
            class_count_hint(values["kind"], values["path"]), values["classes_per_job"]
        )
        splits = readers.stored_splits(config, name)
        seconds = sum(
            sizes[s] / materialise_rate(readers.split_size(config, name, s)) for s in splits
        )
        gather = _requested_hours(jobs, "acquire_materialise")
        hours = seconds / ranges / 3600
        images = sum(sizes[s] for s in splits)
        row = f"materialise {name}"
        chains[row] = [(ranges, 1, hours), (1, 1, gather)]
        about = [_fact("acquire_materialise_range", ranges, 1, hours, "materialise", images=images)]
        facts[row] = (row, 0, [*about, _fact("acquire_materialise", 1, 1, gather, "request")])
    return chains, facts


def audit_chains(config: dict, jobs: list, gpus: int, ready: dict[str, float]) -> tuple:
    """The near-duplicate audit's chains and rows, as :func:`data_chains` gives them: per
    audited dataset, chain and row ``audit <name>``: a wait until the last dataset it
    reads is ready (``ready``: dataset -> hour), the embedding of every set it compares (rule
    ``diagnostics_embed_images`` at its requested time: on the GPUs one job per GPU at a time,
    else on the cores), with ``audit.verification.pixel_candidates`` the thumbnails of every
    such set on the cores (rule ``audit_thumbnails``, :func:`imagenot.audit.cost.thumbnail_jobs`),
    then its search jobs on the cores, each its split's part of the search's
    and the verification's core-seconds (:func:`imagenot.audit.cost.search_jobs`) over the
    job's cores."""
    chains: dict[str, list] = {}
    facts: dict[str, tuple] = {}
    parts = audit_plan.settings(config)["query_parts"]
    width = _threads(jobs, "audit_search")
    embed_hours, embed_width = _requested_hours(jobs, readers.EMBED), _threads(jobs, readers.EMBED)
    on_gpus = config["resources"]["gpus"] > 0
    searches, thumbs = cost.search_jobs(config), cost.thumbnail_jobs(config)
    thumb_width = _threads(jobs, "audit_thumbnails")
    for dataset in audit_plan.audited_datasets(config):
        mine = [j for j in searches if j["dataset"] == dataset]
        labels = {f"{dataset}/{j['split']}" for j in mine} | {t for j in mine for t in j["targets"]}
        sets = len(labels)
        each = [
            (j["search_core_s"] + j["verify_core_s"]) / parts / width / 3600
            for j in mine
            for _ in range(parts)
        ]
        asked = work.runtime_min(config, "audit_search", max(j["input_mb"] for j in mine)) / 60
        wait = max(ready.get(n, 0.0) for n in audit_plan.involved_datasets(config, dataset))
        embed = _stage(sets, embed_width, embed_hours, gpus, on_gpus)
        name = f"audit {dataset}"
        made = [t for t in thumbs if f"{t['dataset']}/{t['split']}" in labels]
        thumb_hours = [t["core_s"] / thumb_width / 3600 for t in made]
        chains[name] = [(1, 0, wait), embed]
        about = [_fact(readers.EMBED, sets, embed[1], embed_hours, "request")]
        if made:  # rule audit_thumbnails: each set once, after its embeddings
            chains[name].append((len(made), thumb_width, thumb_hours))
            mean = sum(thumb_hours) / len(made)
            thumbs_fact = _fact("audit_thumbnails", len(made), thumb_width, mean, "thumbnails")
            thumbs_fact["images"] = sum(t["images"] for t in made)
            about.append(thumbs_fact | {"core_h": sum(t["core_s"] for t in made) / 3600})
        chains[name].append((len(each), width, each))
        search = _fact("audit_search", len(each), width, sum(each) / len(each), "audit")
        search |= {"longest": max(each), "asked": asked, "parts": parts}
        search["search_core_h"] = sum(j["search_core_s"] for j in mine) / 3600
        search["verify_core_h"] = sum(j["verify_core_s"] for j in mine) / 3600
        about.append(search)
        facts[name] = (name, 1, about)
    return chains, facts


def data_stage_rows(config: dict, jobs: list, gpus: int) -> list[dict]:
    """One row per data stage chain, scheduled on the plan's CPU cores
    (``resources.plan_cores``: the schema's default, or an overlay's): its start and end hour, its jobs and estimated core-hours, and its source; ``hours`` the
    stage's time in the schedule, None where not estimated (a LAION copy the scale model does
    not project)."""
    cores = config["resources"]["plan_cores"]
    chains, facts = data_chains(config, jobs, gpus)
    spans = place(chains, cores)
    ready = {
        name.split(" ", 1)[1]: spans[chain][first + len(about) - 1][1]
        for name, (chain, first, about) in facts.items()
        if name != "curate"
    }
    audit, audit_facts = audit_chains(config, jobs, gpus, ready)
    chains, facts = chains | audit, facts | audit_facts
    spans = place(chains, cores)
    scale = scale_projection()
    out = []
    for name, (chain, first, about) in facts.items():
        mine = spans[chain][first : first + len(about)]
        start, end = mine[0][0] or 0.0, mine[-1][1]
        core_hours = sum(f["jobs"] * f["cores"] * f["hours"] for f in about)
        row = {
            "stage": name,
            "start": round(start, 2),
            "end": round(end, 2),
            "hours": round(end - start, 2),
            "jobs": sum(f["jobs"] for f in about),
            "core_hours": round(core_hours, 1),
            "rules": about,
            "source": _source(name, about, config, gpus, cores, scale),
        }
        if name == "curate" and not paper_shaped(config, scale):
            row["hours"] = row["start"] = row["end"] = None
            row["source"] = "not estimated: the scale model projects laion2B-en's 128 parts only"
        out.append(row)
    return out


def _source(name: str, about: list[dict], config, gpus, cores, scale) -> str:
    def on(f: dict) -> str:
        return "the GPUs" if not f["cores"] else f"{f['cores']} core{'s' * (f['cores'] > 1)}"

    rules = ", ".join(
        f"{f['rule']} {f['jobs']} x {f['hours'] * 60:,.1f} min on {on(f)}" for f in about
    )
    parts = [f"on {cores} cores, jobs longest-chain first: {rules}"]
    if name == "curate":
        rows = scale["projection_target"]["captions"] if scale else None
        parts.append(f"{rows:,} caption rows" if rows else "caption rows unknown")
        if config["resources"]["gpus"] > 0:
            parts.append(f"the caption embedding's parts on the {gpus} GPUs, one per GPU at a time")
    for f in about:
        if f["from"] == "download":
            parts.append(
                f"{f['urls']:,} URLs at {DOWNLOAD_SAMPLES_PER_S / DOWNLOAD_NODE_CORES:,.1f} URLs/s "
                f"per core ({DOWNLOAD_SOURCE}) within {DOWNLOAD_GBIT_PER_S:g} Gbit/s shared; "
                f"{f['success']:.0%} of them serve an image (1 / (1 + curate.oversample "
                f"{f['oversample']:g})): {f['images']:,} images, {f['bytes'] / 1e9:,.1f} GB at "
                f"{MEAN_PHOTO_PIXELS * BYTES_PER_PIXEL / 1e3:,.0f} kB each (ILSVRC-2012 train's "
                "mean JPEG); no top-up round"
            )
        elif f["from"] == "audit":
            verify = f"{f['verify_core_h']:,.1f} of verification"
            parts.append(
                f"{f['search_core_h']:,.1f} core-h of search and "
                f"{verify if f['verify_core_h'] else 'no verification (audit.verification off)'}"
                f" over {f['jobs']} audit_search jobs (audit.query_parts {f['parts']} per split;"
                " imagenot.audit.cost), from when the last dataset the audit reads is ready"
            )
            if f["longest"] > f["asked"]:
                least = math.ceil(f["parts"] * f["longest"] / f["asked"])
                parts[-1] += (
                    f"; its longest job, {f['longest']:,.1f} h, is longer than the "
                    f"{f['asked']:,.1f} h it asks for: raise audit.query_parts to at least {least}"
                )
        elif f["from"] == "thumbnails":
            parts.append(
                f"{f['images']:,} images decoded once per set for the search's thumbnails, "
                f"{f['core_h']:,.1f} core-h at {cost.THUMB_CORE_S * 1e3:g} ms of CPU an image "
                f"at {cost.THUMB_SIDE} px, scaled by pixels to each set's side ({cost.THUMB_SOURCE})"
            )
        elif f["from"] == "materialise":
            parts.append(f"{f['images']:,} images stored at {MATERIALISE_SOURCE}")
    if any(f["from"] == "projection" for f in about):
        parts.append("the scale model's projected runtime per job at laion2B-en (docs/scale.json)")
    if requested := [f["rule"] for f in about if f["from"] == "request"]:
        parts.append(f"{', '.join(requested)} at the requested time (an upper bound)")
    parts.append("measured: each job's benchmark file (results/benchmarks)")
    return "; ".join(parts)


def whole_run(config: dict, data: list[dict], wall: dict, stages: list[dict], gpus: int):
    """The whole run's wall time: the data stages as scheduled (:func:`data_stage_rows`), then
    training (its schedule on ``gpus`` GPUs, from when every dataset it trains on is ready),
    then the evaluation's GPU-hours over the GPUs; beside it, each dataset only the audit, the
    diagnostics or the published weights' evaluation read, then those stages' GPU-hours over the
    GPUs. ``hours`` the longest path, ``critical_path`` its stages, ``parts`` their hours (they
    add up to ``hours``). None where a figure on the way is not estimated."""
    if wall["hours"] is None or any(d["hours"] is None for d in data):
        return None
    ready = {  # dataset -> when it is ready, by which stage
        d["stage"].split(" ", 1)[1]: (d["end"], d["stage"])
        for d in data
        if d["stage"].startswith(("download ", "materialise "))
    }
    curate = next((d for d in data if d["stage"] == "curate"), None)
    read_by = readers.split_readers(config)
    trained = [
        n
        for n, splits in read_by.items()
        if any(r.startswith("train_") for rules in splits.values() for r in rules)
    ]
    gpu = {s["stage"]: s["gpu_hours"] / gpus for s in stages}
    evaluate = sum(h for s, h in gpu.items() if s == "evaluate")
    others = sum(h for s, h in gpu.items() if s in ("audit", "diagnostics"))
    paths = []

    def data_parts(dataset: str) -> dict:
        end, stage = ready.get(dataset, (0.0, None))
        if stage is None:
            return {}
        if stage.startswith("download") and curate:
            return {"curate": curate["end"], stage: round(end - curate["end"], 2)}
        return {stage: end}

    if trained:
        first = max(trained, key=lambda n: ready.get(n, (0.0, None))[0])
        parts = data_parts(first)
        parts |= {"train": wall["hours"], "evaluate": round(evaluate, 2)}
        paths.append(parts)
    for dataset in ready:
        if dataset not in trained:
            paths.append(data_parts(dataset) | {"audit and diagnostics": round(others, 2)})
    for d in data:
        if d["stage"].startswith("audit "):
            read = audit_plan.involved_datasets(config, d["stage"].split(" ", 1)[1])
            parts = data_parts(max(read, key=lambda n: ready.get(n, (0.0, None))[0]))
            paths.append(parts | {d["stage"]: round(d["end"] - sum(parts.values()), 2)})
    best = max(paths, key=lambda p: sum(p.values()))
    return {
        "hours": round(sum(best.values()), 1),
        "parts": {k: round(v, 2) for k, v in best.items()},
        "critical_path": list(best),
        "cores": config["resources"]["plan_cores"],
        "ready": {n: round(e, 2) for n, (e, _) in ready.items()},
        "source": "the data stages as scheduled on the cores; training from when every dataset "
        "it trains on is ready (a chain of an earlier one could start sooner), its schedule on "
        "the GPUs; the evaluation's, audit's and diagnostics' GPU-hours over the GPUs; each "
        "audit's embedding and search (its data stage) from when the datasets it reads are "
        "ready; queueing not included",
    }
