"""The settings objects of the acquire stage's commands, one per rule.

Why: each used to be a block of argparse flags, mirrored by a string builder in
:mod:`imagenot.acquire.plan` and by keyword arguments (with their own defaults) in the library,
and the defaults drifted (``acquire.threads_per_process``: 64 in the schema, 16 in the CLI).
Now :mod:`imagenot.acquire.plan` builds each object's dict from the validated config, the rule
hands it over as one JSON argument, and the command parses it here
(:func:`imagenot.settings.parse`). No field has a default: defaults live in the schema only.
Kept free of heavy imports, so that parsing a command line imports neither pyarrow nor numpy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FillSettings:
    """How a LAION-built dataset is filled and split (``acquire-plan``; the library's
    :func:`imagenot.acquire.build.plan_build` and ``build_dataset`` take it as is).
    ``images_per_class`` and the split sizes are the dataset's (``datasets.<name>`` overrides
    ``curate``/``acquire``); ``near_distance`` is ``acquire.near_duplicate_distance``."""

    images_per_class: int
    test_per_class: int
    val_per_class: int
    short_classes: str
    allow_fewer: bool
    near_duplicates: str
    near_distance: int
    seed: int


@dataclass(frozen=True)
class TopupSettings:
    """The next top-up round's choice (``acquire-topup``, :func:`imagenot.acquire.build.
    select_topup`): deficits are counted as the fill counts them, hence the duplicate keys."""

    images_per_class: int
    oversample: float
    near_duplicates: str
    near_distance: int


@dataclass(frozen=True)
class DownloadSettings:
    """One download part's fetch and validation (``acquire-download``); every field is the
    ``acquire`` key of the same meaning (``shard_size`` is ``images_per_download_shard``,
    ``quality`` ``jpeg_quality``, ``timeout`` ``timeout_s``, ``max_unreachable``
    ``max_unreachable_fraction``, ``min_size``/``max_pixels`` ``min_image_size``/
    ``max_image_pixels``, ``image_deadline`` ``image_deadline_s``, ``user_agent``
    ``user_agent_token``); ``url_map`` maps URL prefixes to served folders (or ``generate:``)."""

    parts: int
    image_size: int
    resize_mode: str
    quality: int
    shard_size: int
    threads_per_process: int
    timeout: float
    retries: int
    max_unreachable: float | None
    min_size: int
    max_pixels: int
    min_success_rate: float
    max_response_bytes: int
    image_deadline: float
    user_agent: str | None
    url_map: dict


@dataclass(frozen=True)
class WriteSettings:
    """Storing one download part's kept images (``acquire-write``)."""

    shard_size: int


@dataclass(frozen=True)
class GatherSettings:
    """The gather of part manifests (``acquire-gather``): the master seed orders an adapter
    dataset's training rows (:func:`imagenot.acquire.dataset.gather_parts`)."""

    seed: int


@dataclass(frozen=True)
class MaterialiseSettings:
    """One class range of a dataset on disk (``materialise-range``): the adapter (``kind``,
    ``path``), the image format, the splits (``test_per_class``/``max_train_per_class`` null
    when the dataset does not set them), and the range plan (``jobs`` ranges of
    ``classes_per_job`` classes)."""

    kind: str
    path: str
    image_size: int
    resize_mode: str
    quality: int
    seed: int
    val_per_class: int
    test_per_class: int | None
    max_train_per_class: int | None
    shard_size: int
    max_unreadable_share: float
    allow_empty: bool
    jobs: int
    classes_per_job: int

    def adapter_kwargs(self) -> dict:
        """The keyword arguments :func:`imagenot.acquire.adapters.materialise_range` and
        ``materialise`` take besides the range plan."""
        return {
            "image_size": self.image_size,
            "resize_mode": self.resize_mode,
            "quality": self.quality,
            "seed": self.seed,
            "val_per_class": self.val_per_class,
            "test_per_class": self.test_per_class,
            "max_train_per_class": self.max_train_per_class,
            "shard_size": self.shard_size,
            "max_unreadable_share": self.max_unreadable_share,
            "allow_empty": self.allow_empty,
        }
