"""Step 6: keep the captions that mention lemmas of exactly one candidate class (per shard).

Output columns: ``key`` (``{shard_id}-{row:09d}``: the shard's short id, never its file name, so
any LAION file name works), ``shard`` (the shard's file name, for provenance), ``row``, ``URL``,
``TEXT``, ``hash`` (null when the shard has none), ``wnid``. Rows without a URL are dropped and
counted, and so are rows LAION marks unsafe, by whichever signal the shard's layout carries:
``punsafe`` above ``max_punsafe`` (laion2B/laion5B layouts), or an ``NSFW`` tag in ``nsfw_tags``
(LAION-400M layout). A null signal counts as unsafe unless ``unknown_nsfw`` is ``"safe"``; a
``punsafe`` that is no probability (NaN, infinity, any value outside [0, 1]) is a null signal
too, counted apart by that one reason (``punsafe_not_probability``), never compared with the
cut (every comparison with NaN is false, so a NaN would be kept as safe; -inf or -2 would pass
the cut and 7.5 fail it, by accident of the number).

Memory is bounded by ``batch_rows``, not by the shard: a laion2B-en part has ~450 M matches. The
match file is sorted by row, so it is read one row group at a time (a caption's matches that
straddle two row groups are carried over), and the shard's columns are read batch by batch in
step with the sorted rows picked from it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.core.io import iter_parquet

if TYPE_CHECKING:
    from imagenot.curate.settings import CaptionSettings

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


def caption_keys(shard_id: str, rows: np.ndarray) -> pa.Array:
    """``{shard_id}-{row:09d}`` for each row (vectorised)."""
    padded = pc.utf8_lpad(pa.array(rows, pa.int64()).cast(pa.string()), 9, "0")
    return pc.binary_join_element_wise(pa.scalar(shard_id), padded, "-")


def one_class_rows(matches: pa.Table, class_wnids: list[str]) -> tuple[pa.Table, dict]:
    """(row, wnid) for rows whose matches, restricted to ``class_wnids``, name exactly one class."""
    keep = pc.is_in(matches.column("wnid"), value_set=pa.array(class_wnids, pa.string()))
    kept = matches.select(["row", "wnid"]).filter(keep)
    grouped = kept.group_by("row").aggregate([("wnid", "count"), ("wnid", "min")])
    single = grouped.filter(pc.equal(grouped.column("wnid_count"), 1))
    table = single.select(["row", "wnid_min"]).rename_columns(["row", "wnid"]).sort_by("row")
    stats = {
        "class_captions": grouped.num_rows,
        "ambiguous_captions": grouped.num_rows - single.num_rows,
    }
    return table, stats


def iter_one_class_rows(
    matches_path: str | os.PathLike, class_wnids: list[str], batch_rows: int, stats: dict
) -> Iterator[pa.Table]:
    """``one_class_rows`` over a match file read ``batch_rows`` matches at a time, in row order.

    The last row of each batch may continue in the next one: it is held back and joined to it.
    ``stats`` accumulates ``class_captions`` and ``ambiguous_captions``.
    """

    for name in ("class_captions", "ambiguous_captions"):
        stats.setdefault(name, 0)

    def pick(table: pa.Table) -> pa.Table:
        picked, counts = one_class_rows(table, class_wnids)
        for name, n in counts.items():
            stats[name] += n
        return picked

    schema = pa.schema([("row", pa.int64()), ("wnid", pa.string())])
    carry = schema.empty_table()
    for batch in iter_parquet(matches_path, batch_size=batch_rows, columns=["row", "wnid"]):
        table = pa.concat_tables([carry, pa.Table.from_batches([batch]).cast(schema)])
        if table.num_rows == 0:
            continue
        tail = pc.equal(table.column("row"), table.column("row")[-1])
        carry = table.filter(tail)
        yield pick(table.filter(pc.invert(tail)))
    if carry.num_rows:
        yield pick(carry)


def unsafe_rows(
    settings: CaptionSettings, table: pa.Table, path
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(unsafe, signal null, punsafe not a probability) masks of a table's rows by LAION's own
    unsafe-image signal, per layout: ``punsafe`` above ``settings.max_punsafe``, or an ``NSFW``
    tag in ``settings.nsfw_tags``; a null signal (a ``punsafe`` outside [0, 1] or NaN is one)
    is unsafe when ``settings.unknown_nsfw`` says so."""
    unsafe, null, improbable = np.zeros((3, table.num_rows), dtype=bool)
    if settings.max_punsafe is not None and "punsafe" in table.column_names:
        punsafe = _typed(table.column("punsafe"), pa.float64(), path, "punsafe")
        missing = np.asarray(punsafe.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        values = pc.fill_null(punsafe, 0.0).to_numpy()
        with np.errstate(invalid="ignore"):  # NaN compares false: not in [0, 1]
            improbable = ~((values >= 0.0) & (values <= 1.0))  # no probability: NaN, inf, -2, 7.5
        unsafe |= ~improbable & (values > settings.max_punsafe)
        null |= missing | improbable
    if settings.nsfw_tags and "NSFW" in table.column_names:
        tags = _typed(table.column("NSFW"), pa.string(), path, "NSFW")
        missing = np.asarray(tags.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        hit = pc.is_in(tags, value_set=pa.array(list(settings.nsfw_tags), pa.string()))
        unsafe |= np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), bool)
        null |= missing
    if settings.unknown_nsfw == "unsafe":
        unsafe |= null
    return unsafe, null, improbable


def _typed(column: pa.ChunkedArray | pa.Array, to: pa.DataType, path, name: str) -> pa.Array:
    """``column`` cast to ``to``; a value that does not parse names the file and the column."""
    try:
        return column.cast(to)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"{path}: column {name!r} cannot be read as {to} ({exc})") from exc


def iter_shard_captions(
    shard_path: str | os.PathLike,
    matches_path: str | os.PathLike,
    class_wnids: list[str],
    settings: CaptionSettings,
    stats: dict | None = None,
) -> Iterator[pa.Table]:
    """Step 6 for one shard (short id ``settings.shard``) as a stream of caption tables
    (``CAPTION_SCHEMA``), in row order, ``settings.batch_rows`` rows at a time.

    ``stats`` (filled as the stream is consumed): ``class_captions``, ``ambiguous_captions``,
    ``null_url_removed``, ``punsafe_removed`` (unsafe by LAION's signal, either layout),
    ``unknown_nsfw_removed`` (of those, rows whose signal was null or no probability),
    ``punsafe_not_probability`` (rows whose ``punsafe`` was NaN, infinite or outside [0, 1],
    treated as null), ``captions``.
    """
    from imagenot.curate.shards import open_shard

    stats = {} if stats is None else stats
    removed = ("null_url_removed", "punsafe_removed", "unknown_nsfw_removed")
    stats.update(dict.fromkeys((*removed, "punsafe_not_probability", "captions"), 0))
    shard = open_shard(shard_path)
    columns = ["URL", "TEXT"] + [c for c in ("hash", "punsafe", "NSFW") if c in shard.columns]
    n_rows = shard.num_rows
    file_name = os.path.basename(shard_path)
    batch_rows = settings.batch_rows

    def captions_of(batch: pa.RecordBatch, picked: pa.Table, offset: int) -> pa.Table:
        """The ``picked`` rows of one shard batch (whose first row is ``offset``) as captions,
        rows without a URL or unsafe dropped and counted."""
        rows = picked.column("row").to_numpy().astype(np.int64)
        sub = pa.Table.from_batches([batch]).take(pa.array(rows - offset))
        keep = np.asarray(sub.column("URL").is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        stats["null_url_removed"] += int((~keep).sum())
        unsafe, unknown, improbable = unsafe_rows(settings, sub, shard_path)
        unsafe &= keep
        stats["punsafe_not_probability"] += int((improbable & keep).sum())
        stats["punsafe_removed"] += int(unsafe.sum())
        stats["unknown_nsfw_removed"] += int((unsafe & unknown).sum())
        keep &= ~unsafe
        mask = pa.array(keep)
        rows = rows[keep]
        sub = sub.filter(mask)
        if "hash" in sub.column_names:
            hashes = _typed(sub.column("hash"), pa.int64(), shard_path, "hash")
        else:
            hashes = pa.nulls(len(rows), pa.int64())
        table = pa.table(
            {
                "key": caption_keys(settings.shard, rows),
                "shard": pa.array([file_name] * len(rows), pa.string()),
                "row": pa.array(rows, pa.int64()),
                "URL": _typed(sub.column("URL"), pa.string(), shard_path, "URL"),
                "TEXT": _typed(sub.column("TEXT"), pa.string(), shard_path, "TEXT"),
                "hash": hashes,
                "wnid": picked.column("wnid").filter(mask),
            },
            schema=CAPTION_SCHEMA,
        )
        stats["captions"] += table.num_rows
        return table

    picked_iter = iter_one_class_rows(matches_path, class_wnids, batch_rows, stats)
    pending = pa.schema([("row", pa.int64()), ("wnid", pa.string())]).empty_table()
    exhausted = False
    offset = 0
    for batch in shard.iter_batches(batch_rows, columns):
        end = offset + batch.num_rows
        # Pull picked rows until one lies beyond this batch (or none are left).
        while not exhausted and (not pending.num_rows or pending["row"][-1].as_py() < end):
            piece = next(picked_iter, None)
            exhausted = piece is None
            pending = pending if exhausted else pa.concat_tables([pending, piece])
        inside = int(np.searchsorted(pending["row"].to_numpy(), end, side="left"))
        here, pending = pending.slice(0, inside), pending.slice(inside)
        if here.num_rows:
            yield captions_of(batch, here, offset)
        offset = end
    leftover = pending.num_rows + sum(t.num_rows for t in picked_iter)
    if leftover:
        raise ValueError(
            f"{shard_path}: {leftover} match row(s) lie beyond the shard's {n_rows} rows; "
            "the match file is stale (rerun curate_match)"
        )


def write_shard_captions(
    shard_path: str | os.PathLike,
    matches_path: str | os.PathLike,
    class_wnids: list[str],
    out: str | os.PathLike,
    settings: CaptionSettings,
) -> dict:
    """Stream step 6 of one shard to ``out`` (atomically); return its stats."""
    from imagenot.curate.match import write_stream

    stats: dict = {}
    tables = iter_shard_captions(shard_path, matches_path, class_wnids, settings, stats)
    write_stream(tables, out, CAPTION_SCHEMA)
    return stats
