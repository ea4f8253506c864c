# Stage: analyse + figures. Config lookups: imagenot.figures.plan (imported as figures_plan in rules/common.smk).
# accuracy.csv -> rankings JSON (standard, Robust) -> one job per figure and per table.
# One rule draws every figure and one writes every table, their names constrained to the
# registry (imagenot.figures.registry). Each figure lists its own plotting module as an input:
# editing it rebuilds only that kind's figures. Every command gets its config as one --settings
# JSON object: a settings object of imagenot.analyse.settings / imagenot.figures.settings.


# Small tables and plots (seconds, little memory) run on the submitting host under a cluster
# executor, not as jobs; the accuracy table reads every evaluation and stays a job.
localrules:
    rankings_json,
    figure,
    results_table,


rule accuracy_table:
    input:
        robustness=evaluate_plan.robustness_files(config),
        per_image=evaluate_plan.per_image_files(config),
        published=figures_plan.PUBLISHED_ACCURACY,
    output:
        accuracy=report(
            figures_plan.ACCURACY,
            caption="../report/accuracy_csv.rst",
            category="Analysis",
        ),
        per_image=figures_plan.PER_IMAGE,
    log:
        f"{LOGS}/accuracy_table.log",
    benchmark:
        f"{BENCH}/accuracy_table.tsv"
    conda:
        "../envs/analyse.yaml"
    threads: 1
    params:
        settings=to_arg(analyse_settings.AccuracySettings.from_config(config)),
    shell:
        "imagenot accuracy-table {input.robustness} --published {input.published}"
        " --settings {params.settings} --out {output.accuracy}"
        " --per-image-out {output.per_image} > {log} 2>&1"


rule rankings_json:
    input:
        accuracy=figures_plan.ACCURACY,
        per_image=figures_plan.PER_IMAGE,
    output:
        report(
            figures_plan.RANKINGS,
            caption="../report/rankings_json.rst",
            category="Analysis",
        ),
    log:
        f"{LOGS}/rankings_json/{{variant}}.log",
    benchmark:
        f"{BENCH}/rankings_json/{{variant}}.tsv"
    wildcard_constraints:
        variant="|".join(figures_plan.VARIANTS),
    conda:
        "../envs/analyse.yaml"
    threads: 1
    params:
        settings=lambda wc: to_arg(
            analyse_settings.RankingsSettings.from_config(config, variant=wc.variant)
        ),
    shell:
        "imagenot rankings {input.accuracy} --per-image {input.per_image}"
        " --settings {params.settings} --out {output} > {log} 2>&1"


rule figure:
    input:
        accuracy=figures_plan.ACCURACY,
        code=lambda wc: figures_plan.figure_code(config, wc.figure),
    output:
        pdf=figures_plan.FIGURE_PDF,
        png=report(
            figures_plan.FIGURE_PNG,
            caption="../report/figure.rst",
            category="Figures",
            subcategory=lambda wc: figures_plan.figure_subcategory(config, wc.figure),
        ),
    log:
        f"{LOGS}/figure/{{figure}}.log",
    benchmark:
        f"{BENCH}/figure/{{figure}}.tsv"
    wildcard_constraints:
        figure=figures_plan.figure_regex(),
    conda:
        "../envs/analyse.yaml"
    threads: 1
    params:
        figure=lambda wc: figures_plan.figure_params(config, wc.figure),
        settings=lambda wc: to_arg(
            figures_settings.FigureSettings.from_config(config, figure=wc.figure)
        ),
    shell:
        "imagenot figure {input.accuracy} --settings {params.settings}"
        " --pdf {output.pdf} --png {output.png} > {log} 2>&1"


rule results_table:
    input:
        accuracy=figures_plan.ACCURACY,
        rankings=expand(figures_plan.RANKINGS, variant=figures_plan.VARIANTS),
        code=figures_plan.tables_code(),
    output:
        csv=report(
            figures_plan.TABLE_CSV,
            caption="../report/table.rst",
            category="Tables",
        ),
        md=figures_plan.TABLE_MD,
    log:
        f"{LOGS}/results_table/{{table}}.log",
    benchmark:
        f"{BENCH}/results_table/{{table}}.tsv"
    wildcard_constraints:
        table=figures_plan.table_regex(),
    conda:
        "../envs/analyse.yaml"
    threads: 1
    params:
        settings=lambda wc: to_arg(
            figures_settings.TableSettings.from_config(config, table=wc.table)
        ),
    shell:
        "imagenot table {input.accuracy} --settings {params.settings}"
        " --rankings {input.rankings} --csv {output.csv} --md {output.md} > {log} 2>&1"
