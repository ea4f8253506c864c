"""Step 7 calibration: does the similarity threshold fit the encoder?

The paper's threshold (0.82) and the mean class score it reports (0.91) are on the scale of the
encoder it used; another encoder, or another pooling, puts the same classes on another scale,
and a threshold copied across scales silently keeps every class or none. This step reads the
class scores the selection step wrote (``class_scores.parquet``: ``wnid``, ``score`` = mean
top-n caption-query similarity, NaN for a class without captions, ``n_selectable``, ``status``)
and reports, for a grid of thresholds, how many classes would pass, with the distribution of the
scores, so that a reader sees where the configured threshold and ``n_classes`` fall.

Outputs: ``calibration.csv`` (one row per grid threshold), ``calibration_summary.csv``
(``statistic``, ``value``: counts, quantiles of the scores, the highest threshold that still
leaves ``n_classes`` classes, the mean score of the classes kept) and a figure (PDF and PNG).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from imagenot.core.io import read_parquet

REQUIRED_COLUMNS = ("wnid", "score", "n_selectable", "status")
# Cosine similarities lie in [-1, 1]; float16 embeddings round a little past the ends.
SCORE_TOLERANCE = 1e-2


if TYPE_CHECKING:
    from imagenot.curate.files import CalibrationFiles
    from imagenot.curate.settings import CalibrationSettings


class CalibrationError(ValueError):
    """Bad calibration input; the message names the file, row or key."""


def check_grid(settings: CalibrationSettings) -> None:
    """A grid without a threshold (``step <= 0`` or ``stop < start``) is refused, naming the
    keys (CalibrationError)."""
    if not settings.step > 0 or settings.stop < settings.start:
        raise CalibrationError(
            f"--settings: grid start {settings.start}, stop {settings.stop}, step {settings.step} "
            "is empty (curate.calibration: step > 0, stop >= start)"
        )


def read_scores(path: str | os.PathLike) -> pa.Table:
    """The class-scores table, checked: required columns, NaN score exactly when a class has no
    selectable caption, finite scores within [-1, 1]."""
    table = read_parquet(path, columns=list(REQUIRED_COLUMNS))  # names the columns it lacks
    try:
        score = table.column("score").cast(pa.float64()).to_numpy(zero_copy_only=False)
        n_sel = table.column("n_selectable").cast(pa.int64()).to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CalibrationError(f"{path}: score / n_selectable are not numeric ({exc})") from None
    wnids = table.column("wnid").to_pylist()
    for i in range(len(score)):
        bad = None
        if np.isnan(score[i]) and n_sel[i] > 0:
            bad = f"score is NaN but n_selectable is {n_sel[i]}"
        elif not np.isnan(score[i]) and n_sel[i] == 0:
            bad = f"score is {score[i]} but n_selectable is 0"
        elif np.isinf(score[i]) or abs(score[i]) > 1 + SCORE_TOLERANCE:
            bad = f"score {score[i]} is not a cosine similarity"
        if bad:
            raise CalibrationError(f"{path}: row {i} (wnid {wnids[i]}): {bad}")
    return table


def calibrate(scores: pa.Table, settings: CalibrationSettings) -> tuple[pa.Table, pa.Table]:
    """(per-threshold table, summary table) of a class-scores table.

    Per grid threshold t: ``classes_passing`` = classes whose score >= t (the selection step
    drops a class when score < threshold), ``fraction_passing`` of the classes with a score, and
    ``fills_n_classes`` = at least ``n_classes`` pass. Summary: class counts, score quantiles
    (linear interpolation) and mean, the configured threshold and how many classes reach it,
    ``max_threshold_for_n_classes`` (the n_classes-th highest score: the highest threshold that
    still leaves n_classes classes; NaN when fewer classes have a score), and
    ``mean_score_of_kept`` (mean over the classes the configured threshold and n_classes keep,
    the number the paper reports as 0.91).
    """
    values = scores.column("score").cast(pa.float64()).to_numpy(zero_copy_only=False)
    scored = np.sort(values[~np.isnan(values)])[::-1]  # descending
    n = len(scored)
    grid = settings.grid()
    # scored is descending: the count of scores >= t is found on the ascending copy
    passing = n - np.searchsorted(scored[::-1], grid, side="left")
    per_threshold = pa.table(
        {
            "threshold": pa.array(grid, pa.float64()),
            "classes_passing": pa.array(passing, pa.int64()),
            "fraction_passing": pa.array(passing / n if n else np.zeros(len(grid)), pa.float64()),
            "fills_n_classes": pa.array(passing >= settings.n_classes, pa.bool_()),
        }
    )
    at_threshold = int((scored >= settings.threshold).sum())
    kept = scored[scored >= settings.threshold][: settings.n_classes]
    quantiles = np.quantile(scored, [0.0, 0.25, 0.5, 0.75, 1.0]) if n else [math.nan] * 5
    status = scores.column("status").to_pylist()
    quartiles = ("score_min", "score_q25", "score_median", "score_q75", "score_max")
    rows = {
        "classes": len(values),
        "classes_with_score": n,
        "classes_without_caption": len(values) - n,
        "classes_kept_by_selection": sum(s == "kept" for s in status),
        **dict(zip(quartiles, quantiles, strict=True)),
        "score_mean": float(scored.mean()) if n else math.nan,
        "threshold": settings.threshold,
        "classes_at_or_above_threshold": at_threshold,
        "n_classes": settings.n_classes,
        "max_threshold_for_n_classes": (
            float(scored[settings.n_classes - 1]) if n >= settings.n_classes else math.nan
        ),
        "mean_score_of_kept": float(kept.mean()) if len(kept) else math.nan,
    }
    summary = pa.table({"statistic": list(rows), "value": [float(v) for v in rows.values()]})
    return per_threshold, summary  # string and float64 columns


def calibration_figure(scores: pa.Table, per_threshold: pa.Table, settings: CalibrationSettings):
    """Left: histogram of the class scores, the threshold marked. Right: classes passing vs
    threshold (exact curve over all scores, and the grid's points), the threshold and n_classes
    marked. Drawn in the style every figure shares (:mod:`imagenot.core.figure_style`)."""
    import matplotlib.pyplot as plt

    from imagenot.core.figure_style import HIGHLIGHT, integer_ticks, paper_style

    style = settings.figure_options
    values = scores.column("score").cast(pa.float64()).to_numpy(zero_copy_only=False)
    scored = values[~np.isnan(values)]
    with paper_style(style):
        fig, (left, right) = plt.subplots(1, 2, figsize=(style.width_in, style.width_in * 0.4))
        if len(scored):
            left.hist(scored, bins=30, color="C0", alpha=0.7)
        for ax in (left, right):
            ax.axvline(
                settings.threshold,
                color=HIGHLIGHT,
                ls="--",
                label=f"threshold {settings.threshold:g}",
            )
            integer_ticks(ax.yaxis)
        left.set_xlabel("class score (mean top-n caption-query similarity)")
        left.set_ylabel("classes")
        left.set_title(f"{len(scored)} classes with captions ({len(values) - len(scored)} without)")
        left.legend()

        grid = per_threshold.column("threshold").to_numpy()
        passing = per_threshold.column("classes_passing").to_numpy()
        # exact: a threshold in (a[k-1], a[k]] of the ascending scores a passes n - k classes
        ascending = np.sort(scored)
        left_end = min([*grid[:1], *ascending[:1]])
        right.plot(
            np.concatenate([[left_end], ascending]),
            len(ascending) - np.arange(-1, len(ascending)).clip(0),
            drawstyle="steps-pre",
            color="C0",
            lw=1,
            label="classes passing",
        )
        right.plot(grid, passing, "o", ms=2, color="C0", label="grid (calibration.csv)")
        label = f"n_classes {settings.n_classes}"
        if settings.n_classes <= 1.2 * max(len(scored), 1):
            right.axhline(settings.n_classes, color="0.4", ls=":", label=label)
        else:  # far above every count: a line there would flatten the curve
            right.plot([], [], color="0.4", ls=":", label=f"{label} (above every count)")
        right.set_xlabel("threshold")
        right.set_ylabel("classes with score >= threshold")
        right.set_ylim(bottom=0)
        right.legend()
        fig.suptitle(f"Classes passing each similarity threshold ({settings.encoder})")
    return fig


def write_calibration(f: CalibrationFiles, settings: CalibrationSettings) -> pa.Table:
    """Read the scores, write the two CSVs and the figure (PDF with TrueType fonts, PNG at the
    style's resolution: :func:`imagenot.core.figure_style.save`), atomically; return the summary."""
    from imagenot.core.figure_style import save
    from imagenot.core.io import write_csv

    check_grid(settings)
    scores = read_scores(f.class_scores)
    per_threshold, summary = calibrate(scores, settings)
    write_csv(per_threshold, f.csv)
    write_csv(summary, f.summary)
    save(
        calibration_figure(scores, per_threshold, settings),
        f.pdf,
        f.png,
        settings.figure_options.dpi,
    )
    return summary
