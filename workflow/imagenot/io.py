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

from imagenot.lifeline import check_parent

log = logging.getLogger("imagenot")


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


NEW_FILE_MODE = _new_file_mode()


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, suffix: str = "", *, output: bool = True
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only if the block succeeds.

    A job killed while writing leaves no file at ``path`` for a downstream rule to consume. An
    ``output`` (a file the workflow may take as a job's result) is not moved into place once
    the job has ended (:func:`imagenot.lifeline.check_parent`); a recovery file that a later
    attempt only resumes from (a training checkpoint) says ``output=False``.
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
        if output:
            check_parent(path)  # never an output after the job was recorded failed
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
    """Write ``table`` atomically as CSV with a header (for the Snakemake report and people);
    text cells that a spreadsheet would read as a formula are escaped (imagenot.escape)."""
    import pyarrow.csv as pacsv

    from imagenot.escape import csv_table

    with atomic_path(path, ".csv") as tmp:
        pacsv.write_csv(csv_table(table), tmp)
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


def keep_freed_memory(trim_threshold: int = 1 << 30) -> bool:
    """Make glibc's malloc keep freed memory for reuse (process-wide); False where it cannot.

    Batched evaluation allocates and frees tensors of megabytes per transformation and per layer.
    By default glibc maps blocks above its mmap threshold fresh from the kernel and trims the top
    of the heap, so many allocations page-fault on new zeroed pages: at the demo size that costs
    the decode-once evaluation about a quarter of its time (and the per-image way its model
    batches too). With this, every block comes from the heap and the heap is trimmed only above
    ``trim_threshold`` bytes: the process holds its peak heap until it exits. For one-shot
    processes (``imagenot evaluate-robustness``, ``benchmarks/bench_eval.py``, every training job
    through ``imagenot.train.loop.configure``, ``benchmarks/bench_train.py``). Training on the CPU
    frees and re-allocates each step's activations: with glibc's defaults how often they fault
    depends on the allocation history (about 2 x 10^5 faults and 0.2-0.4 s of system time per 16
    efficientnet_mini steps in one order of the same work, near none in another; see
    docs/benchmarks.md).
    """
    import ctypes
    import ctypes.util

    m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc (macOS, Windows)
        return False
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, trim_threshold))
