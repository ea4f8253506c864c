# Stage: figures. Config lookups: imagenot.figures.plan (imported as figures_plan in rules/common.smk).
# accuracy.csv and the rankings JSON (rules/analyse.smk) -> one job per figure and per table.
# One rule draws every figure and one writes every table, their names constrained to the
# registry (imagenot.figures.registry). Each figure job holds the digest of its own plotting
# module as a parameter: editing the module reruns only that kind's figures, and no path of the
# clone is recorded, so a finished run moved to another folder (or run from a second clone at the
# same commit) plans nothing. Every command gets its config as one --settings
# JSON object: a settings object of imagenot.figures.settings.


# Small tables and plots (seconds, little memory) run on the submitting host under a cluster
# executor, not as jobs (`localrule: True`).


rule figure:
    input:
        accuracy=analyse_plan.ACCURACY,
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
    localrule: True
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        code=lambda wc: figures_plan.figure_code_version(config, wc.figure),
        figure=lambda wc: figures_plan.figure_params(config, wc.figure),
        settings=lambda wc: to_arg(
            figures_settings.FigureSettings.from_config(config, figure=wc.figure)
        ),
    shell:
        step("figure")


rule results_table:
    input:
        accuracy=analyse_plan.ACCURACY,
        rankings=expand(analyse_plan.RANKINGS, variant=analyse_plan.VARIANTS),
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
    localrule: True
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        code=figures_plan.code_version(figures_plan.tables_code()),
        settings=lambda wc: to_arg(
            figures_settings.TableSettings.from_config(config, table=wc.table)
        ),
    shell:
        step("table")
