"""The side a dataset's images are stored at, and their count and bytes, from the config alone.

Why a module of its own: the train stage's planning and the preflight read it (the loader's
batch rings hold stored images; published weights' own resize must not exceed it), and must not
import the acquire stage's jobs, which reach the adapters and their image libraries. The
settings objects it reads (acquire's and curate's) import no third-party library, so a training
job's env needs nothing for them (tests/test_envs.py checks each rule's imports). The byte
figures (estimates, each with its source) serve ``imagenot plan`` (:mod:`imagenot.plan.costs`) and the
range jobs' disk request (rules/acquire.smk).
"""

from __future__ import annotations

import math

from imagenot.acquire.settings import (
    STORED_SIZE_SECTIONS,
    FillSettings,
    MaterialiseSettings,
    keeps_originals,
)
from imagenot.core.paths import SPLITS
from imagenot.core.settings import config_lookup

# ILSVRC-2012's training set: 147.9 GB of JPEGs for 1,281,167 images of mean 469 x 387 px
BYTES_PER_PIXEL = 147.9e9 / 1_281_167 / (469 * 387)
BYTES_PER_PIXEL_SOURCE = (
    "ILSVRC-2012 train's mean JPEG (147.9 GB / 1,281,167 images, mean 469 x 387 px) "
    f"= {BYTES_PER_PIXEL:.2f} bytes per pixel, at the stored image size"
)
# Snakemake's own default disk request (--default-resources disk_mb): a range job asks at least this
DISK_MB_FLOOR = 1000


def stored_size(config, dataset: str) -> int:
    """The side ``dataset``'s images are stored at (its own ``image_size``, else
    ``acquire.image_size``, as :class:`imagenot.acquire.settings.MaterialiseSettings` reads it):
    what the loaders decode and the feed's ring holds (256 px for the paper, not the 224
    trained), and what published weights' own resize must not exceed
    (``imagenot.train.checks.check_stored_size``)."""
    return config_lookup(
        config, STORED_SIZE_SECTIONS, "image_size", {"dataset": dataset}, override=True
    )


def dataset_images(config: dict, dataset: str) -> dict | None:
    """Classes and images per split of ``dataset`` as the config sizes it (LAION-built: classes
    x images per class; adapters: the published sizes, capped by the config's per-class keys),
    with the source; None when the kind's size is unknown until read."""
    from imagenot.acquire.kinds import DATASET_KINDS
    from imagenot.curate.settings import SelectSettings

    kind = DATASET_KINDS[config["datasets"][dataset]["kind"]]
    if not kind.adapter:
        fill = FillSettings.from_config(config, dataset)
        classes = SelectSettings.from_config(config, dataset=dataset).n_classes
        return {
            "classes": classes,
            "train": classes * (fill.images_per_class - fill.test_per_class - fill.val_per_class),
            "val": classes * fill.val_per_class,
            "test": classes * fill.test_per_class,
            "source": "config: n_classes x images per class, an upper bound (every class "
            "full; discovered classes may be fewer)",
        }
    if kind.published_images is None or kind.class_count is None:
        return None
    s = MaterialiseSettings.from_config(config, dataset=dataset)
    classes, (pool, test) = kind.class_count, kind.published_images
    val = classes * s.val_per_class
    train = pool - val
    if s.max_train_per_class:
        train = min(train, classes * s.max_train_per_class)
    if s.test_per_class:
        test = min(test, classes * s.test_per_class)
    return {
        "classes": classes,
        "train": train,
        "val": val,
        "test": test,
        "source": "the dataset's published size, capped by the config's per-class keys",
    }


def split_bytes(config: dict, dataset: str, split: str, side: int | None = None) -> int | None:
    """Bytes of one split of ``dataset``'s materialised images at ``side`` (the split's stored
    side, ``imagenot.plan.split_readers.split_size``; None: the dataset's own), an estimate (source:
    :data:`BYTES_PER_PIXEL_SOURCE`); None when its size is unknown until read."""
    sizes = dataset_images(config, dataset)
    if sizes is None:
        return None
    side = stored_size(config, dataset) if side is None else side
    return round(sizes[split] * side * side * BYTES_PER_PIXEL)


def dataset_bytes(
    config: dict,
    dataset: str,
    splits: tuple[str, ...] = SPLITS,
    sides: dict[str, int] | None = None,
) -> tuple[int | None, str]:
    """Bytes of ``dataset``'s materialised images (``splits``, each at its side in ``sides``,
    else the dataset's stored size; the kept originals apart: :func:`originals_bytes`) and the
    source of the figure, an estimate; None when its size is unknown until read. The splits a
    dataset stores and their sides: ``imagenot.plan.split_readers.stored_splits``, ``split_sizes``."""
    sizes = dataset_images(config, dataset)
    if sizes is None:
        return None, "unknown until the dataset is read"
    own = stored_size(config, dataset)
    at = {split: (sides or {}).get(split, own) for split in splits}
    total = sum(sizes[split] for split in splits)
    px = ", ".join(f"{split} {side} px" for split, side in at.items())
    return sum(split_bytes(config, dataset, split, at[split]) for split in splits), (
        f"{total:,} images ({px}); {sizes['source']}; {BYTES_PER_PIXEL_SOURCE}"
    )


def originals_bytes(config: dict, dataset: str) -> tuple[int | None, str]:
    """Bytes of the test images' original files ``dataset`` keeps beside its copy
    (:func:`keeps_originals`) and the source of the figure: the kind's published test split
    (``DatasetKind.published_originals``), pro rata where the config caps the split. 0 where it
    keeps none; None when their size is unknown until read."""
    from imagenot.acquire.kinds import DATASET_KINDS

    if not keeps_originals(config, dataset):
        return 0, "keeps no originals: no published weights are evaluated on it"
    kind = DATASET_KINDS[config["datasets"][dataset]["kind"]]
    if not kind.adapter:
        return 0, "built from downloads: the stored copy is the only one"
    sizes = dataset_images(config, dataset)
    if kind.published_originals is None or sizes is None or kind.published_images is None:
        return None, "unknown until the dataset is read"
    published, source = kind.published_originals
    per_image = published / kind.published_images[1]
    return round(sizes["test"] * per_image), (
        f"{sizes['test']:,} test images x {per_image / 1e3:,.0f} kB; {source}"
    )


def range_disk_mb(
    config: dict,
    dataset: str,
    splits: tuple[str, ...] = SPLITS,
    sides: dict[str, int] | None = None,
) -> int:
    """Disk (MB) one range job of ``dataset`` writes, its request ``disk_mb``: the stored copy
    and the kept originals (:func:`dataset_bytes`, :func:`originals_bytes`, estimates) of the
    largest job's classes (``acquire.classes_per_job`` of the dataset's classes, the ranges
    planned from the class folders on disk; the last job also takes the classes past them); at
    least Snakemake's own default, also the figure where the size is unknown. ``splits``: the
    ones it stores, at ``sides`` (:func:`dataset_bytes`; ``imagenot.plan.split_readers.
    range_disk_mb`` gives the rule's)."""
    sizes = dataset_images(config, dataset)
    stored, _ = dataset_bytes(config, dataset, splits, sides)
    kept, _ = originals_bytes(config, dataset)
    if sizes is None or stored is None or kept is None:
        return DISK_MB_FLOOR
    s = MaterialiseSettings.from_config(config, dataset=dataset)
    per_job, classes = s.classes_per_job, sizes["classes"]
    largest = max(min(per_job, classes), classes - (s.jobs - 1) * per_job)
    return max(DISK_MB_FLOOR, math.ceil((stored + kept) / classes * largest / 1e6))
