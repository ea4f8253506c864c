"""The launcher a training rule's shell line puts before ``imagenot train-trial|train-final``:
nothing for one process, torchrun on one node, ``srun`` starting one torchrun per node for a
multi-node job, with the stop signals, shutdown timeout and rendezvous that the ranks
(:mod:`imagenot.train.distributed`) rely on. A string built at planning time: no torch import.
"""

from __future__ import annotations

from imagenot.train.experiments import gpus_per_node, nodes
from imagenot.train.resources import threads

# torchrun's stop signals: its defaults and SIGUSR1 (a warning a site may send with --signal),
# forwarded to every rank, which checkpoints and exits. A time limit needs none: every rank stops
# by the job's own deadline (imagenot.train.interrupts.job_deadline)
STOP_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
# How long torchrun waits for its ranks to agree on a step, checkpoint and exit after a stop
# signal before it kills them: well inside the default 10-minute deadline margin (a check every
# loop.CHECK_EVERY steps, then one checkpoint written by rank 0)
SHUTDOWN_S = 300
# The c10d rendezvous port of a multi-node job: this base plus the SLURM job id modulo 1000,
# so two jobs sharing a first node rarely collide (their ids differ in the last digits)
RDZV_PORT_BASE = 29500


def launcher(config: dict, model: str | None = None) -> str:
    """What the training rules' shell line puts before ``imagenot train-trial|train-final`` of
    ``model`` (its GPUs per job: :func:`imagenot.train.experiments.gpus`): nothing for one
    process (no launcher, no process group), torchrun for a data-parallel job on one node, and
    ``srun`` starting one torchrun per node for a multi-node job (``imagenot.train.distributed``,
    docs/gpu.md "Data parallelism")."""
    return launch_line(nodes(config, model), gpus_per_node(config, model), threads(config, model))


def launch_line(n_nodes: int, per_node: int, threads: int) -> str:
    """The launcher of :func:`launcher` for ``n_nodes`` nodes of ``per_node`` processes."""
    if n_nodes * per_node <= 1:
        return ""
    torchrun = [
        "torchrun",
        f"--nnodes={n_nodes}",
        f"--nproc-per-node={per_node}",
        "--max-restarts=0",  # a failed rank ends the job; its retry resumes the checkpoint
        f"--signals-to-handle={STOP_SIGNALS}",
        f"--shutdown-timeout={SHUTDOWN_S}",
    ]
    if n_nodes == 1:
        return " ".join(["torchrun", "--standalone", *torchrun[1:], "--no-python"])
    # SLURM's job id names the rendezvous; the shell that runs the line runs on the job's
    # first node, whose launcher hosts it. --overlap: outside a job array the workflow's own
    # step already holds the first node (the executor plugin wraps the rule in `srun -n1`)
    endpoint = f'"$(hostname):$(({RDZV_PORT_BASE}+SLURM_JOB_ID%1000))"'
    rdzv = ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", '--rdzv-id="$SLURM_JOB_ID"']
    srun = [
        "srun",
        f"--nodes={n_nodes}",
        f"--ntasks={n_nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={threads}",
        "--overlap",
        "--kill-on-bad-exit=1",  # one node's launcher failing ends the others at once
    ]
    return " ".join([*srun, *torchrun, *rdzv, "--no-python"])
