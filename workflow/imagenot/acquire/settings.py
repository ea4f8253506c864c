"""The settings objects of the acquire stage's rules, one per rule.

Why: a key renamed on its way (argparse flags, a dict builder, keyword arguments of the
library functions), each step with a default of its own, drifts from the schema's name and
default. So a field *is* the schema's key: :meth:`FromConfig.from_config` reads it from the
validated config (the dataset's own value where ``datasets.<name>`` sets one, else the stage's), the rule hands the object over as one JSON
argument, the command parses it back and the library functions take the object itself. No field
has a default. Kept free of heavy imports, so that parsing a command line imports neither pyarrow
nor numpy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from imagenot.core.paths import SPLITS
from imagenot.core.settings import FromConfig, PerDataset, omitted_when

# Where a dataset's image_size is read (MaterialiseSettings.SECTIONS): its own key, else acquire's.
STORED_SIZE_SECTIONS = ("datasets.{dataset}", "acquire")

SEED = (
    "the workflow's master seed (the config's top-level `seed`): a key of no section, which "
    "every random choice derives from"
)

NOT_SETTINGS = {
    "imagenot.acquire.settings:.get('test_per_class')": "a dataset's own key, which the schema "
    "leaves unset (no default) where the adapter keeps its whole test split: absent means null",
    "imagenot.acquire.settings:.get('max_train_per_class')": "a dataset's own key without a "
    "default: absent means every training image is kept (null)",
}


@dataclass(frozen=True)
class FillSettings(FromConfig):
    """How a LAION-built dataset is filled and split (``acquire-plan``;
    :func:`imagenot.acquire.build.plan_build` takes it as is). ``images_per_class`` and the
    split sizes are the dataset's where it sets them (else ``curate``'s and ``acquire``'s)."""

    SECTIONS: ClassVar = ("datasets.{dataset}", "acquire", "curate")
    DATASET_OVERRIDES: ClassVar = (
        "images_per_class",
        "test_per_class",
        "val_per_class",
        "allow_fewer",
    )
    DERIVED: ClassVar = {"seed": SEED}

    images_per_class: int
    test_per_class: int
    val_per_class: int
    short_classes: str
    allow_fewer: bool
    near_duplicates: str
    near_duplicate_distance: int
    seed: int

    @classmethod
    def from_config(cls, config, dataset: str) -> FillSettings:  # type: ignore[override]
        return cls(**cls.config_values(config, dataset=dataset), seed=config["seed"])


@dataclass(frozen=True)
class TopupSettings(PerDataset, FromConfig):
    """The next top-up round's choice (``acquire-topup``, :func:`imagenot.acquire.build.
    select_topup`): deficits are counted as the fill counts them (``images_per_class``, the
    near-duplicate keys), ``oversample`` is the curation's."""

    SECTIONS: ClassVar = ("datasets.{dataset}", "acquire", "curate")
    DATASET_OVERRIDES: ClassVar = ("images_per_class",)

    images_per_class: int
    oversample: float
    near_duplicates: str
    near_duplicate_distance: int


@dataclass(frozen=True)
class DownloadSettings(FromConfig):
    """One download part's fetch and validation (``acquire-download``,
    :func:`imagenot.acquire.download.download_part`): the ``acquire`` keys of the same names.
    ``url_map`` maps URL prefixes to served folders (or ``generate:``)."""

    SECTIONS: ClassVar = ("acquire",)

    download_parts: int
    image_size: int
    resize_mode: str
    jpeg_quality: int
    images_per_download_shard: int
    threads_per_process: int
    timeout_s: float
    retries: int
    max_unreachable_fraction: float | None
    min_image_size: int
    max_image_pixels: int
    min_success_rate: float
    max_response_bytes: int
    image_deadline_s: float
    user_agent_token: str | None
    url_map: dict


@dataclass(frozen=True)
class WriteSettings(FromConfig):
    """Storing one download part's kept images (``acquire-write``): ``shard_size`` images per
    tar."""

    SECTIONS: ClassVar = ("acquire",)

    shard_size: int


@dataclass(frozen=True)
class GatherSettings(FromConfig):
    """The gather of part manifests (``acquire-gather``): the master seed orders an adapter
    dataset's training rows (:func:`imagenot.acquire.dataset.gather_parts`)."""

    DERIVED: ClassVar = {"seed": SEED}

    seed: int

    @classmethod
    def from_config(cls, config, **wildcards) -> GatherSettings:
        return cls(seed=config["seed"])


@dataclass(frozen=True)
class MaterialiseSettings(FromConfig):
    """One class range of a dataset on disk (``materialise-range``,
    :func:`imagenot.acquire.materialise.materialise_range`): the adapter (``kind``, ``path``), the
    image format, the splits and the range plan (``jobs`` ranges of ``classes_per_job``
    classes)."""

    SECTIONS: ClassVar = STORED_SIZE_SECTIONS  # its image_size is the dataset's stored size
    DATASET_OVERRIDES: ClassVar = ("image_size", "val_per_class")
    DERIVED: ClassVar = {
        "seed": SEED,
        "test_per_class": "the dataset's own key, or null: keep the whole test split "
        "(acquire.test_per_class sizes LAION-built test splits)",
        "max_train_per_class": "the dataset's own key (datasets on disk only), or null: keep "
        "every training image",
        "jobs": "range jobs: the dataset's classes (counted on disk) over classes_per_job",
        "keep_originals": "whether published weights are evaluated on the dataset: its test "
        "images' original files, their accuracies' input, are stored beside the copy",
        "splits": "every split here; the range rule's narrows them to those some rule reads "
        "(imagenot.plan.split_readers.materialise_settings): a split left out is not written",
        "split_sizes": "none here; the range rule's names the splits only the image encoder "
        "reads, stored at its input side (imagenot.plan.split_readers.split_size)",
    }

    kind: str
    path: str
    image_size: int
    resize_mode: str
    jpeg_quality: int
    seed: int
    val_per_class: int
    test_per_class: int | None
    max_train_per_class: int | None
    shard_size: int
    max_unreadable_share: float
    allow_empty: bool
    jobs: int
    classes_per_job: int
    keep_originals: bool
    splits: tuple[str, ...]
    split_sizes: dict = dataclasses.field(metadata=omitted_when({}))

    @classmethod
    def from_config(cls, config, dataset: str) -> MaterialiseSettings:  # type: ignore[override]
        from imagenot.acquire.ranges import class_count_hint, n_range_jobs

        values = cls.config_values(config, dataset=dataset)
        spec = config["datasets"][dataset]
        return cls(
            **values,
            seed=config["seed"],
            test_per_class=spec.get("test_per_class"),
            max_train_per_class=spec.get("max_train_per_class"),
            jobs=n_range_jobs(
                class_count_hint(values["kind"], values["path"]), values["classes_per_job"]
            ),
            keep_originals=keeps_originals(config, dataset),
            splits=SPLITS,
            split_sizes={},
        )


def keeps_originals(config, dataset: str) -> bool:
    """Whether ``dataset`` keeps its test images' original files beside the stored copy: when
    published weights are evaluated on it (a ``train.experiments`` entry with ``weights:
    published``, ``imagenot.train.experiments.is_published``), whose accuracies were measured
    on the originals (:mod:`imagenot.core.dataset`)."""
    return any(
        e["weights"] == "published" and e["dataset"] == dataset
        for e in config["train"]["experiments"]
    )
