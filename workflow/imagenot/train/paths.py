"""The train stage's files, written once: rules/train.smk's outputs and inputs, the plan's file
lists (:mod:`imagenot.train.plan`), the evaluate and diagnostics stages' inputs, and
docs/contracts.md (tests/test_contracts.py checks it against these).

Why a module of its own: :mod:`imagenot.train.experiments`, :mod:`imagenot.train.plan` and
the other stages' plans all name these files; here, importing nothing but the results root,
each imports them without importing the others. Each is a Snakemake pattern (``{dataset}``);
fill it with ``str.format``.
"""

from __future__ import annotations

from pathlib import Path

from imagenot.core.paths import RESULTS

TRAIN = f"{RESULTS}/train"
# the preregistration record (imagenot.train.prereg) and its report table
PREREGISTRATION = f"{TRAIN}/preregistration.json"
PREREGISTRATION_TABLE = f"{TRAIN}/preregistration.csv"
# one experiment x model
RUN = f"{TRAIN}/{{dataset}}/{{protocol}}/{{model}}"
TRIALS = f"{RUN}/trials.parquet"
SLOT = f"{RUN}/stage-{{stage}}/slot-{{slot}}.json"
DECISION = f"{RUN}/halving/rung-{{rung}}.json"
TRIAL_SELECTION = f"{RUN}/selection.json"
# TL protocols: the starting weights' backbone features, one file per split
FEATURES_DIR = f"{RUN}/features"
FEATURES = f"{FEATURES_DIR}/{{split}}.safetensors"
# a final run (retrained best trial, or published weights) per seed
FINAL_DIR = f"{RUN}/final/seed-{{seed}}"
FINAL_MODEL = f"{FINAL_DIR}/model.safetensors"
FINAL_RESULT = f"{FINAL_DIR}/result.json"
# Published weights have one final run, seed 0 (imagenot.train.experiments.seeds).
PUBLISHED_SEED = 0


def published(pattern: str) -> str:
    """A final run's pattern with the published weights' one seed in place of ``{seed}``
    (rule train_published has no seed wildcard)."""
    return pattern.replace("{seed}", str(PUBLISHED_SEED))


def previous(path: Path) -> Path:
    """Where a job's checkpoint before the newest is kept: ``<name>.prev``."""
    return path.with_name(f"{path.name}.prev")


def remove_checkpoint(path: Path) -> None:
    """Delete a job's checkpoint and the one kept before it (the job is finished). Free of
    torch: a final run that copies its trial's weights clears what a killed attempt left."""
    for p in (path, previous(path)):
        p.unlink(missing_ok=True)
