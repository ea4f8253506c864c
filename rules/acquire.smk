# Stage: acquire. Config lookups: imagenot.acquire.plan (imported as acquire_plan in rules/common.smk).
# LAION-built datasets: download + validate per part, then fill, split and write the dataset.
# Datasets on disk (fashion_mnist, cifar10, imagenet, imagefolder): one materialise job each.


# One part of a selection: img2dataset fetch (resumable: its work folder is kept, not an
# output), decode-once validation, the valid images in a tar and one status row per URL.
rule acquire_download:
    input:
        selection=f"{RESULTS}/curate/{{dataset}}/selection.parquet",
        served=acquire_plan.url_map_dirs(config),
    output:
        status=f"{RESULTS}/acquire/{{dataset}}/parts/part-{{part}}.parquet",
        tar=f"{RESULTS}/acquire/{{dataset}}/parts/part-{{part}}.tar",
    log:
        f"{LOGS}/acquire_download/{{dataset}}/{{part}}.log",
    benchmark:
        f"{BENCH}/acquire_download/{{dataset}}/{{part}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
        part="[0-9]+",
    priority: DATA_PRIORITY
    conda:
        "../envs/acquire.yaml"
    threads: 2
    resources:
        mem_mb=mem_mb("light"),
        runtime=runtime("light"),
    params:
        work=f"{RESULTS}/acquire/{{dataset}}/work/part-{{part}}",
        parts=config["acquire"]["download_parts"],
        args=acquire_plan.download_options(config),
    shell:
        "imagenot acquire-download {input.selection} --part {wildcards.part}"
        " --parts {params.parts} --work-dir {params.work} --out-status {output.status}"
        " --processes {threads} {params.args} > {log} 2>&1"


# Fill and split: top images per class by caption similarity, duplicates removed, seeded splits.
rule acquire_build:
    input:
        selection=f"{RESULTS}/curate/{{dataset}}/selection.parquet",
        parts=lambda wc: acquire_plan.part_tables(config, wc.dataset),
    output:
        manifest=f"{RESULTS}/datasets/{{dataset}}/manifest.parquet",
        classes=f"{RESULTS}/datasets/{{dataset}}/classes.txt",
        fingerprint=f"{RESULTS}/datasets/{{dataset}}/fingerprint.txt",
        stats=f"{RESULTS}/acquire/{{dataset}}/download_stats.parquet",
        report=f"{RESULTS}/acquire/{{dataset}}/classes_report.parquet",
        stats_csv=report(
            f"{RESULTS}/acquire/{{dataset}}/download_stats.csv",
            caption="../report/acquire_download_stats.rst",
            category="Acquisition",
            subcategory="{dataset}",
        ),
        classes_csv=report(
            f"{RESULTS}/acquire/{{dataset}}/classes_report.csv",
            caption="../report/acquire_classes_report.rst",
            category="Acquisition",
            subcategory="{dataset}",
        ),
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
    resources:
        mem_mb=mem_mb("light"),
        runtime=runtime("light"),
    params:
        out=f"{RESULTS}/datasets/{{dataset}}",
        report_dir=f"{RESULTS}/acquire/{{dataset}}",
        args=lambda wc: acquire_plan.build_options(config, wc.dataset),
    shell:
        "imagenot acquire-build {input.selection} {input.parts} --out {params.out}"
        " --report-dir {params.report_dir} {params.args} > {log} 2>&1"


# A dataset already on disk, written in the same format (nothing is downloaded).
rule acquire_materialise:
    output:
        manifest=f"{RESULTS}/datasets/{{dataset}}/manifest.parquet",
        classes=f"{RESULTS}/datasets/{{dataset}}/classes.txt",
        fingerprint=f"{RESULTS}/datasets/{{dataset}}/fingerprint.txt",
    log:
        f"{LOGS}/acquire_materialise/{{dataset}}.log",
    benchmark:
        f"{BENCH}/acquire_materialise/{{dataset}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.adapter_pattern(config),
    priority: DATA_PRIORITY
    conda:
        "../envs/acquire.yaml"
    threads: 1
    resources:
        mem_mb=mem_mb("light"),
        runtime=runtime("light"),
    params:
        out=f"{RESULTS}/datasets/{{dataset}}",
        args=lambda wc: acquire_plan.materialise_options(config, wc.dataset),
    shell:
        "imagenot materialise {params.out} {params.args} > {log} 2>&1"
