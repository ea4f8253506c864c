"""I/O at the edges: atomic writes, parquet helpers, content hashes, job logging."""

from __future__ import annotations

import contextlib
import functools
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

from imagenot.core.lifeline import check_parent

log = logging.getLogger("imagenot")


_UMASK = os.umask(0)  # read by setting it, then set back
os.umask(_UMASK)
NEW_FILE_MODE = 0o666 & ~_UMASK


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, suffix: str = "", *, output: bool = True
) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only if the block succeeds.

    A job killed while writing leaves no file at ``path`` for a downstream rule to consume. An
    ``output`` (a file the workflow may take as a job's result) is not moved into place once
    the job has ended (:func:`imagenot.core.lifeline.check_parent`); a recovery file that a later
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
    """Write ``table`` atomically to ``path`` (zstd, deterministic bytes for identical input).

    Each data page carries a CRC-32 of its bytes (parquet's page checksum), which
    :func:`read_parquet` verifies: a page damaged after writing is an error naming the file,
    not other numbers read at exit 0."""
    with atomic_path(path, ".parquet") as tmp:
        pq.write_table(table, tmp, **{"compression": "zstd", "write_page_checksum": True, **kwargs})
    return Path(path)


def write_csv(table: pa.Table, path: str | os.PathLike) -> Path:
    """Write ``table`` atomically as CSV with a header (for the Snakemake report and people);
    text cells that a spreadsheet would read as a formula are escaped (imagenot.core.escape)."""
    import pyarrow.csv as pacsv

    from imagenot.core.escape import csv_table

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


def folder_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be a folder of input data (``does not exist``, ``is not a
    directory``, ``is empty``), else None: the config checks' words for a data path."""
    folder = Path(path)
    if not folder.is_dir():
        return "is not a directory" if folder.exists() else "does not exist"
    if next(folder.iterdir(), None) is None:
        return "is empty (is the data copied there yet?)"
    return None


class ArtefactError(ValueError):
    """A file a rule reads is truncated or damaged; the message names it and how it is rebuilt."""


def _damaged(path: Path, what: str, exc: BaseException, hint: str | None = None) -> ArtefactError:
    """The one-line error for a damaged ``path``; a workflow output (a file under the working
    directory's results folder) is moved aside to ``<name>.damaged`` so that the next run of
    the workflow finds it missing and reruns the rule that writes it (Snakemake reruns a job
    whose output is missing, never one whose output is present but damaged). Anything else
    (an input of the user's) is left where it is."""
    from imagenot.core.paths import RESULTS

    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    where = f"{path}: {what} is truncated or damaged ({detail})"
    if hint is not None:  # a record no rule rebuilds: never moved
        return ArtefactError(f"{where}; {hint}")
    aside = path.with_name(f"{path.name}.damaged")
    try:
        if path.resolve().is_relative_to((Path.cwd() / RESULTS).resolve()) and path.is_file():
            os.replace(path, aside)
            return ArtefactError(
                f"{where}; moved aside to {aside.name}: run the workflow again and it reruns "
                "the rule that writes it"
            )
    except OSError:
        pass
    return ArtefactError(f"{where}; if the workflow wrote it, delete it and run the workflow again")


def read_json(path: str | os.PathLike, hint: str | None = None) -> Any:
    """The JSON document at ``path``; a truncated or damaged one raises ArtefactError naming
    it (:func:`_damaged`; ``hint``: what to do instead, for a record that no rule rebuilds,
    which is then never moved). The one JSON reader of files a rule reads."""
    path = Path(path)
    text = path.read_bytes()  # a missing file: FileNotFoundError, which names it
    try:
        return json.loads(text)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise _damaged(path, "JSON file", exc, hint) from None


# What a reader raises on a file it could not read though it may be intact: never "damaged".
_NOT_DAMAGE = (PermissionError, FileNotFoundError, IsADirectoryError)


@contextlib.contextmanager
def _named_damage(path: Path, what: str, errors: tuple = (OSError, pa.ArrowInvalid)):
    """An error of ``errors`` in the block, but for :data:`_NOT_DAMAGE` (a file that is not
    there or not readable: not damage), raised as :func:`_damaged`'s ArtefactError."""
    try:
        yield
    except _NOT_DAMAGE:
        raise
    except errors as exc:
        raise _damaged(path, what, exc) from None


def read_parquet(path: str | os.PathLike, columns: Any = None, **kwargs: Any) -> pa.Table:
    """``pyarrow.parquet.read_table(path, columns=..., **kwargs)`` with page checksums
    verified; a truncated or damaged file raises ArtefactError naming it (:func:`_damaged`).
    The one parquet reader of files a rule reads (with :func:`open_parquet` and
    :func:`iter_parquet`)."""
    path = Path(path)
    open_parquet(path, columns)
    with _named_damage(path, "parquet file"):
        return pq.read_table(path, columns=columns, page_checksum_verification=True, **kwargs)


def open_parquet(path: str | os.PathLike, columns: Any = None) -> pq.ParquetFile:
    """``pyarrow.parquet.ParquetFile`` (schema, metadata) with checksums verified on read;
    a damaged footer raises ArtefactError naming the file, as does a file that lacks one of
    ``columns`` (an intact file of another layout: said as such, never moved aside)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    with _named_damage(path, "parquet file"):
        parquet = pq.ParquetFile(path, page_checksum_verification=True)
    names = parquet.schema_arrow.names
    missing = [c for c in columns or () if c not in names]
    if missing:
        raise ArtefactError(
            f"{path}: lacks column(s) {', '.join(missing)} (it has {', '.join(names)})"
        )
    return parquet


def iter_parquet(path: str | os.PathLike, **kwargs: Any) -> Iterator[pa.RecordBatch]:
    """``open_parquet(path).iter_batches(**kwargs)``; a damaged page raises ArtefactError
    naming the file."""
    parquet = open_parquet(path, kwargs.get("columns"))
    with _named_damage(Path(path), "parquet file"):
        yield from parquet.iter_batches(**kwargs)


def read_npy(path: str | os.PathLike) -> Any:
    """``numpy.load(path)`` of an ``.npy`` array or ``.npz`` archive (read whole, no pickles);
    a truncated or damaged file raises ArtefactError naming it."""
    import zipfile

    import numpy as np

    path = Path(path)  # a missing file: FileNotFoundError, which names it
    with (
        _named_damage(path, "numpy file", (OSError, ValueError, EOFError, zipfile.BadZipFile)),
        open(path, "rb") as f,
    ):
        loaded = np.load(f, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                return {k: loaded[k] for k in loaded.files}
        return loaded


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@functools.cache
def code_version(path: str) -> str:
    """``<file name> sha256:<digest>`` of a file of code or shipped data that jobs read from the
    package: a rule parameter instead of an input, so that Snakemake reruns the job when the
    file's content changes (its params trigger) and records no path of the clone (an input's
    absolute path changes when a finished run is moved to another folder, and every job that
    lists it would run again; its mtime changes on every checkout)."""
    return f"{Path(path).name} sha256:{sha256_file(path)[:16]}"


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
    through ``imagenot.train.device.configure``, ``benchmarks/bench_train.py``). Training on the CPU
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
