"""Reading the run's accuracy table for figures and tables."""

from __future__ import annotations

import os

import pandas as pd

from imagenot.analyse.cells import Cells, build_cells
from imagenot.analyse.checks import validate_table
from imagenot.analyse.table import TableError, read_table, select_variant
from imagenot.figures.settings import Options

WORKFLOW_COLUMNS = ("protocol", "transform")


def load_accuracy(path: str | os.PathLike) -> pd.DataFrame:
    """accuracy.csv, validated; a table without the workflow's columns is refused with a
    pointer to ``imagenot rankings --report``, which draws the same figures for any table."""
    df = validate_table(read_table(path), scale_of={"*": "percent"})  # the workflow writes percent
    if missing := [c for c in WORKFLOW_COLUMNS if c not in df.columns]:
        raise TableError(
            f"{path}: lacks the workflow column(s) {', '.join(missing)} of accuracy.csv; "
            "for your own results table use: imagenot rankings TABLE --report DIR"
        )
    return df


def cells(acc: pd.DataFrame, variant: str, opts: Options) -> Cells:
    """Per (model, dataset label) accuracy cells of the standard or Robust variant."""
    return build_cells(select_variant(acc, variant, opts.standard_transform), opts.confidence)


def published(acc: pd.DataFrame) -> dict[str, float]:
    """Published ImageNet top-1 per model (from the ``imagenet_top1`` column)."""
    if "imagenet_top1" not in acc.columns:
        return {}
    pub = acc.dropna(subset=["imagenet_top1"]).drop_duplicates("model")
    return dict(zip(pub["model"], pub["imagenet_top1"].astype(float), strict=True))


def imagenet_x(acc: pd.DataFrame, opts: Options) -> dict[str, float]:
    """Per model, the x-axis ImageNet accuracy: published top-1, or the reference dataset's
    standard accuracy (``opts.imagenet_axis == 'reference'``)."""
    if opts.imagenet_axis == "published":
        return published(acc)
    c = cells(acc, "standard", opts)
    return {m: c.cells[m, opts.reference].mean for m in c.models_of(opts.reference)}


def ordered_labels(acc: pd.DataFrame, opts: Options, protocol: str | None) -> list[str]:
    """Dataset labels present for ``protocol`` ('st' -> trained datasets), in config order."""
    present = acc if protocol is None else acc[acc["protocol"] == protocol]
    names = list(dict.fromkeys(present["dataset"]))
    return [d for d in opts.datasets if d in names] + [d for d in names if d not in opts.datasets]


def transfer_labels(acc: pd.DataFrame, opts: Options) -> list[str]:
    """``downstream/ft-*`` and ``downstream/tl-*`` labels present in the table."""
    transfer = (acc["dataset"] == opts.downstream_dataset) & acc["protocol"].str.match(r"(ft|tl)-")
    down = acc[transfer]
    return [f"{opts.downstream_dataset}/{p}" for p in sorted(dict.fromkeys(down["protocol"]))]
