"""Checks of what an evaluation measured, before its numbers are written: the model's outputs
are finite (:func:`check_finite_outputs`), and a published weight's measured top-1 is compared
with the one its publisher states (:func:`check_published`); and the table it writes, declared
row by row as a record is (:data:`EVALUATION_ROW`), with its one reader (:func:`read_evaluation`),
light enough for the run summary (no torch)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from imagenot.core.io import read_parquet
from imagenot.evaluate.paths import RUN_DIR
from imagenot.train.facts import PUBLISHED_TOLERANCE
from imagenot.train.records import (
    IDENTITY,
    PERCENT,
    PERCENT_OR_NULL,
    POSITIVE,
    Kind,
    RecordError,
    check_identity,
    check_numbers,
)

log = logging.getLogger(__name__)


ROBUSTNESS_SCHEMA = pa.schema(
    dict.fromkeys(("model", "dataset", "protocol"), pa.string())
    | {"seed": pa.int64(), "transform": pa.string()}
    | dict.fromkeys(("top1", "top5"), pa.float64())
    | {"n": pa.int64()}
    | dict.fromkeys(("ci_low", "ci_high"), pa.float64())
    # the run's own record (result.json): the published weights it evaluated and their
    # published top-1 (null for a trained run): the accuracy table's x-axis and the
    # published check read these, never the model's name; then the digest its producer sealed
    # the run's record with (imagenot.train.records): each row names the record it was made
    # from (null for an older run's record without one)
    | {"weights": pa.string(), "published_top1": pa.float64(), "record_sha256": pa.string()}
)
#: An evaluation table's columns every reader needs (:func:`imagenot.evaluate.robustness.summarise`
#: writes them), then a run's own record of the published weights it evaluated and the digest
#: its producer sealed the record with (optional: a table without them is read with them empty,
#: the config's weights standing in)
ROBUSTNESS_COLUMNS = tuple(ROBUSTNESS_SCHEMA.names[:10])
RECORD_COLUMNS = tuple(ROBUSTNESS_SCHEMA.names[10:])
# An evaluation table's row, declared as a record is (imagenot.train.records.Kind): what every
# row holds, the range of each number (published_top1 null for a trained run), the accuracies
# that its n test images must give (no 55 % of 3) and the run its folder names.
EVALUATION_ROW = Kind(
    "row of an evaluation",
    ROBUSTNESS_COLUMNS,
    {"top1": PERCENT, "top5": PERCENT, "ci_low": PERCENT, "ci_high": PERCENT, "n": POSITIVE,
     "published_top1": PERCENT_OR_NULL},
    (f"{RUN_DIR}/{{name}}",),
    IDENTITY,
    shares=(("top1", "n", "test images"), ("top5", "n", "test images")),
)  # fmt: skip
TOLERANCE = 1e-6  # of a top-1 beyond its interval or its top-5 (both rounded by the same float)


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
    rows = [r for r in table.to_pylist() if r["transform"] == "Identity"]
    if published is None or not rows:
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
    the file, row and column of a table without rows, or with a row out of its declaration
    (:data:`EVALUATION_ROW`: its columns, their ranges and its run, checked as a record's are,
    :func:`imagenot.train.records.check_numbers` and
    :func:`imagenot.train.records.check_identity`) or whose top-1 is outside its interval or
    above its top-5. The table is not sealed, so its numbers are checked on every read: a table
    copied into another run's folder, or edited, never becomes that run's rows."""
    table = read_parquet(path)
    if table.num_rows == 0:
        raise RecordError(f"{path}: no rows (an evaluation has one row per transformation)")
    for i, row in enumerate(table.to_pylist()):
        where = f"{path}: row {i}"
        check_numbers(row, where, EVALUATION_ROW)
        check_identity(row, where, EVALUATION_ROW, (path,))
        low, top1, high = row["ci_low"], row["top1"], min(row["ci_high"], row["top5"])
        if not low - TOLERANCE <= top1 <= high + TOLERANCE:
            raise RecordError(
                f"{where}: top1 {top1!r} is outside its interval [{low!r}, {row['ci_high']!r}] "
                f"or above top5 {row['top5']!r}"
            )
    return table.to_pandas()
