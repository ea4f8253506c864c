"""The SLURM site profile: ``imagenot slurm-profile`` and the site settings the rules read.

Why two profiles: Snakemake loads a *global* profile by name (``--profile slurm`` looks in
``~/.config/snakemake/slurm/``) and the *workflow* profile ``profiles/default/`` of the clone by
itself. What differs between clusters (executor, partitions, account, GPU flag style, status
command, the longest job a partition accepts) belongs to the user and is written once per site by
this command; what only a profile can say for the workflow (array jobs, requeue, the report's
landing page) ships with the clone in ``profiles/default/config.yaml``. Every rule asks for its own
memory and runtime (``imagenot.plan.job_resources``, ``imagenot.plan.work``).

Snakemake merges the two key by key (the workflow profile wins), so the site profile only sets
keys the workflow profile never sets. Site values that must shape the rules' resources (the
maximum runtime, ``--gpus`` or ``--gres``, the download partition) reach the workflow as a file:
the site profile passes ``--config resources={"site": <site.yaml>}``, and ``rules/common.smk``
reads it (:func:`load_site`). The site file's keys, their types and defaults are in
``workflow/schemas/site.schema.yaml`` (one source of truth: the command's flags derive from it).
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

SITE_SCHEMA = "site.schema.yaml"
DEFAULT_DIR = "~/.config/snakemake/slurm"
PROFILE_FILE = "config.yaml"
SITE_FILE = "site.yaml"
PARTITIONS_FILE = "partitions.yaml"
# The clone this command belongs to (workflow/imagenot/ is two folders below its root): jobs in an
# Apptainer image run its package, which the image must see (imagenot.core.checkout)
CLONE = Path(__file__).resolve().parents[3]


def site_schema() -> dict:
    from imagenot.core.config import load_schema

    return load_schema(SITE_SCHEMA)


def validate_site(site: dict, source: str) -> dict:
    """``site`` validated against the site schema, defaults filled; errors name ``source``."""
    from imagenot.core.config import ConfigError, validate_config

    try:
        site = validate_config(dict(site), schema=SITE_SCHEMA)
    except ConfigError as exc:
        raise ConfigError(
            f"{source}: {str(exc).replace('workflow config', 'site settings')}"
        ) from exc
    if site["array_limit"] > site["jobs"]:
        # the plugin holds an array back until a full chunk of its rule's jobs has reached it,
        # and Snakemake hands it at most `jobs` at a time: a larger chunk could never fill
        raise ConfigError(
            f"{source}: array_limit ({site['array_limit']}) must not exceed jobs ({site['jobs']})"
        )
    return site


def deployment_help() -> str:
    """What each software deployment needs: the site schema's ``software_deployment``
    description, one line."""
    return " ".join(site_schema()["properties"]["software_deployment"]["description"].split())


def deployment(site: dict, conda_found: bool) -> str:
    """The site's software deployment: its ``software_deployment``, else apptainer when it has
    a container, else conda when ``conda_found``; refused when it cannot be told (no conda here
    and none chosen) or contradicts the container, naming the choices and what each needs
    (:func:`deployment_help`)."""
    chosen = site["software_deployment"]
    if chosen is None:
        if site["container"]:
            return "apptainer"
        if conda_found:
            return "conda"
        raise ValueError(
            "conda is not installed here: say how jobs get their software with "
            f"--software-deployment conda|apptainer|none ({deployment_help()})"
        )
    if chosen == "apptainer" and not site["container"]:
        raise ValueError("--software-deployment apptainer needs --container IMAGE")
    if chosen != "apptainer" and site["container"]:
        raise ValueError(
            f"--container runs every job in an image: --software-deployment apptainer, not {chosen}"
        )
    return chosen


def container(site: dict | None) -> str | None:
    """The Apptainer image every job runs in, if the site has one (else the conda envs)."""
    return site["container"] if site else None


def load_site(path: str | os.PathLike | None) -> dict | None:
    """The site settings of a site profile (None for local runs, which have none)."""
    if path is None:
        return None
    from imagenot.core.config import read_config_file

    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"config resources.site: site settings file {path} does not exist; write it with "
            "`imagenot slurm-profile` (docs/cluster.md)"
        )
    return validate_site(read_config_file(path), str(path))


def max_runtime_min(config: dict, site: dict | None) -> int:
    """The longest runtime any job may request: the site's maximum when a site profile is in use
    (the partitions refuse more), else config ``resources.max_runtime_min``."""
    return site["max_runtime_min"] if site else config["resources"]["max_runtime_min"]


def gpu_request(config: dict, site: dict | None, n: int | None = None, nodes: int = 1) -> dict:
    """Resources by which a GPU rule asks for ``n`` GPUs (default ``resources.gpus``) on each of
    ``nodes`` nodes, the way the site wants: ``gpu`` (the plugin submits ``--gpus``) or ``gres``
    (``--gres=gpu:N``). No GPU: nothing, so the job asks SLURM for none and runs on CPU.

    A multi-node job asks ``--nodes`` and ``--gres=gpu:N`` whatever the site's flag: SLURM counts
    ``--gres`` per node, so every node gets N GPUs, while the plugin's ``--gpus`` is a total
    that SLURM may split unevenly (7 + 1), and the plugin has no ``--gpus-per-node``.

    Several GPUs on one node (one process, or torchrun's ranks on one host) ask ``--nodes=1``:
    without it SLURM may place a ``--gpus=N`` job on several nodes, where the job's one
    launcher sees only the first node's GPUs."""
    n = config["resources"]["gpus"] if n is None else n
    if n == 0:
        return {}
    model = site["gpu_model"] if site else None
    whole = {"nodes": nodes} if nodes > 1 or n > 1 else {}
    if nodes > 1 or (site and site["gpu_flag"] == "gres"):
        return {"gres": f"gpu:{model}:{n}" if model else f"gpu:{n}", **whole}
    return {"gpu": n, **({"gpu_model": model} if model else {}), **whole}


def gpu_threads(config: dict, cpu_threads: int, n: int | None = None) -> int:
    """Cores of a GPU rule's job: ``resources.cpus_per_gpu`` for each of its ``n`` GPUs
    (default ``resources.gpus``), the cores that feed them (decoding, transforms, tokenising:
    a GPU job with two cores waits on its loader); ``cpu_threads``, the rule's own count, when
    the config plans no GPU."""
    n = config["resources"]["gpus"] if n is None else n
    return n * config["resources"]["cpus_per_gpu"] if n > 0 else cpu_threads


def download_resources(download_on: str, site: dict | None) -> dict:
    """Resources of a download job: under ``download_on: local`` with a download partition, that
    partition (its nodes reach the internet); otherwise none (the plugin picks the CPU
    partition; local downloads without a partition are local rules, see rules/acquire.smk)."""
    if download_on == "local" and site and site["download_partition"]:
        return {"slurm_partition": site["download_partition"]}
    return {}


def partitions(site: dict) -> dict:
    """The plugin's partition limits (``slurm-partition-config``): it sends each job to the
    partition it fits, GPU jobs to the GPU partition, CPU jobs to the CPU partition."""
    parts = {site["partition"]: {"max_runtime": site["max_runtime_min"], "max_gpu": 0}}
    gpu = parts.setdefault(site["gpu_partition"], {"max_runtime": site["max_runtime_min"]})
    gpu["max_gpu"] = site["max_gpus"]
    if site["gpu_model"]:
        gpu["available_gpu_models"] = [site["gpu_model"]]
    return {"partitions": parts}


def profile(site: dict, directory: Path) -> dict:
    """The global profile's keys (Snakemake command-line options without the dashes)."""
    out: dict = {
        "executor": "slurm",
        "jobs": site["jobs"],
        "retries": site["retries"],
        "keep-going": True,
        "rerun-incomplete": True,
        "show-failed-logs": True,
        "printshellcmds": True,
        "latency-wait": 60,
        "max-status-checks-per-second": 1,
        "slurm-partition-config": str(directory / PARTITIONS_FILE),
        "slurm-status-command": site["status_command"],
        "slurm-array-limit": site["array_limit"],
        "slurm-keep-successful-logs": True,
        # YAML inside --config is read by Snakemake as strings only: pass the path, not values
        "config": [f"resources={json.dumps({'site': str(directory / SITE_FILE)})}"],
    }
    method = deployment(site, conda_found=True)
    if method != "none":  # none: Snakemake's own default, no deployment (the clone's .venv)
        out = {"executor": out.pop("executor"), "software-deployment-method": method, **out}
    if site["container"]:
        # Apptainer hides the node's GPUs and driver from a container without --nv: every GPU
        # job would see no CUDA device (the preflight's first check, docs/gpu.md). The clone is
        # mounted where it is: every job runs its package (imagenot.core.checkout), not a copy
        out["apptainer-args"] = "--nv"
        if (CLONE / "Snakefile").is_file():
            out["apptainer-args"] += f" --bind {shlex.quote(str(CLONE))}"
    if site["conda_prefix"] and method == "conda":
        out["conda-prefix"] = site["conda_prefix"]
    if site["account"]:
        # Values of resources are Python expressions: quoted, the account is a string. The
        # workflow profile sets no default-resources, so this one passes through.
        out["default-resources"] = {"slurm_account": repr(site["account"])}
    return out


def write(
    site: dict, directory: str | os.PathLike, force: bool = False
) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """Write the site profile (config.yaml), its partition limits and the site settings; return
    the files written and (old file, its backup) for each file replaced.

    A site profile holds what the user typed once (account, partitions): an existing file with
    other content is never overwritten silently. Without ``force`` that is a FileExistsError
    naming it, before anything is written; with ``force`` the old file is kept beside the new one
    as ``<name>.bak`` (``.bak.2``, ... when that exists). The same content again is no change."""
    import yaml

    directory = Path(directory).expanduser().resolve()
    header = (
        "# Written by `imagenot slurm-profile` (imagenot's SLURM site profile; docs/cluster.md).\n"
        "# Rewrite it with the command rather than by hand: site.yaml is what the workflow reads.\n"
    )
    files = {
        PROFILE_FILE: profile(site, directory),
        PARTITIONS_FILE: partitions(site),
        SITE_FILE: site,
    }
    texts = {
        directory / name: header + yaml.safe_dump(c, sort_keys=False) for name, c in files.items()
    }
    changed = [p for p, text in texts.items() if p.exists() and p.read_text() != text]
    if changed and not force:
        raise FileExistsError(
            f"{', '.join(map(str, changed))} exists with other settings (another site profile): "
            "not overwritten; rerun with --force to replace it (the old file is kept as .bak)"
        )
    directory.mkdir(parents=True, exist_ok=True)
    backups = []
    for path in changed:
        backup = path.with_name(path.name + ".bak")
        n = 2
        while backup.exists():
            backup, n = path.with_name(f"{path.name}.bak.{n}"), n + 1
        path.rename(backup)
        backups.append((path, backup))
    for path, text in texts.items():
        path.write_text(text)
    return list(texts), backups


# ---- command line ------------------------------------------------------------------------------
def options() -> tuple:
    """The options of ``imagenot slurm-profile`` (:data:`imagenot.core.steps.STEPS`): one per key of
    the site schema (its description, default, choices and type), then ``--dir`` and
    ``--force``."""
    from imagenot.core.steps import Option

    schema = site_schema()
    out = []
    for key, spec in schema["properties"].items():
        text = " ".join(spec.get("description", "").split())
        if spec.get("default") is not None:  # (the schema fills it: argparse's own is None)
            text += f" (default: {spec['default']})"
        # a key that may be null names its choices in an anyOf (e.g. cuda: a variant or null)
        enum = spec.get("enum") or next(
            (s["enum"] for s in spec.get("anyOf", []) if "enum" in s), None
        )
        choices = tuple(v for v in enum if v is not None) if enum else None
        kind = int if spec.get("type") == "integer" and not enum else None
        flag = "--max-runtime" if key == "max_runtime_min" else None
        required = key in schema["required"]
        out.append(Option(key, text, None, kind, required, choices=choices, flag=flag))
    where = f"where to write the profile (default {DEFAULT_DIR}: `--profile slurm` finds it)"
    force = "replace an existing site profile with other settings (its files are kept as "
    force += "<name>.bak); without it the command refuses, naming the file"
    return (*out, Option("dir", where), Option("force", force, switch=True))


def main(dir: str | None, force: bool, **given) -> None:
    """Write the SLURM site profile from the site keys ``given`` (then: snakemake --profile
    slurm all)."""
    import shutil
    import sys

    given = {k: v for k, v in given.items() if v is not None}
    site = validate_site(given, "imagenot slurm-profile")
    conda = shutil.which("conda") or shutil.which("mamba")
    site["software_deployment"] = deployment(site, bool(conda))
    written, backups = write(site, dir or DEFAULT_DIR, force=force)
    for path in written:
        print(path)
    for path, backup in backups:
        print(f"replaced {path}: the previous one is kept as {backup}")
    chosen = site["software_deployment"]
    print(f"software deployment: {chosen} ({deployment_help()})", file=sys.stderr)
    if chosen == "conda" and not conda:
        print(
            "note: conda is not installed here; Snakemake needs it where it runs (or rerun with "
            "--software-deployment none or apptainer, --force)",
            file=sys.stderr,
        )
