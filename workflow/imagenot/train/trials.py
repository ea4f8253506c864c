"""The train stage's bookkeeping jobs: pre-registration and trial drawing, successive-halving
decisions and the selection of the best trial. Light: no torch import (they run as local jobs).

They also delete what a trial no longer needs: the checkpoint and weights of a trial that a
rung drops, and after selection the weights of every trial but the selected one.

What these jobs read is checked as what its producer could have written (the trials table
against the registered space, a slot's result against the trial its slot trains, a rung's
decision against what halving computes from its slots): the jobs' own computations run again,
kept beside them, so that a change to how a rung promotes or a table is drawn changes its check.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from imagenot.core.io import read_json, read_parquet, write_json
from imagenot.train import search
from imagenot.train.paths import DECISION, PREREGISTRATION, RUN, SLOT, TRAIN, TRIALS
from imagenot.train.records import (
    COUNT,
    REFUSED,
    RUNG_DECISION,
    SEAL_KEY,
    RecordError,
    check_copy,
    path_identity,
    read_record,
    read_registration,
    require,
    write_record,
)

log = logging.getLogger(__name__)


class JobError(ValueError):
    """Bad job input (missing trial, malformed table, every trial diverged): a ValueError, so
    the command ends in one line naming it (``imagenot.cli``)."""


_DRAW_AGAIN = "delete it and run the workflow again (it draws the trials again)"


def registered_search(path: Path) -> tuple[str, str, Mapping] | None:
    """(dataset, protocol, registered definition) of the trials table at ``path`` when it lies
    in the workflow's layout (:data:`imagenot.train.paths.TRIALS`, in whichever working
    directory), read from the preregistration record beside the results; None outside it."""

    found = path_identity(path, TRIALS)
    if found is None:
        return None
    record = Path(path).parents[3] / PREREGISTRATION.removeprefix(f"{TRAIN}/")
    experiment = f"{found['dataset']}/{found['protocol']}"
    entry = read_registration(record)["experiments"].get(experiment)
    if not isinstance(entry, Mapping) or not isinstance(entry.get("definition"), Mapping):
        raise JobError(
            f"{path}: the preregistration record {record} registers no search of {experiment}, "
            f"so these trials cannot be traced to a registered space; {_DRAW_AGAIN}"
        )
    return found["dataset"], found["protocol"], entry["definition"]


def _check_registered(path: Path, rows: list[dict], registered: tuple) -> None:
    """JobError naming the table, the trial and the key where a row is not what
    :func:`imagenot.train.search.draw_trials` could draw from the registered definition."""
    dataset, protocol, definition = registered
    space, budget = definition.get("hyperparameters", {}), definition.get("budget")
    if len(rows) != budget:
        raise JobError(
            f"{path}: holds {len(rows)} trials, but the registered search of {dataset}/"
            f"{protocol} draws {budget}; {_DRAW_AGAIN}"
        )
    points = search.grid_points(space)
    for row in rows:
        trial = row["trial"]
        for name in search.HYPERPARAMETERS:
            if name not in space:
                continue
            problem = search.spec_problem(
                name, row[name], space[name], points[trial].get(name) if points[0] else None
            )
            if problem:
                raise JobError(
                    f"{path}: trial {trial}'s {name} is {row[name]!r}, {problem}; {_DRAW_AGAIN}"
                )
        seed = search.stable_int(definition.get("seed"), dataset, protocol, "trial", trial)
        if row["seed"] != seed:
            raise JobError(
                f"{path}: trial {trial}'s seed is {row['seed']!r}, but the registered search "
                f"gives it {seed}; {_DRAW_AGAIN}"
            )


def read_trials(path: Path) -> list[dict]:
    """The trials table at ``path`` (:func:`draw`), checked as what its producer could have
    written: the columns it writes, trials 0, 1, ... in order, each hyperparameter of its
    type and domain (:func:`imagenot.train.search.value_problem`), seeds whole numbers; and,
    where the table lies in the workflow's layout, each value one the registered space could
    draw for that trial, each seed the one it derives (:func:`_check_registered`). A failed
    check is a JobError naming the file, the trial and the key."""
    table = read_parquet(path)
    missing = [c for c in search.TRIAL_COLUMNS if c not in table.column_names]
    if missing:
        raise JobError(
            f"{path}: lacks column(s) {', '.join(missing)}, which every trials table holds; "
            f"{_DRAW_AGAIN}"
        )
    rows = table.select(list(search.TRIAL_COLUMNS)).to_pylist()
    trials = [r["trial"] for r in rows]
    if trials != list(range(len(rows))):
        raise JobError(
            f"{path}: its trials are {trials[:8]!r}{'...' if len(trials) > 8 else ''}, not "
            f"0 to {len(rows) - 1} in order; {_DRAW_AGAIN}"
        )
    for row in rows:
        for name in search.HYPERPARAMETERS:
            problem = search.value_problem(name, row[name])
            if problem:
                raise JobError(
                    f"{path}: trial {row['trial']}'s {name} is {row[name]!r}, {problem}; "
                    f"{_DRAW_AGAIN}"
                )
        if not COUNT[0](row["seed"], row):
            raise JobError(
                f"{path}: trial {row['trial']}'s seed is {row['seed']!r}, not a whole number; "
                f"{_DRAW_AGAIN}"
            )
    registered = registered_search(path)
    if registered is not None:
        _check_registered(path, rows, registered)
    return rows


def read_trial(path: Path, trial: int) -> dict:
    """Row ``trial`` of the trials table at ``path`` (checked: :func:`read_trials`)."""
    rows = read_trials(path)
    match = [r for r in rows if r["trial"] == trial]
    if not match:
        raise JobError(f"{path}: no row for trial {trial} (trials {[r['trial'] for r in rows]})")
    return match[0]


CHECKPOINT = "checkpoint.safetensors"
# the checkpoint before the newest (imagenot.train.checkpoints.previous)
PREVIOUS_CHECKPOINT = f"{CHECKPOINT}.prev"
BEST = "best.safetensors"


def trial_dir(run_dir: Path, trial: int) -> Path:
    """Where a trial keeps its checkpoint, best-validation weights and metrics.csv."""
    return run_dir / f"trial-{trial}"


def decide(records: Sequence[Mapping], rung: int, eta: int) -> dict:
    """A rung's decision from the slot results of its stage (``records``, one per slot, empty
    slots included): how many slots the next stage has (ceil(n / eta)), every trained trial's
    validation accuracy, and the trials promoted into those slots in rank order. Only trials
    still training compete (one that ended by early stopping has nothing left to train, yet
    stays a candidate for selection; one that diverged is the worst result at its rung and is
    never promoted). What :func:`halve` writes and :func:`check_decision` recomputes."""
    rows = [row for row in records if row["trial"] is not None]
    slots = search.promoted_count(len(records), eta)
    alive = {r["trial"]: r["val_accuracy"] for r in rows if r["stopped_by"] is None}
    return {
        "rung": rung,
        "eta": eta,
        "slots": slots,
        "val_accuracy": {r["trial"]: r["val_accuracy"] for r in rows},
        "promoted": search.promote(alive, eta, min(slots, len(alive))),
    }


# Decisions checked in this process, by the state of their run's files (path, inode, size,
# mtime of every decision, slot result and trials table): each rung is recomputed once however
# many slots of the next stage trace their trial to it, and again when any file changes.
_CHECKED: set[tuple] = set()


def _run_state(run_dir: Path) -> tuple:
    files = [run_dir / "trials.parquet", *run_dir.glob("halving/rung-*.json")]
    files += run_dir.glob("stage-*/slot-*.json")
    state = []
    for path in sorted(files):
        try:
            st = path.stat()
        except OSError:
            continue
        state.append((str(path), st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(state)


def check_decision(decision: Mapping, path: Path, run_dir: Path) -> None:
    """RecordError naming ``path`` when a rung's decision (:func:`halve`), read from the run at
    ``run_dir`` (``{run}/halving/rung-{rung}.json``), is not what its producer computes from
    its rung's own slots: the stage's slot results (``{run}/stage-{rung}/slot-{k}.json``, one
    per slot: the trials table's trials at rung 0, the previous rung's ``slots`` after it),
    each read with every check of a slot result (its trial traced to the previous rung in
    turn), give this very decision (:func:`decide`) under its ``eta``, which is the registered
    space's. A seal catches damage; this catches a decision resealed to promote another trial.
    The trace of the one reader of records (:func:`imagenot.train.records.check_record`)."""

    path, rung = Path(path), decision["rung"]
    key = (str(path.resolve()), _run_state(run_dir))
    if key in _CHECKED:
        return
    table = _in_run(run_dir, TRIALS)
    if rung == 0:
        require(path, table, "its run has no trials table")
        count = len(read_trials(table))
    else:
        before = _in_run(run_dir, DECISION, rung=rung - 1)
        require(path, before, f"a decision of rung {rung}, but the rung before it has no decision")
        count = read_record(before, record_kind="decision")["slots"]
    registered = registered_search(table) if table.is_file() else None
    eta = registered[2].get("halving", {}).get("eta") if registered else None
    if eta is not None and decision["eta"] != eta:
        raise RecordError(
            f"{path}: records eta {decision['eta']!r}, but the registered search halves with "
            f"eta {eta!r}: its producer could not have written it; {REFUSED}"
        )
    slots = [_in_run(run_dir, SLOT, stage=rung, slot=k) for k in range(count)]
    for slot in slots:
        require(path, slot, "the rung it decides lacks a slot result")
    # as it reads back from JSON (the ranking's trials as text), without the seal
    expected = json.loads(json.dumps(decide([read_slot(p) for p in slots], rung, decision["eta"])))
    written = {k: v for k, v in decision.items() if k != SEAL_KEY}
    if expected != written:
        differs = [k for k in RUNG_DECISION.keys if expected[k] != written.get(k)]
        shown = ", ".join(f"{k} {written.get(k)!r}" for k in differs)
        what = ", ".join(f"{k} {expected[k]!r}" for k in differs)
        raise RecordError(
            f"{path}: records {shown}, but the {count} slot results of stage {rung} give "
            f"{what}: its producer could not have written it; {REFUSED}"
        )
    _CHECKED.add(key)


def slot_trial(slot: int, promoted: Path | None, *, traced: bool = False) -> int | None:
    """The trial a slot trains: the slot itself at stage 0, else the slot-th trial the previous
    rung promoted (None: fewer trials were left to promote than slots). The rung's decision is
    checked (:func:`imagenot.train.records.read_record`; ``traced``: also against its rung's
    slots, :func:`check_decision`)."""
    if promoted is None:
        return slot
    chosen = read_record(promoted, record_kind="decision", traced=traced)["promoted"]
    return chosen[slot] if slot < len(chosen) else None


def _in_run(run_dir: Path, pattern: str, **wildcards) -> Path:
    """A file of the run at ``run_dir`` (``{dataset}/{protocol}/{model}``'s folder): ``pattern``
    (a :mod:`imagenot.train.paths` pattern under :data:`~imagenot.train.paths.RUN`)."""

    return Path(run_dir) / pattern.removeprefix(f"{RUN}/").format(**wildcards)


def _trial_rows(table: Path) -> list[dict] | None:
    """The rows of the trials table at ``table`` (:func:`read_trials`); where the file is
    absent but the search is registered (the drawing job reruns after an amendment, and
    Snakemake removed its output first, while registering reads the slots as evidence), the
    rows the registered definition draws, which are what the job writes again; None where
    neither is there."""
    if table.is_file():
        return read_trials(table)
    try:
        registered = registered_search(table)
    except JobError:  # no record registers it: nothing to trace the trial to
        return None
    if registered is None:
        return None
    dataset, protocol, definition = registered
    trials = search.draw_trials(definition, definition["seed"], dataset, protocol)
    return [{name: row[name] for name in search.TRIAL_COLUMNS} for row in trials]


def check_slot_provenance(record: Mapping, where, run_dir: Path) -> None:
    """RecordError naming ``where`` when a slot's result is not what its producer
    (``train-trial``, :func:`write_empty_slot`) could have written in the run at ``run_dir``:
    its trial is the one its slot trains (the slot itself at stage 0, else the one the previous
    rung's decision promoted into it, or none), a trial of the run's trials table
    (:func:`read_trials`: itself what the registered space could draw) with that trial's
    hyperparameters and seed. A seal catches damage; this catches a record resealed with
    values no producer writes."""

    stage, slot, trial = record["stage"], record["slot"], record["trial"]
    decision = _in_run(run_dir, DECISION, rung=stage - 1) if stage > 0 else None
    if decision is not None:
        require(where, decision, f"a slot of stage {stage}, but its rung has no decision")
    expected = slot_trial(slot, decision, traced=True)
    if trial != expected:
        by = f"{decision} promoted {expected!r}" if decision else f"stage 0 trains trial {slot}"
        raise RecordError(
            f"{where}: records trial {trial!r}, but {by} into slot {slot}: its producer "
            f"could not have written it; {REFUSED}"
        )
    if trial is None:
        return
    table = _in_run(run_dir, TRIALS)
    found = _trial_rows(table)
    if found is None:
        raise RecordError(
            f"{where}: records trial {trial}, but its run has no trials table ({table}), so "
            f"its trial cannot be traced; {REFUSED}"
        )
    rows = {row["trial"]: row for row in found}
    row = rows.get(trial)
    if row is None:
        raise RecordError(
            f"{where}: records trial {trial}, which {table} does not hold (trials 0 to "
            f"{len(rows) - 1}): its producer could not have written it; {REFUSED}"
        )
    source = f"trial {trial} of {table} has"
    check_copy(
        where, "hyperparameters", record["hyperparameters"], search.hyperparameters_of(row), source
    )
    check_copy(where, "seed", record["seed"], row["seed"], source)


def trace_selection(chosen: Mapping, path: Path, run_dir: Path) -> None:
    """JobError or RecordError naming ``path`` when a selection in the run at ``run_dir`` does
    not copy the very slot result that lies there, traced to what its producer could have
    written (:func:`check_slot_provenance`): a hand-edited ``trial`` would train another
    trial's hyperparameters under the selected one's numbers. The trace of the one reader of
    records (:func:`imagenot.train.records.check_record`)."""

    result = chosen["result"]
    check_slot_provenance(result, f"{path} (its result)", run_dir)
    slot = _in_run(run_dir, SLOT, stage=result["stage"], slot=result["slot"])
    copied = read_json(slot) if slot.is_file() else None
    if copied != result:
        raise JobError(
            f"{path}: its result is not the slot result it copies ({slot} "
            f"{'differs' if slot.is_file() else 'is missing'}); delete it and run the "
            "workflow again"
        )


def write_empty_slot(stage: int, slot: int, out: Path) -> dict:
    """A slot no trial was promoted into (the others had already ended): nothing to train. Sealed
    like every slot's result (:func:`imagenot.train.records.write_record`), so that a reader
    refuses any slot result that its producer did not write."""

    return write_record({"stage": stage, "slot": slot, "trial": None}, out, "slot")


def _drop(run_dir: Path, trial: int, *names: str) -> None:
    for name in names:
        (trial_dir(run_dir, trial) / name).unlink(missing_ok=True)


def read_slot(path: Path) -> dict:
    """A slot's result, read as every record is (:func:`imagenot.train.records.read_record`:
    sealed, then, in a run's layout, against what its producer could have written,
    :func:`check_slot_provenance`)."""
    try:
        return read_record(path, record_kind="slot")
    except OSError as exc:
        raise JobError(f"{path}: unreadable trial result ({exc})") from None


def halve(results: Sequence[Path], rung: int, eta: int, out: Path) -> dict:
    """The trials promoted past a rung, in rank order, one per slot of the next stage
    (:func:`decide`), written sealed (:func:`imagenot.train.records.write_record`), as every
    record a later job reads. The trials not promoted end here: their checkpoints and best
    weights are deleted."""

    records = [read_slot(path) for path in results]
    for path, record in zip(results, records, strict=True):
        if record["stage"] != rung:  # the rule hands the rung's own stage; a typed command may not
            raise JobError(
                f"{path}: a result of stage {record['stage']!r}, handed to rung {rung}'s "
                f"halving: a rung ranks the slots of its own stage (stage-{rung})"
            )
    decision = decide(records, rung, eta)
    if results:
        run = Path(results[0]).parent.parent
        alive = {r["trial"] for r in records if r["trial"] is not None and r["stopped_by"] is None}
        for trial in alive - set(decision["promoted"]):
            _drop(run, trial, CHECKPOINT, PREVIOUS_CHECKPOINT, BEST)
    return write_record(decision, out, "decision")


def select(results: Sequence[Path], out: Path) -> dict:
    """The best trial by validation accuracy, over each trial's latest result. Every other
    trial's leftover weights are deleted (the search is over)."""
    latest = search.latest_results([read_slot(p) for p in results])
    if latest and all(r.get("stopped_by") == search.DIVERGED for r in latest.values()):
        raise JobError(
            f"{results[0]}: every trial's loss became NaN or infinite (stopped_by "
            f"{search.DIVERGED}): lower the learning rates of the experiment's space "
            "(train.spaces.<space>.hyperparameters.lr)"
        )
    # a trial that diverged ranks last (search.standing), whatever it reached before
    best = search.best_trial({t: search.standing(r) for t, r in latest.items()})
    selection = {
        "trial": best,
        "val_accuracy": latest[best]["val_accuracy"],
        "hyperparameters": latest[best]["hyperparameters"],
        "result": latest[best],
    }
    write_json(selection, out)
    if results:
        run = Path(results[0]).parent.parent
        for trial in latest:
            _drop(run, trial, CHECKPOINT, PREVIOUS_CHECKPOINT, *(() if trial == best else (BEST,)))
    return selection
