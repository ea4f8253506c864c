# Config lookups shared by all stages. Stage-specific lookups live at the top of each stage file.
import copy
import os
import sys
from pathlib import Path

# The imagenot package of this checkout: workflow/ beside this file's rules/ folder (found from
# this file, not from the main Snakefile: used as a Snakemake module, the main Snakefile is the
# host's). Snakemake and every job import this copy (jobs through IMAGENOT_CHECKOUT, below). A
# module loaded from a URL (`github(...)`) has no local package: the one installed where
# Snakemake runs is used, the jobs getting a copy of it (below), and without one the run stops
# here.
CHECKOUT_PACKAGE = (
    Path(workflow.current_basedir.get_path_or_uri(secret_free=True)).parent / "workflow"
)
if (CHECKOUT_PACKAGE / "imagenot" / "__init__.py").is_file():
    sys.path.insert(0, str(CHECKOUT_PACKAGE))
else:
    CHECKOUT_PACKAGE = None
    try:
        import imagenot
    except ImportError:
        raise SystemExit(
            "imagenot workflow: its Python package is neither beside the workflow's rules "
            f"({workflow.current_basedir.get_path_or_uri(secret_free=True)}) nor installed where Snakemake runs: "
            "clone the repository and name its Snakefile (README, 'Using the workflow as a "
            "module'), or install the package into this environment"
        ) from None

from imagenot.core import (
    checkout,
    conda_envs,
    escape,
    job_usage,
    lifeline,
    paths,
    shell_line,
    steps,
)
from imagenot.plan import job_resources, slurm_profile, work
from imagenot.run import restamp, run_identity, summary_plan
from imagenot.core.paths import BENCH, LOGS, NLTK_DATA, NOUN_LEMMAS, RESULTS
from imagenot.core.config import check_config_files, config_sources, shown_path
from imagenot.core.names import NAME_PATTERN
from imagenot.core.settings import to_arg, to_json
from imagenot.core.stages import check_workflow_config, stage_plans
from imagenot.demo import plan as demo_plan
from imagenot.demo import scale_plan
from imagenot.demo import settings as demo_settings
from imagenot.curate import paths as curate_paths
from imagenot.curate import plan as curate_plan
from imagenot.curate import settings as curate_settings
from imagenot.acquire import paths as acquire_paths
from imagenot.acquire import plan as acquire_plan
from imagenot.acquire import settings as acquire_settings
from imagenot.train import failfast
from imagenot.train import launch as train_launch
from imagenot.train import paths as train_paths
from imagenot.train import plan as train_plan
from imagenot.train import preflight_plan
from imagenot.train import resources as train_resources
from imagenot.train import rings as train_rings
from imagenot.train import settings as train_settings
from imagenot.evaluate import paths as evaluate_paths
from imagenot.evaluate import plan as evaluate_plan
from imagenot.evaluate import settings as evaluate_settings
from imagenot.figures import plan as figures_plan
from imagenot.analyse import plan as analyse_plan
from imagenot.analyse import settings as analyse_settings
from imagenot.figures import settings as figures_settings
from imagenot.diagnostics import plan as diagnostics_plan
from imagenot.diagnostics import settings as diagnostics_settings
from imagenot.audit import plan as audit_plan
from imagenot.audit import settings as audit_settings

# Dataset-building rules (demo world, curation, acquisition) go first when jobs compete for
# cores: they are the critical path every training job waits on.
DATA_PRIORITY = 10


def datasets_of_kind(*kinds):
    """Names of configured datasets whose kind is one of `kinds`, in config order."""
    return [name for name, spec in config["datasets"].items() if spec["kind"] in kinds]


def laion_datasets():
    """Datasets this workflow builds from LAION metadata."""
    return datasets_of_kind("laion")


def work_resources(rule):
    """Memory and runtime (minutes) of a heavy rule's job from its input size and attempt, the
    runtime capped at the site maximum (imagenot.plan.work; config resources.work.<rule>):
    `resources: **work_resources("curate_match")`."""
    return {
        "mem_mb": lambda wildcards, input, attempt: work.mem_mb(
            config, rule, input.size_mb, attempt
        ),
        "runtime": lambda wildcards, input, attempt: work.runtime_min(
            config, rule, input.size_mb, attempt
        ),
    }


def gpu_request(n=None, nodes=1):
    """A GPU rule's request for `n` GPUs (default resources.gpus) on each of `nodes` nodes,
    `gpu` or `gres` as the site profile says (multi-node: `gres`, counted per node); nothing at
    0 GPUs."""
    return slurm_profile.gpu_request(config, SITE, n, nodes)


def gpu_threads(cpu_threads):
    """Cores of the job of a GPU rule, resources.cpus_per_gpu per GPU it asks for (its feed,
    decoding, transforms, tokenising); `cpu_threads` when the config plans no GPU."""
    return slurm_profile.gpu_threads(config, cpu_threads)


def gpu_job_option():
    """`--gpu-job` for the command of each GPU rule when the config plans GPUs; the job then
    stops if it sees no CUDA device instead of running on the CPU (imagenot.core.device).
    """
    return "--gpu-job" if config["resources"]["gpus"] > 0 else ""


def preflight_gate(per_model=False):
    """A GPU rule's input that holds it until the preflight of this site, env and config has
    passed (rules/preflight.smk): the site's CUDA gate, and with `per_model` its `{model}`'s own
    (imagenot.train.preflight_plan.MODEL_RULES); `ancient`, so a preflight rerun never outdates
    finished jobs. Nothing at resources.gpus 0 or with resources.require_preflight false.
    """
    return [ancient(f) for f in preflight_plan.gate_inputs(config, SITE, per_model)]


def train_slot_resources():
    """A train_trial job's GPUs, memory and runtime, from its promotion input when the job is
    ready (imagenot.train.resources.slot_trains): an empty slot asks for no GPU (so the plugin
    sends it to the CPU partition), little memory and a short runtime, and so does the retry of
    a job that failed for good (imagenot.train.failfast: it exits at once). While planning, before
    the decision exists, the full request (train_gpu_request: its {model}'s GPUs). Memory: the
    job's batch rings on top (train_rings.ring_mb), not grown after a deadline stop."""
    return {
        **{
            key: lambda wildcards, input, attempt, value=value: (
                value(wildcards)
                if train_resources.slot_gets_gpu(
                    input.previous, wildcards.slot, slot_status(wildcards), attempt
                )
                else None
            )
            for key, value in train_gpu_request().items()
        },
        "mem_mb": lambda wildcards, input, attempt: train_resources.slot_mem_mb(
            config,
            input.previous,
            wildcards.slot,
            attempt,
            slot_status(wildcards),
            train_rings.ring_mb(
                config, wildcards.dataset, wildcards.protocol, wildcards.model
            ),
            wildcards.model,
        ),
        # a slot that trains: its stage's estimated time where that is less than runtime_min
        "runtime": lambda wildcards, input, attempt: train_resources.slot_runtime_min(
            config,
            input.previous,
            wildcards.slot,
            attempt,
            slot_status(wildcards),
            (wildcards.dataset, wildcards.protocol, wildcards.model, wildcards.stage),
        ),
    }


def slot_status(wildcards):
    """The status file of a train_trial job (imagenot.train.failfast)."""
    return train_resources.slot_status(
        wildcards.dataset,
        wildcards.protocol,
        wildcards.model,
        wildcards.stage,
        wildcards.slot,
    )


def train_gpu_request():
    """A training job's GPU request as its {model} asks (train.gpus_per_job, or the model's
    train.gpus_per_job_overrides entry: imagenot.train.experiments.gpus): each key of any
    model's request, a function of the wildcards (None where the model's request lacks it).
    """
    models = [None, *config["train"]["models"]]
    keys = dict.fromkeys(
        k
        for m in models
        for k in gpu_request(
            train_plan.gpus_per_node(config, m), train_plan.nodes(config, m)
        )
    )
    return {
        key: lambda wildcards, key=key: gpu_request(
            train_plan.gpus_per_node(config, wildcards.model),
            train_plan.nodes(config, wildcards.model),
        ).get(key)
        for key in keys
    }


def refused_gpu_request(full, status):
    """A GPU rule's request `full` (each value, or a function of the wildcards giving it), each
    key None (no GPU, the CPU partition) on the retry of a job whose earlier attempt failed for
    good (imagenot.train.failfast; it exits at once).
    """
    return {
        key: lambda wildcards, attempt, value=value: (
            None
            if failfast.refused(status(wildcards), attempt)
            else (value(wildcards) if callable(value) else value)
        )
        for key, value in full.items()
    }


def gpu_env(env):
    """The conda env file of GPU env `env` (curate, train) in the CUDA variant of config
    resources.cuda or the site's `cuda` (imagenot.core.conda_envs, docs/cluster.md)."""
    return conda_envs.env_file(config, env)


def download_resources():
    """A download job's partition: the site's download partition under acquire.download_on:
    local (without one, download rules are local rules: rules/acquire.smk)."""
    return slurm_profile.download_resources(config["acquire"]["download_on"], SITE)


def class_resources(job_class, **own):
    """Memory and runtime (minutes) of a rule's job by its class (config resources.classes,
    grown per attempt, the runtime capped at the site maximum: imagenot.plan.job_resources), with the
    rule's `own` requests beside or instead of them:
    `resources: **class_resources("light")`. Every rule asks for its own, so a run needs no
    profile for them (a profile's set-resources overrides)."""
    return {
        "mem_mb": lambda wildcards, attempt: job_resources.mem_mb(
            config, job_class, attempt
        ),
        "runtime": lambda wildcards, attempt: job_resources.runtime_min(
            config, job_class, attempt
        ),
        **own,
    }


def class_runtime(job_class):
    """The runtime of a rule's job by its class, for a rule whose memory is its own
    (`runtime=class_runtime("light")`)."""
    return lambda wildcards, attempt: job_resources.runtime_min(
        config, job_class, attempt
    )


def job(command, launch=None):
    """A rule's shell line running `command` (`imagenot <subcommand> ...`): strict mode, then
    `exec`, so that the command replaces its shell (a signal to the job reaches the command, and
    no shell is left to die alone while its command writes outputs: imagenot.core.lifeline), as this
    checkout's package (`python -m imagenot` with the checkout first on the path:
    imagenot.core.checkout). `shell: job("imagenot ...")`; the training rules' line starts with
    `launch="{params.launch}"` instead (their launcher before `python`, lifeline.job_prefix). In
    each rule's own line, not a global shell.prefix: used as a module, the host's rules keep
    their own shell. Every field of `command` is shell-quoted (Snakemake's `:q`, added by
    imagenot.core.shell_line.quoted): a config value reaches the command as one literal word.
    """
    return f"{launch or lifeline.job_prefix()} {shell_line.quoted(command)}"


def step(name):
    """The shell line running workflow step `name` (imagenot.core.steps), for `shell: step(NAME)`:
    its command with each file the step declares under its role's flag (the input or output
    key of that name), its settings (`params.settings`) and the options the job hands, quoted
    by job() after the launcher the step names (a training job's `{params.launch}`)."""
    return job(steps.command(name), steps.STEPS.entry(name).launch)


STAGE_PLANS = stage_plans()


def run_started():
    """What a run does before its first job (the Snakefile's `onstart`; as a module, the host's
    `onstart: imagenot.run_started()`): the status files of the last run's permanent faults and
    deadline stops go, so a new run tries every training job again (imagenot.train.failfast), and
    the run's record of the study its results belong to is written (imagenot.run.run_identity): a
    later config of another study (the paper after the demo) is refused instead of reading them
    as its own. Main process only: jobs run without hooks."""
    failfast.clear_all(RESULTS)
    run_identity.record(RUN_IDENTITY)


def run_finished():
    """The end of a successful run (the Snakefile's `onsuccess`; as a module, the host's
    `onsuccess: imagenot.run_finished()`): what it made, whether it is usable (exit 1 when it is
    not) and whether the report is current (imagenot.run.summary_plan.on_success)."""
    summary_plan.on_success(config, workflow)


# Validate before any job runs: the config files' YAML (a duplicated key is an error), the
# additions to lists (`models+: [...]`: imagenot.core.config.resolve_additions), the JSON schema
# (defaults filled), then the cross-key checks the schema cannot express (each stage plan's
# `check`). A wrong key or value stops here, naming it and the file that gives it.
# `imagenot validate-config` runs the same function (imagenot.core.config.check_config_files).
# The checks against results on disk (the preregistration record) run in the main process only:
# a cluster job's own Snakemake would repeat them while other jobs update the record. A refusal
# is one line, the message validate-config prints, without a traceback. The workflow works on a
# validated copy: used as a module, `config` is the host's own dict, which keeps its keys as the
# host wrote them.
try:
    config = check_config_files(
        copy.deepcopy(config),
        config_sources([shown_path(f) for f in workflow.configfiles]),
        lambda merged: check_workflow_config(
            merged, against_results=workflow.is_main_process
        ),
    )
except ValueError as exc:  # ConfigError included
    raise SystemExit(f"invalid workflow config: {exc}") from None

# A run copied without its file times (cp -r): folders and files over Snakemake's checksum size
# look newer than what was made from them, and their jobs would run again. One line says so, and
# the command that sets the recorded times back (imagenot.run.restamp), before the plan is printed.
# Main process only: a cluster job's own Snakemake reads no record.
if workflow.is_main_process and (copied := restamp.copied_without_times(".")):
    print(copied, file=sys.stderr)

# The report's captions (report/*.rst, reStructuredText) show the config's free-text description:
# escaped once here, by the one reStructuredText escaper, so that no markup in it (a link, a
# `.. raw:: html` block) reaches report.html. Nothing else reads the description.
# (the run's record takes the description unescaped: imagenot.run.run_identity)
RUN_IDENTITY = run_identity.identity(config, workflow.configfiles)
config["description"] = escape.rst_text(config["description"])

# The one protocol constraint of every rule with a {protocol} wildcard (the Snakefile's global
# wildcard_constraints): the configured train.experiments' protocols.
PROTOCOL = train_plan.protocol_regex(config)

# Cluster resources. Every rule asks for its own memory and runtime, by class
# (class_resources), sized from its input (work_resources) or, for training, from its promotion
# input. A SLURM site profile (`imagenot slurm-profile`) passes its site settings file as config
# `resources.site`: its maximum runtime replaces resources.max_runtime_min (no job asks past what
# the partitions accept), its GPU flag shapes gpu_request(), its `cuda` replaces resources.cuda
# (gpu_env()).
SITE = slurm_profile.load_site(config["resources"]["site"])
config["resources"]["max_runtime_min"] = slurm_profile.max_runtime_min(config, SITE)
config["resources"]["cuda"] = conda_envs.cuda_major(config, SITE)
# Every job's `imagenot` command ends its log with its own peak memory and CPU time, measured by
# the kernel (imagenot.core.job_usage; Snakemake's benchmark files only sample them). Set here, in
# the process that runs the job's shell line (the main Snakemake locally, the job's own on a
# cluster), so every job inherits it; so does the checkout whose package the jobs run
# (imagenot.core.checkout; where the package is the installed one, its copy in the working
# directory: checkout.staged_package).
os.environ[job_usage.ENV] = "1"
os.environ[checkout.ENV] = str(
    CHECKOUT_PACKAGE
    or checkout.staged_package(
        Path(imagenot.__file__).parents[1], Path.cwd(), imagenot.__version__
    )
)
# Jobs' shell lines call `python` (and `torchrun`): the bin folder of the interpreter running
# Snakemake goes first on PATH, so `.venv/bin/snakemake ...` finds the venv's commands without an
# activated venv. A rule's conda env (--sdm conda) prepends its own bin folder when the job
# starts, so it still wins; a cluster job's Snakemake sets it again.
VENV_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != VENV_BIN:
    os.environ.update(PATH=os.pathsep.join(filter(None, [VENV_BIN, os.getenv("PATH")])))

# Sites without conda: every job runs in the site's Apptainer image (containers/imagenot.def).
if slurm_profile.container(SITE):

    container: slurm_profile.container(SITE)


def all_targets():
    """Every final output of the workflow: the union of each stage's targets."""
    targets = [NLTK_DATA]
    for plan in STAGE_PLANS:
        targets += plan.targets(config)
    return targets
