"""The curate stage's files, written once: rules/curate.smk's outputs and inputs and the plan's
file lists (:mod:`imagenot.curate.plan`) name them, and so do their readers elsewhere: the
acquire stage (selection, reserve), the diagnostics and the scale world, which import this
module, not the plan and its checks' imports. docs/contracts.md is checked against these
(tests/test_contracts.py). A pattern's wildcards are the rules' (``{dataset}``, ``{shard}``);
the plan fills them with ``str.format``.
"""

from __future__ import annotations

from imagenot.core.paths import RESULTS

CURATE = f"{RESULTS}/curate"
# per shard, dataset-independent (curate_match)
_MATCH = f"{CURATE}/matches/{{shard}}"
MATCHES = f"{_MATCH}.parquet"
MATCH_COUNTS = f"{_MATCH}.counts.parquet"
MATCH_STATS = f"{_MATCH}.json"
# per LAION-built dataset
DATASET_DIR = f"{CURATE}/{{dataset}}"
CANDIDATES = f"{DATASET_DIR}/candidates.parquet"
CANDIDATES_AUDIT = f"{DATASET_DIR}/candidates_audit.parquet"
CANDIDATES_STATS = f"{DATASET_DIR}/candidates.json"
CAPTIONS = f"{DATASET_DIR}/captions/{{shard}}.parquet"
CAPTION_STATS = f"{DATASET_DIR}/captions/{{shard}}.json"
QUERIES = f"{DATASET_DIR}/queries.npy"
SCORES = f"{DATASET_DIR}/scores/{{shard}}.parquet"
SCORE_STATS = f"{DATASET_DIR}/scores/{{shard}}.json"
EMBEDDINGS = f"{DATASET_DIR}/embeddings/{{shard}}"  # resumable chunks (curate_embed's work)
CLASS_TABLE = f"{DATASET_DIR}/classes.parquet"
SELECTION = f"{DATASET_DIR}/selection.parquet"
RESERVE = f"{DATASET_DIR}/reserve.parquet"
CLASS_SCORES = f"{DATASET_DIR}/class_scores.parquet"
SELECTION_STATS = f"{DATASET_DIR}/selection.json"
AUDIT = f"{DATASET_DIR}/audit.parquet"
AUDIT_CSV = f"{DATASET_DIR}/audit.csv"
FUNNEL = f"{DATASET_DIR}/funnel.csv"
CALIBRATION = f"{DATASET_DIR}/calibration.csv"
CALIBRATION_SUMMARY = f"{DATASET_DIR}/calibration_summary.csv"
CALIBRATION_FIGURE = f"{DATASET_DIR}/calibration.png"
CALIBRATION_PDF = f"{DATASET_DIR}/calibration.pdf"
