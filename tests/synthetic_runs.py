"""Synthetic evaluation results in the evaluate stage's layout, for the tests of the analyse
stage, the figures and the run summary.

Each model has a latent quality; accuracy on a dataset is a logistic function of it, lowered
by each test-time transformation, and every image's correctness is a Bernoulli draw, so the
per-image and per-transform tables agree exactly.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from imagenot.analyse import stats
from imagenot.core.escape import csv_frame
from imagenot.core.io import write_parquet

MODELS = ("alexnet", "vgg19", "resnet18", "resnet152", "densenet161")
TRANSFORMS = ("Identity", "GaussianBlur", "Grayscale", "Invert")


def robustness_results(
    root: str | os.PathLike,
    runs: list[dict],
    *,
    transforms: tuple[str, ...],
    n_images: int,
    seed: int,
) -> list[str]:
    """Write ``{root}/evaluate/{dataset}/{protocol}/{model}/seed-{seed}/robustness.parquet``
    and ``per_image.parquet`` for each run dict (dataset, protocol, model, seed): ``n_images``
    images under each of ``transforms`` (e.g. :data:`TRANSFORMS`), drawn from ``seed``, with the
    intervals the evaluate stage writes under its default ``evaluate.confidence``."""
    from imagenot.core.config import schema_default

    confidence = schema_default("evaluate.confidence")
    rng = np.random.default_rng(seed)
    quality = {m: i / max(len(MODELS) - 1, 1) for i, m in enumerate(MODELS)}
    paths = []
    for run in runs:
        q = quality.get(run["model"], rng.uniform())
        offset = {"st": 0.0}.get(run["protocol"], 0.5) + 0.2 * len(run["dataset"]) % 3
        rows, per_image = [], []
        keys = [f"{run['dataset']}-{i:06d}" for i in range(n_images)]
        for t, transform in enumerate(transforms):
            p = 1 / (1 + np.exp(-(-1.0 + offset + 3.0 * q - 0.4 * t + rng.normal(0, 0.1))))
            correct = rng.uniform(size=n_images) < p
            top1 = 100.0 * correct.mean()
            lo, hi = stats.clopper_pearson(np.array([top1]), np.array([n_images]), confidence)
            rows.append(
                {
                    **{k: run[k] for k in ("model", "dataset", "protocol")},
                    "seed": int(run["seed"]),
                    "transform": transform,
                    "top1": top1,
                    # 15% of the images more in the top five: a share n images can give
                    "top5": 100.0
                    * min(n_images, correct.sum() + round(0.15 * n_images))
                    / n_images,
                    "n": n_images,
                    "ci_low": float(lo[0]),
                    "ci_high": float(hi[0]),
                }
            )
            pred = np.where(correct, 0, 1)
            per_image.append(
                pd.DataFrame(
                    {"key": keys, "transform": transform, "correct": correct, "pred": pred}
                )
            )
        out = Path(root, "evaluate", *(run[k] for k in ("dataset", "protocol", "model")))
        out = out / f"seed-{run['seed']}"
        write_parquet(pa.Table.from_pandas(pd.DataFrame(rows)), out / "robustness.parquet")
        write_parquet(
            pa.Table.from_pandas(pd.concat(per_image, ignore_index=True)),
            out / "per_image.parquet",
        )
        paths.append(str(out / "robustness.parquet"))
    return paths


def runs_grid(
    datasets: list[str],
    models: tuple[str, ...],
    seeds: tuple[int, ...],
    downstream: str | None = None,
    sources: tuple[str, ...] = (),
) -> list[dict]:
    """ST runs of ``models`` (e.g. :data:`MODELS`) with ``seeds`` on every dataset, plus FT and
    TL runs on ``downstream`` from each source."""
    grid = [(d, "st") for d in datasets]
    if downstream:
        grid += [(downstream, f"{kind}-{src}") for kind in ("ft", "tl") for src in sources]
    return [
        {"dataset": d, "protocol": p, "model": m, "seed": s}
        for d, p in grid
        for m in models
        for s in seeds
    ]


def published_accuracy(path: str | os.PathLike, models: tuple[str, ...]) -> str:
    """A stand-in for the published-weights table (``imagenot.train.facts``; the real values of
    ``models`` among those it knows)."""
    known = {
        "alexnet": (56.522, 79.066),
        "vgg19": (72.376, 90.876),
        "resnet18": (69.758, 89.078),
        "resnet152": (78.312, 94.046),
        "densenet161": (77.138, 93.560),
        "efficientnet_v2_l": (85.808, 97.788),
        "convnext_large": (84.414, 96.976),
    }
    rows = [
        {"model": m, "weights": "IMAGENET1K_V1", "top1": a, "top5": b, "source": "synthetic"}
        for m, (a, b) in known.items()
        if m in models
    ]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    csv_frame(pd.DataFrame(rows)).to_csv(path, index=False)
    return str(path)
