"""Synthetic results tables of many models with timm-style names (:func:`results_table`), for
the toolbox's tests and benchmarks."""

from __future__ import annotations

import numpy as np
import pandas as pd

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
        patch = (8, 14, 16, 32)[rng.integers(4)]
        shape = shape.format(p=patch, r=(224, 256, 288, 336, 384, 448, 512)[rng.integers(7)])
        name = f"{family}_{size}{shape}.{_TAGS[rng.integers(len(_TAGS))]}"
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
        correct = np.round(acc / 100 * n)
        frames.append(
            pd.DataFrame({"model": names, "dataset": d, "accuracy": correct / n * 100, "n": n})
        )
    return pd.concat(frames, ignore_index=True)
