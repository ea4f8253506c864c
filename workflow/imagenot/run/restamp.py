"""A finished run copied without its file times: told apart, and its recorded times set back.

Snakemake reruns a job when one of its inputs is newer than its oldest output, unless the input
is a file of at most ``--max-checksum-file-size`` (1 MB) whose sha256 is the one the job
recorded. A folder (``directory()``: WordNet's ``results/wordnet/nltk_data``, the demo world's
images) and a larger file (a dataset's shards and manifest, a model's weights) have no such
checksum: a copy that gives every file the time it was copied (``cp -r``, ``rsync`` without
``-t``, many cluster and cloud copies) makes them newer than the outputs made from them, in
whatever order the copy wrote them, and the copy of a finished demo run plans most of its jobs
again. A stamp file with a checksum beside each folder would cover the folders only, not the
large files, and a finished run would have to redo every job to get them.

What holds instead: Snakemake records, for every output, the time it carried when its job ended
(``endtime`` in ``.snakemake/metadata``, the file's modification time then; a folder's is its
``.snakemake_timestamp``'s). :func:`restamp` sets each output still on disk back to that time,
so a faithful copy is, to Snakemake, the run it was copied from, and plans what that run plans
(nothing, for a finished one). :func:`copied_without_times` tells such a copy apart cheaply
(a few records) for the line the workflow prints before planning (rules/common.smk). The
records are read as JSON and nothing in them is run.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import os
from collections.abc import Iterator
from pathlib import Path

METADATA = Path(".snakemake") / "metadata"
DIR_STAMP = ".snakemake_timestamp"  # Snakemake's carrier of a directory output's time
SAMPLE = 20  # records read to tell a copy without times apart
TOLERANCE_S = 1.0  # file systems that keep whole seconds, or two-second FAT times, differ a bit


def _decode(name_parts: tuple[str, ...]) -> str | None:
    """The output path a metadata file's path encodes (Snakemake: the path's url-safe base64,
    cut into folders named ``@<piece>`` where it is longer than a file name may be)."""
    try:
        return base64.urlsafe_b64decode("".join(p.removeprefix("@") for p in name_parts)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def records(workdir: str | os.PathLike) -> Iterator[tuple[str, float]]:
    """(output path relative to ``workdir``, the time Snakemake recorded for it when its job
    ended) of each output record of the run in ``workdir`` that carries an end time, in the
    order the file system lists them (read lazily: a caller may stop after a few). Unreadable or foreign files are passed over, and so
    is a record of a path outside the working directory."""
    root = Path(workdir) / METADATA
    if not root.is_dir():
        return
    for file in root.rglob("*"):  # lazily: the check before planning reads a few
        if file.is_symlink() or not file.is_file():
            continue
        path = _decode(file.relative_to(root).parts)
        if path is None or os.path.isabs(path) or ".." in Path(path).parts:
            continue  # only outputs inside the working directory are the run's
        try:
            record = json.loads(file.read_text())
            endtime = float(record["endtime"])
        except (OSError, ValueError, TypeError, KeyError):
            continue
        if record.get("incomplete"):
            continue
        yield path, endtime


def _carrier(path: Path) -> Path:
    """The file whose time Snakemake reads for output ``path``."""
    stamp = path / DIR_STAMP
    if path.is_dir() and not path.is_symlink() and stamp.exists():
        return stamp
    return path


def _mtime(path: Path) -> float | None:
    try:
        return _carrier(path).lstat().st_mtime
    except OSError:
        return None


def copied_without_times(workdir: str | os.PathLike = ".") -> str | None:
    """One line when the run in ``workdir`` looks copied without its file times (most of the
    first :data:`SAMPLE` recorded outputs on disk carry another time than Snakemake recorded),
    naming the command that sets them back; None otherwise (a run made here, or moved or copied
    with its times: ``mv``, ``cp -a``, ``rsync -a``)."""
    workdir = Path(workdir)
    checked = differ = 0
    for path, endtime in itertools.islice(records(workdir), SAMPLE):
        mtime = _mtime(workdir / path)
        if mtime is None:
            continue  # a temporary output, removed
        checked += 1
        differ += abs(mtime - endtime) > TOLERANCE_S
    if not checked or differ * 2 <= checked:
        return None
    where = os.path.abspath(workdir)
    return (
        f"imagenot: {differ} of {checked} outputs checked in {where} do not carry the time "
        "Snakemake recorded when it made them (a copy that did not keep file times: cp -r, "
        "rsync without -t), so jobs whose inputs now look newer would run again; if this is "
        f"an unchanged copy of a run, `.venv/bin/imagenot restamp --directory {where}` (from the "
        "clone) sets the recorded times back"
    )


def restamp(workdir: str | os.PathLike = ".") -> tuple[int, int, int]:
    """Set every output of the run in ``workdir`` that Snakemake recorded, and that is still on
    disk, back to the time recorded for it (a folder: its ``.snakemake_timestamp``; a link: the
    link itself, as Snakemake does). Only times change; no file is written or read but the
    records. What it did: (outputs set back to their recorded time, outputs that carried it
    already, recorded outputs not on disk: temporary ones, removed after use)."""
    workdir = Path(workdir)
    set_back = unchanged = missing = 0
    for path, endtime in records(workdir):
        mtime = _mtime(workdir / path)
        if mtime is None:
            missing += 1
        elif abs(mtime - endtime) <= TOLERANCE_S / 1000:
            unchanged += 1
        else:
            os.utime(_carrier(workdir / path), (endtime, endtime), follow_symlinks=False)
            set_back += 1
    return set_back, unchanged, missing


def main(directory: str | None) -> int:
    """Set the outputs of a run copied without its file times (cp -r) back to the times
    Snakemake recorded for them, so that the copy plans what the run it was copied from plans
    (nothing, for a finished run)."""
    workdir = Path(directory or ".")
    if not (workdir / METADATA).is_dir():
        raise FileNotFoundError(
            f"{workdir}: no {METADATA} here: not the working directory of a Snakemake run"
        )
    set_back, unchanged, missing = restamp(workdir)
    print(
        f"{workdir}: {set_back} outputs set back to their recorded time, {unchanged} "
        f"carried it already, {missing} recorded but not on disk (temporary outputs)"
    )
    return 0
