"""What one training job is, free of torch: its :class:`Job` (the rule's settings, and what the
job adds: the trial's hyperparameters and seed, the dataset's classes, the starting weights,
the device), the identity that decides whether a checkpoint may be resumed or a trial's weights
reused, and the dataset and starting weights a job's files hand it.

Why free of torch: a space's first final run decides by this identity whether it is its trial
again (``imagenot.train.finals``), and when it is, the run is a file copy that never imports
torch; the loop (``imagenot.train.loop``) trains the same Job.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING

from imagenot.core.io import sha256_file
from imagenot.train.failfast import missing_weights

if TYPE_CHECKING:
    from imagenot.train.files import FeaturesFiles, FinalFiles, TrialFiles
    from imagenot.train.settings import JobSettings


# Fields of a Job (its own or its settings') that say where or how fast, not what: changing
# them must not invalidate a checkpoint or a trial (tested to name existing fields only). Every
# other field is identity, so a field added to Job or to JobSettings joins it with no other edit.
JOB_TRANSIENT_FIELDS = frozenset(
    {
        "device", "gpu_job", "world", "features",  # where: the device, processes, data source
        "compile", "deterministic", "num_workers", "in_memory", "decode_on_gpu",  # how fast
        "stage_to_local", "eval_batch_size", "max_batch_per_gpu",
        "checkpoint_minutes", "deadline_margin_minutes",  # when it saves and stops
    }
)  # fmt: skip


@dataclass(frozen=True)
class Job:
    """What one training job does: its rule's settings and what the job adds to them;
    ``identity()`` is every field of both but the transient ones.

    No field has a default: ``settings`` is the rule's
    (:class:`imagenot.train.settings.JobSettings`, built from the config, whose schema holds the
    defaults: model, image size, batch size, epochs, ...); ``imagenot.train.jobs.make_job`` adds
    the trial's hyperparameters and seed, the dataset's classes, and two settings resolved for
    this process, which replace their namesakes in the identity."""

    settings: JobSettings
    num_classes: int
    hyperparameters: dict
    seed: int
    init: str  # settings.init as it enters the identity: "random", or the file and its sha256
    # settings.device as this process found it ("cpu", "cuda"; never "auto"; "none" where
    # nothing runs: a final run deciding whether to copy its trial, imagenot.train.finals)
    device: str

    @classmethod
    def of(cls, settings, hyperparameters, seed: int, num_classes: int, device: str) -> Job:
        """The job of the rule's ``settings``, the trial's ``hyperparameters`` and ``seed``, the
        dataset's ``num_classes``, its starting weights described (:func:`init_description`)
        and its ``device``."""
        init = init_description(settings)
        return cls(settings, num_classes, dict(hyperparameters), seed, init, device)

    def identity(self) -> str:
        """What decides whether a checkpoint or trial may be resumed or reused: every field of
        the settings and of the job (the job's own in place of the settings' namesakes) except
        :data:`JOB_TRANSIENT_FIELDS` (derived, so that a new field can never be left out and
        silently reuse results of a different job). tests/test_train.py pins its JSON, key for
        key."""
        keys = asdict(self.settings)
        keys.update((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "settings")
        for transient in JOB_TRANSIENT_FIELDS:
            keys.pop(transient)
        return json.dumps(keys, sort_keys=True)


def dataset_of(files: TrialFiles | FinalFiles | FeaturesFiles) -> tuple[Path, int, str]:
    """(folder, number of classes, fingerprint) of the dataset a training job's ``files``
    hand it: its manifest's folder (the shards it lists), refused unless the classes file is
    the one beside the manifest (:func:`imagenot.core.dataset.folder_of`), the classes and the
    fingerprint read from the files handed."""
    from imagenot.core.dataset import folder_of, read_class_file, read_fingerprint_file

    dataset_dir = folder_of(files.manifest, files.classes)
    return (
        dataset_dir,
        len(read_class_file(files.classes)),
        read_fingerprint_file(files.fingerprint),
    )


def init_description(settings: JobSettings) -> str:
    """The starting weights as they enter a job's identity: their file and its sha256. A
    missing file is a fault no retry fixes (``failfast.MissingWeights``, naming the keys)."""
    init = settings.init
    if not init:
        return "random"
    try:
        return f"{init} sha256:{sha256_file(init)}"
    except OSError as exc:
        raise missing_weights(settings.model, init, exc) from None
