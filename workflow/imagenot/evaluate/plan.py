"""Config lookups for the evaluate stage's rules (pure functions of the workflow config).

The rule file rules/evaluate.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``."""
    return []


def robustness_files(config: dict) -> list[str]:
    """``results/evaluate/{dataset}/{protocol}/{model}/seed-{seed}/robustness.parquet`` for
    every final run (see ``imagenot.train.plan.final_runs``)."""
    return []
