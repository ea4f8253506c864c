"""A trial's records as the workflow writes them, for tests of their readers (halving, selection,
the preregistration's evidence, the final run that reuses a trial): a slot's result, a rung's
decision and a selection by the one record writer (:func:`imagenot.train.records.write_record`:
every key their producer writes, checked and sealed), and a run's trials table (drawn from the
registered space where one is registered, as ``train-draw-trials`` draws it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa

from imagenot.core.io import read_parquet, write_parquet
from imagenot.train import search
from imagenot.train.records import SLOT_PATTERN, path_identity, write_record
from imagenot.train.trials import registered_search


def draw_run(root: Path, space: dict, model: str = "resnet_mini") -> Path:
    """Pre-register ``space`` for the toy ST experiment and draw its trials for ``model`` under
    ``root`` (the workflow's root) as ``train-draw-trials`` does (:func:`imagenot.train.prereg.draw`
    of the config's settings); the run's folder (``results/train/toy/st/{model}``)."""
    from conftest import toy_config

    from imagenot.core.config import validate_config
    from imagenot.train import prereg
    from imagenot.train.paths import PREREGISTRATION, TRIALS
    from imagenot.train.settings import DrawSettings

    config = validate_config(toy_config(space))
    settings = DrawSettings.from_config(config, "toy", "st", "resnet_mini")
    settings = dataclasses.replace(settings, model=model)
    table = Path(root) / TRIALS.format(dataset="toy", protocol="st", model=model)
    prereg.draw(settings, Path(root) / PREREGISTRATION, table)
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
    trials table, :func:`trials_table`, written beside it when missing), ``fields`` overriding
    the defaults."""
    path = Path(path)
    stage = (
        int(path.parent.name.removeprefix("stage-")) if path.parent.name.startswith("stage-") else 0
    )
    slot = int(path.stem.removeprefix("slot-")) if path.stem.startswith("slot-") else 0
    trial = fields.get("trial", slot)
    run = path.parents[1] if path_identity(path, SLOT_PATTERN) else None
    row = {"seed": 0, **search.DEFAULTS}
    if run is not None and isinstance(trial, int) and trial >= 0:  # its run draws it
        rows = trials_table(run / "trials.parquet", trial + 1)
        row = rows[trial] if trial < len(rows) else row
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


def write_decision(path: Path, promoted: list, **fields) -> dict:
    """A rung's decision promoting ``promoted`` (the keys ``train-halve`` writes, every promoted
    trial ranked, ``fields`` overriding them), written sealed at ``path``
    (:func:`imagenot.train.records.write_record`, which refuses one out of its declaration); the
    decision as written."""
    decision = {
        "rung": 0,
        "eta": 2,
        "slots": max(len(promoted), 1),
        "val_accuracy": {str(t): 50.0 for t in promoted},
        "promoted": promoted,
        **fields,
    }
    return write_record(decision, path, "decision")


def write_selection(run_dir: Path, model: str, trial: int = 0, **fields) -> dict:
    """The selection ``train-select`` writes in the run at ``run_dir`` (``selection.json``):
    ``trial``, its validation accuracy and hyperparameters, and its sealed slot result (of
    stage 0, every hyperparameter at its default, ``fields`` overriding), sealed. Alone: the
    search's other files (its slots, trials table, preregistration) are not written."""
    from imagenot.train.records import seal

    result = seal(slot_record(Path(f"slot-{trial}.json"), trial=trial, model=model, **fields))
    selection = {
        "trial": trial,
        "model": model,
        "val_accuracy": result["val_accuracy"],
        "hyperparameters": result["hyperparameters"],
        "result": result,
    }
    return write_record(selection, Path(run_dir) / "selection.json", "selection")


def selected(run_dir: Path | None, model: str = "resnet_mini") -> dict:
    """What ``train-final`` records of the trial it ran (``trial``, ``hyperparameters``): that of
    the selection in the run at ``run_dir`` (:func:`write_selection`, written when missing;
    None: a record outside a run's folder, trial 0 at the defaults)."""
    from imagenot.core.io import read_json

    selection = Path(run_dir) / "selection.json" if run_dir is not None else None
    if selection is not None and selection.is_file():
        chosen = read_json(selection)
    elif selection is not None:
        chosen = write_selection(run_dir, model)
    else:
        chosen = {"trial": 0, "hyperparameters": search.hyperparameters_of(search.DEFAULTS)}
    return {"trial": chosen["trial"], "hyperparameters": chosen["hyperparameters"]}
