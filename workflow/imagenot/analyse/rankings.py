"""The rankings report: every statistic of ``imagenot rankings`` from one validated table.

:func:`rankings_report` returns a :class:`imagenot.analyse.report.RankingsReport` (its types and
JSON: :mod:`imagenot.analyse.report`) whose datasets keep the table's order. It groups the table
into accuracy cells (:mod:`imagenot.analyse.cells`), compares each dataset with the reference
(:mod:`imagenot.analyse.compare`) and adds what spans datasets (here: means across datasets,
correlations averaged over them, error correlations). Statistics that cannot be computed (too
few models, no baseline, nothing to resample) are listed under ``not_computed`` with the reason
instead of failing; what the input made us assume (differing test-set sizes, models missing
from a dataset, near-duplicate names) is listed under ``warnings``.

Delta rank follows Recht et al. and Ozbulak et al.: rank on the reference minus rank on the
dataset, so a positive value is a model that climbs (rank 1 = best); see :data:`DELTA_RANK_SIGN`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import gmean

from imagenot.analyse import PUBLISHED_DATASET, stats
from imagenot.analyse.cells import (
    Cells,
    build_cells,
    check_per_image_means,
    per_image_matrices,
)
from imagenot.analyse.compare import BOOTSTRAP_OVER, MIN_MODELS, compare
from imagenot.analyse.names import alike_hint, near_duplicate_models
from imagenot.analyse.report import (
    AcrossDatasets,
    Correlations,
    DatasetEntry,
    ErrorCorrelation,
    MeanCorrelations,
    RankingsReport,
    clean,
)
from imagenot.analyse.settings import RankingsSettings
from imagenot.analyse.table import (
    TableError,
    check_confidence,
    listed,
    mixed_sizes,
    unknown_datasets,
)

__all__ = ["BOOTSTRAP_OVER", "DELTA_RANK_SIGN", "rankings_report"]

DELTA_RANK_SIGN = (
    "delta_rank = rank on the reference - rank on this dataset (rank 1 = best): positive means "
    "the model climbs, negative that it falls (the sign of Recht et al. and Ozbulak et al.)"
)


def across_datasets(
    cells: Cells,
    datasets: list[str],
    reference: str | None,
    floors: dict[str, float] | None,
    seed: int,
) -> tuple[AcrossDatasets | None, dict[str, str]]:
    """Per model: size-weighted and geometric mean over ``datasets``, their ranks and rank
    changes against ``reference``; per dataset, the correlation with the mean of the others.

    The geometric mean of a model with an accuracy of 0 somewhere (after the optional
    per-dataset floor) is 0 whatever its other results: such models are excluded from the
    geometric mean and listed, the others keep theirs. Where ``n`` differs within a dataset,
    each model's own ``n`` weighs its accuracy. The correlations with the mean of the others
    carry the p-values of :func:`imagenot.analyse.stats.correlation_tests` (``seed`` for its
    random pairings), like every other section.
    """
    floors = floors or {}
    unknown_datasets("--floor", floors, datasets, "the aggregated datasets")
    models = [m for m in cells.models if all((m, d) in cells.cells for d in datasets)]
    excluded = [m for m in cells.models if m not in models]
    if not models:
        return None, {"across_datasets": "no model has results on every aggregated dataset"}
    acc = np.array([[cells.cells[m, d].mean for d in datasets] for m in models])
    n = np.array([[cells.cells[m, d].n for d in datasets] for m in models])
    out: dict[str, Any] = {"datasets": datasets, "models": models, "excluded_models": excluded}
    missing: dict[str, str] = {}
    ref_rank: dict[str, float] = {}
    if reference is not None:
        ref_models = [m for m in models if (m, reference) in cells.cells]
        ref_rank = dict(
            zip(ref_models, stats.ranks(cells.accuracy(ref_models, reference)), strict=True)
        )

    def ranked(name: str, values: np.ndarray, who: list[str]) -> None:
        r = stats.ranks(values)
        out[name] = dict(zip(who, values, strict=True))
        out[f"{name}_rank"] = dict(zip(who, r, strict=True))
        if ref_rank:
            # ranks of the aggregate among the models it covers, against the reference's
            out[f"{name}_delta_rank"] = {
                m: ref_rank[m] - rank for m, rank in zip(who, r, strict=True) if m in ref_rank
            }

    if np.all(np.isfinite(n)):
        uniform = np.all(n == n[0], axis=0)
        out["weights"] = {d: n[0, j] if uniform[j] else "per model" for j, d in enumerate(datasets)}
        ranked("weighted_mean", np.average(acc, axis=1, weights=n), models)
    else:
        missing["weighted_mean"] = "column n (test-set size) missing for some dataset"
    # raised to each dataset's floor (``*`` = every dataset) for the geometric mean
    floored = np.maximum(acc, [floors.get(d, floors.get("*", -np.inf)) for d in datasets])
    positive = np.all(floored > 0, axis=1)
    if floors:
        out["geometric_mean_floors"] = floors
    if positive.any():
        who = [m for m, ok in zip(models, positive, strict=True) if ok]
        ranked("geometric_mean", gmean(floored[positive], axis=1), who)
        if not positive.all():
            out["geometric_mean_excluded"] = [m for m in models if m not in who]
    else:
        missing["geometric_mean"] = "every model has an accuracy of 0 on some dataset"
    if len(datasets) >= 3 and len(models) >= MIN_MODELS:
        others = {}
        for j, d in enumerate(datasets):
            rest = np.delete(acc, j, axis=1).mean(axis=1)
            others[d] = Correlations(**clean(stats.correlation_tests(acc[:, j], rest, seed)))
        out["with_mean_of_others"] = others
    else:
        missing["with_mean_of_others"] = "needs at least 3 aggregated datasets and 3 models"
    return AcrossDatasets(**clean(out)), missing


def mean_correlations(entries: dict[str, DatasetEntry], datasets: list[str]) -> MeanCorrelations:
    """Correlations with the reference averaged over ``datasets`` (Tuggener et al.'s Average
    row): the plain mean, and for rho and r also Fisher's z mean (tanh of the mean artanh)."""
    tests = {d: entries[d].correlations for d in datasets if entries[d].correlations}
    out: dict[str, Any] = {"datasets": list(tests)}
    for key in ("kendall_tau", "spearman_rho", "pearson_r"):
        v = np.array([getattr(t, key) for t in tests.values()], dtype=float)
        out[key] = float(np.mean(v)) if len(v) else float("nan")
        if key != "kendall_tau" and len(v):
            z = np.arctanh(np.clip(v, -0.999999, 0.999999))
            out[f"{key}_fisher"] = float(np.tanh(np.mean(z)))
    return MeanCorrelations(**clean(out))


def error_correlations(cells: Cells, seed: int) -> tuple[list[ErrorCorrelation], dict[str, str]]:
    """Spearman rho between model errors (100 - accuracy) on every pair of datasets, with the
    p-value of :func:`imagenot.analyse.stats.correlation_tests` (exact for few models)."""
    rows, missing = [], {}
    ds = cells.datasets
    for i, a in enumerate(ds):
        for b in ds[i + 1 :]:
            b_models = set(cells.models_of(b))
            common = [m for m in cells.models_of(a) if m in b_models]
            if len(common) < MIN_MODELS:
                missing[f"{a} vs {b}"] = f"needs at least {MIN_MODELS} common models"
                continue
            res = stats.correlation_tests(
                100 - cells.accuracy(common, a), 100 - cells.accuracy(common, b), seed
            )
            row = {"a": a, "b": b, "n": len(common), "rho": res["spearman_rho"]}
            row |= {"p": res["spearman_p"], "p_method": res["p_method"]}
            rows.append(ErrorCorrelation(**clean(row)))
    return rows, missing


def rankings_report(
    df: pd.DataFrame,
    settings: RankingsSettings,
    *,
    per_image: pd.DataFrame | None = None,
    min_reference_accuracy: float | None = None,
    aggregate: list[str] | None = None,
    floors: dict[str, float] | None = None,
) -> RankingsReport:
    """Every rankings statistic of a validated results table (see the module docstring).

    ``settings`` (:class:`imagenot.analyse.settings.RankingsSettings`: from the config in the
    workflow, from the flags of ``imagenot rankings``, or ``RankingsSettings.hand_typed(...)``)
    chooses the reference (None = the table's first dataset), the baseline, the fitting axis,
    the confidence and the bootstrap. The remaining options are those of the command alone:
    ``aggregate`` chooses the datasets of the across-dataset means (default: all);
    ``floors`` raises accuracies to a floor per dataset (``*`` = all) before the geometric
    mean; ``min_reference_accuracy`` adds an OLS fit on the models at or above it (Fang et
    al.'s 70% cut).
    """
    if settings.axis not in stats.AXES:
        raise ValueError(f"axis must be one of {stats.AXES}, not {settings.axis!r}")
    if settings.over not in BOOTSTRAP_OVER:
        raise ValueError(f"bootstrap over must be one of {BOOTSTRAP_OVER}, not {settings.over!r}")
    confidence = check_confidence(settings.confidence)
    reference, baseline, seed = settings.reference, settings.baseline_model, settings.seed
    cells = build_cells(df, confidence)
    chosen = "given" if reference is not None else "first dataset of the table"
    reference = reference if reference is not None else cells.datasets[0]
    for what, name, names in (
        ("reference dataset", reference, cells.datasets),
        ("baseline model", baseline, cells.models),
    ):
        if name is not None and name not in names:
            raise TableError(
                f"{what} {name!r} is not in the table{alike_hint(name, names)}; "
                f"{what.split()[1]}s: {', '.join(names[:20])}"
            )
    aggregate = aggregate or []
    twice = sorted({d for d in aggregate if aggregate.count(d) > 1})
    if twice:
        raise TableError(f"--aggregate names dataset(s) twice: {', '.join(twice)}")
    unknown_datasets("--aggregate", aggregate, cells.datasets)
    agg_datasets = aggregate or cells.datasets
    images = None
    if per_image is not None:
        images = per_image_matrices(per_image, settings.variant, settings.standard_transform)
        check_per_image_means(cells, images)
    warnings = [
        f"model names that differ only in case or spaces: {', '.join(group)}"
        for group in near_duplicate_models(cells.models)
    ] + [
        f"{d}: test-set size n differs between models ({', '.join(f'{v:g}' for v in values[:5])}); "
        "each model's own n is used for its interval and its weight"
        for d, values in mixed_sizes(df).items()
    ]
    not_computed: dict[str, str] = {}
    out_ds: dict[str, DatasetEntry] = {}
    # The published ImageNet accuracies (the workflow's accuracy.csv carries them as dataset
    # PUBLISHED_DATASET) list every model torchvision publishes, not the models a run trained:
    # a model is "of the table" when it was measured, and the published column misses none.
    measured = [
        m
        for m in cells.models
        if any((m, d) in cells.cells for d in cells.datasets if d != PUBLISHED_DATASET)
    ] or cells.models
    for d in cells.datasets:
        models = cells.models_of(d)
        acc = cells.accuracy(models, d)
        # the test-set size: one number when every model shares it (NaN never), else per model
        sizes = {m: cells.cells[m, d].n for m in models}
        absent = [m for m in measured if (m, d) not in cells.cells]
        entry: dict[str, Any] = {
            "models": len(models),
            "missing_models": absent,
            "n": sizes[models[0]] if all(v == sizes[models[0]] for v in sizes.values()) else sizes,
            "accuracy": dict(zip(models, acc, strict=True)),
            "interval": {m: [cells.cells[m, d].lo, cells.cells[m, d].hi] for m in models},
            "interval_kind": {m: cells.cells[m, d].interval for m in models},
            "ranks": dict(zip(models, stats.ranks(acc), strict=True)),
        }
        k = {m: len(cells.cells[m, d].seeds) for m in models}
        if any(v > 1 for v in k.values()):
            entry |= {"seeds": k, "standard_error": {m: cells.cells[m, d].se for m in models}}
        if absent and d != PUBLISHED_DATASET:  # a model without published weights is no gap
            warnings.append(
                f"{d}: {len(absent)} model(s) of the table missing: {listed(absent, 5)}"
            )
        base = cells.cells[baseline, d].mean if (baseline, d) in cells.cells else 0.0
        if base > 0:
            entry["relative_progress"] = {m: a / base for m, a in zip(models, acc, strict=True)}
        elif baseline is not None:
            why = f"baseline {baseline!r} has no positive accuracy on {d!r}"
            not_computed[f"{d}: relative_progress"] = why
        comp, missing = {}, {}
        if d != reference:
            comp, missing = compare(cells, d, reference, settings, images, min_reference_accuracy)
        not_computed.update({f"{d}: {k}": v for k, v in missing.items()})
        out_ds[d] = DatasetEntry(**clean(entry), **comp)
    across, missing = across_datasets(cells, agg_datasets, reference, floors, seed)
    not_computed.update(missing)
    errors, missing = error_correlations(cells, seed)
    not_computed.update({f"error_spearman {k}": v for k, v in missing.items()})
    if baseline is None:
        not_computed["relative_progress"] = "no baseline model given"
    return RankingsReport(
        reference=reference,
        reference_chosen=chosen,
        baseline=baseline,
        axis=settings.axis,
        confidence=clean(confidence),
        variant=settings.variant,
        delta_rank_sign=DELTA_RANK_SIGN,
        models=clean(cells.models),
        dataset_order=clean(cells.datasets),
        datasets=out_ds,
        mean_correlation_with_reference=mean_correlations(
            out_ds, [d for d in agg_datasets if d != reference]
        ),
        across_datasets=across,
        error_spearman=errors,
        warnings=warnings,
        not_computed=not_computed,
    )
