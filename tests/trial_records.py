"""A trial's records as the workflow writes them, for tests of their readers (halving, selection,
the preregistration's evidence, the final run that reuses a trial): a slot's result by the one
record writer (:func:`imagenot.train.records.write_record`: every key train_trial writes,
sealed) and a rung's decision with every key ``train-halve`` writes."""

from __future__ import annotations

import json
from pathlib import Path

from imagenot.train.records import write_record


def slot_record(path: Path, **fields) -> dict:
    """A trained slot's result at ``path`` (``.../{model}/stage-{s}/slot-{k}.json``: its model,
    stage and slot are read from the path), ``fields`` overriding the defaults."""
    path = Path(path)
    stage = (
        int(path.parent.name.removeprefix("stage-")) if path.parent.name.startswith("stage-") else 0
    )
    slot = int(path.stem.removeprefix("slot-")) if path.stem.startswith("slot-") else 0
    record = {
        "stage": stage,
        "slot": slot,
        "trial": slot,
        "model": path.parent.parent.name,
        "num_classes": 10,
        "n_val": 100,
        "image_size": 32,
        "val_accuracy": 50.0,
        "best_epoch": 1,
        "epochs": 1,
        "stopped_by": None,
        "hyperparameters": {},
        "seed": 0,
        "dataset_fingerprint": "0" * 64,
    }
    return {**record, **fields}


def write_slot(path: Path, **fields) -> dict:
    """Write :func:`slot_record` sealed at ``path``; return what was written."""
    return write_record(slot_record(path, **fields), path, "slot")


def write_decision(path: Path, promoted: list, **fields) -> dict:
    """A rung's decision promoting ``promoted`` (every promoted trial ranked), ``fields``
    overriding the rest; written at ``path``."""
    decision = {
        "rung": 0,
        "eta": 2,
        "slots": max(len(promoted), 1),
        "val_accuracy": {str(t): 50.0 for t in promoted},
        "promoted": promoted,
        **fields,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(decision))
    return decision
