"""A loop ``Job`` for tests that call the loop directly (no rule, no config).

``imagenot.train.loop.Job`` has no defaults: a workflow job's values come from its
``JobSettings``. Tests of the loop name only what they vary; the rest is what the schema gives a
training job (eval batch size, compile) and a CPU job's values (device cpu, no loader workers,
random init, the schedule over max_epochs, a recovery checkpoint only at stops)."""

from __future__ import annotations

from imagenot.config import schema_default
from imagenot.train.loop import Job

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
}
NAMES = (
    "model", "num_classes", "hyperparameters", "seed", "image_size", "batch_size", "max_epochs",
    "patience", *CPU_JOB,
)  # fmt: skip


def toy_job(*args, **fields) -> Job:
    """``Job(*args, **fields)`` with the fields not given taken from :data:`CPU_JOB`."""
    given = dict(zip(NAMES, args, strict=False))
    return Job(**{**CPU_JOB, **given, **fields})
