"""The options every figure and table shares, apart from the code that reads accuracy.csv.

Why a module of its own: ``imagenot figure`` / ``imagenot table`` parse their ``--settings``
into :class:`Options` itself (imagenot.figures.cli), and every ``imagenot`` command imports
that CLI module at start, so this class must not bring pandas along (imagenot.figures.data,
which re-exports it, does).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Options:
    """What the figure and table commands share (from config via
    ``figures_plan.options_settings``; no defaults here: they live in the analyse schema)."""

    datasets: list[str]
    reference: str
    downstream: str
    baseline: str
    standard_transform: str
    confidence: float
    axis: str
    imagenet_axis: str
