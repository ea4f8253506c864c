"""Which device a training job runs on (by fact, not by request: ``imagenot.core.device``, the one
check of every GPU rule) and the process-wide torch settings of a job."""

from __future__ import annotations

import logging
import os

import torch

from imagenot.core.device import DeviceError, resolve_device
from imagenot.core.io import keep_freed_memory

log = logging.getLogger(__name__)

__all__ = ["DeviceError", "configure", "deterministic_for", "resolve_device"]

# the cuBLAS workspace that makes its kernels deterministic (one of the two values PyTorch's
# reproducibility notes give; the larger, faster one)
CUBLAS_WORKSPACE = ":4096:8"


def deterministic_for(setting: bool | None, device: str) -> bool:
    """Deterministic algorithms: as ``train.deterministic`` says, else (null) on the CPU only,
    where exact resumption is tested; GPU runs then autotune cuDNN (the field's default)."""
    return device == "cpu" if setting is None else bool(setting)


def configure(deterministic: bool, threads: int) -> None:
    """Process-wide settings: thread count, deterministic algorithms (with cuBLAS's fixed
    workspace, ``CUBLAS_WORKSPACE_CONFIG``) or cuDNN autotuning, and
    glibc's malloc keeping freed memory (``imagenot.core.io.keep_freed_memory``: a training job is one
    process whose every step frees and re-allocates the same activations; without it they
    page-fault anew in some allocation histories, up to a tenth of a CPU step's time)."""
    keep_freed_memory()
    torch.set_num_threads(max(1, threads))
    if deterministic:
        # cuBLAS is deterministic only with a fixed workspace (PyTorch's reproducibility notes):
        # read when the process's first cuBLAS handle is made, so set before any CUDA work
        # (each job configures itself first); a value the environment gives is kept
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
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
