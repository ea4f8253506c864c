"""Accuracy summaries: top-k correctness, robust accuracy."""

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


def robust_accuracy(top1: Sequence[float]) -> float:
    """The paper's "Robust" accuracy: the mean of top-1 over the transformations."""
    values = np.asarray(top1, dtype=np.float64)
    if values.size == 0:
        raise ValueError("robust accuracy needs at least one transformation's accuracy")
    return float(values.mean())
