# imagenot: re-execute "ImageNot: a contrast with ImageNet preserves model rankings".
# One rule file per stage under rules/; all logic lives in the `imagenot` package (workflow/).
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"


wildcard_constraints:
    dataset="[a-z][a-z0-9_]*",
    shard=curate_plan.SHARD_ID_PATTERN,
    protocol=PROTOCOL,
    model="[a-z0-9_]+",
    seed="[0-9]+",


include: "rules/wordnet.smk"
include: "rules/demo.smk"
include: "rules/scale.smk"
include: "rules/curate.smk"
include: "rules/acquire.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/figures.smk"
include: "rules/diagnostics.smk"
include: "rules/summary.smk"


# the report opens on this page (with the summary's counts: profiles/default), not the rule graph
report: "report/workflow.rst"


# at the end of every run: what it made and whether it is usable (exit 1 when it is not)
onsuccess:
    summary_plan.on_success(config)


rule all:
    default_target: True
    input:
        all_targets(),
