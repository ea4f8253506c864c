"""What a training job asks of the scheduler: its cores, memory and runtime, and whether a
halving slot asks for its GPUs at all (the rules' ``threads:`` and ``resources:`` of train_trial,
train_final and train_features, and the preflight's cores).

Why apart from the plan's file lists (:mod:`imagenot.train.plan`): sizing a job is a question
of its own, and most of it is answered when the job becomes ready, from its promotion input and
its earlier attempts' status (:mod:`imagenot.train.failfast`), not when the DAG is built. Light:
no torch import (evaluated while Snakemake schedules).
"""

from __future__ import annotations

import math
from pathlib import Path

from imagenot.acquire.sizes import dataset_images
from imagenot.core.io import read_json
from imagenot.plan.slurm_profile import gpu_threads
from imagenot.plan.work import growth
from imagenot.train import budget, experiments, search
from imagenot.train.experiments import gpus_per_node, nodes
from imagenot.train.failfast import memory_attempt, refused, status_for
from imagenot.train.plan import slot_file
from imagenot.train.trials import slot_trial


def threads(config: dict, model: str | None = None) -> int:
    """CPU cores of a training job of ``model`` on each of its nodes (the rule's threads, SLURM's
    --cpus-per-task of its one task per node): resources.cpus_per_gpu per GPU of the node
    (decoding and feeding), one for a CPU job (``slurm_profile.gpu_threads``, as every GPU
    rule's)."""
    return gpu_threads(config, 1, gpus_per_node(config, model))


def slot_trains(previous, slot) -> bool:
    """Whether a slot has a trial to train, read from its promotion input ``previous`` (the
    rule's ``input.previous``: the previous rung's decision file, none at stage 0) when the job
    becomes ready. Why: a slot no trial was promoted into exits at once (``jobs.run_slot``), so
    it must not wait in the GPU queue for a GPU, 24 h and 32 GB. A decision not written yet
    (``snakemake -n`` plans before it exists) or unreadable counts as a slot that trains: the
    full request, and the job itself reports a bad file."""
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
    return status_for(slot_file(dataset, protocol, model, stage, slot))


def slot_gets_gpu(previous, slot, status: Path | None = None, attempt: int = 1) -> bool:
    """Whether a train_trial job asks for its GPUs: a slot that trains, unless an earlier
    attempt of it failed for good in this run (``failfast.refused``: its retry only exits)."""
    return not _refused(status, attempt) and slot_trains(previous, slot)


def _refused(status: Path | None, attempt: int) -> bool:
    return status is not None and bool(refused(status, attempt))


def slot_threads(
    config: dict,
    previous,
    slot,
    status: Path | None = None,
    attempt: int = 1,
    model: str | None = None,
) -> int:
    """Cores of a train_trial job of ``model``: :func:`threads`, one for an empty slot or a
    refused retry."""
    return threads(config, model) if slot_gets_gpu(previous, slot, status, attempt) else 1


def slot_mem_mb(
    config: dict,
    previous,
    slot,
    attempt: int,
    status: Path | None = None,
    ring: int = 0,
    model: str | None = None,
) -> int:
    """Memory (MB) of a train_trial job: :func:`process_mem_mb` when the slot trains, the small
    ``empty_mem_mb`` for an empty slot (it exits at once; grown per attempt as every rule's)."""
    if _refused(status, attempt) or slot_trains(previous, slot):  # (refused: the least)
        return process_mem_mb(config, status, attempt, ring, gpus_per_node(config, model))
    return _memory(config, config["resources"]["train_trial"]["empty_mem_mb"], status, attempt)


def process_mem_mb(
    config: dict, status: Path | None, attempt: int, ring: int, processes: int
) -> int:
    """Memory (MB) of a training job (train_trial, train_final, train_features: the same
    model's process per GPU): ``resources.train_trial.mem_mb`` plus ``ring``, its batch rings
    (``rings.ring_mb``), for each of the ``processes`` of its node (SLURM's --mem counts per
    node), grown per attempt by ``resources.attempt_growth`` except for attempts that followed a
    deadline stop (``failfast.memory_attempt``: the clock stopped it, not its memory); the small
    ``empty_mem_mb``, not grown, for the retry of a job that failed for good (it only exits)."""
    own = config["resources"]["train_trial"]
    if _refused(status, attempt):
        return own["empty_mem_mb"]
    return _memory(config, (own["mem_mb"] + ring) * max(1, processes), status, attempt)


def _memory(config: dict, base: int, status: Path | None, attempt: int) -> int:
    grown = memory_attempt(status, attempt) if status is not None else attempt
    return int(base * growth(config, grown))


def slot_runtime_min(
    config: dict,
    previous,
    slot,
    attempt: int,
    status: Path | None = None,
    job: tuple[str, str, str, int] | None = None,
) -> int:
    """Runtime (minutes) of a train_trial job (``resources.train_trial``), grown per attempt
    and capped at ``resources.max_runtime_min`` (the site's maximum under a site profile);
    ``empty_runtime_min`` for an empty slot, and for a refused retry without growth. A slot
    that trains asks for ``runtime_min``, or with ``job`` (dataset, protocol, model, stage) its
    stage's estimated time where that is less (:func:`sized_min`)."""
    own = config["resources"]["train_trial"]
    if _refused(status, attempt):  # it only exits: the least, not grown
        return own["empty_runtime_min"]
    if not slot_trains(previous, slot):
        base = own["empty_runtime_min"]
    elif job is None or attempt > 1:  # (a retry: the estimate was short)
        base = own["runtime_min"]
    else:
        base = sized_min(config, stage_work(config, *job[:3], int(job[3])))
    return _grown(config, base, attempt)


def _grown(config: dict, minutes: int, attempt: int) -> int:
    return min(int(minutes * growth(config, attempt)), config["resources"]["max_runtime_min"])


# Short GPU jobs: a CIFAR-10 stage-0 slot of AlexNet trains 10 epochs in about a
# minute, a first-seed final run that reuses its trial's weights only copies them; asking for
# 24 h kept them waiting for a slot that long in the queue. Each asks instead for its work's
# estimate (train.throughput, the dataset's images) times runtime_estimate_factor, plus
# startup_min, never more than runtime_min; one that outruns it stops at its deadline with a
# checkpoint (exit 75) and its retry resumes with the full request.


def stage_work(config: dict, dataset: str, protocol: str, model: str, stage: int) -> float | None:
    """Estimated minutes of GPU work of a slot of ``stage`` (:func:`_work` of its epochs)."""
    epochs = budget.stage_epochs(experiments.space(config, dataset, protocol))
    return _work(config, dataset, model, epochs[stage] if stage < len(epochs) else None)


def _work(config: dict, dataset: str, model: str, epochs: int | None) -> float | None:
    """Estimated minutes of ``epochs`` of GPU work over the dataset's training and validation
    images at the model's ``train.throughput`` (224 px, scaled by pixels to its input side,
    ``experiments.image_size``), on the job's GPUs; None where there are no epochs, the model
    has no throughput or the dataset no known size (the demo's models)."""
    rate = config["train"]["throughput"].get(model)
    sizes = dataset_images(config, dataset)
    if epochs is None or not rate or sizes is None:
        return None
    rate *= (224 / experiments.image_size(config, model)) ** 2
    gpus = max(1, gpus_per_node(config, model) * nodes(config, model))
    return 60 * budget.hours(epochs, sizes["train"] + sizes["val"], rate, gpus)


def sized_min(config: dict, work: float | None) -> int:
    """The first attempt's minutes of a training job of estimated ``work`` minutes:
    ``startup_min`` + ``runtime_estimate_factor`` x work, at most ``runtime_min``
    (``runtime_min`` itself where there is no estimate or the factor is 0)."""
    own = config["resources"]["train_trial"]
    factor = own["runtime_estimate_factor"]
    if work is None or not factor:
        return own["runtime_min"]
    return min(own["runtime_min"], math.ceil(own["startup_min"] + factor * work))


def reuses_trial(config: dict, dataset: str, protocol: str, seed, selection) -> bool:
    """Whether a final run will take its trial's weights as they are (``finals.run_final``): the
    space's first seed, and a selected trial that ended on its own (read from ``selection``, the
    rule's input, when the job is ready; not yet written: no)."""
    if int(seed) != experiments.space(config, dataset, protocol)["seeds"][0]:
        return False
    files = [selection] if isinstance(selection, str | Path) else list(selection)
    try:
        result = read_json(Path(files[0])).get("result") or {}
    except (OSError, ValueError, IndexError, AttributeError):
        return False
    return result.get("stopped_by") in search.ENDED


def final_runtime_min(
    config: dict, wildcards, selection, attempt: int, status: Path | None = None
) -> int:
    """Runtime (minutes) of a train_final job, when it is ready: a first seed that reuses its
    trial's weights (a file copy, ``imagenot.train.finals``) asks for its start-up alone
    (:func:`sized_min`), the others for their whole schedule's estimate (no final run measures
    the test split: its evaluation does), at most ``runtime_min``; a retry asks for
    ``runtime_min`` (the reuse did not happen, or the estimate was short), grown per attempt
    and capped at the maximum; a refused retry (``failfast``) for ``empty_runtime_min``."""
    own = config["resources"]["train_trial"]
    if _refused(status, attempt):
        return own["empty_runtime_min"]
    d, p, m = wildcards.dataset, wildcards.protocol, wildcards.model
    if attempt > 1:
        return _grown(config, own["runtime_min"], attempt)
    if reuses_trial(config, d, p, wildcards.seed, selection):
        return _grown(config, sized_min(config, 0.0), 1)
    epochs = search.training_epochs(experiments.space(config, d, p))
    return _grown(config, sized_min(config, _work(config, d, m, epochs)), 1)
