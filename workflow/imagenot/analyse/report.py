"""The rankings report as types: what ``imagenot rankings`` computes, writes and reads back.

:func:`imagenot.analyse.rankings.rankings_report` builds a :class:`RankingsReport`;
``imagenot rankings --out`` writes :meth:`RankingsReport.to_text` (the workflow's
``rankings_<variant>.json``), and everything that uses a report takes the object: the workflow's
tables (:mod:`imagenot.figures.tables`, through :func:`read_report`), the ``--report`` figures
and tables, the text summary. A reader names fields, not strings, so a statistic renamed here
is renamed for every reader, and :func:`read_report` checks a file on the way in: a missing,
unknown or mistyped key is one :class:`ReportError` naming the file and the key, not a
``KeyError`` three modules later (or a silent ``None`` from a ``.get``).

How a field becomes JSON (:mod:`imagenot.core.typed_json` reads and writes it; the file's bytes
are those of the dicts the report was first written as, and a report read and written again
is the same bytes):

- field order is key order;
- a field with the default None is **absent** while None (a statistic that was not computed;
  ``not_computed`` says why), unless its metadata says when it is written (:data:`WRITTEN_IF`);
- a field typed ``X | None`` without a default is always written, None as null (a number that
  is NaN or infinite: "no value");
- a :data:`FLAT` field's keys are its parent's own (a dataset's correlations sit beside its
  ranks);
- a number keeps JSON's own type (fields are typed :data:`~imagenot.core.typed_json.Real`: an int
  stays an int).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagenot.core.typed_json import (
    EMPTY_IS_NONE,
    FLAT,
    WRITTEN_IF,
    JsonError,
    Real,
    read_object,
    write_fields,
)

P_FLOOR = 1e-300
"""Below it a p-value is shown as the bound ``p < 1e-300`` (summary, Markdown tables): scipy's
asymptotic p-values underflow to 0 for strong correlations on many models (1,556 models, tau
0.95), and "p=0" is no probability. The JSON keeps the number scipy returned."""


def p_text(p: float | None) -> str:
    """``p=0.083``, ``p=2.1e-45``, ``p < 1e-300`` where the p-value underflowed, ``p=n/a``."""
    if p is None or not np.isfinite(p):
        return "p=n/a"
    return f"p < {P_FLOOR:g}" if p < P_FLOOR else f"p={p:.3g}"


class ReportError(JsonError):
    """A rankings report that is not one; the message names the file and the key."""


Number = Real | None
"""A statistic: None where it is NaN or infinite (JSON's null)."""


def clean(obj: Any) -> Any:
    """JSON-ready values: numpy scalars to Python, NaN and infinity to None, tuples and arrays
    to lists, keys to strings (what a report's fields hold)."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | np.ndarray):
        return [clean(v) for v in obj]
    if isinstance(obj, np.integer | np.bool_):
        return obj.item()
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return f if np.isfinite(f) else None
    return obj


class _Json:
    """JSON in and out of a report's dataclass (:mod:`imagenot.core.typed_json`)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict (see the module docstring for how each field is written)."""
        return write_fields(self)

    @classmethod
    def from_json(cls, obj: Any, source: str = "rankings report") -> Any:
        """The object of the JSON ``obj``; :class:`ReportError` naming ``source`` and the key
        for a missing, unknown or mistyped key."""
        try:
            return read_object(cls, obj, source=source)
        except JsonError as exc:
            raise ReportError(str(exc)) from None


@dataclass(frozen=True, kw_only=True)
class Correlations(_Json):
    """Kendall tau-b, Spearman rho and Pearson r with their p-values
    (:func:`imagenot.analyse.stats.correlation_tests`; ``p_method`` says how they were got)."""

    kendall_tau: Number
    kendall_p: Number
    spearman_rho: Number
    spearman_p: Number
    pearson_r: Number
    pearson_p: Number
    p_method: str


@dataclass(frozen=True, kw_only=True)
class Fit(_Json):
    """An OLS fit of accuracy on reference accuracy (:meth:`imagenot.analyse.stats.OLSFit.summary`,
    on scale ``axis``, intervals at ``confidence``)."""

    slope: Number
    slope_ci: list[Number]
    intercept: Number
    intercept_ci: list[Number]
    r2: Number
    adj_r2: Number
    n: int
    axis: str
    confidence: Real


@dataclass(frozen=True, kw_only=True)
class SubsetFit(Fit):
    """The fit on the models whose reference accuracy is at least ``min_reference_accuracy``."""

    min_reference_accuracy: Real


@dataclass(frozen=True, kw_only=True)
class UpToErrorBars(_Json):
    """Rank agreement where overlapping error bars tie
    (:func:`imagenot.analyse.stats.tau_up_to_error_bars`)."""

    pairs: int
    concordant: int
    discordant: int
    tied_in_dataset: int
    tied_in_reference: int
    tied_in_both: int
    tau_b: Number


@dataclass(frozen=True, kw_only=True)
class Bootstrap(_Json):
    """Bootstrap intervals of Kendall tau and the OLS slope: ``reps`` replicates resampling
    ``method`` (models, seeds or images), interval ``interval`` (named ``interval_name``). An
    interval the replicates cannot give (:func:`imagenot.analyse.stats.bootstrap_interval`) is
    null, and ``refused`` says why, keyed by the field (``kendall_tau_ci``, ``slope_ci``)."""

    method: str
    reps: int
    seed: int
    interval: str
    interval_name: str
    kendall_tau_ci: list[Number] | None
    slope_ci: list[Number] | None
    refused: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class DatasetEntry(_Json):
    """One dataset (label) of the table: its models' accuracies, intervals and ranks, and,
    for every dataset but the reference, how it compares with the reference on their common
    models (the fields from ``reference`` on)."""

    models: int
    missing_models: list[str]
    n: Real | dict[str, Number] | None
    """The test-set size: one number when every model shares it, else one per model."""
    accuracy: dict[str, Real]
    interval: dict[str, list[Number]]
    interval_kind: dict[str, str]
    ranks: dict[str, Real]
    seeds: dict[str, int] | None = None
    standard_error: dict[str, Number] | None = None
    relative_progress: dict[str, Real] | None = None
    reference: str | None = None
    common_models: int | None = None
    delta_rank: dict[str, Real] | None = None
    correlations: Correlations | None = field(default=None, metadata={FLAT: True})
    ols: Fit | None = None
    ols_subset: SubsetFit | None = None
    rank_agreement_up_to_error_bars: UpToErrorBars | None = None
    bootstrap: Bootstrap | None = None


def _averaged(mc: MeanCorrelations) -> bool:
    return bool(mc.datasets)


@dataclass(frozen=True, kw_only=True)
class MeanCorrelations(_Json):
    """Correlations with the reference averaged over ``datasets``; rho and r also as Fisher's
    z mean (written when some dataset was averaged)."""

    datasets: list[str]
    kendall_tau: Number
    spearman_rho: Number
    spearman_rho_fisher: Number = field(default=None, metadata={WRITTEN_IF: _averaged})
    pearson_r: Number
    pearson_r_fisher: Number = field(default=None, metadata={WRITTEN_IF: _averaged})


@dataclass(frozen=True, kw_only=True)
class AcrossDatasets(_Json):
    """Per model, the size-weighted and geometric means over ``datasets``, their ranks and
    rank changes against the reference; per dataset, the correlation with the mean of the
    others."""

    datasets: list[str]
    models: list[str]
    excluded_models: list[str]
    weights: dict[str, Real | str] | None = None
    """Per dataset, the test-set size that weighs it, or "per model"."""
    weighted_mean: dict[str, Number] | None = None
    weighted_mean_rank: dict[str, Real] | None = None
    weighted_mean_delta_rank: dict[str, Real] | None = None
    geometric_mean_floors: dict[str, Real] | None = None
    geometric_mean: dict[str, Number] | None = None
    geometric_mean_rank: dict[str, Real] | None = None
    geometric_mean_delta_rank: dict[str, Real] | None = None
    geometric_mean_excluded: list[str] | None = None
    with_mean_of_others: dict[str, Correlations] | None = None


@dataclass(frozen=True, kw_only=True)
class ErrorCorrelation(_Json):
    """Spearman rho between the errors of the ``n`` common models on datasets ``a`` and ``b``."""

    a: str
    b: str
    n: int
    rho: Number
    p: Number
    p_method: str


@dataclass(frozen=True, kw_only=True)
class RankingsReport(_Json):
    """Every statistic of ``imagenot rankings`` for one table (one variant of the workflow's)."""

    reference: str
    reference_chosen: str
    baseline: str | None
    axis: str
    confidence: Real
    variant: str
    delta_rank_sign: str
    models: list[str]
    dataset_order: list[str]
    datasets: dict[str, DatasetEntry]
    mean_correlation_with_reference: MeanCorrelations
    across_datasets: AcrossDatasets | None = field(default=None, metadata={EMPTY_IS_NONE: True})
    """None (written ``{}``) where no model has results on every aggregated dataset."""
    error_spearman: list[ErrorCorrelation]
    warnings: list[str]
    not_computed: dict[str, str]

    def compared(self) -> dict[str, DatasetEntry]:
        """The datasets compared with the reference (every one but the reference), in order."""
        return {d: e for d, e in self.datasets.items() if d != self.reference}

    def to_text(self) -> str:
        """The report file's text (``--out``, ``--json``): the one way a report is written."""
        return json.dumps(self.to_json(), indent=1) + "\n"


def read_report(file: str | os.PathLike) -> RankingsReport:
    """The rankings report in ``file`` (written by :meth:`RankingsReport.to_text`),
    checked key by key: :class:`ReportError` names the file and the key."""
    from imagenot.core.io import read_json

    return RankingsReport.from_json(read_json(file), str(file))
