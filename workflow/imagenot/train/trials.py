"""The train stage's bookkeeping jobs: pre-registration and trial drawing, successive-halving
decisions and the selection of the best trial. Light: no torch import (they run as local jobs).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from imagenot.io import write_json, write_parquet
from imagenot.train import search
from imagenot.train.prereg import register

log = logging.getLogger(__name__)


class JobError(RuntimeError):
    """Bad job input (missing trial, malformed table)."""


def draw(
    definition: Mapping,
    experiment: str,
    model: str,
    record: Path,
    amendments: Sequence[Mapping],
    out: Path,
    model_settings: Mapping | None = None,
) -> None:
    """Check/record the preregistration, then write the experiment's trials table."""
    dataset, protocol = experiment.split("/", 1)
    register(
        record, experiment, dict(definition), model, amendments, out.parent.parent, model_settings
    )
    trials = search.draw_trials(definition, definition["seed"], dataset, protocol)
    write_parquet(pa.table(search.trial_columns(trials)), out)
    log.info("%s %s: %d trials drawn and pre-registered", experiment, model, len(trials))


def read_trial(path: Path, trial: int) -> dict:
    rows = pq.read_table(path).to_pylist()
    match = [r for r in rows if r["trial"] == trial]
    if not match:
        raise JobError(f"{path}: no row for trial {trial} (trials {[r['trial'] for r in rows]})")
    return match[0]


def carry_forward(trial: int, promoted: Path, out: Path) -> dict | None:
    """A trial the previous rung did not promote is not trained further: write its previous
    rung's result, marked ``stopped_by: halving``, to ``out`` and return it (None: promoted)."""
    decision = json.loads(promoted.read_text())
    if trial in decision["promoted"]:
        return None
    previous = json.loads((out.parent / f"rung-{decision['rung']}.json").read_text())
    result = {**previous, "stopped_by": previous["stopped_by"] or "halving", "promoted": False}
    write_json(result, out)
    return result


def halve(results: Sequence[Path], rung: int, eta: int, out: Path) -> dict:
    """The trials promoted past a rung (among those that trained at it)."""
    rows = [json.loads(p.read_text()) for p in results]
    alive = {r["trial"]: r["val_accuracy"] for r in rows if r["promoted"]}
    decision = {
        "rung": rung,
        "eta": eta,
        "val_accuracy": alive,
        "promoted": search.promote(alive, eta),
    }
    write_json(decision, out)
    return decision


def select(results: Sequence[Path], out: Path) -> dict:
    """The best trial by validation accuracy."""
    rows = {r["trial"]: r for r in (json.loads(p.read_text()) for p in results)}
    best = search.best_trial({t: r["val_accuracy"] for t, r in rows.items()})
    selection = {
        "trial": best,
        "val_accuracy": rows[best]["val_accuracy"],
        "hyperparameters": rows[best]["hyperparameters"],
    }
    write_json(selection, out)
    return selection
