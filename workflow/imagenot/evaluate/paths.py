"""The evaluate stage's files, written once: rules/evaluate.smk's outputs, the plan's file
lists (:mod:`imagenot.evaluate.plan`), the accuracy table's inputs (rules/figures.smk), and
docs/contracts.md (tests/test_contracts.py checks it against these).

Why a module of its own: other stages name these files; here, importing nothing but the
results root, they do so without importing the stage's plan (and what its checks import).
Each is a Snakemake pattern (``{dataset}``); fill it with ``str.format``.
"""

from __future__ import annotations

from imagenot.paths import RESULTS

RUN_DIR = f"{RESULTS}/evaluate/{{dataset}}/{{protocol}}/{{model}}/seed-{{seed}}"
ROBUSTNESS = f"{RUN_DIR}/robustness.parquet"
PER_IMAGE = f"{RUN_DIR}/per_image.parquet"
