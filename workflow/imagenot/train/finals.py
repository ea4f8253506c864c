"""A final run (rule ``train_final``): the selected trial trained again with one seed, its
best-validation weights kept and its record written. Free of torch until it trains.

A space's first seed trains with its trial's own seed, so it is the trial run again: when the
trial ran its whole schedule (it ended on its own, not at a halving rung) with the same job
(:func:`imagenot.train.identity.Job.identity`) and its weights file is the one it recorded, its
weights and metrics are taken as they are. That run is a file copy and a record, with no torch
import (about 4 CPU-s a job on CPU, most of such a job's cost; a data-parallel job's launcher,
torchrun, still imports it). A deterministic CPU run gives the
same weights either way, which a test checks. The other seeds, and a first seed whose trial
stopped at a rung, train (:func:`imagenot.train.jobs.fit_job`).

The trial's weights and ``metrics.csv`` that such a run copies are no role of its rule: they lie
in the trial's folder (``trial-{id}/`` beside the selection, a role, so in the run the rule's
wildcards name), which no rule lists as an output (a training job keeps them where its retry
finds them, halving and selection delete those of the trials they drop), and which trial it is
only the selection says, once it is written. What guards them: the weights are copied only when
their sha256 is the ``best_sha256`` of the selection's sealed result (:func:`reusable_trial`),
else the run trains; ``metrics.csv`` is that training's log, beside them.

No final run measures the test split: the test accuracy is the evaluation's Identity row (rule
``evaluate_robustness``, ``robustness.parquet``), measured once, as for published weights; the
run summary reads it there.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from imagenot.core.io import atomic_path, sha256_file
from imagenot.train import search
from imagenot.train.distributed import from_environment
from imagenot.train.failfast import PermanentFailure
from imagenot.train.identity import Job, dataset_of
from imagenot.train.records import SLOT_RESULT, FinalRecord, read_record, write_final
from imagenot.train.trials import BEST, drop, read_trial, trial_dir

if TYPE_CHECKING:
    from imagenot.train.files import FinalFiles
    from imagenot.train.settings import FinalSettings

log = logging.getLogger(__name__)
# what a reusing final run copies of its trial's result: what training reached and how (every
# key a slot's producer writes but the slot's place and the trial's own seed), and how its
# training cut the batch where it recorded it (imagenot.train.jobs.micro_batching's keys)
TRIAL_SUMMARY = tuple(k for k in SLOT_RESULT.keys if k not in ("stage", "slot", "trial", "seed"))
MICRO_BATCHING = ("micro_batches", "micro_batch_size")


def reusable_trial(selection: Mapping, job_identity: str, trial_weights: Path) -> bool:
    """Whether the selected trial's best weights are what a final run would train: the trial
    ended on its own (not at a rung), with the same job (hyperparameters, seed, epochs, data
    start), and its weights file is the one it recorded."""
    result = selection.get("result") or {}
    return (
        result.get("stopped_by") in search.ENDED
        and result.get("identity") == job_identity
        and trial_weights.is_file()
        and result.get("best_sha256") == sha256_file(trial_weights)
    )


def run_final(
    final: FinalSettings,
    threads: int,
    deadline: float | None,
    files: FinalFiles,
    seed: int,
    run: Mapping,
) -> FinalRecord | None:
    """The final run of ``run`` (dataset, protocol, model) with ``seed``: the weights to
    ``files.model``, the record to ``files.result``; ``metrics.csv`` beside them (and, while
    it trains, the checkpoint and the best weights so far, where a retry resumes). Returns the
    record as written; None on data-parallel ranks other than 0."""
    settings = final.job
    selection = Path(files.selection)
    chosen = read_record(selection, record_kind="selection")  # with its trial's sealed result
    row = read_trial(Path(files.trials), chosen["trial"])
    train_seed = (
        row["seed"]
        if final.reuse_trial
        else search.stable_int(final.master_seed, run["dataset"], run["protocol"], "final", seed)
    )
    model_file = Path(files.model)
    out_dir = model_file.parent
    source = trial_dir(selection.parent, chosen["trial"])
    identity = None
    if final.reuse_trial:  # the job a first seed would train, for its identity alone: its
        # device is never probed (JOB_TRANSIENT_FIELDS: no part of the identity; nothing runs)
        hyperparameters, classes = search.hyperparameters_of(row), dataset_of(files)[1]
        identity = Job.of(settings, hyperparameters, train_seed, classes, "none").identity()
    if identity is not None and reusable_trial(chosen, identity, source / BEST):
        if not from_environment().main:  # nothing to train: rank 0 copies
            return None
        # what an earlier attempt that had to retrain left (the trial's weights were missing)
        drop(out_dir)
        for name, to in (("metrics.csv", out_dir / "metrics.csv"), (BEST, model_file)):
            with atomic_path(to) as tmp:  # a killed copy leaves nothing to consume
                shutil.copyfile(source / name, tmp)
        trial = chosen["result"]
        summary = {
            **{k: trial[k] for k in (*TRIAL_SUMMARY, *MICRO_BATCHING) if k in trial},
            "normalisation": settings.normalisation,
            "identity": identity,
            "reused_trial": True,
        }
        log.info("final %s seed %d: reusing trial %d's weights", run, seed, chosen["trial"])
    else:
        from imagenot.train.jobs import fit_job

        summary = fit_job(settings, threads, deadline, files, row, train_seed, out_dir)
        if summary is None:  # a data-parallel rank other than 0: rank 0 writes
            return None
        # finished training: the checkpoint goes before the best weights are handed on, so it
        # never outlives them (a rerun after a kill here trains afresh, to the same weights)
        drop(out_dir, best=False)
        if summary["stopped_by"] == search.DIVERGED:  # not retried (failfast)
            lr = summary["hyperparameters"]["lr"]
            raise PermanentFailure(
                f"final run {run} seed {seed}: loss NaN or infinite with trial {row['trial']}'s "
                f"lr {lr}, seed {train_seed}; lower train.spaces.<space>.hyperparameters.lr"
            )
        (out_dir / BEST).replace(model_file)
        summary["reused_trial"] = False
    result = FinalRecord.of(
        {
            **summary,
            **run,
            "seed": seed,
            "train_seed": train_seed,
            "trial": chosen["trial"],
            "chance_accuracy": 100.0 / summary["num_classes"],
            "weights_sha256": sha256_file(model_file),
        }
    )
    result = write_final(result, files.result)
    log.info(
        f"final {run} seed {seed}: best val accuracy {result.val_accuracy:.2f}% (chance "
        f"{result.chance_accuracy:.2f}%); its test accuracy is its evaluation's"
    )
    return result
