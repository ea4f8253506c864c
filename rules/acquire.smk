# Stage: acquire. Config lookups: imagenot.acquire.plan (imported as acquire_plan in rules/common.smk);
# each rule's settings: its class in imagenot.acquire.settings (acquire_settings), from_config.
# LAION-built datasets: download + validate per part (round 0: the selection; rounds 1..
# acquire.topup_rounds: reserve captions of classes still short), one fill-and-split plan over
# every round, the kept images stored by one job per download part, then a small gather.
# Datasets on disk (the adapter kinds of imagenot.acquire.kinds): one job per class range
# (acquire.classes_per_job), then the same gather.

from imagenot.plan import split_readers
from imagenot.audit import pool_plan as audit_pool_plan


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
        **class_resources("download"),
        **download_resources(),
    params:
        work=acquire_paths.PART_WORK,
        settings=to_arg(acquire_settings.DownloadSettings.from_config(config)),
    shell:
        step("acquire-download")


# Top-up round {round}: for each class still short after the earlier rounds, its next-best
# reserve captions (ceil(deficit * (1 + curate.oversample)), best first). Reads status tables
# only (no images), but every round's: memory grows with the dataset (2 M rows in the paper), so
# its request is sized from its input (resources.work, docs/scale.md).
rule acquire_topup_select:
    input:
        selections=lambda wc: acquire_plan.selections_before(wc.dataset, wc.round),
        status=lambda wc: acquire_plan.status_before(config, wc.dataset, wc.round),
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
        settings=lambda wc: to_arg(
            acquire_settings.TopupSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        step("acquire-topup")


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
# removed across the dataset (and, with audit.remove_flagged, the images the audit of the
# download pool flags: rule audit_pool's exclusion list), seeded splits; the download and class reports. Stops with the
# shortfall (classes short, the fewest, keys to change) unless allow_fewer. Status tables only,
# no images; memory grows with the dataset: the request is sized from the input (resources.work).
rule acquire_split:
    input:
        selections=lambda wc: acquire_plan.selections_before(
            wc.dataset, acquire_plan.all_rounds(config)
        ),
        status=lambda wc: acquire_plan.status_before(
            config, wc.dataset, acquire_plan.all_rounds(config)
        ),
        reserve=lambda wc: acquire_plan.plan_reserve(config, wc.dataset),
        exclusions=lambda wc: audit_pool_plan.exclusions(config, wc.dataset),
    output:
        assignment=temp(acquire_paths.ASSIGNMENT),
        download_stats=acquire_paths.DOWNLOAD_STATS,
        classes_report=acquire_paths.CLASSES_REPORT,
        download_stats_csv=report(
            acquire_paths.DOWNLOAD_STATS_CSV,
            caption="../report/acquire_download_stats.rst",
            category="Acquisition",
            subcategory="{dataset}",
        ),
        classes_report_csv=report(
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
        settings=lambda wc: to_arg(
            acquire_settings.FillSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        step("acquire-plan")


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
    resources:
        **class_resources("light"),
    params:
        out=paths.DATASET,
        settings=to_arg(acquire_settings.WriteSettings.from_config(config)),
    shell:
        step("acquire-write")


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
    localrule: True
    conda:
        "../envs/acquire.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=to_arg(acquire_settings.GatherSettings.from_config(config)),
    shell:
        step("acquire-gather")


# A dataset already on disk, one class range (acquire.classes_per_job classes) per job, written
# in the same format (nothing is downloaded); a finished range is not redone. It stores the
# splits some rule of the config reads (imagenot.plan.split_readers.materialise_settings). Its disk
# request: its share of those splits' stored copy and of the test originals the dataset keeps
# where published weights are evaluated on it (imagenot.plan.split_readers.range_disk_mb); memory
# and runtime: its class.
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
        **class_resources("light"),
        disk_mb=lambda wc: split_readers.range_disk_mb(config, wc.dataset),
    params:
        out=paths.DATASET,
        settings=lambda wc: to_arg(
            split_readers.materialise_settings(config, wc.dataset)
        ),
    shell:
        step("materialise-range")


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
    localrule: True
