"""`imagenot` subcommands of the analyse stage: the interval of one result and the run's
accuracy table. The rankings toolbox command, which also draws its report, is the figures
stage's (:mod:`imagenot.figures.rankings_cli`): one command in one module, above the analysis it
runs."""

from __future__ import annotations

import argparse
import json
import sys

from imagenot.analyse.files import AccuracyFiles
from imagenot.analyse.settings import AccuracySettings
from imagenot.cli import subcommand


def confidence_level(text: str) -> float:
    """argparse type: a confidence level strictly between 0 and 1."""
    from imagenot.analyse.table import TableError, check_confidence

    try:
        return check_confidence(float(text))
    except (TableError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ci`` and ``accuracy-table``."""
    from imagenot.config import schema_default

    p = subcommand(subparsers, "ci", _ci)
    p.add_argument("--accuracy", type=float, required=True, help="top-1 accuracy in percent")
    p.add_argument("--n", type=int, required=True, help="test-set size")
    p.add_argument(
        "--confidence", type=confidence_level, default=schema_default("analyse.confidence")
    )
    p.add_argument("--json", action="store_true")

    subcommand(
        subparsers,
        "accuracy-table",
        _accuracy_table,
        files=AccuracyFiles,
        settings=AccuracySettings,
    )


def _ci(args: argparse.Namespace) -> int:
    """Clopper-Pearson and Wilson intervals of one accuracy on n test images."""
    import numpy as np

    from imagenot.analyse import stats
    from imagenot.analyse.checks import PRINTED_SLACK
    from imagenot.analyse.table import MAX_COUNT
    from imagenot.counts import count_problem

    if not 0 <= args.accuracy <= 100 or not 0 < args.n <= MAX_COUNT:
        print(
            f"imagenot ci: accuracy must be a percentage in 0-100 and n a whole number from 1 "
            f"to 2^53, got {args.accuracy} and {args.n}",
            file=sys.stderr,
        )
        return 2
    problem = count_problem(args.accuracy, args.n, args.accuracy, 1.0, slack=PRINTED_SLACK)
    if problem:
        print(f"imagenot ci: --accuracy {problem}", file=sys.stderr)
        return 2
    a, n = np.array([args.accuracy]), np.array([args.n])
    cp = stats.clopper_pearson(a, n, args.confidence)
    wi = stats.wilson(a, n, args.confidence)
    k = round(args.accuracy / 100 * args.n)
    out = {
        "accuracy": args.accuracy,
        "n": args.n,
        "correct": k,
        "confidence": args.confidence,
        "clopper_pearson": [float(cp[0][0]), float(cp[1][0])],
        "wilson": [float(wi[0][0]), float(wi[1][0])],
    }
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        pct = f"{args.confidence * 100:g}%"
        print(f"{args.accuracy:g}% of {args.n} ({k} correct), {pct} intervals:")
        print(
            f"  Clopper-Pearson: {out['clopper_pearson'][0]:.3f} - {out['clopper_pearson'][1]:.3f}"
        )
        print(f"  Wilson:          {out['wilson'][0]:.3f} - {out['wilson'][1]:.3f}")
    return 0


def _accuracy_table(args: argparse.Namespace) -> None:
    """Collect evaluation results and published ImageNet accuracies into accuracy.csv."""
    from imagenot.settings import parse_or_exit

    settings = parse_or_exit(AccuracySettings, args.settings, "accuracy-table")
    from imagenot.analyse.accuracy import (
        accuracy_table,
        read_per_image,
        read_published,
        read_robustness,
    )
    from imagenot.escape import csv_frame
    from imagenot.io import atomic_path, write_parquet
    from imagenot.train.facts import shipped_path

    f = AccuracyFiles.from_args(args)
    table = accuracy_table(
        read_robustness(f.robustness),
        read_published(f.published or shipped_path()),
        settings,
    )
    with atomic_path(f.accuracy, ".csv") as tmp:
        csv_frame(table).to_csv(tmp, index=False)
    print(f"{f.accuracy}: {len(table)} rows from {len(f.robustness)} evaluation file(s)")
    if f.per_image_table:
        import pyarrow as pa

        per = read_per_image(f.robustness, f.per_image)
        write_parquet(pa.Table.from_pandas(per, preserve_index=False), f.per_image_table)
        print(f"{f.per_image_table}: {len(per)} per-image rows")
