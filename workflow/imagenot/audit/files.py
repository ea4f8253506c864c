"""The files of the audit stage's steps (:mod:`imagenot.core.files`)."""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class CalibrateFiles(Files):
    """``audit-calibrate``: the threshold, from held-apart images of one dataset and their
    edited copies, embedded with the diagnostics encoder."""

    manifest: str = given("the audited dataset's manifest (its folder is the dataset's)")
    classes: str = given("the dataset's classes.txt, beside the manifest")
    checkpoint: str | None = given(
        "a backbone encoder's weights (model.safetensors of a final run)", optional=True
    )
    result: str | None = given(
        "a backbone encoder's run record (that run's result.json)", optional=True
    )
    calibration: str = made("JSON: threshold, its precision and recall, the pairs' counts")


@dataclass(frozen=True)
class SearchFiles(Files):
    """``audit-search``: each image of one part of a split against every target set, its
    candidates verified by alignment (with ``audit.verification.enabled``)."""

    queries: str = given(".npz of the audited split (`imagenot embed-images`)")
    targets: list[str] = given(
        ".npz of each target set, in the order of the settings' targets", many=True
    )
    manifests: list[str] = given(
        "with verification: the audited dataset's manifest, then each target set's dataset's, "
        "in the order of the settings' targets (the images compared)",
        many=True,
        optional=True,
    )
    thumbnails: list[str] = given(
        "with verification and pixel_candidates: the audited split's thumbnails, then each "
        "target set's, in the order of the settings' targets (`imagenot audit-thumbnails`)",
        many=True,
        optional=True,
    )
    matches: str = made("parquet: each query's closest image in each target set")


@dataclass(frozen=True)
class ThumbnailsFiles(Files):
    """``audit-thumbnails``: the colour-normalised thumbnails of every image of one split of a
    dataset, in the order of that split's embeddings file's keys."""

    manifest: str = given("the dataset's manifest (its folder is the dataset's)")
    classes: str = given("the dataset's classes.txt, beside the manifest")
    embeddings: str = given(".npz of the split (`imagenot embed-images`): the keys' order")
    thumbnails: str = made(".npz: keys, thumbnails (float32, one row per key) and their side")


@dataclass(frozen=True)
class TableFiles(Files):
    """``audit-table``: the search's matches at the calibrated threshold."""

    matches: list[str] = given("every search part's matches of the audited dataset", many=True)
    calibration: str = given("the calibration's JSON")
    per_class: str = made("parquet: per class and target set, images, found, closest")
    csv: str = made("the per-class table as CSV (the report's)")
    flagged: str = made("parquet: every pair at or above the threshold")
    closest: str = made("parquet: the closest pairs across sets, for the figure")
    summary: str = made("JSON: per query split and target set, found of images, the threshold")


@dataclass(frozen=True)
class FigureFiles(Files):
    """``audit-figure``: the closest pairs side by side, as PDF and PNG."""

    closest: str = given("the audit's closest pairs (closest.parquet)")
    summary: str = given("the audit's summary (audit.json): the threshold")
    manifests: list[str] = given("the manifest of every dataset the pairs name", many=True)
    classes: list[str] = given("the classes.txt beside each manifest, in order", many=True)
    pdf: str = made("the figure as PDF")
    png: str = made("the figure as PNG")


@dataclass(frozen=True)
class PoolFiles(Files):
    """``audit-pool``: a dataset's download pool, before its splits are built, against the
    target sets and itself at the reference's calibrated threshold."""

    selections: list[str] = given("round 0's selection, then each top-up round's", many=True)
    status: list[str] = given(
        "the status table of every part of those rounds (the part tar beside each)", many=True
    )
    targets: list[str] = given(
        ".npz of each target set, in the order of the settings' targets", many=True
    )
    calibration: str = given("the reference's calibration JSON (the threshold)")
    checkpoint: str | None = given(
        "a backbone encoder's weights (model.safetensors of a final run)", optional=True
    )
    result: str | None = given(
        "a backbone encoder's run record (that run's result.json)", optional=True
    )
    embeddings: str = made(".npz: the pool's embeddings (keys in the fill's order)")
    exclusions: str = made(
        "parquet: the images acquire-plan leaves out (key, reason, target, target_key, similarity)"
    )
