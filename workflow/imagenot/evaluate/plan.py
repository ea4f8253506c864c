"""Config lookups for the evaluate stage's rules (pure functions of the workflow config).

The rule file rules/evaluate.smk calls these; Snakemake files themselves define no functions.
"""

from __future__ import annotations

from imagenot.train import plan as train_plan

RESULTS = "results"
RUN_DIR = "{dataset}/{protocol}/{model}/seed-{seed}"


def run_dir(run: dict) -> str:
    """``results/evaluate/{dataset}/{protocol}/{model}/seed-{seed}`` of one final run."""
    return f"{RESULTS}/evaluate/" + RUN_DIR.format(**run)


def robustness_files(config: dict) -> list[str]:
    """``results/evaluate/{dataset}/{protocol}/{model}/seed-{seed}/robustness.parquet`` for
    every final run (see ``imagenot.train.plan.final_runs``)."""
    return [f"{run_dir(run)}/robustness.parquet" for run in train_plan.final_runs(config)]


def per_image_files(config: dict) -> list[str]:
    """The per-image results beside each ``robustness.parquet``."""
    return [f"{run_dir(run)}/per_image.parquet" for run in train_plan.final_runs(config)]


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``."""
    return robustness_files(config)


def threads(config: dict) -> int:
    """CPU threads of one evaluation job (``evaluate.threads``)."""
    return config["evaluate"]["threads"]  # validated: the schema fills in its default


def dataset_dir(dataset: str) -> str:
    """The materialised dataset a run is evaluated on (``results/datasets/{dataset}``)."""
    return f"{RESULTS}/datasets/{dataset}"
