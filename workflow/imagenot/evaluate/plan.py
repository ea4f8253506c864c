"""Config lookups for the evaluate stage's rules (pure functions of the workflow config).

The rule file rules/evaluate.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations

from imagenot.evaluate.paths import PER_IMAGE, ROBUSTNESS
from imagenot.train import plan as train_plan


def robustness_files(config: dict) -> list[str]:
    """``robustness.parquet`` of every final run (see ``imagenot.train.plan.final_runs``)."""
    return [ROBUSTNESS.format(**run) for run in train_plan.final_runs(config)]


def per_image_files(config: dict) -> list[str]:
    """The per-image results beside each ``robustness.parquet``."""
    return [PER_IMAGE.format(**run) for run in train_plan.final_runs(config)]


targets = robustness_files  # the final outputs of this stage for ``rule all``


def threads(config: dict) -> int:
    """CPU threads of one evaluation job (``evaluate.threads``)."""
    return config["evaluate"]["threads"]  # validated: the schema fills in its default
