"""The files of the figures stage's steps and of the rankings command (:mod:`imagenot.core.files`)."""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.analyse.plan import ACCURACY
from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class FigureFiles(Files):
    """``figure``: one figure, as PDF and PNG."""

    accuracy: str = given(f"the accuracy table ({ACCURACY})", positional=True)
    pdf: str = made("the figure as PDF")
    png: str = made("the figure as PNG")


@dataclass(frozen=True)
class TableFiles(Files):
    """``table``: one table, as CSV and Markdown."""

    accuracy: str = given(f"the accuracy table ({ACCURACY})", positional=True)
    rankings: list[str] = given("the standard then the robust rankings report", many=True)
    csv: str = made("the table as CSV")
    md: str = made("the table as Markdown")


@dataclass(frozen=True)
class RankingsFiles(Files):
    """``rankings``: any results table in, the rankings report out."""

    table: list[str] = given(
        "CSV or parquet results table(s); NAME=FILE: a table without a dataset column, whose "
        "rows are test set NAME",
        many=True,
        positional=True,
    )
    per_image: str | None = given(
        "per-image results (model, dataset, key, correct): bootstrap over test images",
        optional=True,
    )
    out: str | None = made("also write the JSON report to this file (atomically)", optional=True)
