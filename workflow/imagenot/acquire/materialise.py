"""The range job: one contiguous class range of a dataset on disk, written in the one on-disk
format.

A dataset on disk is read by its adapter (:mod:`imagenot.acquire.adapters`) and written by
parallel jobs over class ranges (:mod:`imagenot.acquire.ranges`; :func:`materialise_range`,
a finished range is skipped on a rerun), each class split by :mod:`imagenot.acquire.splits`;
then :func:`imagenot.acquire.dataset.gather_parts` writes manifest, classes and fingerprint
(:func:`materialise` runs every range, then gathers, in one process).

Only the splits some rule of the config reads are written (``settings.splits``,
:mod:`imagenot.plan.split_readers`): every class is still split the same way (the draw does not
depend on what is stored), and a split nothing reads is left out of the shards and the manifest.
Each split is stored at the side its readers need (``settings.split_sizes``, else
``image_size``).

The test images of a dataset published weights are evaluated on (``keep_originals``) are also
stored as their original files, byte for byte (``originals/``, :mod:`imagenot.core.dataset`): the
input the published accuracies were measured on. An adapter that yields pixel arrays (CIFAR's
batches) has no file to keep.

Images skipped:

- hidden files (``.DS_Store``, macOS ``._x.jpg``) and every file under a hidden folder
  (``.ipynb_checkpoints/``: copies of the class's images) are skipped and counted (reason
  ``hidden``, :func:`imagenot.acquire.adapters.is_hidden`);
  a file that cannot be read or decoded is skipped and counted by its reason
  (``imagenot.acquire.images`` codes, ``unreadable`` for I/O errors), up to
  ``max_unreadable_share`` of a range's images, beyond which the job fails naming the first.
  An image whose links lead out of the dataset folder is not read: skipped and counted the
  same way (reason ``outside_dataset``).
  A skipped image leaves its split one short (the split is drawn before decoding, so each image
  is decoded once).
- a class folder without images, and a class left with no training image, stop the job with
  the folders named unless ``allow_empty`` (then they are reported in the log and the empty
  folders left out).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections import defaultdict
from pathlib import Path

import numpy as np

from imagenot.acquire import images
from imagenot.acquire.adapters import (
    AdapterError,
    Item,
    adapter_readers,
    class_folders,
    is_hidden,
    outside,
)
from imagenot.acquire.dataset import Record, gather_parts, part_is_done, write_part
from imagenot.acquire.files import RangeFiles
from imagenot.acquire.kinds import DATASET_KINDS
from imagenot.acquire.ranges import n_range_jobs, range_classes
from imagenot.acquire.settings import MaterialiseSettings
from imagenot.acquire.splits import class_split
from imagenot.core.io import write_text
from imagenot.core.paths import SPLITS
from imagenot.core.registries import resolve

log = logging.getLogger(__name__)


def _written_with(settings: MaterialiseSettings) -> dict:
    """What a range's part manifest records of its settings, and compares on a rerun (a range
    written with other settings is redone): every field but the range plan. The key names are
    those of the manifests written so far (``quality``), so that finished ranges stay done."""
    s = settings
    plan = ("jobs", "classes_per_job", "jpeg_quality", "keep_originals", "splits", "split_sizes")
    return {
        **{k: v for k, v in dataclasses.asdict(s).items() if k not in plan},
        "quality": s.jpeg_quality,
        # only where set: ranges of datasets without published weights stay done
        **({"keep_originals": True} if s.keep_originals else {}),
        # only where some split is not stored: ranges of every split stay done
        **({"splits": list(s.splits)} if set(s.splits) != set(SPLITS) else {}),
        # only where some split is stored smaller: ranges stored at one size stay done
        **({"split_sizes": dict(sorted(s.split_sizes.items()))} if s.split_sizes else {}),
    }


def materialise_range(
    files: RangeFiles, settings: MaterialiseSettings, *, out: str | os.PathLike, job: int
) -> Path:
    """Write the classes of range job ``job`` (:func:`range_classes`): their shards
    ``shards/{split}-{job:05d}-{i:06d}.tar`` in the dataset's folder ``out`` and the part
    manifest ``files.part`` (in class order: each class's test, val, train items). A part
    manifest already written with the same settings, whose shards are all on disk, makes this a
    no-op; a killed job redoes its range.
    Unreadable files and empty classes: module docstring; the counts by reason are logged and
    written beside the part manifest (``<part>.skipped.json``).
    """
    from tqdm import tqdm

    s = settings
    kind, path, jobs = s.kind, s.path, s.jobs
    read_items, read_classes = adapter_readers(kind)
    classes = read_classes(path)
    mine = range_classes(classes, job, jobs, s.classes_per_job)
    params = {"job": job, "classes": mine, **_written_with(s)}
    if part_is_done(out, files.part, params):
        log.info("%s: range %d already written with these settings; nothing to do", path, job)
        return Path(files.part)
    _, items = read_items(path, set(mine))
    skipped = {"hidden": sum(1 for it in items if it.path and is_hidden(it.path))}
    items = [it for it in items if not (it.path and is_hidden(it.path))]
    by_class: dict[str, list[Item]] = defaultdict(list)  # each class in listing order
    for it in items:
        by_class[it.cls].append(it)
    pairs = [pair for cls in mine for pair in class_split(cls, by_class[cls], settings)]
    _check_empty(path, kind, mine, pairs, s.allow_empty)
    pairs = [(it, split) for it, split in pairs if split in s.splits]  # the splits read
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
                f"{path}: {n_bad} unreadable image(s) in range {job} of {len(pairs)}, over "
                f"acquire.max_unreadable_share {s.max_unreadable_share:g} (first: {first_bad[0]})"
            )
        log.warning("%s: skipped %s", path, first_bad[-1])

    def record(item: Item, split: str) -> Record:
        """The item's record: its stored copy at its split's side; where the split keeps
        originals (the test images of a dataset published weights are evaluated on), the
        file's own bytes too."""
        keep = s.keep_originals and split == "test"
        size = s.split_sizes.get(split, s.image_size)
        kept: dict = {}

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
                return images.normalise_array(pixels, size, s.resize_mode, s.jpeg_quality)
            result = images.validate_image(
                pixels,
                size=size,
                resize_mode=s.resize_mode,
                max_pixels=images.ON_DISK_MAX_PIXELS,
                min_size=0,
                quality=s.jpeg_quality,
            )
            if result.jpeg is None:
                return skip(item, result.reason, result.detail)
            if keep:
                kept["original"] = pixels  # decoded and checked above, stored as it is
            return result.jpeg

        original = (lambda: kept.pop("original", None)) if keep else None
        return Record(item.key, item.cls, split, load, source=item.path, original=original)

    records = (record(it, split) for it, split in pairs)
    write_part(
        out,
        records,
        classes,
        files.part,
        part=f"{job:05d}",
        shard_size=s.shard_size,
        params=params,
    )
    progress.close()
    counts = {r: n for r, n in sorted(skipped.items()) if n}
    log.info("%s: range %d skipped %s", path, job, json.dumps(counts) if counts else "nothing")
    write_text(json.dumps(counts, sort_keys=True) + "\n", Path(f"{files.part}.skipped.json"))
    return Path(files.part)


def _check_empty(path, kind: str, mine: list[str], pairs: list, allow_empty: bool) -> None:
    """Stop on class folders without images (for the kinds stored as class folders: those that
    declare ``class_roots`` in :data:`imagenot.acquire.kinds.DATASET_KINDS`) and on classes
    without a training image (module docstring), unless ``allow_empty``; then say so in the
    log."""
    problems = []
    roots = DATASET_KINDS.entry(kind).class_roots
    found = [class_folders(r) for r in resolve(roots)(Path(path))] if roots else []
    empty = sorted(set().union(*(e for _, e in found)) - set().union(*(f for f, _ in found)))
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
    import tempfile

    _, read_classes = adapter_readers(settings.kind)
    jobs = n_range_jobs(len(read_classes(settings.path)), settings.classes_per_job)
    settings = dataclasses.replace(settings, jobs=jobs)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(parts_dir) if parts_dir is not None else Path(tmp)
        parts = [folder / f"range-{j:05d}.parquet" for j in range(jobs)]
        for j, part in enumerate(parts):
            materialise_range(RangeFiles(str(part)), settings, out=out_dir, job=j)
        return gather_parts(out_dir, parts, seed=settings.seed)
