"""Tables of the run (CSV and Markdown) from accuracy.csv and the rankings reports."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from imagenot.analyse.report import P_FLOOR, RankingsReport
from imagenot.core.escape import csv_frame, markdown_text
from imagenot.core.io import atomic_path
from imagenot.figures import accuracy_vs_imagenet
from imagenot.figures.data import Options, cells

Reports = dict[str, RankingsReport]
"""The run's rankings reports by variant (``standard``, ``robust``), as a table builder gets
them (:func:`imagenot.analyse.report.read_report` of the rule's two inputs)."""
Builder = Callable[[pd.DataFrame, Reports, Options], pd.DataFrame]
"""A workflow table's builder: (accuracy, rankings reports, options) -> the table."""


def accuracy(acc: pd.DataFrame, reports: Reports, opts: Options) -> pd.DataFrame:
    """Standard and Robust top-1 per model and dataset label, with the error-bar interval."""
    std, rob = cells(acc, "standard", opts), cells(acc, "robust", opts)
    rows = []
    for (model, label), cell in std.cells.items():
        r = rob.cells.get((model, label))
        row = {"model": model, "dataset": label, "seeds": len(cell.seeds), "standard": cell.mean}
        row |= {"standard_low": cell.lo, "standard_high": cell.hi, "interval": cell.interval}
        rows.append(row | {"robust": r.mean if r else np.nan, "robust_se": r.se if r else np.nan})
    return pd.DataFrame(rows)


def order(labels: list[str], opts: Options) -> list[str]:
    """Dataset labels in config order (datasets, then protocol), unknown ones last."""
    rank = {d: i for i, d in enumerate(opts.datasets)}
    return sorted(labels, key=lambda x: (rank.get(x.split("/")[0], len(rank)), x))


def _wide(reports: Reports, key: str, opts: Options) -> pd.DataFrame:
    """One column per dataset label: field ``key`` of its entry (labels without it left out)."""
    rep = reports["standard"]
    cols = {d: getattr(e, key) for d, e in rep.datasets.items() if getattr(e, key) is not None}
    return _by_model({d: cols[d] for d in order(list(cols), opts)}, rep.models)


def _by_model(columns: dict[str, Any], models: list[str], sort_by: str = "") -> pd.DataFrame:
    """One row per model of ``models`` (in that order), one column per entry of ``columns``
    ({model: number}; a model without one: an empty cell), sorted by column ``sort_by`` where
    the table has it."""
    df = pd.DataFrame({c: pd.Series(v, dtype=float) for c, v in columns.items()}).reindex(models)
    df = df.sort_values(sort_by, kind="stable") if sort_by in df else df
    return df.rename_axis("model").reset_index()


def rankings(acc: pd.DataFrame, reports: Reports, opts: Options) -> pd.DataFrame:
    """Rank of every model on every dataset label (1 = best, ties averaged; standard)."""
    return _wide(reports, "ranks", opts)


def relative_progress(acc: pd.DataFrame, reports: Reports, opts: Options) -> pd.DataFrame:
    """Accuracy divided by the baseline model's accuracy, per dataset label (standard)."""
    return _wide(reports, "relative_progress", opts)


def published_check(acc: pd.DataFrame, reports: Reports, opts: Options) -> pd.DataFrame:
    """Published weights on their dataset (ImageNet's validation set): the top-1 measured here
    (untransformed test images, each weight's own resize, crop, interpolation and
    normalisation) beside the published top-1 of the weights that ran (the run's own record:
    ``weights``, ``published_top1``; never the model name's); ``flagged`` where they differ by
    more than ``max_deviation`` points (a wrong protocol shows here first; a subset of
    ImageNet's classes or images scores differently by design, see ``n``). The run summary
    lists a flagged row of the whole validation set as a problem
    (:mod:`imagenot.run.run_summary`)."""
    from imagenot.train.facts import PUBLISHED_TOLERANCE

    rows = acc[
        acc["dataset"].isin(opts.published_datasets)
        & (acc["protocol"] == "st")
        & (acc["transform"] == opts.standard_transform)
    ]
    # the run's own record where the table carries it, else the model's x-axis value
    own = rows["published_top1"] if "published_top1" in rows else rows["imagenet_top1"]
    published = own.fillna(rows["imagenet_top1"]).astype(float)
    weights = rows["weights"] if "weights" in rows else pd.Series(None, index=rows.index)
    deviation = rows["accuracy"] - published
    table = {"model": rows["model"], "dataset": rows["dataset"], "weights": weights, "n": rows["n"]}
    table |= {"measured_top1": rows["accuracy"], "published_top1": published}
    table |= {"deviation": deviation, "max_deviation": PUBLISHED_TOLERANCE}
    table |= {"flagged": deviation.abs() > PUBLISHED_TOLERANCE}
    return pd.DataFrame(table).reset_index(drop=True)


def _columns(section: Any, *fields: str, **columns: str) -> dict[str, Any]:
    """``{column: section.<field>}`` for each of ``fields`` (a column named as its field), then
    each ``column=field``; empty cells (None) where the section was not computed."""
    columns = {f: f for f in fields} | columns
    return {c: getattr(section, f) if section is not None else None for c, f in columns.items()}


def agreement_rows(rep: RankingsReport, order_of=None) -> list[dict]:
    """One row per dataset compared with the reference of a rankings report: correlations
    with p-values, the OLS fit, the bootstrap interval, agreement up to error bars.

    Shared by the workflow's ``agreement`` table and the ``statistics`` table of
    ``imagenot rankings --report``; ``order_of`` reorders the dataset names. A statistic that
    was not computed (the report's ``not_computed`` says why) is an empty cell; a bootstrap
    interval that the replicates could not give is empty and ``bootstrap_refused`` says why.
    """
    names = list(rep.datasets)
    if order_of is not None:
        names = order_of(names)
    rows = []
    for d in names:
        e = rep.datasets[d]
        if d == rep.reference:
            continue
        tests, boot = e.correlations, e.bootstrap
        tau_ci = (boot.kendall_tau_ci if boot is not None else None) or [None, None]
        row = {"dataset": d, "reference": rep.reference, "models": e.common_models}
        row |= _columns(tests, "kendall_tau")
        row |= {"kendall_tau_ci_low": tau_ci[0], "kendall_tau_ci_high": tau_ci[1]}
        row |= _columns(tests, "kendall_p")
        row |= _columns(e.rank_agreement_up_to_error_bars, kendall_tau_up_to_error_bars="tau_b")
        row |= _columns(tests, "spearman_rho", "spearman_p", "pearson_r", "p_method")
        row |= _columns(e.ols, "slope", "adj_r2")
        row |= _columns(
            e.ols_subset, slope_subset="slope", adj_r2_subset="adj_r2", models_subset="n"
        )
        row |= _columns(boot, bootstrap="method", bootstrap_interval="interval")
        refused = (boot.refused if boot is not None else None) or {}
        row["bootstrap_refused"] = "; ".join(f"{k}: {why}" for k, why in refused.items()) or None
        rows.append(row)
    return rows


def agreement(acc: pd.DataFrame, reports: Reports, opts: Options) -> pd.DataFrame:
    """Rank agreement of every dataset label with the reference, standard and Robust."""
    ordered = [
        (v, agreement_rows(rep, lambda names: order(names, opts))) for v, rep in reports.items()
    ]
    return pd.DataFrame([{"variant": v, **row} for v, rows in ordered for row in rows])


def fits(acc: pd.DataFrame, reports: Reports, opts: Options) -> pd.DataFrame:
    """OLS of each dataset and protocol's accuracy on ImageNet accuracy."""
    rows = []
    runs = acc[acc["protocol"] != "published"][["dataset", "protocol"]].drop_duplicates()
    for dataset, protocol in runs.itertuples(index=False):
        if opts.imagenet_axis == "reference" and (dataset, protocol) == (opts.reference, "st"):
            continue
        for r in accuracy_vs_imagenet.fit_rows(acc, dataset, protocol, opts):
            s = r["fit"].summary() if r["fit"] is not None else {}
            low, high = s.get("slope_ci", [None, None])
            row = {"dataset": dataset, "protocol": protocol, "variant": r["variant"]}
            row |= {"models": len(r["models"]), "slope": s.get("slope"), "slope_ci_low": low}
            row |= {"slope_ci_high": high, "intercept": s.get("intercept")}
            rows.append(row | {"adj_r2": s.get("adj_r2"), "axis": opts.axis})
    return pd.DataFrame(rows)


def error_correlations(acc: pd.DataFrame, reports: Reports, opts: Options) -> pd.DataFrame:
    """Spearman rho of model errors between every pair of dataset labels (standard)."""
    rows = [row.to_json() for row in reports["standard"].error_spearman]
    return pd.DataFrame(rows, columns=["a", "b", "n", "rho", "p"])


def report_statistics(rep: RankingsReport) -> pd.DataFrame:
    """Rank agreement and fit of each dataset against the reference"""
    # agreement_rows, plus each dataset's correlation with the mean of the other aggregated
    # datasets
    df = pd.DataFrame(agreement_rows(rep))
    across = rep.across_datasets
    others = (across.with_mean_of_others if across is not None else None) or {}
    if len(df) and others:
        df["spearman_rho_with_mean_of_others"] = [
            others[d].spearman_rho if d in others else None for d in df["dataset"]
        ]
    return df


def report_ranks(rep: RankingsReport) -> pd.DataFrame:
    """Accuracy, rank and delta rank of every model on every dataset"""
    # per model and dataset (table order); delta rank = rank on the reference - rank here
    # (positive = climbs); one row per model
    cols: dict[str, Any] = {}
    for d, e in rep.datasets.items():
        cols[f"{d} accuracy"], cols[f"{d} rank"] = e.accuracy, e.ranks
        if e.delta_rank is not None:
            cols[f"{d} delta_rank"] = e.delta_rank
    return _by_model(cols, rep.models, f"{rep.reference} rank")


def report_across_datasets(rep: RankingsReport) -> pd.DataFrame:
    """Size-weighted and geometric means across datasets, ranks, rank changes"""
    # against the reference, one row per model that has every aggregated dataset, sorted by the
    # first mean's rank
    across = rep.across_datasets
    columns = {
        f"{base}{suffix}": getattr(across, f"{base}{suffix}")
        for base in ("weighted_mean", "geometric_mean")
        for suffix in ("", "_rank", "_delta_rank")
        if across is not None and getattr(across, f"{base}{suffix}") is not None
    }
    keys = list(columns)
    models = across.models if across is not None else []  # no model on every dataset
    return _by_model(columns, models, keys[1] if len(keys) > 1 else keys[0] if keys else "")


def builder(name: str) -> Builder:
    """The builder of workflow table ``name`` (registered in
    :data:`imagenot.figures.registry.WORKFLOW_TABLES`, the one list of table names)."""
    from imagenot.core.registries import resolve
    from imagenot.figures.registry import WORKFLOW_TABLES

    return resolve(WORKFLOW_TABLES.entry(name))


def _cell(v: Any, column: str = "") -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return ""
    if not isinstance(v, float | np.floating):
        return markdown_text(v)
    if (column == "p" or column.endswith("_p")) and v < P_FLOOR:  # a column of p-values
        return f"< {P_FLOOR:g}"  # underflowed: no p-value is 0
    if float(v).is_integer():
        return f"{v:g}"
    return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"


def _label(column: str) -> str:
    """A workflow label as a column head: ``cifar10/ft-imagenet`` -> ``cifar10 FT (imagenet)``."""
    if "/" not in column:
        return column
    dataset, protocol = column.split("/", 1)
    kind, _, source = protocol.partition("-")
    return f"{dataset} {kind.upper()} ({source})"


def to_markdown(df: pd.DataFrame, title: str = "", *, workflow_labels: bool = False) -> str:
    """A GitHub-flavoured Markdown table (numbers to 2 decimals or 3 significant digits); every
    text (names from users' tables, the title) through the one Markdown escaper. Column names
    are shown as written, but for ``workflow_labels`` (a table of the workflow's own run, whose
    ``dataset/protocol`` labels read as ``dataset FT (source)``, :func:`_label`): a user's dataset
    name keeps its punctuation."""
    head = [markdown_text(_label(str(c)) if workflow_labels else str(c)) for c in df.columns]
    lines = [f"**{markdown_text(title)}**", ""] if title else []
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for row in df.itertuples(index=False):
        lines.append(
            "| " + " | ".join(_cell(v, str(c)) for v, c in zip(row, df.columns, strict=True)) + " |"
        )
    return "\n".join(lines) + "\n"


def write(
    df: pd.DataFrame,
    csv: str | os.PathLike,
    md: str | os.PathLike,
    title: str,
    *,
    workflow_labels: bool = False,
) -> None:
    """Write the table as CSV and Markdown (:func:`to_markdown`), atomically."""
    with atomic_path(csv, ".csv") as tmp:
        csv_frame(df).to_csv(tmp, index=False)
    with atomic_path(md, ".md") as tmp:
        tmp.write_text(to_markdown(df, title, workflow_labels=workflow_labels))
