"""Memory and runtime of a rule's job by its class: every rule asks for its own resources.

Why in the rules: a run without a profile (``--workflow-profile none``, the workflow used as a
Snakemake module from another folder, a site profile alone) must still ask a cluster for enough
memory and time, and a job's shell line may read ``{resources.runtime}`` (the training jobs'
deadline). So each rule names a class in its ``resources:`` (``**class_resources("light")``,
rules/common.smk) and the numbers live in the config schema (``resources.classes``,
workflow/schemas/resources.schema.yaml), the one place a study or a site changes them. A profile's
``set-resources`` still overrides a rule's request.

    mem_mb  = class mem_mb      x growth ** (attempt - 1)
    runtime = class runtime_min x growth ** (attempt - 1), at most resources.max_runtime_min

``growth`` is ``resources.attempt_growth``: a retry after an out-of-memory kill or a time limit
asks for more. The heavy rules size theirs from their input instead (:mod:`imagenot.plan.work`), the
training rules from their promotion input (:mod:`imagenot.train.resources`).
"""

from __future__ import annotations

from imagenot.plan.work import growth


def _job_class(config: dict, job_class: str) -> dict:
    classes = config["resources"]["classes"]
    if job_class not in classes:
        raise ValueError(
            f"resource class {job_class!r} is not one of config resources.classes "
            f"({', '.join(classes)})"
        )
    return classes[job_class]


def mem_mb(config: dict, job_class: str, attempt: int = 1) -> int:
    """Memory (MB) a job of ``job_class`` asks for on ``attempt``."""
    return int(_job_class(config, job_class)["mem_mb"] * growth(config, attempt))


def runtime_min(config: dict, job_class: str, attempt: int = 1) -> int:
    """Runtime (minutes) a job of ``job_class`` asks for on ``attempt``, at most the site's
    maximum (``resources.max_runtime_min``, replaced by a site profile's)."""
    first = _job_class(config, job_class)["runtime_min"]
    return min(int(first * growth(config, attempt)), config["resources"]["max_runtime_min"])
