"""Results tables for the rankings toolbox: reading, validation, and selection of one variant.

A results table has one row per (model, dataset[, seed]) with ``accuracy`` in percent and
optional ``n`` (test-set size), ``seed``, ``ci_low``/``ci_high``. The workflow's
``results/analyse/accuracy.csv`` also has ``protocol`` and ``transform``; :func:`select_variant`
turns it into such a table (one dataset label per dataset and protocol).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from imagenot.analyse import PUBLISHED_PROTOCOL

REQUIRED = ("model", "dataset", "accuracy")


class TableError(ValueError):
    """A results table that cannot be used; the message names the row or column."""


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """Read a CSV or parquet results table (no validation)."""
    path = Path(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path)


def _row_name(df: pd.DataFrame, i: int) -> str:
    row = df.iloc[i]
    keys = [k for k in ("model", "dataset", "protocol", "seed", "transform") if k in df.columns]
    what = ", ".join(f"{k}={row[k]!r}" for k in keys)
    # Data row i of a CSV file is on line i + 2 (line 1 is the header).
    return f"row {i} (line {i + 2}: {what})"


def validate_table(df: pd.DataFrame) -> pd.DataFrame:
    """Check columns, keys and ranges; return a clean copy with typed columns.

    Refuses a missing column, a duplicate (model, dataset, seed) row (protocol and transform
    join the key when present) and an accuracy outside 0-100, naming the row.
    """
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TableError(
            f"results table lacks column(s) {', '.join(missing)}; "
            f"columns present: {', '.join(map(str, df.columns))}"
        )
    df = df.reset_index(drop=True).copy()
    for col in ("model", "dataset"):
        bad = df.index[df[col].isna()]
        if len(bad):
            raise TableError(f"{_row_name(df, bad[0])}: empty {col}")
        df[col] = df[col].astype(str)
    acc = pd.to_numeric(df["accuracy"], errors="coerce")
    bad = df.index[acc.isna() | (acc < 0) | (acc > 100)]
    if len(bad):
        i = bad[0]
        raise TableError(
            f"{_row_name(df, i)}: accuracy {df['accuracy'].iloc[i]!r} is not a percentage in 0-100"
        )
    df["accuracy"] = acc.astype(float)
    if "n" in df.columns:
        n = pd.to_numeric(df["n"], errors="coerce")
        bad = df.index[n.notna() & (n <= 0)]
        if len(bad):
            raise TableError(f"{_row_name(df, bad[0])}: n must be positive, got {n.iloc[bad[0]]}")
        df["n"] = n
    if "seed" in df.columns:
        seed = pd.to_numeric(df["seed"], errors="coerce")
        bad = df.index[seed.isna()]
        if len(bad):
            raise TableError(f"{_row_name(df, bad[0])}: seed is not a number")
        df["seed"] = seed.astype(int)
    key = [c for c in ("model", "dataset", "protocol", "seed", "transform") if c in df.columns]
    dup = df.duplicated(subset=key, keep="first")
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        first = int(np.flatnonzero((df[key] == df.loc[i, key]).all(axis=1).to_numpy())[0])
        raise TableError(f"{_row_name(df, i)} duplicates row {first}: key ({', '.join(key)})")
    return df


def dataset_label(dataset: str, protocol: str) -> str:
    """Label of a (dataset, protocol) pair in a rankings table: ``cifar10/ft-imagenet``."""
    if protocol in ("st", PUBLISHED_PROTOCOL):
        return dataset
    return f"{dataset}/{protocol}"


def is_standard(transform: pd.Series, standard_transform: str) -> pd.Series:
    return transform.astype(str).str.lower() == standard_transform.lower()


def select_variant(
    df: pd.DataFrame, variant: str = "standard", standard_transform: str = "Identity"
) -> pd.DataFrame:
    """Reduce a table with ``protocol``/``transform`` columns to one row per model, label, seed.

    ``standard`` keeps the identity transformation; ``robust`` averages every transformation
    (the paper's "Robust" accuracy) and drops the per-transformation intervals. Tables without
    those columns are returned unchanged.
    """
    if variant not in ("standard", "robust"):
        raise ValueError(f"variant must be 'standard' or 'robust', not {variant!r}")
    df = df.copy()
    if "protocol" in df.columns:
        df["dataset"] = [
            dataset_label(d, p) for d, p in zip(df["dataset"], df["protocol"], strict=True)
        ]
        df = df.drop(columns="protocol")
    if "transform" not in df.columns:
        return df
    if variant == "standard":
        out = df[is_standard(df["transform"], standard_transform)]
        return out.drop(columns="transform").reset_index(drop=True)
    keys = ["model", "dataset"] + (["seed"] if "seed" in df.columns else [])
    agg = {"accuracy": "mean"}
    if "n" in df.columns:
        agg["n"] = "max"
    if "imagenet_top1" in df.columns:
        agg["imagenet_top1"] = "first"
    return df.groupby(keys, sort=False, as_index=False).agg(agg)
