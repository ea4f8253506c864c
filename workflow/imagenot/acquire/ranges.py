"""The range plan of a dataset on disk: which classes each range job writes.

Large datasets (ImageNet: 1.33 M images) are written by parallel jobs over contiguous class
ranges (``acquire.classes_per_job`` classes each: listing, memory and work bounded by the
range). Kept apart from the range job itself (:mod:`imagenot.acquire.materialise`) and free of
numpy: the rule's settings (:class:`imagenot.acquire.settings.MaterialiseSettings`) plan the
number of jobs when the workflow is planned.
"""

from __future__ import annotations

import os
from pathlib import Path

from imagenot.acquire.kinds import DATASET_KINDS


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
