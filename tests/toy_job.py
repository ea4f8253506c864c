"""A loop ``Job`` for tests that call the loop directly (no rule, no config).

``imagenot.train.identity.Job`` holds its rule's ``JobSettings`` and has no defaults: a workflow
job's values come from the config. Tests of the loop name only what they vary, whether a field
of the job or of its settings; the rest is what the schema gives a training job (eval batch size,
compile, determinism, deadline margin, in-memory data) and a CPU job's values (device cpu, no
GPU, one process, no loader workers, random init, the schedule over max_epochs, a recovery
checkpoint only at stops)."""

from __future__ import annotations

import dataclasses

from imagenot.core.config import schema_default
from imagenot.train.identity import Job
from imagenot.train.settings import JobSettings

CPU_JOB = {
    "schedule_epochs": 0,  # the schedule's horizon is max_epochs (loop.horizon)
    "trainable": "all",
    "init": "",  # no starting weights
    "eval_batch_size": schema_default("train.eval_batch_size"),
    "device": "cpu",
    "compile": schema_default("train.compile"),
    "num_workers": 0,
    "checkpoint_minutes": 0.0,  # only at stops and at the end (a test asks for more itself)
    # a model trained from scratch: the schema's statistics
    "normalisation": {
        "mean": schema_default("train.normalisation.mean"),
        "std": schema_default("train.normalisation.std"),
    },
    "gpu_job": False,
    "deterministic": schema_default("train.deterministic"),
    "deadline_margin_minutes": schema_default("train.deadline_margin_minutes"),
    "in_memory": schema_default("train.in_memory"),
    "world": 1,
    "max_batch_per_gpu": schema_default("train.max_batch_per_gpu"),
    "decode_on_gpu": schema_default("train.decode_on_gpu"),
    "stage_to_local": schema_default("train.stage_to_local"),
    "features": None,  # the image path
}
NAMES = (
    "model", "num_classes", "hyperparameters", "seed", "image_size", "batch_size", "max_epochs",
    "patience", *CPU_JOB,
)  # fmt: skip
# what the job adds to its settings (make_job); init and device are also settings (the job's
# own are the settings' as this process resolved them: the toy job's are the same)
OWN = {f.name for f in dataclasses.fields(Job)} - {"settings"}


def with_fields(job: Job, **fields) -> Job:
    """``job`` with ``fields`` changed, each where it lives: in the job, its settings or both
    (``init``, ``device``)."""
    settings = {k: v for k, v in fields.items() if k not in OWN or k in ("init", "device")}
    own = {k: v for k, v in fields.items() if k in OWN}
    return dataclasses.replace(job, settings=dataclasses.replace(job.settings, **settings), **own)


def toy_job(*args, **fields) -> Job:
    """``Job`` of ``*args`` (:data:`NAMES` in order) and ``fields``, whether the job's or its
    settings', the fields not given taken from :data:`CPU_JOB`."""
    given = {**CPU_JOB, **dict(zip(NAMES, args, strict=False)), **fields}
    own = {k: given[k] for k in OWN}
    settings = JobSettings(**{k: v for k, v in given.items() if k not in OWN - {"init", "device"}})
    return Job(settings=settings, **own)
