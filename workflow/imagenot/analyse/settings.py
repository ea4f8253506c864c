"""The settings objects of the analyse stage's rules: ``imagenot rankings`` (one per variant) and
``imagenot accuracy-table``.

Why: an analysis key (``analyse.confidence``, ``analyse.bootstrap.reps``, ...) is written
once in the schema and once here, as a field named as the schema names it, never again as a
keyword argument with a default of its own in the functions it passes through; the library takes the object (``rankings_report(table,
settings)``) and reads the field, and the low-level math helpers (``stats.py``) take the value
as a required argument. Kept free of heavy imports: every rule's plan reads these classes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from imagenot.analyse import PUBLISHED_DATASET
from imagenot.core.settings import FromConfig


def reference(config: dict, runs: list[dict] | None = None) -> str:
    """The rankings reference: ``analyse.reference_dataset`` when some standard (ST) run trains
    on it, else the published torchvision ImageNet accuracies (:data:`PUBLISHED_DATASET`)."""
    if runs is None:
        from imagenot.train import plan as train_plan

        runs = train_plan.final_runs(config)
    ref = config["analyse"]["reference_dataset"]
    if any(r["dataset"] == ref and r["protocol"] == "st" for r in runs):
        return ref
    return PUBLISHED_DATASET


@dataclass(frozen=True)
class RankingsSettings(FromConfig):
    """``imagenot rankings``: the statistics of one variant (``standard`` or ``robust``) of the
    accuracy table. ``reference`` None = the table's first dataset and ``baseline_model`` None =
    no relative progress (the command typed by hand, without ``--reference``/``--baseline``);
    the workflow's rule always sets both."""

    SECTIONS: ClassVar = ("analyse", "analyse.bootstrap")
    WILDCARDS: ClassVar = ("variant",)
    DERIVED: ClassVar = {
        "reference": "analyse.reference_dataset when a standard-training run of the config "
        "trains on it, else the published torchvision ImageNet accuracies (reference())",
    }

    variant: str
    reference: str | None
    baseline_model: str | None
    axis: str
    confidence: float
    standard_transform: str
    reps: int
    seed: int
    over: str
    interval: str

    @classmethod
    def from_config(cls, config, variant: str) -> RankingsSettings:  # type: ignore[override]
        return cls(**cls.config_values(config, variant=variant), reference=reference(config))

    @classmethod
    def hand_typed(cls, **overrides: Any) -> RankingsSettings:
        """The settings of ``imagenot rankings`` typed without flags (the schema's defaults, the
        standard variant, the table's first dataset as reference, no baseline), with
        ``overrides`` replacing fields: for callers of the library outside the workflow."""
        from imagenot.core.config import ConfigError, schema_default

        typed: dict[str, Any] = {"variant": "standard", "reference": None, "baseline_model": None}
        for name in (f.name for f in fields(cls) if f.name not in typed):
            for section in cls.SECTIONS:  # the one section whose key the field is
                try:
                    typed[name] = schema_default(f"{section}.{name}")
                except ConfigError:
                    continue
        return replace(cls(**typed), **overrides)


@dataclass(frozen=True)
class AccuracySettings(FromConfig):
    """``imagenot accuracy-table``: which transformation is 'standard', the confidence of
    the interval drawn as each accuracy's error bar (the one every other statistic uses), and
    the published weights the config names per model (``weights``): a model's published
    ImageNet accuracy is that weight's, not the one the registry ships under the model's name
    (a run's own record, where a published run evaluated it, comes first)."""

    SECTIONS: ClassVar = ("analyse",)
    DERIVED: ClassVar = {
        "weights": "per model of train.models, its published weights reference: "
        "train.weights' entry, else the registry's (imagenot.train.experiments.published_weights)",
    }

    standard_transform: str
    confidence: float
    weights: dict[str, str]

    @classmethod
    def from_config(cls, config, **wildcards) -> AccuracySettings:
        from imagenot.train.experiments import published_weights

        train = config["train"]
        weights = {m: published_weights(train, m) for m in train["models"]}
        return cls(
            **cls.config_values(config, **wildcards),
            weights={m: w for m, w in weights.items() if w},
        )
