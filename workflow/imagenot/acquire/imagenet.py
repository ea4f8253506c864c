"""The ILSVRC-2012 (ImageNet) adapter: ``train/<wnid>/*.JPEG`` and either ``val/<wnid>/*.JPEG``
or the original flat ``val/ILSVRC2012_val_<n>.JPEG``, labelled by the devkit
(``ILSVRC2012_devkit_t12/`` or ``ILSVRC2012_devkit_t12.tar.gz`` beside ``val/``); both layouts
give the same dataset (the flat files are keyed as in the ``val/<wnid>/`` layout). The
folder layout is read as an image folder (:mod:`imagenot.acquire.adapters`); what is ImageNet's
own, the devkit's ``meta.mat`` and ground truth, is here.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

import numpy as np

from imagenot.acquire.adapters import (
    AdapterError,
    Item,
    class_folders,
    file_key,
    folder_items,
    imagefolder_classes,
    imagefolder_items,
    inside,
    is_hidden,
    is_image,
)

DEVKIT = "ILSVRC2012_devkit_t12"
META_MAT = "data/meta.mat"
GROUND_TRUTH = "data/ILSVRC2012_validation_ground_truth.txt"
VAL_NAME = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG")
WNID = re.compile(r"n\d{8}")


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
            f"{name}: not a devkit meta.mat (synsets: ILSVRC2012_ID, WNID, num_children): {exc!r}"
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
                f"{path}: missing; flat val/ images need the devkit ({DEVKIT}[.tar.gz] in {root})"
            )
        return str(path), inside(root, path).read_bytes()
    inside(root, tarball)
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


def _imagenet_flat_val(root: Path) -> list[str]:
    """Flat val/ image names (original ILSVRC-2012 layout), or [] for val/<wnid>/ folders."""
    for sub in ("train", "val"):
        if not (root / sub).is_dir():
            raise AdapterError(f"{root}: ILSVRC-2012 layout needs {sub}/ with wnid folders")
    val = list((root / "val").iterdir())
    flat = sorted(p.name for p in val if is_image(p, root / "val"))
    if flat and any(p.is_dir() and not is_hidden(p.name) for p in val):
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
    classes = class_folders(root / "train")[0] | set(_flat_val_labels(root, flat).values())
    return _check_wnids(root, sorted(classes))


def imagenet_items(
    root: str | os.PathLike, only: set[str] | None = None
) -> tuple[list[str], list[Item]]:
    root = Path(root)
    flat = _imagenet_flat_val(root)
    if not flat:
        classes, items = imagefolder_items(root, only)
    else:
        items = folder_items(root / "train", "train", "train/", only)
        # keyed as in the val/<wnid>/ layout, so both layouts give the same dataset
        items += [
            Item(
                file_key(f"val/{wnid}/{f}"), wnid, "test", (root / "val" / f).read_bytes, f"val/{f}"
            )
            for f, wnid in _flat_val_labels(root, flat).items()
            if only is None or wnid in only
        ]
        classes = imagenet_classes(root) if only is not None else sorted({it.cls for it in items})
    return _check_wnids(root, classes), items
