"""The train stage's workflow steps (declared in :mod:`imagenot.core.steps`; torch is imported in
handlers).

Each step gets everything from config as one ``--settings`` object: the rule builds it with
``imagenot.train.settings`` (``DrawSettings``, ``TrialSettings``, ``FinalSettings``,
``FeaturesSettings``, ``HalveSettings``, ``PublishedSettings``: ``from_config``), the command
parses it back into the same class, which has no defaults: a key the rule forgot or one the
command does not know is a one-line error. File paths, the job's place in the DAG (stage, slot,
run), its cores and its time limit stay arguments.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import pyarrow as pa

from imagenot.core.io import write_csv
from imagenot.train import failfast, trials
from imagenot.train.finals import run_final  # torch only if it trains
from imagenot.train.interrupts import Preempted, job_deadline
from imagenot.train.preflight_plan import measured_job
from imagenot.train.prereg import draw, record_table
from imagenot.train.published import run_published

# When this module was loaded, as the command starts its handler: a training job's deadline
# counts from here when SLURM cannot tell its end time (imagenot.train.interrupts.job_deadline).
STARTED = time.time()


def _job(settings, preflight: Path | None, runtime_min: float | None):
    """``settings`` (trial or final) with the per-GPU batch its ``preflight`` report measured,
    and the time the job must have checkpointed and exited by (its time limit less
    train.deadline_margin_minutes)."""
    if preflight is not None:
        settings = dataclasses.replace(settings, job=measured_job(settings.job, preflight))
    margin = settings.job.deadline_margin_minutes
    return settings, job_deadline(runtime_min, margin, STARTED)


# Exit status of a job stopped by SIGTERM / SIGUSR1 or its deadline after writing its checkpoint
# (EX_TEMPFAIL: try again); Snakemake's retry (one attempt of --retries) or SLURM's requeue
# resumes it.
PREEMPTED_EXIT = 75


def _preemptible(run, output: Path | None = None):
    """Run a training job; a stop request (SIGTERM, SIGUSR1, SIGINT, the deadline) becomes a
    log line and exit status 75. With the job's ``output`` (its status file beside it,
    ``imagenot.train.failfast``): a retry of a job whose earlier attempt failed for good ends
    at once with that message; a stop is counted (its retry's memory does not grow) and a
    fault no retry can fix is recorded."""
    status = failfast.status_for(output) if output is not None else None
    failfast.refuse_retry(status)
    try:
        run()
        if status is not None:
            status.unlink(missing_ok=True)  # done: its stops no longer matter
    except (Preempted, KeyboardInterrupt) as exc:
        # Ctrl-C outside the training loop (loading data, copying): nothing to checkpoint, the
        # same short message and exit as a stop inside it (the loop takes SIGINT as SIGTERM)
        message = str(exc) or "SIGINT received outside training: nothing to checkpoint, exiting"
        logging.getLogger(__name__).warning("%s", message)
        if os.environ.get("RANK", "0") == "0":  # one count per job, not one per torchrun rank
            failfast.record_stop(status)
        raise SystemExit(PREEMPTED_EXIT) from None
    except Exception as exc:
        message = failfast.permanent_cause(exc)
        if message is not None:
            failfast.record_failure(status, message)
        raise


def draw_trials(files, settings, record: Path) -> None:
    """Pre-register and draw an experiment's trials."""
    draw(settings, record, Path(files.trials))


def preregistration_table(files, record: Path) -> None:
    """The preregistration record as CSV: experiments, hashes, models, amendments."""
    rows = record_table(record)
    write_csv(pa.Table.from_pylist(rows), files.table)
    print(f"{len(rows)} experiments, {sum(r['amendments'] for r in rows)} amendments")


def halve(files, settings, rung: int) -> None:
    """Successive halving: promote the best trials."""
    decision = trials.halve(
        [Path(r) for r in files.results], rung, settings.eta, Path(files.decision)
    )
    print(f"rung {rung}: promoted trials {decision['promoted']}")


def select(files) -> None:
    """Pick the best trial by validation accuracy."""
    selection = trials.select([Path(r) for r in files.results], Path(files.selection))
    print(f"best trial {selection['trial']}: val accuracy {selection['val_accuracy']:.2f}%")


def trial(files, settings, stage, slot, preflight, threads, runtime_min) -> None:
    """Train the trial in one slot of a stage (to a halving rung or the end)."""
    out = Path(files.result)
    if trials.slot_trial(slot, Path(files.previous) if files.previous else None) is None:
        trials.write_empty_slot(stage, slot, out)  # nothing promoted: no torch import
        return
    from imagenot.train import jobs  # torch: imported by the jobs that train

    s, deadline = _job(settings, preflight, runtime_min)
    # the failure status lies beside the slot's result (the rule's resources read it there)
    _preemptible(lambda: jobs.run_slot(s, threads, deadline, files, stage, slot), out)


def features(files, settings, threads: int) -> None:
    """A TL backbone's features of the train and val splits, computed once for every head fit."""
    # one pass over the data, no checkpoint to write: no deadline; the failure status lies
    # beside the features' folder (the rule's resources read it there)
    from imagenot.train import jobs

    folder = Path(files.features[0]).parent
    _preemptible(lambda: jobs.run_features(settings.job, threads, files), folder)


def final(files, settings, run, preflight, threads, runtime_min) -> None:
    """The selected trial with one seed: trained again, or a space's first seed taking its
    trial's weights."""
    s, deadline = _job(settings, preflight, runtime_min)
    dataset, protocol, model, seed = run.split("/")
    where = {"dataset": dataset, "protocol": protocol, "model": model}
    # the failure status lies beside the run's folder (the rule's resources read it there)
    folder = Path(files.model).parent
    _preemptible(lambda: run_final(s, threads, deadline, files, int(seed), where), folder)


def published(files, settings, run: str) -> None:
    """Torchvision's published ImageNet weights as a final run (nothing trained)."""
    dataset, protocol = run.split("/")
    run_published(settings, files, {"dataset": dataset, "protocol": protocol})
