"""The rankings report as types: what ``imagenot rankings`` computes, writes and reads back.

:func:`imagenot.analyse.rankings.rankings_report` builds a :class:`RankingsReport`;
``imagenot rankings --out`` writes :meth:`RankingsReport.to_text` (the workflow's
``rankings_<variant>.json``), and everything that uses a report takes the object: the workflow's
tables (:mod:`imagenot.figures.tables`, through :func:`read_report`), the ``--report`` figures
and tables, the text summary. A reader names fields, not strings, so a statistic renamed here
is renamed for every reader, and :func:`read_report` checks a file on the way in: a missing,
unknown or mistyped key is one :class:`ReportError` naming the file and the key, not a
``KeyError`` three modules later (or a silent ``None`` from a ``.get``).

How a field becomes JSON (the file's bytes are those of the dicts the report was first written
as, and a report read and written again is the same bytes):

- field order is key order;
- a field with the default None is **absent** while None (a statistic that was not computed;
  ``not_computed`` says why), unless its metadata says when it is written (:data:`WRITTEN_IF`);
- a field typed ``X | None`` without a default is always written, None as null (a number that
  is NaN or infinite: "no value");
- a :data:`FLAT` field's keys are its parent's own (a dataset's correlations sit beside its
  ranks);
- a number keeps JSON's own type (an int where a float is typed stays an int).
"""

from __future__ import annotations

import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imagenot.analyse.stats import UNDEFINED_P_METHOD

P_FLOOR = 1e-300
"""Below it a p-value is shown as the bound ``p < 1e-300`` (summary, Markdown tables): scipy's
asymptotic p-values underflow to 0 for strong correlations on many models (1,556 models, tau
0.95), and "p=0" is no probability. The JSON keeps the number scipy returned."""


def p_text(p: float | None) -> str:
    """``p=0.083``, ``p=2.1e-45``, ``p < 1e-300`` where the p-value underflowed, ``p=n/a``."""
    if p is None or not np.isfinite(p):
        return "p=n/a"
    return f"p < {P_FLOOR:g}" if p < P_FLOOR else f"p={p:.3g}"


FLAT = "flat"
"""Field metadata: the nested object's keys are written into (and read from) its parent."""
WRITTEN_IF = "written_if"
"""Field metadata: ``predicate(obj)``, whether an optional field is written (even as null)."""
EMPTY_IS_NONE = "empty_is_none"
"""Field metadata: None is written as ``{}`` (and ``{}`` read as None)."""


class ReportError(ValueError):
    """A rankings report that is not one; the message names the file and the key."""


Number = float | None
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


def _json(value: Any) -> Any:
    if isinstance(value, _Json):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    return value


def _written(obj: Any, f: dataclasses.Field, value: Any) -> bool:
    if WRITTEN_IF in f.metadata:
        return f.metadata[WRITTEN_IF](obj)
    return value is not None or f.default is dataclasses.MISSING or EMPTY_IS_NONE in f.metadata


def _at(at: str, name: str) -> str:
    """The dotted key of ``name`` inside the key ``at`` ("" = the report)."""
    return f"{at}.{name}" if at else name


class _Json:
    """JSON in and out of a dataclass, driven by its fields and their type hints."""

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict (see the module docstring for how each field is written)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if not _written(self, f, value):
                continue
            if f.metadata.get(FLAT):
                out.update(_json(value))
            elif value is None and EMPTY_IS_NONE in f.metadata:
                out[f.name] = {}
            else:
                out[f.name] = _json(value)
        return out

    @classmethod
    def from_json(cls, obj: Any, source: str = "rankings report", at: str = "") -> Any:
        """The object of the JSON ``obj``; :class:`ReportError` naming ``source`` and the key
        for a missing, unknown or mistyped key."""
        if not isinstance(obj, dict):
            where = f"key {at}" if at else "the report"
            raise ReportError(f"{source}: {where} must be an object, not {_shown(obj)}")
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        used: set[str] = set()
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.metadata.get(FLAT):
                sub = next(a for a in typing.get_args(hints[f.name]) if a is not type(None))
                keys = [g.name for g in dataclasses.fields(sub)]
                if any(k in obj for k in keys):
                    values[f.name] = sub.from_json(
                        {k: obj[k] for k in keys if k in obj}, source, at
                    )
                    used.update(keys)
                continue
            if f.name not in obj:
                if f.default is dataclasses.MISSING:
                    raise ReportError(f"{source}: key {_at(at, f.name)} is missing")
                continue
            used.add(f.name)
            value = obj[f.name]
            if EMPTY_IS_NONE in f.metadata and value in ({}, None):
                if value is None:  # written {}, never null
                    raise ReportError(f"{source}: key {_at(at, f.name)} must be an object")
                values[f.name] = None
            else:
                values[f.name] = _read(value, hints[f.name], source, _at(at, f.name))
        unknown = [k for k in obj if k not in used]
        if unknown:
            raise ReportError(f"{source}: unknown key {_at(at, unknown[0])}")
        return cls(**values)


def _read(value: Any, hint: Any, source: str, at: str) -> Any:
    """``value`` checked against ``hint`` (scalars, unions, lists, dicts, nested reports)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        # the option of the value's own JSON kind says best what is wrong inside it
        kind = _kind(value)
        options = [a for a in args if a is not type(None) and _hint_kind(a) == kind]
        if len(options) == 1:
            return _read(value, options[0], source, at)
        raise ReportError(f"{source}: key {at} must be {_names(hint)}, not {_shown(value)}")
    if isinstance(hint, type) and issubclass(hint, _Json):
        return hint.from_json(value, source, at)
    if origin is list:
        if not isinstance(value, list):
            raise ReportError(f"{source}: key {at} must be a list, not {_shown(value)}")
        return [_read(v, args[0], source, f"{at}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ReportError(f"{source}: key {at} must be an object, not {_shown(value)}")
        return {k: _read(v, args[1], source, _at(at, k)) for k, v in value.items()}
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:  # float (an int too, kept as written), str
        ok = _kind(value) == _hint_kind(hint)
    if not ok:
        raise ReportError(f"{source}: key {at} must be {_names(hint)}, not {_shown(value)}")
    return value


def _kind(value: Any) -> str:
    """The JSON kind of a value: object, list, number, string or other (true, false, null)."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "list"
    if isinstance(value, bool) or value is None:
        return "other"
    return "number" if isinstance(value, int | float) else "string"


def _hint_kind(hint: Any) -> str:
    """The JSON kind of the values a type hint takes."""
    origin = typing.get_origin(hint) or hint
    if origin is dict or (isinstance(origin, type) and issubclass(origin, _Json)):
        return "object"
    return {list: "list", float: "number", int: "number", str: "string"}[origin]


def _names(hint: Any) -> str:
    """What a type hint takes, in words."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    words = {"object": "an object", "list": "a list", "number": "a number", "string": "a string"}
    return " or ".join(
        "null" if a is type(None) else "an integer" if a is int else words[_hint_kind(a)]
        for a in (typing.get_args(hint) if union else (hint,))
    )


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


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

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.p_method != UNDEFINED_P_METHOD:
            return out
        # undefined correlations have always been written statistics first, then p-values
        order = ("kendall_tau", "spearman_rho", "pearson_r", "kendall_p", "spearman_p")
        return {k: out[k] for k in (*order, "pearson_p", "p_method")}


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
    confidence: float


@dataclass(frozen=True, kw_only=True)
class SubsetFit(Fit):
    """The fit on the models whose reference accuracy is at least ``min_reference_accuracy``."""

    min_reference_accuracy: float


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
    ``method`` (models, seeds or images), interval ``interval`` (named ``interval_name``)."""

    method: str
    reps: int
    seed: int
    interval: str
    interval_name: str
    kendall_tau_ci: list[Number]
    slope_ci: list[Number]
    notes: list[str] | None = None


@dataclass(frozen=True, kw_only=True)
class DatasetEntry(_Json):
    """One dataset (label) of the table: its models' accuracies, intervals and ranks, and,
    for every dataset but the reference, how it compares with the reference on their common
    models (the fields from ``reference`` on)."""

    models: int
    missing_models: list[str]
    n: float | dict[str, Number] | None
    """The test-set size: one number when every model shares it, else one per model."""
    accuracy: dict[str, float]
    interval: dict[str, list[Number]]
    interval_kind: dict[str, str]
    ranks: dict[str, float]
    seeds: dict[str, int] | None = None
    standard_error: dict[str, Number] | None = None
    relative_progress: dict[str, float] | None = None
    reference: str | None = None
    common_models: int | None = None
    delta_rank: dict[str, float] | None = None
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
    weights: dict[str, float | str] | None = None
    """Per dataset, the test-set size that weighs it, or "per model"."""
    weighted_mean: dict[str, Number] | None = None
    weighted_mean_rank: dict[str, float] | None = None
    weighted_mean_delta_rank: dict[str, float] | None = None
    geometric_mean_floors: dict[str, float] | None = None
    geometric_mean: dict[str, Number] | None = None
    geometric_mean_rank: dict[str, float] | None = None
    geometric_mean_delta_rank: dict[str, float] | None = None
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
    confidence: float
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
    from imagenot.io import read_json

    return RankingsReport.from_json(read_json(file), str(file))
