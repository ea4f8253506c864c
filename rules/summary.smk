# The run's summary, built once the datasets, final runs, their evaluations and the rankings
# statistics exist: whether rankings transfer (per comparison, from the rankings statistics),
# what was built, images per split and download success per dataset, best validation/test
# accuracy per model, and every problem (imagenot.run.run_summary; what it reads:
# imagenot.run.summary_plan).
# The Snakefile's onsuccess prints the same summary at the end of any run.


rule run_summary:
    input:
        rankings=summary_plan.rankings_input(config),
        results=summary_plan.inputs(config),
    output:
        md=summary_plan.SUMMARY_MD,
        json=summary_plan.SUMMARY_JSON,
        html=report(
            summary_plan.SUMMARY_HTML,
            caption="../report/run_summary.rst",
            category="Summary",
        ),
    log:
        f"{LOGS}/run_summary.log",
    benchmark:
        f"{BENCH}/run_summary.tsv"
    localrule: True
    conda:
        "../envs/analyse.yaml"
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wildcards: to_arg(summary_plan.layout(config)),
        # the run's config files, which the summary's report command names
        configfiles=lambda wildcards: to_json(summary_plan.config_files(workflow)),
    shell:
        step("run-summary")
