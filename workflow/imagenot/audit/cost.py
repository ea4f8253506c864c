"""The audit's cost at the config's scale, for ``imagenot plan`` (estimates, labelled).

What is audited is the audit's own plan (:func:`imagenot.audit.plan.audited_datasets`,
:func:`imagenot.audit.plan.target_sets`): every split of an audited dataset against each of its
target sets, ``audit.query_parts`` search jobs per split. A search job's work is on the CPU:

- the exact search: query-target pairs x dimensions, at the rate ``benchmarks/bench_audit.py``
  measured (:data:`PAIRS_PER_CORE_S` at :data:`RATE_DIM` dimensions; faiss-gpu divides it);
- with ``audit.verification.enabled``, each image's candidates in every target set verified on
  the images, at :data:`VERIFY_CORE_S` a pair (measured on the demo at ``compare_side``
  :data:`VERIFY_SIDE` px; another side scaled by its pixels, an assumption): its
  ``candidates`` nearest by embedding and, with ``pixel_candidates``, as many more nearest by
  thumbnail, counted as min(candidates + pixel_candidates, set size) a set (an upper bound:
  the two lists' union, each target once).

With ``pixel_candidates``, rule ``audit_thumbnails`` decodes every image of each set the audit
compares once (one job per dataset and split, shared by every search job that reads it), at
:data:`THUMB_CORE_S` a image (measured on the demo at its stored side, :data:`THUMB_SIDE` px;
another stored side scaled by its pixels, an assumption that overstates the fixed cost of a
read).

Image counts are the config's sizes (:func:`imagenot.acquire.sizes.dataset_images`: LAION-built
datasets at n_classes x images per class, an upper bound). The sets embedded (rule
``diagnostics_embed_images``, one job per dataset and split, shared with the image-similarity
diagnostics) are counted once each.
"""

from __future__ import annotations

from imagenot.core import paths

#: Query-target similarity pairs per CPU-second at 512 dimensions: benchmarks/bench_audit.py
#: --json on dev (2 cores, shared), 2026-12-02, 10,000 x 100,000 vectors (docs/benchmarks.md).
PAIRS_PER_CORE_S = 1.19e8
RATE_DIM = 512
RATE_SOURCE = (
    "benchmarks/bench_audit.py on the dev machine's CPU, 2026-12-02 (docs/benchmarks.md); "
    "rerun it where the audit runs"
)
#: CPU-seconds a verified pair: the demo's train split search job, 16,800 pairs in 380 s.
VERIFY_CORE_S = 0.023
VERIFY_SIDE = 64
VERIFY_SOURCE = (
    'measured on the demo (docs/audit.md, "The demo": 16,800 pairs in 380 CPU-seconds at '
    "compare_side 64, dev machine, 2026-12-02); each audit_search job's benchmark file "
    "(results/benchmarks/audit_search) measures it where the audit runs"
)
#: CPU-seconds a thumbnail (read and check a stored image, decode, resize, normalise) at
#: THUMB_SIDE px: the loop of rule audit_thumbnails on the tiny demo's largest set.
THUMB_CORE_S = 3.0e-4
THUMB_SIDE = 64
THUMB_SOURCE = (
    'measured on the tiny demo (docs/audit.md, "The demo": 300 images of 64 px in 0.090 '
    "CPU-seconds, one thread, the best of three, dev machine, 2 shared cores, 2026-12-03); each "
    "audit_thumbnails job's benchmark file (results/benchmarks/audit_thumbnails) measures it "
    "where the audit runs"
)
#: Embedding width: CLIP ViT-L/14's image projection (the paper's encoder; 512 for ViT-B/32).
DIM_BY_MODEL = {"openai/clip-vit-large-patch14": 768, "openai/clip-vit-base-patch32": 512}


def _dim(config: dict) -> int:
    encoder = config["diagnostics"]["encoder"]
    if encoder["kind"] == "clip":
        return DIM_BY_MODEL.get(encoder["clip_model"], 768)
    return RATE_DIM


def thumbnail_core_s(config: dict, dataset: str, split: str, images: int) -> float:
    """CPU-seconds of rule ``audit_thumbnails`` on ``images`` of one set: :data:`THUMB_CORE_S`
    scaled by pixels to the split's stored side
    (:func:`imagenot.plan.split_readers.split_size`)."""
    from imagenot.plan.split_readers import split_size

    return images * THUMB_CORE_S * (split_size(config, dataset, split) / THUMB_SIDE) ** 2


def search_jobs(config: dict) -> list[dict]:
    """One row per audited dataset and split (its ``audit.query_parts`` search jobs together):
    ``queries`` (its images), ``targets`` (``{target}/{split}`` -> images), the search's
    ``pairs`` and ``search_core_s``, the ``verified`` pairs and ``verify_core_s`` (0 with the
    verification off), ``input_mb`` (the query and target embeddings a job reads, float32, and
    with ``pixel_candidates`` their thumbnails) and ``unknown`` (datasets of unknown size, not
    counted)."""
    from imagenot.acquire.sizes import dataset_images
    from imagenot.audit import plan

    dim = _dim(config)
    v = plan.settings(config)["verification"]
    per_pair = VERIFY_CORE_S * (v["compare_side"] / VERIFY_SIDE) ** 2 if v["enabled"] else 0.0
    thumbed = plan.thumbnails_used(config)
    per_image = dim * 4 + (3 * v["thumbnail_side"] ** 2 * 4 if thumbed else 0)
    checked = v["candidates"] + (v["pixel_candidates"] if thumbed else 0)
    sizes: dict = {}
    rows = []
    for dataset in plan.audited_datasets(config):
        for split in paths.SPLITS:
            sets = plan.target_sets(config, dataset, split)
            for name in {dataset, *(t for t, _ in sets)} - set(sizes):
                sizes[name] = dataset_images(config, name)
            queries = sizes[dataset][split] if sizes[dataset] else 0
            targets = {f"{t}/{s}": sizes[t][s] for t, s in sets if sizes[t]}
            pairs = queries * sum(targets.values())
            verified = queries * sum(min(checked, n) for n in targets.values())
            verified *= bool(per_pair)
            rows.append(
                {
                    "dataset": dataset,
                    "split": split,
                    "queries": queries,
                    "targets": targets,
                    "pairs": pairs,
                    "search_core_s": pairs * dim / RATE_DIM / PAIRS_PER_CORE_S,
                    "verified": verified,
                    "verify_core_s": verified * per_pair,
                    "input_mb": (queries + sum(targets.values())) * per_image / 1e6,
                    "unknown": sorted(n for n in (dataset, *(t for t, _ in sets)) if not sizes[n]),
                }
            )
    return rows


def thumbnail_jobs(config: dict) -> list[dict]:
    """One row per set rule ``audit_thumbnails`` makes (dataset, split, images, core_s), once
    each however many audited splits compare it; none without ``pixel_candidates`` (or with
    the verification off)."""
    from imagenot.audit import plan

    if not plan.thumbnails_used(config):
        return []
    out: dict[str, dict] = {}
    for j in search_jobs(config):
        for label, n in {f"{j['dataset']}/{j['split']}": j["queries"], **j["targets"]}.items():
            if label not in out:
                dataset, split = label.split("/")
                out[label] = {"dataset": dataset, "split": split, "images": n}
                out[label]["core_s"] = thumbnail_core_s(config, dataset, split, n)
    return list(out.values())


def audit_cost(config: dict) -> list[dict]:
    """Per audited dataset: images audited (None when its size is unknown), query-target
    pairs, the search's, the verification's and the thumbnails' estimated core-hours (the
    thumbnails' images: every set it compares, once), the largest target set's
    index in memory, the sets and images embedded, and the source."""
    from imagenot.audit import plan

    dim, jobs = _dim(config), search_jobs(config)
    v = plan.settings(config)["verification"]
    thumbed = plan.thumbnails_used(config)
    thumbs = {f"{t['dataset']}/{t['split']}": t for t in thumbnail_jobs(config)}
    out = []
    for dataset in plan.audited_datasets(config):
        mine = [j for j in jobs if j["dataset"] == dataset]
        embedded = {f"{dataset}/{j['split']}": j["queries"] for j in mine} | {
            label: n for j in mine for label, n in j["targets"].items()
        }
        unknown = sorted({n for j in mine for n in j["unknown"]})
        verified = sum(j["verified"] for j in mine)
        made = [thumbs[label] for label in embedded if label in thumbs]
        checked = (
            f"; verification: up to {verified:,} pairs ({v['candidates']} candidates by "
            "embedding"
            + (f" and {v['pixel_candidates']} by thumbnail" if thumbed else "")
            + f" per image and target set) at {VERIFY_CORE_S * 1e3:g} ms of CPU a pair at "
            f"{VERIFY_SIDE} px, scaled by pixels to compare_side {v['compare_side']} "
            f"({VERIFY_SOURCE})"
            if v["enabled"]
            else "; verification off (audit.verification.enabled)"
        )
        if made:
            checked += (
                f"; thumbnails: {sum(t['images'] for t in made):,} images of {len(made)} sets "
                f"decoded once each (rule audit_thumbnails) at {THUMB_CORE_S * 1e3:g} ms of CPU "
                f"an image at {THUMB_SIDE} px, scaled by pixels to each set's stored side "
                f"({THUMB_SOURCE})"
            )
        out.append(
            {
                "dataset": dataset,
                "images": None if dataset in unknown else sum(j["queries"] for j in mine),
                "pairs": sum(j["pairs"] for j in mine),
                "core_hours": round(sum(j["search_core_s"] for j in mine) / 3600, 1),
                "verified_pairs": verified,
                "verify_core_hours": round(sum(j["verify_core_s"] for j in mine) / 3600, 1),
                "thumbnail_images": sum(t["images"] for t in made),
                "thumbnail_core_hours": round(sum(t["core_s"] for t in made) / 3600, 1),
                "index_bytes": max((n for j in mine for n in j["targets"].values()), default=0)
                * dim
                * 4,
                "embedded_sets": len(embedded),
                "embedded_images": sum(embedded.values()),
                "dim": dim,
                "source": f"{sum(j['pairs'] for j in mine):,} query-target pairs at {dim} "
                f"dimensions, exact search at {PAIRS_PER_CORE_S:,.3g} pairs per CPU-second at "
                f"{RATE_DIM} ({RATE_SOURCE}){checked}; image counts from the config (upper "
                "bounds for LAION-built datasets)"
                + (f"; not counted, size unknown: {', '.join(unknown)}" if unknown else ""),
            }
        )
    return out


def format_audit(rows: list[dict]) -> list[str]:
    """``imagenot plan``'s audit section."""
    out = ["near-duplicate audit, estimate:"]
    for r in rows:
        images = "images of unknown size" if r["images"] is None else f"{r['images']:,} images"
        out.append(
            f"  {r['dataset']}: {images} against its target sets, {r['core_hours']:,.1f} core-h "
            f"of search (GPU: a fraction), {r['verify_core_hours']:,.1f} core-h of "
            f"verification, {r['thumbnail_core_hours']:,.1f} core-h of thumbnails, largest index {r['index_bytes'] / 1e9:,.1f} GB in memory, "
            f"{r['embedded_images']:,} images embedded (shared with the diagnostics; their time "
            f"and the search jobs' on the cores: the data stages' audit line): {r['source']}"
        )
    if len(out) == 1:
        out.append("  none (audit.enabled false, no contrast dataset or no image encoder)")
    return out
