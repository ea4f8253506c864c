"""Adapters: datasets already on disk, materialised into the one on-disk format.

Each reader lists items (key, class, source split, loader of pixels) without decoding them,
optionally for a subset of classes only; :func:`class_split` makes the seeded train/val/test
split of one class. Large datasets (ImageNet: 1.33 M images) are written by parallel jobs over
contiguous class ranges (:func:`materialise_range`, ``acquire.classes_per_job`` classes each:
listing, memory and work bounded by the range; a finished range is skipped on a rerun), then
:func:`imagenot.acquire.dataset.gather_parts` writes manifest, classes and fingerprint. The
split of a class depends only on the seed and the class name, so any number of jobs gives the
same manifest rows as one job (:func:`materialise` runs every range, then gathers).

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

Files on disk (imagefolder, imagenet), issue 16:

- keys come from the path relative to the dataset root, unique per file: the path without its
  extension, characters other than letters, digits, ``_`` and ``-`` replaced by ``_``; a
  short sha256 of the exact path is appended when that is not collision-free by construction
  (a replaced character, a nested folder, a stem shared by two files of a folder such as
  ``photo.jpg`` and ``photo.png``, a key cut to length). The path itself is kept in the
  manifest's ``source`` column.
- hidden files (``.DS_Store``, macOS ``._x.jpg``) are skipped and counted (reason ``hidden``);
  a file that cannot be read or decoded is skipped and counted by its reason
  (``imagenot.acquire.images`` codes, ``unreadable`` for I/O errors), up to
  ``max_unreadable_share`` of a range's images, beyond which the job fails naming the first.
  An image whose links lead out of the dataset folder is not read: skipped and counted the
  same way (reason ``outside_dataset``); a whole-file source (CIFAR-10 batches, idx files, the
  devkit) that does is refused naming it.
  A skipped image leaves its split one short (the split is drawn before decoding, so each image
  is decoded once).
- a class folder without images, and a class left with no training image, stop the job with
  the folders named unless ``allow_empty`` (then they are reported in the log and the empty
  folders left out).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
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
from imagenot.acquire.dataset import Record, gather_parts, part_is_done, write_part
from imagenot.acquire.kinds import DATASET_KINDS, adapter_kinds
from imagenot.acquire.settings import MaterialiseSettings
from imagenot.io import write_text
from imagenot.registries import resolve

log = logging.getLogger(__name__)

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


def _inside(root: Path, path: Path) -> Path:
    """``path``, refused (naming it and its target) when links take it out of ``root``."""
    target = outside(root, path)
    if target is not None:
        raise AdapterError(f"{path}: a link to {target}, outside the dataset folder {root}")
    return path


def _find(root: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (root / name).is_file():
            return _inside(root, root / name)
    raise AdapterError(f"{root}: missing {stem}[.gz]")


def fashion_mnist_items(
    root: str | os.PathLike, only: set[str] | None = None
) -> tuple[list[str], list[Item]]:
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
            if only is None or FASHION_MNIST_CLASSES[y[i]] in only
        ]
    return list(FASHION_MNIST_CLASSES), items


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
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise AdapterError(
            f"{path}: not a readable CIFAR-10 batch ({exc or 'truncated'})"
        ) from None
    if not isinstance(obj, dict):
        raise AdapterError(f"{path}: not a CIFAR-10 batch (a {type(obj).__name__}, not a dict)")
    return obj


def cifar10_classes(root: str | os.PathLike) -> list[str]:
    root = Path(root)
    meta = _unpickle(_inside(root, root / "batches.meta"))
    names = meta.get(b"label_names", meta.get("label_names"))
    if not isinstance(names, list) or not names:
        raise AdapterError(f"{root / 'batches.meta'}: no label_names list")
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def cifar10_items(
    root: str | os.PathLike, only: set[str] | None = None
) -> tuple[list[str], list[Item]]:
    root = Path(root)
    classes = cifar10_classes(root)
    items: list[Item] = []
    counts = {"train": 0, "test": 0}
    batches = [(f"data_batch_{i}", "train") for i in range(1, 6)] + [("test_batch", "test")]
    for name, source in batches:
        batch = _unpickle(_inside(root, root / name))
        try:
            data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
            labels = list(batch[b"labels"])
        except (KeyError, ValueError) as exc:
            raise AdapterError(f"{root / name}: not a CIFAR-10 batch ({exc})") from exc
        offset = counts[source]
        counts[source] += len(labels)
        items += [
            Item(
                f"{source}-{offset + i:06d}",
                classes[labels[i]],
                source,
                lambda i=i, d=data: d[i].transpose(1, 2, 0),
            )
            for i in range(len(labels))
            if only is None or classes[labels[i]] in only
        ]
    return classes, items


KEY_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_KEY = 90


def _key(relpath: str, shared_stem: bool = False, nested: bool = False) -> str:
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


def _is_image(f: Path) -> bool:
    return f.suffix.lower() in IMAGE_SUFFIXES and f.is_file() and not f.name.startswith(".")


def _class_folders(root: Path) -> tuple[set[str], set[str]]:
    """(class folders holding at least one image, folders holding none) of ``root``."""
    if not root.is_dir():
        raise AdapterError(f"{root}: directory not found")
    full, empty = set(), set()
    for d in root.iterdir():
        if d.is_dir() and not d.name.startswith("."):
            (full if any(map(_is_image, d.rglob("*"))) else empty).add(d.name)
    return full, empty


def _folder_classes(root: Path) -> set[str]:
    """Class folders of ``root`` holding at least one image (stops at each folder's first)."""
    return _class_folders(root)[0]


def _hidden(name: str) -> bool:
    return name.startswith(".")


def _folder_items(root: Path, source: str, prefix: str, only: set[str] | None = None) -> list[Item]:
    if not root.is_dir():
        raise AdapterError(f"{root}: directory not found")
    items = []
    for cls_dir in sorted(p for p in root.iterdir() if p.is_dir() and not _hidden(p.name)):
        if only is not None and cls_dir.name not in only:
            continue
        files = [f for f in sorted(cls_dir.rglob("*")) if f.suffix.lower() in IMAGE_SUFFIXES]
        stems: dict[Path, int] = {}
        for f in files:
            stems[f.with_suffix("")] = stems.get(f.with_suffix(""), 0) + 1
        for f in files:
            if not f.is_file():
                continue
            rel = f"{prefix}{f.relative_to(root).as_posix()}"
            nested = len(f.relative_to(root).parts) != 2
            key = _key(rel, shared_stem=stems[f.with_suffix("")] > 1, nested=nested)
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
    classes = set().union(*(_folder_classes(r) for r, _, _ in _imagefolder_roots(root)))
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
        for it in _folder_items(r, source, prefix, only)
    ]
    if not items and only is None:
        raise AdapterError(f"{root}: no images found (expected <class>/<image> folders)")
    return imagefolder_classes(root) if only is not None else sorted({i.cls for i in items}), items


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
        return str(path), _inside(root, path).read_bytes()
    _inside(root, tarball)
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


def _flat_val_labels(root: Path, files: list[str]) -> dict[str, str]:
    meta_name, meta = _devkit_file(root, META_MAT)
    gt_name, gt = _devkit_file(root, GROUND_TRUTH)
    ids = parse_ground_truth(gt.decode(errors="replace"), gt_name)
    return flat_val_labels(files, ids, parse_meta_mat(meta, meta_name), gt_name)


def _flat_val_items(root: Path, labels: dict[str, str], only: set[str] | None) -> list[Item]:
    # keyed as in the val/<wnid>/ layout, so both layouts give the same dataset
    return [
        Item(_key(f"val/{wnid}/{f}"), wnid, "test", (root / "val" / f).read_bytes, f"val/{f}")
        for f, wnid in labels.items()
        if only is None or wnid in only
    ]


def _imagenet_flat_val(root: Path) -> list[str]:
    """Flat val/ image names (original ILSVRC-2012 layout), or [] for val/<wnid>/ folders."""
    for sub in ("train", "val"):
        if not (root / sub).is_dir():
            raise AdapterError(f"{root}: ILSVRC-2012 layout needs {sub}/ with wnid folders")
    val = list((root / "val").iterdir())
    flat = sorted(p.name for p in val if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if flat and any(p.is_dir() for p in val):
        raise AdapterError(f"{root / 'val'}: mixes wnid folders and flat images")
    return flat


def imagenet_class_roots(root: str | os.PathLike) -> list[Path]:
    """``train/``, and ``val/`` when it holds wnid folders (``DatasetKind.class_roots``)."""
    root = Path(root)
    return [root / "train"] + ([] if _imagenet_flat_val(root) else [root / "val"])


def _check_wnids(root: Path, classes: list[str]) -> list[str]:
    bad = [c for c in classes if not WNID.fullmatch(c)]
    if bad:
        raise AdapterError(f"{root}: class folders are not wnids: {bad[:5]}")
    return classes


def imagenet_classes(root: str | os.PathLike) -> list[str]:
    """Sorted wnids of ILSVRC-2012 at ``root`` (train folders and val labels), cheaply."""
    root = Path(root)
    flat = _imagenet_flat_val(root)
    if not flat:
        return _check_wnids(root, imagefolder_classes(root))
    classes = _folder_classes(root / "train") | set(_flat_val_labels(root, flat).values())
    return _check_wnids(root, sorted(classes))


def imagenet_items(
    root: str | os.PathLike, only: set[str] | None = None
) -> tuple[list[str], list[Item]]:
    root = Path(root)
    flat = _imagenet_flat_val(root)
    if not flat:
        classes, items = imagefolder_items(root, only)
    else:
        labels = _flat_val_labels(root, flat)
        items = _folder_items(root / "train", "train", "train/", only)
        items += _flat_val_items(root, labels, only)
        classes = imagenet_classes(root) if only is not None else sorted({it.cls for it in items})
    return _check_wnids(root, classes), items


def fashion_mnist_classes(root: str | os.PathLike) -> list[str]:
    return list(FASHION_MNIST_CLASSES)


def _adapter(kind: str) -> tuple[Callable, Callable]:
    """The (items reader, class-list reader) of adapter kind ``kind`` (registered in
    :data:`imagenot.acquire.kinds.DATASET_KINDS`, the one list of kinds)."""
    entry = DATASET_KINDS.get(kind)
    if entry is None or not entry.adapter:
        raise AdapterError(f"unknown dataset kind {kind!r}; adapters exist for {adapter_kinds()}")
    return resolve(entry.items), resolve(entry.classes)


def class_count_hint(kind: str, path: str | os.PathLike) -> int:
    """Classes to plan range jobs for: folders under ``path`` (or ``path``/train) when the data
    is there (a subset of ImageNet plans fewer jobs), else the known count of the kind, else 1.

    Only a plan: a range job takes its classes from the real class list, and the last job takes
    every class past the planned ranges, so a wrong hint costs balance, never coverage.
    """
    root = Path(path)
    entry = DATASET_KINDS.entry(kind)
    if entry.class_folders:
        folder = root / "train" if (root / "train").is_dir() else root
        try:
            return max(1, sum(1 for d in os.scandir(folder) if d.is_dir()))
        except OSError:
            pass
    return entry.class_count or 1


def n_range_jobs(n_classes: int, classes_per_job: int) -> int:
    """Range jobs for ``n_classes`` classes at ``classes_per_job`` each (at least one)."""
    return max(1, -(-n_classes // classes_per_job))


def range_classes(classes: list[str], job: int, jobs: int, classes_per_job: int) -> list[str]:
    """Classes of range job ``job`` of ``jobs``: ``classes_per_job`` consecutive classes of the
    sorted class names (the order a single job writes them in, whatever the label order); the
    last job also takes every class beyond the planned ranges."""
    if not 0 <= job < jobs:
        raise ValueError(f"job {job} is not in 0..{jobs - 1}")
    start = job * classes_per_job
    stop = None if job == jobs - 1 else start + classes_per_job
    return sorted(classes)[start:stop]


# ------------------------------------------------------------------------- split and write


def class_split(
    cls: str, group: list[Item], settings: MaterialiseSettings
) -> list[tuple[Item, str]]:
    """Seeded split of one class's items (listing order) as the dataset's ``settings`` say:
    (item, split) for test, then val, then train items. Official test items stay test (capped
    at ``test_per_class`` if given); items without a source split give ``test_per_class`` test
    images first. Depends only on the seed, the class name and its items, never on other classes
    (so ranges can be split apart).
    """
    seed, val_per_class = settings.seed, settings.val_per_class
    test_per_class, max_train_per_class = settings.test_per_class, settings.max_train_per_class
    rng = class_seed(seed, cls)
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
    return (
        [(it, "test") for it in test]
        + [(it, "val") for it in val]
        + [(it, "train") for it in train]
    )


def _by_class(items: list[Item]) -> dict[str, list[Item]]:
    by_class: dict[str, list[Item]] = {}
    for it in items:
        by_class.setdefault(it.cls, []).append(it)
    return by_class


def assign_adapter_splits(
    items: list[Item], settings: MaterialiseSettings
) -> list[tuple[Item, str]]:
    """Every class's :func:`class_split`, in class order; training items then in the seeded
    permutation ``default_rng([seed, 1])`` (the order :func:`gather_parts` gives)."""
    by_class = _by_class(items)
    out: list[tuple[Item, str]] = []
    for cls in sorted(by_class):
        out += class_split(cls, by_class[cls], settings)
    train_idx = [i for i, (_, s) in enumerate(out) if s == "train"]
    order = np.random.default_rng([settings.seed, 1]).permutation(len(train_idx))
    shuffled = [out[train_idx[i]] for i in order]
    return (
        shuffled
        + [pair for pair in out if pair[1] == "val"]
        + [pair for pair in out if pair[1] == "test"]
    )


def _written_with(settings: MaterialiseSettings) -> dict:
    """What a range's part manifest records of its settings, and compares on a rerun (a range
    written with other settings is redone): every field but the range plan. The key names are
    those of the manifests written so far (``quality``), so that finished ranges stay done."""
    s = settings
    return {
        "kind": s.kind,
        "path": str(s.path),
        "image_size": s.image_size,
        "resize_mode": s.resize_mode,
        "quality": s.jpeg_quality,
        "seed": s.seed,
        "val_per_class": s.val_per_class,
        "test_per_class": s.test_per_class,
        "max_train_per_class": s.max_train_per_class,
        "shard_size": s.shard_size,
        "max_unreadable_share": s.max_unreadable_share,
        "allow_empty": s.allow_empty,
    }


def materialise_range(
    out_dir: str | os.PathLike,
    part_manifest: str | os.PathLike,
    settings: MaterialiseSettings,
    *,
    job: int,
) -> Path:
    """Write the classes of range job ``job`` (:func:`range_classes`): their shards
    ``shards/{split}-{job:05d}-{i:06d}.tar`` in ``out_dir`` and the part manifest (in class
    order: each class's test, val, train items). A part manifest already written with the same
    settings, whose shards are all on disk, makes this a no-op; a killed job redoes its range.
    Unreadable files and empty classes: module docstring; the counts by reason are logged and
    written beside the part manifest (``<part>.skipped.json``).
    """
    from tqdm import tqdm

    s = settings
    kind, path, jobs = s.kind, s.path, s.jobs
    image_size, resize_mode, quality = s.image_size, s.resize_mode, s.jpeg_quality
    read_items, read_classes = _adapter(kind)
    classes = read_classes(path)
    mine = range_classes(classes, job, jobs, s.classes_per_job)
    params = {"job": job, "classes": mine, **_written_with(s)}
    if part_is_done(out_dir, part_manifest, params):
        log.info("%s: range %d already written with these settings; nothing to do", path, job)
        return Path(part_manifest)
    _, items = read_items(path, set(mine))
    skipped = {"hidden": sum(1 for it in items if it.path and _hidden(Path(it.path).name))}
    items = [it for it in items if not (it.path and _hidden(Path(it.path).name))]
    by_class = _by_class(items)
    pairs = []
    for cls in mine:
        pairs += class_split(cls, by_class.get(cls, []), settings)
    _check_empty(path, kind, mine, pairs, s.allow_empty)
    log.info("%s: range %d/%d, %d classes, %d images", path, job, jobs, len(mine), len(pairs))
    progress = tqdm(
        total=len(pairs), desc=f"materialise {kind} range {job}", unit="img", mininterval=5
    )

    allowed = int(s.max_unreadable_share * len(pairs))
    first_bad: list[str] = []

    def skip(item: Item, reason: str, detail: str | None) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1
        first_bad.append(f"{item.path or item.key}: {reason} ({detail})")
        n_bad = sum(n for r, n in skipped.items() if r != "hidden")
        if n_bad > allowed:
            raise AdapterError(
                f"{path}: {n_bad} unreadable image(s) in range {job} of {len(pairs)}, more than "
                f"acquire.max_unreadable_share {s.max_unreadable_share:g} allows (first: "
                f"{first_bad[0]})"
            )
        log.warning("%s: skipped %s", path, first_bad[-1])

    def loader(item: Item) -> Callable[[], bytes | None]:
        def load() -> bytes | None:
            progress.update()
            target = outside(path, Path(path) / item.path) if item.path else None
            if target is not None:  # a link out of the dataset folder: counted, not read
                return skip(item, "outside_dataset", f"a link to {target}")
            try:
                pixels = item.load()
            except OSError as exc:
                return skip(item, "unreadable", exc.strerror or str(exc))
            if isinstance(pixels, np.ndarray):
                return images.normalise_array(pixels, image_size, resize_mode, quality)
            result = images.validate_image(
                pixels,
                size=image_size,
                resize_mode=resize_mode,
                max_pixels=images.ON_DISK_MAX_PIXELS,
                min_size=0,
                quality=quality,
            )
            if result.jpeg is None:
                return skip(item, result.reason, result.detail)
            return result.jpeg

        return load

    records = (Record(it.key, it.cls, split, loader(it), source=it.path) for it, split in pairs)
    write_part(
        out_dir,
        records,
        classes,
        part_manifest,
        part=f"{job:05d}",
        shard_size=s.shard_size,
        params=params,
    )
    progress.close()
    counts = {r: n for r, n in sorted(skipped.items()) if n}
    log.info("%s: range %d skipped %s", path, job, json.dumps(counts) if counts else "nothing")
    write_text(json.dumps(counts, sort_keys=True) + "\n", Path(f"{part_manifest}.skipped.json"))
    return Path(part_manifest)


def empty_class_folders(kind: str, path: str | os.PathLike) -> list[str]:
    """Class folders without any image file, for the kinds stored as class folders (those that
    declare ``class_roots`` in :data:`imagenot.acquire.kinds.DATASET_KINDS`)."""
    entry = DATASET_KINDS.entry(kind)
    if entry.class_roots is None:
        return []
    roots = resolve(entry.class_roots)(Path(path))
    full: set[str] = set()
    empty: set[str] = set()
    for r in roots:
        f, e = _class_folders(r)
        full |= f
        empty |= e
    return sorted(empty - full)


def _check_empty(path, kind: str, mine: list[str], pairs: list, allow_empty: bool) -> None:
    """Stop on class folders without images and on classes without a training image (module
    docstring), unless ``allow_empty``; then say so in the log."""
    problems = []
    empty = empty_class_folders(kind, path)
    if empty:
        problems.append(f"class folder(s) without images, left out: {empty[:5]}")
    with_train = {it.cls for it, split in pairs if split == "train"}
    no_train = [c for c in mine if c not in with_train]
    if no_train:
        problems.append(f"class(es) without a training image: {no_train[:5]}")
    if not problems:
        return
    message = f"{path}: " + "; ".join(problems)
    if not allow_empty:
        raise AdapterError(f"{message} (acquire.allow_empty: true goes on)")
    log.warning("%s", message)


def materialise(
    out_dir: str | os.PathLike,
    settings: MaterialiseSettings,
    *,
    parts_dir: str | os.PathLike | None = None,
) -> Path:
    """Write the dataset ``settings`` name (``kind`` at ``path``) to ``out_dir`` in the on-disk
    format: every range job in turn (ranges of ``settings.classes_per_job`` classes, counted on
    the real class list rather than planned from a hint), then the gather, in one process (the
    workflow runs the range jobs in parallel instead). Part manifests go to ``parts_dir`` (a
    temporary folder by default)."""
    import dataclasses
    import tempfile

    _, read_classes = _adapter(settings.kind)
    jobs = n_range_jobs(len(read_classes(settings.path)), settings.classes_per_job)
    settings = dataclasses.replace(settings, jobs=jobs)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(parts_dir) if parts_dir is not None else Path(tmp)
        parts = [folder / f"range-{j:05d}.parquet" for j in range(jobs)]
        for j, part in enumerate(parts):
            materialise_range(out_dir, part, settings, job=j)
        return gather_parts(out_dir, parts, seed=settings.seed)
