"""Accuracies as counts: a top-1 accuracy measured on ``n`` images is a whole number of them
correct, so ``pct`` percent of ``n`` must be ``k / n * 100`` for a whole ``k``, up to the digits
it is written with. Shared by every reader of accuracies with their counts: a run's records
(imagenot.train.records) and the toolbox's tables (imagenot.analyse.checks), so that both
refuse the same numbers with the same words.
"""

from __future__ import annotations

import math

import numpy as np


def cell(value) -> str:
    """A value as a table shows it: ``'abc'``, ``75.1``, ``nan`` (numpy scalars as numbers)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return np.format_float_positional(value, unique=True, trim="-")
    return repr(value)


def decimals(value: float) -> int:
    """Digits after the decimal point of the shortest text that reads back as ``value``."""
    text = np.format_float_positional(value, unique=True, trim="-")
    return len(text.partition(".")[2])


def count_problem(
    pct: float,
    n: float,
    written: float,
    factor: float,
    count: str = "n",
    of: str = "test images",
    *,
    slack: float = 0.0,
) -> str | None:
    """Why ``pct`` percent (``written`` so, on a scale ``factor`` times smaller: 100 for a
    fraction) cannot be a count of correct images out of ``n``, or None: the nearest count is
    further from it than the digits it is written with allow (55% of 3 images: 1 of 3 is 33.3%
    and 2 of 3 is 66.7%; 33.3% of 3 is 1 of 3, rounded). Of no image (``n`` 0) only 0% can be
    measured, which is what an evaluation of an empty split reports. ``count`` and ``of`` name
    the count and what it counts in the message.

    An accuracy written with ``d`` decimals is taken when some count lies within
    ``(0.5 + slack)`` units of its last digit (``10^-d``): 0.5 is rounding to the nearest;
    ``slack`` widens it for numbers printed by others (a published table rounds in its own way:
    :data:`imagenot.analyse.checks.PRINTED_SLACK`). The refusal prints the accuracy, the two
    nearest shares and the distance with enough digits to see the gap beside the tolerance."""
    if n == 0:
        return None if pct == 0 else f"{cell(written)} cannot be a share of {count}=0 {of}"
    k = pct / 100.0 * n
    gap = abs(pct - round(k) / n * 100.0)
    d = decimals(float(written))
    unit = 10.0**-d * factor
    tol = (0.5 + slack) * unit + 1e-9 * max(1.0, pct)
    if gap <= tol:
        return None
    lo, hi = math.floor(k), math.ceil(k)
    # three decimals more than the accuracy has in percent: enough to see the gap
    shown = max(d - round(math.log10(factor)) + 3, 4)
    return (
        f"{cell(written)} cannot be a share of {count}={n:g} {of} ({lo:.0f} of them is "
        f"{lo / n * 100:.{shown}f}%, {hi:.0f} is {hi / n * 100:.{shown}f}%; the nearest is "
        f"{gap:.{shown}f} points away, more than the {(0.5 + slack) * unit:g} that "
        f"{d} decimal(s) allow)"
    )
