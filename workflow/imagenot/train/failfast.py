"""Fail fast: a training job's faults that no retry can fix end the job for good, and its
retries ask for no GPU.

Why: Snakemake retries every failed job (``--retries``), each attempt asking for more memory
and runtime. A job that fails at start-up for a reason a retry cannot change (no CUDA device,
CUDA out of memory at the first step, a missing or damaged weights file, a config refusal, a
final run whose loss diverges) would wait in the GPU queue again, hold a GPU for its start-up
and fail the same way, once per attempt and per job: ~370 jobs of the paper's config, each
retried, before anyone read the first log. Only preemption, time limits (exit 75) and node
faults (anything else: a lost node, an NCCL timeout, a killed process) are worth a retry.

How: each training job has a status file beside its output (:func:`status_for`). A permanent fault writes it (the one-line message, naming
the key to change); the job's retry then sees it twice: its resources (``rules/common.smk``,
:func:`refused`) ask for no GPU, one core, little memory and a short runtime, so the plugin
sends it to the CPU partition, and the job itself exits at once with the same message
(:func:`refuse_retry`), before importing torch. A deadline stop (exit 75) is counted in the same
file, so that its retry grows the runtime but not the memory (:func:`memory_attempt`): the job
was stopped by its clock, not by its memory. The main Snakemake process clears every status
file when a run starts (``onstart``, :func:`clear_all`): a new run, after the key is changed,
tries again. Light: no torch import (the resources are evaluated while Snakemake schedules).
"""

from __future__ import annotations

import json
from pathlib import Path

from imagenot.core.io import write_json

# A training job's status file sits beside its output (:func:`status_for`)
STATUS_SUFFIX = ".job-status.json"


def status_for(output: str | Path) -> Path:
    """The status file of the training job writing ``output``: a slot's result JSON, a final
    run's folder or the TL features' folder (the folder of the files its command is handed as
    ``--model`` or ``--features``; the rule's resources name the same path through
    ``imagenot.train.plan``). Beside it, no rule output: Snakemake would delete it with a
    failed job's outputs, and a retry must find it."""
    output = Path(output)
    return output.with_name(output.name + STATUS_SUFFIX)


class PermanentFailure(ValueError):
    """A fault no retry can fix; the message names the config key (or the file) to change.
    A ValueError: the command prints it as one line and exits 2 (``imagenot.cli``)."""


class StartupOutOfMemory(PermanentFailure):
    """CUDA ran out of memory before the job's first optimizer step completed: the model does
    not fit at its per-GPU batch, on every attempt."""


class MissingWeights(PermanentFailure):
    """The starting weights file of an FT/TL job is missing or unreadable."""


class Diverged(RuntimeError):
    """The training loss (or the validation loss) became NaN or infinite: the trial can learn
    nothing more, whatever its rung, and ends at once (``stopped_by``: ``search.DIVERGED``).
    Not a fault of the job: its result says so (``train.loop``)."""


def missing_weights(model: str, init: str, exc: Exception) -> MissingWeights:
    return MissingWeights(
        f"starting weights {init} of {model}: {exc}; published weights go in "
        f"train.weights_dir (train.weights.{model}), a source run's are its final run's (rerun it)"
    )


def read(path: str | Path | None) -> dict:
    """A job's status (``{}`` when it has none or the file is unreadable: a retry then runs)."""
    if path is None:
        return {}
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def permanent_cause(exc: BaseException) -> str | None:
    """The one-line message of a fault no retry can fix, or None (a retry may succeed).

    Permanent: :class:`PermanentFailure` (first-step out of memory, missing weights, a diverged
    final run), a GPU job that sees no GPU (``imagenot.core.device.DeviceError``: the profile's GPU
    request), a config or registry refusal, and a corrupt weights file. Everything else (a lost
    node, an NCCL or CUDA driver fault, a killed process, an I/O error) is left to the retry."""
    from imagenot.core.config import ConfigError
    from imagenot.core.device import DeviceError
    from imagenot.core.registries import RegistryError

    if isinstance(exc, PermanentFailure | DeviceError | ConfigError | RegistryError):
        return str(exc)
    return None


def record_failure(path: str | Path | None, message: str) -> None:
    """Record a permanent fault: every retry of the job in this run ends at once with it."""
    if path is not None:
        write_json({**read(path), "permanent": message}, Path(path))


def record_stop(path: str | Path | None) -> None:
    """Record a deadline or signal stop (exit 75): its retry's memory does not grow."""
    if path is not None:
        status = read(path)
        write_json({**status, "stops": int(status.get("stops", 0)) + 1}, Path(path))


def refused(path: str | Path, attempt: int) -> str | None:
    """The permanent fault of an earlier attempt of this job in this run (None: none, or this
    is the first attempt), read when Snakemake sizes the retry's resources."""
    return read(path).get("permanent") if attempt > 1 else None


def refuse_retry(path: str | Path | None) -> None:
    """In the job, before anything else: end at once with the recorded permanent fault."""
    message = read(path).get("permanent")
    if message:
        raise PermanentFailure(f"{message} (an earlier attempt failed so: not retried)")


def memory_attempt(path: str | Path, attempt: int) -> int:
    """The attempt by which a job's memory request grows: its attempt less the deadline stops
    before it (a job stopped by its clock did not run out of memory)."""
    return max(1, attempt - int(read(path).get("stops", 0)))


def clear_all(results_dir: str | Path) -> int:
    """Forget every training job's status under ``results_dir`` (a new run tries every job
    again): ``onstart`` of the main Snakemake process, never in a job (``rules/common.smk``).
    Returns how many were removed."""
    found = list((Path(results_dir) / "train").rglob(f"*{STATUS_SUFFIX}"))
    for path in found:
        path.unlink(missing_ok=True)
    return len(found)
