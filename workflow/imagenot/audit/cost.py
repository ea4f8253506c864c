"""The audit's cost at the config's scale, for ``imagenot plan`` (an estimate, labelled).

The search's work is exact: every image of an audited split against every image of each of its
target sets (:func:`imagenot.audit.plan.target_sets`), so query-target pairs x dimensions. At the
rate ``benchmarks/bench_audit.py`` measured on the CPU (:data:`PAIRS_PER_CORE_S`, 512
dimensions) that is core-hours; a GPU (faiss-gpu) divides it. Image counts are the config's
sizes (:func:`imagenot.acquire.sizes.dataset_images`: LAION-built datasets at n_classes x images
per class, an upper bound). The embeddings' images are counted too: each (dataset, split) once,
shared with the image-similarity diagnostics.
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
#: Embedding width: CLIP ViT-L/14's image projection (the paper's encoder; 512 for ViT-B/32).
DIM_BY_MODEL = {"openai/clip-vit-large-patch14": 768, "openai/clip-vit-base-patch32": 512}


def _dim(config: dict) -> int:
    encoder = config["diagnostics"]["encoder"]
    if encoder["kind"] == "clip":
        return DIM_BY_MODEL.get(encoder["clip_model"], 768)
    return RATE_DIM


def audit_cost(config: dict) -> list[dict]:
    """Per audited dataset: images audited, query-target pairs, the search's estimated
    core-hours, the largest target set's index in memory and the images embedded; a dataset of
    unknown size is said so."""
    from imagenot.acquire.sizes import dataset_images
    from imagenot.audit import plan

    dim = _dim(config)
    out = []
    for dataset in plan.audited_datasets(config):
        sizes: dict[str, dict | None] = {dataset: dataset_images(config, dataset)}
        pairs, largest, unknown = 0, 0, []
        embedded = set()
        for split in paths.SPLITS:
            own = sizes[dataset]
            if own is None:
                unknown.append(dataset)
                break
            embedded.add((dataset, split))
            for target, target_split in plan.target_sets(config, dataset, split):
                if target not in sizes:
                    sizes[target] = dataset_images(config, target)
                if sizes[target] is None:
                    unknown.append(target)
                    continue
                n = sizes[target][target_split]
                pairs += own[split] * n
                largest = max(largest, n)
                embedded.add((target, target_split))
        images = sum(sizes[d][s] for d, s in embedded if sizes.get(d) is not None)
        queries = sum(sizes[dataset][s] for s in paths.SPLITS) if sizes[dataset] else None
        hours = pairs * dim / RATE_DIM / PAIRS_PER_CORE_S / 3600
        out.append(
            {
                "dataset": dataset,
                "images": queries,
                "pairs": pairs,
                "core_hours": round(hours, 1),
                "index_bytes": largest * dim * 4,
                "embedded_images": images,
                "dim": dim,
                "source": f"{pairs:,} query-target pairs at {dim} dimensions, exact search at "
                f"{PAIRS_PER_CORE_S:,.3g} pairs per CPU-second at {RATE_DIM} ({RATE_SOURCE}); "
                "image counts from the config (upper bounds for LAION-built datasets)"
                + (
                    f"; not counted, size unknown: {', '.join(sorted(set(unknown)))}"
                    if unknown
                    else ""
                ),
            }
        )
    return out


def format_audit(rows: list[dict]) -> list[str]:
    """``imagenot plan``'s audit section."""
    out = ["near-duplicate audit, estimate:"]
    for r in rows:
        out.append(
            f"  {r['dataset']}: {r['images']:,} images against its target sets, "
            f"{r['core_hours']:,.1f} core-h of search (GPU: a fraction), largest index "
            f"{r['index_bytes'] / 1e9:,.1f} GB in memory, {r['embedded_images']:,} images "
            f"embedded (shared with the diagnostics): {r['source']}"
        )
    if len(out) == 1:
        out.append("  none (audit.enabled false, no contrast dataset or no image encoder)")
    return out
