"""Pure statistics of the rankings toolbox (numpy arrays in, numbers out).

Accuracies are percentages throughout. Rank 1 is the best (highest accuracy); ties get the
average rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

AXES = ("linear", "probit", "logit")


def ranks(accuracy: np.ndarray) -> np.ndarray:
    """Rank 1 = highest accuracy, ties averaged (scipy ``rankdata(method='average')``)."""
    return stats.rankdata(-np.asarray(accuracy, dtype=float), method="average")


def clopper_pearson(
    accuracy: np.ndarray, n: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Exact binomial interval (percent) for ``accuracy`` percent correct of ``n`` images."""
    from statsmodels.stats.proportion import proportion_confint

    n = np.asarray(n, dtype=float)
    k = np.round(np.asarray(accuracy, dtype=float) / 100.0 * n)
    lo, hi = proportion_confint(k, n, alpha=1 - confidence, method="beta")
    return np.asarray(lo) * 100.0, np.asarray(hi) * 100.0


def to_axis(accuracy: np.ndarray, axis: str = "linear", eps: float = 1e-4) -> np.ndarray:
    """Accuracy (percent) on the fitting scale: percent, probit or logit of the fraction."""
    a = np.asarray(accuracy, dtype=float)
    if axis == "linear":
        return a
    p = np.clip(a / 100.0, eps, 1 - eps)
    if axis == "probit":
        return stats.norm.ppf(p)
    if axis == "logit":
        return np.log(p / (1 - p))
    raise ValueError(f"axis must be one of {AXES}, not {axis!r}")


def from_axis(value: np.ndarray, axis: str = "linear") -> np.ndarray:
    """Inverse of :func:`to_axis` (back to percent)."""
    v = np.asarray(value, dtype=float)
    if axis == "linear":
        return v
    if axis == "probit":
        return stats.norm.cdf(v) * 100.0
    if axis == "logit":
        return 100.0 / (1 + np.exp(-v))
    raise ValueError(f"axis must be one of {AXES}, not {axis!r}")


def correlations(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Kendall tau-b, Spearman rho and Pearson r of two accuracy vectors, with p-values."""
    tau = stats.kendalltau(a, b, variant="b")
    rho = stats.spearmanr(a, b)
    r = stats.pearsonr(a, b)
    return {
        "kendall_tau": float(tau.statistic),
        "kendall_p": float(tau.pvalue),
        "spearman_rho": float(rho.statistic),
        "spearman_p": float(rho.pvalue),
        "pearson_r": float(r.statistic),
        "pearson_p": float(r.pvalue),
    }


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
        return (
            from_axis(frame["mean"].to_numpy(), self.axis),
            from_axis(frame["mean_ci_lower"].to_numpy(), self.axis),
            from_axis(frame["mean_ci_upper"].to_numpy(), self.axis),
        )


def ols_fit(
    x_percent: np.ndarray, y_percent: np.ndarray, axis: str = "linear", confidence: float = 0.95
) -> OLSFit:
    """statsmodels OLS of accuracy y on reference accuracy x (needs at least 3 points)."""
    import statsmodels.api as sm

    x = to_axis(x_percent, axis)
    y = to_axis(y_percent, axis)
    if len(x) < 3:
        raise ValueError("an OLS fit with intervals needs at least 3 models")
    result = sm.OLS(y, sm.add_constant(x, has_constant="add")).fit()
    return OLSFit(result, axis, confidence)


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """Closed-form OLS slope (for bootstrap replicates); nan when x is constant."""
    xc = x - x.mean()
    ss = float(xc @ xc)
    return float(xc @ (y - y.mean()) / ss) if ss > 0 else float("nan")


def tau_up_to_error_bars(
    lo_a: np.ndarray, hi_a: np.ndarray, lo_b: np.ndarray, hi_b: np.ndarray
) -> dict[str, float | int]:
    """Rank agreement where two models whose intervals overlap count as tied.

    Returns counts of concordant, discordant and tied pairs, and tau-b computed from them:
    (C - D) / sqrt((P - T_a)(P - T_b)), with P all pairs and T_x the pairs tied in x.
    """
    lo_a, hi_a, lo_b, hi_b = (np.asarray(v, dtype=float) for v in (lo_a, hi_a, lo_b, hi_b))
    m = len(lo_a)
    conc = disc = tied_a = tied_b = tied_both = 0
    for i in range(m):
        for j in range(i + 1, m):
            sa = _order(lo_a[i], hi_a[i], lo_a[j], hi_a[j])
            sb = _order(lo_b[i], hi_b[i], lo_b[j], hi_b[j])
            tied_a += sa == 0
            tied_b += sb == 0
            tied_both += sa == 0 and sb == 0
            if sa and sb:
                conc += sa == sb
                disc += sa != sb
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


def _order(lo_i: float, hi_i: float, lo_j: float, hi_j: float) -> int:
    """+1 if i is above j with disjoint intervals, -1 if below, 0 if they overlap."""
    if lo_i > hi_j:
        return 1
    if lo_j > hi_i:
        return -1
    return 0


def weighted_mean(acc: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Row-wise weighted mean of a models x datasets accuracy matrix."""
    w = np.asarray(weights, dtype=float)
    return np.asarray(acc, dtype=float) @ w / w.sum()


def geometric_mean(acc: np.ndarray) -> np.ndarray:
    """Row-wise geometric mean of a models x datasets accuracy matrix (scipy gmean)."""
    return stats.gmean(np.asarray(acc, dtype=float), axis=1)


def percentile_interval(values: np.ndarray, confidence: float = 0.95) -> list[float]:
    """Percentile bootstrap interval, ignoring undefined replicates."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not len(v):
        return [float("nan"), float("nan")]
    q = 100 * (1 - confidence) / 2
    return [float(np.percentile(v, q)), float(np.percentile(v, 100 - q))]
