"""Seeded split assignment: which images of a class are test, validation and training.

The split of a class depends only on the master seed, the class name and its items, never on
other classes: the range jobs of a dataset on disk split their classes apart
(:mod:`imagenot.acquire.materialise`), and any number of jobs gives the same manifest rows as
one job. The LAION build draws its splits from the same per-class generator
(:func:`class_seed`, :func:`imagenot.acquire.build.plan_splits`).
"""

from __future__ import annotations

import logging
import os
import zlib
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from imagenot.acquire.adapters import Item
    from imagenot.acquire.settings import MaterialiseSettings


def class_seed(seed: int, name: str) -> np.random.Generator:
    """A generator seeded from the master seed and a class name (order-independent)."""
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def class_split(
    cls: str, group: list[Item], settings: MaterialiseSettings
) -> list[tuple[Item, str]]:
    """Seeded split of one class's items (listing order) as the dataset's ``settings`` say:
    (item, split) for test, then val, then train items. Official test items stay test (capped
    at ``test_per_class`` if given); items without a source split give ``test_per_class`` test
    images first. Depends only on the seed, the class name and its items, never on other classes
    (so ranges can be split apart).
    """
    s = settings
    rng = class_seed(s.seed, cls)
    test = [it for it in group if it.source == "test"]
    pool = [it for it in group if it.source != "test"]
    pool = [pool[i] for i in rng.permutation(len(pool))]
    if any(it.source == "all" for it in pool):
        n_test = s.test_per_class or 0  # None: no test images drawn here
        test, pool = pool[:n_test], pool[n_test:]
    elif s.test_per_class is not None and len(test) > s.test_per_class:
        test = [test[i] for i in sorted(rng.permutation(len(test))[: s.test_per_class])]
    val, train = pool[: s.val_per_class], pool[s.val_per_class :]
    if s.max_train_per_class is not None:
        train = train[: s.max_train_per_class]
    return [
        (it, split) for split, its in (("test", test), ("val", val), ("train", train)) for it in its
    ]


KEEP_FIRST = ("test", "val", "train")  # which split keeps an image stored in two


def drop_cross_split_duplicates(
    table: pa.Table, where: str | os.PathLike, log: logging.Logger
) -> pa.Table:
    """``table`` (manifest rows) without the rows whose stored image (``sha256``) another
    split also holds: each such image stays in the first split of :data:`KEEP_FIRST` that
    holds it (an official test split stays whole). The rows dropped are counted by split in
    ``log`` (naming the first pair); their bytes stay in the shards, unreferenced.

    Why: byte-identical files (a copy of a photo under another name or in another class
    folder; the same picture in a dataset's official train and test files) are split apart
    like any two images, and a model would be tested on images it was trained on. Identical
    source files give identical stored images, so the stored image's sha256 finds every such
    pair; the range jobs split classes apart, so only the gather sees them all. Images held
    twice within one split are left as they are. (LAION-built datasets drop exact duplicates
    across the whole dataset when the fill plans them: :mod:`imagenot.acquire.build`.)
    """
    if table.num_rows == 0:
        return table
    codes = table["sha256"].combine_chunks().dictionary_encode()
    image = codes.indices.to_numpy(zero_copy_only=False)  # one number per distinct image
    rank = pc.index_in(table["split"], value_set=pa.array(KEEP_FIRST)).to_numpy(
        zero_copy_only=False
    )
    best = np.full(len(codes.dictionary), len(KEEP_FIRST))
    np.minimum.at(best, image, rank)
    keep = rank == best[image]
    if keep.all():
        return table
    dropped = np.flatnonzero(~keep)
    counts = np.bincount(rank[dropped], minlength=len(KEEP_FIRST))
    row = int(dropped[0])
    twin = int(np.flatnonzero((image == image[row]) & keep)[0])
    keys, names = table["key"], table["split"]
    log.warning(
        "%s: %d image(s) also stored in another split, kept in %s only (dropped: %s; first: "
        "%s (%s) is the same image as %s (%s))",
        where,
        len(dropped),
        " before ".join(KEEP_FIRST),
        ", ".join(f"{s} {n}" for s, n in zip(KEEP_FIRST, counts, strict=True) if n),
        keys[row].as_py(),
        names[row].as_py(),
        keys[twin].as_py(),
        names[twin].as_py(),
    )
    return table.filter(pa.array(keep))


# Why the audit of the download pool excludes an image (the exclusion list's ``reason``):
# a near-duplicate of an image of the reference's compared splits, of another dataset's
# compared split, or a later copy of a photo the pool holds under another URL.
EXCLUSION_REASONS = ("reference", "other_dataset", "pool_copy")


def drop_excluded(
    candidates: pa.Table, lists: list[str], log: logging.Logger
) -> tuple[pa.Table, dict[str, dict[str, int]] | None]:
    """``candidates`` (validated pool rows: ``key``, ``wnid``, ...) without the rows the
    exclusion list in ``lists`` (none: ``candidates`` as they are, and None) names (parquet: ``key``, ``reason`` of
    :data:`EXCLUSION_REASONS`; other columns are the audit's and are not read), and per class
    the rows dropped by reason. The rows kept keep their order, so the seeded split of what is
    left depends only on the seed, the classes and their rows.

    A row naming no validated image of the pool, a key listed twice, an unknown reason or a
    missing column is refused with one line naming the file and the row.
    """
    from imagenot.core.io import read_parquet

    if not lists:
        return candidates, None
    (path,) = lists
    table = read_parquet(path, columns=["key", "reason"])  # a missing column names the file
    keys, reasons = table["key"].to_pylist(), table["reason"].to_pylist()
    pool = dict(zip(candidates["key"].to_pylist(), candidates["wnid"].to_pylist(), strict=True))
    counts: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    for row, (key, reason) in enumerate(zip(keys, reasons, strict=True)):
        if reason not in EXCLUSION_REASONS:
            raise ValueError(
                f"{path}: row {row}: reason {reason!r} is not one of {', '.join(EXCLUSION_REASONS)}"
            )
        if key not in pool:
            raise ValueError(f"{path}: row {row}: key {key!r} names no validated image of the pool")
        if key in seen:
            raise ValueError(f"{path}: row {row}: key {key!r} is listed twice")
        seen.add(key)
        counts.setdefault(pool[key], dict.fromkeys(EXCLUSION_REASONS, 0))[reason] += 1
    if keys:
        by_reason = {r: sum(c[r] for c in counts.values()) for r in EXCLUSION_REASONS}
        log.info(
            "%s: %d image(s) excluded before the fill (%s)",
            path,
            len(keys),
            ", ".join(f"{r} {n}" for r, n in by_reason.items() if n),
        )
    kept = candidates.filter(pc.invert(pc.is_in(candidates["key"], pa.array(keys, pa.string()))))
    return kept, counts


def excluded_columns(report: pa.Table, counts: dict[str, dict[str, int]] | None) -> pa.Table:
    """The classes ``report`` (one row per ``wnid``) with one column ``n_excluded_<reason>``
    per reason of :data:`EXCLUSION_REASONS` (the counts of :func:`drop_excluded`); as it is
    where no exclusion list was given (``counts`` None)."""
    if counts is None:
        return report
    wnids = report["wnid"].to_pylist() if report.num_rows else []
    for reason in EXCLUSION_REASONS:
        column = [counts.get(w, {}).get(reason, 0) for w in wnids]
        report = report.append_column(f"n_excluded_{reason}", pa.array(column, pa.int64()))
    return report
