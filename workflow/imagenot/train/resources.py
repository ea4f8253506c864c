"""What a training job asks of the scheduler: its cores, memory and runtime, and whether a
halving slot asks for its GPUs at all (the rules' ``threads:`` and ``resources:`` of train_trial,
train_final and train_features, and the preflight's cores).

Why apart from the plan's file lists (:mod:`imagenot.train.plan`): sizing a job is a question
of its own, and most of it is answered when the job becomes ready, from its promotion input and
its earlier attempts' status (:mod:`imagenot.train.failfast`), not when the DAG is built. Light:
no torch import (evaluated while Snakemake schedules).
"""

from __future__ import annotations

from pathlib import Path

from imagenot.train.experiments import gpus_per_node
from imagenot.train.plan import slot_file


def threads(config: dict) -> int:
    """CPU cores of a training job on each of its nodes (the rule's threads, SLURM's
    --cpus-per-task of its one task per node): resources.cpus_per_gpu per GPU of the node
    (decoding and feeding), one for a CPU job (``slurm_profile.gpu_threads``, as every GPU
    rule's)."""
    from imagenot.slurm_profile import gpu_threads

    return gpu_threads(config, 1, gpus_per_node(config))


def slot_trains(previous, slot) -> bool:
    """Whether a slot has a trial to train, read from its promotion input ``previous`` (the
    rule's ``input.previous``: the previous rung's decision file, none at stage 0) when the job
    becomes ready. Why: a slot no trial was promoted into exits at once (``jobs.run_slot``), so
    it must not wait in the GPU queue for a GPU, 24 h and 32 GB. A decision not written yet
    (``snakemake -n`` plans before it exists) or unreadable counts as a slot that trains: the
    full request, and the job itself reports a bad file."""
    from imagenot.train.trials import slot_trial

    files = [previous] if isinstance(previous, str) else list(previous)
    if not files:
        return True
    try:
        return slot_trial(int(slot), Path(files[0])) is not None
    except (OSError, ValueError, KeyError, TypeError):
        return True


def slot_status(dataset: str, protocol: str, model: str, stage, slot) -> Path:
    """A slot job's status file (``imagenot.train.failfast``: a permanent fault, deadline
    stops), beside the slot's result."""
    from imagenot.train.failfast import status_for

    return status_for(slot_file(dataset, protocol, model, stage, slot))


def slot_gets_gpu(previous, slot, status: Path | None = None, attempt: int = 1) -> bool:
    """Whether a train_trial job asks for its GPUs: a slot that trains, unless an earlier
    attempt of it failed for good in this run (``failfast.refused``: its retry only exits)."""
    from imagenot.train.failfast import refused

    if status is not None and refused(status, attempt):
        return False
    return slot_trains(previous, slot)


def slot_threads(config: dict, previous, slot, status: Path | None = None, attempt: int = 1) -> int:
    """Cores of a train_trial job: :func:`threads`, one for an empty slot or a refused retry."""
    return threads(config) if slot_gets_gpu(previous, slot, status, attempt) else 1


def slot_mem_mb(
    config: dict, previous, slot, attempt: int, status: Path | None = None, ring: int = 0
) -> int:
    """Memory (MB) of a train_trial job: :func:`process_mem_mb` when the slot trains, the small
    ``empty_mem_mb`` for an empty slot (it exits at once; grown per attempt as every rule's)."""
    from imagenot.train.failfast import memory_attempt, refused

    if slot_gets_gpu(previous, slot, status, attempt):
        return process_mem_mb(config, status, attempt, ring, gpus_per_node(config))
    own = config["resources"]["train_trial"]
    if status is not None and refused(status, attempt):
        return own["empty_mem_mb"]
    grown = memory_attempt(status, attempt) if status is not None else attempt
    return int(own["empty_mem_mb"] * config["resources"]["attempt_growth"] ** max(grown - 1, 0))


def process_mem_mb(
    config: dict, status: Path | None, attempt: int, ring: int, processes: int
) -> int:
    """Memory (MB) of a training job (train_trial, train_final, train_features: the same
    model's process per GPU): ``resources.train_trial.mem_mb`` plus ``ring``, its batch rings
    (``rings.ring_mb``), for each of the ``processes`` of its node (SLURM's --mem counts per
    node), grown per attempt by ``resources.attempt_growth`` except for attempts that followed a
    deadline stop (``failfast.memory_attempt``: the clock stopped it, not its memory); the small
    ``empty_mem_mb``, not grown, for the retry of a job that failed for good (it only exits)."""
    from imagenot.train.failfast import memory_attempt, refused

    own = config["resources"]["train_trial"]
    if status is not None and refused(status, attempt):
        return own["empty_mem_mb"]
    base = (own["mem_mb"] + ring) * max(1, processes)
    grown = memory_attempt(status, attempt) if status is not None else attempt
    return int(base * config["resources"]["attempt_growth"] ** max(grown - 1, 0))


def slot_runtime_min(config: dict, previous, slot, attempt: int, status: Path | None = None) -> int:
    """Runtime (minutes) of a train_trial job (``resources.train_trial``), grown per attempt
    and capped at ``resources.max_runtime_min`` (the site's maximum under a site profile);
    ``empty_runtime_min`` for an empty slot, and for a refused retry without growth."""
    from imagenot.train.failfast import refused

    own = config["resources"]["train_trial"]
    if status is not None and refused(status, attempt):  # it only exits: the least, not grown
        return own["empty_runtime_min"]
    key = "runtime_min" if slot_trains(previous, slot) else "empty_runtime_min"
    grown = int(own[key] * config["resources"]["attempt_growth"] ** max(attempt - 1, 0))
    return min(grown, config["resources"]["max_runtime_min"])
