"""The files of the acquire stage's steps, one class per rule (:mod:`imagenot.core.files`).

A dataset's own folder is a format (:mod:`imagenot.core.dataset`: manifest, classes, fingerprint and
shards under one folder), so the steps that write into it name it too (``--out``), and the
gather checks that the files its rule lists are where the format puts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class DownloadFiles(Files):
    """``acquire-download`` (one part of a round's selection)."""

    selection: str = given("the round's caption selection (parquet)")
    status: str = made("one status row per URL (parquet)")
    tar: str = made("the part's valid images")


@dataclass(frozen=True)
class RoundsFiles(Files):
    """The download rounds so far: what the top-up and the fill both read
    (:func:`imagenot.acquire.build.read_rounds`)."""

    selections: list[str] = given("round 0's selection, then each top-up round's", many=True)
    status: list[str] = given("the status table of every part of those rounds", many=True)


@dataclass(frozen=True)
class TopupFiles(RoundsFiles):
    """``acquire-topup`` (the next top-up round's selection)."""

    reserve: str = given("the caption reserve of curate-select")
    selection: str = made("this round's selection (parquet)")


@dataclass(frozen=True)
class PlanFiles(RoundsFiles):
    """``acquire-plan`` (fill and split over every round, and the download and class
    reports)."""

    reserve: list[str] = given(
        "the caption reserve, when there are top-up rounds (for the shortfall message)",
        many=True,
        optional=True,
    )
    exclusions: list[str] = given(
        "the audit's exclusion list of the download pool (key, reason): its rows are "
        "left out before the fill",
        many=True,
        optional=True,
    )
    assignment: str = made("the kept images, where their bytes lie (parquet)")
    download_stats: str = made("URLs per part and reason (parquet)")
    download_stats_csv: str = made("the same as CSV")
    classes_report: str = made("per class: tried, valid, kept, split counts (parquet)")
    classes_report_csv: str = made("the same as CSV")


@dataclass(frozen=True)
class WriteFiles(Files):
    """``acquire-write`` (one download part's kept images into the dataset's shards)."""

    assignment: str = given("the assignment of acquire-plan")
    part: str = made("the part's manifest (parquet)")


@dataclass(frozen=True)
class GatherFiles(Files):
    """``acquire-gather`` (a dataset's manifest, classes and fingerprint from its parts)."""

    parts: list[str] = given("part manifests, in job order", many=True)
    manifest: str = made("the dataset's manifest (its folder is the dataset's)")
    classes: str = made("classes.txt, beside the manifest")
    fingerprint: str = made("fingerprint.txt, beside the manifest")


@dataclass(frozen=True)
class RangeFiles(Files):
    """``materialise-range`` (one class range of a dataset on disk)."""

    part: str = made("the range's manifest (parquet)")
