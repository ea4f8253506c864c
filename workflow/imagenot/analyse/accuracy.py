"""The run's accuracy table: every evaluation result plus the published ImageNet accuracies.

``results/analyse/accuracy.csv`` (docs/contracts.md): ``model``, ``dataset``, ``protocol``,
``seed``, ``transform``, ``accuracy`` (top-1 percent), ``top5``, ``n``, ``ci_low``, ``ci_high``,
``imagenet_top1`` (published torchvision top-1 of the architecture). The published accuracies
also appear as rows of dataset ``imagenet_published`` (protocol ``published``), so that
``imagenot rankings`` can compare any dataset against them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from imagenot.analyse import PUBLISHED_DATASET, PUBLISHED_PROTOCOL, stats
from imagenot.analyse.settings import AccuracySettings
from imagenot.analyse.table import TableError
from imagenot.evaluate.paths import PER_IMAGE
from imagenot.io import read_parquet

ROBUSTNESS_COLUMNS = (
    "model",
    "dataset",
    "protocol",
    "seed",
    "transform",
    "top1",
    "top5",
    "n",
    "ci_low",
    "ci_high",
)
PUBLISHED_COLUMNS = ("model", "weights", "top1", "top5", "source")
IMAGENET_VAL_SIZE = 50_000

log = logging.getLogger(__name__)
COLUMNS = [
    "model",
    "dataset",
    "protocol",
    "seed",
    "transform",
    "accuracy",
    "top5",
    "n",
    "ci_low",
    "ci_high",
    "imagenet_top1",
]


def read_robustness(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate evaluation ``robustness.parquet`` files, checking their columns."""
    frames = []
    for path in paths:
        df = read_parquet(path).to_pandas()
        missing = [c for c in ROBUSTNESS_COLUMNS if c not in df.columns]
        if missing:
            raise TableError(f"{path}: lacks column(s) {', '.join(missing)}")
        frames.append(df[list(ROBUSTNESS_COLUMNS)])
    if not frames:
        return pd.DataFrame({c: [] for c in ROBUSTNESS_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def read_published(path: str | os.PathLike) -> pd.DataFrame:
    """The published ImageNet accuracies of the registry's weights (one row per model with
    published weights: ``imagenot.train.facts``' derived table). A model whose publisher states
    no accuracy (timm's configs carry none) has no row on the published axis: counted in the
    log, never silently."""
    df = pd.read_csv(path)
    missing = [c for c in PUBLISHED_COLUMNS if c not in df.columns]
    if missing:
        raise TableError(f"{path}: lacks column(s) {', '.join(missing)}")
    if df["model"].duplicated().any():
        raise TableError(f"{path}: model {df['model'][df['model'].duplicated()].iloc[0]!r} twice")
    unstated = df["top1"].isna()
    if unstated.any():
        log.info(
            "%s: %d model(s) without a published top-1 (%s) are left off the published axis",
            path,
            int(unstated.sum()),
            ", ".join(df["model"][unstated]),
        )
    return df[~unstated].reset_index(drop=True)


def accuracy_table(
    robustness: pd.DataFrame,
    published: pd.DataFrame,
    settings: AccuracySettings,
) -> pd.DataFrame:
    """One row per evaluation result, then one per published model (see the module doc); the
    published rows are labelled with ``settings.standard_transform`` and carry Clopper-Pearson
    intervals at ``settings.confidence``."""
    standard_transform, confidence = settings.standard_transform, settings.confidence
    top1 = dict(zip(published["model"], published["top1"].astype(float), strict=True))
    runs = robustness.rename(columns={"top1": "accuracy"}).copy()
    runs["imagenet_top1"] = runs["model"].map(top1)
    n = np.full(len(published), IMAGENET_VAL_SIZE)
    lo, hi = stats.clopper_pearson(published["top1"].to_numpy(float), n, confidence)
    pub = pd.DataFrame(
        {
            "model": published["model"],
            "dataset": PUBLISHED_DATASET,
            "protocol": PUBLISHED_PROTOCOL,
            "seed": 0,
            "transform": standard_transform,
            "accuracy": published["top1"].astype(float),
            "top5": published["top5"].astype(float),
            "n": n,
            "ci_low": lo,
            "ci_high": hi,
            "imagenet_top1": published["top1"].astype(float),
        }
    )
    frames = [f for f in (runs[COLUMNS], pub[COLUMNS]) if len(f)]
    table = pd.concat(frames, ignore_index=True) if frames else pub[COLUMNS]
    return table.sort_values(
        ["dataset", "protocol", "model", "seed", "transform"], kind="stable"
    ).reset_index(drop=True)


def read_per_image(robustness_paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Per-image correctness beside each ``robustness.parquet``, labelled with its run."""
    frames = []
    for path in robustness_paths:
        run = (
            read_parquet(path, columns=["model", "dataset", "protocol", "seed"]).to_pandas().iloc[0]
        )
        per = read_parquet(Path(path).with_name(Path(PER_IMAGE).name)).to_pandas()  # beside it
        per = per[["key", "transform", "correct"]].copy()
        for col in ("model", "dataset", "protocol", "seed"):
            per[col] = run[col]
        frames.append(per)
    cols = ["model", "dataset", "protocol", "seed", "transform", "key", "correct"]
    if not frames:
        return pd.DataFrame({c: [] for c in cols})
    return pd.concat(frames, ignore_index=True)[cols]
