"""A workflow job's command ends with its job, and writes no output once its job has ended.

Why: Snakemake records a job as failed when the job's process ends, removes its outputs and
forgets it. A command that outlives that process (its shell killed by SIGTERM, Snakemake killed
with ``kill -9``) would go on training and then write its output, which the next
``snakemake -n`` takes as complete ("Nothing to be done"). Two parts close this:

- every rule's shell line runs its command with ``exec`` (:func:`job_prefix`, the start of each
  rule's own line: rules/common.smk ``IMAGENOT``), so the command *is* the job's process: a signal
  to the job reaches it, and no shell stays behind to be killed alone;
- a workflow job's ``imagenot`` command asks the kernel for SIGTERM when its parent dies
  (:func:`bind_to_parent`, ``prctl(PR_SET_PDEATHSIG)``; Snakemake's own death included), and
  :func:`check_parent` refuses to move an output into place once the parent is gone (the one
  atomic writer, ``imagenot.core.io.atomic_path``, calls it), for a command that handles SIGTERM by
  finishing a checkpoint first (the train jobs).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

# Snakemake's default prefix (bash strict mode), then ``exec``: every rule's shell line is one
# command (tests/test_lifeline.py checks), which replaces the shell.
SHELL_PREFIX = "set -euo pipefail; exec "


def job_prefix(launcher: str = "") -> str:
    """The start of a workflow rule's shell line, up to the word ``imagenot`` that the line then
    spells with its subcommand: :data:`SHELL_PREFIX`, the checkout's package first on the path
    (``$IMAGENOT_CHECKOUT``, set by rules/common.smk: :mod:`imagenot.core.checkout`), ``launcher``
    (torchrun or srun for a training job of several processes: ``imagenot.train.launch``), then
    ``python -m`` (the job env's interpreter: a conda env or an image provides the dependencies,
    the checkout the code). In each rule's own line rather than Snakemake's global
    ``shell.prefix``, which would change the shell lines of a host workflow using this one as a
    module. The checkout's path is read by the shell from the environment, never written into
    the line: a finished run moved to another folder, or rerun from another clone, keeps its
    rules' code."""
    from imagenot.core.checkout import ENV

    run = f"{launcher} python -m" if launcher else "python -m"
    return f'set -euo pipefail; PYTHONPATH="${ENV}" exec {run}'


_PR_SET_PDEATHSIG = 1

# (this process's pid, its parent's pid) once bound; a forked child (a DataLoader worker) has
# another pid and is not bound by its parent's record.
_bound: tuple[int, int] | None = None


class JobEnded(SystemExit):
    """The job this command ran for has ended: nothing more may be written."""


def bind_to_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Ask for ``sig`` when the parent process dies and remember the parent; False where the
    kernel offers no such request (not Linux). A parent already gone ends this process now.
    ``parent``: the pid the caller was started by, where it knows it (a pool's worker is handed
    its job's pid): a worker still starting when its job was killed has been handed to another
    parent by then, which the parent of the moment would not reveal."""
    global _bound
    parent = os.getppid() if parent is None else parent
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return False
    _bound = (os.getpid(), parent)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
    return True


def orphaned() -> bool:
    """Whether this bound process's parent (the job) has ended."""
    return _bound is not None and _bound[0] == os.getpid() and os.getppid() != _bound[1]


def check_parent(path: str | os.PathLike) -> None:
    """Raise :class:`JobEnded` (exit status 1, one line) instead of writing ``path`` once the
    job's process has ended: Snakemake has recorded the job failed and would take the file as
    the output of a finished job."""
    if orphaned():
        raise JobEnded(
            f"{path}: not written: this command's job (parent pid {_bound[1]}) has ended, so the "
            "workflow has recorded it failed"
        )
