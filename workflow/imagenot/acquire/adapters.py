"""Adapters: datasets already on disk, materialised into the one on-disk format.

Each reader lists items (key, class, source split, loader of pixels) without decoding them;
:func:`assign_adapter_splits` makes the seeded train/val/test split; :func:`materialise` writes
the dataset, decoding and normalising one image at a time.

Formats (each tested on generated files in the real layout):

- ``fashion_mnist``: the four idx files (``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``);
  Debian's ``dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``.
- ``cifar10``: ``cifar-10-batches-py`` (``data_batch_1..5``, ``test_batch``, ``batches.meta``).
- ``imagenet``: ILSVRC-2012 ``train/<wnid>/*.JPEG`` and either ``val/<wnid>/*.JPEG`` or the
  original flat ``val/ILSVRC2012_val_<n>.JPEG``, labelled by the devkit (``ILSVRC2012_devkit_t12/``
  or ``ILSVRC2012_devkit_t12.tar.gz`` beside ``val/``); both layouts give the same dataset.
- ``imagefolder``: ``<root>/<class>/*`` (split here), or ``<root>/{train,val,test}/<class>/*``.

Official test splits (t10k, test_batch, ImageNet val) become the test split, whole unless
``test_per_class`` caps them; validation is drawn per class from the training pool.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import re
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from imagenot.acquire import images
from imagenot.acquire.build import class_seed
from imagenot.acquire.dataset import Record, write_dataset

KINDS = ("fashion_mnist", "cifar10", "imagenet", "imagefolder")
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
DEVKIT = "ILSVRC2012_devkit_t12"
META_MAT = "data/meta.mat"
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG")
WNID = re.compile(r"n\d{8}")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm"}


class AdapterError(ValueError):
    """A dataset on disk that does not have the expected layout; names the file."""


@dataclass(frozen=True)
class Item:
    """One source image: ``load`` returns encoded bytes or a uint8 array (HxW or HxWx3)."""

    key: str
    cls: str
    source: str  # "train" or "test" (the dataset's own split) or "all" (split here)
    load: Callable[[], bytes | np.ndarray]


# ------------------------------------------------------------------------------ readers


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """An idx file (MNIST format, optionally gzipped) as a numpy array."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise AdapterError(f"{path}: not an unsigned-byte idx file (bad magic {data[:4]!r})")
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise AdapterError(f"{path}: header says shape {shape}, file has {body.size} values")
    return body.reshape(shape)


def _find(root: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (root / name).is_file():
            return root / name
    raise AdapterError(f"{root}: missing {stem}[.gz]")


def fashion_mnist_items(root: str | os.PathLike) -> tuple[list[str], list[Item]]:
    root = Path(root)
    items: list[Item] = []
    for prefix, source in (("train", "train"), ("t10k", "test")):
        x = read_idx(_find(root, f"{prefix}-images-idx3-ubyte"))
        y = read_idx(_find(root, f"{prefix}-labels-idx1-ubyte"))
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise AdapterError(f"{root}: {prefix} images {x.shape} and labels {y.shape} disagree")
        if y.max(initial=0) >= len(FASHION_MNIST_CLASSES):
            raise AdapterError(f"{root}: {prefix} labels go up to {y.max()}, expected 0-9")
        items += [
            Item(f"{source}-{i:06d}", FASHION_MNIST_CLASSES[y[i]], source, lambda i=i, x=x: x[i])
            for i in range(len(y))
        ]
    return list(FASHION_MNIST_CLASSES), items


def _unpickle(path: Path) -> dict:
    if not path.is_file():
        raise AdapterError(f"{path}: missing CIFAR-10 batch file")
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


def cifar10_items(root: str | os.PathLike) -> tuple[list[str], list[Item]]:
    root = Path(root)
    meta = _unpickle(root / "batches.meta")
    classes = [n.decode() if isinstance(n, bytes) else n for n in meta[b"label_names"]]
    items: list[Item] = []
    batches = [(f"data_batch_{i}", "train") for i in range(1, 6)] + [("test_batch", "test")]
    for name, source in batches:
        batch = _unpickle(root / name)
        try:
            data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            labels = list(batch[b"labels"])
        except (KeyError, ValueError) as exc:
            raise AdapterError(f"{root / name}: not a CIFAR-10 batch ({exc})") from exc
        offset = sum(1 for it in items if it.source == source)
        items += [
            Item(
                f"{source}-{offset + i:06d}",
                classes[labels[i]],
                source,
                lambda i=i, d=data: d[i].transpose(1, 2, 0),
            )
            for i in range(len(labels))
        ]
    return classes, items


def _key(relpath: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", relpath.rsplit(".", 1)[0])[-90:]


def _folder_items(root: Path, source: str, prefix: str) -> list[Item]:
    if not root.is_dir():
        raise AdapterError(f"{root}: directory not found")
    items = []
    for cls_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted(cls_dir.rglob("*")):
            if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES:
                rel = f"{prefix}{f.relative_to(root).as_posix()}"
                items.append(Item(_key(rel), cls_dir.name, source, f.read_bytes))
    return items


def imagefolder_items(root: str | os.PathLike) -> tuple[list[str], list[Item]]:
    root = Path(root)
    if (root / "train").is_dir():
        items = _folder_items(root / "train", "train", "train/")
        for name in ("test", "val"):
            if (root / name).is_dir():
                items += _folder_items(root / name, "test", f"{name}/")
                break
    else:
        items = _folder_items(root, "all", "")
    if not items:
        raise AdapterError(f"{root}: no images found (expected <class>/<image> folders)")
    return sorted({it.cls for it in items}), items


def parse_meta_mat(data: bytes, name: str = META_MAT) -> dict[int, str]:
    """ILSVRC2012_ID -> wnid of the leaf synsets (``num_children == 0``) of a devkit meta.mat."""
    from scipy.io import loadmat
    from scipy.io.matlab import MatReadError

    try:
        synsets = np.atleast_1d(loadmat(io.BytesIO(data), squeeze_me=True)["synsets"])
        fields = (synsets[f] for f in ("ILSVRC2012_ID", "WNID", "num_children"))
        leaves = {int(i): str(w) for i, w, n in zip(*fields, strict=True) if int(n) == 0}
    except (MatReadError, KeyError, ValueError, IndexError, TypeError) as exc:
        raise AdapterError(
            f"{name}: not a devkit meta.mat with a 'synsets' struct array "
            f"(fields ILSVRC2012_ID, WNID, num_children): {exc!r}"
        ) from exc
    bad = [w for w in leaves.values() if not WNID.fullmatch(w)]
    if not leaves or bad:
        raise AdapterError(f"{name}: no leaf synsets, or leaf WNIDs that are not wnids: {bad[:5]}")
    return leaves


def parse_ground_truth(text: str, name: str = GROUND_TRUTH) -> list[int]:
    """The ILSVRC2012_ID (1..1000) of each validation image: line n is image n."""
    ids = []
    for n, line in enumerate(text.rstrip().splitlines(), 1):
        value = line.strip()
        if not (value.isdecimal() and 1 <= int(value) <= 1000):
            raise AdapterError(f"{name}, line {n}: {value!r} is not an ILSVRC2012_ID in 1..1000")
        ids.append(int(value))
    return ids


def flat_val_labels(
    files: list[str], ids: list[int], leaves: dict[int, str], name: str = GROUND_TRUTH
) -> dict[str, str]:
    """File name -> wnid of flat ``ILSVRC2012_val_<n>.JPEG`` files, from the ground truth
    ``ids`` (named ``name`` in messages) and the leaf synsets of meta.mat."""
    if len(files) != len(ids):
        raise AdapterError(f"{name}: {len(ids)} lines, but val/ holds {len(files)} flat images")
    labels = {}
    for f in files:
        match = VAL_NAME.fullmatch(f)
        n = int(match[1]) if match else 0
        if not 1 <= n <= len(ids):
            raise AdapterError(f"val/{f}: expected ILSVRC2012_val_<n>.JPEG with n in 1..{len(ids)}")
        if ids[n - 1] not in leaves:
            raise AdapterError(
                f"{name}, line {n}: ID {ids[n - 1]} is not a leaf synset of meta.mat"
            )
        labels[f] = leaves[ids[n - 1]]
    return labels


def _devkit_file(root: Path, member: str) -> tuple[str, bytes]:
    """(name for messages, contents) of ``ILSVRC2012_devkit_t12/<member>`` in ``root``: from the
    extracted folder, or else read from the ``.tar.gz`` without extracting it."""
    path, tarball = root / DEVKIT / member, root / f"{DEVKIT}.tar.gz"
    if (root / DEVKIT).is_dir() or not tarball.is_file():
        if not path.is_file():
            raise AdapterError(
                f"{path}: missing; flat val/ images are labelled by the ILSVRC-2012 devkit "
                f"({DEVKIT}/ or {DEVKIT}.tar.gz in {root})"
            )
        return str(path), path.read_bytes()
    name = f"{tarball}[{DEVKIT}/{member}]"
    try:
        with tarfile.open(tarball) as tar:
            f = tar.extractfile(f"{DEVKIT}/{member}")
            if f is None:
                raise KeyError(member)
            return name, f.read()
    except KeyError:
        raise AdapterError(f"{name}: missing from the devkit tarball") from None
    except (tarfile.TarError, OSError) as exc:
        raise AdapterError(f"{tarball}: unreadable devkit tarball ({exc})") from exc


def _flat_val_items(root: Path, files: list[str]) -> list[Item]:
    meta_name, meta = _devkit_file(root, META_MAT)
    gt_name, gt = _devkit_file(root, GROUND_TRUTH)
    ids = parse_ground_truth(gt.decode(errors="replace"), gt_name)
    labels = flat_val_labels(files, ids, parse_meta_mat(meta, meta_name), gt_name)
    # keyed as in the val/<wnid>/ layout, so both layouts give the same dataset
    return [
        Item(_key(f"val/{wnid}/{f}"), wnid, "test", (root / "val" / f).read_bytes)
        for f, wnid in labels.items()
    ]


def imagenet_items(root: str | os.PathLike) -> tuple[list[str], list[Item]]:
    root = Path(root)
    for sub in ("train", "val"):
        if not (root / sub).is_dir():
            raise AdapterError(f"{root}: ILSVRC-2012 layout needs {sub}/ with wnid folders")
    val = list((root / "val").iterdir())
    flat = sorted(p.name for p in val if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not flat:
        classes, items = imagefolder_items(root)
    elif any(p.is_dir() for p in val):
        raise AdapterError(f"{root / 'val'}: mixes wnid folders and flat images")
    else:
        items = _folder_items(root / "train", "train", "train/") + _flat_val_items(root, flat)
        classes = sorted({it.cls for it in items})
    bad = [c for c in classes if not WNID.fullmatch(c)]
    if bad:
        raise AdapterError(f"{root}: class folders are not wnids: {bad[:5]}")
    return classes, items


READERS = {
    "fashion_mnist": fashion_mnist_items,
    "cifar10": cifar10_items,
    "imagenet": imagenet_items,
    "imagefolder": imagefolder_items,
}


# ------------------------------------------------------------------------- split and write


def assign_adapter_splits(
    items: list[Item],
    *,
    seed: int,
    val_per_class: int,
    test_per_class: int | None = None,
    max_train_per_class: int | None = None,
) -> list[tuple[Item, str]]:
    """Seeded per-class split. Official test items stay test (capped at ``test_per_class`` if
    given); items without a source split give ``test_per_class`` test images first."""
    by_class: dict[str, list[Item]] = {}
    for it in items:
        by_class.setdefault(it.cls, []).append(it)
    out: list[tuple[Item, str]] = []
    for cls in sorted(by_class):
        rng = class_seed(seed, cls)
        group = by_class[cls]
        test = [it for it in group if it.source == "test"]
        pool = [it for it in group if it.source != "test"]
        pool = [pool[i] for i in rng.permutation(len(pool))]
        if any(it.source == "all" for it in pool):
            n_test = test_per_class if test_per_class is not None else 0
            test, pool = pool[:n_test], pool[n_test:]
        elif test_per_class is not None and len(test) > test_per_class:
            test = [test[i] for i in sorted(rng.permutation(len(test))[:test_per_class])]
        val, train = pool[:val_per_class], pool[val_per_class:]
        if max_train_per_class is not None:
            train = train[:max_train_per_class]
        out += [(it, "test") for it in test] + [(it, "val") for it in val]
        out += [(it, "train") for it in train]
    train_idx = [i for i, (_, s) in enumerate(out) if s == "train"]
    order = np.random.default_rng([seed, 1]).permutation(len(train_idx))
    shuffled = [out[train_idx[i]] for i in order]
    return shuffled + [pair for pair in out if pair[1] != "train"]


def materialise(
    kind: str,
    path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    image_size: int,
    resize_mode: str = "center_crop",
    quality: int = 95,
    seed: int = 0,
    val_per_class: int = 0,
    test_per_class: int | None = None,
    max_train_per_class: int | None = None,
    shard_size: int = 5000,
) -> Path:
    """Write dataset ``kind`` at ``path`` to ``out_dir`` in the on-disk format."""
    from tqdm import tqdm

    if kind not in READERS:
        raise AdapterError(f"unknown dataset kind {kind!r}; adapters exist for {sorted(READERS)}")
    classes, items = READERS[kind](path)
    pairs = assign_adapter_splits(
        items,
        seed=seed,
        val_per_class=val_per_class,
        test_per_class=test_per_class,
        max_train_per_class=max_train_per_class,
    )
    progress = tqdm(total=len(pairs), desc=f"materialise {kind}", unit="img", mininterval=5)

    def loader(item: Item) -> Callable[[], bytes]:
        def load() -> bytes:
            progress.update()
            pixels = item.load()
            if isinstance(pixels, np.ndarray):
                return images.normalise_array(pixels, image_size, resize_mode, quality)
            result = images.validate_image(
                pixels, size=image_size, resize_mode=resize_mode, quality=quality
            )
            if result.jpeg is None:
                raise AdapterError(
                    f"{path}: image {item.key!r} is {result.reason} ({result.detail})"
                )
            return result.jpeg

        return load

    records = (Record(it.key, it.cls, split, loader(it)) for it, split in pairs)
    manifest = write_dataset(out_dir, records, classes, shard_size=shard_size)
    progress.close()
    return manifest
