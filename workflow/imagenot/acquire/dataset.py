"""The one on-disk dataset format every stage after acquisition reads (docs/contracts.md).

A dataset directory holds::

    manifest.parquet   key, wnid, label, split, sha256, shard, offset, length [, similarity]
    classes.txt        one wnid (or class name) per line, label order
    fingerprint.txt    sha256 of manifest.parquet
    shards/{split}-{i:06d}.tar   webdataset tars: {key}.jpg (RGB JPEG) and {key}.cls (label)

``offset``/``length`` locate each JPEG's bytes inside its tar, so readers fetch one image with a
single ``pread`` instead of scanning the tar. Tars and manifest are written deterministically
(fixed member metadata, fixed order): identical input gives byte-identical files.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from torch.utils.data import Dataset

from imagenot.io import atomic_path, sha256_bytes, sha256_file, write_parquet, write_text

SPLITS = ("train", "val", "test")
MANIFEST = "manifest.parquet"
CLASSES = "classes.txt"
FINGERPRINT = "fingerprint.txt"
SHARD_DIR = "shards"

MANIFEST_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("wnid", pa.string()),
        ("label", pa.int64()),
        ("split", pa.string()),
        ("sha256", pa.string()),
        ("shard", pa.string()),
        ("offset", pa.int64()),
        ("length", pa.int64()),
    ]
)


class DatasetError(ValueError):
    """A dataset directory or a record that breaks the on-disk contract."""


@dataclass(frozen=True)
class Record:
    """One image to store: ``jpeg`` is an RGB JPEG at the dataset's resolution, or a callable
    returning it (read lazily, one image in memory at a time)."""

    key: str
    wnid: str
    split: str
    jpeg: bytes | Callable[[], bytes]
    similarity: float | None = None

    def data(self) -> bytes:
        return self.jpeg() if callable(self.jpeg) else self.jpeg


def shard_name(split: str, index: int) -> str:
    """Path of a shard relative to the dataset directory."""
    return f"{SHARD_DIR}/{split}-{index:06d}.tar"


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def write_tar(path: Path, members: Sequence[tuple[Record, int]]) -> list[tuple[int, int, str]]:
    """Write one shard atomically; return (offset, length, sha256) of each record's JPEG."""
    spans = []
    with (
        atomic_path(path, ".tar") as tmp,
        tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as tar,
    ):
        for rec, label in members:
            data = rec.data()
            info = _tarinfo(f"{rec.key}.jpg", len(data))
            header = len(info.tobuf(tarfile.USTAR_FORMAT, tar.encoding, tar.errors))
            spans.append((tar.offset + header, len(data), sha256_bytes(data)))
            tar.addfile(info, io.BytesIO(data))
            cls = str(label).encode("ascii")
            tar.addfile(_tarinfo(f"{rec.key}.cls", len(cls)), io.BytesIO(cls))
    return spans


def write_dataset(
    out_dir: str | os.PathLike,
    records: Iterable[Record],
    classes: Sequence[str],
    *,
    shard_size: int = 5000,
    with_similarity: bool | None = None,
) -> Path:
    """Write ``records`` as a dataset directory; return the manifest path.

    Labels are the positions of each record's ``wnid`` in ``classes``. Records keep their given
    order within a split (callers order them: seeded shuffle for training shards). The manifest
    and fingerprint are written last, so a killed job never leaves a manifest without its shards;
    tars of an earlier, larger run are removed.
    """
    out_dir = Path(out_dir)
    if len(set(classes)) != len(classes):
        raise DatasetError(f"{out_dir}: duplicate class names in the class list")
    label_of = {c: i for i, c in enumerate(classes)}
    by_split: dict[str, list[tuple[Record, int]]] = {s: [] for s in SPLITS}
    seen: set[str] = set()
    for rec in records:
        if rec.split not in by_split:
            raise DatasetError(f"record {rec.key!r}: split {rec.split!r} is not one of {SPLITS}")
        if rec.wnid not in label_of:
            raise DatasetError(f"record {rec.key!r}: class {rec.wnid!r} is not in the class list")
        if rec.key in seen:
            raise DatasetError(f"record {rec.key!r}: duplicate key")
        if "/" in rec.key or "." in rec.key or not 0 < len(rec.key) <= 90:
            raise DatasetError(f"record {rec.key!r}: keys are 1-90 characters without '/' or '.'")
        seen.add(rec.key)
        by_split[rec.split].append((rec, label_of[rec.wnid]))

    columns: dict[str, list] = {name: [] for name in MANIFEST_SCHEMA.names}
    similarity: list[float | None] = []
    written: set[str] = set()
    for split in SPLITS:
        members = by_split[split]
        for index, start in enumerate(range(0, len(members), shard_size)):
            chunk = members[start : start + shard_size]
            name = shard_name(split, index)
            spans = write_tar(out_dir / name, chunk)
            written.add(name)
            for (rec, label), (offset, length, digest) in zip(chunk, spans, strict=True):
                columns["key"].append(rec.key)
                columns["wnid"].append(rec.wnid)
                columns["label"].append(label)
                columns["split"].append(split)
                columns["sha256"].append(digest)
                columns["shard"].append(name)
                columns["offset"].append(offset)
                columns["length"].append(length)
                similarity.append(rec.similarity)
    for stale in sorted((out_dir / SHARD_DIR).glob("*.tar")):
        if f"{SHARD_DIR}/{stale.name}" not in written:
            stale.unlink()

    table = pa.table(columns, schema=MANIFEST_SCHEMA)
    if with_similarity is None:
        with_similarity = any(s is not None for s in similarity)
    if with_similarity:
        table = table.append_column("similarity", pa.array(similarity, pa.float32()))
    write_text("".join(f"{c}\n" for c in classes), out_dir / CLASSES)
    manifest = write_parquet(table, out_dir / MANIFEST)
    write_text(sha256_file(manifest) + "\n", out_dir / FINGERPRINT)
    return manifest


# ------------------------------------------------------------------------------------ readers


def read_manifest(dataset_dir: str | os.PathLike, split: str | None = None) -> pa.Table:
    """The manifest table, optionally restricted to one split (manifest order kept)."""
    path = Path(dataset_dir) / MANIFEST
    if not path.is_file():
        raise DatasetError(f"{path}: no manifest (was the dataset materialised?)")
    table = pq.read_table(path)
    missing = set(MANIFEST_SCHEMA.names) - set(table.column_names)
    if missing:
        raise DatasetError(f"{path}: manifest lacks column(s) {sorted(missing)}")
    if split is not None:
        if split not in SPLITS:
            raise DatasetError(f"split {split!r} is not one of {SPLITS}")
        table = table.filter(pc.equal(table["split"], split))
    return table


def read_classes(dataset_dir: str | os.PathLike) -> list[str]:
    """Class names in label order."""
    path = Path(dataset_dir) / CLASSES
    if not path.is_file():
        raise DatasetError(f"{path}: no class list")
    return path.read_text().splitlines()


def read_fingerprint(dataset_dir: str | os.PathLike) -> str:
    """The dataset's fingerprint (sha256 of its manifest), recorded with downstream results."""
    path = Path(dataset_dir) / FINGERPRINT
    if not path.is_file():
        raise DatasetError(f"{path}: no fingerprint")
    return path.read_text().strip()


def decode_jpeg(data: bytes):
    """RGB uint8 CHW tensor from JPEG bytes (libjpeg via torchvision)."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg

    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return decode_jpeg(buf, mode=ImageReadMode.RGB)


class ShardReader:
    """Reads byte ranges from files under ``root`` (or absolute paths), one descriptor each."""

    def __init__(self, root: Path):
        self.root = root
        self._fds: dict[str, int] = {}
        self._pid = os.getpid()

    def read(self, shard: str, offset: int, length: int) -> bytes:
        if os.getpid() != self._pid:  # forked DataLoader worker: do not share descriptors
            self._fds, self._pid = {}, os.getpid()
        fd = self._fds.get(shard)
        if fd is None:
            fd = self._fds[shard] = os.open(self.root / shard, os.O_RDONLY)
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise DatasetError(f"{self.root / shard}: truncated at offset {offset}")
        return data

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}

    def __del__(self):
        if os.getpid() == self._pid:
            self.close()


class ManifestDataset(Dataset):
    """Map-style torch Dataset over one split: ``ds[i] -> (uint8 CHW tensor, int label)``.

    Random access through the manifest's byte offsets (works with any DataLoader sampler and
    worker count). ``transform`` is applied to the uint8 tensor.
    """

    def __init__(
        self,
        dataset_dir: str | os.PathLike,
        split: str,
        transform: Callable | None = None,
    ):
        self.dataset_dir = Path(dataset_dir)
        self.split = split
        self.transform = transform
        table = read_manifest(self.dataset_dir, split)
        self.classes = read_classes(self.dataset_dir)
        self.keys = table["key"].to_pylist()
        self.labels = np.asarray(table["label"].to_numpy(), dtype=np.int64)
        self._shards = table["shard"].to_pylist()
        self._offsets = table["offset"].to_numpy()
        self._lengths = table["length"].to_numpy()
        self._reader = ShardReader(self.dataset_dir)

    def __len__(self) -> int:
        return len(self.keys)

    def read_bytes(self, index: int) -> bytes:
        """The stored JPEG bytes of item ``index``."""
        return self._reader.read(
            self._shards[index], int(self._offsets[index]), int(self._lengths[index])
        )

    def __getitem__(self, index: int):
        image = decode_jpeg(self.read_bytes(index))
        if self.transform is not None:
            image = self.transform(image)
        return image, int(self.labels[index])


def load_split_tensors(dataset_dir: str | os.PathLike, split: str):
    """All images of a split in memory: (uint8 tensor N x 3 x H x W, int64 labels), manifest order.

    For small datasets (the demo trains from memory). Every image must have the same size.
    """
    import torch

    ds = ManifestDataset(dataset_dir, split)
    labels = torch.from_numpy(ds.labels.copy())
    if len(ds) == 0:
        return torch.empty((0, 3, 0, 0), dtype=torch.uint8), labels
    first = ds[0][0]
    images = torch.empty((len(ds), *first.shape), dtype=torch.uint8)
    images[0] = first
    for i in range(1, len(ds)):
        image = ds[i][0]
        if image.shape != first.shape:
            raise DatasetError(
                f"{ds.dataset_dir}: image {ds.keys[i]!r} has shape {tuple(image.shape)}, "
                f"expected {tuple(first.shape)} like the rest of split {split!r}"
            )
        images[i] = image
    return images, labels
