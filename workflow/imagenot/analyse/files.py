"""The files of the analyse stage's step (:mod:`imagenot.core.files`)."""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class AccuracyFiles(Files):
    """``accuracy-table``: every final run's evaluation, with the published accuracies, in one
    table (and every run's per-image results in another). The published accuracies are the
    package's own table, whose digest the rule holds (typed by hand: ``--published``)."""

    robustness: list[str] = given(
        "robustness.parquet of each evaluated run", many=True, optional=True
    )
    per_image: list[str] = given(
        "per_image.parquet of each run, in the same order", many=True, optional=True
    )
    accuracy: str = made("accuracy.csv")
    per_image_table: str | None = made(
        "every run's per-image results in one table (parquet)", optional=True
    )
