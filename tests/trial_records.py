"""A trial's records as the workflow writes them, for tests of their readers (halving, selection,
the preregistration's evidence, the final run that reuses a trial): a slot's result by the one
record writer (:func:`imagenot.train.records.write_record`: every key train_trial writes,
sealed), its run's trials table (drawn from the registered space where one is registered, as
``train-draw-trials`` draws it) and a rung's decision with every key ``train-halve`` writes."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import pyarrow as pa

from imagenot.core.io import read_parquet, write_parquet
from imagenot.train import search
from imagenot.train.records import SLOT_PATTERN, run_dir, write_record
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
    trials table, :func:`trials_table`, written beside it when missing; at a later stage, the
    previous rung's decision promotes the trial into the slot, :func:`promote`), ``fields``
    overriding the defaults."""
    path = Path(path)
    stage = (
        int(path.parent.name.removeprefix("stage-")) if path.parent.name.startswith("stage-") else 0
    )
    slot = int(path.stem.removeprefix("slot-")) if path.stem.startswith("slot-") else 0
    trial = fields.get("trial", slot)
    run = run_dir(path, SLOT_PATTERN)
    row = {"seed": 0, **search.DEFAULTS}
    if run is not None and isinstance(trial, int) and trial >= 0:  # its run draws it
        rows = trials_table(run / "trials.parquet", trial + 1)
        row = rows[trial] if trial < len(rows) else row
        if stage > 0:  # and the previous rung promoted it into its slot
            promote(run / "halving" / f"rung-{stage - 1}.json", slot, trial)
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
    """A rung's decision promoting ``promoted``, sealed, written at ``path``; returned as
    written.

    Where the decision lies in a run's folder (``{run}/halving/rung-{k}.json``) that holds no
    trials table and no slot of its rung yet, whose trials can be drawn (:func:`_drawable`), and ``fields`` set no more than ``slots`` and
    ``eta`` (whole numbers that a halving can give), the run is written as its producers write it (:func:`write_rung`): the rung's slot
    results, the trials they train, the rungs before it, and the decision by ``train-halve``
    itself, so that it is what a reader recomputes from its rung's slots. Otherwise (a planted
    decision, a stand-in run): the keys ``train-halve`` writes, every promoted trial ranked,
    ``fields`` overriding them, sealed as anyone can seal (the digest is public)."""
    from imagenot.train.records import DECISION_PATTERN, path_identity, seal

    path = Path(path)
    found = path_identity(path, DECISION_PATTERN)
    run = path.parent.parent
    counts = [*promoted, *fields.values()]
    slots = fields.get("slots", max(len(promoted), 1))
    if (
        found is not None
        and set(fields) <= {"slots", "eta"}
        and all(type(v) is int and v >= 0 for v in counts)
        and len(set(promoted)) == len(promoted) <= slots
        and fields.get("eta", 2) >= 2
        and not (run / "trials.parquet").exists()
        and not any(run.glob(f"stage-{found['rung']}/slot-*.json"))
        and _drawable(run / "trials.parquet")
    ):
        return write_rung(path, promoted, **fields)
    decision = {
        "rung": 0,
        "eta": 2,
        "slots": max(len(promoted), 1),
        "val_accuracy": {str(t): 50.0 for t in promoted},
        "promoted": promoted,
        **fields,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    sealed = seal(decision)
    path.write_text(json.dumps(sealed))
    return sealed


def _drawable(table: Path) -> bool:
    """Whether the trials table at ``table`` can be written (:func:`trials_table`): outside the
    workflow's layout, or in it beside a preregistration record that registers its search."""
    from imagenot.train.trials import JobError

    try:
        registered_search(table)
    except JobError:
        return False
    return True


def write_rung(path: Path, promoted: list, slots: int | None = None, eta: int = 2) -> dict:
    """Rung ``k``'s decision at ``path`` (``{run}/halving/rung-{k}.json``) promoting
    ``promoted`` into ``slots`` slots, written by ``train-halve`` (:func:`trials.halve`) over
    slot results its producer writes: stage ``k``'s fewest slots that ``eta`` halves to
    ``slots``, the promoted trials alive and ranked in their order, every other trial ended by
    early stopping; at stage 0 slot ``s`` trains trial ``s``, at a later stage the trials the
    rung before promoted (written so in turn). The decision as written."""
    from imagenot.train import trials

    path = Path(path)
    rung, run = int(path.stem.removeprefix("rung-")), path.parent.parent
    slots = max(len(promoted), 1) if slots is None else slots
    assert len(set(promoted)) == len(promoted) <= slots, (promoted, slots)
    least = max([len(promoted), 1, *((t + 1 for t in promoted) if rung == 0 else ())])
    count = next(n for n in itertools.count(least) if search.promoted_count(n, eta) >= slots)
    assert search.promoted_count(count, eta) == slots, (promoted, slots, eta)
    if rung == 0:
        stage = list(range(count))
    else:
        others = (t for t in itertools.count() if t not in promoted)
        stage = [*promoted, *itertools.islice(others, count - len(promoted))]
        write_rung(run / "halving" / f"rung-{rung - 1}.json", stage, count, eta)
    results = []
    for k, trial in enumerate(stage):
        rank = promoted.index(trial) if trial in promoted else None
        result = run / f"stage-{rung}" / f"slot-{k}.json"
        ended = {"val_accuracy": 10.0, "stopped_by": "early_stopping"}
        alive = {"val_accuracy": 90.0 - rank} if rank is not None else ended
        write_slot(result, trial=trial, stage=rung, **alive)
        results.append(result)
    decision = trials.halve(results, rung, eta, path)
    assert decision["promoted"] == list(promoted), (decision, promoted)
    return decision


def write_selection(run_dir: Path, model: str, trial: int = 0, **fields) -> dict:
    """The selection ``train-select`` writes in the run at ``run_dir`` (``selection.json``):
    ``trial``, its validation accuracy and hyperparameters, and its sealed slot result (of
    stage 0, every hyperparameter at its default, ``fields`` overriding). Alone: the search's
    other files (its slots, trials table, preregistration) are not written, since a final
    run's record is checked against the selection alone (:func:`records.trace_final`)."""
    from imagenot.core.io import write_json
    from imagenot.train.records import seal

    result = seal(slot_record(Path(f"slot-{trial}.json"), trial=trial, model=model, **fields))
    selection = {
        "trial": trial,
        "val_accuracy": result["val_accuracy"],
        "hyperparameters": result["hyperparameters"],
        "result": result,
    }
    write_json(selection, Path(run_dir) / "selection.json")
    return selection


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
