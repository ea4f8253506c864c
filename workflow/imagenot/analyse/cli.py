"""`imagenot` subcommands of the analyse stage: the interval of one result and the run's
accuracy table; and what the rankings toolbox command (:mod:`imagenot.figures.rankings_cli`)
reads from here: its flags' schema defaults, its settings, its text summary."""

from __future__ import annotations

import argparse
import json
import sys
from functools import cache
from typing import Any

from imagenot.analyse.settings import AccuracySettings

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
    """What the flags of ``ci`` and ``rankings`` read from the analyse config schema, the one
    place a default value lives: the settings typed by hand (``settings``:
    :meth:`RankingsSettings.hand_typed`), the choices of the enumerated keys, the PNG dpi."""
    from imagenot.analyse.settings import RankingsSettings
    from imagenot.config import schema_default, schema_node

    return {
        "settings": RankingsSettings.hand_typed(),
        "axes": schema_node("analyse.axis")["enum"],
        "overs": schema_node("analyse.bootstrap.over")["enum"],
        "intervals": schema_node("analyse.bootstrap.interval")["enum"],
        "dpi": schema_default("analyse.figure_options.dpi"),
    }


def confidence_level(text: str) -> float:
    """argparse type: a confidence level strictly between 0 and 1."""
    from imagenot.analyse.table import TableError, check_confidence

    try:
        return check_confidence(float(text))
    except (TableError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ci`` and ``accuracy-table`` (``rankings``, which also draws its report, is
    registered by :mod:`imagenot.figures.rankings_cli`)."""
    d = schema_defaults()
    p = subparsers.add_parser(
        "ci",
        help="Clopper-Pearson and Wilson intervals of one accuracy on n test images",
    )
    p.add_argument("--accuracy", type=float, required=True, help="top-1 accuracy in percent")
    p.add_argument("--n", type=int, required=True, help="test-set size")
    p.add_argument("--confidence", type=confidence_level, default=d["settings"].confidence)
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
        "--settings", required=True, help="JSON of imagenot.analyse.settings.AccuracySettings"
    )
    p.set_defaults(func=_accuracy_table)


def parse_floors(items: list[str] | None) -> dict[str, float]:
    """``['0.1', 'imagenet-a=1']`` -> {'*': 0.1, 'imagenet-a': 1.0} (option ``--floor``)."""
    from imagenot.analyse.table import TableError

    out: dict[str, float] = {}
    for item in items or []:
        name, _, value = item.rpartition("=")
        if (name or "*") in out:
            raise TableError(
                f"--floor {item!r}: {name or 'the floor of all datasets'} is given twice"
            )
        try:
            out[name or "*"] = float(value)
        except ValueError:
            raise TableError(f"--floor {item!r}: expected X or DATASET=X with a number X") from None
    return out


SUMMARY_TOP = 3
"""Models shown per dataset in the compact summary (best, and largest rank changes)."""


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "n/a" if v is None else format(v, spec)


def summary_text(report: dict, models: str | None) -> str:
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

    table = accuracy_table(
        read_robustness(args.robustness),
        read_published(args.published),
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
