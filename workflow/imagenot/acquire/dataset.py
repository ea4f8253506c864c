"""Writing the one on-disk dataset format (:mod:`imagenot.core.dataset`, docs/contracts.md).

Large datasets are written by parallel jobs (:func:`write_part`), each writing its own shards
and a part manifest; :func:`gather_parts` then writes manifest, classes and fingerprint. The
fingerprint covers content only (classes; per row key, wnid, label, split, image sha256), not
where the bytes lie (shard, offset, length), so it is the same whatever the number of jobs.

Tars and manifest are written deterministically (fixed member metadata, fixed order): identical
input gives byte-identical files.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from imagenot.acquire import splits
from imagenot.acquire.files import GatherFiles
from imagenot.acquire.settings import GatherSettings
from imagenot.core import job_usage
from imagenot.core.dataset import (
    CLASSES_FILE,
    FINGERPRINT_FILE,
    MANIFEST_FILE,
    MANIFEST_SCHEMA,
    ORIGINAL_COLUMNS,
    ORIGINALS_DIR,
    SHARD_DIR,
    SPLITS,
    DatasetError,
    check_class_names,
    classes_text,
)
from imagenot.core.files import check_layout
from imagenot.core.io import (
    atomic_path,
    open_parquet,
    read_parquet,
    sha256_bytes,
    write_parquet,
    write_text,
)

CONTENT_COLUMNS = ("key", "wnid", "label", "split", "sha256")
ORDER = "order"  # optional part-manifest column: the row's position in the gathered manifest
PART_META = b"imagenot.part"  # part-manifest schema metadata: JSON {classes, params}

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """One image to store: ``jpeg`` is an RGB JPEG at the dataset's resolution, or a callable
    returning it (read lazily, one image in memory at a time) or None (the source could not be
    read: the record is skipped, its reader counted why). ``source``: where the image came
    from (a path relative to the dataset on disk), kept in the manifest's ``source`` column.
    ``original``: the source file's own bytes, kept in ``originals/`` (or a callable returning
    them, called after ``jpeg``'s: one read of the file serves both); None: none kept."""

    key: str
    wnid: str
    split: str
    jpeg: bytes | Callable[[], bytes | None]
    similarity: float | None = None
    source: str | None = None
    original: bytes | Callable[[], bytes | None] | None = None


def _read(value: bytes | Callable[[], bytes | None] | None) -> bytes | None:
    """A record's bytes, read now where they are read lazily."""
    return value() if callable(value) else value


Span = tuple[int, int, str]  # (offset, length, sha256) of a member's bytes in its tar


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> Span:
    """Add member ``name`` holding ``data``, its metadata fixed (identical input, identical
    tar); return where its bytes lie."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    header = len(info.tobuf(tarfile.USTAR_FORMAT, tar.encoding, tar.errors))
    span = (tar.offset + header, len(data), sha256_bytes(data))  # where the bytes lie
    tar.addfile(info, io.BytesIO(data))
    return span


def write_shard(
    path: Path, members: Sequence[tuple[Record, int]], originals: Path | None
) -> list[tuple[Span, Span | None] | None]:
    """Write one shard atomically, and where a record keeps its original and ``originals``
    names a tar, the original there too: per record the (offset, length, sha256) of its JPEG
    and of its original (None: none kept), or None for a record whose data is None (skipped)."""
    spans: list = []
    with contextlib.ExitStack() as stack:

        def open_tar(where: Path) -> tarfile.TarFile:
            tmp = stack.enter_context(atomic_path(where, ".tar"))
            return stack.enter_context(tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT))

        tar, kept = open_tar(path), None if originals is None else open_tar(originals)
        for rec, label in members:
            data = _read(rec.jpeg)
            if data is None:
                spans.append(None)
                continue
            span = _add(tar, f"{rec.key}.jpg", data)
            _add(tar, f"{rec.key}.cls", str(label).encode("ascii"))
            original = _read(rec.original) if kept is not None else None
            spans.append((span, _add(kept, f"{rec.key}.orig", original) if original else None))
    return spans


def _check_records(
    where: Path, records: Iterable[Record], classes: Sequence[str]
) -> list[tuple[Record, int]]:
    """Check the class list and records (before any shard is written): (record, label) pairs."""
    label_of = {c: i for i, c in enumerate(check_class_names(list(classes), where / CLASSES_FILE))}
    out: list[tuple[Record, int]] = []
    seen: set[str] = set()
    for rec in records:
        if rec.split not in SPLITS:
            raise DatasetError(f"record {rec.key!r}: split {rec.split!r} is not one of {SPLITS}")
        if rec.wnid not in label_of:
            raise DatasetError(f"record {rec.key!r}: class {rec.wnid!r} is not in the class list")
        if rec.key in seen:
            raise DatasetError(f"record {rec.key!r}: duplicate key")
        if "/" in rec.key or "." in rec.key or not 0 < len(rec.key) <= 90:
            raise DatasetError(f"record {rec.key!r}: keys are 1-90 characters without '/' or '.'")
        seen.add(rec.key)
        out.append((rec, label_of[rec.wnid]))
    return out


def _write_shards(
    out_dir: Path,
    pairs: list[tuple[Record, int]],
    shard_size: int,
    prefix: str,
    with_similarity: bool | None,
) -> pa.Table:
    """Write ``pairs`` split by split into ``shards/{split}{prefix}-{i:06d}.tar`` (tars of an
    earlier, larger write are left to the gather, which removes every tar no manifest row names).
    Return the manifest rows, with a ``similarity`` column where ``with_similarity`` (None:
    where some record has one)."""
    rows = []  # per stored record: its manifest columns, similarity, source, original columns
    for split in SPLITS:
        members = [(rec, label) for rec, label in pairs if rec.split == split]
        for index, start in enumerate(range(0, len(members), shard_size)):
            chunk = members[start : start + shard_size]
            name = f"{SHARD_DIR}/{split}{prefix}-{index:06d}.tar"
            kept = f"{ORIGINALS_DIR}/{split}{prefix}-{index:06d}.tar"
            keeps = any(rec.original is not None for rec, _ in chunk)
            spans = write_shard(out_dir / name, chunk, out_dir / kept if keeps else None)
            for (rec, label), both in zip(chunk, spans, strict=True):
                if both is None:
                    continue
                (offset, length, digest), original = both
                manifest = (rec.key, rec.wnid, label, split, digest, name, offset, length)
                kept_at = (kept, *original) if original else (None,) * len(ORIGINAL_COLUMNS)
                rows.append((*manifest, rec.similarity, rec.source, *kept_at))
    n = len(MANIFEST_SCHEMA)
    columns = list(zip(*rows, strict=True)) or [()] * (n + 2 + len(ORIGINAL_COLUMNS))
    table = pa.table(dict(zip(MANIFEST_SCHEMA.names, columns, strict=False)), MANIFEST_SCHEMA)
    similarity, sources, originals = columns[n], columns[n + 1], columns[n + 2 :]
    if any(src is not None for src in sources):
        table = table.append_column("source", pa.array(sources, pa.string()))
    if any(s is not None for s in originals[0]):
        kinds = (pa.string(), pa.int64(), pa.int64(), pa.string())
        for column, values, kind in zip(ORIGINAL_COLUMNS, originals, kinds, strict=True):
            table = table.append_column(column, pa.array(values, kind))
    if with_similarity is None:
        with_similarity = any(s is not None for s in similarity)
    if with_similarity:
        table = table.append_column("similarity", pa.array(similarity, pa.float32()))
    return table


def content_fingerprint(manifest: pa.Table, classes: Sequence[str]) -> str:
    """sha256 of a dataset's content: the class list, then per manifest row (in order) key,
    wnid, label, split and the stored image's sha256.

    Why not the manifest file's sha256: shard names and byte offsets depend on how many jobs
    wrote the shards; what a model is trained and tested on does not, and neither does this.
    """
    h = _fingerprint_start(classes)
    _fingerprint_update(h, manifest)
    return h.hexdigest()


def _fingerprint_start(classes: Sequence[str]):
    return hashlib.sha256(("\n".join(classes) + "\n\0").encode())


def _fingerprint_update(h, rows: pa.Table) -> None:
    """Add manifest rows (in order) to a :func:`content_fingerprint` hash: the same digest
    whether the manifest is hashed whole or window by window. A manifest with stored originals
    (:data:`imagenot.core.dataset.ORIGINAL_COLUMNS`) adds each row's original sha256 (empty where
    none): the reference is evaluated on them."""
    columns = list(CONTENT_COLUMNS)
    if ORIGINAL_COLUMNS[-1] in rows.column_names:
        columns.append(ORIGINAL_COLUMNS[-1])
    for batch in rows.select(columns).to_batches(max_chunksize=1 << 16):
        cols = [c.to_pylist() for c in batch.columns]
        h.update(
            "".join("\t".join(map(str, row)) + "\n" for row in zip(*cols, strict=True)).encode()
        )


def _write_index(
    out_dir: Path, classes: Sequence[str], schema: pa.Schema, windows: Iterable[pa.Table]
) -> Path:
    """The manifest from its ``windows`` of rows in order (one held at a time; the fingerprint
    hashed as they go), then the removal of tars no row names (left by an earlier run),
    classes.txt, and fingerprint.txt last: its presence means done. An error while the
    windows are read leaves the dataset's files as they were."""
    tars: set[str] = set()  # the tars under shards/ and originals/ that rows name
    h = _fingerprint_start(classes)
    with atomic_path(out_dir / MANIFEST_FILE, ".parquet") as tmp:
        options = {"compression": "zstd", "write_page_checksum": True}  # as write_parquet's
        with pq.ParquetWriter(tmp, schema, **options) as writer:
            for rows in windows:
                tars |= set(rows["shard"].unique().to_pylist())
                if ORIGINAL_COLUMNS[0] in rows.column_names:
                    tars |= set(rows[ORIGINAL_COLUMNS[0]].drop_null().unique().to_pylist())
                _fingerprint_update(h, rows)
                writer.write_table(rows)
        for folder in (SHARD_DIR, ORIGINALS_DIR):
            for stale in sorted((out_dir / folder).glob("*.tar")):
                if f"{folder}/{stale.name}" not in tars:
                    stale.unlink()
        write_text(classes_text(classes, out_dir / CLASSES_FILE), out_dir / CLASSES_FILE)
    write_text(h.hexdigest() + "\n", out_dir / FINGERPRINT_FILE)
    return out_dir / MANIFEST_FILE


def write_dataset(
    out_dir: str | os.PathLike,
    records: Iterable[Record],
    classes: Sequence[str],
    *,
    shard_size: int,
    with_similarity: bool | None = None,
) -> Path:
    """Write ``records`` as a dataset directory in one job; return the manifest path.

    Labels are the positions of each record's ``wnid`` in ``classes``. Records keep their given
    order within a split (callers order them: seeded shuffle for training shards). The manifest
    and fingerprint are written last, so a killed job never leaves a manifest without its shards;
    tars of an earlier, larger run are removed.
    """
    out_dir = Path(out_dir)
    pairs = _check_records(out_dir, records, classes)
    table = _write_shards(out_dir, pairs, shard_size, "", with_similarity)
    return _write_index(out_dir, classes, table.schema, [table])


def write_part(
    out_dir: str | os.PathLike,
    records: Iterable[Record],
    classes: Sequence[str],
    part_manifest: str | os.PathLike,
    *,
    part: str,
    shard_size: int,
    with_similarity: bool = False,
    order: Sequence[int] | None = None,
    params: dict | None = None,
) -> pa.Table:
    """One parallel job's share of a dataset: its shards ``shards/{split}-{part}-{i:06d}.tar``
    in ``out_dir`` and its part manifest (manifest columns, ``order`` when given: each record's
    row in the gathered manifest), written last and atomically. ``classes`` is the whole
    dataset's class list (labels are global); it and ``params`` go in the part manifest's
    metadata, so that :func:`part_is_done` can tell a finished part from a stale one.
    """
    out_dir = Path(out_dir)
    if not part or "/" in part or "." in part:
        raise DatasetError(f"part name {part!r}: expected a non-empty name without '/' or '.'")
    records = list(records)
    pairs = _check_records(out_dir, records, classes)
    table = _write_shards(out_dir, pairs, shard_size, f"-{part}", with_similarity)
    if order is not None:
        position = {r.key: o for r, o in zip(records, order, strict=True)}
        table = table.append_column(
            ORDER, pa.array([position[k] for k in table["key"].to_pylist()], pa.int64())
        )
    meta = {"classes": list(classes), "params": params or {}}
    table = table.replace_schema_metadata({PART_META: json.dumps(meta, sort_keys=True)})
    write_parquet(table, part_manifest)
    return table


def _part_meta(schema: pa.Schema, path: Path) -> dict:
    raw = (schema.metadata or {}).get(PART_META)
    if raw is None:
        raise DatasetError(f"{path}: not a part manifest (no {PART_META.decode()} metadata)")
    return json.loads(raw)


def part_is_done(
    out_dir: str | os.PathLike, part_manifest: str | os.PathLike, params: dict
) -> bool:
    """True when ``part_manifest`` was written with the same ``params`` and every shard it
    names is on disk and long enough: rerunning that part would write the same files."""
    path = Path(part_manifest)
    if not path.is_file():
        return False
    try:
        table = read_parquet(path)
        if _part_meta(table.schema, path).get("params") != json.loads(json.dumps(params)):
            return False
    except (DatasetError, pa.ArrowException, ValueError):
        return False
    ends = table.append_column("end", pc.add(table["offset"], table["length"]))
    ends = ends.group_by("shard").aggregate([("end", "max")]).to_pylist()
    out_dir = Path(out_dir)
    return all(
        (out_dir / e["shard"]).is_file() and (out_dir / e["shard"]).stat().st_size >= e["end_max"]
        for e in ends
    )


def gather_parts(
    out_dir: str | os.PathLike, part_manifests: Sequence[str | os.PathLike], *, seed: int
) -> Path:
    """Write a dataset's manifest, classes.txt and fingerprint.txt from its part manifests.

    Row order: by ``order`` where the parts carry it (the LAION build plans every row's place),
    gathered streamed (:func:`_gather_ordered`: the paper's 2 M rows in one local job, one part
    and one window of the manifest held at a time). Otherwise (adapters, parts in class order)
    an image stored in two splits is kept in one (:func:`splits.drop_cross_split_duplicates`),
    then training rows in the seeded permutation ``default_rng([seed, 1])`` of their
    concatenated order, then validation, then test rows: the order a single job writes. Tars
    under ``shards/`` that no part names (left by a run with other parts) are removed.
    """
    out_dir = Path(out_dir)
    for path in part_manifests:
        if not Path(path).is_file():
            raise DatasetError(f"{path}: part manifest not found (its job has not finished)")
    parts = [Path(p) for p in part_manifests]
    if all(ORDER in open_parquet(p).schema_arrow.names for p in parts):
        return _gather_ordered(out_dir, parts)
    classes = _part_classes(parts)
    tables = [read_parquet(path).replace_schema_metadata(None) for path in parts]
    table = pa.concat_tables(tables, promote_options="default")
    _check_unique_keys(out_dir, table["key"])
    if ORDER in table.column_names:
        table = table.sort_by(ORDER).drop_columns([ORDER])
    else:
        table = splits.drop_cross_split_duplicates(table, out_dir, log)
        split = np.asarray(table["split"].to_pylist(), dtype=object)
        train = np.flatnonzero(split == "train")
        train = train[np.random.default_rng([seed, 1]).permutation(len(train))]
        rest = [np.flatnonzero(split == s) for s in ("val", "test")]
        table = table.take(pa.array(np.concatenate([train, *rest]), pa.int64()))
    return _write_index(out_dir, classes, table.schema, [table])


def gather(files: GatherFiles, settings: GatherSettings) -> Path:
    """``acquire-gather``: :func:`gather_parts` of ``files.parts`` into the folder of
    ``files.manifest``, its classes and fingerprint beside it (else a one-line error naming the
    role)."""
    out = Path(files.manifest).parent
    layout = {"manifest": MANIFEST_FILE, "classes": CLASSES_FILE, "fingerprint": FINGERPRINT_FILE}
    check_layout(files, out, layout, "a dataset")
    return gather_parts(out, files.parts, seed=settings.seed)


def _part_classes(parts: Sequence[Path]) -> list[str]:
    """The class list the part manifests carry, one and the same (else DatasetError)."""
    classes = None
    for path in parts:
        part_classes = _part_meta(open_parquet(path).schema_arrow, path)["classes"]
        if classes is not None and part_classes != classes:
            raise DatasetError(f"{path}: class list differs from {parts[0]}'s; rerun the parts")
        classes = part_classes
    return classes


def _check_unique_keys(out_dir: Path, keys: pa.ChunkedArray) -> None:
    if pc.count_distinct(keys).as_py() != len(keys):
        counts = pc.value_counts(keys)
        dup = counts.filter(pc.greater(counts.field("counts"), 1))
        raise DatasetError(f"{out_dir}: key {dup[0]['values']} is in more than one part")


GATHER_WINDOW_ROWS = 1 << 18  # manifest rows held at once by the streamed gather (~50 MB)


def _gather_ordered(out_dir: Path, parts: list[Path], window: int = GATHER_WINDOW_ROWS) -> Path:
    """:func:`gather_parts` for parts that carry ``order`` (every row's place in the manifest),
    in bounded memory: the manifest is written window by window of ``window`` rows (each part
    read in turn, its rows of the window kept), the fingerprint hashed as it goes. Memory: one
    part, one window, and the keys of the dataset (one compact string column, for the check
    that no key is in two parts). The orders must be exactly 0..n-1: a gap or a repeat means
    parts of different plans, and nothing is written."""
    classes = _part_classes(parts)
    schemas, sizes = [], []  # one part's footer open at a time
    for path in parts:
        meta = open_parquet(path)
        schemas.append(meta.schema_arrow.remove_metadata())
        sizes.append(meta.metadata.num_rows)
    n_rows = sum(sizes)
    keys = [read_parquet(path, columns=["key"])["key"] for path in parts]
    _check_unique_keys(out_dir, pa.chunked_array([c for k in keys for c in k.chunks], pa.string()))
    del keys
    # held at once: a window's pieces and their sorted copy, and the part being read
    job_usage.declare_rows_held(2 * window + max(sizes))
    schema = pa.unify_schemas(schemas)
    out_schema = pa.schema([f for f in schema if f.name != ORDER])

    def windows() -> Iterator[pa.Table]:
        for start in range(0, n_rows, window):
            stop = min(start + window, n_rows)
            rows = _window(parts, schema, start, stop)
            order = rows[ORDER].to_numpy()
            if not np.array_equal(order, np.arange(start, stop)):
                raise DatasetError(
                    f"{out_dir}: the parts' row orders are not 0..{n_rows - 1} (rows "
                    f"{start}..{stop - 1}): parts of different plans; rerun the parts"
                )
            yield rows.drop_columns([ORDER]).cast(out_schema)

    return _write_index(out_dir, classes, out_schema, windows())


def _window(parts: list[Path], schema: pa.Schema, start: int, stop: int) -> pa.Table:
    """Rows of every part whose ``order`` is in [start, stop), sorted by it (one part read at
    a time; columns a part lacks are null)."""
    pieces = []
    for path in parts:
        table = read_parquet(path).replace_schema_metadata(None)
        order = table[ORDER]
        keep = pc.and_(pc.greater_equal(order, start), pc.less(order, stop))
        piece = table.filter(keep)
        for field in schema:
            if field.name not in piece.column_names:
                piece = piece.append_column(field, pa.nulls(piece.num_rows, field.type))
        pieces.append(piece.select(schema.names).cast(schema))
        del table
    return pa.concat_tables(pieces).sort_by(ORDER)
