"""The settings objects of the curate stage's rules (and of ``prepare_wordnet``), one per rule.

Why: a curation key is written twice, in the schema and as a field here, named as the schema
names it, so that no plan, rule parameter, CLI or library default can spell it otherwise; :meth:`FromConfig.from_config` reads it
from the validated config, the rule hands the object over as one JSON argument, the command
parses it back, and the library functions take the object and read the field. A value computed
from keys (captions per class) is a property of the object, so that every reader computes it
alike. Kept free of heavy imports and of the stage's other modules: every stage's plan reads these
classes, and a rule's environment holds only what its command imports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from imagenot.core.settings import FromConfig, PerDataset, Style

CLASS_MODES = ("discover", "imagenet")
"""The ``classes`` values that are no class list file (``{from_file: PATH}`` is one)."""


@dataclass(frozen=True)
class WordnetSettings(FromConfig):
    """``prepare-wordnet``: where WordNet 3.0 comes from (``wordnet.dict_dir``; null = nltk's
    corpus if installed, else Debian's)."""

    SECTIONS: ClassVar = ("wordnet",)

    dict_dir: str | None


@dataclass(frozen=True)
class MatchSettings(FromConfig):
    """``match`` (step 1, per shard): batches of ``batch_rows`` rows, captions longer than
    ``max_caption_bytes`` skipped; ``require_url``: the shard must have a URL column."""

    SECTIONS: ClassVar = ("laion",)
    DERIVED: ClassVar = {
        "require_url": "true for every rule's shard: the workflow's images come from the URL "
        "column; only `imagenot match` typed by hand may match a TEXT-only parquet",
    }

    batch_rows: int
    max_caption_bytes: int
    require_url: bool

    @classmethod
    def from_config(cls, config, **wildcards) -> MatchSettings:
        return cls(**cls.config_values(config, **wildcards), require_url=True)


@dataclass(frozen=True)
class CandidatesSettings(PerDataset, FromConfig):
    """``curate-candidates`` (steps 1-5, per dataset): ``classes`` is the dataset's (``discover``,
    ``imagenet`` or ``{from_file: PATH, ...}``), ``nsfw`` the ``curate.nsfw`` section."""

    SECTIONS: ClassVar = ("datasets.{dataset}", "curate")

    classes: str | dict
    min_count: int
    query_template: str
    nsfw: dict

    @property
    def class_mode(self) -> str:
        """'discover', 'imagenet' or the path of the class list file."""
        return class_mode(self.classes)


def class_mode(classes: str | dict) -> str:
    """A ``classes`` value as 'discover', 'imagenet' or the class list file's path."""
    return classes["from_file"] if isinstance(classes, dict) else classes


@dataclass(frozen=True)
class CaptionSettings(FromConfig):
    """``curate-captions`` (step 6, per dataset and shard): LAION's own unsafe-image signal
    (``max_punsafe``, ``nsfw_tags``, ``unknown_nsfw``) and the batch size; ``shard`` is the
    shard's short id (the rule's wildcard, the caption keys' prefix)."""

    SECTIONS: ClassVar = ("laion",)
    WILDCARDS: ClassVar = ("shard",)

    shard: str
    max_punsafe: float | None
    nsfw_tags: list[str]
    unknown_nsfw: str
    batch_rows: int

    @classmethod
    def from_config(cls, config, shard: str) -> CaptionSettings:  # type: ignore[override]
        return cls(**cls.config_values(config, shard=shard))


@dataclass(frozen=True)
class QueriesSettings(FromConfig):
    """``curate-queries`` (step 7, per dataset): the text encoder, the ``curate.encoder`` keys
    that say which model and how to run it (not how the captions are chunked: a new chunk size
    leaves the class queries as they are)."""

    SECTIONS: ClassVar = ("curate.encoder",)

    backend: str
    model: str
    local_path: str | None
    pooling: str
    allow_test_only: bool
    device: str
    precision: str
    batch_size: int
    max_seq_length: int


@dataclass(frozen=True)
class EmbedSettings(QueriesSettings):
    """``curate-embed`` (step 7, per dataset and shard): the encoder, plus the captions'
    resumable chunks (``chunk_size`` texts each) and whether their vectors are kept."""

    chunk_size: int
    keep_vectors: bool


@dataclass(frozen=True)
class SelectSettings(PerDataset, FromConfig):
    """``curate-select`` (steps 7b-8, per dataset). ``n_classes`` and ``images_per_class`` are
    the dataset's own where it sets them; the threshold and ``n_classes`` apply to a published
    class list only with ``apply_threshold_to_lists`` (:attr:`filters`)."""

    SECTIONS: ClassVar = ("datasets.{dataset}", "curate")
    DATASET_OVERRIDES: ClassVar = ("n_classes", "images_per_class")
    WILDCARDS: ClassVar = ("dataset",)

    dataset: str
    classes: str | dict
    top_n: int
    threshold: float
    apply_threshold_to_lists: bool
    n_classes: int
    images_per_class: int
    oversample: float
    reserve: float
    allow_fewer_classes: bool
    select_batch_rows: int

    @property
    def filters(self) -> bool:
        """Whether the threshold and ``n_classes`` drop classes: always when classes are
        discovered (or ImageNet's), for a class list only with ``apply_threshold_to_lists``."""
        return class_mode(self.classes) in CLASS_MODES or self.apply_threshold_to_lists

    @property
    def applied_threshold(self) -> float | None:
        """The threshold that drops classes, None when none does (:attr:`filters`)."""
        return self.threshold if self.filters else None

    @property
    def applied_n_classes(self) -> int | None:
        """The number of classes kept at most, None when every class is (:attr:`filters`)."""
        return self.n_classes if self.filters else None

    @property
    def per_class(self) -> int:
        """Captions selected per class: ceil(images_per_class * (1 + oversample)), as many
        URLs no longer resolve."""
        return math.ceil(self.images_per_class * (1 + self.oversample))

    @property
    def reserve_per_class(self) -> int:
        """Reserve captions per class for the top-up round: ceil(images_per_class * reserve)."""
        return math.ceil(self.images_per_class * self.reserve)


@dataclass(frozen=True)
class CalibrationSettings(FromConfig):
    """``curate-calibration`` (per dataset): ``threshold`` and ``n_classes`` are the configured
    ones (marked, not applied: the scores table already records what the selection did);
    ``start``/``stop``/``step`` make the grid (``curate.calibration``); ``encoder`` labels the
    figure, drawn in the style every figure shares (``figure_options``)."""

    SECTIONS: ClassVar = ("datasets.{dataset}", "curate", "curate.calibration")
    DATASET_OVERRIDES: ClassVar = ("n_classes",)
    DERIVED: ClassVar = {
        "encoder": "the text encoder in words for the figure's title (backend, model and, for "
        "transformers, the pooling of curate.encoder): a label, not a key",
        "figure_options": "analyse.figure_options, the style every figure shares "
        "(imagenot.core.settings.Style)",
    }

    threshold: float
    n_classes: int
    start: float
    stop: float
    step: float
    encoder: str
    figure_options: Style

    @classmethod
    def from_config(cls, config, dataset: str) -> CalibrationSettings:  # type: ignore[override]
        return cls(
            **cls.config_values(config, dataset=dataset),
            encoder=encoder_label(config["curate"]["encoder"]),
            figure_options=Style.from_config(config),
        )

    def grid(self):
        """start, start + step, ..., stop (stop included when on the grid), rounded so that
        0.5 + 32 * 0.01 reads 0.82 and not 0.8200000000000001."""
        import numpy as np

        n = math.floor((self.stop - self.start) / self.step + 1e-9) + 1
        return np.round(self.start + self.step * np.arange(n), 10)


def encoder_label(encoder: dict[str, Any]) -> str:
    """A ``curate.encoder`` section in words, for figures: backend, model and (transformers)
    pooling."""
    label = f"{encoder['backend']}: {encoder['model']}"
    return label + (
        f", {encoder['pooling']} pooling" if encoder["backend"] == "transformers" else ""
    )
