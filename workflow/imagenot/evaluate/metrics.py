"""Accuracy summaries: top-k correctness, Clopper-Pearson intervals, robust accuracy."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def topk_correct(logits: torch.Tensor, labels: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean (N,): the label is among the ``k`` highest logits (``k`` capped at the class count).

    Ties at the k-th logit are broken by ``torch.topk``'s order.
    """
    k = min(k, logits.shape[1])
    top = logits.topk(k, dim=1).indices
    return (top == labels.reshape(-1, 1)).any(dim=1)


def clopper_pearson(
    successes: int | np.ndarray, n: int | np.ndarray, alpha: float = 0.05
) -> tuple[np.ndarray, np.ndarray]:
    """Exact (Clopper-Pearson) two-sided ``1 - alpha`` interval of a binomial proportion, in [0, 1].

    Same values as ``statsmodels.stats.proportion.proportion_confint(method="beta")``; NaN for n = 0.
    """
    # the beta quantile (scipy.stats takes a second to import); here, not at the module's top, so
    # that evaluating a batch needs no scipy (benchmarks/gpu_check.py runs without it)
    from scipy.special import betaincinv

    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, betaincinv(k, n - k + 1, alpha / 2), 0.0)
        high = np.where(k < n, betaincinv(k + 1, n - k, 1 - alpha / 2), 1.0)
    empty = n <= 0
    return np.where(empty, np.nan, low), np.where(empty, np.nan, high)


def robust_accuracy(top1: Sequence[float]) -> float:
    """The paper's "Robust" accuracy: the mean of top-1 over the transformations."""
    values = np.asarray(top1, dtype=np.float64)
    if values.size == 0:
        raise ValueError("robust accuracy needs at least one transformation's accuracy")
    return float(values.mean())
