"""What is read is what was written: the shared readers of imagenot.core.io name a
truncated or damaged file in one line, and a damaged workflow output is moved aside so that the
next run of the workflow rebuilds it."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from imagenot.core.io import (
    ArtefactError,
    iter_parquet,
    open_parquet,
    read_json,
    read_npy,
    read_parquet,
    write_json,
    write_parquet,
)


def _table() -> pa.Table:
    return pa.table({"key": [f"k{i}" for i in range(5000)], "x": np.arange(5000.0)})


def _truncate(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _written(kind: str, path):
    if kind == "json":
        write_json({"a": list(range(100))}, path)
        return lambda: read_json(path)
    if kind == "parquet":
        write_parquet(_table(), path)
        return lambda: read_parquet(path)
    if kind == "parquet-batches":
        write_parquet(_table(), path)
        return lambda: list(iter_parquet(path, batch_size=100))
    if kind == "parquet-meta":
        write_parquet(_table(), path)
        return lambda: open_parquet(path).metadata
    np.save(path, np.arange(1000.0))
    return lambda: read_npy(path)


KINDS = ["json", "parquet", "parquet-batches", "parquet-meta", "npy"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_truncated_file_is_one_line_naming_it_and_left_alone_outside_results(
    tmp_path, monkeypatch, kind
):
    monkeypatch.chdir(tmp_path)  # no results/ around the file: an input of the user's
    path = tmp_path / "inputs" / f"f.{kind.split('-')[0]}"
    path.parent.mkdir()
    read = _written(kind, path)
    read()  # as written, it reads
    _truncate(path)
    with pytest.raises(ArtefactError) as info:
        read()
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "truncated or damaged" in message
    assert "\n" not in message and "delete it and run the workflow again" in message
    assert path.is_file()  # never moved: the workflow did not write it


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_workflow_output_is_moved_aside_for_the_next_run(tmp_path, monkeypatch, kind):
    """Snakemake reruns a job whose output is missing, never one whose output is present but
    damaged: the reader takes the file out of its place, so the next run rebuilds it."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "results" / "stage" / f"f.{kind.split('-')[0]}"
    path.parent.mkdir(parents=True)
    read = _written(kind, path)
    _truncate(path)
    with pytest.raises(ArtefactError, match=r"moved aside to f\.\w+\.damaged: run the workflow"):
        read()
    assert not path.exists() and path.with_name(f"{path.name}.damaged").is_file()


def test_a_damaged_parquet_page_is_found_by_its_checksum(tmp_path):
    """Same size, one page's bytes changed: without the page checksum this may read as other
    numbers; write_parquet stores a CRC per page and read_parquet verifies it."""
    path = tmp_path / "t.parquet"
    write_parquet(_table(), path)
    meta = pq.ParquetFile(path).metadata
    page = meta.row_group(0).column(1).data_page_offset
    data = bytearray(path.read_bytes())
    for i in range(page + 40, page + 48):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ArtefactError, match=rf"{path.name}: parquet file is truncated or damaged"):
        read_parquet(path)


def test_missing_files_stay_file_not_found(tmp_path):
    for read in (read_json, read_parquet, read_npy):
        with pytest.raises(FileNotFoundError, match=r"nope"):
            read(tmp_path / "nope")


def test_a_command_reading_a_truncated_json_ends_in_one_line(tmp_path, monkeypatch, capsys):
    """Through a rule's command (train-select reads the trials' results): exit 2, one line."""
    from imagenot.cli import main

    monkeypatch.chdir(tmp_path)
    from trial_records import write_slot

    good = tmp_path / "results" / "slot-0.json"
    write_slot(good)
    bad = tmp_path / "results" / "slot-1.json"
    bad.write_text(json.dumps({"trial": 1, "val_accuracy": 60.0})[:10])
    out = tmp_path / "results" / "selection.json"
    assert main(["train-select", "--results", str(good), str(bad), "--selection", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"imagenot train-select: error: {bad}: ")
    assert not out.exists() and not bad.exists() and os.path.exists(f"{bad}.damaged")


def test_the_preregistration_record_is_never_moved_aside(tmp_path, monkeypatch):
    """No rule rebuilds the preregistration record: moved aside, the next run would register
    anew, so a damaged one stops the run and stays where it is."""
    from imagenot.train.plan import PREREGISTRATION
    from imagenot.train.records import read_registration

    monkeypatch.chdir(tmp_path)
    path = tmp_path / PREREGISTRATION
    path.parent.mkdir(parents=True)
    path.write_text('{"experiments": {"imagenot/st": ')
    with pytest.raises(
        ArtefactError, match=r"preregistration\.json: JSON file is truncated.*never"
    ):
        read_registration(path)
    assert path.is_file()


def test_an_intact_file_of_another_layout_is_not_called_damaged(tmp_path, monkeypatch):
    """A column the reader needs that the file lacks: said as such, and the file stays."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "results" / "t.parquet"
    write_parquet(_table(), path)
    for read in (
        lambda: read_parquet(path, columns=["key", "wnid"]),
        lambda: list(iter_parquet(path, columns=["wnid"])),
    ):
        with pytest.raises(ArtefactError, match=r"t\.parquet: lacks column\(s\) wnid \(it has key"):
            read()
    assert path.is_file()
