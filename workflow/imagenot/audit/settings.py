"""The settings objects of the audit stage's rules (:mod:`imagenot.core.settings`): each field is a
schema key of its sections, a wildcard of its rule or derived (with the reason). Kept free of
heavy imports: every rule's plan reads these."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from imagenot.core.settings import FromConfig, Style


@dataclass(frozen=True)
class CalibrateSettings(FromConfig):
    """``audit-calibrate``: the encoder (``diagnostics.encoder``, the embeddings' own), the
    calibration set (``audit.calibration``) and the verification's settings
    (``audit.verification``: its threshold is calibrated on the same copies)."""

    SECTIONS: ClassVar = ("diagnostics.encoder", "audit.calibration", "audit")
    DERIVED: ClassVar = {
        "clip_model": "diagnostics.encoder.clip_model for kind clip, else null (as the "
        "embeddings' own settings: imagenot.diagnostics.settings.EmbedSettings)",
        "batch_size": "diagnostics.image_similarity.batch_size: the encoder's batch, as the "
        "embeddings'",
        "clip_image_size": "diagnostics.encoder.clip_image_size for kind clip, else null: the "
        "side CLIP's processor may ask for at most, checked before the model loads (as the "
        "embeddings')",
    }

    kind: str
    clip_model: str | None
    clip_image_size: int | None
    batch_size: int
    split: str
    sample_images: int
    copies: list[str]
    min_precision: float
    min_pairs: int
    seed: int
    verification: dict[str, Any]

    @classmethod
    def from_config(cls, config: Any, **wildcards: Any) -> CalibrateSettings:
        values = cls.config_values(config)
        return cls(**values, **_encoder(config, values["kind"]))


def _encoder(config: Any, kind: str) -> dict:
    """The derived encoder fields (clip_model, clip_image_size, batch_size) of a rule that
    embeds images itself, as the embeddings' own settings."""
    diagnostics = config["diagnostics"]
    clip = kind == "clip"
    return {
        "clip_model": diagnostics["encoder"]["clip_model"] if clip else None,
        "clip_image_size": diagnostics["encoder"]["clip_image_size"] if clip else None,
        "batch_size": diagnostics["image_similarity"]["batch_size"],
    }


@dataclass(frozen=True)
class SearchSettings(FromConfig):
    """``audit-search``: one part (the rule's ``part`` of ``query_parts``) of one split of an
    audited dataset against its target sets, ``block_size`` query rows at a time, each image's
    candidates verified by alignment (``verification``)."""

    SECTIONS: ClassVar = ("audit",)
    WILDCARDS: ClassVar = ("dataset", "split", "part")
    DERIVED: ClassVar = {
        "targets": "the target sets, '{dataset}/{split}' in the order of the rule's embeddings "
        "inputs (imagenot.audit.plan.target_labels)",
    }

    dataset: str
    split: str
    part: str
    query_parts: int
    block_size: int
    verification: dict[str, Any]
    targets: list[str]

    @classmethod
    def from_config(cls, config: Any, dataset: str, split: str, part: str) -> SearchSettings:  # type: ignore[override]
        from imagenot.audit.plan import target_labels

        values = cls.config_values(config, dataset=dataset, split=split, part=part)
        return cls(**values, targets=target_labels(config, dataset, split))


@dataclass(frozen=True)
class ThumbnailsSettings(FromConfig):
    """``audit-thumbnails``: one split (the rule's wildcard) of a dataset, its thumbnails at
    ``thumbnail_side`` px (``audit.verification``)."""

    SECTIONS: ClassVar = ("audit.verification",)
    WILDCARDS: ClassVar = ("split",)

    split: str
    thumbnail_side: int

    @classmethod
    def from_config(cls, config: Any, split: str) -> ThumbnailsSettings:  # type: ignore[override]
        return cls(**cls.config_values(config, split=split))


@dataclass(frozen=True)
class PoolSettings(FromConfig):
    """``audit-pool``: the encoder (``diagnostics.encoder``, as the embeddings'), the query
    rows searched at a time and the pool's target sets (:mod:`imagenot.audit.pool_plan`)."""

    SECTIONS: ClassVar = ("diagnostics.encoder", "audit")
    WILDCARDS: ClassVar = ("dataset",)
    DERIVED: ClassVar = {
        "clip_model": CalibrateSettings.DERIVED["clip_model"],
        "clip_image_size": CalibrateSettings.DERIVED["clip_image_size"],
        "batch_size": CalibrateSettings.DERIVED["batch_size"],
        "targets": "the pool's target sets, '{dataset}/{split}' in the order of the rule's "
        "embeddings inputs (imagenot.audit.pool_plan.target_labels)",
        "reference": "diagnostics.reference_dataset when it is a configured dataset, else null "
        "(the exclusion list's reason: reference or other_dataset)",
    }

    dataset: str
    kind: str
    clip_model: str | None
    clip_image_size: int | None
    batch_size: int
    block_size: int
    targets: list[str]
    reference: str | None

    @classmethod
    def from_config(cls, config: Any, dataset: str) -> PoolSettings:  # type: ignore[override]
        from imagenot.audit.pool_plan import target_labels
        from imagenot.diagnostics.plan import reference_dataset

        values = cls.config_values(config, dataset=dataset)
        return cls(
            **values,
            **_encoder(config, values["kind"]),
            targets=target_labels(config, dataset),
            reference=reference_dataset(config),
        )


class _Named:
    DERIVED: ClassVar = {
        "reference": "diagnostics.reference_dataset when it is a configured dataset, else null "
        "(imagenot.diagnostics.plan.reference_dataset)",
        "dataset_names": "each dataset's display name: datasets.<name>.display_name, else "
        "derived from its key (imagenot.figures.names.dataset_names)",
    }

    @classmethod
    def _named(cls, config: Any, values: dict) -> dict:
        from imagenot.diagnostics.plan import reference_dataset
        from imagenot.figures.names import dataset_names

        return {
            **values,
            "reference": reference_dataset(config),
            "dataset_names": dataset_names(config["datasets"]),
        }


@dataclass(frozen=True)
class TableSettings(_Named, FromConfig):
    """``audit-table``: the audited dataset (the rule's wildcard), the closest pairs kept of
    each target set (``figure_pairs``: what the figure may draw), the reference and the
    datasets' display names (the summary's sentence)."""

    SECTIONS: ClassVar = ("audit",)
    WILDCARDS: ClassVar = ("dataset",)

    dataset: str
    figure_pairs: int
    reference: str | None
    dataset_names: dict[str, str]

    @classmethod
    def from_config(cls, config: Any, dataset: str) -> TableSettings:  # type: ignore[override]
        return cls(**cls._named(config, cls.config_values(config, dataset=dataset)))


@dataclass(frozen=True)
class FigureSettings(_Named, FromConfig):
    """``audit-figure``: how many closest pairs are drawn, the figure style every figure
    shares (``analyse.figure_options``) and the datasets' display names."""

    SECTIONS: ClassVar = ("audit", "analyse")
    WILDCARDS: ClassVar = ("dataset",)

    dataset: str
    figure_pairs: int
    figure_options: Style
    reference: str | None
    dataset_names: dict[str, str]

    @classmethod
    def from_config(cls, config: Any, dataset: str) -> FigureSettings:  # type: ignore[override]
        values = cls.config_values(config, dataset=dataset)
        values["figure_options"] = Style.from_config(config)
        return cls(**cls._named(config, values))
