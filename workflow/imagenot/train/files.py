"""The files of the train stage's steps, by role (:mod:`imagenot.core.files`): drawing an
experiment's trials, a trial's slot, a halving rung's decision, the selection, a final run, a
TL backbone's features, a published weights' run, the preregistration table and the preflight.

A training job keeps its work files beside the outputs its rule lists, where a retry finds
them: a slot's trial folder (``trial-{id}/``: its checkpoint, best weights and
``metrics.csv``) two levels above its result, a final run's checkpoint, best weights and
``metrics.csv`` beside its weights; its failure status (``imagenot.train.failfast``) beside its
result (a slot) or its folder (a final run, the features).

A job reads the dataset through its manifest, classes and fingerprint, each a role. The shards
are no role: a dataset folder holds many, and the manifest lists them (each row's ``shard``), a
build writing it after every shard it lists (:mod:`imagenot.acquire.dataset`), so the manifest
stands for them; the classes file is checked to be the one beside the manifest
(:func:`imagenot.core.dataset.folder_of`), the folder the shards are read from.

What each job reads: a draw, the preregistration record (below) and, as an amendment's
evidence, the experiment's slot results made so far (:func:`imagenot.train.prereg.trial_results`:
jobs downstream of the draw, which no rule input can name without a cycle); a trial or final
run, its trials table, which carries the registered search it was drawn from
(:func:`imagenot.train.trials.write_trials`: sealed, checked by the draw to be the record's);
a halving, its stage's slot results; the selection, every slot result; the preregistration
table, the record once every draw is done (its rule lists every trials table). A trials table
that carries no search (drawn by imagenot 0.6.1 or earlier) is read against the record
beside the results (:func:`imagenot.train.trials.registered_search`), a read of no rule input
kept so that a finished run's later jobs (a seed added) do not draw and train again.

The preregistration record (``preregistration.json``) is no role of the drawing job or the
table: each trials-drawing job reads it and amends it in place (every model of every
experiment, one file), so it cannot be that job's input and output at once, and a rule's output
has no other writer in Snakemake (one file for jobs of different wildcards is refused); with no
rule making it, Snakemake would refuse it as a missing input of the table in a new run. So it
travels as an argument (``--record``, the path :data:`imagenot.train.paths.PREREGISTRATION`)
beside these files. What guards it: the drawing jobs amend it under an exclusive lock
(``preregistration.lock`` beside it, :func:`imagenot.train.prereg.register`), and the planning
Snakemake checks the config against it before any job starts
(:func:`imagenot.train.plan.check_results`).
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.files import Files, given, made


@dataclass(frozen=True)
class DrawFiles(Files):
    """``train-draw-trials``: an experiment's pre-registered trials."""

    trials: str = made("the experiment's trials (trials.parquet)")


@dataclass(frozen=True)
class HalveFiles(Files):
    """``train-halve``: one successive-halving rung's decision."""

    results: list[str] = given("the rung's slot results (JSON), one per slot", many=True)
    decision: str = made("the rung's decision: the trials it promotes (JSON)")


@dataclass(frozen=True)
class SelectFiles(Files):
    """``train-select``: the experiment's best trial."""

    results: list[str] = given("every slot result of the experiment (JSON)", many=True)
    selection: str = made("the selected trial (selection.json)")


@dataclass(frozen=True)
class PreregistrationTableFiles(Files):
    """``train-preregistration-table``: the preregistration record as a report table."""

    table: str = made("the record as CSV (experiments, hashes, models, amendments)")


def _manifest() -> str:
    """A training job's dataset, by its manifest (a role of each job that reads images)."""
    return given("the dataset's manifest (it lists the shards, in its folder, that the job reads)")


def _classes() -> str:
    return given("the dataset's classes.txt, beside its manifest (the head's rows, label order)")


def _fingerprint() -> str:
    return given("the dataset's fingerprint.txt (recorded with what the job writes)")


_FEATURES = (
    "a TL head fit's stored features, one file per split of imagenot.train.plan.FEATURE_SPLITS "
    "in its order (the head is fitted over them); none on the image path"
)


def _init_record() -> str | None:
    return given(
        "an FT/TL job's starting weights' record when they are a final run's (its result.json, "
        "read with them: their digest, the run they are); none for st and published weights",
        optional=True,
    )


@dataclass(frozen=True)
class TrialFiles(Files):
    """``train-trial``: the trial in one slot of a halving stage (to a rung or the end)."""

    trials: str = given("the experiment's trials (trials.parquet)")
    manifest: str = _manifest()
    classes: str = _classes()
    fingerprint: str = _fingerprint()
    init_record: str | None = _init_record()
    features: list[str] = given(_FEATURES, many=True, optional=True)
    previous: str | None = given(
        "the previous rung's decision, which names the slot's trial (none at stage 0, whose "
        "slot is the trial)",
        optional=True,
    )
    result: str = made("the slot's result (JSON)")


@dataclass(frozen=True)
class FinalFiles(Files):
    """``train-final``: the selected trial retrained with one seed, or (a space's first seed)
    its trial's weights copied (``imagenot.train.finals``)."""

    trials: str = given("the experiment's trials (trials.parquet)")
    selection: str = given("the selected trial (selection.json; its trial folders beside it)")
    manifest: str = _manifest()
    classes: str = _classes()
    fingerprint: str = _fingerprint()
    init_record: str | None = _init_record()
    features: list[str] = given(_FEATURES, many=True, optional=True)
    model: str = made("the run's best-validation weights (model.safetensors)")
    result: str = made("the run's record (result.json)")


@dataclass(frozen=True)
class PublishedFiles(Files):
    """``train-published``: published ImageNet weights written as a final run."""

    weights: str = given("the published weights file (under train.weights_dir)")
    classes: str = given("the dataset's classes.txt (the head keeps these rows)")
    fingerprint: str = given("the dataset's fingerprint.txt (recorded with the run)")
    model: str = made("the run's weights (model.safetensors)")
    result: str = made("the run's record (result.json)")


@dataclass(frozen=True)
class PreflightFiles(Files):
    """``preflight``: the report of one GPU's checks against the config's training jobs. The
    JSON is written only when every check passed (the GPU rules wait for it); a failed
    preflight writes ``<name>.failed.json``/``.failed.md`` beside these instead, no rule's
    outputs (Snakemake would delete those of a failed job)."""

    json: str = made("the report as JSON (written when every check passed)")
    md: str = made("the report in Markdown")


@dataclass(frozen=True)
class FeaturesFiles(Files):
    """``train-features``: a TL backbone's features of the train and val splits, computed once
    for every head fit. The job's failure status (``imagenot.train.failfast``) lies beside the folder
    holding the features files."""

    manifest: str = _manifest()
    classes: str = _classes()
    fingerprint: str = _fingerprint()
    init_record: str | None = _init_record()
    features: list[str] = made(
        "the features files, one per split of imagenot.train.plan.FEATURE_SPLITS, in its order "
        "(safetensors)",
        many=True,
    )
