"""Steps 7b-8: class scores, threshold, top classes, and the caption selection, with memory
bounded by classes x kept captions (never by LAION).

Input per part: the embedding job's score table (``key``, ``row``, ``wnid``, ``similarity``: each
caption's similarity to its own class's query). One pass over the parts keeps, per class, the
``depth`` most similar captions (a running per-class top-k: each part's best merged into the kept
ones) and counts every class's captions: first each candidate's top-n similarities (numbers
only) for the class scores, then, for the kept classes only, their best ``per_class + reserve``
captions with keys. Memory: O(candidates x top_n + kept classes x depth), never O(parts). Class
score = mean of its top-n similarities. Classes under the threshold are dropped (step 7), the rest
ranked by score (ties: wnid) and the top K kept (step 8).

Captions are ordered by (similarity desc, key). For the kept classes a second pass reads URL, TEXT
and hash of the kept candidates from the caption files; an image URL is used once (its most
similar caption among the candidates); each class keeps its top ``per_class`` captions
(``ceil(M * (1 + oversample))``) in the selection and the next ``reserve`` in the reserve (for
the top-up download round). The candidates among which URL duplicates are removed are each kept
class's ``per_class + reserve`` best captions.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.core.io import iter_parquet
from imagenot.curate.captions import CAPTION_SCHEMA
from imagenot.curate.embed import class_indices
from imagenot.curate.paths import CLASS_SCORES

if TYPE_CHECKING:
    from imagenot.curate.settings import SelectSettings

SELECTION_SCHEMA = CAPTION_SCHEMA.append(pa.field("similarity", pa.float32())).append(
    pa.field("rank_in_class", pa.int32())
)
TOP_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("part", pa.int32()),
        ("row", pa.int64()),
        ("cls", pa.int32()),
        ("similarity", pa.float32()),
    ]
)


class ShortfallError(ValueError):
    """Fewer classes pass than the dataset needs; the message gives numbers and config keys."""


def _top_per_class(table: pa.Table, depth: int) -> pa.Table:
    """The ``depth`` best rows (similarity desc, then key if present) of each class (``cls``)."""
    if table.num_rows == 0:
        return table
    sort_keys = [("cls", "ascending"), ("similarity", "descending")]
    if "key" in table.column_names:
        sort_keys.append(("key", "ascending"))
    table = table.take(pc.sort_indices(table, sort_keys))
    return table.filter(pa.array(_rank_in_run(table.column("cls").to_numpy()) < depth))


def _rank_in_run(values: np.ndarray) -> np.ndarray:
    """Each row's rank (0, 1, ...) within its run of equal ``values`` (sorted)."""
    return np.arange(len(values)) - np.searchsorted(values, values, side="left")


def top_captions(
    score_files: Sequence[str | os.PathLike],
    class_wnids: Sequence[str],
    depth: int,
    settings: SelectSettings,
    only: np.ndarray | None = None,
    with_keys: bool = True,
) -> tuple[pa.Table, np.ndarray]:
    """(per class the ``depth`` best captions over all parts, captions per class).

    Reads the parts ``settings.select_batch_rows`` rows at a time and merges each batch's best
    into the kept rows: memory is O(classes x depth + batch), never O(parts). ``only`` (indices
    into ``class_wnids``) restricts the kept rows to those classes (counts still cover all).
    ``with_keys=False`` keeps only (class, similarity): enough for class scores, in a third of
    the memory."""

    value_set = pa.array(list(class_wnids), pa.string())
    counts = np.zeros(len(class_wnids), dtype=np.int64)
    names = TOP_SCHEMA.names if with_keys else ["cls", "similarity"]
    schema = pa.schema([TOP_SCHEMA.field(name) for name in names])
    wanted = None if only is None else np.isin(np.arange(len(class_wnids)), only)
    kept = schema.empty_table()
    columns = ["key", "row", "wnid", "similarity"] if with_keys else ["wnid", "similarity"]
    for part, path in enumerate(score_files):
        for batch in iter_parquet(path, batch_size=settings.select_batch_rows, columns=columns):
            cls_np = class_indices(batch.column("wnid"), value_set, path, "curate_embed")
            counts += np.bincount(cls_np, minlength=len(class_wnids))
            piece = pa.Table.from_batches([batch]).append_column("cls", pa.array(cls_np))
            part_column = pa.array(np.full(batch.num_rows, part, np.int32))
            piece = piece.append_column("part", part_column).select(names).cast(schema)
            if wanted is not None:
                piece = piece.filter(pa.array(wanted[cls_np]))
            kept = _top_per_class(pa.concat_tables([kept, _top_per_class(piece, depth)]), depth)
    return kept.combine_chunks(), counts


def score_classes(
    candidates: pa.Table,
    top: pa.Table,
    counts: np.ndarray,
    settings: SelectSettings,
) -> pa.Table:
    """Per candidate: ``score`` (mean top-n similarity), ``n_selectable`` captions, and the
    ``step``/``status``/``reason`` of its fate (6: no caption, 7: threshold, 8: top K).

    ``top`` holds each class's best similarities (``top_captions``, at least ``top_n`` per
    class). The threshold and ``n_classes`` drop classes only where they apply
    (:attr:`imagenot.curate.settings.SelectSettings.filters`)."""
    threshold, n_classes = settings.applied_threshold, settings.applied_n_classes
    wnids = candidates.column("wnid").to_pylist()
    top = _top_per_class(top, settings.top_n)
    cls = top.column("cls").to_numpy()
    sims = top.column("similarity").to_numpy().astype(np.float64)
    sums = np.bincount(cls, weights=sims, minlength=len(wnids))
    taken = np.bincount(cls, minlength=len(wnids))
    counts = np.asarray(counts, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        scores = np.where(taken > 0, sums / np.maximum(taken, 1), math.nan)
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
            "rank": pa.array(rank, pa.int64()),
        }
    )


def check_class_count(scores: pa.Table, settings: SelectSettings) -> None:
    """Raise ShortfallError when fewer classes are kept than ``n_classes`` (unless
    ``allow_fewer_classes``), and always when none is: an empty selection would empty every dataset
    built from it."""
    n_classes, threshold = settings.applied_n_classes, settings.applied_threshold
    dataset = settings.dataset
    kept = int(pc.sum(pc.equal(scores.column("status"), "kept")).as_py() or 0)
    if kept > 0 and (n_classes is None or settings.allow_fewer_classes or kept >= n_classes):
        return
    step = scores.column("step").to_numpy()
    raise ShortfallError(
        f"dataset {dataset!r}: {kept} classes pass, {n_classes or 'at least one'} wanted "
        f"({len(step)} candidates: {int((step == 6).sum())} without a one-class caption, "
        f"{int((step == 7).sum())} under the similarity threshold {threshold}; see "
        f"{CLASS_SCORES.format(dataset=dataset)}); change curate.threshold, curate.min_count, "
        "curate.encoder or n_classes, or set curate.allow_fewer_classes: true"
    )


def candidate_rows(
    top: pa.Table, scores: pa.Table, caption_files: Sequence[str | os.PathLike]
) -> pa.Table:
    """The kept classes' candidates with their caption columns (``CAPTION_SCHEMA`` +
    ``similarity``), read part by part from the caption files (only the candidate rows)."""

    kept_cls = np.flatnonzero(scores.column("status").to_numpy(zero_copy_only=False) == "kept")
    top = top.filter(pc.is_in(top.column("cls"), value_set=pa.array(kept_cls, pa.int32())))
    pieces = []
    for part, path in enumerate(caption_files):
        mine = top.filter(pc.equal(top.column("part"), part))
        if mine.num_rows == 0:
            continue
        wanted = mine.column("row")
        for batch in iter_parquet(path, batch_size=1 << 20):
            table = pa.Table.from_batches([batch])
            table = table.filter(pc.is_in(table.column("row"), value_set=wanted))
            if table.num_rows:
                pieces.append(table.cast(CAPTION_SCHEMA))
    captions = pa.concat_tables(pieces) if pieces else CAPTION_SCHEMA.empty_table()
    joined = captions.join(top.select(["key", "similarity"]), keys="key", join_type="inner")
    if joined.num_rows != top.num_rows:
        raise ValueError(
            f"{top.num_rows - joined.num_rows} scored captions missing; rerun curate_embed"
        )
    return joined


def select_captions(
    candidates: pa.Table, class_wnids: list[str], settings: SelectSettings
) -> tuple[pa.Table, pa.Table, dict]:
    """(selection, reserve, stats): per class in ``class_wnids`` the top ``settings.per_class``
    captions and the next ``settings.reserve_per_class`` ones, one use per URL (its most similar
    caption)."""
    per_class, reserve = settings.per_class, settings.reserve_per_class
    table = candidates.sort_by([("similarity", "descending"), ("key", "ascending")])
    urls = pc.index_in(table["URL"], value_set=pc.unique(table["URL"]))
    first = np.unique(urls.to_numpy(zero_copy_only=False), return_index=True)[1]  # per URL
    duplicates = table.num_rows - len(first)
    table = table.take(pa.array(np.sort(first)))
    wnids = pa.array(class_wnids, pa.string())
    cls = pc.index_in(table.column("wnid"), value_set=wnids).to_numpy(zero_copy_only=False)
    order = np.argsort(cls, kind="stable")
    rank = _rank_in_run(cls[order]) + 1
    ranked = table.take(pa.array(order))
    ranked = ranked.append_column("rank_in_class", pa.array(rank.astype(np.int32)))
    selected = ranked.filter(pa.array(rank <= per_class))
    reserved = ranked.filter(pa.array((rank > per_class) & (rank <= per_class + reserve)))
    stats = {
        "duplicate_urls_removed": duplicates,
        "selected_captions": selected.num_rows,
        "reserve_captions": reserved.num_rows,
    }
    selected, reserved = (t.select(SELECTION_SCHEMA.names) for t in (selected, reserved))
    return selected.cast(SELECTION_SCHEMA), reserved.cast(SELECTION_SCHEMA), stats


def class_table(candidates: pa.Table, scores: pa.Table) -> pa.Table:
    """The classes contract table for kept classes, in rank order (``scores``: those of
    :func:`score_classes`, row for row the candidates')."""
    joined = candidates.select(["wnid", "name", "gloss", "query", "note"])
    for name in ("score", "n_selectable", "status", "rank"):
        joined = joined.append_column(name, scores.column(name))
    kept = joined.filter(pc.equal(joined.column("status"), "kept")).sort_by("rank")
    columns = ["wnid", "name", "gloss", "query", "score", "n_selectable", "rank", "note"]
    return kept.select(columns).rename_columns({"n_selectable": "n_captions"})
