"""Caption-gloss similarity of curated classes (curation outputs, docs/contracts.md).

``classes.parquet`` holds each class's ``score`` (mean similarity of its top-n captions);
``selection.parquet`` holds every selected caption's ``similarity`` with its class's query.
"""

from __future__ import annotations

import os

import numpy as np

from imagenot.core.io import read_parquet

SUMMARY = ("min", "mean", "median", "max")
"""The statistics of :func:`summary`, in order."""


def summary(values: np.ndarray) -> dict[str, float | None]:
    """min, mean, median, max of finite ``values`` (None for none)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    found = (v.min(), v.mean(), np.median(v), v.max()) if v.size else (None,) * 4
    return {k: None if x is None else float(x) for k, x in zip(SUMMARY, found, strict=True)}


def read_curation(
    classes_path: str | os.PathLike, selection_path: str | os.PathLike
) -> tuple[dict, dict]:
    """(classes columns wnid/score, selection columns wnid/similarity) as numpy arrays, from a
    curation's classes.parquet and selection.parquet."""

    def arrays(path: str | os.PathLike, columns: list[str]) -> dict:
        table = read_parquet(path, columns=columns)
        return {name: table[name].to_numpy(zero_copy_only=False) for name in columns}

    return arrays(classes_path, ["wnid", "score"]), arrays(selection_path, ["wnid", "similarity"])


def caption_stats(classes: dict, selection: dict) -> dict:
    """Class-score summary across classes (the paper's figure), the summary of each class's mean
    caption similarity, and caption-level summaries."""
    import pandas as pd

    similarity = pd.Series(np.asarray(selection["similarity"], dtype=np.float64))
    per_class = similarity.groupby(np.asarray(selection["wnid"]).astype(str)).mean()
    stats = {"n_classes": len(classes["wnid"]), "n_captions": len(selection["wnid"])}
    stats |= {"class_score": summary(classes["score"])}
    stats |= {"class_mean_selected_similarity": summary(per_class.to_numpy())}
    return stats | {"caption_similarity": summary(selection["similarity"])}
