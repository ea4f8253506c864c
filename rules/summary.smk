# The run's summary, built once the datasets, final runs, their evaluations and the rankings
# statistics exist: whether rankings transfer (per comparison, from the rankings statistics),
# what was built, images per split and download success per dataset, best validation/test
# accuracy per model, and every problem (imagenot.run_summary; what it reads:
# imagenot.summary_plan).
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
        # the command its summary names for the report: this run's Snakemake and config files
        report_command=lambda wildcards: summary_plan.run_report_command(workflow),
    shell:
        step("run-summary")
