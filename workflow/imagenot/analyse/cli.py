"""`imagenot` subcommands of the analyse stage: the rankings toolbox and the run's accuracy table."""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rankings`` and ``accuracy-table``."""
    p = subparsers.add_parser(
        "rankings",
        help="rank agreement statistics of a results table (model, dataset, accuracy[, n, seed])",
        description=(
            "Per dataset: ranks (1 = best, ties averaged), Kendall tau-b, Spearman rho, Pearson r, "
            "delta rank and OLS fit against the reference dataset; rank agreement up to error "
            "bars; bootstrap intervals; across datasets the size-weighted and geometric means; "
            "relative progress against a baseline; Spearman rho of errors between datasets. "
            "Tables with protocol/transform columns (results/analyse/accuracy.csv) are reduced "
            "with --variant."
        ),
    )
    p.add_argument("table", help="CSV or parquet results table")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--out", help="also write the JSON report to this file (atomically)")
    p.add_argument("--reference", help="dataset to compare against (default: the first one)")
    p.add_argument("--baseline", help="model for relative progress (accuracy / baseline's)")
    p.add_argument("--axis", choices=["linear", "probit", "logit"], default="linear")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--bootstrap-reps", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument(
        "--per-image",
        help="per-image results (model, dataset, key, correct): bootstrap over test images",
    )
    p.add_argument("--variant", choices=["standard", "robust"], default="standard")
    p.add_argument("--standard-transform", default="Identity")
    p.set_defaults(func=_rankings)

    p = subparsers.add_parser(
        "accuracy-table",
        help="collect evaluation results and published ImageNet accuracies into accuracy.csv",
    )
    p.add_argument("robustness", nargs="*", help="robustness.parquet files of the evaluation")
    p.add_argument("--published", required=True, help="torchvision_imagenet_accuracy.csv")
    p.add_argument("--out", required=True, help="accuracy.csv to write")
    p.add_argument(
        "--per-image-out", help="also collect the per_image.parquet beside each input here"
    )
    p.add_argument("--standard-transform", default="Identity")
    p.add_argument("--confidence", type=float, default=0.95)
    p.set_defaults(func=_accuracy_table)


def _rankings(args: argparse.Namespace) -> int:
    from imagenot.analyse.rankings import rankings_report
    from imagenot.analyse.table import TableError, read_table, select_variant, validate_table
    from imagenot.io import write_json

    try:
        df = validate_table(read_table(args.table))
        df = select_variant(df, args.variant, args.standard_transform)
        per_image = read_table(args.per_image) if args.per_image else None
        report = rankings_report(
            df,
            args.reference,
            baseline=args.baseline,
            axis=args.axis,
            confidence=args.confidence,
            reps=args.bootstrap_reps,
            seed=args.seed,
            per_image=per_image,
            variant=args.variant,
            standard_transform=args.standard_transform,
        )
    except TableError as exc:
        print(f"imagenot rankings: {args.table}: {exc}", file=sys.stderr)
        return 2
    if args.out:
        write_json(report, args.out)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(summary_text(report))
    return 0


def summary_text(report: dict) -> str:
    """A short human-readable digest of a rankings report."""
    lines = [f"reference: {report['reference']} ({report['reference_chosen']})"]
    for name, d in report["datasets"].items():
        head = f"{name}: {len(d['models'])} models"
        if "kendall_tau" in d:
            head += (
                f", Kendall tau-b {d['kendall_tau']:.3f}, Spearman rho {d['spearman_rho']:.3f}"
                f", OLS slope {d['ols']['slope']:.3f} (adj R2 {d['ols']['adj_r2']:.3f})"
            )
        lines.append(head)
        order = sorted(d["ranks"], key=d["ranks"].get)
        lines += [f"  {d['ranks'][m]:>5g}  {m}  {d['accuracy'][m]:.2f}" for m in order]
    for key, why in report["not_computed"].items():
        lines.append(f"not computed: {key}: {why}")
    return "\n".join(lines)


def _accuracy_table(args: argparse.Namespace) -> None:
    from imagenot.analyse.accuracy import (
        accuracy_table,
        read_per_image,
        read_published,
        read_robustness,
    )
    from imagenot.io import atomic_path, write_parquet

    table = accuracy_table(
        read_robustness(args.robustness),
        read_published(args.published),
        args.standard_transform,
        args.confidence,
    )
    with atomic_path(args.out, ".csv") as tmp:
        table.to_csv(tmp, index=False)
    print(f"{args.out}: {len(table)} rows from {len(args.robustness)} evaluation file(s)")
    if args.per_image_out:
        import pyarrow as pa

        per = read_per_image(args.robustness)
        write_parquet(pa.Table.from_pandas(per, preserve_index=False), args.per_image_out)
        print(f"{args.per_image_out}: {len(per)} per-image rows")
