"""One dataset against the reference: correlations, OLS fits, agreement up to error bars and
their bootstrap intervals, on the models the two share (:func:`compare`).

The part of the rankings report (:mod:`imagenot.analyse.rankings`) that each compared dataset
gets; its results are the comparison fields of :class:`imagenot.analyse.report.DatasetEntry`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import kendalltau

from imagenot.analyse import stats
from imagenot.analyse.cells import Cells
from imagenot.analyse.report import (
    Bootstrap,
    Correlations,
    Fit,
    SubsetFit,
    UpToErrorBars,
    clean,
)
from imagenot.analyse.settings import RankingsSettings

MIN_MODELS = 3
"""Fewest models a correlation, a fit or a mean over datasets is computed on."""
BOOTSTRAP_OVER = ("auto", "models", "seeds", "images")
"""What a bootstrap replicate resamples: ``models`` (Recht et al., Fang et al.), the ``seeds``
of each model, or the test ``images`` (per-image results); ``auto`` = seeds, else images."""


def _bootstrap(
    cells: Cells,
    models: list[str],
    dataset: str,
    reference: str,
    images: dict[str, tuple[list[str], np.ndarray]] | None,
    settings: RankingsSettings,
    estimates: dict[str, float],
) -> Bootstrap | str:
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
        idx = rng.integers(0, len(models), (reps, len(models)))
        y, x = cells.accuracy(models, dataset)[idx], cells.accuracy(models, reference)[idx]
    elif over == "seeds":

        def draw(s: np.ndarray) -> np.ndarray:  # one model's mean over its resampled seeds
            k = len(s)
            return s[rng.integers(0, k, (reps, k))].mean(axis=1) if k > 1 else np.full(reps, s[0])

        y, x = ([draw(cells.cells[m, d].seeds) for m in models] for d in (dataset, reference))
        y, x = np.stack(y, axis=1), np.stack(x, axis=1)
    else:
        y, x = [], []
        for d, out in ((dataset, y), (reference, x)):
            names, mat = images[d]
            if not set(models) <= set(names):
                return f"per-image results of {d!r} lack some of the models"
            mat = mat[[names.index(m) for m in models]]
            k = mat.shape[1]
            out.extend(mat[:, rng.integers(0, k, k)].mean(axis=1) * 100.0 for _ in range(reps))
    axis, interval = settings.axis, settings.interval
    replicates = {
        "kendall_tau": [kendalltau(a, b, variant="b").statistic for a, b in zip(y, x, strict=True)],
        "slope": stats.slopes(stats.to_axis(x, axis), stats.to_axis(y, axis)),
    }
    cis = {
        f"{k}_ci": stats.bootstrap_interval(v, estimates[k], settings.confidence, interval)
        for k, v in replicates.items()
    }
    refused = {key: c["refused"] for key, c in cis.items() if c["ci"] is None}
    return Bootstrap(
        method=over,
        reps=reps,
        seed=seed,
        interval=interval,
        interval_name=stats.BOOTSTRAP_INTERVAL_NAMES[interval],
        **{key: clean(c["ci"]) for key, c in cis.items()},
        refused=refused or None,
    )


def compare(
    cells: Cells,
    dataset: str,
    reference: str,
    settings: RankingsSettings,
    images: dict[str, tuple[list[str], np.ndarray]] | None = None,
    min_reference_accuracy: float | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Statistics of ``dataset`` against ``reference`` on their common models (OLS on
    ``settings.axis``, intervals at ``settings.confidence``, the bootstrap of
    :func:`_bootstrap`; ``images``: :func:`imagenot.analyse.cells.per_image_matrices`, for
    resampling test images): the comparison fields of a
    :class:`imagenot.analyse.report.DatasetEntry`, and the reasons of those not computed."""
    axis, confidence = settings.axis, settings.confidence
    ref_models = set(cells.models_of(reference))
    common = [m for m in cells.models_of(dataset) if m in ref_models]
    out: dict[str, Any] = {"reference": reference, "common_models": len(common)}
    missing: dict[str, str] = {}
    y, x = cells.accuracy(common, dataset), cells.accuracy(common, reference)
    if common:
        out["delta_rank"] = clean(dict(zip(common, stats.ranks(x) - stats.ranks(y), strict=True)))
    if len(common) < MIN_MODELS:
        why = f"needs at least {MIN_MODELS} models common with {reference!r}, has {len(common)}"
        keys = "kendall_tau spearman_rho pearson_r ols rank_agreement_up_to_error_bars bootstrap"
        return out, dict.fromkeys(keys.split(), why)
    tests = stats.correlation_tests(y, x, settings.seed)
    out["correlations"] = Correlations(**clean(tests))
    problem = stats.fit_problem(x, axis)
    if problem is None:
        fit = stats.ols_fit(x, y, axis, confidence).summary()
        out["ols"] = Fit(**clean(fit))
    else:  # no slope, nor its interval: nothing to draw either
        fit = {"slope": float("nan")}
        missing["ols"] = problem
    if min_reference_accuracy is not None:
        keep = x >= min_reference_accuracy
        above = f"models with reference accuracy >= {min_reference_accuracy}"
        sub_problem = stats.fit_problem(x[keep], axis)
        if keep.sum() < MIN_MODELS:
            missing["ols_subset"] = f"{int(keep.sum())} {above}, needs {MIN_MODELS}"
        elif sub_problem is not None:
            missing["ols_subset"] = f"{above}: {sub_problem}"
        else:
            sub = stats.ols_fit(x[keep], y[keep], axis, confidence).summary()
            sub["min_reference_accuracy"] = min_reference_accuracy
            out["ols_subset"] = SubsetFit(**clean(sub))
    up = stats.tau_up_to_error_bars(
        *cells.bounds(common, dataset), *cells.bounds(common, reference)
    )
    out["rank_agreement_up_to_error_bars"] = UpToErrorBars(**clean(up))
    estimates = {"kendall_tau": tests["kendall_tau"], "slope": fit["slope"]}
    boot = _bootstrap(cells, common, dataset, reference, images, settings, estimates)
    if isinstance(boot, str):
        missing["bootstrap"] = boot
    else:
        out["bootstrap"] = boot
        for key, why in (boot.refused or {}).items():
            missing[f"bootstrap.{key}"] = f"{boot.interval} interval over {boot.method}: {why}"
    return out, missing
