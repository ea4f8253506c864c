# Config lookups shared by all stages. Stage-specific lookups live at the top of each stage file.
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from imagenot import conda_envs, job_usage, slurm_profile, work
from imagenot.config import read_config_file
from imagenot.settings import to_arg
from imagenot.stages import check_workflow_config, stage_plans
from imagenot.demo import plan as demo_plan
from imagenot.demo import scale_plan
from imagenot.curate import plan as curate_plan
from imagenot.acquire import plan as acquire_plan
from imagenot.train import plan as train_plan
from imagenot.evaluate import plan as evaluate_plan
from imagenot.figures import plan as figures_plan
from imagenot.diagnostics import plan as diagnostics_plan

RESULTS = "results"
LOGS = f"{RESULTS}/logs"
BENCH = f"{RESULTS}/benchmarks"
NLTK_DATA = f"{RESULTS}/wordnet/nltk_data"
NOUN_LEMMAS = f"{RESULTS}/wordnet/noun_lemmas.parquet"
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
    runtime capped at the site maximum (imagenot.work; config resources.work.<rule>):
    `resources: **work_resources("curate_match")`."""
    return {
        "mem_mb": lambda wildcards, input, attempt: work.mem_mb(
            config, rule, input.size_mb, attempt
        ),
        "runtime": lambda wildcards, input, attempt: work.runtime_min(
            config, rule, input.size_mb, attempt
        ),
    }


def gpu_request(n=None):
    """A GPU rule's request for `n` GPUs (default resources.gpus), `gpu` or `gres` as the site
    profile says; nothing at 0 GPUs."""
    return slurm_profile.gpu_request(config, SITE, n)


def gpu_env(env):
    """The conda env file of GPU env `env` (curate, train) in the CUDA variant of config
    resources.cuda or the site's `cuda` (imagenot.conda_envs, docs/cluster.md)."""
    return conda_envs.env_file(config, env)


def download_resources():
    """A download job's partition: the site's download partition under acquire.download_on:
    local (without one, download rules are local rules: rules/acquire.smk)."""
    return slurm_profile.download_resources(config["acquire"]["download_on"], SITE)


STAGE_PLANS = stage_plans()

# Validate before any job runs: the config files' YAML (a duplicated key is an error), the JSON
# schema (defaults filled), then the cross-key checks the schema cannot express (each stage plan's
# `check`). A wrong key or value stops here, naming it. `imagenot validate-config` runs the same.
for configfile in workflow.configfiles:
    read_config_file(configfile)
# The checks against results on disk (the preregistration record) run in the main process only:
# a cluster job's own Snakemake would repeat them while other jobs update the record.
check_workflow_config(config, against_results=workflow.is_main_process)

# The one protocol constraint of every rule with a {protocol} wildcard (the Snakefile's global
# wildcard_constraints): the configured train.experiments' protocols.
PROTOCOL = train_plan.protocol_regex(config)

# Cluster resources. Memory and runtime of most rules are in the workflow profile
# profiles/default/config.yaml (Snakemake loads it by itself); the heavy curation rules size theirs
# from their input (work_resources). A SLURM site profile (`imagenot slurm-profile`)
# passes its site settings file as config `resources.site`: its maximum runtime replaces
# resources.max_runtime_min (no job asks past what the partitions accept), its GPU flag shapes
# gpu_request(), its `cuda` replaces resources.cuda (gpu_env()). The profile's expressions read
# the maximum and the attempt growth from the environment, set here before Snakemake evaluates
# any job's resources.
SITE = slurm_profile.load_site(config["resources"]["site"])
config["resources"]["max_runtime_min"] = slurm_profile.max_runtime_min(config, SITE)
config["resources"]["cuda"] = conda_envs.cuda_major(config, SITE)
os.environ[slurm_profile.ENV_MAX_RUNTIME] = str(config["resources"]["max_runtime_min"])
os.environ[slurm_profile.ENV_GROWTH] = str(config["resources"]["attempt_growth"])
# Every job's `imagenot` command ends its log with its own peak memory and CPU time, measured by
# the kernel (imagenot.job_usage; Snakemake's benchmark files only sample them). Set here, in
# the process that runs the job's shell line (the main Snakemake locally, the job's own on a
# cluster), so every job inherits it.
os.environ[job_usage.ENV] = "1"

# Sites without conda: every job runs in the site's Apptainer image (containers/imagenot.def).
if slurm_profile.container(SITE):

    container: slurm_profile.container(SITE)


def all_targets():
    """Every final output of the workflow: the union of each stage's targets."""
    targets = [NLTK_DATA]
    for plan in STAGE_PLANS:
        targets += plan.targets(config)
    return targets
