# Stage: analyse. Files: imagenot.analyse.plan (imported as analyse_plan in rules/common.smk);
# each rule's settings: its class in imagenot.analyse.settings (analyse_settings), from_config.
# Every evaluation -> accuracy.csv (+ per-image correctness) -> rankings JSON (standard, Robust),
# which the figures and tables (rules/figures.smk) read.


# The rankings run on the submitting host under a cluster executor, not as jobs (seconds, little
# memory: `localrule: True`); the accuracy table reads every evaluation and stays a job.


rule accuracy_table:
    input:
        robustness=evaluate_plan.robustness_files(config),
        per_image=evaluate_plan.per_image_files(config),
    output:
        accuracy=report(
            analyse_plan.ACCURACY,
            caption="../report/accuracy_csv.rst",
            category="Analysis",
        ),
        per_image_table=analyse_plan.PER_IMAGE,
    log:
        f"{LOGS}/accuracy_table.log",
    benchmark:
        f"{BENCH}/accuracy_table.tsv"
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        # the shipped published accuracies, which the command reads from the package: their
        # digest, so that a new table reruns the job (no path of the clone is recorded)
        published=analyse_plan.published_version(),
        settings=to_arg(analyse_settings.AccuracySettings.from_config(config)),
    shell:
        step("accuracy-table")


rule rankings_json:
    input:
        table=analyse_plan.ACCURACY,
        per_image=analyse_plan.PER_IMAGE,
    output:
        out=report(
            analyse_plan.RANKINGS,
            caption="../report/rankings_json.rst",
            category="Analysis",
        ),
    log:
        f"{LOGS}/rankings_json/{{variant}}.log",
    benchmark:
        f"{BENCH}/rankings_json/{{variant}}.tsv"
    wildcard_constraints:
        variant="|".join(analyse_plan.VARIANTS),
    localrule: True
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wc: to_arg(
            analyse_settings.RankingsSettings.from_config(config, variant=wc.variant)
        ),
    shell:
        step("rankings")
