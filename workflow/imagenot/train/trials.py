"""The train stage's bookkeeping jobs: pre-registration and trial drawing, successive-halving
decisions and the selection of the best trial. Light: no torch import (they run as local jobs).

They also delete what a trial no longer needs: the checkpoint and weights of a trial that a
rung drops, and after selection the weights of every trial but the selected one.

The trials table is checked as what its producer could have written (against the registered
search it carries, sealed: the drawing's own computation runs again, kept beside it). The
records these jobs write and read (a slot's result, a rung's decision, the selection) are
sealed records
(:mod:`imagenot.train.records`): each job derives what it writes from records read by the one
reader (a rung's decision from its slots' results, the selection from every slot's), and the
writer checks its numbers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import pyarrow as pa

from imagenot.core.io import ArtefactError, open_parquet, read_parquet, write_parquet
from imagenot.core.settings import to_json
from imagenot.train import records, search
from imagenot.train.paths import PREREGISTRATION, TRAIN, TRIALS, remove_checkpoint
from imagenot.train.records import read_record, write_record

log = logging.getLogger(__name__)


class JobError(ValueError):
    """Bad job input (missing trial, malformed table, every trial diverged): a ValueError, so
    the command ends in one line naming it (``imagenot.cli``)."""


_DRAW_AGAIN = "delete it and run the workflow again (it draws the trials again)"
# The key of a trials table's metadata that carries its registered search (records kind "search")
SEARCH_KEY = b"imagenot.registered_search"


def write_trials(rows: Sequence[Mapping], experiment: str, definition: Mapping, out: Path) -> None:
    """Write the trials table ``out`` (``rows``, :data:`imagenot.train.search.TRIAL_COLUMNS`),
    carrying the registered search they were drawn from (``experiment``'s ``definition``) under
    :data:`SEARCH_KEY` of its metadata, sealed (:func:`imagenot.train.records.seal`)."""
    dataset, protocol = experiment.split("/", 1)
    carried = records.seal({"dataset": dataset, "protocol": protocol, "definition": definition})
    table = pa.table(search.trial_columns(rows))
    write_parquet(table.replace_schema_metadata({SEARCH_KEY: to_json(carried)}), out)


def registered_search(
    path: Path, metadata: Mapping | None = None
) -> tuple[str, str, Mapping] | None:
    """(dataset, protocol, registered definition) of the trials table at ``path``: the search
    it carries (:func:`write_trials`), read by the one reader of records (its seal, and its
    dataset and protocol those of the path in the workflow's layout). A table that carries none
    (drawn by imagenot 0.6.1 or earlier: a finished run's, read again when a seed is added) is
    read against the preregistration record beside the results, as its draw registered it,
    when it lies in the workflow's layout (:data:`imagenot.train.paths.TRIALS`, in whichever
    working directory); None outside it. ``metadata``: the table's, where the caller has read
    the table (else its footer is read here)."""
    path = Path(path)
    if metadata is None and path.is_file():
        metadata = open_parquet(path).schema_arrow.metadata
    carried = (metadata or {}).get(SEARCH_KEY)
    if carried is not None:
        try:
            record = json.loads(carried)
        except ValueError:
            raise records.RecordError(
                f"{path}: its {SEARCH_KEY.decode()} is not JSON; {records.REFUSED}"
            ) from None
        found = records.check_record(record, path, record_kind="search")
        return found["dataset"], found["protocol"], found["definition"]
    found = records.path_identity(path, TRIALS)
    if found is None:
        return None
    record = path.parents[3] / PREREGISTRATION.removeprefix(f"{TRAIN}/")
    experiment = f"{found['dataset']}/{found['protocol']}"
    entry = records.read_registration(record)["experiments"].get(experiment)
    if not isinstance(entry, Mapping) or not isinstance(entry.get("definition"), Mapping):
        raise JobError(
            f"{path}: the preregistration record {record} registers no search of {experiment}, "
            f"so these trials cannot be traced to a registered space; {_DRAW_AGAIN}"
        )
    return found["dataset"], found["protocol"], entry["definition"]


def read_trials(path: Path) -> list[dict]:
    """The trials table at ``path`` (:func:`write_trials`), checked as what its producer could
    have written: the columns it writes, trials 0, 1, ... in order, each hyperparameter of its
    type and domain (:func:`imagenot.train.search.value_problem`), seeds whole numbers; and,
    where its registered search is known (:func:`registered_search`), as many trials as that
    search draws, each value one its space could draw for that trial
    (:func:`imagenot.train.search.spec_problem`), each seed the one it derives. A failed check
    is a JobError naming the file, the trial and the key; a missing column or a damaged file,
    the parquet reader's error naming them (:func:`imagenot.core.io.read_parquet`), with what
    to do."""
    try:
        table = read_parquet(path, list(search.TRIAL_COLUMNS))
    except ArtefactError as exc:  # damaged, or lacking a column its producer writes
        raise JobError(f"{exc}; {_DRAW_AGAIN}") from None
    rows = table.to_pylist()
    trials = [r["trial"] for r in rows]
    if trials != list(range(len(rows))):
        raise JobError(
            f"{path}: its trials are {trials[:8]!r}{'...' if len(trials) > 8 else ''}, not "
            f"0 to {len(rows) - 1} in order; {_DRAW_AGAIN}"
        )
    registered = registered_search(path, table.schema.metadata or {})
    dataset, protocol, definition = registered or (None, None, {})
    space = definition.get("hyperparameters", {})
    points, budget = search.grid_points(space), definition.get("budget")
    if registered is not None and len(rows) != budget:
        raise JobError(
            f"{path}: holds {len(rows)} trials, but the registered search of {dataset}/"
            f"{protocol} draws {budget}; {_DRAW_AGAIN}"
        )
    for row in rows:
        trial = row["trial"]
        for name in (*search.HYPERPARAMETERS, "seed"):
            problem = _value_problem(name, row, space, points[trial] if points[0] else {})
            if problem is None and name == "seed" and registered is not None:
                seed = search.stable_int(definition.get("seed"), dataset, protocol, "trial", trial)
                problem = (
                    f"but the registered search gives it {seed}" if row[name] != seed else None
                )
            if problem:
                raise JobError(
                    f"{path}: trial {trial}'s {name} is {row[name]!r}, {problem}; {_DRAW_AGAIN}"
                )
    return rows


def _value_problem(name: str, row: Mapping, space: Mapping, grid: Mapping) -> str | None:
    """What is wrong with ``row[name]``: of any space (:func:`imagenot.train.search.value_problem`;
    a seed, a whole number), then of ``space`` (what it could draw for the row's trial, whose
    grid point is ``grid``: :func:`imagenot.train.search.spec_problem`)."""
    value = row[name]
    if name == "seed":
        return None if records.COUNT[0](value, row) else "not a whole number"
    problem = search.value_problem(name, value)
    if problem is None and name in space:
        return search.spec_problem(name, value, space[name], grid.get(name))
    return problem


def read_trial(path: Path, trial: int) -> dict:
    """Row ``trial`` of the trials table at ``path`` (checked: :func:`read_trials`)."""
    rows = read_trials(path)  # trials 0, 1, ... in order: a trial is its row's index
    if not 0 <= trial < len(rows):
        raise JobError(f"{path}: no row for trial {trial} (trials 0 to {len(rows) - 1})")
    return rows[trial]


CHECKPOINT = "checkpoint.safetensors"
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
    never promoted). What :func:`halve` writes."""
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


def slot_trial(slot: int, promoted: Path | None) -> int | None:
    """The trial a slot trains: the slot itself at stage 0, else the slot-th trial the previous
    rung promoted (None: fewer trials were left to promote than slots), read from the rung's
    decision (:func:`imagenot.train.records.read_record`)."""
    if promoted is None:
        return slot
    chosen = read_record(promoted, record_kind="decision")["promoted"]
    return chosen[slot] if slot < len(chosen) else None


def write_empty_slot(stage: int, slot: int, out: Path) -> dict:
    """A slot no trial was promoted into (the others had already ended): nothing to train. Sealed
    like every slot's result (:func:`imagenot.train.records.write_record`), so that a reader
    refuses any slot result that its producer did not write."""

    return write_record({"stage": stage, "slot": slot, "trial": None}, out, "slot")


def drop(folder: Path, best: bool = True) -> None:
    """Delete the checkpoints of a trial's or final run's ``folder`` (it trains no further)
    and with ``best`` its best weights."""
    remove_checkpoint(folder / CHECKPOINT)
    if best:
        (folder / BEST).unlink(missing_ok=True)


def read_slot(path: Path) -> dict:
    """A slot's result, read as every record is (:func:`imagenot.train.records.read_record`)."""
    try:
        return read_record(path, record_kind="slot")
    except OSError as exc:
        raise JobError(f"{path}: unreadable trial result ({exc})") from None


def halve(results: Sequence[Path], rung: int, eta: int, out: Path) -> dict:
    """The trials promoted past a rung, in rank order, one per slot of the next stage
    (:func:`decide`, from the rung's slot results as read, :func:`read_slot`), written sealed
    (:func:`imagenot.train.records.write_record`), as every record a later job reads. The
    trials not promoted end here: their checkpoints and best weights are deleted."""

    slots = [read_slot(path) for path in results]
    for path, slot in zip(results, slots, strict=True):
        if slot["stage"] != rung:  # the rule hands the rung's own stage; a typed command may not
            raise JobError(
                f"{path}: a result of stage {slot['stage']!r}, handed to rung {rung}'s "
                f"halving: a rung ranks the slots of its own stage (stage-{rung})"
            )
    decision = decide(slots, rung, eta)
    alive = {r["trial"] for r in slots if r["trial"] is not None and r["stopped_by"] is None}
    _drop_trials(results, alive - set(decision["promoted"]))
    return write_record(decision, out, "decision")


def _drop_trials(results: Sequence[Path], trials, keep_best: int | None = None) -> None:
    """Delete the checkpoints and best weights (but ``keep_best``'s) of ``trials`` of the run
    whose slot ``results`` these are."""
    for trial in trials:
        drop(trial_dir(Path(results[0]).parent.parent, trial), best=trial != keep_best)


def select(results: Sequence[Path], out: Path) -> dict:
    """The best trial by validation accuracy, over each trial's latest result (each read as a
    slot's result is, :func:`read_slot`), written sealed with a copy of that result
    (:func:`imagenot.train.records.write_record`). Every other trial's leftover weights are
    deleted (the search is over)."""
    latest = search.latest_results([read_slot(p) for p in results])
    if latest and all(r.get("stopped_by") == search.DIVERGED for r in latest.values()):
        raise JobError(
            f"{results[0]}: every trial's loss became NaN or infinite (stopped_by "
            f"{search.DIVERGED}): lower train.spaces.<space>.hyperparameters.lr"
        )
    # a trial that diverged ranks last (search.standing), whatever it reached before
    best = search.best_trial({t: search.standing(r) for t, r in latest.items()})
    chosen, copied = latest[best], ("model", "val_accuracy", "hyperparameters")
    record = {"trial": best, **{k: chosen[k] for k in copied}, "result": chosen}
    selection = write_record(record, out, "selection")
    _drop_trials(results, latest, keep_best=best)
    return selection
