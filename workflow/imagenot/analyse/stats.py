"""Pure statistics of the rankings toolbox (numpy arrays in, numbers out).

Accuracies are percentages throughout. Rank 1 is the best (highest accuracy); ties get the
average rank.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special, stats

AXES = ("linear", "probit", "logit")


def ranks(accuracy: np.ndarray) -> np.ndarray:
    """Rank 1 = highest accuracy, ties averaged (scipy ``rankdata(method='average')``)."""
    return stats.rankdata(-np.asarray(accuracy, dtype=float), method="average")


def binomial_interval(
    accuracy: np.ndarray, n: np.ndarray, confidence: float, method: str = "beta"
) -> tuple[np.ndarray, np.ndarray]:
    """Interval (percent) for ``accuracy`` percent correct of ``n`` images: statsmodels'
    ``proportion_confint`` with ``method`` ``beta`` (exact, Clopper-Pearson) or ``wilson``."""
    from statsmodels.stats.proportion import proportion_confint

    n = np.asarray(n, dtype=float)
    k = np.round(np.asarray(accuracy, dtype=float) / 100.0 * n)
    lo, hi = proportion_confint(k, n, alpha=1 - confidence, method=method)
    return np.asarray(lo) * 100.0, np.asarray(hi) * 100.0


clopper_pearson = functools.partial(binomial_interval, method="beta")
"""Exact binomial (Clopper-Pearson) interval: :func:`binomial_interval` with ``beta``."""


_AXES = {
    "linear": (None, None),
    "probit": (stats.norm.ppf, lambda v: stats.norm.cdf(v) * 100.0),
    "logit": (special.logit, lambda v: special.expit(v) * 100.0),
}
"""Per fitting scale (:data:`AXES`): (fraction -> scale, scale -> percent)."""


def _axis(axis: str, way: int, values: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    if axis not in AXES:
        raise ValueError(f"axis must be one of {AXES}, not {axis!r}")
    v, f = np.asarray(values, dtype=float), _AXES[axis][way]
    return v if f is None else f(np.clip(v / 100.0, eps, 1 - eps) if way == 0 else v)


def to_axis(accuracy: np.ndarray, axis: str) -> np.ndarray:
    """Accuracy (percent) on the fitting scale: percent, probit or logit of the fraction."""
    return _axis(axis, 0, accuracy)


def from_axis(value: np.ndarray, axis: str) -> np.ndarray:
    """Inverse of :func:`to_axis` (back to percent)."""
    return _axis(axis, 1, value)


@dataclass
class OLSFit:
    """OLS of y on x (both on ``axis`` scale); ``result`` is the statsmodels results object."""

    result: Any
    axis: str
    confidence: float

    def summary(self) -> dict[str, Any]:
        res = self.result
        ci = np.asarray(res.conf_int(alpha=1 - self.confidence))
        return {
            "slope": float(res.params[1]),
            "slope_ci": [float(ci[1, 0]), float(ci[1, 1])],
            "intercept": float(res.params[0]),
            "intercept_ci": [float(ci[0, 0]), float(ci[0, 1])],
            "r2": float(res.rsquared),
            "adj_r2": float(res.rsquared_adj),
            "n": int(res.nobs),
            "axis": self.axis,
            "confidence": self.confidence,
        }

    def band(self, x_percent: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fitted line and its confidence band at ``x_percent``, back on the percent scale."""
        x = to_axis(x_percent, self.axis)
        exog = np.column_stack([np.ones_like(x), x])
        frame = self.result.get_prediction(exog).summary_frame(alpha=1 - self.confidence)
        columns = ("mean", "mean_ci_lower", "mean_ci_upper")
        return tuple(from_axis(frame[c].to_numpy(), self.axis) for c in columns)


MIN_FIT_MODELS = 3
"""Fewest models an OLS fit with intervals is computed on (a line and its residual spread)."""


def fit_problem(x_percent: np.ndarray, axis: str) -> str | None:
    """Why no OLS fit of accuracy on reference accuracies ``x_percent`` (on ``axis``) can be
    computed, or None: fewer than :data:`MIN_FIT_MODELS` models, or reference accuracies that
    do not vary (every model equal there, or equal up to the last bits of a float): a slope
    is the change of y per unit of x, and x without spread has no unit to fit, whatever
    interval a least-squares solver would print for it."""
    x = to_axis(np.asarray(x_percent, dtype=float), axis)
    if len(x) < MIN_FIT_MODELS:
        return f"an OLS fit with intervals needs at least {MIN_FIT_MODELS} models, has {len(x)}"
    spread = float(np.ptp(x))
    if not spread > 1e-9 * max(1.0, float(np.max(np.abs(x)))):
        values = sorted(set(np.round(np.asarray(x_percent, dtype=float), 6)))
        shown = f"{values[0]:g}%" if len(values) == 1 else "the same value"
        return (
            f"the reference accuracies of the {len(x)} models are all {shown}: no variance to "
            "fit a slope on"
        )
    return None


def ols_fit(x_percent: np.ndarray, y_percent: np.ndarray, axis: str, confidence: float) -> OLSFit:
    """statsmodels OLS of accuracy y on reference accuracy x; ValueError saying why where no
    fit can be computed (:func:`fit_problem`)."""
    import statsmodels.api as sm

    problem = fit_problem(x_percent, axis)
    if problem is not None:
        raise ValueError(problem)
    x = to_axis(x_percent, axis)
    y = to_axis(y_percent, axis)
    result = sm.OLS(y, sm.add_constant(x, has_constant="add")).fit()
    return OLSFit(result, axis, confidence)


def slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Row-wise closed-form OLS slopes of replicate matrices (reps x models), vectorised."""
    xc = x - x.mean(axis=-1, keepdims=True)
    ss = (xc * xc).sum(axis=-1)
    num = (xc * (y - y.mean(axis=-1, keepdims=True))).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ss > 0, num / np.where(ss > 0, ss, 1.0), np.nan)


def _order_matrix(lo: np.ndarray, hi: np.ndarray, rows: slice) -> np.ndarray:
    """+1 where model i is above j with disjoint intervals, -1 below, 0 overlapping."""
    return (lo[rows, None] > hi).astype(np.int8) - (lo > hi[rows, None])


def tau_up_to_error_bars(
    lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray
) -> dict[str, float | int]:
    """Rank agreement where two models whose intervals overlap count as tied.

    Returns counts of concordant, discordant and tied pairs, and tau-b computed from them:
    (C - D) / sqrt((P - T_a)(P - T_b)), with P all pairs and T_x the pairs tied in x.
    Vectorised over blocks of rows (1,500 models: about 1.1 million pairs in well under a
    second), since a Python loop over pairs grows quadratically.
    """
    lo_a, hi_a, lo_b, hi_b = (np.asarray(v, dtype=float) for v in (lo_a, hi_a, lo_b, hi_b))
    m = len(lo_a)
    counts = np.zeros(5, dtype=np.int64)  # concordant, discordant, tied in a, in b, in both
    block = max(1, 4_000_000 // max(m, 1))
    for start in range(0, m, block):
        rows = slice(start, min(m, start + block))
        sa, sb = _order_matrix(lo_a, hi_a, rows), _order_matrix(lo_b, hi_b, rows)
        # keep the pairs i < j only
        upper = np.arange(rows.start, rows.stop)[:, None] < np.arange(m)[None, :]
        prod = sa.astype(np.int16) * sb
        found = (prod > 0, prod < 0, sa == 0, sb == 0, (sa == 0) & (sb == 0))
        counts += [np.count_nonzero(f & upper) for f in found]
    conc, disc, tied_a, tied_b, tied_both = map(int, counts)
    pairs = m * (m - 1) // 2
    denom = np.sqrt(float(pairs - tied_a) * float(pairs - tied_b))
    return {
        "pairs": pairs,
        "concordant": conc,
        "discordant": disc,
        "tied_in_dataset": tied_a,
        "tied_in_reference": tied_b,
        "tied_in_both": tied_both,
        "tau_b": float((conc - disc) / denom) if denom > 0 else float("nan"),
    }


INTERVALS = ("bc", "basic", "percentile")
BOOTSTRAP_INTERVAL_NAMES = {
    "bc": "bias-corrected percentile (BC)",
    "basic": "basic (reverse percentile)",
    "percentile": "percentile",
}


def bootstrap_interval(
    values: np.ndarray, estimate: float, confidence: float, method: str
) -> dict[str, Any]:
    """Bootstrap interval of ``estimate`` from its replicates (undefined ones ignored), or the
    reason there is none.

    ``percentile``: the replicates' quantiles. ``basic``: the percentile interval reflected
    about the estimate. ``bc``: Efron's bias-corrected percentile interval, quantile levels
    Phi(2 z0 +- z) with z0 = Phi^-1(share of replicates below the estimate, ties half).

    Returns ``{"method", "valid_reps", "ci": [lo, hi]}``, or ``"ci": None`` with ``"refused"``,
    one line saying why, where the replicates cannot give a valid interval:

    - no finite replicate, or an undefined estimate;
    - every replicate equal: resampling leaves the statistic fixed (a ranking that no
      resampled test set changes), so the replicates say nothing of its spread;
    - ``bc`` with the estimate beyond every replicate: z0 is infinite (as in
      :func:`scipy.stats.bootstrap`, whose BCa interval is then NaN with a
      ``DegenerateDataWarning``); Kendall's tau of 1 resampled over test images is one: noise
      only ever lowers it;
    - an interval of zero width (most replicates on one value) or one that excludes its own
      estimate (resampling shifts the statistic away from it: more than ``1 - confidence / 2``
      of the replicates on one side of it, for ``bc`` as for ``percentile``): neither is a
      confidence interval of the estimate.

    Where z0 is finite, ``bc`` is computed as scipy computes BCa with no acceleration; its
    levels may lie far in a tail (z0 of 1.3 puts the upper one at 0.99999), where the endpoint
    is one of the most extreme replicates: more replicates (``--bootstrap-reps``) estimate it
    better.
    """
    if method not in INTERVALS:
        raise ValueError(f"interval must be one of {INTERVALS}, not {method!r}")
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    reps = len(v)
    out: dict[str, Any] = {"method": method, "valid_reps": reps}
    name = BOOTSTRAP_INTERVAL_NAMES[method]

    def refused(why: str) -> dict[str, Any]:
        return {**out, "ci": None, "refused": why}

    if not reps:
        return refused("no valid replicate")
    if not np.isfinite(estimate):
        return refused("the estimate is undefined")
    low, high = float(v.min()), float(v.max())
    if low == high:
        return refused(
            f"all {reps} replicates equal {low:.4g}: resampling leaves the statistic fixed"
        )
    alpha = 1 - confidence
    below, ties = int(np.sum(v < estimate)), int(np.sum(v == estimate))
    if method != "bc":
        lo, hi = np.quantile(v, [alpha / 2, 1 - alpha / 2])
        if method == "basic":  # the percentile interval reflected about the estimate
            lo, hi = 2 * estimate - hi, 2 * estimate - lo
    else:
        share = (below + 0.5 * ties) / reps
        if share in (0.0, 1.0):
            where = "above" if share == 1.0 else "below"
            return refused(
                f"the estimate {estimate:.4g} lies {where} all {reps} replicates ({low:.4g} to "
                f"{high:.4g}): the bias correction z0 = Phi^-1({share:g}) is infinite, so there "
                "is no BC interval (resampling moves the statistic away from its estimate)"
            )
        z0 = float(stats.norm.ppf(share))
        lo, hi = np.quantile(v, stats.norm.cdf(2 * z0 + stats.norm.ppf([alpha / 2, 1 - alpha / 2])))
    lo, hi = float(lo), float(hi)
    if lo == hi:
        at = f"{np.mean(v == lo):.0%} of the {reps} replicates equal {lo:.4g}"
        return refused(f"the {name} interval has zero width: {at}")
    if not lo <= estimate <= hi:
        return refused(
            f"the estimate {estimate:.4g} lies outside the {name} interval [{lo:.4g}, {hi:.4g}] "
            f"of its {reps} replicates ({below} below it): resampling moves the statistic away "
            "from its estimate"
        )
    out["ci"] = [lo, hi]
    return out


EXACT_MAX_MODELS = 8
"""Up to this many models every pairing of the two rankings is enumerated (8! = 40,320)."""
PERMUTATION_MAX_MODELS = 30
"""Up to this many models the p-values come from :data:`PERMUTATIONS` seeded random pairings;
above it, scipy's asymptotic ones. The Monte Carlo error of 20,000 pairings is about 0.0015 at
p = 0.05; scipy's t approximation of Spearman's p is off by more than that up to about 30
models (by 0.03 at 6 models, 0.007 at 10, 0.002 at 20, 0.001 at 30, measured against the
enumerated or 10^6-permutation null), so the permutation test is the better of the two there."""
PERMUTATIONS = 20_000
UNDEFINED_P_METHOD = "undefined: fewer than 3 models or a constant accuracy"
"""The ``p_method`` of correlations that are undefined (every statistic and p-value NaN)."""


def correlation_tests(a: np.ndarray, b: np.ndarray, seed: int) -> dict[str, Any]:
    """Kendall tau-b, Spearman rho and Pearson r of two accuracy vectors, with two-sided
    p-values that are exact where the number of models is small.

    The one correlation test of every section of ``imagenot rankings`` (per dataset, the
    correlation with the mean of the other datasets, the error correlations), so that no
    section falls back to an approximation that another one avoids. The statistics are
    scipy's. The p-values are :func:`scipy.stats.permutation_test`'s over the pairings of the
    two vectors (under independence every pairing is equally likely): all n! of them up to
    :data:`EXACT_MAX_MODELS` models (exact, ties included), :data:`PERMUTATIONS` random ones
    drawn from ``seed`` up to :data:`PERMUTATION_MAX_MODELS` ((k + 1) / (B + 1)), and scipy's
    asymptotic p-values above. The three statistics of a batch of pairings are computed at
    once: re-pairing keeps each vector's values, so every denominator is a constant. Four
    models in the same order on both: p = 2/24 = 0.083 for all three, where the t
    approximation says 0.0. ``p_method`` names what was done.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    n = len(a)
    if n < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        # too few models, or a constant vector: the correlations are undefined
        keys = ("kendall_tau", "spearman_rho", "pearson_r", "kendall_p", "spearman_p", "pearson_p")
        return dict.fromkeys(keys, float("nan")) | {"p_method": UNDEFINED_P_METHOD}
    tests = stats.kendalltau(a, b, variant="b"), stats.spearmanr(a, b), stats.pearsonr(a, b)
    out: dict[str, Any] = {"p_method": "asymptotic (scipy)"}
    for key, t in zip(("kendall_tau", "spearman_rho", "pearson_r"), tests, strict=True):
        out |= {key: float(t.statistic), f"{key.split('_')[0]}_p": float(t.pvalue)}
    if n > PERMUTATION_MAX_MODELS:
        return out

    def unit(v: np.ndarray) -> np.ndarray:
        v = v - v.mean()
        return v / np.sqrt(v @ v)

    # Kendall's C - D on a's dense ranks as int8 (at most PERMUTATION_MAX_MODELS < 127)
    dense = stats.rankdata(a, method="dense").astype(np.int8)
    sb = np.sign(b[:, None] - b[None, :]).astype(np.int8)
    tau_den = np.sqrt(np.count_nonzero(a[:, None] != a[None, :]) * np.count_nonzero(sb))
    ra, rb, ua, ub = unit(stats.rankdata(a)), unit(stats.rankdata(b)), unit(a), unit(b)

    def statistic(idx: np.ndarray, axis: int) -> np.ndarray:
        """(tau-b, rho, r) of ``a`` re-paired by the index rows ``idx`` against ``b``."""
        d = dense[idx]
        c_d = (np.sign(d[..., :, None] - d[..., None, :]) * sb).sum((-2, -1), dtype=np.int64)
        return np.stack([c_d / tau_den, ra[idx] @ rb, ua[idx] @ ub], axis=-1)

    exact = n <= EXACT_MAX_MODELS
    res = stats.permutation_test(
        (np.arange(n),),
        statistic,
        permutation_type="pairings",
        vectorized=True,
        n_resamples=np.inf if exact else PERMUTATIONS,
        rng=np.random.default_rng(seed),
    )
    out["kendall_p"], out["spearman_p"], out["pearson_p"] = (float(v) for v in res.pvalue)
    drawn = f"permutation: {PERMUTATIONS} random pairings, seed {seed}"
    out["p_method"] = f"exact: all {math.factorial(n)} pairings" if exact else drawn
    return out
