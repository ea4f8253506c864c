# imagenot: re-execute "ImageNot: a contrast with ImageNet preserves model rankings".
# One rule file per stage under rules/; all logic lives in the `imagenot` package (workflow/).
from snakemake.utils import min_version

min_version("9.0")


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
include: "rules/evaluate.smk"
include: "rules/figures.smk"
include: "rules/diagnostics.smk"


rule all:
    default_target: True
    input:
        all_targets(),
