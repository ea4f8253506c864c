"""Stop requests and the recovery-checkpoint clock of a training job (SIGTERM, SIGUSR1, the
job's own deadline, the checkpoint interval)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from datetime import datetime

log = logging.getLogger(__name__)

# The stop reason of a job that reached its own deadline (``Interrupts.requested``).
DEADLINE = "deadline"


def slurm_end_time(env: Mapping[str, str] = os.environ) -> float | None:
    """The end of this SLURM job's allocation (seconds since the epoch) as SLURM knows it, or
    None outside SLURM or when SLURM cannot say.

    ``SLURM_JOB_END_TIME`` when the environment has it (newer SLURM; the jobstep plugin drops
    it from an array task's environment), else ``squeue -h -j $SLURM_JOB_ID -o %e`` (local
    time, as squeue formats it for this host). Why SLURM's and not start + runtime: the job
    may have started after the trainer's clock thinks (queued steps, Snakemake start-up) or
    had its limit changed (``scontrol update TimeLimit``).
    """
    if env.get("SLURM_JOB_END_TIME", "").isdigit():
        return float(env["SLURM_JOB_END_TIME"])
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%e"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        return datetime.fromisoformat(out.splitlines()[0]).timestamp()
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.warning("job %s: no end time from squeue (%s); using start + runtime", job, exc)
        return None


def job_deadline(
    runtime_min: float | None,
    margin_min: float,
    started: float,
    env: Mapping[str, str] = os.environ,
) -> float | None:
    """When a training job must checkpoint and exit (seconds since the epoch): ``margin_min``
    before the end of its SLURM allocation, SLURM's end time when known
    (:func:`slurm_end_time`), else ``started`` (the process's start) plus the job's
    ``runtime_min`` resource. None (no deadline) outside SLURM: nothing enforces the runtime
    resource of a local run, which must not stop a long training job for nothing."""
    if not env.get("SLURM_JOB_ID"):
        return None
    end = slurm_end_time(env)
    if end is None:
        if not runtime_min:
            return None
        end = started + runtime_min * 60.0
    return end - margin_min * 60.0


class Preempted(RuntimeError):
    """The job was told to stop (SIGTERM, SIGUSR1, its deadline) and saved a checkpoint."""


class Interrupts:
    """Stop requests and the recovery-checkpoint clock of one training job.

    While active, SIGTERM (SLURM's time limit, preemption and ``scancel`` send it to every
    process of the job, array task or not), SIGUSR1 (a ``--signal`` a site may add) and SIGINT
    (Ctrl-C, to the process or its whole group: loader workers forked while this is active
    inherit the flag-setting handler and keep serving) only set a flag, and so does reaching
    ``deadline`` (seconds since the epoch, :func:`job_deadline`:
    the job's own time limit less a margin, which needs no signal at all); the loop sees it
    after the current optimizer step, writes a step-level checkpoint and raises
    :class:`Preempted`, so the job exits (status 75) and its retry or requeue resumes at that
    step. Every ``checkpoint_minutes`` (0: never) the loop also writes a recovery checkpoint,
    bounding what a SIGKILL or node failure loses. See docs/gpu.md.
    """

    # SIGINT as SIGTERM: a Ctrl-C would otherwise end in a KeyboardInterrupt traceback and lose
    # the steps since the last checkpoint
    SIGNALS = ("SIGUSR1", "SIGTERM", "SIGINT")
    # a stop requested before training began (see ``record_early``), taken over by __enter__
    pending: str | None = None

    @classmethod
    def record_early(cls) -> None:
        """From now on, SIGUSR1 / SIGTERM / SIGINT are recorded instead of ending the process,
        so a signal during start-up (imports, data, model) still ends in a clean checkpoint."""

        def record(number, frame) -> None:
            cls.pending = signal.Signals(number).name

        for name in cls.SIGNALS:
            signal.signal(getattr(signal, name), record)

    def __init__(self, checkpoint_minutes: float, deadline: float | None):
        self.every = checkpoint_minutes * 60.0
        self.deadline = deadline
        self.requested: str | None = None
        self.last = time.monotonic()
        self._previous: dict = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # handlers: main thread only
            for name in self.SIGNALS:
                number = getattr(signal, name)
                self._previous[number] = signal.signal(number, self._handle)
        self.requested, Interrupts.pending = Interrupts.pending, None
        return self

    def __exit__(self, *exc) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number, frame) -> None:
        self.requested = signal.Signals(number).name

    def stop_due(self) -> bool:
        """A stop was requested: a signal, or the deadline has come (validation asks this
        before each batch: ``loop.evaluate``)."""
        if self.requested is None and self.deadline is not None and time.time() >= self.deadline:
            self.requested = DEADLINE
        return self.requested is not None

    def checkpoint_due(self) -> bool:
        """A stop was requested (a signal, or the deadline has come), or the recovery interval
        has passed since the last save."""
        return self.stop_due() or (self.every > 0 and time.monotonic() - self.last >= self.every)

    def saved(self, stop: bool | None) -> None:
        """After a checkpoint: restart the clock; raise Preempted when a stop was requested
        (``stop``: on any rank of a data-parallel job, as the ranks agreed; None: in this
        process)."""
        self.last = time.monotonic()
        if self.requested is not None if stop is None else stop:
            reason = {None: "stop on another rank received", DEADLINE: "deadline reached"}.get(
                self.requested, f"{self.requested} received"
            )
            raise Preempted(f"{reason}: step-level checkpoint written, exiting")
