"""``imagenot rankings``: the toolbox command, "do rankings transfer?" for any results table.

It runs the analysis (:func:`imagenot.analyse.rankings.rankings_report`) and, with ``--report``,
draws that report (:mod:`imagenot.figures.report`). Registered here, in the figures stage above
the analyse stage it uses, so that no import goes up the stages (analyse never imports figures);
the command line is the same whoever registers it.
"""

from __future__ import annotations

import argparse
import json
import sys

from imagenot.analyse.cli import (
    RANKINGS_DESCRIPTION,
    confidence_level,
    parse_floors,
    schema_defaults,
    summary_text,
)
from imagenot.analyse.settings import RankingsSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rankings``."""
    d = schema_defaults()
    hand = d["settings"]  # the schema's defaults
    p = subparsers.add_parser(
        "rankings",
        help="do rankings transfer? statistics, figures and tables of any results table",
        description=RANKINGS_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("table", help="CSV or parquet results table")
    g = p.add_argument_group("input")
    g.add_argument("--format", choices=["long", "wide"], default="long", help="table layout")
    g.add_argument(
        "--n",
        nargs="+",
        metavar="DATASET=N",
        help="test-set size per dataset (wide tables, or long ones without an n column)",
    )
    g.add_argument(
        "--fractions",
        action="store_true",
        help="accuracies are fractions in 0-1 (refused otherwise when all are at most 1)",
    )
    g.add_argument("--variant", choices=["standard", "robust"], default="standard")
    g.add_argument("--standard-transform", default=hand.standard_transform)
    g.add_argument(
        "--per-image",
        help="per-image results (model, dataset, key, correct): bootstrap over test images",
    )
    g = p.add_argument_group("analyses")
    g.add_argument("--reference", help="dataset to compare against (default: the first one)")
    g.add_argument("--baseline", help="model for relative progress (accuracy / baseline's)")
    g.add_argument("--axis", choices=d["axes"], default=hand.axis, help="OLS fitting scale")
    g.add_argument("--confidence", type=confidence_level, default=hand.confidence)
    g.add_argument(
        "--min-reference-accuracy",
        type=float,
        metavar="X",
        help="also fit OLS on the models with reference accuracy >= X (Fang et al.: 70)",
    )
    g.add_argument(
        "--aggregate",
        nargs="+",
        metavar="DATASET",
        help="datasets of the across-dataset means and their ranks (default: all)",
    )
    g.add_argument(
        "--floor",
        nargs="+",
        metavar="[DATASET=]X",
        help="raise accuracies below X to X before the geometric mean (all datasets, or one); "
        "without it a model with 0%% somewhere is left out of the geometric mean",
    )
    g.add_argument("--bootstrap-reps", type=int, default=hand.reps)
    g.add_argument("--bootstrap-over", choices=d["overs"], default=hand.over)
    g.add_argument(
        "--interval",
        choices=d["intervals"],
        default=hand.interval,
        help="bootstrap interval: bias-corrected, basic or percentile",
    )
    g.add_argument("--seed", type=int, default=hand.seed, help="bootstrap and permutation seed")
    g.add_argument(
        "--settings",
        metavar="JSON",
        help="the workflow's rule: --variant, --standard-transform, --reference, --baseline, "
        "--axis, --confidence and the --bootstrap-*/--interval/--seed flags as one JSON object "
        "(imagenot.analyse.settings.RankingsSettings, keys named as the config's), replacing "
        "those flags",
    )
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print the full report as JSON")
    g.add_argument("--out", help="also write the JSON report to this file (atomically)")
    g.add_argument(
        "--models",
        default=None,
        metavar="K|all",
        help="models listed per dataset in the text summary (default: a compact digest)",
    )
    g.add_argument("--report", metavar="DIR", help="write figures (PDF, PNG) and tables here")
    g.add_argument("--dpi", type=int, default=d["dpi"], help="PNG resolution of --report")
    p.set_defaults(func=_rankings)


def _rankings(args: argparse.Namespace) -> int:
    from imagenot.analyse.rankings import rankings_report
    from imagenot.analyse.table import (
        TableError,
        parse_sizes,
        read_table,
        select_variant,
        validate_table,
    )
    from imagenot.io import write_text

    settings = _settings(args)
    if isinstance(settings, str):
        print(f"imagenot rankings: {settings}", file=sys.stderr)
        return 2
    try:
        if args.models not in (None, "all") and not str(args.models).isdigit():
            raise TableError(f"--models must be a number or 'all', not {args.models!r}")
        raw = read_table(args.table, args.format, parse_sizes(args.n))
        df = validate_table(raw, fractions=args.fractions)
        df = select_variant(df, settings.variant, settings.standard_transform)
        per_image = read_table(args.per_image) if args.per_image else None
        report = rankings_report(
            df,
            settings,
            per_image=per_image,
            min_reference_accuracy=args.min_reference_accuracy,
            aggregate=args.aggregate,
            floors=parse_floors(args.floor),
        )
        if args.report:
            from imagenot.figures.report import write_report

            written = write_report(report, args.report, dpi=args.dpi)
    except (TableError, ValueError, OSError) as exc:
        msg = " ".join(str(exc).split())
        where = "" if msg.startswith(str(args.table)) else f"{args.table}: "
        print(f"imagenot rankings: {where}{msg}", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=1) + "\n"
    if args.out:
        write_text(text, args.out)
    if args.json:
        print(text, end="")
    else:
        print(summary_text(report, args.models))
    if args.report:
        print(f"report: {len(written)} files in {args.report}", file=sys.stderr)
    for warning in report["warnings"][:10]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _settings(args: argparse.Namespace) -> RankingsSettings | str:
    """The analysis settings: the rule's ``--settings`` JSON, else the flags (whose defaults are
    the schema's); a bad ``--settings`` gives the one-line reason instead."""
    if not args.settings:
        return RankingsSettings(
            variant=args.variant,
            reference=args.reference,
            baseline_model=args.baseline,
            axis=args.axis,
            confidence=args.confidence,
            standard_transform=args.standard_transform,
            reps=args.bootstrap_reps,
            seed=args.seed,
            over=args.bootstrap_over,
            interval=args.interval,
        )
    from imagenot.settings import SettingsError, parse

    try:
        settings = parse(RankingsSettings, args.settings)
        confidence_level(str(settings.confidence))
    except (SettingsError, argparse.ArgumentTypeError) as exc:
        return str(exc)
    return settings
