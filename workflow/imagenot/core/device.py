"""Which device a GPU job runs on, by fact, not by request: the one check every GPU rule's job
(training, evaluation, image and caption embedding) applies before it touches a tensor.

Why: a job the config plans for a GPU (``resources.gpus > 0``) that lands on a node without one
(a wrong ``gres``, a profile that lost its GPU flag, ``CUDA_VISIBLE_DEVICES`` emptied) would
otherwise run on the CPU for days and still succeed; it must stop with the reason instead.
Light: importing this module imports no torch (the caption embedding's planning jobs import it).
"""

from __future__ import annotations

import os


class DeviceError(RuntimeError):
    """A job planned for a GPU that finds none (or asked for CUDA without one)."""


def cuda_available() -> bool:
    """Whether this process sees a CUDA device (imports torch)."""
    import torch

    return torch.cuda.is_available()


def resolve_device(
    requested: str, gpu_job: bool, cuda_available: bool, key: str = "train.device"
) -> str:
    """The device a job runs on, by fact: the GPUs it was given, however they were requested
    (``--gpus`` or a ``gres`` string). ``cpu`` is an explicit choice; ``auto`` uses CUDA when
    the job sees a device, and the CPU only when the config plans no GPUs (``gpu_job`` false);
    a job planned for a GPU that sees none stops instead of running for days on the CPU.
    ``key`` is the config key of ``requested`` (``train.device``, ``curate.encoder.device``),
    or None where the job has none and ``resources.gpus: 0`` is the CPU choice."""
    if requested == "cpu":
        return "cpu"
    if cuda_available:
        return "cuda"
    if requested == "cuda" or gpu_job:
        why = f"{key} is cuda" if requested == "cuda" else "resources.gpus > 0"
        fix = f"set {key}: cpu" if key else "set resources.gpus: 0"
        raise DeviceError(
            f"this job is a GPU job ({why}) but sees no CUDA device "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); check the "
            f"GPU request of your profile (gpu / gres), or {fix} to run on CPUs"
        )
    return "cpu"
