"""The train stage's bookkeeping jobs: pre-registration and trial drawing, successive-halving
decisions and the selection of the best trial. Light: no torch import (they run as local jobs).

They also delete what a trial no longer needs: the checkpoint and weights of a trial that a
rung drops, and after selection the weights of every trial but the selected one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from imagenot.io import read_json, read_parquet, write_json, write_parquet
from imagenot.train import search
from imagenot.train.paths import DECISION
from imagenot.train.prereg import register

if TYPE_CHECKING:
    from imagenot.train.settings import DrawSettings

log = logging.getLogger(__name__)


class JobError(ValueError):
    """Bad job input (missing trial, malformed table, every trial diverged): a ValueError, so
    the command ends in one line naming it (``imagenot.cli``)."""


def draw(settings: DrawSettings, record: Path, out: Path) -> None:
    """Check/record the preregistration in ``record``, then write the experiment's trials
    table ``out``."""
    s = settings
    dataset, protocol = s.experiment.split("/", 1)
    register(
        record, s.experiment, dict(s.definition), s.model, s.amendments, out.parent.parent,
        s.model_settings,
    )  # fmt: skip
    trials = search.draw_trials(s.definition, s.definition["seed"], dataset, protocol)
    write_parquet(pa.table(search.trial_columns(trials)), out)
    log.info("%s %s: %d trials drawn and pre-registered", s.experiment, s.model, len(trials))


def read_trial(path: Path, trial: int) -> dict:
    rows = read_parquet(path).to_pylist()
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


# What :func:`halve` writes into every rung's decision: a decision without one of these was not
# written by it.
DECISION_KEYS = ("rung", "eta", "slots", "val_accuracy", "promoted")
_AGAIN = "delete it and run the workflow again (it reruns the rung)"


def _count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_decision(path: Path) -> dict:
    """A rung's decision (:func:`halve`), checked: it holds every key halve writes, its counts
    are whole numbers, its ranking maps trials to accuracies and its rung is its path's
    (``halving/rung-{rung}.json``, wherever it lies); a missing or malformed key is a JobError
    naming the file and the key (a decision is never read leniently: a missing ranking or slot
    count would let any promoted list through)."""
    decision = read_json(path)
    if not isinstance(decision, dict):
        raise JobError(f"{path}: not a rung decision (a {type(decision).__name__}); {_AGAIN}")
    missing = [k for k in DECISION_KEYS if k not in decision]
    if missing:
        raise JobError(
            f"{path}: lacks key(s) {', '.join(missing)}, which every rung decision holds; {_AGAIN}"
        )
    for key in ("rung", "eta", "slots"):
        if not _count(decision[key]):
            raise JobError(f"{path}: {key} is {decision[key]!r}, not a whole number; {_AGAIN}")
    from imagenot.train.records import is_percent, path_identity

    ranked = decision["val_accuracy"]
    if not isinstance(ranked, dict) or not all(
        str(t).isdigit() and (is_percent(a) or a == -1.0) for t, a in ranked.items()
    ):  # -1: a trial that diverged before its first validation (imagenot.train.records)
        raise JobError(
            f"{path}: val_accuracy is {ranked!r}, not a map of trials to accuracies; {_AGAIN}"
        )
    found = path_identity(path, DECISION[DECISION.index("halving/") :])
    if found is not None and found["rung"] != str(decision["rung"]):
        raise JobError(
            f"{path}: records rung {decision['rung']!r}, but its path says rung "
            f"{found['rung']!r}: a rung's decision is used only under its own path; {_AGAIN}"
        )
    return decision


def slot_trial(slot: int, promoted: Path | None) -> int | None:
    """The trial a slot trains: the slot itself at stage 0, else the slot-th trial the previous
    rung promoted (None: fewer trials were left to promote than slots). The rung's decision is
    checked (:func:`read_decision`): its promoted trials are distinct trials it ranked, no more
    than its slots."""
    if promoted is None:
        return slot
    decision = read_decision(promoted)
    chosen = decision["promoted"]
    ranked = {str(t) for t in decision["val_accuracy"]}
    if (
        not isinstance(chosen, list)
        or not all(_count(t) for t in chosen)
        or len(set(chosen)) != len(chosen)
        or not {str(t) for t in chosen} <= ranked
        or len(chosen) > decision["slots"]
    ):
        raise JobError(
            f"{promoted}: promoted {chosen!r} is not a list of distinct trials the rung ranked, "
            f"one per slot; {_AGAIN}"
        )
    return chosen[slot] if slot < len(chosen) else None


def read_selection(path: Path) -> dict:
    """The selection at ``path``, checked: its trial, validation accuracy and hyperparameters
    are those of the trial's own sealed result it copies (a hand-edited ``trial`` would train
    another trial's hyperparameters under the selected one's numbers)."""
    from imagenot.train.records import check_record

    chosen = read_json(path)
    result = chosen.get("result")
    if not isinstance(result, dict):
        raise JobError(f"{path}: holds no trial result (key result); delete it and run again")
    check_record(result, f"{path} (its result)", record_kind="slot")
    for key in ("trial", "val_accuracy", "hyperparameters"):
        if chosen.get(key) != result.get(key):
            raise JobError(
                f"{path}: {key} is {chosen.get(key)!r}, but the trial result it copies records "
                f"{result.get(key)!r}; delete it and run the workflow again"
            )
    from imagenot.train.paths import TRIAL_SELECTION
    from imagenot.train.records import path_identity

    found = path_identity(path, TRIAL_SELECTION[TRIAL_SELECTION.index("{model}") :])
    if found is not None and result.get("model") is not None and result["model"] != found["model"]:
        raise JobError(
            f"{path}: selects a trial of model {result['model']!r}, but its path says model "
            f"{found['model']!r}: a selection is used only under its own model's path; delete "
            "it and run the workflow again"
        )
    return chosen


def write_empty_slot(stage: int, slot: int, out: Path) -> dict:
    """A slot no trial was promoted into (the others had already ended): nothing to train. Sealed
    like every slot's result (:func:`imagenot.train.records.write_record`), so that a reader
    refuses any slot result that its producer did not write."""
    from imagenot.train.records import write_record

    return write_record({"stage": stage, "slot": slot, "trial": None}, out, "slot")


def _drop(run_dir: Path, trial: int, *names: str) -> None:
    for name in names:
        (trial_dir(run_dir, trial) / name).unlink(missing_ok=True)


def _read(path: Path) -> dict:
    """A slot's result, checked (its seal and numbers: :mod:`imagenot.train.records`)."""
    from imagenot.train.records import check_record

    try:
        return check_record(read_json(path), path, record_kind="slot")
    except OSError as exc:
        raise JobError(f"{path}: unreadable trial result ({exc})") from None


def halve(results: Sequence[Path], rung: int, eta: int, out: Path) -> dict:
    """The trials promoted past a rung, in rank order, one per slot of the next stage.

    Only trials still training compete (one that ended by early stopping has nothing left to
    train, yet stays a candidate for selection; one that diverged is the worst result at its
    rung and is never promoted). The trials not promoted end here: their checkpoints and best
    weights are deleted.
    """
    records = [_read(path) for path in results]
    for path, record in zip(results, records, strict=True):
        if record["stage"] != rung:  # the rule hands the rung's own stage; a typed command may not
            raise JobError(
                f"{path}: a result of stage {record['stage']!r}, handed to rung {rung}'s "
                f"halving: a rung ranks the slots of its own stage (stage-{rung})"
            )
    rows = [row for row in records if row["trial"] is not None]
    slots = search.promoted_count(len(results), eta)
    alive = {r["trial"]: r["val_accuracy"] for r in rows if r["stopped_by"] is None}
    promoted = search.promote(alive, eta, min(slots, len(alive)))
    if results:
        run = Path(results[0]).parent.parent
        for trial in set(alive) - set(promoted):
            _drop(run, trial, CHECKPOINT, PREVIOUS_CHECKPOINT, BEST)
    decision = {
        "rung": rung,
        "eta": eta,
        "slots": slots,
        "val_accuracy": {r["trial"]: r["val_accuracy"] for r in rows},
        "promoted": promoted,
    }
    write_json(decision, out)
    return decision


def select(results: Sequence[Path], out: Path) -> dict:
    """The best trial by validation accuracy, over each trial's latest result. Every other
    trial's leftover weights are deleted (the search is over)."""
    latest = search.latest_results([_read(p) for p in results])
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
