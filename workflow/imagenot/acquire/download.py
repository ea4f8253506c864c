"""Downloading one part of a caption selection, then validating it.

A selection row goes to part ``sha256(key) mod n_parts``. The part is fetched into its work
folder by :mod:`imagenot.acquire.fetch` (img2dataset, resumable, its faults handled there).
Every fetched image is then decoded once by :func:`imagenot.acquire.images.validate_image`; the
valid ones go, normalised, into one tar per part, and every selection row gets a status row with
its reason.

Faults:

- A success floor: a part of at least ``FLOOR_MIN_ROWS`` rows with a smaller share of valid
  images than ``min_success_rate`` (config ``acquire.min_success_rate``) fails before writing
  anything, with its reason counts; shards whose failures were mostly transient (timeouts,
  network errors) are marked unfinished so that the rerun fetches them again.
- An unreachable part (``acquire.max_unreachable_fraction``) fails the same way
  (:func:`check_reachable`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pyarrow as pa

from imagenot.acquire import images
from imagenot.acquire.dataset import Record, write_shard
from imagenot.acquire.fetch import (
    REUSE,
    TRANSIENT_REASONS,
    DownloadError,
    fetch,
    read_fetched,
    reusable_row,
    unmark_transient_batches,
)
from imagenot.acquire.files import DownloadFiles
from imagenot.acquire.settings import DownloadSettings
from imagenot.core.io import read_parquet, write_parquet

log = logging.getLogger(__name__)

STATUS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("width", pa.int64()),
        ("height", pa.int64()),
        ("mode", pa.string()),
        ("sha256", pa.string()),
        ("phash", pa.int64()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
    ]
)

# The success floor applies to parts of at least this many rows: in a smaller part (a top-up
# round's few reserve rows) a low success share is chance, and failing it would be a dead end.
FLOOR_MIN_ROWS = 50


def part_of(keys: list[str], n_parts: int) -> np.ndarray:
    """Part index of each key: sha256(key) mod n_parts (stable, independent of row order)."""
    return np.fromiter(
        (int.from_bytes(hashlib.sha256(k.encode()).digest()[:8], "big") % n_parts for k in keys),
        dtype=np.int64,
        count=len(keys),
    )


def select_part(selection: pa.Table, part: int, n_parts: int) -> pa.Table:
    """Rows of ``selection`` (:func:`read_selection`) in ``part``, sorted by key."""
    keys = selection["key"].to_pylist()
    if len(set(keys)) != len(keys):
        raise ValueError("selection has duplicate keys")
    return selection.filter(pa.array(part_of(keys, n_parts) == part)).sort_by("key")


def validate_fetched(
    folder: str | os.PathLike,
    part_table: pa.Table,
    out_tar: str | os.PathLike,
    out_status: str | os.PathLike,
    settings: DownloadSettings,
) -> pa.Table:
    """Decode every fetched image once; write the valid ones to ``out_tar`` and a status table.

    The status table has one row per selection row of the part (``STATUS_SCHEMA``); a row
    img2dataset never reported is an error (the download did not finish). A part below the
    success floor ``settings.min_success_rate`` fails before writing anything (module
    docstring); the images are normalised as ``settings`` say.
    """
    from tqdm import tqdm

    folder = Path(folder)
    keys = part_table["key"].to_pylist()
    url_of = dict(zip(keys, part_table["URL"].to_pylist(), strict=True))
    # rows kept from earlier work first, this selection's own fetch overrides them
    fetched = read_fetched(folder.parent / REUSE, lambda m: reusable_row(m, url_of))
    fetched.update(read_fetched(folder, lambda m: m["sel_key"] in url_of))

    missing = [k for k in keys if k not in fetched]
    if missing:
        raise DownloadError(
            f"{folder}: {len(missing)} selection rows not downloaded (first {missing[0]!r}); rerun"
        )

    rows: list[dict] = []
    records: list[Record] = []
    for key in tqdm(keys, desc=f"validate {Path(out_tar).name}", unit="img", mininterval=5):
        m = fetched[key]
        reason = images.classify_fetch_error(m.get("error_message"))
        row = dict.fromkeys(STATUS_SCHEMA.names)
        row.update(key=key, reason=reason, detail=m.get("error_message"))
        data = m.get("_bytes")
        if reason == images.OK and data is None:
            row.update(reason="other_fetch_error", detail=f"img2dataset status {m.get('status')}")
        rows.append(row)
        if row["reason"] != images.OK:
            continue
        result = images.validate_image(
            data,
            size=settings.image_size,
            resize_mode=settings.resize_mode,
            max_pixels=settings.max_image_pixels,
            min_size=settings.min_image_size,
            quality=settings.jpeg_quality,
        )
        row.update((k, v) for k, v in vars(result).items() if k != "jpeg")
        if result.jpeg is not None:  # its sha256 and place in the tar: once it is written
            row["phash"] = images.phash64(result.jpeg)
            records.append(Record(key, "", "train", result.jpeg))

    _check_floor(folder, rows, settings.min_success_rate)
    spans = write_shard(Path(out_tar), [(r, -1) for r in records], None)
    span_of = {r.key: s for r, (s, _) in zip(records, spans, strict=True)}
    for row in rows:
        if row["key"] in span_of:
            row["offset"], row["length"], row["sha256"] = span_of[row["key"]]
    table = pa.Table.from_pylist(rows, schema=STATUS_SCHEMA)
    write_parquet(table, out_status)
    return table


def _check_floor(folder: Path, rows: list[dict], floor: float) -> None:
    """Fail when a part of ``FLOOR_MIN_ROWS`` rows or more has fewer valid images than
    ``floor`` (a share); unmark its batches that failed mostly transiently."""
    n_ok = sum(r["reason"] == images.OK for r in rows)
    if len(rows) < FLOOR_MIN_ROWS or n_ok >= floor * len(rows):
        return
    counts = Counter(r["reason"] for r in rows)
    refetch = unmark_transient_batches(folder)
    top = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    raise DownloadError(
        f"{folder}: {n_ok} of {len(rows)} images ({100 * n_ok / len(rows):.1f}%) were downloaded "
        f"and valid, below acquire.min_success_rate {floor:g} ({top}); "
        + (
            f"{refetch} batch(es) failed mostly by timeouts or network errors and are "
            "fetched again on a rerun"
            if refetch
            else "check the URLs and the network, or lower acquire.min_success_rate"
        )
    )


def reason_counts(status: pa.Table, part: str) -> list[dict]:
    """One row per reason (all reasons listed, zeros included) for a part's status table."""
    counts = {**dict.fromkeys(images.REASONS, 0), **Counter(status["reason"].to_pylist())}
    return [{"part": part, "reason": r, "count": c} for r, c in counts.items()]


def read_selection(path: str | os.PathLike) -> pa.Table:
    """The curate stage's selection table, with a clear error naming the file."""
    table = read_parquet(path)  # a missing file: FileNotFoundError naming it
    missing = [c for c in ("key", "URL", "wnid", "similarity") if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: selection lacks column(s) {missing}")
    return table


def download_part(
    files: DownloadFiles,
    settings: DownloadSettings,
    *,
    part: int,
    work_dir: str | os.PathLike,
    processes: int,
) -> pa.Table:
    """Fetch and validate one part of ``files.selection`` as ``settings`` say (the rule's
    ``acquire-download`` settings, :class:`~imagenot.acquire.settings.DownloadSettings`; ``processes``
    is the job's thread count; the part is ``part`` of ``settings.download_parts``); write its
    valid images to ``files.tar`` and return its status table (``files.status``). A part whose
    downloads mostly could not reach their hosts fails (:func:`check_reachable`)."""
    n_parts = settings.download_parts
    table = select_part(read_selection(files.selection), part, n_parts)
    log.info("part %d/%d: %d selection rows", part, n_parts, table.num_rows)
    folder = fetch(table, work_dir, settings, processes=processes)
    status = validate_fetched(folder, table, files.tar, files.status, settings)
    counts = {r["reason"]: r["count"] for r in reason_counts(status, str(part)) if r["count"]}
    log.info("part %d: %s", part, json.dumps(counts, sort_keys=True))
    if settings.max_unreachable_fraction is not None:
        check_reachable(counts, part, settings.max_unreachable_fraction, work_dir)
    return status


MIN_ROWS_FOR_UNREACHABLE = 20


def check_reachable(
    counts: Mapping[str, int], part: int, max_fraction: float, work_dir: str | os.PathLike
) -> None:
    """Fail a part whose rows failed with network errors or timeouts at ``max_fraction`` or more.

    Why: on compute nodes without internet every image fails, one by one, and the part would
    "succeed" with almost no images; the shortfall would surface only at the fill, far from its
    cause. Dead links are http errors and do not count. Parts under
    ``MIN_ROWS_FOR_UNREACHABLE`` rows are not judged."""
    total = sum(counts.values())
    unreachable = sum(counts.get(reason, 0) for reason in TRANSIENT_REASONS)
    if total >= MIN_ROWS_FOR_UNREACHABLE and unreachable >= max_fraction * total:
        # No manual step; the batches that failed so are fetched again on the rerun
        refetch = unmark_transient_batches(Path(work_dir) / "img2dataset")
        raise DownloadError(
            f"part {part}: {unreachable} of {total} downloads could not reach their hosts "
            f"(network errors or timeouts, acquire.max_unreachable_fraction = {max_fraction}): "
            "does this node reach the internet? Set acquire.download_on: local (docs/cluster.md) "
            f"and rerun; the {refetch} batch(es) that failed so are fetched again"
        )
