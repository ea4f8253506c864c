"""Step 6: keep the captions that mention lemmas of exactly one candidate class (per shard).

Output columns: ``key`` (``{shard}-{row:09d}``), ``shard``, ``row``, ``URL``, ``TEXT``, ``hash``
(null when the shard has none), ``wnid``. Rows whose ``punsafe`` exceeds ``max_punsafe`` (when
set and the shard has the column) and rows without a URL are dropped and counted.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CAPTION_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("shard", pa.string()),
        ("row", pa.int64()),
        ("URL", pa.string()),
        ("TEXT", pa.string()),
        ("hash", pa.int64()),
        ("wnid", pa.string()),
    ]
)


def one_class_rows(matches: pa.Table, class_wnids: list[str]) -> tuple[pa.Table, dict]:
    """(row, wnid) for rows whose matches, restricted to ``class_wnids``, name exactly one class."""
    kept = matches.filter(
        pc.is_in(matches.column("wnid"), value_set=pa.array(class_wnids, pa.string()))
    )
    grouped = kept.group_by("row").aggregate([("wnid", "count"), ("wnid", "min")])
    single = grouped.filter(pc.equal(grouped.column("wnid_count"), 1))
    table = pa.table({"row": single.column("row"), "wnid": single.column("wnid_min")}).sort_by(
        "row"
    )
    stats = {
        "class_captions": grouped.num_rows,
        "ambiguous_captions": grouped.num_rows - single.num_rows,
    }
    return table, stats


def shard_captions(
    shard_path: str | os.PathLike,
    shard_name: str,
    matches: pa.Table,
    class_wnids: list[str],
    max_punsafe: float | None = None,
) -> tuple[pa.Table, dict]:
    """Step 6 for one shard: the single-class captions with their URL/TEXT/hash, and counts."""
    from imagenot.curate.shards import open_shard

    parquet = open_shard(shard_path)
    picked, stats = one_class_rows(matches, class_wnids)
    names = parquet.schema_arrow.names
    columns = ["URL", "TEXT"] + [c for c in ("hash", "punsafe") if c in names]
    meta = parquet.read(columns=columns)
    rows = picked.column("row").to_numpy().astype(np.int64)
    if len(rows) and rows.max() >= meta.num_rows:
        raise ValueError(
            f"{shard_path}: match row {rows.max()} is beyond the shard's {meta.num_rows} rows; "
            "the match file is stale"
        )
    sub = meta.take(pa.array(rows))
    keep = np.asarray(sub.column("URL").is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    stats["null_url_removed"] = int((~keep).sum())
    stats["punsafe_removed"] = 0
    if max_punsafe is not None and "punsafe" in names:
        punsafe = pc.fill_null(sub.column("punsafe").cast(pa.float64()), 0.0).to_numpy()
        unsafe = keep & (punsafe > max_punsafe)
        stats["punsafe_removed"] = int(unsafe.sum())
        keep &= ~unsafe
    mask = pa.array(keep)
    rows = rows[keep]
    sub = sub.filter(mask)
    wnids = picked.column("wnid").filter(mask)
    if "hash" in sub.column_names:
        hashes = sub.column("hash").cast(pa.int64())
    else:
        hashes = pa.nulls(len(rows), pa.int64())
    keys = [f"{shard_name}-{r:09d}" for r in rows.tolist()]
    table = pa.table(
        {
            "key": pa.array(keys, pa.string()),
            "shard": pa.array([shard_name] * len(rows), pa.string()),
            "row": pa.array(rows, pa.int64()),
            "URL": sub.column("URL").cast(pa.string()),
            "TEXT": sub.column("TEXT").cast(pa.string()),
            "hash": hashes,
            "wnid": wnids,
        },
        schema=CAPTION_SCHEMA,
    )
    stats["captions"] = table.num_rows
    return table, stats
