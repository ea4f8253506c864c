"""Which device a training job runs on (by fact, not by request) and the process-wide torch
settings of a job."""

from __future__ import annotations

import logging
import os

import torch

from imagenot.io import keep_freed_memory

log = logging.getLogger(__name__)


class DeviceError(RuntimeError):
    """A job planned for a GPU that finds none (or asked for CUDA without one)."""


def resolve_device(requested: str, gpu_job: bool, cuda_available: bool) -> str:
    """The device a job trains on, by fact: the GPUs it was given, however they were requested
    (``--gpus`` or a ``gres`` string). ``cpu`` is an explicit choice; ``auto`` uses CUDA when
    the job sees a device, and the CPU only when the config plans no GPUs (``gpu_job`` false);
    a job planned for a GPU that sees none stops instead of training for days on the CPU."""
    if requested == "cpu":
        return "cpu"
    if cuda_available:
        return "cuda"
    if requested == "cuda" or gpu_job:
        why = "train.device is cuda" if requested == "cuda" else "resources.gpus > 0"
        raise DeviceError(
            f"this job is a GPU job ({why}) but sees no CUDA device "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}); check the "
            f"GPU request of your profile (gpu / gres), or set train.device: cpu to train on CPUs"
        )
    return "cpu"


def deterministic_for(setting: bool | None, device: str) -> bool:
    """Deterministic algorithms: as ``train.deterministic`` says, else (null) on the CPU only,
    where exact resumption is tested; GPU runs then autotune cuDNN (the field's default)."""
    return device == "cpu" if setting is None else bool(setting)


def configure(deterministic: bool, threads: int) -> None:
    """Process-wide settings: thread count, deterministic algorithms or cuDNN autotuning, and
    glibc's malloc keeping freed memory (``imagenot.io.keep_freed_memory``: a training job is one
    process whose every step frees and re-allocates the same activations; without it they
    page-fault anew in some allocation histories, up to a tenth of a CPU step's time)."""
    keep_freed_memory()
    torch.set_num_threads(max(1, threads))
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = True
    # one line per process: a data-parallel job logs it once per rank (each configures itself)
    log.info(
        "torch configured: %d threads, %s",
        torch.get_num_threads(),
        "deterministic algorithms" if deterministic else "cuDNN autotuning",
    )
