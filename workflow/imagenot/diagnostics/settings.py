"""The settings objects of the diagnostics stage's rules: ``embed-images``,
``image-similarity``, ``diagnostics-table`` (one per subject) and ``diagnostics-figure`` (one per figure).

Why: a key renamed on its way (a dict built by the plan, a dataclass of the CLI, a default
batch size of the library's own) drifts from the schema. So each field is named as the schema
names it, ``from_config`` reads it from the validated config and
``embed_dataset`` takes the object. Kept free of heavy imports: every rule's plan reads these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from imagenot.core.settings import FromConfig, Style, omitted_when


@dataclass(frozen=True)
class EmbedSettings(FromConfig):
    """``embed-images``: the encoder (``diagnostics.encoder``), the split embedded (the rule's
    wildcard: one file per dataset and split, read by the image-similarity diagnostics and the
    near-duplicate audit alike) and how many images go through the encoder at a time
    (``diagnostics.image_similarity.batch_size``). Every image of the split is embedded; the
    image-similarity diagnostics takes its per-class sample from the file. A backbone's
    checkpoint is the rule's input, passed as ``--checkpoint``."""

    SECTIONS: ClassVar = ("diagnostics.encoder", "diagnostics.image_similarity")
    WILDCARDS: ClassVar = ("split",)
    DERIVED: ClassVar = {
        "clip_model": "diagnostics.encoder.clip_model for kind clip, else null: a backbone "
        "encoder's embeddings do not rerun when an unused CLIP id changes",
        "clip_image_size": "diagnostics.encoder.clip_image_size for kind clip, else null: the "
        "side the split is stored at, which CLIP's processor input may not exceed",
    }

    kind: str
    clip_model: str | None
    split: str
    batch_size: int
    clip_image_size: int | None = dataclasses.field(metadata=omitted_when(None))

    @classmethod
    def from_config(cls, config: Any, split: str) -> EmbedSettings:  # type: ignore[override]
        values = cls.config_values(config, split=split)
        encoder, clip = config["diagnostics"]["encoder"], values["kind"] == "clip"
        derived = {k: encoder[k] if clip else None for k in ("clip_model", "clip_image_size")}
        return cls(**values, **derived)


@dataclass(frozen=True)
class ImageSimilaritySettings(FromConfig):
    """``image-similarity``: which images of the embedded split are measured (at most
    ``max_images_per_class`` per class, first in manifest order)."""

    SECTIONS: ClassVar = ("diagnostics.image_similarity",)

    max_images_per_class: int | None


# the derived field of the table's and the figure's settings: the reference's column heading
REFERENCE_NAME = {
    "reference_name": "the reference's column heading: diagnostics.reference_dataset when "
    "it is a configured dataset, else 'reference' with a reference_classes file, else "
    "'imagenet' (imagenot.diagnostics.plan.reference_label)",
}


@dataclass(frozen=True)
class TableSettings(FromConfig):
    """``diagnostics-table``: the column headings, the subject (the rule's wildcard) and the
    reference."""

    WILDCARDS: ClassVar = ("subject",)
    DERIVED: ClassVar = REFERENCE_NAME

    subject: str
    reference_name: str

    @classmethod
    def from_config(cls, config: Any, subject: str) -> TableSettings:  # type: ignore[override]
        from imagenot.diagnostics.plan import reference_label

        values = cls.config_values(config, subject=subject)
        return cls(**values, reference_name=reference_label(config))


@dataclass(frozen=True)
class FigureSettings(FromConfig):
    """``diagnostics-figure``: which registered figure (the rule's ``name`` wildcard), the
    reference's label, the figure style every figure shares (``analyse.figure_options``) and
    the datasets' display names."""

    SECTIONS: ClassVar = ("analyse",)
    WILDCARDS: ClassVar = ("name",)
    DERIVED: ClassVar = {
        **REFERENCE_NAME,
        "dataset_names": "each dataset's display name: datasets.<name>.display_name, else "
        "derived from its key (imagenot.figures.names.dataset_names)",
    }

    name: str
    reference_name: str
    figure_options: Style
    dataset_names: dict[str, str]

    @classmethod
    def from_config(cls, config: Any, name: str) -> FigureSettings:  # type: ignore[override]
        from imagenot.diagnostics.plan import reference_label
        from imagenot.figures.names import dataset_names

        values = cls.config_values(config, name=name)
        values |= {"figure_options": Style.from_config(config)}
        return cls(
            **values,
            reference_name=reference_label(config),
            dataset_names=dataset_names(config["datasets"]),
        )
