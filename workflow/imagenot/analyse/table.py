"""Results tables for the rankings toolbox: reading, validation, and selection of one variant.

A results table has one row per (model, dataset[, seed]) with ``accuracy`` in percent and
optional ``n`` (test-set size), ``seed``, ``ci_low``/``ci_high``. Papers print *wide* tables
(one column per dataset); :func:`read_table` turns those into the long layout. The workflow's
``results/analyse/accuracy.csv`` also has ``protocol`` and ``transform``; :func:`select_variant`
turns it into such a table (one dataset label per dataset and protocol).

Every refusal is a :class:`TableError` whose one-line message names the file, row or key: a
researcher pointing the toolbox at their own table sees what to fix, not a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from imagenot.analyse import PUBLISHED_PROTOCOL
from imagenot.io import read_parquet

REQUIRED = ("model", "dataset", "accuracy")
FORMATS = ("long", "wide")
WIDE_EXTRA = ("seed",)
"""Columns of a wide table that are not datasets (besides the model column)."""


class TableError(ValueError):
    """A results table that cannot be used; the message names the row or column."""


def check_confidence(confidence: float) -> float:
    """A confidence level strictly between 0 and 1 (``95`` is refused, not read as 9500%)."""
    c = float(confidence)
    if not 0 < c < 1:
        hint = f"; did you mean {c / 100:g}?" if 1 < c < 100 else ""
        raise TableError(f"confidence must lie strictly between 0 and 1, got {confidence}{hint}")
    return c


def parse_sizes(items: list[str] | None) -> dict[str, float]:
    """``['imagenet-v2=10000', ...]`` (option ``--n``) -> {dataset: n}."""
    sizes: dict[str, float] = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        try:
            n = float(value)
        except ValueError:
            n = float("nan")
        if not sep or not name or not np.isfinite(n) or n <= 0 or not n.is_integer():
            raise TableError(
                f"--n {item!r}: expected DATASET=N with a positive whole test-set size N"
            )
        if name in sizes:
            raise TableError(f"--n {item!r}: dataset {name!r} is given twice")
        sizes[name] = n
    return sizes


def read_table(
    path: str | os.PathLike, fmt: str = "long", sizes: Mapping[str, float] | None = None
) -> pd.DataFrame:
    """Read a CSV or parquet results table, long or wide (no validation beyond the layout).

    Wide: a ``model`` column (else the first column), optionally ``seed``, and one column per
    dataset in the table's order; empty cells are models missing from that dataset. ``sizes``
    gives the test-set size per dataset (``--n``) for either layout; in a long table it fills
    the ``n`` column where the table has none.
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise TableError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not path.is_file():
        raise TableError(f"{path}: no such file")
    try:
        if path.suffix == ".parquet":
            df = read_parquet(path).to_pandas()
        else:
            df = pd.read_csv(path, skipinitialspace=True)
    except pd.errors.EmptyDataError:
        raise TableError(f"{path}: the file is empty") from None
    except Exception as exc:  # any reader error becomes one line naming the file
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TableError(f"{path}: cannot be read as a table: {msg}") from None
    df.columns = [str(c).strip() for c in df.columns]
    header = _header(path) if path.suffix != ".parquet" else list(df.columns)
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:  # pandas would rename the second to "name.1" and read it as another dataset
        raise TableError(f"{path}: column(s) {', '.join(map(repr, twice))} given twice")
    if len(df) == 0:
        raise TableError(f"{path}: header only, no data rows (columns: {', '.join(df.columns)})")
    if fmt == "wide":
        df = _from_wide(df, path)
    if sizes:
        unknown = sorted(set(sizes) - set(df["dataset"].astype(str))) if "dataset" in df else []
        if unknown:
            raise TableError(f"--n names dataset(s) not in {path}: {', '.join(unknown)}")
        given = df["dataset"].astype(str).map(sizes)
        df["n"] = given if "n" not in df.columns else df["n"].where(df["n"].notna(), given)
    return df


def _header(path: Path) -> list[str]:
    """The CSV file's column names as written (stripped), before pandas renames repeats."""
    import csv

    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        return [c.strip() for c in next(csv.reader(f), [])]


def _from_wide(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    model = "model" if "model" in df.columns else df.columns[0]
    ids = [model] + [c for c in WIDE_EXTRA if c in df.columns and c != model]
    datasets = [c for c in df.columns if c not in ids]
    if not datasets:
        raise TableError(f"{path}: a wide table needs one column per dataset besides {model!r}")
    long = df.melt(id_vars=ids, value_vars=datasets, var_name="dataset", value_name="accuracy")
    long = long.rename(columns={model: "model"})
    long["dataset"] = pd.Categorical(long["dataset"], categories=datasets, ordered=True)
    long = long.dropna(subset=["accuracy"]).sort_values("dataset", kind="stable")
    long["dataset"] = long["dataset"].astype(str)
    return long.reset_index(drop=True)


def _row_name(df: pd.DataFrame, i: int) -> str:
    row = df.iloc[i]
    keys = [k for k in ("model", "dataset", "protocol", "seed", "transform") if k in df.columns]
    what = ", ".join(f"{k}={row[k]!r}" for k in keys)
    # Data row i of a CSV file is on line i + 2 (line 1 is the header).
    return f"row {i} (line {i + 2}: {what})"


FRACTION_HINT = (
    "every accuracy is at most 1: accuracies are percentages (75.1, not 0.751); "
    "pass --fractions if the table holds fractions"
)


def validate_table(df: pd.DataFrame, fractions: bool = False) -> pd.DataFrame:
    """Check columns, keys and ranges; return a clean copy with typed columns (percent).

    Refuses a missing column, a duplicate (model, dataset, seed) row (protocol and transform
    join the key when present), an accuracy outside 0-100, and a table whose accuracies are all
    at most 1 (fractions read as percentages would corrupt every interval) unless ``fractions``
    says so; then accuracies and ``ci_low``/``ci_high`` are multiplied by 100.
    """
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TableError(
            f"results table lacks column(s) {', '.join(missing)}; "
            f"columns present: {', '.join(map(str, df.columns))}"
        )
    if len(df) == 0:
        raise TableError("results table has no rows")
    df = df.reset_index(drop=True).copy()
    for col in ("model", "dataset"):
        bad = df.index[df[col].isna()]
        if len(bad):
            raise TableError(f"{_row_name(df, bad[0])}: empty {col}")
        df[col] = df[col].astype(str).str.strip()
    acc = pd.to_numeric(df["accuracy"], errors="coerce")
    top = 1.0 if fractions else 100.0
    bad = df.index[acc.isna() | (acc < 0) | (acc > top)]
    if len(bad):
        i = bad[0]
        what = "a fraction in 0-1 (--fractions)" if fractions else "a percentage in 0-100"
        raise TableError(f"{_row_name(df, i)}: accuracy {df['accuracy'].iloc[i]!r} is not {what}")
    if not fractions and (acc <= 1).all():
        raise TableError(FRACTION_HINT)
    scale = 100.0 if fractions else 1.0
    df["accuracy"] = acc.astype(float) * scale
    for col in ("ci_low", "ci_high"):
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="coerce") * scale
    if "n" in df.columns:
        n = pd.to_numeric(df["n"], errors="coerce")
        whole = np.isfinite(n) & (n > 0) & (n == np.floor(n))
        bad = df.index[(n.notna() | df["n"].notna()) & ~whole]
        if len(bad):  # a size is a count of test images: 100.5 or "abc" is a broken table
            raise TableError(
                f"{_row_name(df, bad[0])}: n must be a positive whole number of test images, "
                f"got {df['n'].iloc[bad[0]]!r}"
            )
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


def near_duplicate_models(models: list[str]) -> list[list[str]]:
    """Groups of distinct model names equal up to case, spaces, '-' and '_' (likely typos)."""
    groups: dict[str, list[str]] = {}
    for m in models:
        groups.setdefault(re.sub(r"[\s_\-]+", "", m.casefold()), []).append(m)
    return [g for g in groups.values() if len(g) > 1]


def mixed_sizes(df: pd.DataFrame) -> dict[str, list[float]]:
    """Datasets whose rows give different test-set sizes ``n`` (each then uses its own n)."""
    if "n" not in df.columns:
        return {}
    out = {}
    for d, g in df.groupby("dataset", sort=False):
        values = sorted(set(g["n"].dropna().astype(float)))
        if len(values) > 1:
            out[str(d)] = values
    return out


def dataset_label(dataset: str, protocol: str) -> str:
    """Label of a (dataset, protocol) pair in a rankings table: ``cifar10/ft-imagenet``."""
    if protocol in ("st", PUBLISHED_PROTOCOL):
        return dataset
    return f"{dataset}/{protocol}"


def is_standard(transform: pd.Series, standard_transform: str) -> pd.Series:
    return transform.astype(str).str.lower() == standard_transform.lower()


def select_variant(df: pd.DataFrame, variant: str, standard_transform: str) -> pd.DataFrame:
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
