"""Reading LAION metadata shards: lenient validation, clear errors, counted skips.

A shard must have a string-like ``TEXT`` and ``URL`` column (string, large_string, or binary
holding UTF-8); anything else stops the job with an error naming the file and the column.
Caption rows that cannot be used are skipped and counted, never fatal:

- ``null``: TEXT is null;
- ``empty``: TEXT holds only whitespace;
- ``invalid_utf8``: TEXT is not valid UTF-8;
- ``too_long``: TEXT is longer than ``max_caption_bytes`` bytes (megabyte "captions" are page
  dumps, not captions).

Column names: the LAION releases spell the same column differently (``URL`` in laion2B-en and
LAION-400M, ``url`` in Re-LAION and img2dataset output; ``TEXT`` or ``caption``; ``punsafe``
in laion2B-joined, ``NSFW`` tags in LAION-400M). One rule maps a shard's columns to the
workflow's names, for every column it reads (:data:`LAION_COLUMNS`): names are compared
without case and without ``_``, ``-``, spaces and dots, against the spellings listed for each
column. Readers see the workflow's names only (:class:`Shard`). Two columns of a shard that
map to one name are an error naming both; a column that looks like a known one (a close
spelling, or one that contains it) but is not matched is a warning naming it, since it is
ignored: a renamed ``capton`` column would otherwise silently leave the shard without captions
or an unsafe signal.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

# Every LAION column the workflow reads: its name in the workflow, and the spellings of the
# LAION releases it stands for (compared by :func:`normal_column_name`).
LAION_COLUMNS: dict[str, tuple[str, ...]] = {
    "URL": ("URL", "url", "image_url"),
    "TEXT": ("TEXT", "caption", "text"),
    "hash": ("hash",),
    "punsafe": ("punsafe", "p_unsafe", "prob_unsafe"),
    "NSFW": ("NSFW", "nsfw"),
}
STRING_LIKE = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())
SKIP_REASONS = ("null", "empty", "invalid_utf8", "too_long")

if TYPE_CHECKING:
    from imagenot.curate.settings import MatchSettings


class ShardError(ValueError):
    """A LAION shard that cannot be read as captions; the message names file and column."""


def normal_column_name(name: str) -> str:
    """A column name as the rule compares it: lower case, without ``_ - . `` and spaces."""
    return re.sub(r"[\s_.\-]+", "", name).lower()


_SPELLINGS = {normal_column_name(s): c for c, spellings in LAION_COLUMNS.items() for s in spellings}


def column_names(path: str | os.PathLike, names: list[str]) -> dict[str, str]:
    """The workflow's name -> the shard's column, for each of :data:`LAION_COLUMNS` present.

    ShardError when two columns map to one name; a warning naming each column that looks like
    a known spelling (difflib ratio >= 0.8, or one containing it) without matching one."""
    found: dict[str, str] = {}
    for name in names:
        canonical = _SPELLINGS.get(normal_column_name(name))
        if canonical is None:
            _warn_lookalike(path, name)
            continue
        if canonical in found:
            raise ShardError(
                f"{path}: columns {found[canonical]!r} and {name!r} are both the {canonical} "
                f"column (spellings: {', '.join(LAION_COLUMNS[canonical])}); keep one"
            )
        found[canonical] = name
    return found


def _warn_lookalike(path, name: str) -> None:
    normal = normal_column_name(name)
    close = difflib.get_close_matches(normal, list(_SPELLINGS), n=1, cutoff=0.8)
    if not close and len(normal) > 2:
        close = [s for s in _SPELLINGS if len(s) > 3 and s in normal][:1]
    if close:
        canonical = _SPELLINGS[close[0]]
        log.warning(
            "%s: column %r looks like the %s column (spellings: %s) but is not one; it is "
            "ignored (rename it to read it)",
            path,
            name,
            canonical,
            ", ".join(LAION_COLUMNS[canonical]),
        )


class Shard:
    """A LAION parquet shard read under the workflow's column names (:func:`column_names`)."""

    def __init__(self, path: str | os.PathLike, parquet: pq.ParquetFile):
        self.parquet = parquet
        self.columns = column_names(path, parquet.schema_arrow.names)

    @property
    def num_rows(self) -> int:
        return self.parquet.metadata.num_rows

    def iter_batches(self, batch_size: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
        """Batches of ``columns`` (the workflow's names, each present), named as asked."""
        stored = [self.columns[c] for c in columns]
        for batch in self.parquet.iter_batches(batch_size=batch_size, columns=stored):
            yield batch.rename_columns(columns)


def open_shard(path: str | os.PathLike, require_url: bool = True) -> Shard:
    """Open a parquet shard and validate its schema: ShardError naming ``path`` on a file that
    is no parquet, and naming the column when a required one (TEXT, and URL with
    ``require_url``) is missing or not text."""
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ShardError(f"{path}: not a readable parquet file ({exc})") from exc
    shard = Shard(path, parquet)
    schema = parquet.schema_arrow
    for name in ("URL", "TEXT") if require_url else ("TEXT",):
        if name not in shard.columns:
            raise ShardError(
                f"{path}: required column {name!r} is missing (spellings: "
                f"{', '.join(LAION_COLUMNS[name])}; columns: {', '.join(schema.names)})"
            )
        col_type = schema.field(shard.columns[name]).type
        if col_type not in STRING_LIKE and not pa.types.is_dictionary(col_type):
            raise ShardError(
                f"{path}: column {shard.columns[name]!r} has type {col_type}, not a string type"
            )
    return shard


@dataclass
class SkipCounts:
    """Rows read and rows skipped per reason."""

    rows: int = 0
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIP_REASONS, 0))

    def add(self, other: SkipCounts) -> None:
        self.rows += other.rows
        for k, v in other.skipped.items():
            self.skipped[k] += v

    def as_dict(self) -> dict:
        return {"rows": self.rows, "skipped": dict(self.skipped)}


def _as_binary(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    if column.type in (pa.string(), pa.binary()):
        return column.cast(pa.binary())
    return column.cast(pa.large_binary())


def _utf8_valid_mask(binary: pa.Array) -> tuple[np.ndarray, pa.Array | None]:
    """True where the value decodes as UTF-8 (nulls count as valid here), and the whole column
    as strings when every value does (the check is that cast, so it is kept, not repeated)."""
    try:
        text = binary.cast(pa.large_string() if binary.type == pa.large_binary() else pa.string())
        return np.ones(len(binary), dtype=bool), text
    except pa.ArrowInvalid:
        pass
    # Slow path, only for batches that hold invalid bytes.
    mask = np.ones(len(binary), dtype=bool)
    for i, value in enumerate(binary.to_pylist()):
        if value is not None:
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                mask[i] = False
    return mask, None


def clean_captions(
    text: pa.Array | pa.ChunkedArray, settings: MatchSettings
) -> tuple[np.ndarray, pa.Array, SkipCounts]:
    """Usable captions of a TEXT column: (row indices, their text as strings, skip counts);
    ``settings.max_caption_bytes`` bounds a caption."""
    binary = _as_binary(text)
    n = len(binary)
    is_null = np.asarray(binary.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    nbytes = pc.fill_null(pc.binary_length(binary), 0).to_numpy(zero_copy_only=False)
    too_long = ~is_null & (nbytes > settings.max_caption_bytes)
    valid_utf8, as_text = _utf8_valid_mask(binary)
    invalid = ~is_null & ~too_long & ~valid_utf8
    usable = ~is_null & ~too_long & ~invalid
    rows = np.flatnonzero(usable)
    string_type = pa.large_string() if binary.type == pa.large_binary() else pa.string()
    # Usually every row is usable: then the validated column is used as it is, with no copy.
    if len(rows) == n and as_text is not None:
        texts = as_text
    else:
        texts = binary.take(pa.array(rows)).cast(string_type)
    # Blank: empty, or whitespace only (the same Unicode whitespace as utf8_trim_whitespace).
    blank = pc.or_(pc.equal(pc.binary_length(texts), 0), pc.utf8_is_space(texts))
    blank = np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool)
    counts = SkipCounts(rows=n)
    counts.skipped.update(
        null=int(is_null.sum()),
        empty=int(blank.sum()),
        invalid_utf8=int(invalid.sum()),
        too_long=int(too_long.sum()),
    )
    if not blank.any():
        return rows, texts, counts
    keep = ~blank
    return rows[keep], texts.filter(pa.array(keep)), counts


def iter_captions(
    path: str | os.PathLike, settings: MatchSettings
) -> Iterator[tuple[np.ndarray, pa.Array, SkipCounts]]:
    """Batches of (row index in the shard, caption text, skip counts) of a validated shard,
    ``settings.batch_rows`` rows at a time."""
    shard = open_shard(path, settings.require_url)
    offset = 0
    for batch in shard.iter_batches(settings.batch_rows, ["TEXT"]):
        rows, texts, counts = clean_captions(batch.column(0), settings)
        yield rows + offset, texts, counts
        offset += batch.num_rows
