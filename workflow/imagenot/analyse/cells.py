"""Accuracy cells: one model on one dataset, the unit every rankings statistic starts from.

:func:`build_cells` groups a validated results table into :class:`Cells` (accuracy per seed and
the interval drawn as its error bar); :func:`per_image_matrices` lines up per-image results for
the bootstrap over test images, and :func:`check_per_image_means` checks that they are the
table's results. Used by the rankings report (:mod:`imagenot.analyse.rankings`)
and by the workflow's figures (:mod:`imagenot.figures.data`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from imagenot.analyse import stats
from imagenot.analyse.checks import PRINTED_SLACK
from imagenot.analyse.table import (
    TableError,
    is_standard,
    missing_columns,
    with_labels,
)
from imagenot.core.counts import cell as cell_text
from imagenot.core.counts import decimals

CELL_INTERVAL_NAMES = {
    "seed_se": "mean ± 1 s.e. over seeds",
    "clopper_pearson": "Clopper-Pearson",
    "given": "evaluation interval",
    "none": "no interval",
}
"""The interval a cell's error bar shows (its ``interval`` column), by kind: the seeds' spread
where a cell has several, else the interval the evaluation gave, else Clopper-Pearson from its
``n``, else none."""


@dataclass
class Cell:
    """One model on one dataset: accuracy per seed, the interval drawn as its error bar and
    ``se``, the standard error of the mean over seeds (NaN for one seed)."""

    seeds: np.ndarray
    n: float
    lo: float
    hi: float
    interval: str
    se: float
    mean: float = float("nan")

    def __post_init__(self) -> None:
        self.mean = float(self.seeds.mean())


@dataclass
class Cells:
    """Accuracy cells keyed by (model, dataset), with models and datasets in table order."""

    cells: dict[tuple[str, str], Cell]
    models: list[str]
    datasets: list[str]
    notes: list[str] = field(default_factory=list)

    def models_of(self, dataset: str) -> list[str]:
        return [m for m in self.models if (m, dataset) in self.cells]

    def accuracy(self, models: list[str], dataset: str) -> np.ndarray:
        return np.array([self.cells[m, dataset].mean for m in models])

    def bounds(self, models: list[str], dataset: str) -> tuple[np.ndarray, ...]:
        return tuple(
            np.array([getattr(self.cells[m, dataset], k) for m in models]) for k in ("lo", "hi")
        )


def build_cells(df: pd.DataFrame, confidence: float) -> Cells:
    """Group a validated table into cells; choose each cell's interval.

    Several seeds: mean +- one standard error over seeds. One seed: the table's ``ci_low`` /
    ``ci_high`` when given, else Clopper-Pearson from the model's own ``n``, else no interval
    (a point). Grouping and the Clopper-Pearson intervals are vectorised (1,500 models x 6
    datasets in well under a second). ``confidence`` is checked where it comes in: the config's
    schema, or :func:`imagenot.analyse.rankings.rankings_report`.
    """
    models = list(dict.fromkeys(df["model"]))
    datasets = list(dict.fromkeys(df["dataset"]))
    optional = [c for c in ("n", "ci_low", "ci_high") if c not in df.columns]
    work = df.reindex(columns=[*df.columns, *optional]).astype({"n": float})
    g = work.groupby(["model", "dataset"], sort=False)
    agg = g.agg(
        mean=("accuracy", "mean"),
        se=("accuracy", "sem"),
        k=("accuracy", "size"),
        n=("n", "max"),
        ci_low=("ci_low", "first"),
        ci_high=("ci_high", "first"),
    )
    values = work["accuracy"].to_numpy(dtype=float)
    seeds = g.indices if (agg["k"] > 1).any() else None
    mean, se, k, n, ci_low, ci_high = agg.to_numpy(float).T  # the columns in agg's order
    given = np.isfinite(ci_low) & np.isfinite(ci_high)
    has_n = np.isfinite(n)
    cp_lo, cp_hi = np.full(len(mean), np.nan), np.full(len(mean), np.nan)
    if has_n.any():
        cp_lo[has_n], cp_hi[has_n] = stats.clopper_pearson(mean[has_n], n[has_n], confidence)
    chosen = [k > 1, given, has_n]  # the first that holds gives the interval
    kind = np.select(chosen, ["seed_se", "given", "clopper_pearson"], default="none")
    lo = np.select(chosen, [mean - se, ci_low, cp_lo], default=mean)
    hi = np.select(chosen, [mean + se, ci_high, cp_hi], default=mean)
    cells: dict[tuple[str, str], Cell] = {}
    for i, key in enumerate(agg.index):
        acc = values[seeds[key]] if seeds is not None else np.array([mean[i]])
        cells[key] = Cell(acc, float(n[i]), float(lo[i]), float(hi[i]), str(kind[i]), float(se[i]))
    return Cells(cells, models, datasets)


def per_image_matrices(
    per_image: pd.DataFrame, variant: str, standard_transform: str
) -> dict[str, tuple[list[str], np.ndarray]]:
    """Per dataset label: (models, models x images correctness matrix aligned on ``key``).

    Columns ``model``, ``dataset``, ``key``, ``correct``; ``protocol`` and ``transform`` are
    handled as in :func:`imagenot.analyse.table.select_variant` (robust = mean over transforms).
    """
    missing_columns(per_image, ("model", "dataset", "key", "correct"), "per-image table")
    df = with_labels(per_image)
    key = [c for c in ("model", "dataset", "transform", "key") if c in df.columns]
    dup = df.duplicated(subset=key, keep="first")
    if dup.any():  # the pivot below would average them silently
        row = df.loc[dup].iloc[0]
        raise TableError(
            f"per-image table: row {int(np.flatnonzero(dup.to_numpy())[0])} repeats "
            f"({', '.join(f'{k}={row[k]!r}' for k in key)})"
        )
    if "transform" in df.columns and variant == "standard":
        df = df[is_standard(df["transform"], standard_transform)]
    correct = pd.to_numeric(df["correct"], errors="coerce").astype(float)
    bad = ~correct.isin([0.0, 1.0])
    if bad.any():  # 2, 0.5, "yes" or an empty cell would bias every resampled accuracy
        row = df.loc[bad].iloc[0]
        raise TableError(
            f"per-image table: correct must be 0 or 1 (or true/false), got {row['correct']!r} "
            f"for model={row['model']!r}, dataset={row['dataset']!r}, key={row['key']!r}"
        )
    df["correct"] = correct
    out = {}
    for dataset, g in df.groupby("dataset", sort=False):
        wide = g.pivot_table(index="model", columns="key", values="correct", aggfunc="mean")
        if wide.isna().any(axis=None):
            raise TableError(f"per-image results of {dataset!r}: models saw different images")
        out[str(dataset)] = (list(map(str, wide.index)), wide.to_numpy(dtype=float))
    return out


def check_per_image_means(cells: Cells, images: dict[str, tuple[list[str], np.ndarray]]) -> None:
    """Refuse per-image results (:func:`per_image_matrices`) that are not the table's: the
    share of images a model gets right on a dataset, in percent, must be its accuracy in the
    table up to the digits that accuracy is written with and the slack a printed accuracy gets
    (:data:`imagenot.analyse.checks.PRINTED_SLACK`, as the table's count check). The Kendall
    tau estimate comes from the table and its bootstrap replicates from the per-image results,
    so per-image results of other runs would give an interval about another estimate. Cells
    of several seeds (their per-image results are one matrix per model) and models or datasets
    only one of the two holds are not compared."""
    for dataset, (models, matrix) in images.items():
        for row, model in zip(matrix, models, strict=True):
            cell = cells.cells.get((model, dataset))
            if cell is None or len(cell.seeds) > 1:
                continue
            share = float(row.mean()) * 100.0
            written = round(cell.mean, 6)  # the table's digits (a fraction times 100: noise)
            tol = (0.5 + PRINTED_SLACK) * 10.0 ** -decimals(written) + 1e-9 * max(1.0, share)
            if abs(share - cell.mean) > tol:
                raise TableError(
                    f"per-image results of model {model!r} on dataset {dataset!r}: "
                    f"{row.sum():g} of {len(row)} images correct is {share:.4f}%, but "
                    f"the table's accuracy is {cell_text(written)}% (further than the "
                    f"{tol:.2g} its digits allow): the per-image results are of other runs"
                )
