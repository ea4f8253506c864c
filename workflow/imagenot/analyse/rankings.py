"""The rankings report: every statistic of ``imagenot rankings`` from one validated table.

:func:`rankings_report` returns a JSON-ready dict (NaN written as null) whose datasets keep the
table's order. Statistics that cannot be computed (too few models, no baseline, nothing to
resample) are listed under ``not_computed`` with the reason instead of failing; what the input
made us assume (differing test-set sizes, models missing from a dataset, near-duplicate names)
is listed under ``warnings``.

Delta rank follows Recht et al. and Ozbulak et al.: rank on the reference minus rank on the
dataset, so a positive value is a model that climbs (rank 1 = best); see :data:`DELTA_RANK_SIGN`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from imagenot.analyse import PUBLISHED_DATASET, stats
from imagenot.analyse.settings import RankingsSettings
from imagenot.analyse.table import (
    TableError,
    check_confidence,
    dataset_label,
    is_standard,
    mixed_sizes,
    near_duplicate_models,
)

MIN_MODELS = 3
DELTA_RANK_SIGN = (
    "delta_rank = rank on the reference - rank on this dataset (rank 1 = best): positive means "
    "the model climbs, negative that it falls (the sign of Recht et al. and Ozbulak et al.)"
)
BOOTSTRAP_OVER = ("auto", "models", "seeds", "images")
"""What a bootstrap replicate resamples: ``models`` (Recht et al., Fang et al.), the ``seeds``
of each model, or the test ``images`` (per-image results); ``auto`` = seeds, else images."""


@dataclass
class Cell:
    """One model on one dataset: accuracy per seed and the interval drawn as its error bar."""

    seeds: np.ndarray
    n: float
    lo: float
    hi: float
    interval: str
    mean: float = float("nan")

    def __post_init__(self) -> None:
        self.mean = float(self.seeds.mean())

    @property
    def se(self) -> float:
        k = len(self.seeds)
        return float(self.seeds.std(ddof=1) / np.sqrt(k)) if k > 1 else float("nan")


@dataclass
class Cells:
    """Accuracy cells keyed by (model, dataset), with models and datasets in table order."""

    cells: dict[tuple[str, str], Cell]
    models: list[str]
    datasets: list[str]
    notes: list[str] = field(default_factory=list)

    def models_of(self, dataset: str) -> list[str]:
        return [m for m in self.models if (m, dataset) in self.cells]

    def accuracy(self, models: list[str], dataset: str) -> np.ndarray:
        return np.array([self.cells[m, dataset].mean for m in models])

    def bounds(self, models: list[str], dataset: str) -> tuple[np.ndarray, np.ndarray]:
        return (
            np.array([self.cells[m, dataset].lo for m in models]),
            np.array([self.cells[m, dataset].hi for m in models]),
        )


def build_cells(df: pd.DataFrame, confidence: float) -> Cells:
    """Group a validated table into cells; choose each cell's interval.

    Several seeds: mean +- one standard error over seeds. One seed: the table's ``ci_low`` /
    ``ci_high`` when given, else Clopper-Pearson from the model's own ``n``, else no interval
    (a point). Grouping and the Clopper-Pearson intervals are vectorised (1,500 models x 6
    datasets in well under a second).
    """
    check_confidence(confidence)
    models = list(dict.fromkeys(df["model"]))
    datasets = list(dict.fromkeys(df["dataset"]))
    work = df.assign(_n=df["n"] if "n" in df.columns else np.nan)
    for col in ("ci_low", "ci_high"):
        work[f"_{col}"] = df[col] if col in df.columns else np.nan
    g = work.groupby(["model", "dataset"], sort=False)
    agg = g.agg(
        mean=("accuracy", "mean"),
        sd=("accuracy", "std"),
        k=("accuracy", "size"),
        n=("_n", "max"),
        ci_low=("_ci_low", "first"),
        ci_high=("_ci_high", "first"),
    )
    values = work["accuracy"].to_numpy(dtype=float)
    seeds = g.indices if (agg["k"] > 1).any() else None
    mean = agg["mean"].to_numpy(float)
    k = agg["k"].to_numpy()
    n = agg["n"].to_numpy(float)
    se = agg["sd"].to_numpy(float) / np.sqrt(k)
    given = np.isfinite(agg["ci_low"].to_numpy(float)) & np.isfinite(agg["ci_high"].to_numpy(float))
    has_n = np.isfinite(n)
    cp_lo, cp_hi = np.full(len(mean), np.nan), np.full(len(mean), np.nan)
    if has_n.any():
        cp_lo[has_n], cp_hi[has_n] = stats.clopper_pearson(mean[has_n], n[has_n], confidence)
    kind = np.where(
        k > 1,
        "seed_se",
        np.where(given, "given", np.where(has_n, "clopper_pearson", "none")),
    )
    lo = np.select(
        [k > 1, given, has_n], [mean - se, agg["ci_low"].to_numpy(float), cp_lo], default=mean
    )
    hi = np.select(
        [k > 1, given, has_n], [mean + se, agg["ci_high"].to_numpy(float), cp_hi], default=mean
    )
    cells: dict[tuple[str, str], Cell] = {}
    for i, key in enumerate(agg.index):
        acc = values[seeds[key]] if seeds is not None else np.array([mean[i]])
        cells[key] = Cell(acc, float(n[i]), float(lo[i]), float(hi[i]), str(kind[i]))
    return Cells(cells, models, datasets)


def per_image_matrices(
    per_image: pd.DataFrame, variant: str, standard_transform: str
) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per dataset label: (models, models x images correctness matrix aligned on ``key``).

    Columns ``model``, ``dataset``, ``key``, ``correct``; ``protocol`` and ``transform`` are
    handled as in :func:`imagenot.analyse.table.select_variant` (robust = mean over transforms).
    """
    missing = {"model", "dataset", "key", "correct"} - set(per_image.columns)
    if missing:
        raise TableError(f"per-image table lacks column(s) {', '.join(sorted(missing))}")
    df = per_image.copy()
    if "protocol" in df.columns:
        df["dataset"] = [
            dataset_label(d, p) for d, p in zip(df["dataset"], df["protocol"], strict=True)
        ]
    key = [c for c in ("model", "dataset", "transform", "key") if c in df.columns]
    dup = df.duplicated(subset=key, keep="first")
    if dup.any():  # the pivot below would average them silently
        row = df.loc[dup].iloc[0]
        raise TableError(
            f"per-image table: row {int(np.flatnonzero(dup.to_numpy())[0])} repeats "
            f"({', '.join(f'{k}={row[k]!r}' for k in key)})"
        )
    if "transform" in df.columns and variant == "standard":
        df = df[is_standard(df["transform"], standard_transform)]
    df["correct"] = df["correct"].astype(float)
    out = {}
    for dataset, g in df.groupby("dataset", sort=False):
        wide = g.pivot_table(index="model", columns="key", values="correct", aggfunc="mean")
        if wide.isna().any(axis=None):
            raise TableError(f"per-image results of {dataset!r}: models saw different images")
        out[str(dataset)] = (list(map(str, wide.index)), wide.to_numpy(dtype=float))
    return out


def _clean(obj: Any) -> Any:
    """JSON-ready: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | np.ndarray):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.integer | np.bool_):
        return obj.item()
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return f if np.isfinite(f) else None
    return obj


def _taus(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Kendall tau-b of each replicate row (scipy; O(m log m) per row)."""
    return np.array([kendalltau(a, b, variant="b").statistic for a, b in zip(y, x, strict=True)])


def _bootstrap(
    cells: Cells,
    models: list[str],
    dataset: str,
    reference: str,
    images: dict[str, tuple[list[str], np.ndarray]] | None,
    settings: RankingsSettings,
    estimates: dict[str, float],
) -> dict[str, Any] | str:
    """Bootstrap intervals of Kendall tau and the OLS slope, or the reason there are none
    (``settings.reps`` replicates resampling ``settings.over``, ``settings.interval``)."""
    reps, seed, over = settings.reps, settings.seed, settings.over
    if reps <= 0:
        return "bootstrap disabled (0 replicates)"
    rng = np.random.default_rng(seed)
    multi = any(len(cells.cells[m, d].seeds) > 1 for m in models for d in (dataset, reference))
    have_images = bool(images) and dataset in images and reference in images
    if over == "auto":
        over = "seeds" if multi else "images" if have_images else ""
        if not over:
            return (
                "one seed per model and no per-image results: nothing to resample "
                "(--bootstrap-over models resamples the models)"
            )
    if over == "seeds" and not multi:
        return "one seed per model: nothing to resample over seeds"
    if over == "images" and not have_images:
        return f"no per-image results for {dataset!r} and {reference!r}"
    if over == "models":
        y0, x0 = cells.accuracy(models, dataset), cells.accuracy(models, reference)
        idx = rng.integers(0, len(models), (reps, len(models)))
        y, x = y0[idx], x0[idx]
    elif over == "seeds":

        def draw(d: str) -> np.ndarray:
            out = np.empty((reps, len(models)))
            for i, m in enumerate(models):
                s = cells.cells[m, d].seeds
                k = len(s)
                out[:, i] = s[rng.integers(0, k, (reps, k))].mean(axis=1) if k > 1 else s[0]
            return out

        y, x = draw(dataset), draw(reference)
    else:
        mats = {}
        for d in (dataset, reference):
            names, mat = images[d]
            if not set(models) <= set(names):
                return f"per-image results of {d!r} lack some of the models"
            pos = {name: i for i, name in enumerate(names)}
            mats[d] = mat[[pos[m] for m in models]]

        def draw(d: str) -> np.ndarray:
            mat = mats[d]
            return np.stack(
                [
                    mat[:, rng.integers(0, mat.shape[1], mat.shape[1])].mean(axis=1) * 100.0
                    for _ in range(reps)
                ]
            )

        y, x = draw(dataset), draw(reference)
    taus = _taus(y, x)
    axis, confidence, interval = settings.axis, settings.confidence, settings.interval
    slopes = stats.slopes(stats.to_axis(x, axis), stats.to_axis(y, axis))
    tau_ci = stats.bootstrap_interval(taus, estimates["kendall_tau"], confidence, interval)
    slope_ci = stats.bootstrap_interval(slopes, estimates["slope"], confidence, interval)
    out = {
        "method": over,
        "reps": reps,
        "seed": seed,
        "interval": interval,
        "interval_name": stats.INTERVAL_NAMES[interval],
        "kendall_tau_ci": tau_ci["ci"],
        "slope_ci": slope_ci["ci"],
    }
    notes = [
        f"{k}: {c['note']}"
        for k, c in (("kendall_tau", tau_ci), ("slope", slope_ci))
        if "note" in c
    ]
    if notes:
        out["notes"] = notes
    return out


def compare(
    cells: Cells,
    dataset: str,
    reference: str,
    settings: RankingsSettings,
    *,
    images: dict[str, tuple[list[str], np.ndarray]] | None = None,
    min_reference_accuracy: float | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Statistics of ``dataset`` against ``reference`` on their common models (OLS on
    ``settings.axis``, intervals at ``settings.confidence``, the bootstrap of
    :func:`_bootstrap`; ``images``: :func:`per_image_matrices`, for resampling test images)."""
    axis, confidence = settings.axis, settings.confidence
    ref_models = set(cells.models_of(reference))
    common = [m for m in cells.models_of(dataset) if m in ref_models]
    out: dict[str, Any] = {"reference": reference, "common_models": len(common)}
    missing: dict[str, str] = {}
    y = cells.accuracy(common, dataset)
    x = cells.accuracy(common, reference)
    if common:
        out["delta_rank"] = dict(zip(common, stats.ranks(x) - stats.ranks(y), strict=True))
    if len(common) < MIN_MODELS:
        why = f"needs at least {MIN_MODELS} models common with {reference!r}, has {len(common)}"
        for key in (
            "kendall_tau",
            "spearman_rho",
            "pearson_r",
            "ols",
            "rank_agreement_up_to_error_bars",
            "bootstrap",
        ):
            missing[key] = why
        return out, missing
    out.update(stats.correlation_tests(y, x, settings.seed))
    fit = stats.ols_fit(x, y, axis, confidence)
    out["ols"] = fit.summary()
    if min_reference_accuracy is not None:
        keep = x >= min_reference_accuracy
        if keep.sum() >= MIN_MODELS:
            sub = stats.ols_fit(x[keep], y[keep], axis, confidence).summary()
            out["ols_subset"] = {**sub, "min_reference_accuracy": min_reference_accuracy}
        else:
            missing["ols_subset"] = (
                f"{int(keep.sum())} models with reference accuracy >= {min_reference_accuracy}, "
                f"needs {MIN_MODELS}"
            )
    lo_d, hi_d = cells.bounds(common, dataset)
    lo_r, hi_r = cells.bounds(common, reference)
    out["rank_agreement_up_to_error_bars"] = stats.tau_up_to_error_bars(lo_d, hi_d, lo_r, hi_r)
    boot = _bootstrap(
        cells,
        common,
        dataset,
        reference,
        images,
        settings,
        estimates={"kendall_tau": out["kendall_tau"], "slope": out["ols"]["slope"]},
    )
    if isinstance(boot, str):
        missing["bootstrap"] = boot
    else:
        out["bootstrap"] = boot
    return out, missing


def _floored(acc: np.ndarray, datasets: list[str], floors: dict[str, float]) -> np.ndarray:
    """Accuracies raised to each dataset's floor (``*`` = every dataset) for the geometric mean."""
    out = acc.copy()
    for j, d in enumerate(datasets):
        f = floors.get(d, floors.get("*"))
        if f is not None:
            out[:, j] = np.maximum(out[:, j], f)
    return out


def across_datasets(
    cells: Cells,
    datasets: list[str],
    reference: str | None,
    floors: dict[str, float] | None,
    seed: int,
) -> tuple[dict[str, Any], dict[str, str]]:
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
    unknown = sorted(set(floors) - set(datasets) - {"*"})
    if unknown:
        raise TableError(f"--floor names dataset(s) not aggregated: {', '.join(unknown)}")
    models = [m for m in cells.models if all((m, d) in cells.cells for d in datasets)]
    excluded = [m for m in cells.models if m not in models]
    if not models:
        return {}, {"across_datasets": "no model has results on every aggregated dataset"}
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
        out["weights"] = {
            d: (n[0, j] if uniform[j] else "per model") for j, d in enumerate(datasets)
        }
        ranked("weighted_mean", stats.weighted_mean(acc, n), models)
    else:
        missing["weighted_mean"] = "column n (test-set size) missing for some dataset"
    floored = _floored(acc, datasets, floors)
    positive = np.all(floored > 0, axis=1)
    if floors:
        out["geometric_mean_floors"] = floors
    if positive.any():
        who = [m for m, ok in zip(models, positive, strict=True) if ok]
        ranked("geometric_mean", stats.geometric_mean(floored[positive]), who)
        if not positive.all():
            out["geometric_mean_excluded"] = [
                m for m, ok in zip(models, positive, strict=True) if not ok
            ]
    else:
        missing["geometric_mean"] = "every model has an accuracy of 0 on some dataset"
    if len(datasets) >= 3 and len(models) >= MIN_MODELS:
        others = {}
        for j, d in enumerate(datasets):
            rest = np.delete(acc, j, axis=1).mean(axis=1)
            others[d] = stats.correlation_tests(acc[:, j], rest, seed)
        out["with_mean_of_others"] = others
    else:
        missing["with_mean_of_others"] = "needs at least 3 aggregated datasets and 3 models"
    return out, missing


def mean_correlations(entries: dict[str, dict[str, Any]], datasets: list[str]) -> dict[str, Any]:
    """Correlations with the reference averaged over ``datasets`` (Tuggener et al.'s Average
    row): the plain mean, and for rho and r also Fisher's z mean (tanh of the mean artanh)."""
    out: dict[str, Any] = {"datasets": [d for d in datasets if "kendall_tau" in entries[d]]}
    for key in ("kendall_tau", "spearman_rho", "pearson_r"):
        v = np.array([entries[d][key] for d in out["datasets"]], dtype=float)
        out[key] = float(np.mean(v)) if len(v) else float("nan")
        if key != "kendall_tau" and len(v):
            out[f"{key}_fisher"] = float(
                np.tanh(np.mean(np.arctanh(np.clip(v, -0.999999, 0.999999))))
            )
    return out


def error_correlations(cells: Cells, seed: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
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
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "n": len(common),
                    "rho": res["spearman_rho"],
                    "p": res["spearman_p"],
                    "p_method": res["p_method"],
                }
            )
    return rows, missing


def _uniform(values: dict[str, Any]) -> Any:
    """The one value of a dict when every model shares it, else the dict (smaller JSON)."""
    vals = list(values.values())
    if vals and all(v == vals[0] for v in vals):
        return vals[0]
    return values


def rankings_report(
    df: pd.DataFrame,
    settings: RankingsSettings,
    *,
    per_image: pd.DataFrame | None = None,
    min_reference_accuracy: float | None = None,
    aggregate: list[str] | None = None,
    floors: dict[str, float] | None = None,
) -> dict[str, Any]:
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
    if reference is None:
        reference, chosen = cells.datasets[0], "first dataset of the table"
    else:
        chosen = "given"
        if reference not in cells.datasets:
            raise TableError(
                f"reference dataset {reference!r} is not in the table; "
                f"datasets: {', '.join(cells.datasets)}"
            )
    if baseline is not None and baseline not in cells.models:
        raise TableError(
            f"baseline model {baseline!r} is not in the table; models: {', '.join(cells.models[:20])}"
        )
    if aggregate:
        twice = sorted({d for d in aggregate if aggregate.count(d) > 1})
        if twice:
            raise TableError(f"--aggregate names dataset(s) twice: {', '.join(twice)}")
        unknown = [d for d in aggregate if d not in cells.datasets]
        if unknown:
            raise TableError(
                f"--aggregate names dataset(s) not in the table: {', '.join(unknown)}; "
                f"datasets: {', '.join(cells.datasets)}"
            )
    agg_datasets = list(dict.fromkeys(aggregate)) if aggregate else cells.datasets
    images = (
        per_image_matrices(per_image, settings.variant, settings.standard_transform)
        if per_image is not None
        else None
    )
    warnings: list[str] = []
    for group in near_duplicate_models(cells.models):
        warnings.append(f"model names that differ only in case or spaces: {', '.join(group)}")
    sizes = mixed_sizes(df)
    for d, values in sizes.items():
        shown = ", ".join(f"{v:g}" for v in values[:5])
        warnings.append(
            f"{d}: test-set size n differs between models ({shown}); each model's own n is "
            "used for its interval and its weight"
        )
    not_computed: dict[str, str] = {}
    out_ds: dict[str, Any] = {}
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
        absent = [m for m in measured if (m, d) not in cells.cells]
        entry: dict[str, Any] = {
            "models": len(models),
            "missing_models": absent,
            "n": _uniform({m: cells.cells[m, d].n for m in models}),
            "accuracy": dict(zip(models, acc, strict=True)),
            "interval": {m: [cells.cells[m, d].lo, cells.cells[m, d].hi] for m in models},
            "interval_kind": {m: cells.cells[m, d].interval for m in models},
            "ranks": dict(zip(models, stats.ranks(acc), strict=True)),
        }
        k = {m: len(cells.cells[m, d].seeds) for m in models}
        if any(v > 1 for v in k.values()):
            entry["seeds"] = k
            entry["standard_error"] = {m: cells.cells[m, d].se for m in models}
        if absent and d != PUBLISHED_DATASET:  # a model without published weights is no gap
            warnings.append(
                f"{d}: {len(absent)} model(s) of the table missing: "
                + ", ".join(absent[:5])
                + (" ..." if len(absent) > 5 else "")
            )
        if baseline is not None:
            if (baseline, d) in cells.cells and cells.cells[baseline, d].mean > 0:
                base = cells.cells[baseline, d].mean
                entry["relative_progress"] = {m: a / base for m, a in zip(models, acc, strict=True)}
            else:
                not_computed[f"{d}: relative_progress"] = (
                    f"baseline {baseline!r} has no positive accuracy on {d!r}"
                )
        if d != reference:
            comp, missing = compare(
                cells,
                d,
                reference,
                settings,
                images=images,
                min_reference_accuracy=min_reference_accuracy,
            )
            entry.update(comp)
            not_computed.update({f"{d}: {k}": v for k, v in missing.items()})
            for note in (comp.get("bootstrap") or {}).get("notes", []):
                warnings.append(f"{d}: bootstrap: {note}")
        out_ds[d] = entry
    across, missing = across_datasets(cells, agg_datasets, reference, floors, seed)
    not_computed.update(missing)
    errors, missing = error_correlations(cells, seed)
    not_computed.update({f"error_spearman {k}": v for k, v in missing.items()})
    if baseline is None:
        not_computed["relative_progress"] = "no baseline model given"
    report = {
        "reference": reference,
        "reference_chosen": chosen,
        "baseline": baseline,
        "axis": settings.axis,
        "confidence": confidence,
        "variant": settings.variant,
        "delta_rank_sign": DELTA_RANK_SIGN,
        "models": cells.models,
        "dataset_order": cells.datasets,
        "datasets": out_ds,
        "mean_correlation_with_reference": mean_correlations(
            out_ds, [d for d in agg_datasets if d != reference]
        ),
        "across_datasets": across,
        "error_spearman": errors,
        "warnings": warnings,
        "not_computed": not_computed,
    }
    return _clean(report)
