# Stage: audit (docs/audit.md): near-duplicates of each audited dataset's images in the
# reference, the other datasets' test splits and its own other splits.
# Config lookups: imagenot.audit.plan (imported as audit_plan in rules/common.smk). Embeddings
# are the diagnostics' files, one per dataset and split (rule diagnostics_embed_images).


rule audit_calibrate:
    input:
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        checkpoint=diagnostics_plan.encoder_checkpoint(config),
        result=diagnostics_plan.encoder_result(config),
        preflight=preflight_gate(),
    output:
        calibration=audit_plan.CALIBRATION,
    log:
        f"{LOGS}/audit_calibrate/{{dataset}}.log",
    benchmark:
        f"{BENCH}/audit_calibrate/{{dataset}}.tsv"
    conda:
        gpu_env("train")
    threads: gpu_threads(2)
    resources:
        **class_resources("medium"),
        **gpu_request(),
    params:
        settings=to_arg(audit_settings.CalibrateSettings.from_config(config)),
        identity=diagnostics_plan.encoder_description(config),
        gpu_job=gpu_job_option(),
    shell:
        step("audit-calibrate")


# With audit.verification.enabled and pixel_candidates: one job per dataset and split the
# search compares (an audited split or a target set), its thumbnails made once for every
# search job that reads them, in the order of the split's embeddings.
rule audit_thumbnails:
    input:
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        embeddings=diagnostics_plan.IMAGE_EMBEDDINGS,
    output:
        thumbnails=audit_plan.THUMBNAILS,
    log:
        f"{LOGS}/audit_thumbnails/{{dataset}}/{{split}}.log",
    benchmark:
        f"{BENCH}/audit_thumbnails/{{dataset}}/{{split}}.tsv"
    wildcard_constraints:
        split=diagnostics_plan.SPLIT_PATTERN,
    conda:
        gpu_env("train")
    threads: 2
    resources:
        **class_resources("medium_long"),
    params:
        settings=lambda wc: to_arg(
            audit_settings.ThumbnailsSettings.from_config(config, split=wc.split)
        ),
    shell:
        step("audit-thumbnails")


# One job per part of a split (audit.query_parts): that part against every target set, each
# image's candidates verified by alignment on the images (audit.verification), the target
# images decoded only for the candidates the part verifies.
rule audit_search:
    input:
        queries=lambda wc: audit_plan.query_embeddings(wc.dataset, wc.split),
        targets=lambda wc: audit_plan.target_embeddings(config, wc.dataset, wc.split),
        manifests=lambda wc: audit_plan.search_manifests(config, wc.dataset, wc.split),
        thumbnails=lambda wc: audit_plan.search_thumbnails(config, wc.dataset, wc.split),
    output:
        matches=audit_plan.MATCHES,
    log:
        f"{LOGS}/audit_search/{{dataset}}/{{split}}-{{part}}.log",
    benchmark:
        f"{BENCH}/audit_search/{{dataset}}/{{split}}-{{part}}.tsv"
    wildcard_constraints:
        split=diagnostics_plan.SPLIT_PATTERN,
        part=audit_plan.PART_PATTERN,
    conda:
        gpu_env("train")
    threads: 2
    resources:
        **work_resources("audit_search"),
    params:
        settings=lambda wc: to_arg(
            audit_settings.SearchSettings.from_config(
                config, dataset=wc.dataset, split=wc.split, part=wc.part
            )
        ),
    shell:
        step("audit-search")


rule audit_table:
    input:
        matches=lambda wc: audit_plan.matches_files(config, wc.dataset),
        calibration=audit_plan.CALIBRATION,
    output:
        per_class=audit_plan.PER_CLASS,
        csv=report(
            audit_plan.TABLE_CSV,
            caption="../report/audit_table.rst",
            category="Audit",
        ),
        flagged=audit_plan.FLAGGED,
        closest=audit_plan.CLOSEST,
        summary=audit_plan.SUMMARY,
    log:
        f"{LOGS}/audit_table/{{dataset}}.log",
    benchmark:
        f"{BENCH}/audit_table/{{dataset}}.tsv"
    conda:
        gpu_env("train")
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wc: to_arg(
            audit_settings.TableSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        step("audit-table")


rule audit_figure:
    input:
        closest=audit_plan.CLOSEST,
        summary=audit_plan.SUMMARY,
        manifests=lambda wc: audit_plan.manifests(config, wc.dataset),
        classes=lambda wc: audit_plan.class_files(config, wc.dataset),
    output:
        pdf=audit_plan.FIGURE_PDF,
        png=report(
            audit_plan.FIGURE_PNG,
            caption="../report/audit_figure.rst",
            category="Audit",
        ),
    log:
        f"{LOGS}/audit_figure/{{dataset}}.log",
    benchmark:
        f"{BENCH}/audit_figure/{{dataset}}.tsv"
    conda:
        gpu_env("train")
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wc: to_arg(
            audit_settings.FigureSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        step("audit-figure")


# With audit.remove_flagged (docs/audit.md, "Removing flagged images"): the download pool of an
# audited dataset (every round's validated images, before its splits exist) against the
# reference's splits, the other datasets' compared split and itself, at the reference's
# threshold; rule acquire_split leaves out the images of its exclusion list.
rule audit_pool:
    input:
        selections=lambda wc: acquire_plan.selections_before(
            wc.dataset, acquire_plan.all_rounds(config)
        ),
        status=lambda wc: acquire_plan.status_before(
            config, wc.dataset, acquire_plan.all_rounds(config)
        ),
        targets=lambda wc: audit_pool_plan.target_embeddings(config, wc.dataset),
        calibration=lambda wc: audit_pool_plan.calibration(config),
        checkpoint=diagnostics_plan.encoder_checkpoint(config),
        result=diagnostics_plan.encoder_result(config),
        preflight=preflight_gate(),
    output:
        embeddings=audit_pool_plan.POOL_EMBEDDINGS,
        exclusions=audit_pool_plan.EXCLUSIONS,
    log:
        f"{LOGS}/audit_pool/{{dataset}}.log",
    benchmark:
        f"{BENCH}/audit_pool/{{dataset}}.tsv"
    wildcard_constraints:
        dataset=acquire_plan.laion_pattern(config),
    conda:
        gpu_env("train")
    threads: gpu_threads(2)
    resources:
        **class_resources("medium"),
        **gpu_request(),
    params:
        settings=lambda wc: to_arg(
            audit_settings.PoolSettings.from_config(config, dataset=wc.dataset)
        ),
        gpu_job=gpu_job_option(),
    shell:
        step("audit-pool")
