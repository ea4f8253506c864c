# Stage: diagnostics (docs/method.md section 3): how a contrast dataset differs from its reference.
# Config lookups: imagenot.diagnostics.plan (imported as diagnostics_plan in rules/common.smk).
# WordNet subjects are dataset names or list-{name} for the class lists named in config.


# Plots and the table of small statistics files run on the submitting host under a cluster
# executor, not as jobs (`localrule: True`: a rule's own, so it holds when the workflow is a
# module whose rules the host renames).


rule diagnostics_wordnet_stats:
    input:
        classes=lambda wc: diagnostics_plan.class_list_file(config, wc.subject),
        reference=diagnostics_plan.reference_classes_input(config),
        nltk_data=NLTK_DATA,
    output:
        stats=diagnostics_plan.WORDNET_STATS,
        per_class=diagnostics_plan.WORDNET_CLASSES,
    log:
        f"{LOGS}/diagnostics_wordnet_stats/{{subject}}.log",
    benchmark:
        f"{BENCH}/diagnostics_wordnet_stats/{{subject}}.tsv"
    wildcard_constraints:
        subject=diagnostics_plan.SUBJECT_PATTERN,
    conda:
        gpu_env("curate")
    threads: 1
    resources:
        **class_resources("light"),
    shell:
        step("wordnet-stats")


rule diagnostics_caption_stats:
    input:
        classes=curate_paths.CLASS_TABLE,
        selection=curate_paths.SELECTION,
    output:
        stats=diagnostics_plan.CAPTION_STATS,
    log:
        f"{LOGS}/diagnostics_caption_stats/{{dataset}}.log",
    benchmark:
        f"{BENCH}/diagnostics_caption_stats/{{dataset}}.tsv"
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    shell:
        step("caption-similarity-stats")


rule diagnostics_embed_images:
    input:
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        checkpoint=diagnostics_plan.encoder_checkpoint(config),
        result=diagnostics_plan.encoder_result(config),
        preflight=preflight_gate(),
    output:
        embeddings=diagnostics_plan.IMAGE_EMBEDDINGS,
    log:
        f"{LOGS}/diagnostics_embed_images/{{dataset}}/{{split}}.log",
    benchmark:
        f"{BENCH}/diagnostics_embed_images/{{dataset}}/{{split}}.tsv"
    wildcard_constraints:
        split=diagnostics_plan.SPLIT_PATTERN,
    conda:
        gpu_env("train")
    threads: gpu_threads(2)
    resources:
        **class_resources("medium_long"),
        **gpu_request(),
    params:
        settings=lambda wc: to_arg(
            diagnostics_settings.EmbedSettings.from_config(config, split=wc.split)
        ),
        identity=diagnostics_plan.encoder_description(config),
        gpu_job=gpu_job_option(),
    shell:
        step("embed-images")


rule diagnostics_image_similarity:
    input:
        embeddings=lambda wc: diagnostics_plan.similarity_embeddings(config, wc.dataset),
    output:
        stats=diagnostics_plan.IMAGE_STATS,
        per_class=diagnostics_plan.IMAGE_CLASSES,
    log:
        f"{LOGS}/diagnostics_image_similarity/{{dataset}}.log",
    benchmark:
        f"{BENCH}/diagnostics_image_similarity/{{dataset}}.tsv"
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=to_arg(
            diagnostics_settings.ImageSimilaritySettings.from_config(config)
        ),
    shell:
        step("image-similarity")


# One rule for every diagnostics figure, its name constrained to imagenot.diagnostics.plan.FIGURES;
# the plan gives each figure its sources' labels and their files by role (WordNet per-class
# tables, curation outputs or per-class image similarities; [] for a role it does not read).
rule diagnostics_figure:
    input:
        tables=lambda wc: diagnostics_plan.figure_inputs(config, wc.name, "tables"),
        classes=lambda wc: diagnostics_plan.figure_inputs(config, wc.name, "classes"),
        selection=lambda wc: diagnostics_plan.figure_inputs(
            config, wc.name, "selection"
        ),
    output:
        pdf=diagnostics_plan.FIGURE_PDF,
        png=report(
            diagnostics_plan.FIGURE_PNG,
            caption="../report/diagnostics_figure.rst",
            category="Diagnostics",
        ),
    log:
        f"{LOGS}/diagnostics_figure/{{name}}.log",
    benchmark:
        f"{BENCH}/diagnostics_figure/{{name}}.tsv"
    wildcard_constraints:
        name="|".join(diagnostics_plan.FIGURES),
    localrule: True
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        labels=lambda wc: diagnostics_plan.figure_labels(config, wc.name),
        settings=lambda wc: to_arg(
            diagnostics_settings.FigureSettings.from_config(config, name=wc.name)
        ),
    shell:
        step("diagnostics-figure")


rule diagnostics_table:
    input:
        wordnet=lambda wc: diagnostics_plan.table_input(config, wc.subject, "wordnet"),
        captions=lambda wc: diagnostics_plan.table_input(config, wc.subject, "captions"),
        reference_captions=lambda wc: diagnostics_plan.table_input(
            config, wc.subject, "reference_captions"
        ),
        images=lambda wc: diagnostics_plan.table_input(config, wc.subject, "images"),
        reference_images=lambda wc: diagnostics_plan.table_input(
            config, wc.subject, "reference_images"
        ),
    output:
        csv=report(
            diagnostics_plan.TABLE_CSV,
            caption="../report/diagnostics_table.rst",
            category="Diagnostics",
        ),
        md=diagnostics_plan.TABLE_MD,
    log:
        f"{LOGS}/diagnostics_table/{{subject}}.log",
    benchmark:
        f"{BENCH}/diagnostics_table/{{subject}}.tsv"
    wildcard_constraints:
        subject=diagnostics_plan.SUBJECT_PATTERN,
    localrule: True
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wc: to_arg(
            diagnostics_settings.TableSettings.from_config(config, subject=wc.subject)
        ),
    shell:
        step("diagnostics-table")
