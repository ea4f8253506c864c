"""The settings objects of the figures stage's rules: ``imagenot figure`` (one per figure file)
and ``imagenot table`` (one per table), with the sections they share: :class:`Options` (the
analyse keys every figure and table reads) and the figure style (:class:`imagenot.core.settings.Style`,
``analyse.figure_options``).

Each field is named as the schema names it and ``from_config`` reads it from the validated
config; the display names of the run's datasets and models (:mod:`imagenot.figures.names`) are
derived there, so that every figure names things alike. Kept free of
pandas and matplotlib: every ``imagenot`` command and every rule's plan imports this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from imagenot.core.settings import FromConfig, Style
from imagenot.figures import names


@dataclass(frozen=True)
class Options(FromConfig):
    """What every figure and table reads: the analyse keys below, the datasets in drawing order
    and the rankings reference."""

    SECTIONS: ClassVar = ("analyse",)
    DERIVED: ClassVar = {
        "datasets": "the configured and trained datasets in drawing order: reference, contrast, "
        "then config order (imagenot.figures.plan.dataset_order)",
        "reference": "analyse.reference_dataset when a standard-training run trains on it, else "
        "the published accuracies (imagenot.analyse.settings.reference)",
        "published_datasets": "the datasets whose st runs are published weights (experiments "
        "with weights: published): their measured top-1 is checked against the published one",
        "dataset_names": "each dataset's display name: datasets.<name>.display_name, else "
        "derived from its key (imagenot.figures.names.dataset_names)",
        "model_names": "each trained model's display name: its registry entry's display_name, "
        "else derived from its key (imagenot.figures.names.model_names)",
    }

    datasets: list[str]
    reference: str
    published_datasets: list[str]
    downstream_dataset: str
    baseline_model: str
    standard_transform: str
    confidence: float
    axis: str
    imagenet_axis: str
    dataset_names: dict[str, str]
    model_names: dict[str, str]

    @classmethod
    def from_config(cls, config: Any, **wildcards: Any) -> Options:
        from imagenot.analyse.settings import reference
        from imagenot.figures.plan import dataset_order, published_datasets

        order = dataset_order(config)
        return cls(
            **cls.config_values(config),
            datasets=order,
            reference=reference(config),
            published_datasets=published_datasets(config),
            dataset_names=names.dataset_names(config["datasets"], order),
            model_names=names.model_names(config["train"]["models"]),
        )

    def dataset(self, label: str) -> str:
        """The display name of a dataset label of accuracy.csv (``dataset`` or
        ``dataset/protocol``: :func:`imagenot.figures.names.show_label`)."""
        return names.show_label(label, self.dataset_names)

    def model(self, name: str) -> str:
        """The display name of a model (its key where the run has no such model)."""
        return self.model_names[name] if name in self.model_names else names.readable(name)


@dataclass(frozen=True)
class FigureSettings(FromConfig):
    """``imagenot figure``: one figure file, its registered kind and what it is drawn for (from
    the rule's ``figure`` wildcard, the file name), the shared options and the style."""

    SECTIONS: ClassVar = ("analyse",)
    DERIVED: ClassVar = {
        "kind": "the registered figure kind that the figure wildcard names (figure_request)",
        "dataset": "the dataset the figure wildcard names, if its kind is drawn per dataset",
        "protocol": "the protocol the figure wildcard names, if its kind is drawn per protocol",
        "options": "the analyse keys every figure and table shares (Options.from_config)",
    }

    kind: str
    dataset: str | None
    protocol: str | None
    options: Options
    figure_options: Style

    @classmethod
    def from_config(cls, config: Any, figure: str) -> FigureSettings:  # type: ignore[override]
        from imagenot.figures.plan import figure_params

        options, style = Options.from_config(config), Style.from_config(config)
        return cls(**figure_params(config, figure), options=options, figure_options=style)


@dataclass(frozen=True)
class TableSettings(FromConfig):
    """``imagenot table``: one results table (the rule's ``table`` wildcard, a registered name)
    and the shared options."""

    WILDCARDS: ClassVar = ("table",)
    DERIVED: ClassVar = {
        "options": "the analyse keys every figure and table shares (Options.from_config)",
    }

    table: str
    options: Options

    @classmethod
    def from_config(cls, config: Any, table: str) -> TableSettings:  # type: ignore[override]
        return cls(table=table, options=Options.from_config(config))
