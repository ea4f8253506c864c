"""The handlers of the analyse stage's commands (declared in :mod:`imagenot.core.steps`): the interval
of one result and the run's accuracy table. The rankings toolbox command, which also draws its
report, is the figures stage's (:mod:`imagenot.figures.rankings_cli`): one command in one module,
above the analysis it runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from imagenot.analyse.files import AccuracyFiles
    from imagenot.analyse.settings import AccuracySettings


def confidence_level(text: str) -> float:
    """argparse type: a confidence level strictly between 0 and 1."""
    from imagenot.analyse.table import TableError, check_confidence

    try:
        return check_confidence(float(text))
    except (TableError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def ci(accuracy: float, n: int, confidence: float, json: bool) -> int:
    """Clopper-Pearson and Wilson intervals of one accuracy on n test images."""
    import json as json_text

    import numpy as np

    from imagenot.analyse import stats
    from imagenot.analyse.checks import PRINTED_SLACK
    from imagenot.analyse.table import MAX_COUNT, check_confidence
    from imagenot.core.counts import count_problem

    check_confidence(confidence)
    problem = "accuracy must be a percentage in 0-100 and n a whole number from 1 to 2^53"
    problem += f", got {accuracy} and {n}"
    if 0 <= accuracy <= 100 and 0 < n <= MAX_COUNT:
        problem = count_problem(accuracy, n, accuracy, 1.0, slack=PRINTED_SLACK)
        problem = problem and f"--accuracy {problem}"
    if problem:
        print(f"imagenot ci: {problem}", file=sys.stderr)
        return 2
    k = round(accuracy / 100 * n)
    out = {"accuracy": accuracy, "n": n, "correct": k, "confidence": confidence}
    for key, method in (("clopper_pearson", "beta"), ("wilson", "wilson")):
        lo, hi = stats.binomial_interval(np.array([accuracy]), np.array([n]), confidence, method)
        out[key] = [float(lo[0]), float(hi[0])]
    if json:
        print(json_text.dumps(out, indent=1))
        return 0
    print(f"{accuracy:g}% of {n} ({k} correct), {confidence * 100:g}% intervals:")
    for key, name in (("clopper_pearson", "Clopper-Pearson:"), ("wilson", "Wilson:")):
        print(f"  {name:<16} {out[key][0]:.3f} - {out[key][1]:.3f}")
    return 0


def write_accuracy_table(
    files: AccuracyFiles, settings: AccuracySettings, published: str | None
) -> None:
    """Collect evaluation results and published ImageNet accuracies into accuracy.csv."""
    from imagenot.analyse.accuracy import (
        accuracy_table,
        read_per_image,
        read_published,
        read_robustness,
    )
    from imagenot.core.escape import csv_frame
    from imagenot.core.io import atomic_path, write_parquet
    from imagenot.train.facts import shipped_path

    runs = read_robustness(files.robustness)
    table = accuracy_table(runs, read_published(published or shipped_path()), settings)
    with atomic_path(files.accuracy, ".csv") as tmp:
        csv_frame(table).to_csv(tmp, index=False)
    print(f"{files.accuracy}: {len(table)} rows from {len(files.robustness)} evaluation file(s)")
    if files.per_image_table:
        import pyarrow as pa

        per = read_per_image(files.robustness, files.per_image)
        write_parquet(pa.Table.from_pandas(per, preserve_index=False), files.per_image_table)
        print(f"{files.per_image_table}: {len(per)} per-image rows")
