# Stage: curate. Config lookups: imagenot.curate.plan (imported as curate_plan in rules/common.smk);
# each rule's settings: its class in imagenot.curate.settings (curate_settings), from_config.
# Method section 2, one rule per step; parquet between steps; keys are shard id + row.
# Per-shard jobs scatter, per-dataset jobs gather: no job's memory grows with the shard count.


# Step 1, per shard and dataset-independent: every (caption row, noun synset) lemma match,
# streamed batch by batch, and matching captions per synset (the scatter of the class counts).
rule curate_match:
    input:
        shard=lambda wc: curate_plan.shard_path(config, wc.shard),
        lemmas=NOUN_LEMMAS,
    output:
        matches=curate_paths.MATCHES,
        counts=curate_paths.MATCH_COUNTS,
        stats=curate_paths.MATCH_STATS,
    log:
        f"{LOGS}/curate_match/{{shard}}.log",
    benchmark:
        f"{BENCH}/curate_match/{{shard}}.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **work_resources("curate_match"),
    params:
        settings=to_arg(curate_settings.MatchSettings.from_config(config)),
    shell:
        step("match")


# Steps 1-5 per dataset: class counts summed over the shards (gather), ImageNet overlap, min
# count, leaves, NSFW.
rule curate_candidates:
    input:
        counts=curate_plan.per_shard(config, curate_paths.MATCH_COUNTS),
        lemmas=NOUN_LEMMAS,
        nltk_data=NLTK_DATA,
        class_list=lambda wc: curate_plan.class_list_input(config, wc.dataset),
    output:
        candidates=curate_paths.CANDIDATES,
        audit=curate_paths.CANDIDATES_AUDIT,
        stats=curate_paths.CANDIDATES_STATS,
    log:
        f"{LOGS}/curate_candidates/{{dataset}}.log",
    benchmark:
        f"{BENCH}/curate_candidates/{{dataset}}.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **work_resources("curate_candidates"),
    params:
        settings=lambda wc: to_arg(
            curate_settings.CandidatesSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        step("curate-candidates")


# Step 6 per dataset and shard: captions naming exactly one candidate class (streamed).
rule curate_captions:
    input:
        shard=lambda wc: curate_plan.shard_path(config, wc.shard),
        matches=curate_paths.MATCHES,
        candidates=curate_paths.CANDIDATES,
    output:
        captions=curate_paths.CAPTIONS,
        stats=curate_paths.CAPTION_STATS,
    log:
        f"{LOGS}/curate_captions/{{dataset}}/{{shard}}.log",
    benchmark:
        f"{BENCH}/curate_captions/{{dataset}}/{{shard}}.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **work_resources("curate_captions"),
    params:
        settings=lambda wc: to_arg(
            curate_settings.CaptionSettings.from_config(config, shard=wc.shard)
        ),
    shell:
        step("curate-captions")


# Step 7, once per dataset: the class queries' vectors ("<name> which is <gloss>"; thousands).
rule curate_queries:
    input:
        candidates=curate_paths.CANDIDATES,
    output:
        queries=curate_paths.QUERIES,
    log:
        f"{LOGS}/curate_queries/{{dataset}}.log",
    benchmark:
        f"{BENCH}/curate_queries/{{dataset}}.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 2
    resources:
        **class_resources("medium"),
    params:
        settings=to_arg(curate_settings.QueriesSettings.from_config(config)),
    shell:
        step("curate-queries")


# Step 7 per dataset and part (GPU): embed each distinct caption once in resumable chunks and
# keep one number per caption, its similarity to its own class's query.
rule curate_embed:
    input:
        captions=curate_paths.CAPTIONS,
        candidates=curate_paths.CANDIDATES,
        queries=curate_paths.QUERIES,
        preflight=preflight_gate(),
    output:
        scores=curate_paths.SCORES,
        stats=curate_paths.SCORE_STATS,
    log:
        f"{LOGS}/curate_embed/{{dataset}}/{{shard}}.log",
    benchmark:
        f"{BENCH}/curate_embed/{{dataset}}/{{shard}}.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: gpu_threads(2)
    resources:
        **gpu_request(),
        **work_resources("curate_embed"),
    params:
        settings=to_arg(curate_settings.EmbedSettings.from_config(config)),
        work=curate_paths.EMBEDDINGS,
        gpu_job=gpu_job_option(),
    shell:
        step("curate-embed")


# Steps 7b-8 (gather): class scores from each class's best captions over all parts, threshold,
# top classes, the selection and the top-up reserve (memory: classes x kept captions).
rule curate_select:
    input:
        scores=lambda wc: curate_plan.per_shard(
            config, curate_paths.SCORES, dataset=wc.dataset
        ),
        captions=lambda wc: curate_plan.per_shard(
            config, curate_paths.CAPTIONS, dataset=wc.dataset
        ),
        candidates=curate_paths.CANDIDATES,
    output:
        classes=curate_paths.CLASS_TABLE,
        selection=curate_paths.SELECTION,
        reserve=curate_paths.RESERVE,
        class_scores=curate_paths.CLASS_SCORES,
        stats=curate_paths.SELECTION_STATS,
    log:
        f"{LOGS}/curate_select/{{dataset}}.log",
    benchmark:
        f"{BENCH}/curate_select/{{dataset}}.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **work_resources("curate_select"),
    params:
        settings=lambda wc: to_arg(
            curate_settings.SelectSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        step("curate-select")


# Audit trail (every synset considered, the step that removed or kept it) and funnel.
rule curate_audit:
    input:
        match_stats=curate_plan.per_shard(config, curate_paths.MATCH_STATS),
        candidates=curate_paths.CANDIDATES,
        candidates_audit=curate_paths.CANDIDATES_AUDIT,
        candidates_stats=curate_paths.CANDIDATES_STATS,
        caption_stats=lambda wc: curate_plan.per_shard(
            config, curate_paths.CAPTION_STATS, dataset=wc.dataset
        ),
        class_scores=curate_paths.CLASS_SCORES,
        selection_stats=curate_paths.SELECTION_STATS,
    output:
        audit=curate_paths.AUDIT,
        audit_csv=report(
            curate_paths.AUDIT_CSV,
            caption="../report/curate_audit.rst",
            category="Curation",
            subcategory="{dataset}",
        ),
        funnel=report(
            curate_paths.FUNNEL,
            caption="../report/curate_funnel.rst",
            category="Curation",
            subcategory="{dataset}",
        ),
    log:
        f"{LOGS}/curate_audit/{{dataset}}.log",
    benchmark:
        f"{BENCH}/curate_audit/{{dataset}}.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **class_resources("light"),
    shell:
        step("curate-audit")


# Step 7 check: does the threshold fit the encoder? Classes passing each threshold of a grid.
rule curate_calibration:
    input:
        class_scores=curate_paths.CLASS_SCORES,
    output:
        csv=report(
            curate_paths.CALIBRATION,
            caption="../report/curate_calibration.rst",
            category="Curation",
            subcategory="{dataset}",
        ),
        summary=report(
            curate_paths.CALIBRATION_SUMMARY,
            caption="../report/curate_calibration_summary.rst",
            category="Curation",
            subcategory="{dataset}",
        ),
        pdf=curate_paths.CALIBRATION_PDF,
        png=report(
            curate_paths.CALIBRATION_FIGURE,
            caption="../report/curate_calibration_figure.rst",
            category="Curation",
            subcategory="{dataset}",
        ),
    log:
        f"{LOGS}/curate_calibration/{{dataset}}.log",
    benchmark:
        f"{BENCH}/curate_calibration/{{dataset}}.tsv"
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wc: to_arg(
            curate_settings.CalibrationSettings.from_config(config, dataset=wc.dataset)
        ),
    shell:
        step("curate-calibration")
