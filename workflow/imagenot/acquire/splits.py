"""Seeded split assignment: which images of a class are test, validation and training.

The split of a class depends only on the master seed, the class name and its items, never on
other classes: the range jobs of a dataset on disk split their classes apart
(:mod:`imagenot.acquire.materialise`), and any number of jobs gives the same manifest rows as
one job. The LAION build draws its splits from the same per-class generator
(:func:`class_seed`, :func:`imagenot.acquire.build.plan_splits`).
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import numpy as np

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


def group_by_class(items: list[Item]) -> dict[str, list[Item]]:
    """Items by class name, each class in listing order."""
    by_class: dict[str, list[Item]] = {}
    for it in items:
        by_class.setdefault(it.cls, []).append(it)
    return by_class
