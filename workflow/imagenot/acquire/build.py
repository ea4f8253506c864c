"""Fill and split: from validated download parts to a dataset directory.

Pure planning on Arrow tables (:func:`plan_splits`), over the status tables of every download
round (:func:`plan_build`, one global job: duplicates are found across the whole dataset), then
the writes, one job per download part (:func:`write_build_part`), then a gather
(:func:`imagenot.acquire.dataset.gather_parts`). Rules, in order:

1. candidates = selection rows (of every round) whose image validated, less those the audit's
   exclusion list names (when given), ordered by caption similarity (desc), key;
2. exact duplicates (same sha256 of the stored JPEG) keep only their first candidate, across the
   whole dataset; with ``near_duplicates='phash'`` so do images whose perceptual hashes differ in
   at most ``near_distance`` bits (so no image, or near copy, can sit in two splits);
3. per class the top ``images_per_class``. A class short of it stops the build with the
   shortfall (:class:`ShortfallError`) unless ``allow_fewer``; then it is dropped or kept
   (``short_classes``), and always dropped when it cannot fill test + val + 1 images;
4. per class a seeded permutation: the first ``test_per_class`` are test, the next
   ``val_per_class`` validation, the rest train;
5. labels follow the sorted wnids of the kept classes; training rows are in seeded random
   order, validation and test in (label, key) order.

Top-up rounds (:func:`select_topup`): after a round, each class still short fetches its
next-best captions from the curation's reserve, ``ceil(deficit * (1 + oversample))`` of them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import math
import os
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.acquire import paths as acquire_paths
from imagenot.acquire.dataset import Record, gather_parts, part_is_done, write_part
from imagenot.acquire.download import read_selection, reason_counts
from imagenot.acquire.files import PlanFiles, TopupFiles, WriteFiles
from imagenot.acquire.settings import FillSettings, TopupSettings, WriteSettings
from imagenot.acquire.splits import class_seed, drop_excluded, excluded_columns
from imagenot.core.dataset import SPLITS, ShardReader, read_classes
from imagenot.core.files import OUTPUT
from imagenot.core.io import read_parquet, write_csv, write_parquet

log = logging.getLogger(__name__)


def near_duplicate_mask(phashes: np.ndarray, distance: int) -> np.ndarray:
    """True for items that have an earlier item within ``distance`` bits (greedy, in order).

    Pigeonhole banding: two 64-bit hashes within ``distance`` bits agree on at least one of
    ``distance + 1`` bands, so only items sharing a band are compared.
    """
    n_bands = distance + 1
    bounds = np.linspace(0, 64, n_bands + 1).astype(int)
    values = phashes.astype(np.int64).view(np.uint64)
    buckets: list[dict[int, list[int]]] = [{} for _ in range(n_bands)]
    dup = np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values.tolist()):
        bands = [
            (v >> int(lo)) & ((1 << int(hi - lo)) - 1) for lo, hi in itertools.pairwise(bounds)
        ]
        dup[i] = any(
            (v ^ int(values[j])).bit_count() <= distance
            for b, band in enumerate(bands)
            for j in buckets[b].get(band, ())
        )
        if not dup[i]:
            for b, band in enumerate(bands):
                buckets[b].setdefault(band, []).append(i)
    return dup


def distinct_candidates(
    candidates: pa.Table, settings: FillSettings | TopupSettings
) -> tuple[pa.Table, np.ndarray]:
    """Candidates ordered by (similarity desc, key), and True where an image is the first of
    its exact (sha256) or, with ``settings.near_duplicates='phash'``, near duplicates (within
    ``near_duplicate_distance`` bits; rules 1-2). The fill and the top-up count alike."""
    near_duplicates, near_distance = settings.near_duplicates, settings.near_duplicate_distance
    order = pc.sort_indices(candidates, [("similarity", "descending"), ("key", "ascending")])
    cand = candidates.take(order)
    keep = np.zeros(cand.num_rows, dtype=bool)  # the first of each sha256
    keep[np.unique(cand["sha256"].to_numpy(zero_copy_only=False), return_index=True)[1]] = True
    if near_duplicates == "phash":
        idx = np.flatnonzero(keep)
        ph = cand["phash"].to_numpy(zero_copy_only=False)[idx]
        keep[idx[near_duplicate_mask(ph, near_distance)]] = False
    return cand, keep


def plan_splits(
    candidates: pa.Table, fill: FillSettings, wnids: list[str]
) -> tuple[pa.Table, pa.Table]:
    """Assign splits as ``fill`` says. ``candidates``: key, wnid, similarity, sha256 (+ phash)
    of valid images; ``wnids``: every class to report, the candidates' and any other (dropped:
    none of its images validated).

    Returns (assignment: the candidates kept with ``split`` added, in write order;
    per-class report: wnid, n_valid, n_unique, n_kept, n_test, n_val, n_train, status).
    """
    cand, keep = distinct_candidates(candidates, fill)
    images_per_class, short_classes, seed = fill.images_per_class, fill.short_classes, fill.seed
    test_per_class, val_per_class = fill.test_per_class, fill.val_per_class

    row_wnid = np.asarray(cand["wnid"].to_pylist(), dtype=object)
    need = test_per_class + val_per_class + 1
    splits = np.full(cand.num_rows, "", dtype=object)
    report = []
    for wnid in sorted({*row_wnid.tolist(), *wnids}):
        in_class = row_wnid == wnid
        unique = np.flatnonzero(in_class & keep)
        kept = unique[:images_per_class]
        status = "kept"
        if len(kept) < images_per_class:
            status = "short_kept" if short_classes == "keep" and len(kept) >= need else "dropped"
        n = {"test": 0, "val": 0, "train": 0}
        if status != "dropped":
            perm = kept[class_seed(seed, wnid).permutation(len(kept))]
            splits[perm[:test_per_class]] = "test"
            splits[perm[test_per_class : test_per_class + val_per_class]] = "val"
            splits[perm[test_per_class + val_per_class :]] = "train"
            n = {s: int((splits[kept] == s).sum()) for s in n}
        n_kept = len(kept) if status != "dropped" else 0
        counts = {"n_valid": int(in_class.sum()), "n_unique": len(unique), "n_kept": n_kept}
        report.append(
            {"wnid": wnid, **counts, **{f"n_{s}": c for s, c in n.items()}, "status": status}
        )
    chosen = np.flatnonzero(splits != "")
    out = cand.take(pa.array(chosen)).append_column(
        "split", pa.array(splits[chosen].tolist(), pa.string())
    )
    # write order: train shuffled (seeded), val and test by (wnid, key)
    train = np.flatnonzero(out["split"].to_numpy(zero_copy_only=False) == "train")
    train = train[np.random.default_rng([seed, 1]).permutation(len(train))]
    rest = out.filter(pc.not_equal(out["split"], "train"))
    rest = rest.sort_by([("wnid", "ascending"), ("key", "ascending")])
    out = pa.concat_tables([out.take(pa.array(train, pa.int64())), rest])
    return out, pa.Table.from_pylist(report)


def read_parts(parts: list[str | os.PathLike]) -> pa.Table:
    """Concatenate per-part status tables, adding ``part_tar`` (the tar beside each table)."""
    tables = []
    for path in parts:
        t = read_parquet(path)
        tar = str(Path(path).with_suffix(".tar"))
        tables.append(t.append_column("part_tar", pa.array([tar] * t.num_rows, pa.string())))
    return pa.concat_tables(tables) if tables else pa.table({})


class ShortfallError(ValueError):
    """Classes ended with fewer valid images than wanted; the message says by how much and
    which config keys change that. The CLI prints it as one short block, no traceback."""


SHORTFALL_WORST = 5


def shortfall_message(
    name: str, report: pa.Table, images_per_class: int, topup_rounds: int, reserve_left: dict
) -> str | None:
    """The shortfall of ``report`` (a classes report) in a few lines, or None if none is short.

    Counts are valid, distinct images per class (after every download round and duplicate
    removal), before classes are kept or dropped.
    """
    rows = [r for r in report.to_pylist() if r["n_unique"] < images_per_class]
    if not rows:
        return None
    rows.sort(key=lambda r: (r["n_unique"], r["wnid"]))
    missing = sum(images_per_class - r["n_unique"] for r in rows)
    worst = ", ".join(f"{r['wnid']} {r['n_unique']}" for r in rows[:SHORTFALL_WORST])
    more = f" and {len(rows) - SHORTFALL_WORST} more" if len(rows) > SHORTFALL_WORST else ""
    exhausted = sum(1 for r in rows if reserve_left.get(r["wnid"], 0) == 0)
    rounds = f"after {topup_rounds} top-up round(s)" if topup_rounds else "with no top-up round"
    reserve = f"; the caption reserve is used up for {exhausted} of them" if topup_rounds else ""
    return (
        f"dataset {name}: {len(rows)} of {report.num_rows} classes have fewer than "
        f"{images_per_class} valid distinct images {rounds} ({missing} images short in all; "
        f"fewest: {worst}{more}){reserve}.\n"
        f"  To fill them: raise curate.oversample (more captions per class), curate.reserve "
        f"(captions held back for top-up rounds) or acquire.topup_rounds.\n"
        f"  To go on with fewer: set acquire.allow_fewer (or datasets.{name}.allow_fewer) to "
        f"true; acquire.short_classes then keeps them (keep) or leaves them out (drop).\n"
        "  Per-class counts: this job's log, one line per short class."
    )


ROUND_SCHEMA = pa.schema(
    [("key", pa.string()), ("wnid", pa.string()), ("similarity", pa.float32())]
)


def read_rounds(
    selections: list[str | os.PathLike], part_tables: list[str | os.PathLike]
) -> tuple[pa.Table, pa.Table]:
    """(selection rows of every round: key, wnid, similarity, round; candidates: the status
    rows of every part whose image validated, joined with their selection row), selection and
    status rows checked to cover each other exactly, key for key. The fill and the top-up
    start from the same candidates."""
    tables = []
    for i, path in enumerate(selections):
        t = read_selection(path).select(ROUND_SCHEMA.names).cast(ROUND_SCHEMA)
        tables.append(t.append_column("round", pa.array([i] * t.num_rows, pa.int32())))
    selection = pa.concat_tables(tables)
    status = read_parts(part_tables)
    keys = selection["key"]
    if pc.count_distinct(keys).as_py() != len(keys):
        raise ValueError(
            f"selections {', '.join(map(str, selections))} share keys; rerun the top-up selection"
        )
    status_keys = status["key"] if status.num_rows else pa.chunked_array([], pa.string())
    if len(status_keys) != len(keys) or set(status_keys.to_pylist()) != set(keys.to_pylist()):
        raise ValueError(
            f"download parts of {selections[0]} do not cover the selection exactly "
            f"({len(status_keys)} status rows for {len(keys)} selected keys); rerun the downloads"
        )
    ok = status.filter(pc.equal(status["reason"], "success"))
    return selection, ok.join(selection.drop_columns(["round"]), "key", join_type="inner")


def plan_build(files: PlanFiles, fill: FillSettings, *, name: str) -> pa.Table:
    """Fill and split a LAION-built dataset from the status tables of every download round
    (the global step: duplicates are removed across the whole dataset). Writes the download
    and class reports, then either stops with the shortfall (:class:`ShortfallError`, a
    ValueError: the command ends in its message alone; unless ``allow_fewer``) or writes the
    assignment: one row per kept image (key, wnid, split, similarity, where its bytes lie:
    part_tar, offset, length; ``job``, the download part whose write job stores it; ``order``,
    its row in the final manifest), classes in its metadata.
    ``files.selections`` are round 0's selection then each top-up round's; ``fill`` is the
    config's (:mod:`imagenot.acquire.settings`); ``name`` is the dataset's (for messages);
    ``files.exclusions``: none, or the audit's list of the pool (:func:`drop_excluded`).
    """
    selections, part_tables = files.selections, files.status
    reserve_path = files.reserve[0] if files.reserve else None
    selection, candidates = read_rounds(selections, part_tables)
    candidates, excluded = drop_excluded(candidates, files.exclusions, log)
    stats = []
    for path in map(Path, part_tables):
        # round r >= 1 lies in round-{r}/, round 0 in the acquire folder itself
        folder = path.parent.parent.name
        rnd = int(folder.split("-")[1]) if folder.startswith("round-") else 0
        stats += [{"round": rnd, **row} for row in reason_counts(read_parquet(path), path.stem)]
    write_parquet(pa.Table.from_pylist(stats), files.download_stats)
    write_csv(pa.Table.from_pylist(stats), files.download_stats_csv)

    images_per_class = fill.images_per_class
    assignment, report = plan_splits(candidates, fill, selection["wnid"].to_pylist())
    tried = Counter(selection["wnid"].to_pylist())
    topup = Counter(selection.filter(pc.greater(selection["round"], 0))["wnid"].to_pylist())
    wnids = report["wnid"].to_pylist() if report.num_rows else []
    report = report.append_column("n_tried", pa.array([tried[w] for w in wnids], pa.int64()))
    report = report.append_column("n_topup", pa.array([topup[w] for w in wnids], pa.int64()))
    report = excluded_columns(report, excluded)
    write_parquet(report, files.classes_report)
    write_csv(report, files.classes_report_csv)
    for row in report.to_pylist():
        if row["n_unique"] < images_per_class:
            log.info("short class %s: %s", row["wnid"], row)
    message = shortfall_message(
        name, report, images_per_class, len(selections) - 1, reserve_left(reserve_path, selection)
    )
    if message and not fill.allow_fewer:
        raise ShortfallError(message)
    if message:
        log.warning("%s (going on: allow_fewer is true)", message.replace("\n", " "))
    dropped = [r["wnid"] for r in report.to_pylist() if r["status"] == "dropped"]
    if dropped:
        log.warning("%d class(es) dropped as short: %s", len(dropped), ", ".join(dropped[:20]))
    classes = sorted(set(assignment["wnid"].to_pylist()))
    if not classes:
        raise ValueError(f"{selections[0]}: no class has enough valid images to build a dataset")
    jobs = [Path(t).stem for t in assignment["part_tar"].to_pylist()]
    out = assignment.select(["key", "wnid", "split", "similarity", "part_tar", "offset", "length"])
    out = out.append_column("job", pa.array(jobs, pa.string()))
    # manifest order: split by split (train, val, test), plan order within each
    split_rank = pc.index_in(out["split"], value_set=pa.array(SPLITS)).to_numpy()
    order = np.empty(out.num_rows, dtype=np.int64)
    order[np.argsort(split_rank, kind="stable")] = np.arange(out.num_rows)
    out = out.append_column("order", pa.array(order, pa.int64()))
    out = out.replace_schema_metadata({CLASSES_META: json.dumps(classes)})
    write_parquet(out, files.assignment)
    return out


def reserve_left(reserve: str | os.PathLike | None, tried: pa.Table) -> dict[str, int]:
    """Per class, the reserve rows no round has fetched yet (empty without a reserve)."""
    if reserve is None:
        return {}
    table = read_selection(reserve)
    untried = table.filter(pc.invert(pc.is_in(table["key"], tried["key"])))
    return dict(Counter(untried["wnid"].to_pylist()))


CLASSES_META = b"imagenot.classes"


def write_build_part(
    files: WriteFiles, settings: WriteSettings, *, job: str, out: str | os.PathLike
) -> pa.Table:
    """Store the rows of ``files.assignment`` of download part ``job`` (e.g. ``part-00003``,
    every round's tar of that part) in the shards ``shards/{split}-{job}-{i:06d}.tar`` of the
    dataset's folder ``out``, in manifest order, and write the part manifest ``files.part``. A
    part manifest of the same rows whose shards are on disk makes this a no-op (a rerun after a
    kill redoes only unfinished parts)."""
    table = read_parquet(files.assignment)
    classes = json.loads(table.schema.metadata[CLASSES_META])
    rows = table.filter(pc.equal(table["job"], job)).sort_by("order")
    digest = hashlib.sha256()
    for batch in rows.drop_columns(["similarity"]).to_batches(1 << 16):
        digest.update(repr(batch.to_pydict()).encode())
    shard_size = settings.shard_size
    params = {"rows": digest.hexdigest(), "shard_size": shard_size, "classes": classes}
    if part_is_done(out, files.part, params):
        log.info("%s: part %s already written from these rows; nothing to do", out, job)
        return read_parquet(files.part)
    reader = ShardReader(Path.cwd())
    records = []
    for r in rows.to_pylist():
        jpeg = partial(reader.read, r["part_tar"], r["offset"], r["length"])
        records.append(Record(r["key"], r["wnid"], r["split"], jpeg, r["similarity"]))
    written = write_part(
        out,
        records,
        classes,
        files.part,
        part=job.removeprefix("part-"),
        shard_size=shard_size,
        with_similarity=True,
        order=rows["order"].to_pylist(),
        params=params,
    )
    reader.close()
    log.info("%s: part %s, %d images", out, job, len(records))
    return written


def build_dataset(
    selection_path: str | os.PathLike,
    part_tables: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    report_dir: str | os.PathLike,
    fill: FillSettings,
    write: WriteSettings,
    *,
    topup: list[tuple[str | os.PathLike, list[str | os.PathLike]]] = (),
    reserve_path: str | os.PathLike | None = None,
    exclusions: str | os.PathLike | None = None,
) -> Path:
    """Fill, split and write a LAION-built dataset in one process: :func:`plan_build`, then
    :func:`write_build_part` for each download part, then the gather (what the workflow's
    jobs do in parallel). ``topup``: (selection, part tables) of each top-up round;
    ``exclusions``: the audit's exclusion list of the pool, if any."""
    import tempfile

    selections = [selection_path, *(sel for sel, _ in topup)]
    tables = [*part_tables, *(t for _, parts in topup for t in parts)]
    report_dir = Path(report_dir)
    reports = {
        role: str(report_dir / Path(getattr(acquire_paths, role.upper())).name)
        for role in PlanFiles.roles(OUTPUT)
        if role != "assignment"
    }
    with tempfile.TemporaryDirectory() as tmp:
        files = PlanFiles(
            selections=[str(s) for s in selections],
            status=[str(t) for t in tables],
            reserve=[str(reserve_path)] if reserve_path else [],
            exclusions=[str(exclusions)] if exclusions else [],
            assignment=str(Path(tmp) / "assignment.parquet"),
            **reports,
        )
        assignment = plan_build(files, fill, name=report_dir.name)
        parts = [Path(tmp) / f"{job}.parquet" for job in sorted({Path(t).stem for t in tables})]
        for part in parts:
            write_build_part(
                WriteFiles(files.assignment, str(part)), write, job=part.stem, out=out_dir
            )
        manifest = gather_parts(out_dir, parts, seed=fill.seed)
    log.info("%s: %d images, %d classes", out_dir, assignment.num_rows, len(read_classes(out_dir)))
    return manifest


# ------------------------------------------------------------------------------------ top-up


def select_topup(files: TopupFiles, settings: TopupSettings) -> pa.Table:
    """The next top-up round's selection (``files.selection``): for each class short after the
    rounds so far (``files.selections`` and their ``files.status`` tables; fewer than
    ``images_per_class`` valid distinct images, counted as the build counts them), its best rows
    of ``files.reserve`` not fetched yet (by ``rank_in_class``, then similarity), as many as
    ``ceil(deficit * (1 + oversample))`` (the curation's oversampling margin, on the deficit).
    Written with the reserve's columns; empty when nothing is short or the reserve is used up.
    """
    selection, cand = read_rounds(files.selections, files.status)
    cand, keep = distinct_candidates(cand, settings)
    images_per_class, oversample = settings.images_per_class, settings.oversample
    have = Counter(np.asarray(cand["wnid"].to_pylist(), dtype=object)[keep].tolist())
    table = read_selection(files.reserve)
    overlap = pc.sum(pc.is_in(table["key"], selection["key"])).as_py() or 0
    first_round = selection.filter(pc.equal(selection["round"], 0))
    if pc.sum(pc.is_in(table["key"], first_round["key"])).as_py():
        raise ValueError(f"{files.reserve}: holds keys of the selection {files.selections[0]}")
    table = table.filter(pc.invert(pc.is_in(table["key"], selection["key"])))
    sort = [("similarity", "descending"), ("key", "ascending")]
    if "rank_in_class" in table.column_names:
        sort.insert(0, ("rank_in_class", "ascending"))
    table = table.sort_by(sort)
    classes = sorted(set(selection["wnid"].to_pylist()))
    wnid = np.asarray(table["wnid"].to_pylist(), dtype=object)
    take: list[np.ndarray] = []
    for c in classes:
        deficit = images_per_class - have[c]
        if deficit > 0:
            rows = np.flatnonzero(wnid == c)[: math.ceil(deficit * (1 + oversample))]
            log.info("class %s: %d short, %d reserve rows taken", c, deficit, len(rows))
            take.append(rows)
    idx = np.sort(np.concatenate(take)) if take else np.zeros(0, dtype=np.int64)
    result = table.take(pa.array(idx, pa.int64()))
    log.info(
        "top-up: %d rows for %d short classes (reserve used up for %d; %d reserve rows were "
        "fetched in earlier top-up rounds)",
        result.num_rows,
        len(take),
        sum(len(rows) == 0 for rows in take),
        overlap,
    )
    write_parquet(result, files.selection)
    return result
