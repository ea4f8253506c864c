"""`imagenot` subcommands of the analyse stage: the rankings toolbox, the interval of one
result, and the run's accuracy table."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

RANKINGS_DESCRIPTION = """\
Do rankings transfer? Statistics of any results table with columns model, dataset, accuracy
(percent) and optional n (test-set size), seed, ci_low, ci_high; or a wide table (--format wide,
one column per dataset, as papers print them).

Per dataset against the reference: ranks (1 = best, ties averaged), delta rank, Kendall tau-b,
Spearman rho and Pearson r (exact or permutation p-values for up to 30 models), the OLS fit of
accuracy on reference accuracy (optionally on the models above a cut), rank agreement up to
error bars, bootstrap intervals (over models, seeds or images). Across datasets: size-weighted
and geometric means with their ranks and rank changes, correlations averaged over datasets and
each dataset's correlation with the mean of the others, Spearman rho of errors.

Delta rank = rank on the reference - rank on the dataset: positive = the model climbs, as in
Recht et al. and Ozbulak et al.

Tables with protocol/transform columns (results/analyse/accuracy.csv) are reduced with --variant.
"""


@cache
def schema_defaults() -> dict[str, Any]:
    """Defaults of the analyse config schema: the one place a default value lives."""
    from imagenot.config import load_schema

    props = load_schema("analyse.schema.yaml")["properties"]
    boot = props["bootstrap"]["properties"]
    return {
        "confidence": props["confidence"]["default"],
        "axis": props["axis"]["default"],
        "axes": props["axis"]["enum"],
        "standard_transform": props["standard_transform"]["default"],
        "reps": boot["reps"]["default"],
        "seed": boot["seed"]["default"],
        "over": boot["over"]["default"],
        "overs": boot["over"]["enum"],
        "interval": boot["interval"]["default"],
        "intervals": boot["interval"]["enum"],
        "width_in": props["figure_options"]["properties"]["width_in"]["default"],
        "font_size": props["figure_options"]["properties"]["font_size"]["default"],
        "dpi": props["figure_options"]["properties"]["dpi"]["default"],
    }


@dataclass(frozen=True)
class RankingsSettings:
    """The flags of ``imagenot rankings`` that the workflow's rule sets from config
    (imagenot.figures.plan.rankings_settings), by their argparse dest names."""

    variant: str
    reference: str
    baseline: str
    axis: str
    confidence: float
    bootstrap_reps: int
    seed: int
    bootstrap_over: str
    interval: str
    standard_transform: str


@dataclass(frozen=True)
class AccuracySettings:
    """``imagenot accuracy-table`` settings (imagenot.figures.plan.accuracy_settings)."""

    standard_transform: str
    confidence: float


def confidence_level(text: str) -> float:
    """argparse type: a confidence level strictly between 0 and 1."""
    from imagenot.analyse.table import TableError, check_confidence

    try:
        return check_confidence(float(text))
    except (TableError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``rankings``, ``ci`` and ``accuracy-table``."""
    d = schema_defaults()
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
    g.add_argument("--standard-transform", default=d["standard_transform"])
    g.add_argument(
        "--per-image",
        help="per-image results (model, dataset, key, correct): bootstrap over test images",
    )
    g = p.add_argument_group("analyses")
    g.add_argument("--reference", help="dataset to compare against (default: the first one)")
    g.add_argument("--baseline", help="model for relative progress (accuracy / baseline's)")
    g.add_argument("--axis", choices=d["axes"], default=d["axis"], help="OLS fitting scale")
    g.add_argument("--confidence", type=confidence_level, default=d["confidence"])
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
    g.add_argument("--bootstrap-reps", type=int, default=d["reps"])
    g.add_argument("--bootstrap-over", choices=d["overs"], default=d["over"])
    g.add_argument(
        "--interval",
        choices=d["intervals"],
        default=d["interval"],
        help="bootstrap interval: bias-corrected, basic or percentile",
    )
    g.add_argument("--seed", type=int, default=d["seed"], help="bootstrap and permutation seed")
    g.add_argument(
        "--settings",
        metavar="JSON",
        help="the workflow's rule: these analyses options as one JSON object (imagenot.figures."
        "plan.rankings_settings); its keys replace the flags of the same name",
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

    p = subparsers.add_parser(
        "ci",
        help="Clopper-Pearson and Wilson intervals of one accuracy on n test images",
    )
    p.add_argument("--accuracy", type=float, required=True, help="top-1 accuracy in percent")
    p.add_argument("--n", type=int, required=True, help="test-set size")
    p.add_argument("--confidence", type=confidence_level, default=d["confidence"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_ci)

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
    p.add_argument(
        "--settings", required=True, help="JSON from imagenot.figures.plan.accuracy_settings"
    )
    p.set_defaults(func=_accuracy_table)


def parse_floors(items: list[str] | None) -> dict[str, float]:
    """``['0.1', 'imagenet-a=1']`` -> {'*': 0.1, 'imagenet-a': 1.0} (option ``--floor``)."""
    from imagenot.analyse.table import TableError

    out: dict[str, float] = {}
    for item in items or []:
        name, _, value = item.rpartition("=")
        try:
            out[name or "*"] = float(value)
        except ValueError:
            raise TableError(f"--floor {item!r}: expected X or DATASET=X with a number X") from None
    return out


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

    if args.settings:
        from imagenot.settings import SettingsError, parse

        try:
            settings = parse(RankingsSettings, args.settings)
            confidence_level(str(settings.confidence))
        except (SettingsError, argparse.ArgumentTypeError) as exc:
            print(f"imagenot rankings: {exc}", file=sys.stderr)
            return 2
        for field in dataclasses.fields(RankingsSettings):
            setattr(args, field.name, getattr(settings, field.name))
    try:
        if args.models not in (None, "all") and not str(args.models).isdigit():
            raise TableError(f"--models must be a number or 'all', not {args.models!r}")
        raw = read_table(args.table, args.format, parse_sizes(args.n))
        df = validate_table(raw, fractions=args.fractions)
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
            bootstrap_over=args.bootstrap_over,
            interval=args.interval,
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


SUMMARY_TOP = 3
"""Models shown per dataset in the compact summary (best, and largest rank changes)."""


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "n/a" if v is None else format(v, spec)


def summary_text(report: dict, models: str | None = None) -> str:
    """A digest of a rankings report: one block per dataset (``models``: 'all' or K per block).

    Compact by default (about six lines per dataset whatever the number of models); the JSON
    (``--json``) holds everything.
    """
    ref = report["reference"]
    top = None if models == "all" else (int(models) if models is not None else SUMMARY_TOP)
    n_models = len(report["models"])
    lines = [
        f"{n_models} models, {len(report['datasets'])} datasets; reference: {ref} "
        f"({report['reference_chosen']}); confidence {report['confidence']:g}",
        "delta rank = rank on the reference - rank here (+ = the model climbs)",
    ]
    for name, d in report["datasets"].items():
        order = sorted(d["ranks"], key=d["ranks"].get)
        head = f"{name}: {d['models']} models"
        if d["missing_models"]:
            head += f" ({len(d['missing_models'])} missing)"
        if name == ref:
            head += " [reference]"
        lines.append(head)
        if "kendall_tau" in d:
            boot = d.get("bootstrap") or {}
            ci = boot.get("kendall_tau_ci")
            tau = f"tau-b {_fmt(d['kendall_tau'])}"
            if ci:
                tau += (
                    f" [{_fmt(ci[0])}, {_fmt(ci[1])}] ({boot['interval']}, over {boot['method']})"
                )
            lines.append(
                f"  {tau} p={_fmt(d['kendall_p'], '.3g')}; rho {_fmt(d['spearman_rho'])} "
                f"p={_fmt(d['spearman_p'], '.3g')}; r {_fmt(d['pearson_r'])}; "
                f"OLS slope {_fmt(d['ols']['slope'])} adj R2 {_fmt(d['ols']['adj_r2'])}"
            )
            if "ols_subset" in d:
                s = d["ols_subset"]
                lines.append(
                    f"  models with reference >= {s['min_reference_accuracy']:g}: {s['n']}, "
                    f"slope {_fmt(s['slope'])} adj R2 {_fmt(s['adj_r2'])}"
                )
        shown = order if top is None else order[:top]
        delta = d.get("delta_rank", {})

        def item(m: str, d: dict = d, delta: dict = delta) -> str:
            s = f"{d['ranks'][m]:g}. {m} {d['accuracy'][m]:.2f}"
            if m in delta:
                s += f" ({delta[m]:+g})"
            return s

        if top is None:
            lines += [f"  {item(m)}" for m in shown]
        else:
            lines.append("  best: " + "; ".join(item(m) for m in shown))
            if delta and top:
                moves = sorted(delta, key=lambda m: -abs(delta[m]))[:top]
                moves = [m for m in moves if delta[m] != 0]
                if moves:
                    lines.append(
                        "  largest rank changes: " + "; ".join(f"{m} {delta[m]:+g}" for m in moves)
                    )
    across = report["across_datasets"]
    for key, label in (
        ("weighted_mean", "size-weighted mean"),
        ("geometric_mean", "geometric mean"),
    ):
        if key in across:
            r = across[f"{key}_rank"]
            best = sorted(r, key=r.get)[: top if top is not None else len(r)]
            lines.append(
                f"{label} over {', '.join(across['datasets'])}: "
                + "; ".join(f"{r[m]:g}. {m} {across[key][m]:.2f}" for m in best)
            )
    mc = report["mean_correlation_with_reference"]
    if mc["datasets"]:
        lines.append(
            f"mean over {len(mc['datasets'])} datasets: tau-b {_fmt(mc['kendall_tau'])}, "
            f"rho {_fmt(mc['spearman_rho'])}, r {_fmt(mc['pearson_r'])}"
        )
    nc = report["not_computed"]
    if nc:
        # one line per reason, with the statistics and datasets it concerns
        by_reason: dict[str, list[str]] = {}
        for key, why in nc.items():
            by_reason.setdefault(why, []).append(key)
        for why, keys in list(by_reason.items())[:3]:
            shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
            lines.append(f"not computed: {shown}: {why}")
        if len(by_reason) > 3:
            lines.append(f"not computed: {len(by_reason) - 3} more reasons (see --json)")
    return "\n".join(lines)


def _ci(args: argparse.Namespace) -> int:
    import numpy as np

    from imagenot.analyse import stats

    if not 0 <= args.accuracy <= 100 or args.n <= 0:
        print(
            f"imagenot ci: accuracy must be a percentage in 0-100 and n positive, got "
            f"{args.accuracy} and {args.n}",
            file=sys.stderr,
        )
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
    from imagenot.settings import SettingsError, parse

    try:
        settings = parse(AccuracySettings, args.settings)
    except SettingsError as exc:
        raise SystemExit(f"imagenot accuracy-table: {exc}") from None
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
        settings.standard_transform,
        settings.confidence,
    )
    with atomic_path(args.out, ".csv") as tmp:
        table.to_csv(tmp, index=False)
    print(f"{args.out}: {len(table)} rows from {len(args.robustness)} evaluation file(s)")
    if args.per_image_out:
        import pyarrow as pa

        per = read_per_image(args.robustness)
        write_parquet(pa.Table.from_pandas(per, preserve_index=False), args.per_image_out)
        print(f"{args.per_image_out}: {len(per)} per-image rows")
