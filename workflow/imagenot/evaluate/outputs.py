"""Checks of what an evaluation measured, before its numbers are written: the model's outputs
are finite (:func:`check_finite_outputs`), and a published weight's measured top-1 is compared
with the one its publisher states (:func:`check_published`); and the one reader of the table it
writes (:func:`read_evaluation`), light enough for the run summary (no torch)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from imagenot.train.facts import PUBLISHED_TOLERANCE

log = logging.getLogger(__name__)


ROBUSTNESS_SCHEMA = pa.schema(
    [
        ("model", pa.string()),
        ("dataset", pa.string()),
        ("protocol", pa.string()),
        ("seed", pa.int64()),
        ("transform", pa.string()),
        ("top1", pa.float64()),
        ("top5", pa.float64()),
        ("n", pa.int64()),
        ("ci_low", pa.float64()),
        ("ci_high", pa.float64()),
        # the run's own record (result.json): the published weights it evaluated and their
        # published top-1 (null for a trained run): the accuracy table's x-axis and the
        # published check read these, never the model's name
        ("weights", pa.string()),
        ("published_top1", pa.float64()),
        # the digest its producer sealed the run's record with (imagenot.train.records): each
        # row names the record it was made from (null for an older run's record without one)
        ("record_sha256", pa.string()),
    ]
)
#: An evaluation table's columns every reader needs (:func:`imagenot.evaluate.robustness.summarise`
#: writes them), then a run's own record of the published weights it evaluated and the digest
#: its producer sealed the record with (optional: a table without them is read with them empty,
#: the config's weights standing in)
ROBUSTNESS_COLUMNS = tuple(ROBUSTNESS_SCHEMA.names[:10])
RECORD_COLUMNS = tuple(ROBUSTNESS_SCHEMA.names[10:])


class NonFiniteOutputs(ValueError):
    """A model whose outputs (logits) hold NaN or infinity: its accuracy is refused, never
    reported at chance (argmax of NaN logits picks a class all the same)."""


def check_finite_outputs(counts: Sequence[int], names: Sequence[str], images: int) -> None:
    """NonFiniteOutputs naming the first transformation whose logits were not finite for some
    image (``counts[i]`` images under ``names[i]``, of ``images``). Why: weights that are all
    finite can still give them (a batch norm's running variance below 0 becomes NaN in its
    square root), and the evaluation would score the model at about chance."""
    if bad := [(name, n) for name, n in zip(names, counts, strict=True) if n]:
        more = f" (and under {len(bad) - 1} more transformation(s))" if len(bad) > 1 else ""
        raise NonFiniteOutputs(
            f"the model's outputs are not finite (NaN or infinity) for {bad[0][1]} of {images} "
            f"image(s) under {bad[0][0]}{more}; refused, not reported at chance (finite weights "
            "can give them: e.g. a batch norm's running variance below 0)"
        )


def check_published(table: pa.Table, info: Mapping[str, Any]) -> float | None:
    """For a run of published weights whose ``result.json`` records their published top-1:
    the measured top-1 (untransformed images) minus the published one, logged beside it, and
    logged as a warning past :data:`PUBLISHED_TOLERANCE` points (the report's
    ``published_check`` table shows the same). None for other runs."""
    published = info.get("published_top1")
    if published is None:
        return None
    rows = [r for r in table.to_pylist() if r["transform"] == "Identity"]
    if not rows:
        return None
    measured = rows[0]["top1"]
    deviation = measured - float(published)
    level = logging.WARNING if abs(deviation) > PUBLISHED_TOLERANCE else logging.INFO
    over = f", over {PUBLISHED_TOLERANCE}: check the protocol" if level == logging.WARNING else ""
    run = f"{info['weights']} on {info['dataset']}"
    found = f"measured top-1 {measured:.3f}% (n={rows[0]['n']})"
    said = f"published {float(published):.3f}% ({info['published_source']})"
    log.log(level, "%s: %s, %s: deviation %+.3f points%s", run, found, said, deviation, over)
    return deviation


def read_evaluation(path: str | os.PathLike):
    """An evaluation's ``robustness.parquet`` as a pandas frame, read by every reader of it (the
    accuracy table, the run summary's test accuracy) through this one check: RecordError naming
    the file, row and column of a table that lacks a column of :data:`ROBUSTNESS_COLUMNS`, is
    not what its path says (the run's dataset, protocol, model and seed) or whose numbers are out of their
    range: percentages finite in [0, 100] (``published_top1`` too where not null), ``n`` a
    positive integer, top-1 and top-5 shares that ``n`` test images can give
    (:func:`imagenot.core.counts.count_problem`: no 55 % of 3), top-1 within its interval and at most
    top-5. Read back like numbers read in: a table copied into another run's folder, or edited,
    never becomes that run's rows."""
    import numpy as np
    import pandas as pd

    from imagenot.core.counts import count_problem
    from imagenot.core.io import read_parquet
    from imagenot.evaluate.paths import RUN_DIR
    from imagenot.train.records import RecordError, run_identity

    df = read_parquet(path).to_pandas()
    if missing := [c for c in ROBUSTNESS_COLUMNS if c not in df.columns]:
        raise RecordError(f"{path}: lacks column(s) {', '.join(missing)}")

    def cell(col: str, row: int):
        value = df[col].iloc[row]
        return repr(value.item() if hasattr(value, "item") else value)

    if df.empty:
        raise RecordError(f"{path}: no rows (an evaluation has one row per transformation)")
    for key, want in (run_identity(path, (f"{RUN_DIR}/{{name}}",)) or {}).items():
        wrong = np.flatnonzero((df[key].astype(str) != str(want)).to_numpy())
        if len(wrong):
            raise RecordError(
                f"{path}: row {wrong[0]} has {key} {cell(key, wrong[0])}, but its path says "
                f"{want!r}: an evaluation is read only under its own run's path"
            )
    for col in ("top1", "top5", "ci_low", "ci_high", "n", "published_top1"):
        if col not in df.columns:  # published_top1 is optional
            continue
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(values) | (values < 0)
        if col == "published_top1":  # null for a trained run
            bad &= df[col].notna().to_numpy()
        bad |= (values > 100) if col != "n" else (values < 1) | (values != np.round(values))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            what = "a positive integer" if col == "n" else "a percentage in [0, 100]"
            raise RecordError(f"{path}: row {row} column {col} is {cell(col, row)}, not {what}")
    for col in ("top1", "top5"):  # a count of correct images out of n (as the toolbox checks)
        for row, (pct, n) in enumerate(zip(df[col].astype(float), df["n"], strict=True)):
            problem = count_problem(pct, int(n), pct, 1.0)
            if problem:
                raise RecordError(f"{path}: row {row} column {col} {problem}")
    tol = 1e-6
    off = (df["ci_low"] > df["top1"] + tol) | (df["top1"] > df["ci_high"] + tol)
    off |= df["top1"] > df["top5"] + tol
    if off.any():
        row = int(np.flatnonzero(off.to_numpy())[0])
        raise RecordError(
            f"{path}: row {row} has top1 {cell('top1', row)} outside its interval "
            f"[{cell('ci_low', row)}, {cell('ci_high', row)}] or above top5 {cell('top5', row)}"
        )
    return df
