"""Fill and split: from validated download parts to a dataset directory.

Pure planning on Arrow tables (:func:`plan_splits`), then one streaming write
(:func:`build_dataset`). Rules, in order:

1. candidates = selection rows whose image validated, ordered by caption similarity (desc), key;
2. exact duplicates (same sha256 of the stored JPEG) keep only their first candidate, across the
   whole dataset; with ``near_duplicates='phash'`` so do images whose perceptual hashes differ in
   at most ``near_distance`` bits (so no image, or near copy, can sit in two splits);
3. per class the top ``images_per_class``; a class short of it is dropped or kept
   (``short_classes``), and always dropped when it cannot fill test + val + 1 images;
4. per class a seeded permutation: the first ``test_per_class`` are test, the next
   ``val_per_class`` validation, the rest train;
5. labels follow the sorted wnids of the kept classes; training shards are in seeded random
   order, validation and test in (label, key) order.
"""

from __future__ import annotations

import itertools
import logging
import os
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from imagenot.acquire.dataset import Record, ShardReader, write_dataset
from imagenot.io import write_csv, write_parquet

log = logging.getLogger(__name__)


def class_seed(seed: int, name: str) -> np.random.Generator:
    """A generator seeded from the master seed and a class name (order-independent)."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


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
        for b, band in enumerate(bands):
            for j in buckets[b].get(band, ()):
                if (v ^ int(values[j])).bit_count() <= distance:
                    dup[i] = True
                    break
            if dup[i]:
                break
        if not dup[i]:
            for b, band in enumerate(bands):
                buckets[b].setdefault(band, []).append(i)
    return dup


def plan_splits(
    candidates: pa.Table,
    *,
    images_per_class: int,
    test_per_class: int,
    val_per_class: int,
    short_classes: str = "drop",
    near_duplicates: str = "off",
    near_distance: int = 4,
    seed: int = 0,
) -> tuple[pa.Table, pa.Table]:
    """Assign splits. ``candidates``: key, wnid, similarity, sha256 (+ phash) of valid images.

    Returns (assignment: the candidates kept with ``split`` added, in write order;
    per-class report: wnid, n_valid, n_unique, n_kept, n_test, n_val, n_train, status).
    """
    order = pc.sort_indices(candidates, [("similarity", "descending"), ("key", "ascending")])
    cand = candidates.take(order)
    sha = cand["sha256"].to_pylist()
    seen: set[str] = set()
    keep = np.ones(cand.num_rows, dtype=bool)
    for i, h in enumerate(sha):
        if h in seen:
            keep[i] = False
        seen.add(h)
    if near_duplicates == "phash":
        idx = np.flatnonzero(keep)
        ph = cand["phash"].to_numpy(zero_copy_only=False)[idx]
        keep[idx[near_duplicate_mask(ph, near_distance)]] = False
    elif near_duplicates != "off":
        raise ValueError(f"near_duplicates {near_duplicates!r} is not one of 'off', 'phash'")
    if short_classes not in ("drop", "keep"):
        raise ValueError(f"short_classes {short_classes!r} is not one of 'drop', 'keep'")

    wnids = np.asarray(cand["wnid"].to_pylist(), dtype=object)
    need = test_per_class + val_per_class + 1
    splits = np.full(cand.num_rows, "", dtype=object)
    report = []
    for wnid in sorted(set(wnids.tolist())):
        in_class = wnids == wnid
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
        report.append(
            {
                "wnid": wnid,
                "n_valid": int(in_class.sum()),
                "n_unique": len(unique),
                "n_kept": len(kept) if status != "dropped" else 0,
                "n_test": n["test"],
                "n_val": n["val"],
                "n_train": n["train"],
                "status": status,
            }
        )
    chosen = np.flatnonzero(splits != "")
    out = cand.take(pa.array(chosen)).append_column(
        "split", pa.array(splits[chosen].tolist(), pa.string())
    )
    # write order: train shuffled (seeded), val and test by (wnid, key)
    train = np.flatnonzero(out["split"].to_numpy(zero_copy_only=False) == "train")
    train = train[np.random.default_rng([seed, 1]).permutation(len(train))]
    rest = out.filter(pc.not_equal(out["split"], "train"))
    rest = rest.take(pc.sort_indices(rest, [("wnid", "ascending"), ("key", "ascending")]))
    out = pa.concat_tables([out.take(pa.array(train, pa.int64())), rest])
    return out, pa.Table.from_pylist(report)


def read_parts(parts: list[str | os.PathLike]) -> pa.Table:
    """Concatenate per-part status tables, adding ``part_tar`` (the tar beside each table)."""
    tables = []
    for path in parts:
        path = Path(path)
        t = pq.read_table(path)
        tar = str(path.with_suffix(".tar"))
        tables.append(t.append_column("part_tar", pa.array([tar] * t.num_rows, pa.string())))
    return pa.concat_tables(tables) if tables else pa.table({})


def build_dataset(
    selection_path: str | os.PathLike,
    part_tables: list[str | os.PathLike],
    out_dir: str | os.PathLike,
    report_dir: str | os.PathLike,
    *,
    images_per_class: int,
    test_per_class: int,
    val_per_class: int,
    short_classes: str = "drop",
    near_duplicates: str = "off",
    near_distance: int = 4,
    seed: int = 0,
    shard_size: int = 5000,
) -> Path:
    """Fill, split and write a LAION-built dataset; write download and class reports."""
    from imagenot.acquire.download import read_selection, reason_counts

    selection = read_selection(selection_path).select(["key", "wnid", "similarity"])
    status = read_parts(part_tables)
    sel_keys = set(selection["key"].to_pylist())
    status_keys = status["key"].to_pylist()
    if set(status_keys) != sel_keys or len(status_keys) != len(sel_keys):
        raise ValueError(
            f"download parts of {selection_path} do not cover the selection exactly "
            f"({len(status_keys)} status rows for {len(sel_keys)} selected keys); rerun the downloads"
        )
    report_dir = Path(report_dir)
    stats = [
        row for path in part_tables for row in reason_counts(pq.read_table(path), Path(path).stem)
    ]
    write_parquet(pa.Table.from_pylist(stats), report_dir / "download_stats.parquet")
    write_csv(pa.Table.from_pylist(stats), report_dir / "download_stats.csv")

    ok = status.filter(pc.equal(status["reason"], "success"))
    candidates = ok.join(selection, "key", join_type="inner")
    assignment, report = plan_splits(
        candidates,
        images_per_class=images_per_class,
        test_per_class=test_per_class,
        val_per_class=val_per_class,
        short_classes=short_classes,
        near_duplicates=near_duplicates,
        near_distance=near_distance,
        seed=seed,
    )
    write_parquet(report, report_dir / "classes_report.parquet")
    write_csv(report, report_dir / "classes_report.csv")
    dropped = [r["wnid"] for r in report.to_pylist() if r["status"] == "dropped"]
    if dropped:
        log.warning("%d class(es) dropped as short: %s", len(dropped), ", ".join(dropped[:20]))
    classes = sorted(set(assignment["wnid"].to_pylist()))
    if not classes:
        raise ValueError(f"{selection_path}: no class has enough valid images to build a dataset")

    reader = ShardReader(Path.cwd())

    def lazy(tar: str, offset: int, length: int):
        return lambda: reader.read(tar, offset, length)

    records = (
        Record(
            r["key"],
            r["wnid"],
            r["split"],
            lazy(r["part_tar"], r["offset"], r["length"]),
            r["similarity"],
        )
        for r in assignment.select(
            ["key", "wnid", "split", "part_tar", "offset", "length", "similarity"]
        ).to_pylist()
    )
    manifest = write_dataset(out_dir, records, classes, shard_size=shard_size, with_similarity=True)
    reader.close()
    log.info("%s: %d images, %d classes", out_dir, assignment.num_rows, len(classes))
    return manifest
