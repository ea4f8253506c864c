"""Stop requests and the recovery-checkpoint clock of a training job (SLURM's warning signal,
SIGTERM, the checkpoint interval)."""

from __future__ import annotations

import time


class Preempted(RuntimeError):
    """The job was told to stop (SLURM's warning signal, SIGTERM) and saved a checkpoint."""


class Interrupts:
    """Stop requests and the recovery-checkpoint clock of one training job.

    While active, SIGUSR1 (SLURM's ``--signal=USR1@<seconds>`` warning before a time limit or
    preemption) and SIGTERM (``scancel``, preemption, Snakemake) only set a flag; the loop sees
    it after the current optimizer step, writes a step-level checkpoint and raises
    :class:`Preempted`, so the job exits and its retry or requeue resumes at that step. Every
    ``checkpoint_minutes`` (0: never) the loop also writes a recovery checkpoint, bounding what
    a SIGKILL or node failure loses.
    """

    SIGNALS = ("SIGUSR1", "SIGTERM")
    # a stop requested before training began (see ``record_early``), taken over by __enter__
    pending: str | None = None

    @classmethod
    def record_early(cls) -> None:
        """From now on, SIGUSR1 / SIGTERM are recorded instead of ending the process, so a
        signal during start-up (imports, data, model) still ends in a clean checkpoint."""
        import signal

        def record(number, frame) -> None:
            cls.pending = signal.Signals(number).name

        for name in cls.SIGNALS:
            signal.signal(getattr(signal, name), record)

    def __init__(self, checkpoint_minutes: float = 0.0):
        self.every = checkpoint_minutes * 60.0
        self.requested: str | None = None
        self.last = time.monotonic()
        self._previous: dict = {}

    def __enter__(self) -> Interrupts:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():  # handlers: main thread only
            for name in self.SIGNALS:
                number = getattr(signal, name)
                self._previous[number] = signal.signal(number, self._handle)
        self.requested, Interrupts.pending = Interrupts.pending, None
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for number, handler in self._previous.items():
            signal.signal(number, handler)

    def _handle(self, number, frame) -> None:
        import signal

        self.requested = signal.Signals(number).name

    def checkpoint_due(self) -> bool:
        """A stop was requested, or the recovery interval has passed since the last save."""
        return self.requested is not None or (
            self.every > 0 and time.monotonic() - self.last >= self.every
        )

    def saved(self, stop: bool | None = None) -> None:
        """After a checkpoint: restart the clock; raise Preempted when a stop was requested
        (``stop``: on any rank of a data-parallel job; default: in this process)."""
        self.last = time.monotonic()
        if self.requested is not None if stop is None else stop:
            raise Preempted(
                f"{self.requested or 'stop on another rank'} received: step-level checkpoint "
                f"written, exiting"
            )
