"""`imagenot` subcommands of the analyse stage: the interval of one result and the run's
accuracy table. The rankings toolbox command, which also draws its report, is the figures
stage's (:mod:`imagenot.figures.rankings_cli`): one command in one module, above the analysis it
runs."""

from __future__ import annotations

import argparse
import json
import sys

from imagenot.analyse.settings import AccuracySettings


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

    p = subparsers.add_parser(
        "ci",
        help="Clopper-Pearson and Wilson intervals of one accuracy on n test images",
    )
    p.add_argument("--accuracy", type=float, required=True, help="top-1 accuracy in percent")
    p.add_argument("--n", type=int, required=True, help="test-set size")
    p.add_argument(
        "--confidence", type=confidence_level, default=schema_default("analyse.confidence")
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_ci)

    p = subparsers.add_parser(
        "accuracy-table",
        help="collect evaluation results and published ImageNet accuracies into accuracy.csv",
    )
    p.add_argument("robustness", nargs="*", help="robustness.parquet files of the evaluation")
    p.add_argument(
        "--published",
        default=None,
        help="the published accuracies (default: the table this package ships, "
        "imagenot/resources/published_weights.csv)",
    )
    p.add_argument("--out", required=True, help="accuracy.csv to write")
    p.add_argument(
        "--per-image-out", help="also collect the per_image.parquet beside each input here"
    )
    p.add_argument(
        "--settings", required=True, help="JSON of imagenot.analyse.settings.AccuracySettings"
    )
    p.set_defaults(func=_accuracy_table)


def _ci(args: argparse.Namespace) -> int:
    import numpy as np

    from imagenot.analyse import stats
    from imagenot.analyse.table import MAX_COUNT
    from imagenot.counts import count_problem

    if not 0 <= args.accuracy <= 100 or not 0 < args.n <= MAX_COUNT:
        print(
            f"imagenot ci: accuracy must be a percentage in 0-100 and n a whole number from 1 "
            f"to 2^53, got {args.accuracy} and {args.n}",
            file=sys.stderr,
        )
        return 2
    problem = count_problem(args.accuracy, args.n, args.accuracy, 1.0)
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

    table = accuracy_table(
        read_robustness(args.robustness),
        read_published(args.published or shipped_path()),
        settings,
    )
    with atomic_path(args.out, ".csv") as tmp:
        csv_frame(table).to_csv(tmp, index=False)
    print(f"{args.out}: {len(table)} rows from {len(args.robustness)} evaluation file(s)")
    if args.per_image_out:
        import pyarrow as pa

        per = read_per_image(args.robustness)
        write_parquet(pa.Table.from_pandas(per, preserve_index=False), args.per_image_out)
        print(f"{args.per_image_out}: {len(per)} per-image rows")
