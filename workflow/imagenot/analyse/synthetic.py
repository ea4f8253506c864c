"""Synthetic evaluation results in the evaluate stage's layout, for tests and dry runs.

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
from imagenot.escape import csv_frame
from imagenot.io import write_parquet

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
    from imagenot.config import schema_default

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
            per_image.append(
                pd.DataFrame(
                    {
                        "key": keys,
                        "transform": transform,
                        "correct": correct,
                        "pred": np.where(correct, 0, 1),
                    }
                )
            )
        out = (
            Path(root)
            / "evaluate"
            / run["dataset"]
            / run["protocol"]
            / run["model"]
            / f"seed-{run['seed']}"
        )
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
    runs = [
        {"dataset": d, "protocol": "st", "model": m, "seed": s}
        for d in datasets
        for m in models
        for s in seeds
    ]
    if downstream:
        runs += [
            {"dataset": downstream, "protocol": f"{kind}-{src}", "model": m, "seed": s}
            for kind in ("ft", "tl")
            for src in sources
            for m in models
            for s in seeds
        ]
    return runs


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


# ------------------------------------------------- results tables of many models (the toolbox)

_FAMILIES = (
    ("vit", ("tiny", "small", "base", "large", "huge"), "_patch{p}_clip_{r}"),
    ("eva02", ("small", "base", "large"), "_patch{p}_{r}"),
    ("deit3", ("small", "medium", "base", "large", "huge"), "_patch{p}_{r}"),
    ("convnext", ("atto", "nano", "tiny", "small", "base", "large_mlp", "xxlarge"), "_{r}"),
    ("convnextv2", ("pico", "nano", "tiny", "base", "large", "huge"), "_{r}"),
    ("swinv2", ("tiny", "small", "base", "large"), "_window12to24_192to{r}"),
    ("maxxvitv2", ("nano", "rmlp_small", "rmlp_base"), "_rw_{r}"),
    ("efficientnetv2", ("rw_t", "rw_s", "m", "l", "xl"), "_{r}"),
    ("regnety", ("040", "080", "160", "320", "1280"), "_{r}"),
    ("caformer", ("s18", "s36", "m36", "b36"), "_{r}"),
)
_TAGS = (
    "laion2b_ft_in12k_in1k",
    "openai_ft_in12k_in1k",
    "mim_in22k_ft_in22k_in1k",
    "fb_in22k_ft_in1k",
    "sw_in12k_ft_in1k",
    "augreg2_in21k_ft_in1k",
    "fcmae_ft_in22k_in1k",
    "ra3_in1k",
    "swag_lc_in1k",
    "sail_in22k_ft_in1k",
)


def long_model_names(k: int, *, seed: int) -> list[str]:
    """``k`` distinct model names of 40-60 characters in timm's style
    (``vit_large_patch14_clip_336.laion2b_ft_in12k_in1k``), seeded: real-like labels for
    checking that figures stay readable."""
    rng = np.random.default_rng(seed)
    names: dict[str, None] = {}
    while len(names) < k:
        family, sizes, shape = _FAMILIES[rng.integers(len(_FAMILIES))]
        size = sizes[rng.integers(len(sizes))]
        body = (
            family
            + "_"
            + size
            + shape.format(
                p=(8, 14, 16, 32)[rng.integers(4)],
                r=(224, 256, 288, 336, 384, 448, 512)[rng.integers(7)],
            )
        )
        tag = _TAGS[rng.integers(len(_TAGS))]
        name = f"{body}.{tag}"
        while len(name) < 40:
            name += "_" + ("e300", "r160", "dist", "v2")[rng.integers(4)]
        if len(name) <= 60:
            names[name] = None
    return list(names)


TEST_SETS = ("imagenet-val", "imagenet-v2", "imagenet-a", "imagenet-r")
"""Test sets of :func:`results_table` by default, of the sizes :data:`TEST_SET_SIZES`."""
TEST_SET_SIZES = (50_000, 10_000, 7_500, 30_000)


def results_table(
    models: int,
    test_sets: tuple[str, ...] = TEST_SETS,
    *,
    sizes: tuple[int, ...] = TEST_SET_SIZES,
    seed: int,
) -> pd.DataFrame:
    """A long results table (model, dataset, accuracy, n) of ``models`` models with timm-style
    names (:func:`long_model_names`) on ``test_sets`` of sizes ``sizes``: accuracy is a
    per-dataset linear map of a latent quality plus noise, each a count of correct images out
    of ``n``. The size and names of the public ImageNet-variant result collections."""
    rng = np.random.default_rng(seed)
    names = long_model_names(models, seed=seed)
    quality = rng.uniform(20, 90, models)
    frames = []
    for j, d in enumerate(test_sets):
        n = sizes[j % len(sizes)]
        acc = np.clip((1 - 0.1 * j) * quality - 5 * j + rng.normal(0, 3, models), 0.5, 99.5)
        frames.append(
            pd.DataFrame(
                {
                    "model": names,
                    "dataset": d,
                    "accuracy": np.round(acc / 100 * n) / n * 100,
                    "n": n,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
