"""The audit's outputs from the search's matches and the calibrated threshold (docs/audit.md):
per class and target set the images, those with a near-duplicate (score at or above the
threshold) and the highest score; the flagged pairs; the closest pairs of each set; and a
summary whose one sentence the run summary quotes.

A match's ``similarity`` is the embeddings' cosine similarity of the pair, its ``score`` what the
threshold is applied to: the verification's alignment score of the image's best candidate
(:mod:`imagenot.audit.verify`), or the similarity itself without verification."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

MATCH_SCHEMA = pa.schema(
    [
        ("split", pa.string()),
        ("key", pa.string()),
        ("class", pa.string()),
        ("target", pa.string()),
        ("target_key", pa.string()),
        ("target_class", pa.string()),
        ("similarity", pa.float32()),
        ("score", pa.float32()),
    ]
)


def matches_table(
    split: str, query: dict, target: str, found: dict, sims, rows, scores=None
) -> pa.Table:
    """Rows of one query part against one target set: ``query`` and ``found`` are the arrays
    of :func:`imagenot.diagnostics.embed.embed_dataset` (the part's and the target set's),
    ``sims``/``rows`` each query's chosen target (row -1: an empty set, no row), ``scores``
    the pair's verification score (None: the similarity)."""
    scores = sims if scores is None else scores
    keep = np.asarray(rows) >= 0
    rows = np.asarray(rows)[keep]
    q_classes = np.asarray(query["classes"], dtype=str)[np.asarray(query["labels"])[keep]]
    t_classes = np.asarray(found["classes"], dtype=str)[np.asarray(found["labels"])[rows]]
    n = int(keep.sum())
    return pa.table(
        {
            "split": pa.array([split] * n, pa.string()),
            "key": pa.array(np.asarray(query["keys"], dtype=str)[keep], pa.string()),
            "class": pa.array(q_classes, pa.string()),
            "target": pa.array([target] * n, pa.string()),
            "target_key": pa.array(np.asarray(found["keys"], dtype=str)[rows], pa.string()),
            "target_class": pa.array(t_classes, pa.string()),
            "similarity": pa.array(np.asarray(sims, dtype=np.float32)[keep], pa.float32()),
            "score": pa.array(np.asarray(scores, dtype=np.float32)[keep], pa.float32()),
        },
        schema=MATCH_SCHEMA,
    )


def per_class(matches: pa.Table, threshold: float) -> pa.Table:
    """Per query split, target set and class: ``images``, ``found`` (score >= threshold) and
    ``closest`` (the highest score), sorted by split, target and class."""
    flagged = pc.greater_equal(matches["score"], pa.scalar(threshold, pa.float32()))
    table = matches.append_column("found", pc.cast(flagged, pa.int64()))
    grouped = table.group_by(["split", "target", "class"]).aggregate(
        [("key", "count"), ("found", "sum"), ("score", "max")]
    )
    grouped = grouped.rename_columns(["split", "target", "class", "images", "found", "closest"])
    return grouped.sort_by(
        [("split", "ascending"), ("target", "ascending"), ("class", "ascending")]
    )


def flagged(matches: pa.Table, threshold: float) -> pa.Table:
    """The pairs scoring at or above the threshold, the highest first."""
    keep = pc.greater_equal(matches["score"], pa.scalar(threshold, pa.float32()))
    return matches.filter(keep).sort_by([("score", "descending"), ("key", "ascending")])


def closest(matches: pa.Table, per_set: int) -> pa.Table:
    """The ``per_set`` highest-scoring pairs of each query split and target set."""
    ordered = matches.sort_by([("score", "descending"), ("key", "ascending")])
    pieces = []
    for split in sorted(set(ordered["split"].to_pylist())):
        for target in sorted(set(ordered["target"].to_pylist())):
            mask = pc.and_(pc.equal(ordered["split"], split), pc.equal(ordered["target"], target))
            pieces.append(ordered.filter(mask).slice(0, per_set))
    return pa.concat_tables(pieces) if pieces else ordered.slice(0, 0)


def set_counts(table: pa.Table) -> list[dict]:
    """Per query split and target set (from :func:`per_class`): images, found, closest."""
    out = []
    for split in sorted(set(table["split"].to_pylist())):
        for target in sorted(set(table["target"].to_pylist())):
            mask = pc.and_(pc.equal(table["split"], split), pc.equal(table["target"], target))
            part = table.filter(mask)
            if part.num_rows:
                out.append(
                    {
                        "split": split,
                        "target": target,
                        "images": int(pc.sum(part["images"]).as_py()),
                        "found": int(pc.sum(part["found"]).as_py()),
                        "closest": float(pc.max(part["closest"]).as_py()),
                    }
                )
    return out


def sentence(
    dataset: str,
    sets: list[dict],
    calibration: dict,
    reference: str | None,
    names: dict[str, str],
) -> str:
    """The run summary's line: the audited dataset's test images with a near-duplicate among
    the reference's test images (its evaluation set), else among the first target set."""
    chosen = [s for s in sets if s["split"] == "test" and s["target"] == f"{reference}/test"]
    chosen = chosen or [s for s in sets if s["split"] == "test"] or sets
    if not chosen:
        return f"{names.get(dataset, dataset)}: nothing audited"
    s = chosen[0]
    target, target_split = s["target"].split("/")
    return (
        f"{s['found']:,} of {s['images']:,} {names.get(dataset, dataset)} {s['split']} images "
        f"have a near-duplicate in {names.get(target, target)}'s {target_split} split at "
        f"threshold {calibration['threshold']:.3f}, precision {calibration['precision']:.3f}, "
        f"recall {calibration['recall']:.3f} (calibrated on {calibration['copy_pairs']:,} "
        f"copy and {calibration['distinct_pairs']:,} distinct pairs)"
    )


def report_rows(table: pa.Table, names: dict[str, str]) -> pa.Table:
    """The per-class table as the report shows it: each target set by its display name, the
    closest similarity to four decimals (written by :func:`imagenot.core.io.write_csv`, which
    escapes a class name a spreadsheet would read as a formula)."""
    shown = []
    for target in table.column("target").to_pylist():
        dataset, split = target.split("/")
        shown.append(f"{names.get(dataset, dataset)} {split}")
    return pa.table(
        {
            "split": table.column("split"),
            "target": pa.array(shown, pa.string()),
            "class": table.column("class"),
            "images": table.column("images"),
            "found": table.column("found"),
            "closest": pc.round(table.column("closest"), 4),
        }
    )
