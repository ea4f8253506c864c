"""The one on-disk dataset format every stage after acquisition reads (docs/contracts.md), and
its readers.

A dataset directory holds::

    manifest.parquet   key, wnid, label, split, sha256, shard, offset, length [, similarity]
    classes.txt        one wnid (or class name) per line, label order
    fingerprint.txt    content fingerprint (:func:`imagenot.acquire.dataset.content_fingerprint`)
    shards/{split}-{i:06d}.tar   webdataset tars: {key}.jpg (RGB JPEG) and {key}.cls (label);
                       written in parallel parts: shards/{split}-{part}-{i:06d}.tar
    originals/{split}-{part}-{i:06d}.tar   (a dataset published weights are evaluated on: its
                       test images' original files, byte for byte, located by the manifest's
                       ``original_shard``, ``original_offset``, ``original_length`` and
                       ``original_sha256``; null on other rows)

``offset``/``length`` locate each JPEG's bytes inside its tar, so readers fetch one image with a
single ``pread`` instead of scanning the tar.

Why originals beside the stored copy: a published weight's accuracy was measured on the original
files (torchvision's ``weights.transforms()`` on the decoded original); its resize and centre
crop on the stored square copy (re-sampled, re-encoded) feed it input that differs by a mean of
2-7 levels of 255. The reference evaluation reads the originals (:class:`ManifestDataset` with
``originals=True``), everything else the stored copy.

Why a base module of its own, not the acquire stage's: acquisition writes the format
(:mod:`imagenot.acquire.dataset`), and training, evaluation and the diagnostics read it; each side
imports the format from here rather than the readers reaching into the producer's room.
"""

from __future__ import annotations

import hashlib
import io
import os
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from imagenot.core.io import read_parquet
from imagenot.core.paths import CLASSES_FILE, FINGERPRINT_FILE, MANIFEST_FILE, SPLITS

SHARD_DIR = "shards"
ORIGINALS_DIR = "originals"
#: The manifest's optional columns locating a row's original file (module docstring).
ORIGINAL_COLUMNS = ("original_shard", "original_offset", "original_length", "original_sha256")

# the manifest's columns, in order: strings but for the integers label, offset and length
MANIFEST_SCHEMA = pa.schema(
    [
        (name, pa.int64() if name in ("label", "offset", "length") else pa.string())
        for name in ("key", "wnid", "label", "split", "sha256", "shard", "offset", "length")
    ]
)


class DatasetError(ValueError):
    """A dataset directory or a record that breaks the on-disk contract.

    Raised in a DataLoader worker, torch re-raises it in the main process as
    ``DatasetError("Caught DatasetError in DataLoader worker process 0.\\nOriginal Traceback
    ...")``: its message is then the original one (the traceback's last line), so the command
    still ends in one line naming the shard and key."""

    def __str__(self) -> str:
        text = super().__str__()
        if text.startswith("Caught ") and "\nOriginal Traceback" in text:
            last = text.rstrip().rsplit("\n", 1)[-1]
            return last.split(": ", 1)[-1] if ": " in last else last
        return text


def folder_of(manifest: str | os.PathLike, classes: str | os.PathLike | None = None) -> Path:
    """The dataset folder of a step handed a dataset's ``manifest`` (and ``classes``) file (their
    roles, :mod:`imagenot.core.files`): the manifest's folder, whose shards it locates; refused
    (one line naming the files) when the manifest is not named as the format names it or the
    classes file is not the one beside it."""
    folder = Path(manifest).parent
    handed = f"--manifest {manifest}" + (f" --classes {classes}" if classes else "")
    if Path(manifest).name != MANIFEST_FILE or (classes and Path(classes) != folder / CLASSES_FILE):
        raise DatasetError(
            f"{handed}: a dataset's files are {folder / MANIFEST_FILE} and "
            f"{folder / CLASSES_FILE}, in one folder"
        )
    return folder


def read_manifest(dataset_dir: str | os.PathLike, split: str | None = None) -> pa.Table:
    """The manifest table, optionally restricted to one split (manifest order kept)."""
    path = Path(dataset_dir) / MANIFEST_FILE
    if not path.is_file():
        raise DatasetError(f"{path}: no manifest (was the dataset materialised?)")
    table = read_parquet(path)
    missing = set(MANIFEST_SCHEMA.names) - set(table.column_names)
    if missing:
        raise DatasetError(f"{path}: manifest lacks column(s) {sorted(missing)}")
    if split is not None:
        if split not in SPLITS:
            raise DatasetError(f"split {split!r} is not one of {SPLITS}")
        table = table.filter(pc.equal(table["split"], split))
    return table


def class_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a line of classes.txt, written and read back unchanged (None when
    it can): it must be a non-empty string without a line break of any kind (``str.splitlines``
    splits on \\r, \\v, \\f, \\x1c-\\x1e, \\x85, \\u2028, \\u2029 too), control
    character or lone surrogate (an undecodable byte of a file name, which UTF-8 cannot write)."""
    if not isinstance(name, str):
        return f"a {type(name).__name__}, not a string"
    if not name:
        return "empty"
    for i, ch in enumerate(name):
        if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp"):
            return f"character {i} is {ch!r} (a line break, control character or undecodable byte)"
    return None


def check_class_names(names: object, where: str | os.PathLike, what: str = "class") -> list[str]:
    """``names`` as a list, refused (DatasetError naming ``where``, the position and the name)
    when one cannot round-trip through classes.txt (:func:`class_name_problem`) or is given
    twice. Every class list goes through here before it is written: a name holding a line
    break turned 4 classes into 5 lines, and every label after it into another class."""
    if not isinstance(names, list | tuple):
        raise DatasetError(f"{where}: the class list is a {type(names).__name__}, not a list")
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        problem = class_name_problem(name)
        if problem is not None:
            raise DatasetError(
                f"{where}: {what} {i} {name!r} cannot be written to {CLASSES_FILE} and read back "
                f"unchanged ({problem}); rename it"
            )
        if name in seen:
            raise DatasetError(f"{where}: {what} {i} {name!r} is also {what} {seen[name]}")
        seen[name] = i
    return list(names)


def classes_text(classes: Sequence[str], where: str | os.PathLike) -> str:
    """The text of classes.txt: one checked name per line (:func:`check_class_names`)."""
    return "".join(f"{c}\n" for c in check_class_names(list(classes), where))


def read_classes(dataset_dir: str | os.PathLike) -> list[str]:
    """Class names in label order."""
    return read_class_file(Path(dataset_dir) / CLASSES_FILE)


def read_class_file(path: str | os.PathLike) -> list[str]:
    """Class names in label order, from a dataset's classes.txt handed as a file (a role)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no class list")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def read_fingerprint(dataset_dir: str | os.PathLike) -> str:
    """The dataset's fingerprint (sha256 of its manifest), recorded with downstream results."""
    return read_fingerprint_file(Path(dataset_dir) / FINGERPRINT_FILE)


def read_fingerprint_file(path: str | os.PathLike) -> str:
    """The dataset's fingerprint, from its fingerprint.txt handed as a file (a role)."""
    path = Path(path)
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


def has_originals(dataset_dir: str | os.PathLike, split: str) -> bool:
    """Whether every image of ``split`` has its original file stored (module docstring)."""
    if not (Path(dataset_dir) / MANIFEST_FILE).is_file():
        return False
    table, column = read_manifest(dataset_dir, split), ORIGINAL_COLUMNS[0]
    return column in table.column_names and table.num_rows > 0 and table[column].null_count == 0


class ManifestDataset:
    """Map-style dataset over one split: ``ds[i] -> (uint8 CHW tensor, int label)``.

    Random access through the manifest's byte offsets (works with any DataLoader sampler and
    worker count). ``transform`` is applied to the uint8 tensor. With ``originals`` the items are
    the split's original files (every row must have one: :func:`has_originals`), decoded as
    torchvision's ImageFolder loader decodes them into a Pillow image that ``transform`` (required) turns into the
    item, as torchvision's datasets apply ``weights.transforms()``. It implements the map-style
    protocol (``__len__``, ``__getitem__``) that torch's DataLoader takes, without subclassing
    ``torch.utils.data.Dataset``: that base class only adds ``+``, and importing it would make
    every acquisition job that writes or reads manifests (this module) import torch, about
    2 CPU-seconds per job.
    """

    def __init__(
        self,
        dataset_dir: str | os.PathLike,
        split: str,
        transform: Callable | None = None,
        originals: bool = False,
    ):
        self.dataset_dir = Path(dataset_dir)
        self.split = split
        self.transform = transform
        self.originals = originals
        table = read_manifest(self.dataset_dir, split)
        self.classes = read_classes(self.dataset_dir)
        self.keys = table["key"].to_pylist()
        self.labels = np.asarray(table["label"].to_numpy(), dtype=np.int64)
        located = ("shard", "offset", "length", "sha256")
        if originals:
            if transform is None:
                raise ValueError("originals=True needs a transform (Pillow image -> item)")
            if not has_originals(self.dataset_dir, split):
                raise DatasetError(
                    f"{self.dataset_dir / MANIFEST_FILE}: split {split!r} has no stored originals "
                    "(written for datasets that published weights are evaluated on)"
                )
            located = ORIGINAL_COLUMNS
        self._shards = table[located[0]].to_pylist()
        self._offsets = table[located[1]].to_numpy()
        self._lengths = table[located[2]].to_numpy()
        # each image's sha256 as 32 bytes a row (a compact array, shared by forked workers)
        hexes = table[located[3]].to_pylist()
        try:
            packed = bytes.fromhex("".join(hexes))
            self._digests = np.frombuffer(packed, dtype=np.uint8).reshape(len(hexes), 32)
        except (TypeError, ValueError):
            raise DatasetError(
                f"{self.dataset_dir / MANIFEST_FILE}: column sha256 must hold 64 hex digits a row"
            ) from None
        self._reader = ShardReader(self.dataset_dir)

    def __len__(self) -> int:
        return len(self.keys)

    def read_bytes(self, index: int) -> bytes:
        """The stored JPEG bytes of item ``index``, checked against the manifest's sha256.

        Why every read: a shard damaged after it was written (a bad disk, a copy cut short and
        padded, a stray write: same size, same mtime) decodes to wrong pixels or libjpeg's
        "Corrupt JPEG data" warnings, and a training or evaluation on it ended at exit 0 with
        results of other images. Per image, not per shard, so a job reads only its images and
        the error names the image; it costs a sha256 of a few kilobytes, a few percent of the
        decode (docs/benchmarks.md, ``benchmarks/bench_integrity.py``)."""
        shard, offset = self._shards[index], int(self._offsets[index])
        data = self._reader.read(shard, offset, int(self._lengths[index]))
        if hashlib.sha256(data).digest() != self._digests[index].tobytes():
            manifest = self.dataset_dir / MANIFEST_FILE
            raise DatasetError(
                f"{self.dataset_dir / shard}: image {self.keys[index]!r} (bytes {offset}-"
                f"{offset + len(data)}) does not match its sha256 in {manifest}: delete "
                f"{manifest} and rerun the workflow to rebuild the dataset"
            )
        return data

    def decode(self, index: int):
        """Item ``index`` as an RGB uint8 CHW tensor (its bytes checked by :meth:`read_bytes`);
        with ``originals``, the original as an RGB Pillow image."""
        data = self.read_bytes(index)
        if self.originals:  # as torchvision's ImageFolder loader reads it (``pil_loader``):
            from PIL import Image  # Pillow, RGB, no EXIF rotation (the published protocol)

            try:
                with Image.open(io.BytesIO(data)) as image:
                    return image.convert("RGB")
            except OSError as exc:
                raise DatasetError(
                    f"{self.dataset_dir / self._shards[index]}: original of {self.keys[index]!r} "
                    f"is not a decodable image ({exc})"
                ) from exc
        try:
            return decode_jpeg(data)
        except RuntimeError as exc:  # torchvision's decode error names neither shard nor image
            raise DatasetError(
                f"{self.dataset_dir / self._shards[index]}: image {self.keys[index]!r} is not a "
                f"decodable JPEG ({str(exc).splitlines()[0]})"
            ) from exc

    def image_shape(self, index: int = 0) -> tuple[int, int, int]:
        """(3, H, W) of item ``index`` as ``ds[index]`` decodes it, from the JPEG's header alone
        (what a loader needs to size its batch buffers without decoding in the training
        process)."""
        from PIL import Image

        if self.transform is not None or self.originals:  # it may change the size: decode
            return tuple(self[index][0].shape)
        with Image.open(io.BytesIO(self.read_bytes(index))) as image:
            width, height = image.size
        return 3, height, width

    def __getitem__(self, index: int):
        image = self.decode(index)
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
    images = [ds[i][0] for i in range(len(ds))]
    for key, image in zip(ds.keys, images, strict=True):
        if image.shape != images[0].shape:
            raise DatasetError(
                f"{ds.dataset_dir}: image {key!r} has shape {tuple(image.shape)}, "
                f"expected {tuple(images[0].shape)} like the rest of split {split!r}"
            )
    return torch.stack(images) if images else torch.empty((0, 3, 0, 0), dtype=torch.uint8), labels
