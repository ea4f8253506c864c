"""I/O at the edges: atomic writes, parquet helpers, content hashes, job logging."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger("imagenot")


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


NEW_FILE_MODE = _new_file_mode()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only if the block succeeds.

    A job killed while writing leaves no file at ``path`` for a downstream rule to consume.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or ".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():
            tmp_path.chmod(NEW_FILE_MODE)  # mkstemp makes 0600; an ordinary new file is wider
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_parquet(table: pa.Table, path: str | os.PathLike, **kwargs: Any) -> Path:
    """Write ``table`` atomically to ``path`` (zstd, deterministic bytes for identical input)."""
    kwargs.setdefault("compression", "zstd")
    with atomic_path(path, ".parquet") as tmp:
        pq.write_table(table, tmp, **kwargs)
    return Path(path)


def write_csv(table: pa.Table, path: str | os.PathLike) -> Path:
    """Write ``table`` atomically as CSV with a header (for the Snakemake report and people)."""
    import pyarrow.csv as pacsv

    with atomic_path(path, ".csv") as tmp:
        pacsv.write_csv(table, tmp)
    return Path(path)


def write_text(text: str, path: str | os.PathLike) -> Path:
    """Write ``text`` atomically to ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_json(obj: Any, path: str | os.PathLike) -> Path:
    """Write ``obj`` as indented, key-sorted JSON atomically to ``path``."""
    return write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", path)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def setup_logging(verbose: bool = False) -> None:
    """Log to stderr (Snakemake rules redirect it to their ``log:`` file)."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
