"""The on-disk dataset format: writer, readers, determinism, bad input."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from PIL import Image

from imagenot.acquire.dataset import Record, content_fingerprint, write_dataset
from imagenot.core.dataset import (
    DatasetError,
    ManifestDataset,
    load_split_tensors,
    read_classes,
    read_fingerprint,
    read_manifest,
)


def _jpeg(colour: tuple[int, int, int], size: int = 16) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, format="JPEG", quality=95)
    return buf.getvalue()


def _records() -> list[Record]:
    recs = []
    for c, wnid in enumerate(["n001", "n002", "n003"]):
        for i, split in enumerate(["train", "train", "train", "val", "test"]):
            colour = (80 * c, 10 * i, 200)
            recs.append(Record(f"k{c}-{i}", wnid, split, _jpeg(colour), similarity=0.5 + i / 10))
    return recs


def test_write_and_read_roundtrip(tmp_path):
    out = tmp_path / "ds"
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=4)
    manifest = read_manifest(out)
    assert manifest.num_rows == 15
    assert set(manifest.column_names) >= {"key", "wnid", "label", "split", "sha256", "shard"}
    assert "similarity" in manifest.column_names
    assert read_classes(out) == ["n001", "n002", "n003"]
    # the fingerprint is the content's (classes, keys, labels, splits, image hashes)
    assert read_fingerprint(out) == content_fingerprint(manifest, read_classes(out))
    # train has 9 images in shards of 4: three tars; each tar is a valid webdataset shard
    train = read_manifest(out, "train")
    assert sorted(set(train["shard"].to_pylist())) == [
        "shards/train-000000.tar",
        "shards/train-000001.tar",
        "shards/train-000002.tar",
    ]
    with tarfile.open(out / "shards/train-000000.tar") as tar:
        names = tar.getnames()
        assert names[:2] == ["k0-0.jpg", "k0-0.cls"]
        assert tar.extractfile("k0-0.cls").read() == b"0"

    ds = ManifestDataset(out, "train")
    image, label = ds[4]
    assert image.dtype == torch.uint8 and image.shape == (3, 16, 16)
    assert label == train["label"][4].as_py()

    images, labels = load_split_tensors(out, "test")
    assert images.shape == (3, 3, 16, 16) and labels.dtype == torch.int64
    assert labels.tolist() == [0, 1, 2]
    # colour of class 2 test image survives JPEG round trip approximately
    assert abs(int(images[2, 0].float().mean()) - 160) < 4


def test_rewrite_is_byte_identical_and_removes_stale_shards(tmp_path):
    out = tmp_path / "ds"
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=2)
    fp1 = read_fingerprint(out)
    tar1 = (out / "shards/train-000000.tar").read_bytes()
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=2)
    assert read_fingerprint(out) == fp1
    assert (out / "shards/train-000000.tar").read_bytes() == tar1
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=100)
    assert sorted(p.name for p in (out / "shards").iterdir()) == [
        "test-000000.tar",
        "train-000000.tar",
        "val-000000.tar",
    ]


def test_offsets_match_tar_members(tmp_path):
    out = tmp_path / "ds"
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=3)
    table = pq.read_table(out / "manifest.parquet").to_pylist()
    for row in table:
        with tarfile.open(out / row["shard"]) as tar:
            data = tar.extractfile(f"{row['key']}.jpg").read()
        blob = (out / row["shard"]).read_bytes()
        assert blob[row["offset"] : row["offset"] + row["length"]] == data


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Record("x", "n999", "train", b""), "not in the class list"),
        (Record("x", "n001", "holdout", b""), "split 'holdout'"),
        (Record("a.b", "n001", "train", b""), "without"),
    ],
)
def test_bad_records_are_named(tmp_path, bad, message):
    with pytest.raises(DatasetError, match=message):
        write_dataset(tmp_path / "ds", [bad], ["n001"], shard_size=5000)
    assert not (tmp_path / "ds" / "manifest.parquet").exists()


def test_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(DatasetError, match="no manifest"):
        ManifestDataset(tmp_path, "train")


def test_mixed_sizes_rejected_by_load_split_tensors(tmp_path):
    recs = [
        Record("a", "n001", "train", _jpeg((1, 2, 3), 16)),
        Record("b", "n001", "train", _jpeg((1, 2, 3), 8)),
    ]
    write_dataset(tmp_path, recs, ["n001"], shard_size=5000)
    with pytest.raises(DatasetError, match="'b' has shape"):
        load_split_tensors(tmp_path, "train")
    assert np.all(ManifestDataset(tmp_path, "train").labels == 0)


def _damage(path, offset: int, data: bytes) -> None:
    """Overwrite bytes in place: same size, and the mtime put back (what a stray write or a
    bad sector leaves, and what Snakemake cannot see)."""
    import os

    stat = path.stat()
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size


@pytest.mark.parametrize("damage", ["flip", "random"])
def test_a_damaged_shard_is_refused_naming_the_shard_and_image(tmp_path, damage):
    """Flipped bits inside one image, or random bytes over it: refused on read, whatever
    the path (item, header probe, whole split), naming the shard and the key."""
    out = tmp_path / "ds"
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=4)
    row = read_manifest(out, "train").slice(5, 1).to_pylist()[0]
    shard = out / row["shard"]
    start = row["offset"] + row["length"] // 2
    if damage == "flip":
        original = shard.read_bytes()[start : start + 8]
        _damage(shard, start, bytes(b ^ 0x5A for b in original))
    else:
        _damage(shard, row["offset"], np.random.default_rng(0).bytes(row["length"]))
    ds = ManifestDataset(out, "train")
    index = ds.keys.index(row["key"])
    assert ds[index - 1][0].shape == (3, 16, 16)  # the other images of the shard still read
    for read in (lambda: ds[index], lambda: ds.image_shape(index), lambda: ds.read_bytes(index)):
        with pytest.raises(DatasetError) as info:
            read()
        message = str(info.value)
        assert str(shard) in message and repr(row["key"]) in message
        assert "does not match its sha256" in message and "\n" not in message
    with pytest.raises(DatasetError, match=rf"{row['key']}'.*does not match its sha256"):
        load_split_tensors(out, "train")


def test_a_damaged_image_in_a_loader_worker_is_one_line(tmp_path):
    """Raised in a DataLoader worker, the error comes back with the worker's traceback in its
    message; it still prints as the one line naming shard and image."""
    from torch.utils.data import DataLoader

    out = tmp_path / "ds"
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=4)
    row = read_manifest(out, "test").slice(0, 1).to_pylist()[0]
    _damage(out / row["shard"], row["offset"] + 40, b"\x00" * 16)
    loader = DataLoader(ManifestDataset(out, "test"), batch_size=2, num_workers=1)
    with pytest.raises(DatasetError) as info:
        list(loader)
    assert "Original Traceback" in info.value.args[0]  # what torch raised ...
    assert str(info.value).startswith(str(out / row["shard"]))  # ... and what is printed
    assert "\n" not in str(info.value)


def test_a_manifest_without_image_digests_is_refused(tmp_path):
    import pyarrow as pa

    out = tmp_path / "ds"
    write_dataset(out, _records(), ["n001", "n002", "n003"], shard_size=4)
    table = pq.read_table(out / "manifest.parquet")
    column = table.schema.get_field_index("sha256")
    table = table.set_column(column, "sha256", pa.array(["xyz"] * table.num_rows))
    pq.write_table(table, out / "manifest.parquet")
    with pytest.raises(DatasetError, match=r"manifest\.parquet: column sha256 must hold 64 hex"):
        ManifestDataset(out, "train")


def _gathered(tmp_path, parts: dict[str, list[Record]], classes: list[str]):
    from imagenot.acquire.dataset import gather_parts, write_part

    out = tmp_path / "ds"
    manifests = []
    for name, records in parts.items():
        manifests.append(tmp_path / f"{name}.parquet")
        write_part(out, records, classes, manifests[-1], part=name, shard_size=100)
    gather_parts(out, manifests, seed=0)
    return read_manifest(out).to_pylist()


def test_an_image_in_two_splits_is_kept_in_one_test_before_val_before_train(tmp_path, caplog):
    """Byte-identical images split apart (a copy under another name, in another class's
    folder, or in a dataset's official train and test files) stay in one split; two copies in
    one split stay."""
    same, other, pair = _jpeg((200, 0, 0)), _jpeg((0, 200, 0)), _jpeg((0, 0, 200))
    parts = {
        "a": [
            Record("a-test", "n001", "test", same),
            Record("a-train", "n001", "train", same),
            Record("a-val", "n001", "val", other),
        ],
        "b": [
            Record("b-train", "n002", "train", other),  # the val image of another class
            Record("b-train-copy", "n002", "train", same),
            Record("b-pair-1", "n002", "train", pair),
            Record("b-pair-2", "n002", "train", pair),
        ],
    }
    rows = _gathered(tmp_path, parts, ["n001", "n002"])
    assert sorted(r["key"] for r in rows) == ["a-test", "a-val", "b-pair-1", "b-pair-2"]
    splits: dict[str, set[str]] = {}
    for r in rows:
        splits.setdefault(r["sha256"], set()).add(r["split"])
    assert all(len(s) == 1 for s in splits.values())
    (line,) = [r.getMessage() for r in caplog.records if "another split" in r.getMessage()]
    assert "3 image(s)" in line and "dropped: train 3" in line
    assert "a-train (train) is the same image as a-test (test)" in line


def test_distinct_images_are_all_kept_by_the_gather(tmp_path, caplog):
    records = _records()
    parts = {"a": records[:5], "b": records[5:]}
    rows = _gathered(tmp_path, parts, ["n001", "n002", "n003"])
    assert sorted(r["key"] for r in rows) == sorted(r.key for r in records)
    assert not [r for r in caplog.records if "another split" in r.getMessage()]
