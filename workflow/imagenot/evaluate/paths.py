"""The evaluation's outputs per final run: rule ``evaluate_robustness`` writes them, the plan
lists them (:mod:`imagenot.evaluate.plan`), the accuracy table (rules/analyse.smk) reads them.
Apart from the plan so that a reader needs no import of the train stage's plan.
"""

from __future__ import annotations

from imagenot.core.paths import RESULTS

RUN_DIR = f"{RESULTS}/evaluate/{{dataset}}/{{protocol}}/{{model}}/seed-{{seed}}"
ROBUSTNESS = f"{RUN_DIR}/robustness.parquet"
PER_IMAGE = f"{RUN_DIR}/per_image.parquet"
