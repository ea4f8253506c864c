"""A trial's records as the workflow writes them, for tests of their readers (halving, selection,
the preregistration's evidence, the final run that reuses a trial): a slot's result by the one
record writer (:func:`imagenot.train.records.write_record`: every key train_trial writes,
sealed), its run's trials table (drawn from the registered space where one is registered, as
``train-draw-trials`` draws it) and a rung's decision with every key ``train-halve`` writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa

from imagenot.io import read_parquet, write_parquet
from imagenot.train import search
from imagenot.train.records import write_record
from imagenot.train.trials import registered_search, slot_run_dir


def draw_run(root: Path, space: dict, model: str = "resnet_mini") -> Path:
    """Pre-register ``space`` for the toy ST experiment and draw its trials for ``model`` under
    ``root`` (the workflow's root) as ``train-draw-trials`` does (:func:`imagenot.train.trials.draw`
    of the config's settings); the run's folder (``results/train/toy/st/{model}``)."""
    from conftest import toy_config

    from imagenot.config import validate_config
    from imagenot.train import trials
    from imagenot.train.paths import PREREGISTRATION, TRIALS
    from imagenot.train.settings import DrawSettings

    config = validate_config(toy_config(space))
    settings = DrawSettings.from_config(config, "toy", "st", "resnet_mini")
    settings = dataclasses.replace(settings, model=model)
    table = Path(root) / TRIALS.format(dataset="toy", protocol="st", model=model)
    trials.draw(settings, Path(root) / PREREGISTRATION, table)
    return table.parent


def trials_table(path: Path, trials: int) -> list[dict]:
    """The trials table at ``path`` holding at least ``trials`` trials, written when it holds
    fewer: the registered space's draw where the path lies in the workflow's layout beside a
    preregistration record, else every hyperparameter at its default and seed 0."""
    path = Path(path)
    rows = read_parquet(path).to_pylist() if path.is_file() else []
    if len(rows) >= trials:
        return rows
    registered = registered_search(path)
    if registered is not None:
        dataset, protocol, definition = registered
        rows = search.draw_trials(definition, definition["seed"], dataset, protocol)
    else:
        # every hyperparameter at its default but lr, which tells the trials apart
        rows = [
            {"trial": t, **search.DEFAULTS, "lr": search.DEFAULTS["lr"] * (t + 1), "seed": 0}
            for t in range(trials)
        ]
    write_parquet(pa.table(search.trial_columns(rows)), path)
    return rows


def slot_record(path: Path, **fields) -> dict:
    """A trained slot's result at ``path`` (``.../{model}/stage-{s}/slot-{k}.json``: its model,
    stage and slot are read from the path; its trial's hyperparameters and seed from its run's
    trials table, :func:`trials_table`, written beside it when missing; at a later stage, the
    previous rung's decision promotes the trial into the slot, :func:`promote`), ``fields``
    overriding the defaults."""
    path = Path(path)
    stage = (
        int(path.parent.name.removeprefix("stage-")) if path.parent.name.startswith("stage-") else 0
    )
    slot = int(path.stem.removeprefix("slot-")) if path.stem.startswith("slot-") else 0
    trial = fields.get("trial", slot)
    run_dir = slot_run_dir(path)
    row = {"seed": 0, **search.DEFAULTS}
    if run_dir is not None and isinstance(trial, int) and trial >= 0:  # its run draws it
        rows = trials_table(run_dir / "trials.parquet", trial + 1)
        row = rows[trial] if trial < len(rows) else row
        if stage > 0:  # and the previous rung promoted it into its slot
            promote(run_dir / "halving" / f"rung-{stage - 1}.json", slot, trial)
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
        "hyperparameters": search.hyperparameters_of(row),
        "seed": row["seed"],
        "dataset_fingerprint": "0" * 64,
    }
    return {**record, **fields}


def write_slot(path: Path, **fields) -> dict:
    """Write :func:`slot_record` sealed at ``path``; return what was written."""
    return write_record(slot_record(path, **fields), path, "slot")


def promote(path: Path, slot: int, trial: int) -> None:
    """Make the rung decision at ``path`` (``.../halving/rung-{rung}.json``) promote ``trial``
    into ``slot`` when it promotes nothing there yet (slots filled in order), writing it when
    missing; a decision that promotes another trial there is left as it is."""
    path = Path(path)
    decision = json.loads(path.read_text()) if path.is_file() else {}
    promoted = list(decision.get("promoted", []))
    if len(promoted) != slot or trial in promoted:
        return
    promoted.append(trial)
    rung = int(path.stem.removeprefix("rung-"))
    ranked = {**decision.get("val_accuracy", {}), str(trial): 50.0}
    slots = max(decision.get("slots", 0), len(promoted))
    write_decision(path, promoted, rung=rung, slots=slots, val_accuracy=ranked)


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
