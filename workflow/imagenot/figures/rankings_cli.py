"""``imagenot rankings``: the toolbox command, "do rankings transfer?" for any results table.

It runs the analysis (:func:`imagenot.analyse.rankings.rankings_report`), prints its digest
(:func:`summary_text`) and, with ``--report``, draws that report (:mod:`imagenot.figures.report`).
Its flags are declared with its step (:data:`imagenot.core.steps.STEPS`); its handler, its checks and
the summary live here, in the figures stage above the analyse stage it uses, so that no import
goes up the stages (analyse never imports figures).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from difflib import get_close_matches
from typing import Any

from imagenot.analyse import checks, table
from imagenot.analyse.rankings import rankings_report
from imagenot.analyse.report import RankingsReport, p_text
from imagenot.analyse.settings import RankingsSettings
from imagenot.analyse.table import TableError
from imagenot.core.io import write_text
from imagenot.core.settings import SettingsError, Style, parse
from imagenot.core.steps import STEPS
from imagenot.figures.files import RankingsFiles

# the options named otherwise than the RankingsSettings fields they give: field -> option
FLAG_OF = {"baseline_model": "baseline", "reps": "bootstrap_reps", "over": "bootstrap_over"}


def rankings(f: RankingsFiles, **flags: Any) -> int:
    """Do rankings transfer? statistics, figures and tables of any results table (its flags:
    :data:`imagenot.core.steps.STEPS`' ``rankings``)."""
    args = argparse.Namespace(**flags)
    args.highlight = list(dict.fromkeys(args.highlight or []))  # a model named twice: once
    settings = _settings(args)
    if isinstance(settings, str):
        print(f"imagenot rankings: {settings}", file=sys.stderr)
        return 2
    try:
        top = args.models
        if top not in (None, "all"):  # the compact digest, all models, or K >= 1 per dataset
            if not str(top).isdigit() or int(top) < 1:
                raise TableError(f"--models must be a whole number from 1 or 'all', not {top!r}")
            top = str(int(top))
        # the figure style of --report: the schema's defaults, --dpi, --top and --highlight
        # (checked with the other flags, _settings)
        style = dataclasses.replace(
            Style.schema_defaults(), dpi=args.dpi, top=args.top, highlight=args.highlight
        )
        scale = checks.parse_scale(args.scale)
        if args.fractions:
            if scale:
                raise TableError("--fractions and --scale: give one of them")
            scale = {"*": "fraction"}
        if args.settings and not scale:  # the workflow's rule: its accuracy.csv is in percent
            scale = {"*": "percent"}
        floors = checks.parse_floors(args.floor)
        cut = checks.check_accuracy_option("--min-reference-accuracy", args.min_reference_accuracy)
        raw = table.read_tables(
            list(f.table),
            args.format,
            table.parse_sizes(args.n),
            tuple(args.key or ()),
            accuracy_column=args.accuracy_column,
        )
        df = checks.validate_table(raw, scale_of=scale, key=args.key or ())
        df = table.select_variant(df, settings.variant, settings.standard_transform)
        if not len(df):
            raise TableError(
                f"no row has the transform {settings.standard_transform!r} "
                "(--standard-transform) of the standard variant"
            )
        per_image = table.read_table(f.per_image) if f.per_image else None
        report = rankings_report(
            df,
            settings,
            per_image=per_image,
            min_reference_accuracy=cut,
            aggregate=args.aggregate,
            floors=floors,
        )
        if unknown := [m for m in args.highlight if m not in set(report.models)]:
            close = get_close_matches(unknown[0], report.models, n=3)
            hint = f"; close: {', '.join(close)}" if close else ""
            raise TableError(
                f"--highlight names model(s) not in the table: {', '.join(unknown[:5])}{hint}"
            )
        if args.report:
            from imagenot.figures.report import write_report

            written = write_report(report, args.report, style=style)
    except (TableError, ValueError, OSError) as exc:
        msg = " ".join(str(exc).split())
        # the one table given (NAME=FILE: the file) before the message, unless the message
        # names a table itself; of several tables, the message names the one it concerns
        paths = [table.name_and_file(t)[1] for t in f.table]
        where = "" if len(paths) > 1 or any(msg.startswith(p) for p in paths) else f"{paths[0]}: "
        print(f"imagenot rankings: {where}{msg}", file=sys.stderr)
        return 2
    text = report.to_text()
    if f.out:
        write_text(text, f.out)
    if args.json:
        print(text, end="")
    else:
        print(summary_text(report, top))
    if args.report:
        print(f"report: {len(written)} files in {args.report}", file=sys.stderr)
    for warning in report.warnings[:10]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _settings(args: argparse.Namespace) -> RankingsSettings | str:
    """The analysis settings: the rule's ``--settings`` JSON, else the flags (whose defaults are
    the schema's); each field, and each flag that gives a config key (``--dpi``, ``--top``,
    ``--highlight``: the key its declaration in :data:`imagenot.core.steps.STEPS` takes its
    default from), checked against that key's schema node, the one statement of its domain
    (:func:`imagenot.analyse.checks.schema_problem`). A bad value gives the one-line reason
    instead."""
    if not args.settings:
        names = [f.name for f in dataclasses.fields(RankingsSettings)]
        settings = RankingsSettings(**{n: getattr(args, FLAG_OF.get(n, n)) for n in names})
    else:
        try:
            settings = parse(RankingsSettings, args.settings)
        except SettingsError as exc:
            return str(exc)
    field_of = {option: field for field, option in FLAG_OF.items()}
    for option in STEPS.entry("rankings").all_options():
        key, field = option.default, field_of.get(option.name, option.name)
        if not (isinstance(key, str) and "." in key):
            continue  # a knob of the command's own
        given = hasattr(settings, field)
        value = getattr(settings, field) if given else getattr(args, option.name)
        if problem := checks.schema_problem(key, value):
            where = f"--settings.{field}" if args.settings and given else option.spelled
            return f"{where} {value}: {problem} (config key {key})"
    return settings


SUMMARY_TOP = 3
"""Models shown per dataset in the compact summary (best, and largest rank changes)."""


def _fmt(v: Any, spec: str = ".3f") -> str:
    return "n/a" if v is None else format(v, spec)


def plural(k: int, word: str) -> str:
    """``1 dataset``, ``3 datasets``."""
    return f"{k} {word}" if k == 1 else f"{k} {word}s"


def summary_text(report: RankingsReport, models: str | None) -> str:
    """A digest of a rankings report: one block per dataset (``models``: 'all' or K per block).

    Compact by default (about six lines per dataset whatever the number of models); the JSON
    (``--json``) holds everything.
    """
    ref = report.reference
    top = None if models == "all" else (int(models) if models is not None else SUMMARY_TOP)
    n_models = len(report.models)
    lines = [
        f"{plural(n_models, 'model')}, {plural(len(report.datasets), 'dataset')}; reference: {ref} "
        f"({report.reference_chosen}); confidence {report.confidence:g}",
        "delta rank = rank on the reference - rank here (+ = the model climbs)",
    ]
    for name, d in report.datasets.items():
        order = sorted(d.ranks, key=d.ranks.get)
        missing = f" ({len(d.missing_models)} missing)" if d.missing_models else ""
        mark = " [reference]" if name == ref else ""
        lines.append(f"{name}: {plural(d.models, 'model')}{missing}{mark}")
        if d.correlations is not None:
            c, boot, ols = d.correlations, d.bootstrap, d.ols
            ci = boot.kendall_tau_ci if boot is not None else None
            tau = f"tau-b {_fmt(c.kendall_tau)}"
            if ci:
                tau += f" [{_fmt(ci[0])}, {_fmt(ci[1])}] ({boot.interval}, over {boot.method})"
            elif boot is not None:  # the replicates gave no valid interval: say why here
                why = (boot.refused or {}).get("kendall_tau_ci", "")
                tau += f" (no {boot.interval} interval over {boot.method}: {why})"
            fit = (
                f"OLS slope {_fmt(ols.slope)} adj R2 {_fmt(ols.adj_r2)}"
                if ols is not None
                else "no OLS fit (not computed, below)"
            )
            lines.append(
                f"  {tau} {p_text(c.kendall_p)}; rho {_fmt(c.spearman_rho)} "
                f"{p_text(c.spearman_p)}; r {_fmt(c.pearson_r)}; {fit}"
            )
            if d.ols_subset is not None:
                s = d.ols_subset
                lines.append(
                    f"  models with reference >= {s.min_reference_accuracy:g}: {s.n}, "
                    f"slope {_fmt(s.slope)} adj R2 {_fmt(s.adj_r2)}"
                )
        delta = d.delta_rank or {}
        item = {
            m: f"{d.ranks[m]:g}. {m} {d.accuracy[m]:.2f}"
            + (f" ({delta[m]:+g})" if m in delta else "")
            for m in (order if top is None else order[:top])
        }
        if top is None:
            lines += [f"  {text}" for text in item.values()]
        else:
            lines.append("  best: " + "; ".join(item.values()))
            if delta and top:
                moves = sorted(delta, key=lambda m: -abs(delta[m]))[:top]
                moves = [m for m in moves if delta[m] != 0]
                if moves:
                    lines.append(
                        "  largest rank changes: " + "; ".join(f"{m} {delta[m]:+g}" for m in moves)
                    )
    across = report.across_datasets  # None: fewer than two datasets to average over
    means = () if across is None else (
        (across.weighted_mean, across.weighted_mean_rank, "size-weighted mean"),
        (across.geometric_mean, across.geometric_mean_rank, "geometric mean"),
    )  # fmt: skip
    for mean, r, label in means:
        if mean is not None:
            best = sorted(r, key=r.get)[: top if top is not None else len(r)]
            lines.append(
                f"{label} over {', '.join(across.datasets)}: "
                + "; ".join(f"{r[m]:g}. {m} {mean[m]:.2f}" for m in best)
            )
    mc = report.mean_correlation_with_reference
    if mc.datasets:
        lines.append(
            f"mean over {plural(len(mc.datasets), 'dataset')}: tau-b {_fmt(mc.kendall_tau)}, "
            f"rho {_fmt(mc.spearman_rho)}, r {_fmt(mc.pearson_r)}"
        )
    # a refused bootstrap interval is said on its dataset's line (tau) or in the JSON (slope)
    nc = {k: why for k, why in report.not_computed.items() if ": bootstrap." not in k}
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
