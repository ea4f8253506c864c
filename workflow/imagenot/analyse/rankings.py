"""The rankings report: every statistic of ``imagenot rankings`` from one validated table.

:func:`rankings_report` returns a JSON-ready dict (NaN written as null). Statistics that cannot
be computed (too few models, no baseline, no seeds or per-image results for a bootstrap) are
listed under ``not_computed`` with the reason instead of failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import kendalltau

from imagenot.analyse import stats
from imagenot.analyse.table import TableError, dataset_label, is_standard

MIN_MODELS = 3


@dataclass
class Cell:
    """One model on one dataset: accuracy per seed and the interval drawn as its error bar."""

    seeds: np.ndarray
    n: float
    lo: float
    hi: float
    interval: str

    @property
    def mean(self) -> float:
        return float(self.seeds.mean())

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


def build_cells(df: pd.DataFrame, confidence: float = 0.95) -> Cells:
    """Group a validated table into cells; choose each cell's interval.

    Several seeds: mean +- one standard error over seeds. One seed: the table's ``ci_low`` /
    ``ci_high`` when given, else Clopper-Pearson from ``n``, else no interval (a point).
    """
    models = list(dict.fromkeys(df["model"]))
    datasets = list(dict.fromkeys(df["dataset"]))
    cells: dict[tuple[str, str], Cell] = {}
    for (model, dataset), g in df.groupby(["model", "dataset"], sort=False):
        acc = g["accuracy"].to_numpy(dtype=float)
        n = float(g["n"].max()) if "n" in g and g["n"].notna().any() else float("nan")
        mean = float(acc.mean())
        if len(acc) > 1:
            se = float(acc.std(ddof=1) / np.sqrt(len(acc)))
            lo, hi, kind = mean - se, mean + se, "seed_se"
        elif {"ci_low", "ci_high"} <= set(g.columns) and g[["ci_low", "ci_high"]].notna().all(
            axis=None
        ):
            lo, hi, kind = float(g["ci_low"].iloc[0]), float(g["ci_high"].iloc[0]), "given"
        elif np.isfinite(n):
            lo_a, hi_a = stats.clopper_pearson(np.array([mean]), np.array([n]), confidence)
            lo, hi, kind = float(lo_a[0]), float(hi_a[0]), "clopper_pearson"
        else:
            lo, hi, kind = mean, mean, "none"
        cells[model, dataset] = Cell(acc, n, lo, hi, kind)
    return Cells(cells, models, datasets)


def per_image_matrices(
    per_image: pd.DataFrame, variant: str = "standard", standard_transform: str = "Identity"
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
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, float | np.floating):
        f = float(obj)
        return f if np.isfinite(f) else None
    return obj


def _bootstrap(
    cells: Cells,
    models: list[str],
    dataset: str,
    reference: str,
    images: dict[str, tuple[list[str], np.ndarray]] | None,
    reps: int,
    seed: int,
    axis: str,
    confidence: float,
) -> dict[str, Any] | str:
    """Bootstrap intervals of Kendall tau and the OLS slope, or the reason there are none."""
    if reps <= 0:
        return "bootstrap disabled (0 replicates)"
    rng = np.random.default_rng(seed)
    multi = any(len(cells.cells[m, d].seeds) > 1 for m in models for d in (dataset, reference))

    def draw_seeds(d: str) -> np.ndarray:
        out = np.empty(len(models))
        for i, m in enumerate(models):
            s = cells.cells[m, d].seeds
            out[i] = s[rng.integers(0, len(s), len(s))].mean() if len(s) > 1 else s[0]
        return out

    if multi:
        method, draw = "seeds", draw_seeds
    elif images and dataset in images and reference in images:
        mats = {}
        for d in (dataset, reference):
            names, mat = images[d]
            if not set(models) <= set(names):
                return f"per-image results of {d!r} lack some of the models"
            mats[d] = mat[[names.index(m) for m in models]]

        def draw_images(d: str) -> np.ndarray:
            mat = mats[d]
            idx = rng.integers(0, mat.shape[1], mat.shape[1])
            return mat[:, idx].mean(axis=1) * 100.0

        method, draw = "images", draw_images
    else:
        return "one seed per model and no per-image results: nothing to resample"
    taus = np.empty(reps)
    slopes = np.empty(reps)
    for b in range(reps):
        y = draw(dataset)
        x = draw(reference)
        taus[b] = kendalltau(y, x, variant="b").statistic
        slopes[b] = stats.slope(stats.to_axis(x, axis), stats.to_axis(y, axis))
    return {
        "method": method,
        "reps": reps,
        "seed": seed,
        "kendall_tau_ci": stats.percentile_interval(taus, confidence),
        "slope_ci": stats.percentile_interval(slopes, confidence),
    }


def compare(
    cells: Cells,
    dataset: str,
    reference: str,
    *,
    axis: str = "linear",
    confidence: float = 0.95,
    reps: int = 0,
    seed: int = 0,
    images: dict[str, tuple[list[str], np.ndarray]] | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Statistics of ``dataset`` against ``reference`` on their common models."""
    common = [m for m in cells.models_of(dataset) if (m, reference) in cells.cells]
    out: dict[str, Any] = {"reference": reference, "common_models": common}
    missing: dict[str, str] = {}
    y = cells.accuracy(common, dataset)
    x = cells.accuracy(common, reference)
    if common:
        out["delta_rank"] = dict(zip(common, stats.ranks(y) - stats.ranks(x), strict=True))
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
    out.update(stats.correlations(y, x))
    out["ols"] = stats.ols_fit(x, y, axis, confidence).summary()
    lo = lambda d: np.array([cells.cells[m, d].lo for m in common])  # noqa: E731
    hi = lambda d: np.array([cells.cells[m, d].hi for m in common])  # noqa: E731
    out["rank_agreement_up_to_error_bars"] = stats.tau_up_to_error_bars(
        lo(dataset), hi(dataset), lo(reference), hi(reference)
    )
    boot = _bootstrap(cells, common, dataset, reference, images, reps, seed, axis, confidence)
    if isinstance(boot, str):
        missing["bootstrap"] = boot
    else:
        out["bootstrap"] = boot
    return out, missing


def across_datasets(cells: Cells, datasets: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Per model: size-weighted and geometric mean over ``datasets`` with their ranks."""
    models = [m for m in cells.models if all((m, d) in cells.cells for d in datasets)]
    excluded = [m for m in cells.models if m not in models]
    if not models:
        return {}, {"across_datasets": "no model has results on every dataset"}
    acc = np.array([[cells.cells[m, d].mean for d in datasets] for m in models])
    n = np.array([cells.cells[models[0], d].n for d in datasets])
    out: dict[str, Any] = {"datasets": datasets, "models": models, "excluded_models": excluded}
    missing: dict[str, str] = {}
    if np.all(np.isfinite(n)):
        wm = stats.weighted_mean(acc, n)
        out["weights"] = dict(zip(datasets, n, strict=True))
        out["weighted_mean"] = dict(zip(models, wm, strict=True))
        out["weighted_mean_rank"] = dict(zip(models, stats.ranks(wm), strict=True))
    else:
        missing["weighted_mean"] = "column n (test-set size) missing for some dataset"
    if np.all(acc > 0):
        gm = stats.geometric_mean(acc)
        out["geometric_mean"] = dict(zip(models, gm, strict=True))
        out["geometric_mean_rank"] = dict(zip(models, stats.ranks(gm), strict=True))
    else:
        missing["geometric_mean"] = "an accuracy of 0 makes the geometric mean 0"
    return out, missing


def error_correlations(cells: Cells) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Spearman rho between model errors (100 - accuracy) on every pair of datasets."""
    from scipy.stats import spearmanr

    rows, missing = [], {}
    ds = cells.datasets
    for i, a in enumerate(ds):
        for b in ds[i + 1 :]:
            common = [m for m in cells.models_of(a) if (m, b) in cells.cells]
            if len(common) < MIN_MODELS:
                missing[f"{a} vs {b}"] = f"needs at least {MIN_MODELS} common models"
                continue
            res = spearmanr(100 - cells.accuracy(common, a), 100 - cells.accuracy(common, b))
            rows.append({"a": a, "b": b, "n": len(common), "rho": res.statistic, "p": res.pvalue})
    return rows, missing


def rankings_report(
    df: pd.DataFrame,
    reference: str | None = None,
    *,
    baseline: str | None = None,
    axis: str = "linear",
    confidence: float = 0.95,
    reps: int = 0,
    seed: int = 0,
    per_image: pd.DataFrame | None = None,
    variant: str = "standard",
    standard_transform: str = "Identity",
) -> dict[str, Any]:
    """Every rankings statistic of a validated results table (see the module docstring)."""
    if axis not in stats.AXES:
        raise ValueError(f"axis must be one of {stats.AXES}, not {axis!r}")
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
            f"baseline model {baseline!r} is not in the table; models: {', '.join(cells.models)}"
        )
    images = (
        per_image_matrices(per_image, variant, standard_transform)
        if per_image is not None
        else None
    )
    not_computed: dict[str, str] = {}
    out_ds: dict[str, Any] = {}
    for d in cells.datasets:
        models = cells.models_of(d)
        acc = cells.accuracy(models, d)
        entry: dict[str, Any] = {
            "models": models,
            "accuracy": dict(zip(models, acc, strict=True)),
            "seeds": {m: len(cells.cells[m, d].seeds) for m in models},
            "standard_error": {m: cells.cells[m, d].se for m in models},
            "interval": {m: [cells.cells[m, d].lo, cells.cells[m, d].hi] for m in models},
            "interval_kind": {m: cells.cells[m, d].interval for m in models},
            "ranks": dict(zip(models, stats.ranks(acc), strict=True)),
        }
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
                axis=axis,
                confidence=confidence,
                reps=reps,
                seed=seed,
                images=images,
            )
            entry.update(comp)
            not_computed.update({f"{d}: {k}": v for k, v in missing.items()})
        out_ds[d] = entry
    across, missing = across_datasets(cells, cells.datasets)
    not_computed.update(missing)
    errors, missing = error_correlations(cells)
    not_computed.update({f"error_spearman {k}": v for k, v in missing.items()})
    if baseline is None:
        not_computed["relative_progress"] = "no baseline model given"
    report = {
        "reference": reference,
        "reference_chosen": chosen,
        "baseline": baseline,
        "axis": axis,
        "confidence": confidence,
        "variant": variant,
        "models": cells.models,
        "datasets": out_ds,
        "across_datasets": across,
        "error_spearman": errors,
        "not_computed": not_computed,
    }
    return _clean(report)
