"""Config lookups for the train stage's rules (pure functions of the workflow config).

The rule file rules/train.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``."""
    return []


def final_runs(config: dict) -> list[dict]:
    """Every final (retrained-best) run the workflow makes: dicts with keys ``dataset``,
    ``protocol``, ``model``, ``seed``; their outputs are
    ``results/train/{dataset}/{protocol}/{model}/final/seed-{seed}/model.safetensors``."""
    return []
