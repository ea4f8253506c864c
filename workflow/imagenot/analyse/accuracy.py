"""The run's accuracy table: every evaluation result plus the published ImageNet accuracies.

``results/analyse/accuracy.csv`` (docs/contracts.md): ``model``, ``dataset``, ``protocol``,
``seed``, ``transform``, ``accuracy`` (top-1 percent), ``top5``, ``n``, ``ci_low``, ``ci_high``,
``imagenet_top1`` (the published ImageNet top-1 of the model's weights: the x-axis), ``weights``
and ``published_top1`` (a published run's own record: the weights it evaluated and their
published top-1; empty for trained runs) and ``record_sha256`` (the digest the run's producer
sealed its ``result.json`` with: the record each row was made from; empty for the publisher's
rows and an older run's record). The published accuracies also appear as rows of
dataset ``imagenet_published`` (protocol ``published``), so that ``imagenot rankings`` can
compare any dataset against them.

Which published accuracy belongs to a model is the weight's, never the model name's: a
published run's record (its ``result.json``, carried into ``robustness.parquet`` by the
evaluation) first, else the weights the config names for the model
(``AccuracySettings.weights``) looked up in the published table by weights. With
``train.weights.resnet152: ResNet152_Weights.IMAGENET1K_V2`` ResNet-152 is 82.3, not the 78.3
of the V1 weights the registry names for it (the paper's recipe).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd

from imagenot.analyse import PUBLISHED_DATASET, PUBLISHED_PROTOCOL, stats
from imagenot.analyse.settings import AccuracySettings
from imagenot.analyse.table import TableError, missing_columns
from imagenot.core.io import read_parquet
from imagenot.evaluate.outputs import RECORD_COLUMNS, ROBUSTNESS_COLUMNS, read_evaluation
from imagenot.train.facts import PUBLISHED_TEST_SIZE

PUBLISHED_COLUMNS = ("model", "weights", "top1", "top5", "source")

log = logging.getLogger(__name__)
COLUMNS = [
    *("accuracy" if c == "top1" else c for c in ROBUSTNESS_COLUMNS),
    "imagenet_top1",
    *RECORD_COLUMNS,
]
"""The accuracy table's columns: an evaluation's, its top-1 named ``accuracy``."""


def read_robustness(paths: Sequence[str | os.PathLike]) -> pd.DataFrame:
    """Concatenate evaluation ``robustness.parquet`` files, each read by the evaluations' one
    reader (:func:`imagenot.evaluate.outputs.read_evaluation`: columns, identity, numbers)."""
    columns = [*ROBUSTNESS_COLUMNS, *RECORD_COLUMNS]
    frames = [read_evaluation(path).reindex(columns=columns) for path in paths]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def read_published(path: str | os.PathLike) -> pd.DataFrame:
    """The published ImageNet accuracies of the registry's weights (one row per model with
    published weights: ``imagenot.train.facts``' derived table). A model whose publisher states
    no accuracy (timm's configs carry none) has no row on the published axis: counted in the
    log, never silently."""
    df = pd.read_csv(path)
    missing_columns(df, PUBLISHED_COLUMNS, f"{path}:")
    if df["model"].duplicated().any():
        raise TableError(f"{path}: model {df['model'][df['model'].duplicated()].iloc[0]!r} twice")
    return df[list(PUBLISHED_COLUMNS)].reset_index(drop=True)


def _records(runs: pd.DataFrame) -> dict[str, tuple[str, float]]:
    """Per model, (weights, published top-1) of its published runs' own records; two published
    runs of one model that evaluated different weights are an error (one x-axis per model)."""
    rows = runs.dropna(subset=["published_top1"])
    out: dict[str, tuple[str, float]] = {}
    for model, weights, top1 in zip(
        rows["model"], rows["weights"], rows["published_top1"].astype(float), strict=True
    ):
        seen = out.setdefault(model, (weights, top1))
        if seen != (weights, top1):
            raise TableError(
                f"model {model!r}: published runs evaluated {seen[0]} ({seen[1]}%) and "
                f"{weights} ({top1}%); one model has one published ImageNet accuracy"
            )
    return out


def model_published(
    runs: pd.DataFrame, published: pd.DataFrame, weights: dict[str, str]
) -> pd.DataFrame:
    """One row per model with a published ImageNet accuracy (columns of
    :data:`PUBLISHED_COLUMNS`). Its weights: those a published run of it evaluated (the run's
    record), else those the config names (``weights``: model -> reference), else the
    ``published`` table's row of that model name (a table of the toolbox's own, or a model the
    config does not train). Their top-1/top-5 are read from ``published`` by weights reference
    (one it lacks from its publisher, :func:`imagenot.train.facts.weight_facts`); a run's
    recorded top-1 is kept as recorded. A model whose publisher states no accuracy (timm's
    configs carry none) has no row: counted in the log, never silently."""
    table = list(published.itertuples())
    records = _records(runs)
    refs = {r.model: r.weights for r in table} | dict(weights)
    refs |= {m: record[0] for m, record in records.items()}
    rows, unstated = [], []
    for model, ref in refs.items():
        # the row of these weights (the model's own first: a table may reuse a weights name)
        same = [r for r in table if r.weights == ref]
        row = next((r for r in same if r.model == model), same[0] if same else None)
        if row is None:  # the weights' facts from their publisher (same fields)
            from imagenot.core.registries import RegistryError
            from imagenot.train.facts import weight_facts

            try:
                row = weight_facts(ref, model)
            except RegistryError as exc:
                raise TableError(f"model {model!r}: weights {ref}: {exc}") from None
        top1 = records[model][1] if model in records else row.top1  # the run's own record first
        if top1 is None or pd.isna(top1):
            unstated.append(model)
            continue
        rows.append(dict(model=model, weights=ref, top1=top1, top5=row.top5, source=row.source))
    if unstated:
        without = f"{len(unstated)} model(s) without a published top-1 ({', '.join(unstated)})"
        log.info("%s are left off the published axis", without)
    return pd.DataFrame(rows, columns=list(PUBLISHED_COLUMNS))


def accuracy_table(
    robustness: pd.DataFrame,
    published: pd.DataFrame,
    settings: AccuracySettings,
) -> pd.DataFrame:
    """One row per evaluation result, then one per published model (see the module doc); the
    published rows are labelled with ``settings.standard_transform`` and carry Clopper-Pearson
    intervals at ``settings.confidence``. ``published``: :func:`read_published`'s table."""
    standard_transform, confidence = settings.standard_transform, settings.confidence
    runs = robustness.rename(columns={"top1": "accuracy"})
    runs = runs.reindex(columns=[*runs.columns, *(c for c in RECORD_COLUMNS if c not in runs)])
    published = model_published(runs, published, dict(settings.weights))
    runs["imagenet_top1"] = runs["model"].map(published.set_index("model")["top1"].astype(float))
    n = np.full(len(published), PUBLISHED_TEST_SIZE)  # ILSVRC-2012 validation images
    lo, hi = stats.clopper_pearson(published["top1"].to_numpy(float), n, confidence)
    top1 = published["top1"].astype(float)
    pub = pd.DataFrame(
        {
            "model": published["model"],
            "dataset": PUBLISHED_DATASET,
            "protocol": PUBLISHED_PROTOCOL,
            "seed": 0,
            "transform": standard_transform,
            **dict.fromkeys(("accuracy", "imagenet_top1", "published_top1"), top1),
            "top5": published["top5"].astype(float),
            "n": n,
            "ci_low": lo,
            "ci_high": hi,
            "weights": published["weights"],
            "record_sha256": None,  # the publisher's number: no run of this workflow
        }
    )
    frames = [f for f in (runs[COLUMNS], pub[COLUMNS]) if len(f)]
    table = pd.concat(frames, ignore_index=True) if frames else pub[COLUMNS]
    return table.sort_values(
        ["dataset", "protocol", "model", "seed", "transform"], kind="stable"
    ).reset_index(drop=True)


def read_per_image(
    robustness_paths: Sequence[str | os.PathLike], per_image_paths: Sequence[str | os.PathLike]
) -> pd.DataFrame:
    """Per-image correctness of each run (``per_image_paths``), labelled with its run (read
    from its ``robustness.parquet``, the same position in ``robustness_paths``, by the
    evaluations' one reader)."""
    if len(robustness_paths) != len(per_image_paths):
        raise ValueError(
            f"{len(robustness_paths)} robustness files but {len(per_image_paths)} per-image "
            "files: give one per run, in the same order"
        )
    run_columns = ["model", "dataset", "protocol", "seed"]
    cols = [*run_columns, "transform", "key", "correct"]
    frames = []
    for path, per_path in zip(robustness_paths, per_image_paths, strict=True):
        summary = read_evaluation(path)
        per = read_parquet(per_path, columns=["key", "transform", "correct"]).to_pandas()
        # the per-image rows give the evaluation's counts and top-1 (one producer wrote both: a
        # file from another run or an edit shows here)
        counts = per.groupby("transform", sort=False)["correct"].agg(["size", "sum"])
        for row in summary.itertuples():
            n, k = counts["size"].get(row.transform, 0), counts["sum"].get(row.transform, 0)
            if n != row.n or not np.isclose(100.0 * k / max(n, 1), row.top1):
                raise TableError(
                    f"{per_path}: transform {row.transform!r} has {n} image(s), {k} correct, "
                    f"but {path} says n {row.n}, top1 {row.top1}: not the same evaluation"
                )
        frames.append(per.assign(**summary[run_columns].iloc[0]))
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)
