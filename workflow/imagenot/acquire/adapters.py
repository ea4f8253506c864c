"""Adapters: readers of datasets already on disk, for the range job that materialises them
into the one on-disk format (:mod:`imagenot.acquire.materialise`).

Each reader lists items (key, class, source split, loader of pixels) without decoding them,
optionally for a subset of classes only (a range job reads only its classes); its class-list
reader lists the classes without listing images. Readers are registered by kind in
:data:`imagenot.acquire.kinds.DATASET_KINDS` (:func:`adapter_readers` resolves them).

Formats (each tested on generated files in the real layout):

- ``fashion_mnist``: the four idx files (``{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]``);
  Debian's ``dataset-fashion-mnist`` puts them in ``/usr/share/datasets/fashion-mnist``.
- ``cifar10``: ``cifar-10-batches-py`` (``data_batch_1..5``, ``test_batch``, ``batches.meta``).
- ``imagenet``: ILSVRC-2012, read by :mod:`imagenot.acquire.imagenet`.
- ``imagefolder``: ``<root>/<class>/*`` (split here), or ``<root>/{train,val,test}/<class>/*``.

Official test splits (t10k, test_batch, ImageNet val) become the test split, whole unless
``test_per_class`` caps them; validation is drawn per class from the training pool
(:mod:`imagenot.acquire.splits`).

Files on disk (imagefolder, imagenet):

- keys come from the path relative to the dataset root, unique per file: the path without its
  extension, characters other than letters, digits, ``_`` and ``-`` replaced by ``_``; a
  short sha256 of the exact path is appended when that is not collision-free by construction
  (a replaced character, a nested folder, a stem shared by two files of a folder such as
  ``photo.jpg`` and ``photo.png``, a key cut to length). The path itself is kept in the
  manifest's ``source`` column.
- a whole-file source (CIFAR-10 batches, idx files, the devkit) whose links lead out of the
  dataset folder is refused naming it (:func:`outside`); how the range job skips hidden
  files and every file under a hidden folder (:func:`is_hidden`), unreadable and linked-out
  images, and empty class folders: :mod:`imagenot.acquire.materialise`.
- an image stored in two splits (byte-identical files, whatever their names or classes) is
  kept in one only when the dataset is gathered (:func:`imagenot.acquire.dataset.
  drop_cross_split_duplicates`).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import pickle
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from imagenot.acquire.kinds import DATASET_KINDS, adapter_kinds
from imagenot.core.registries import resolve

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
    path: str | None = None  # relative to the dataset root, for files on disk


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


def outside(root: str | os.PathLike, path: str | os.PathLike) -> str | None:
    """Where ``path`` really lies when links take it out of the dataset folder ``root`` (None
    when it lies inside). Why: a link in a dataset folder to a file elsewhere (another
    dataset's test image, a system file) would be read as this dataset's data unseen."""
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    return None if real.startswith(real_root.rstrip(os.sep) + os.sep) else real


def inside(root: Path, path: Path) -> Path:
    """``path``, refused (naming it and its target) when links take it out of ``root``."""
    target = outside(root, path)
    if target is not None:
        raise AdapterError(f"{path}: a link to {target}, outside the dataset folder {root}")
    return path


def _find(root: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (root / name).is_file():
            return inside(root, root / name)
    raise AdapterError(f"{root}: missing {stem}[.gz]")


def fashion_mnist_items(
    root: str | os.PathLike, only: set[str] | None = None
) -> tuple[list[str], list[Item]]:
    root = Path(root)
    items: list[Item] = []
    for prefix, source in (("train", "train"), ("t10k", "test")):
        images, labels = (
            _find(root, f"{prefix}-{kind}-ubyte") for kind in ("images-idx3", "labels-idx1")
        )
        x, y = read_idx(images), read_idx(labels)
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise AdapterError(
                f"{labels}: labels {y.shape} do not pair with the images {x.shape} of {images}"
            )
        _check_labels(labels, y.tolist(), len(FASHION_MNIST_CLASSES))
        items += _array_items(FASHION_MNIST_CLASSES, source, 0, x, y.tolist(), only)
    return list(FASHION_MNIST_CLASSES), items


def _check_labels(path: Path, labels: list, n_classes: int, named: str = "") -> None:
    """Refuse a label that is no integer or no class index (a -1 would index the last class),
    naming the file and the row."""
    for row, label in enumerate(labels):
        if not isinstance(label, int | np.integer) or isinstance(label, bool | np.bool_):
            raise AdapterError(f"{path}: label at row {row} is {label!r}, not an integer")
        if not 0 <= label < n_classes:
            raise AdapterError(
                f"{path}: label {int(label)} at row {row} is not a class index "
                f"0-{n_classes - 1}{named}"
            )


def _array_items(
    classes: Sequence[str],
    source: str,
    offset: int,
    pixels: np.ndarray,
    labels: list[int],
    only: set[str] | None,
) -> list[Item]:
    """The items of a file of pixel arrays (HxW or HxWx3, by position) and their labels (class
    indices), keyed ``{source}-{offset + i:06d}``; the pixels are read when the item loads."""
    return [
        Item(f"{source}-{offset + i:06d}", classes[label], source, partial(pixels.__getitem__, i))
        for i, label in enumerate(labels)
        if only is None or classes[label] in only
    ]


# What a CIFAR-10 batch may name: numpy's array reconstructors (numpy 1 and 2 module paths,
# pickle protocols 2-5) and ``_codecs.encode`` (protocol-2 bytes). All build data, none runs code.
CIFAR_PICKLE_GLOBALS = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that resolves only :data:`CIFAR_PICKLE_GLOBALS`.

    Why: a pickle can call any importable function while it loads; a crafted
    ``batches.meta`` in a dataset folder ran code with the general unpickler. The CIFAR-10
    batches hold dicts, lists, bytes and numpy arrays, so nothing else needs resolving.
    """

    def find_class(self, module: str, name: str):
        if (module, name) not in CIFAR_PICKLE_GLOBALS:
            raise pickle.UnpicklingError(
                f"global {module}.{name} is not allowed in a CIFAR-10 batch"
            )
        return super().find_class(module, name)


def _unpickle(path: Path) -> dict:
    """A CIFAR-10 batch file through :class:`_CifarUnpickler`; errors name the file."""
    if not path.is_file():
        raise AdapterError(f"{path}: missing CIFAR-10 batch file")
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise AdapterError(f"{path}: not a readable CIFAR-10 batch ({e or 'truncated'})") from None
    if not isinstance(obj, dict):
        raise AdapterError(f"{path}: not a CIFAR-10 batch (a {type(obj).__name__}, not a dict)")
    return obj


def cifar10_classes(root: str | os.PathLike) -> list[str]:
    root = Path(root)
    path = root / "batches.meta"
    meta = _unpickle(inside(root, path))
    names = meta.get(b"label_names", meta.get("label_names"))
    if not isinstance(names, list) or not names:
        raise AdapterError(f"{path}: no label_names list")
    out = []
    for i, name in enumerate(names):
        try:
            out.append(name.decode("utf-8") if isinstance(name, bytes) else name)
        except UnicodeDecodeError as exc:
            raise AdapterError(
                f"{path}: label_names[{i}] {name!r} is not UTF-8 ({exc.reason})"
            ) from None
        if not isinstance(out[-1], str):
            raise AdapterError(f"{path}: label_names[{i}] is {name!r}, not a name")
    return out


def cifar10_batch(path: Path, n_classes: int) -> tuple[np.ndarray, list[int]]:
    """(images N x 32 x 32 x 3 uint8, labels) of one CIFAR-10 batch file, checked: ``data`` a
    uint8 array of N rows of 3072 values, ``labels`` N integers in [0, ``n_classes``). Why
    checked here: labels are paired with images by position and index the class list, so a
    label of -1 would become the last class, fewer labels than images would drop images
    silently, and a label past the class count would end in an IndexError traceback."""
    batch = _unpickle(path)
    data = batch.get(b"data", batch.get("data"))
    labels = batch.get(b"labels", batch.get("labels"))
    if data is None or labels is None:
        raise AdapterError(f"{path}: not a CIFAR-10 batch (no data and labels entries)")
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2) or (
        data.shape[1] != 3 * 32 * 32
    ):
        what = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise AdapterError(f"{path}: data is {what}, expected a uint8 array of 3072 values a row")
    if isinstance(labels, np.ndarray) and labels.ndim == 1:
        labels = labels.tolist()
    if not isinstance(labels, list):
        raise AdapterError(f"{path}: labels is a {type(labels).__name__}, expected a list")
    _check_labels(path, labels, n_classes, f" (batches.meta names {n_classes} classes)")
    if len(labels) != len(data):
        raise AdapterError(f"{path}: {len(labels)} labels for {len(data)} images, not one each")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), [int(label) for label in labels]


def cifar10_items(
    root: str | os.PathLike, only: set[str] | None = None
) -> tuple[list[str], list[Item]]:
    root = Path(root)
    classes = cifar10_classes(root)
    items: list[Item] = []
    counts = {"train": 0, "test": 0}
    batches = [(f"data_batch_{i}", "train") for i in range(1, 6)] + [("test_batch", "test")]
    for name, source in batches:
        data, labels = cifar10_batch(inside(root, root / name), len(classes))
        items += _array_items(classes, source, counts[source], data, labels, only)
        counts[source] += len(labels)
    return classes, items


KEY_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_KEY = 90


def file_key(relpath: str, shared_stem: bool = False, nested: bool = False) -> str:
    """Key of the file at ``relpath`` (module docstring): readable, unique per file."""
    stem = relpath.rsplit(".", 1)[0] if "." in relpath.rsplit("/", 1)[-1] else relpath
    parts = stem.split("/")
    slug = KEY_CHARS.sub("_", stem.replace("/", "_"))
    exact = (
        not shared_stem
        and len(slug) <= MAX_KEY
        and not KEY_CHARS.search("".join(parts))  # nothing replaced
        and all("_" not in p for p in parts[:-1])  # folders: "_" only as the separator
        and not nested  # [split/]class/file: the separators are known
    )
    if exact:
        return slug
    digest = hashlib.sha256(relpath.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{slug[-(MAX_KEY - 17) :]}-{digest}"


def is_hidden(path: str | os.PathLike) -> bool:
    """Whether a path relative to a dataset folder is hidden: its name or any folder on the
    way starts with ``.`` (``.DS_Store``, macOS ``._x.jpg``, and every file under
    ``.ipynb_checkpoints/``, ``.git/``, ``.thumbnails/``). Why folders too: such a folder
    inside a class folder holds copies of that class's images, which would be read as more
    images of the class and could fall in another split than their originals."""
    return any(part.startswith(".") for part in Path(path).parts)


def is_image(f: Path, root: Path) -> bool:
    """Whether ``f`` (under ``root``) is an image file, not hidden (:func:`is_hidden`)."""
    return f.suffix.lower() in IMAGE_SUFFIXES and f.is_file() and not is_hidden(f.relative_to(root))


def class_folders(root: Path) -> tuple[set[str], set[str]]:
    """(class folders holding at least one image, folders holding none) of ``root``; images
    under hidden folders (:func:`is_hidden`) do not count."""
    if not root.is_dir():
        raise AdapterError(f"{root}: directory not found")
    full, empty = set(), set()
    for d in root.iterdir():
        if d.is_dir() and not is_hidden(d.name):
            has_image = any(is_image(f, d) for f in d.rglob("*"))
            (full if has_image else empty).add(d.name)
    return full, empty


def folder_items(root: Path, source: str, prefix: str, only: set[str] | None = None) -> list[Item]:
    if not root.is_dir():
        raise AdapterError(f"{root}: directory not found")
    items = []
    for cls_dir in sorted(p for p in root.iterdir() if p.is_dir() and not is_hidden(p.name)):
        if only is not None and cls_dir.name not in only:
            continue
        files = [f for f in sorted(cls_dir.rglob("*")) if f.suffix.lower() in IMAGE_SUFFIXES]
        stems = Counter(f.with_suffix("") for f in files)
        for f in files:
            if not f.is_file():
                continue
            rel = f"{prefix}{f.relative_to(root).as_posix()}"
            nested = len(f.relative_to(root).parts) != 2
            key = file_key(rel, shared_stem=stems[f.with_suffix("")] > 1, nested=nested)
            items.append(Item(key, cls_dir.name, source, f.read_bytes, rel))
    return items


def _imagefolder_roots(root: Path) -> list[tuple[Path, str, str]]:
    """(folder, source split, key prefix) of each class-folder root of an image folder."""
    if not (root / "train").is_dir():
        return [(root, "all", "")]
    roots = [(root / "train", "train", "train/")]
    for name in ("test", "val"):
        if (root / name).is_dir():
            return [*roots, (root / name, "test", f"{name}/")]
    return roots


def imagefolder_class_roots(root: str | os.PathLike) -> list[Path]:
    """The folders of an image folder that hold its class folders (``DatasetKind.class_roots``)."""
    return [r for r, _, _ in _imagefolder_roots(Path(root))]


def imagefolder_classes(root: str | os.PathLike) -> list[str]:
    """Sorted class folder names with at least one image, without listing every image."""
    root = Path(root)
    classes = set().union(*(class_folders(r)[0] for r, _, _ in _imagefolder_roots(root)))
    if not classes:
        raise AdapterError(f"{root}: no images found (expected <class>/<image> folders)")
    return sorted(classes)


def imagefolder_items(
    root: str | os.PathLike, only: set[str] | None = None
) -> tuple[list[str], list[Item]]:
    root = Path(root)
    items = [
        it
        for r, source, prefix in _imagefolder_roots(root)
        for it in folder_items(r, source, prefix, only)
    ]
    if not items and only is None:
        raise AdapterError(f"{root}: no images found (expected <class>/<image> folders)")
    return imagefolder_classes(root) if only is not None else sorted({i.cls for i in items}), items


def fashion_mnist_classes(root: str | os.PathLike) -> list[str]:
    return list(FASHION_MNIST_CLASSES)


def adapter_readers(kind: str) -> tuple[Callable, Callable]:
    """The (items reader, class-list reader) of adapter kind ``kind`` (registered in
    :data:`imagenot.acquire.kinds.DATASET_KINDS`, the one list of kinds). Every class list
    either returns is checked, whichever adapter (a plugin's too) read it: refused
    (AdapterError naming the dataset folder, the position and the name) when a name cannot be
    written to classes.txt and read back unchanged (a folder name holding a line break) or is
    given twice (:func:`imagenot.core.dataset.check_class_names`)."""
    from imagenot.core.dataset import DatasetError, check_class_names

    entry = DATASET_KINDS.get(kind)
    if entry is None or not entry.adapter:
        raise AdapterError(f"unknown dataset kind {kind!r}; adapters exist for {adapter_kinds()}")
    items, classes = resolve(entry.items), resolve(entry.classes)

    def checked(names: object, root) -> list[str]:
        try:
            return check_class_names(names, root, f"{kind} class")
        except DatasetError as exc:
            raise AdapterError(str(exc)) from None

    def read_items(root, only=None):
        names, found = items(root, only)
        return checked(names, root), found

    return read_items, lambda root: checked(classes(root), root)
