"""The preregistration record: spaces and budgets fixed before results exist, amendments logged.

``results/train/preregistration.json`` holds, per experiment (``{dataset}/{protocol}``), the
registered search definition (space, budget, epochs, patience, halving, seeds) and its hash, the
models that drew trials, and every amendment. Once results of an experiment exist, a changed
definition is refused unless the config records an amendment naming a model whose registered
trials all ended at chance (docs/method.md section 5, guardrail 4); the evidence is checked here
against the trial results, then archived in the record.
"""

from __future__ import annotations

import copy
import fcntl
import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from imagenot.core.io import write_json
from imagenot.train import search
from imagenot.train.records import SLOT_PATTERN, path_identity, read_registration
from imagenot.train.search import at_chance, canonical_hash, latest_results
from imagenot.train.trials import read_slot, write_trials

if TYPE_CHECKING:
    from imagenot.train.settings import DrawSettings

log = logging.getLogger(__name__)


class PreregistrationError(ValueError):
    """A search definition changed after results exist, without a valid amendment.

    A ValueError (the config asks for a change the guardrail refuses), so that
    ``imagenot.cli.main`` prints it as one line naming the key, with no traceback."""


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def trial_results(experiment_dir: Path, model: str | None) -> list[dict]:
    """The latest result of every trial under ``experiment_dir`` that has one (its highest
    stage's slot result, ``{model}/stage-{k}/slot-{s}.json``), per model, in trial order;
    ``model``: that model's alone, None: every model's."""
    out = []
    for model_dir in sorted(experiment_dir.glob(model or "*")):
        # checked as the selection checks them: an amendment's evidence is their numbers
        # slot results alone, not what lies beside them (a failed job's status file)
        slots = sorted(
            p for p in model_dir.glob("stage-*/slot-*.json") if path_identity(p, SLOT_PATTERN)
        )
        rows = [read_slot(path) for path in slots]
        out += latest_results(rows).values()
    return out


def _evidence(experiment_dir: Path, model: str, budget: int) -> list[float]:
    """Validation accuracies of ``model``'s registered trials, if every one is at chance."""
    results = trial_results(experiment_dir, model)
    where = f"amendment for model {model!r} in {experiment_dir}"
    if len(results) < budget:
        raise PreregistrationError(
            f"{where}: {len(results)} of its {budget} trials have results; run them all first"
        )
    above = [r for r in results if not at_chance(r["val_accuracy"], r["num_classes"], r["n_val"])]
    if above:
        accuracies = [round(r["val_accuracy"], 2) for r in above]
        raise PreregistrationError(
            f"{where} refused: trial(s) {[r['trial'] for r in above]} trained above chance "
            f"(val accuracy {accuracies}%)"
        )
    return [r["val_accuracy"] for r in results]


def register(
    record_path: Path,
    experiment: str,
    definition: Mapping,
    model: str,
    amendments: Sequence[Mapping],
    experiment_dir: Path,
    model_settings: Mapping | None = None,
) -> dict:
    """Check ``definition`` of ``experiment`` (shared by its models) and ``model_settings`` (this
    model's own, e.g. its batch size) against the record and update it; return the entry.

    The trials-drawing job calls this, under the record's lock; :func:`check_planned` runs the
    same decision for every drawing job before any runs (:func:`_registered` is both)."""
    with _locked(record_path):
        record = read_registration(record_path)
        entry = _registered(
            record, experiment, definition, model, amendments, experiment_dir, model_settings
        )
        record["experiments"][experiment] = entry
        record["hash"] = canonical_hash(
            {k: (v["hash"], v["models"]) for k, v in sorted(record["experiments"].items())}
        )
        write_json(record, record_path)
    return entry


def check_planned(record_path: Path, registrations: Sequence, train_dir: Path) -> None:
    """Refuse, before any job runs, what a trials-drawing job would refuse; write nothing.

    ``registrations``: the drawing jobs' settings (``imagenot.train.settings.DrawSettings``),
    checked in order against an
    in-memory copy of the record, as the jobs would update it. Run at planning time because a
    refusal inside the job costs that model's ``trials.parquet`` (Snakemake removes a failed
    job's outputs), so reverting the config would retrain the model. Cheap at paper scale: the
    record is read once, and trial results are read only for a changed definition."""
    if not record_path.is_file():
        return
    record = read_registration(record_path)
    for r in registrations:
        drawn = (r.experiment, r.definition, r.model, r.amendments)
        where = train_dir / r.experiment
        record["experiments"][r.experiment] = _registered(record, *drawn, where, r.model_settings)


def _registered(
    record: dict,
    experiment: str,
    definition: Mapping,
    model: str,
    amendments: Sequence[Mapping],
    experiment_dir: Path,
    model_settings: Mapping | None,
) -> dict:
    """The record's entry of ``experiment`` once ``model`` is registered (``record`` itself is
    left unchanged).

    No entry, or no results yet: (re)register. Same hash: note the model. Different hash with
    results: apply the config amendment that names this experiment (checking its evidence), or
    raise PreregistrationError saying how to proceed. A model's own settings are guarded the
    same way against that model's results, with an amendment naming that model."""
    digest = canonical_hash(definition)
    settings = dict(model_settings or {})
    entry = copy.deepcopy(record["experiments"].get(experiment))
    if entry is not None and entry["hash"] != digest and trial_results(experiment_dir, None):
        what = (
            f"the search definition of {experiment} (registered hash {entry['hash'][:12]}, now "
            f"{digest[:12]}; spaces and budgets are pre-registered)"
        )
        change = {"from_hash": entry["hash"], "to_hash": digest}
        change["previous_definition"] = entry["definition"]
        amended = _amend(entry, experiment, amendments, experiment_dir, None, what, change)
        history = [*entry["amendments"], amended]
        # the entry anew: the models' own settings are registered again with the definition
        entry = {"definition": definition, "hash": digest, "models": entry["models"]}
        entry["amendments"] = history
    elif entry is None or entry["hash"] != digest:
        entry = {"definition": definition, "hash": digest, "models": [], "amendments": []}
    recorded = entry.setdefault("model_settings", {}).get(model)
    if recorded not in (None, settings) and trial_results(experiment_dir, model):
        what = f"the settings of model {model!r} in {experiment} (registered {recorded}, now "
        what += f"{settings})"
        change = {"previous_model_settings": recorded, "model_settings": settings}
        entry["amendments"].append(
            _amend(entry, experiment, amendments, experiment_dir, model, what, change)
        )
    entry["model_settings"][model] = settings
    entry["models"] = sorted(set(entry["models"]) | {model})
    return entry


def _unused(amendments: Sequence[Mapping], entry: Mapping, experiment: str) -> list[Mapping]:
    """The config's amendments of ``experiment`` not yet recorded: each covers one change."""
    used = {(a["model"], a["reason"]) for a in entry["amendments"]}
    return [
        a
        for a in amendments
        if a["experiment"] == experiment and (a["model"], a["reason"]) not in used
    ]


def _amend(entry, experiment, amendments, experiment_dir, model, what, change) -> dict:
    """The history entry of a change (``change``: its keys) to ``experiment``'s search
    definition (``model`` None: a new amendment of any model but of scope model covers it, and
    names the model) or to ``model``'s own settings (a new amendment naming that model); else
    PreregistrationError naming ``what`` changed and how to proceed."""
    unused = _unused(amendments, entry, experiment)
    # a model-scope amendment is about one model's own settings: it cannot cover the space
    matching = [a for a in unused if (a["model"] == model if model else a["scope"] != "model")]
    if not matching:
        names = f"model: {model}, scope: model" if model else "the model that did not train"
        raise PreregistrationError(
            f"{what} changed after results exist. Revert the change, or record a new amendment "
            f"in config train.amendments with experiment: {experiment}, {names} and a reason "
            f"(allowed only if all that model's trials ended at chance; an amendment already "
            f"recorded does not cover a further change)."
        )
    amendment = matching[-1]
    evidence = _evidence(experiment_dir, amendment["model"], entry["definition"]["budget"])
    named = {"model": amendment["model"], "reason": amendment["reason"]}
    return {**named, **change, "evidence_val_accuracy": evidence}


def _amendment_text(amendment: Mapping) -> str:
    """ "model: reason (what changed; trial val accuracies [...])" for the report."""
    a = amendment
    change = (
        f"{a['from_hash'][:12]} -> {a['to_hash'][:12]}"
        if "from_hash" in a  # the experiment's definition, else one model's own settings
        else f"settings {a['previous_model_settings']} -> {a['model_settings']}"
    )
    accuracies = [round(v, 2) for v in a["evidence_val_accuracy"]]
    return f"{a['model']}: {a['reason']} ({change}; trial val accuracies {accuracies})"


def record_table(record_path: str | os.PathLike) -> list[dict]:
    """One row per experiment of the record (for the report): its definition hash, the models
    registered, the budget, and every amendment as text (``_amendment_text``), or "none"."""
    record = read_registration(Path(record_path))
    rows = []
    for name, entry in sorted(record["experiments"].items()):
        amendments = [_amendment_text(a) for a in entry["amendments"]]
        rows.append(
            {
                "experiment": name,
                "definition_hash": entry["hash"][:12],
                "models": " ".join(entry["models"]),
                "budget": entry["definition"]["budget"],
                "amendments": len(amendments),
                "amendment_details": " | ".join(amendments) or "none",
            }
        )
    return rows


def draw(settings: DrawSettings, record: Path, out: Path) -> None:
    """Check/record the preregistration in ``record``, then write the experiment's trials
    table ``out``, carrying the definition it is drawn from (:func:`write_trials`), which is
    checked to be the one the record registers: the later jobs read the table alone."""
    s = settings
    dataset, protocol = s.experiment.split("/", 1)
    entry = register(
        record, s.experiment, dict(s.definition), s.model, s.amendments, out.parent.parent,
        s.model_settings,
    )  # fmt: skip
    if canonical_hash(entry["definition"]) != canonical_hash(s.definition):
        raise PreregistrationError(
            f"{record}: the definition it registers for {s.experiment} is not the one its hash "
            f"{entry['hash'][:12]} names (edited after writing); restore the record (a copy)"
        )
    trials = search.draw_trials(s.definition, s.definition["seed"], dataset, protocol)
    write_trials(trials, s.experiment, s.definition, out)
    log.info("%s %s: %d trials drawn and pre-registered", s.experiment, s.model, len(trials))
