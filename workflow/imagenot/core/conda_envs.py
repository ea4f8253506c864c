"""Which conda env file a rule uses: the CUDA variant of the GPU envs, chosen by config.

Why variants: the GPU envs (those of the GPU rules: caption embedding in ``curate``; training,
evaluation and image embeddings in ``train``) install torch from PyPI, whose wheels bring their
own CUDA runtime (the ``nvidia-*`` wheels) and so need only an NVIDIA driver on the node, but a
driver new enough for that runtime. The current torch wheels are built for CUDA 13 (driver 580 or
newer); many clusters run older drivers. For them every GPU env has a CUDA 12 variant
(``envs/<env>-cu12.yaml``), pinned from ``envs/requirements-cu12.lock``: the newest torch whose PyPI
wheels use CUDA 12 (docs/cluster.md, "GPU drivers", has the driver table).

The choice is config ``resources.cuda`` (the workflow config; default in
workflow/schemas/resources.schema.yaml), replaced by the site settings' ``cuda`` when a SLURM site
profile sets it (``imagenot slurm-profile --cuda 12``): the driver is a fact of the site.
``rules/common.smk`` resolves the two once (:func:`cuda_major`) and every rule that uses a GPU
env names it through :func:`env_file` (``conda: gpu_env("train")``). The CPU rules that share a
GPU env's stage (e.g. drawing trials in ``train``) take the same variant, so a checkout creates
one variant of each env, not both.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagenot.core.registries import Registry


@dataclass(frozen=True)
class CudaVariant:
    """One CUDA build of the GPU envs: the env files' name suffix and the lock they pin from."""

    suffix: str
    lock: str


# The registry (imagenot.core.registries kind "cuda_variants"): CUDA major version -> its variant.
# The schema of `resources.cuda` and the site's `cuda` name it (x-registry), as do the env files
# tests/test_envs.py generates. Names are strings, as Snakemake's --config passes them.
CUDA_VARIANTS = Registry(
    "CUDA variant",
    {
        "13": CudaVariant(suffix="", lock="envs/requirements.lock"),
        "12": CudaVariant(suffix="-cu12", lock="envs/requirements-cu12.lock"),
    },
)
# Envs used by GPU rules (the only ones with CUDA variants; the others carry torch for shared
# imports but never touch a GPU, and torch's CUDA 13 build runs on CPU without a driver).
GPU_ENVS = ("curate", "train")


def cuda_major(config: dict, site: dict | None) -> str:
    """The CUDA major version of the GPU envs: the site's ``cuda`` when a site profile sets it,
    else config ``resources.cuda``."""
    if site is not None and site["cuda"] is not None:
        return site["cuda"]
    return config["resources"]["cuda"]


def env_name(env: str, cuda: str) -> str:
    """The env file's stem of GPU env ``env`` built for CUDA ``cuda`` (e.g. train-cu12)."""
    if env not in GPU_ENVS:
        raise ValueError(f"{env!r} is not a GPU env (one of {', '.join(GPU_ENVS)})")
    return env + CUDA_VARIANTS.entry(cuda).suffix


def env_file(config: dict, env: str) -> str:
    """The ``conda:`` path (relative to rules/) of GPU env ``env`` in the variant of config
    ``resources.cuda`` (after rules/common.smk applied the site's choice)."""
    return f"../envs/{env_name(env, config['resources']['cuda'])}.yaml"
