# Stage: acquire. Config lookups: imagenot.acquire.plan (imported as acquire_plan in rules/common.smk);
# each rule's settings: its class in imagenot.acquire.settings (acquire_settings), from_config.
# LAION-built datasets: download + validate per part (round 0: the selection; rounds 1..
# acquire.topup_rounds: reserve captions of classes still short), one fill-and-split plan over
# every round, the kept images stored by one job per download part, then a small gather.
# Datasets on disk (the adapter kinds of imagenot.acquire.kinds): one job per class range
# (acquire.classes_per_job), then the same gather.


localrules:
    acquire_build,
    acquire_materialise,


# One part of a selection (where the internet is: acquire.download_on, docs/cluster.md): img2dataset fetch (resumable: its work folder is kept, not an
# output), decode-once validation, the valid images in a tar and one status row per URL.
rule acquire_download:
    input:
        selection=curate_paths.SELECTION,
        served=acquire_plan.url_map_dirs(config),
    output:
        status=acquire_paths.PART_STATUS,
        tar=acquire_paths.PART_TAR,
    log:
        f"{LOGS}/acquire_download/{{dataset}}/{{part}}.log",
    benchmark:
        f"{BENCH}/acquire_download/{{dataset}}/{{part}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
        part="[0-9]+",
    priority: DATA_PRIORITY
    localrule: acquire_plan.download_local(config, SITE)
    conda:
        "../envs/acquire.yaml"
    threads: 2
    resources:
        **download_resources(),
    params:
        work=acquire_paths.PART_WORK,
        settings=to_arg(acquire_settings.DownloadSettings.from_config(config)),
    shell:
        "imagenot acquire-download {input.selection} --part {wildcards.part}"
        " --work-dir {params.work} --out-status {output.status}"
        " --processes {threads} --settings {params.settings} > {log} 2>&1"


# Top-up round {round}: for each class still short after the earlier rounds, its next-best
# reserve captions (ceil(deficit * (1 + curate.oversample)), best first). Reads status tables
# only (no images), but every round's: memory grows with the dataset (2 M rows in the paper), so
# its request is sized from its input (resources.work, docs/scale.md).
rule acquire_topup_select:
    input:
        unpack(lambda wc: acquire_plan.rounds_before(config, wc.dataset, int(wc.round))),
        reserve=curate_paths.RESERVE,
    output:
        selection=acquire_paths.ROUND_SELECTION,
    log:
        f"{LOGS}/acquire_topup_select/{{dataset}}/{{round}}.log",
    benchmark:
        f"{BENCH}/acquire_topup_select/{{dataset}}/{{round}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
        round="[1-9][0-9]*",
    priority: DATA_PRIORITY
    conda:
        "../envs/acquire.yaml"
    threads: 1
    resources:
        **work_resources("acquire_topup_select"),
    params:
        selections=lambda wc, input: acquire_plan.repeat_option(
            "--selection", input.selections
        ),
        status=lambda wc, input: acquire_plan.repeat_option("--status", input.status),
        settings=lambda wc: to_arg(
            acquire_settings.TopupSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        "imagenot acquire-topup {params.selections} {params.status} --reserve {input.reserve}"
        " --out {output.selection} --settings {params.settings} > {log} 2>&1"


# The top-up round's download: the same job on that round's selection.
use rule acquire_download as acquire_topup_download with:
    input:
        selection=acquire_paths.ROUND_SELECTION,
        served=acquire_plan.url_map_dirs(config),
    output:
        status=acquire_paths.ROUND_PART_STATUS,
        tar=acquire_paths.ROUND_PART_TAR,
    log:
        f"{LOGS}/acquire_topup_download/{{dataset}}/{{round}}/{{part}}.log",
    benchmark:
        f"{BENCH}/acquire_topup_download/{{dataset}}/{{round}}/{{part}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
        round="[1-9][0-9]*",
        part="[0-9]+",
    localrule: acquire_plan.download_local(config, SITE)
    params:
        work=acquire_paths.ROUND_PART_WORK,
        settings=to_arg(acquire_settings.DownloadSettings.from_config(config)),


# Fill and split over every round: top images per class by caption similarity, duplicates
# removed across the dataset, seeded splits; the download and class reports. Stops with the
# shortfall (classes short, the fewest, keys to change) unless allow_fewer. Status tables only,
# no images; memory grows with the dataset: the request is sized from the input (resources.work).
rule acquire_split:
    input:
        unpack(lambda wc: acquire_plan.plan_inputs(config, wc.dataset)),
    output:
        assignment=temp(acquire_paths.ASSIGNMENT),
        stats=acquire_paths.DOWNLOAD_STATS,
        report=acquire_paths.CLASSES_REPORT,
        stats_csv=report(
            acquire_paths.DOWNLOAD_STATS_CSV,
            caption="../report/acquire_download_stats.rst",
            category="Acquisition",
            subcategory="{dataset}",
        ),
        classes_csv=report(
            acquire_paths.CLASSES_REPORT_CSV,
            caption="../report/acquire_classes_report.rst",
            category="Acquisition",
            subcategory="{dataset}",
        ),
    log:
        f"{LOGS}/acquire_split/{{dataset}}.log",
    benchmark:
        f"{BENCH}/acquire_split/{{dataset}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
    priority: DATA_PRIORITY
    conda:
        "../envs/acquire.yaml"
    threads: 1
    resources:
        **work_resources("acquire_split"),
    params:
        selections=lambda wc, input: acquire_plan.repeat_option(
            "--selection", input.selections
        ),
        status=lambda wc, input: acquire_plan.repeat_option("--status", input.status),
        reserve=lambda wc, input: acquire_plan.repeat_option("--reserve", input.reserve),
        report_dir=acquire_paths.ACQUIRE,
        settings=lambda wc: to_arg(
            acquire_settings.FillSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        "imagenot acquire-plan {params.selections} {params.status} {params.reserve}"
        " --assignment {output.assignment} --report-dir {params.report_dir}"
        " --name {wildcards.dataset} --settings {params.settings} > {log} 2>&1"


# The kept images of one download part (every round's tar of it) into the dataset's shards.
rule acquire_write:
    input:
        assignment=acquire_paths.ASSIGNMENT,
    output:
        part=temp(acquire_paths.WRITE_PART),
    log:
        f"{LOGS}/acquire_write/{{dataset}}/{{part}}.log",
    benchmark:
        f"{BENCH}/acquire_write/{{dataset}}/{{part}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
        part="[0-9]+",
    priority: DATA_PRIORITY
    conda:
        "../envs/acquire.yaml"
    threads: 1
    params:
        out=paths.DATASET,
        settings=to_arg(acquire_settings.WriteSettings.from_config(config)),
    shell:
        "imagenot acquire-write {input.assignment} --job part-{wildcards.part}"
        " --out {params.out} --part-manifest {output.part}"
        " --settings {params.settings} > {log} 2>&1"


# Gather: manifest, classes.txt and the content fingerprint from the part manifests.
rule acquire_build:
    input:
        parts=lambda wc: acquire_plan.write_manifests(config, wc.dataset),
    output:
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
    log:
        f"{LOGS}/acquire_build/{{dataset}}.log",
    benchmark:
        f"{BENCH}/acquire_build/{{dataset}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
    priority: DATA_PRIORITY
    conda:
        "../envs/acquire.yaml"
    threads: 1
    params:
        out=paths.DATASET,
        settings=to_arg(acquire_settings.GatherSettings.from_config(config)),
    shell:
        "imagenot acquire-gather {input.parts} --out {params.out}"
        " --settings {params.settings} > {log} 2>&1"


# A dataset already on disk, one class range (acquire.classes_per_job classes) per job, written
# in the same format (nothing is downloaded); a finished range is not redone. Its disk request:
# its share of the stored copy and of the test originals the dataset keeps where published
# weights are evaluated on it (imagenot.acquire.sizes.range_disk_mb); memory and runtime: the
# workflow profile.
rule acquire_materialise_range:
    output:
        part=temp(acquire_paths.RANGE_PART),
    log:
        f"{LOGS}/acquire_materialise_range/{{dataset}}/{{job}}.log",
    benchmark:
        f"{BENCH}/acquire_materialise_range/{{dataset}}/{{job}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.adapter_pattern(config),
        job="[0-9]+",
    priority: DATA_PRIORITY
    conda:
        "../envs/acquire.yaml"
    threads: 1
    resources:
        disk_mb=lambda wc: acquire_sizes.range_disk_mb(config, wc.dataset),
    params:
        out=paths.DATASET,
        settings=lambda wc: to_arg(
            acquire_settings.MaterialiseSettings.from_config(
                config, dataset=wc.dataset
            )
        ),
    shell:
        "imagenot materialise-range {params.out} --job {wildcards.job}"
        " --part-manifest {output.part} --settings {params.settings} > {log} 2>&1"


# Gather of a dataset on disk.
use rule acquire_build as acquire_materialise with:
    input:
        parts=lambda wc: acquire_plan.range_manifests(config, wc.dataset),
    log:
        f"{LOGS}/acquire_materialise/{{dataset}}.log",
    benchmark:
        f"{BENCH}/acquire_materialise/{{dataset}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.adapter_pattern(config),
