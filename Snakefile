# imagenot: re-execute "ImageNot: a contrast with ImageNet preserves model rankings".
# One rule file per stage under rules/; all logic lives in the `imagenot` package (workflow/).
from snakemake.utils import min_version

min_version("9.0")


# The demo config is the default, read only when no --configfile is given: a --configfile
# (config/paper.yaml, or the demo and an overlay: `--configfile config/config.yaml my.yaml`) is
# the whole config, never merged over the demo's keys. Cluster jobs get the same --configfile
# list, so they read the same config. `imagenot validate-config FILES` merges FILES the same way.
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


include: "rules/common.smk"


wildcard_constraints:
    dataset=NAME_PATTERN,
    shard=curate_plan.SHARD_ID_PATTERN,
    protocol=PROTOCOL,
    model=NAME_PATTERN,
    seed="[0-9]+",


include: "rules/wordnet.smk"
include: "rules/demo.smk"
include: "rules/scale.smk"
include: "rules/curate.smk"
include: "rules/acquire.smk"
include: "rules/train.smk"
include: "rules/preflight.smk"
include: "rules/evaluate.smk"
include: "rules/analyse.smk"
include: "rules/figures.smk"
include: "rules/diagnostics.smk"
include: "rules/audit.smk"
include: "rules/summary.smk"


# the report opens on this page (with the summary's counts: profiles/default), not the rule graph
report: "report/workflow.rst"


# before the first job: the last run's training fault records go, the run's study is recorded
# (run_started, rules/common.smk). Used as a module, Snakemake runs no handler of the module:
# the host's own `onstart:` and `onsuccess:` call them (docs/module.md).
onstart:
    run_started()


# at the end of every run: what it made, whether it is usable (exit 1 when it is not) and
# whether the report is current
onsuccess:
    run_finished()


rule all:
    default_target: True
    input:
        all_targets(),
