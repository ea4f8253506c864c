"""`imagenot` subcommands of the train stage (one per rule; torch is imported in handlers).

Each rule command gets everything from config as one ``--settings`` JSON object: the rule builds
it with ``imagenot.train.settings`` (``DrawSettings``, ``TrialSettings``, ``FinalSettings``,
``FeaturesSettings``, ``HalveSettings``, ``PublishedSettings``: ``from_config``), the command
parses it back into the same class, which has no defaults: a key the rule forgot or one the
command does not know is a one-line error. File paths, the job's place in the DAG (stage, slot,
run), its cores and its time limit stay arguments.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from imagenot.cli import subcommand
from imagenot.train import files

# When this process started: a training job's deadline counts from here when SLURM cannot tell
# its end time (imagenot.train.interrupts.job_deadline).
STARTED = time.time()


def _parse(name: str, text: str, command: str):
    """The parsed settings of class ``name`` of imagenot.train.settings, or exit with one line
    naming the key."""
    from imagenot.settings import parse_or_exit
    from imagenot.train import settings

    return parse_or_exit(getattr(settings, name), text, command)


def _deadline(settings, a: argparse.Namespace) -> float | None:
    """When the training job must have checkpointed and exited (its time limit less
    train.deadline_margin_minutes)."""
    from imagenot.train.interrupts import job_deadline

    return job_deadline(a.runtime_min, settings.job.deadline_margin_minutes, STARTED)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add this stage's subcommands."""
    p = subcommand(subparsers, "train-draw-trials", _draw, files=files.DrawFiles)
    _settings_arg(p, "DrawSettings")
    p.add_argument(
        "--record", required=True, type=Path, help="preregistration.json (read and amended)"
    )

    p = subcommand(
        subparsers,
        "train-preregistration-table",
        _preregistration_table,
        files=files.PreregistrationTableFiles,
    )
    p.add_argument("record", type=Path, help="preregistration.json")

    p = subcommand(subparsers, "train-trial", _trial, files=files.TrialFiles)
    _job_args(p, "TrialSettings")
    p.add_argument("--stage", required=True, type=int, help="0, 1, ...: rungs, then the end")
    p.add_argument("--slot", required=True, type=int, help="stage 0: the trial id")
    _preflight_arg(p)

    p = subcommand(subparsers, "train-features", _features, files=files.FeaturesFiles)
    _job_args(p, "FeaturesSettings")

    p = subcommand(subparsers, "train-published", _published, files=files.PublishedFiles)
    _settings_arg(p, "PublishedSettings")
    p.add_argument("--run", required=True, help="dataset/protocol")

    p = subcommand(subparsers, "train-halve", _halve, files=files.HalveFiles)
    p.add_argument("--rung", required=True, type=int)
    _settings_arg(p, "HalveSettings")

    subcommand(subparsers, "train-select", _select, files=files.SelectFiles)

    p = subcommand(subparsers, "train-final", _final, files=files.FinalFiles)
    _job_args(p, "FinalSettings")
    p.add_argument("--run", required=True, help="dataset/protocol/model/seed")
    _preflight_arg(p)


def _preflight_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--preflight",
        type=Path,
        default=None,
        help="the model's preflight report on this site (the rule's gate): its largest batch "
        "per GPU measured to fit the card caps the job's micro-batches",
    )


def _measured(s, a: argparse.Namespace):
    """``s`` (trial or final settings) with the per-GPU batch ``--preflight`` measured."""
    if a.preflight is None:
        return s
    import dataclasses

    from imagenot.train.preflight_plan import measured_job

    return dataclasses.replace(s, job=measured_job(s.job, a.preflight))


def _settings_arg(p: argparse.ArgumentParser, cls: str) -> None:
    """``--settings``: the JSON of ``cls`` (a class of imagenot.train.settings) the rule built."""
    p.add_argument("--settings", required=True, help=f"JSON of imagenot.train.settings.{cls}")


def _job_args(p: argparse.ArgumentParser, cls: str) -> None:
    """The settings, cores and time limit of a training job's command (trial, features, final
    run)."""
    _settings_arg(p, cls)
    p.add_argument("--threads", type=int, required=True, help="the job's cores (rule threads)")
    p.add_argument(
        "--runtime-min",
        type=float,
        default=None,
        help="the job's runtime resource (its time limit): checkpoint and exit 75 "
        "train.deadline_margin_minutes before the job's end (SLURM's end time when known)",
    )


# Exit status of a job stopped by SIGTERM / SIGUSR1 or its deadline after writing its checkpoint
# (EX_TEMPFAIL: try again); Snakemake's retry (one attempt of --retries) or SLURM's requeue
# resumes it.
PREEMPTED_EXIT = 75


def _lazy():
    from imagenot.train import jobs

    return jobs


def _preemptible(run, output: Path | None = None):
    """Run a training job; a stop request (SIGTERM, SIGUSR1, SIGINT, the deadline) becomes a
    log line and exit status 75. With the job's ``output`` (its status file beside it,
    ``imagenot.train.failfast``): a retry of a job whose earlier attempt failed for good ends
    at once with that message; a stop is counted (its retry's memory does not grow) and a
    fault no retry can fix is recorded."""
    import logging

    from imagenot.train import failfast
    from imagenot.train.interrupts import Preempted

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


def _trials():
    from imagenot.train import trials

    return trials


def _draw(a: argparse.Namespace) -> None:
    """Pre-register and draw an experiment's trials."""
    from imagenot.train import prereg

    s = _parse("DrawSettings", a.settings, "train-draw-trials")
    prereg.draw(s, a.record, Path(files.DrawFiles.from_args(a).trials))


def _preregistration_table(a: argparse.Namespace) -> None:
    """The preregistration record as CSV: experiments, hashes, models, amendments."""
    import pyarrow as pa

    from imagenot.io import write_csv
    from imagenot.train.prereg import record_table

    rows = record_table(a.record)
    write_csv(pa.Table.from_pylist(rows), files.PreregistrationTableFiles.from_args(a).table)
    print(f"{len(rows)} experiments, {sum(r['amendments'] for r in rows)} amendments")


def _halve(a: argparse.Namespace) -> None:
    """Successive halving: promote the best trials."""
    s = _parse("HalveSettings", a.settings, "train-halve")
    f = files.HalveFiles.from_args(a)
    decision = _trials().halve([Path(r) for r in f.results], a.rung, s.eta, Path(f.decision))
    print(f"rung {a.rung}: promoted trials {decision['promoted']}")


def _select(a: argparse.Namespace) -> None:
    """Pick the best trial by validation accuracy."""
    f = files.SelectFiles.from_args(a)
    selection = _trials().select([Path(r) for r in f.results], Path(f.selection))
    print(f"best trial {selection['trial']}: val accuracy {selection['val_accuracy']:.2f}%")


def _trial(a: argparse.Namespace) -> None:
    """Train the trial in one slot of a stage (to a halving rung or the end)."""
    s = _parse("TrialSettings", a.settings, "train-trial")
    f = files.TrialFiles.from_args(a)
    out = Path(f.result)
    if _trials().slot_trial(a.slot, Path(f.previous) if f.previous else None) is None:
        _trials().write_empty_slot(a.stage, a.slot, out)  # nothing promoted: no torch import
        return
    s = _measured(s, a)
    deadline = _deadline(s, a)
    # the failure status lies beside the slot's result (the rule's resources read it there)
    _preemptible(lambda: _lazy().run_slot(s, a.threads, deadline, f, a.stage, a.slot), out)


def _features(a: argparse.Namespace) -> None:
    """A TL backbone's features of the train and val splits, computed once for every head fit."""
    s = _parse("FeaturesSettings", a.settings, "train-features")
    f = files.FeaturesFiles.from_args(a)
    # one pass over the data, no checkpoint to write: no deadline; the failure status lies
    # beside the features' folder (the rule's resources read it there)
    _preemptible(lambda: _lazy().run_features(s.job, a.threads, f), Path(f.features[0]).parent)


def _final(a: argparse.Namespace) -> None:
    """The selected trial with one seed: trained again, or a space's first seed taking its
    trial's weights."""
    s = _measured(_parse("FinalSettings", a.settings, "train-final"), a)
    dataset, protocol, model, seed = a.run.split("/")
    run = {"dataset": dataset, "protocol": protocol, "model": model}
    deadline = _deadline(s, a)
    f = files.FinalFiles.from_args(a)
    # the failure status lies beside the run's folder (the rule's resources read it there)
    from imagenot.train.finals import run_final  # torch only if it trains

    _preemptible(lambda: run_final(s, a.threads, deadline, f, int(seed), run), Path(f.model).parent)


def _published(a: argparse.Namespace) -> None:
    """Torchvision's published ImageNet weights as a final run (nothing trained)."""
    s = _parse("PublishedSettings", a.settings, "train-published")
    dataset, protocol = a.run.split("/")
    run = {"dataset": dataset, "protocol": protocol}
    from imagenot.train.published import run_published

    run_published(s, files.PublishedFiles.from_args(a), run)
