"""Steps 7b-8: caption-query similarity with FAISS, class scores, and the caption selection.

Each caption belongs to exactly one class (step 6), so a class's similarities are an exact
inner-product search (``faiss.IndexFlatIP`` over unit vectors) of its query against its own
captions. Class score = mean of its top-n similarities. Classes under the threshold are dropped
(step 7), the rest ranked by score (ties: wnid) and the top K kept (step 8). Captions are ordered
by (similarity desc, key); an image URL is used once in the dataset (its most similar caption);
each class keeps its top ``ceil(M * (1 + oversample))`` captions.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.curate.captions import CAPTION_SCHEMA

SELECTION_SCHEMA = CAPTION_SCHEMA.append(pa.field("similarity", pa.float32())).append(
    pa.field("rank_in_class", pa.int32())
)


def caption_similarities(
    captions: pa.Table,
    texts: pa.Table,
    vectors: np.ndarray,
    class_wnids: list[str],
    query_vectors: np.ndarray,
    device: str = "cpu",
) -> np.ndarray:
    """Similarity (float32) of each caption to its own class query, via per-class faiss search
    (on the GPU with ``device="cuda"``, which needs a faiss built with GPU support)."""
    text_id = _text_ids(captions, texts)
    class_of = pc.index_in(captions.column("wnid"), value_set=pa.array(class_wnids, pa.string()))
    class_idx = class_of.to_numpy(zero_copy_only=False)
    sims = np.full(captions.num_rows, np.nan, dtype=np.float32)
    order = np.argsort(class_idx, kind="stable")
    bounds = np.searchsorted(class_idx[order], np.arange(len(class_wnids) + 1))
    dim = query_vectors.shape[1] if query_vectors.ndim == 2 else vectors.shape[1]
    new_index = inner_product_index(device)
    for c in range(len(class_wnids)):
        members = order[bounds[c] : bounds[c + 1]]
        if not len(members):
            continue
        index = new_index(dim)
        index.add(np.ascontiguousarray(vectors[text_id[members]], dtype=np.float32))
        scores, found = index.search(query_vectors[c : c + 1].astype(np.float32), len(members))
        sims[members[found[0]]] = scores[0]
    return sims


def inner_product_index(device: str):
    """A constructor of empty exact inner-product indexes (``dim -> index``) on ``device``:
    ``faiss.IndexFlatIP`` on the CPU, ``faiss.GpuIndexFlatIP`` on GPU 0 for ``"cuda"``."""
    import faiss

    if device == "cpu":
        return faiss.IndexFlatIP
    if device != "cuda":
        raise ValueError(f"faiss device must be 'cpu' or 'cuda', not {device!r}")
    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() < 1:
        raise RuntimeError(
            "config key curate.faiss_device is 'cuda', but this faiss has no GPU support or sees "
            "no GPU: run the rule in envs/curate_gpu.yaml (faiss-gpu) on a GPU node, or set "
            "curate.faiss_device: cpu"
        )
    resources = faiss.StandardGpuResources()
    return lambda dim: faiss.GpuIndexFlatIP(resources, dim)


def _text_ids(captions: pa.Table, texts: pa.Table) -> np.ndarray:
    ids = pc.index_in(captions.column("TEXT"), value_set=texts.column("TEXT"))
    if ids.null_count:
        raise ValueError("captions hold texts that were not embedded; re-run the embedding step")
    return ids.to_numpy(zero_copy_only=False).astype(np.int64)


def score_classes(
    candidates: pa.Table,
    captions: pa.Table,
    sims: np.ndarray,
    top_n: int,
    threshold: float | None,
    n_classes: int | None,
) -> pa.Table:
    """Per candidate: ``score`` (mean top-n similarity), ``n_selectable`` captions, and the
    ``step``/``status``/``reason`` of its fate (6: no caption, 7: threshold, 8: top K)."""
    wnids = candidates.column("wnid").to_pylist()
    class_idx = pc.index_in(captions.column("wnid"), value_set=pa.array(wnids, pa.string()))
    cls = class_idx.to_numpy(zero_copy_only=False)
    order = np.lexsort((-sims.astype(np.float64), cls))
    bounds = np.searchsorted(cls[order], np.arange(len(wnids) + 1))
    counts = np.diff(bounds)
    scores = np.array(
        [
            float(np.mean(sims[order[b : b + min(n, top_n)]], dtype=np.float64)) if n else math.nan
            for b, n in zip(bounds[:-1], counts, strict=True)
        ]
    )
    step = np.where(counts == 0, 6, 8)
    if threshold is not None:
        step = np.where((counts > 0) & (scores < threshold), 7, step)
    eligible = np.flatnonzero(step == 8)
    ranked = eligible[
        np.lexsort((np.array(wnids, dtype=object)[eligible].astype(str), -scores[eligible]))
    ]
    rank = np.zeros(len(wnids), dtype=np.int64)
    rank[ranked] = np.arange(1, len(ranked) + 1)
    kept = (step == 8) & ((n_classes is None) | (rank <= (n_classes or 0)))
    reasons = []
    for i in range(len(wnids)):
        if step[i] == 6:
            reasons.append("no caption names this class alone")
        elif step[i] == 7:
            reasons.append(f"score {scores[i]:.4f} < threshold {threshold}")
        elif not kept[i]:
            reasons.append(f"rank {rank[i]} > n_classes {n_classes}")
        else:
            reasons.append(f"rank {rank[i]}")
    return pa.table(
        {
            "wnid": pa.array(wnids, pa.string()),
            "score": pa.array(scores, pa.float64()),
            "n_selectable": pa.array(counts, pa.int64()),
            "step": pa.array(step, pa.int32()),
            "status": pa.array(np.where(kept, "kept", "removed").tolist(), pa.string()),
            "reason": pa.array(reasons, pa.string()),
            "rank": pa.array(np.where(rank > 0, rank, 0), pa.int64()).cast(pa.int64()),
        }
    )


def select_captions(
    captions: pa.Table, sims: np.ndarray, class_wnids: list[str], per_class: int
) -> tuple[pa.Table, dict]:
    """Top ``per_class`` captions of each class in ``class_wnids`` (one use per URL)."""
    keep_class = pc.is_in(captions.column("wnid"), value_set=pa.array(class_wnids, pa.string()))
    mask = keep_class.to_numpy(zero_copy_only=False)
    table = captions.filter(keep_class).append_column(
        "similarity", pa.array(sims[mask], pa.float32())
    )
    keys = np.asarray(table.column("key").to_numpy(zero_copy_only=False)).astype(str)
    order = np.lexsort((keys, -table.column("similarity").to_numpy().astype(np.float64)))
    table = table.take(pa.array(order))
    url_first = _first_occurrence(table.column("URL"))
    duplicates = int((~url_first).sum())
    table = table.filter(pa.array(url_first))
    class_pos = pc.index_in(table.column("wnid"), value_set=pa.array(class_wnids, pa.string()))
    cls = class_pos.to_numpy(zero_copy_only=False)
    order = np.argsort(cls, kind="stable")
    sorted_cls = cls[order]
    starts = np.searchsorted(sorted_cls, sorted_cls, side="left")
    rank_in_class = np.arange(len(order)) - starts + 1
    take = rank_in_class <= per_class
    table = table.take(pa.array(order[take]))
    table = table.append_column("rank_in_class", pa.array(rank_in_class[take].astype(np.int32)))
    return table.select(SELECTION_SCHEMA.names).cast(SELECTION_SCHEMA), {
        "duplicate_urls_removed": duplicates,
        "selected_captions": table.num_rows,
    }


def _first_occurrence(values: pa.ChunkedArray) -> np.ndarray:
    """True at the first occurrence of each value, in table order."""
    ids = pc.index_in(values, value_set=pc.unique(values)).to_numpy(zero_copy_only=False)
    _, first = np.unique(ids, return_index=True)
    mask = np.zeros(len(ids), dtype=bool)
    mask[first] = True
    return mask


def class_table(candidates: pa.Table, scores: pa.Table) -> pa.Table:
    """The classes contract table for kept classes, in rank order."""
    if candidates.column("wnid") != scores.column("wnid"):
        raise ValueError("class scores are not in candidates order; re-run the selection step")
    joined = candidates.select(["wnid", "name", "gloss", "query", "note"])
    for name in ("score", "n_selectable", "status", "rank"):
        joined = joined.append_column(name, scores.column(name))
    kept = joined.filter(pc.equal(joined.column("status"), "kept")).sort_by("rank")
    return pa.table(
        {
            "wnid": kept.column("wnid"),
            "name": kept.column("name"),
            "gloss": kept.column("gloss"),
            "query": kept.column("query"),
            "score": kept.column("score"),
            "n_captions": kept.column("n_selectable"),
            "rank": kept.column("rank"),
            "note": kept.column("note"),
        }
    )
