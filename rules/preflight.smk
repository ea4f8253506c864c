# The preflight (imagenot.train.preflight_plan, docs/gpu.md "First hour on a GPU"): short jobs on
# one GPU each, in the training jobs' env (conda or the site's container). preflight_site checks
# CUDA (every GPU job needs it); preflight_model, once it has passed, checks one model: the
# loader rings against /dev/shm, its memory per space (the peak at the space's batch and the
# largest batch that fits this card, which its training jobs then take), the feed at the stored
# size and bf16 against float32. With resources.gpus > 0 and resources.require_preflight every
# GPU rule takes the site's JSON as an `ancient` input and the training and evaluation rules
# their model's as well (preflight_gate, rules/common.smk): a failed check holds the jobs it
# concerns, and a rerun (new config or env) never outdates finished jobs.
# `snakemake --profile slurm preflight` runs all of them alone.


rule preflight:
    input:
        preflight_plan.report_file(SITE, "json"),
        [
            preflight_plan.model_report_file(SITE, model, "json")
            for model in config["train"]["models"]
        ],
    localrule: True


rule preflight_site:
    output:
        json=preflight_plan.report_file(SITE, "json"),
        md=preflight_plan.report_file(SITE, "md"),
    log:
        f"{LOGS}/preflight/{preflight_plan.site_name(SITE)}.log",
    benchmark:
        f"{BENCH}/preflight/{preflight_plan.site_name(SITE)}.tsv"
    conda:
        gpu_env("train")
    threads: gpu_threads(1)
    resources:
        **class_resources("medium"),
        **gpu_request(),
    params:
        settings=to_arg(train_settings.PreflightSettings.for_site(config, SITE)),
    shell:
        step("preflight")


rule preflight_model:
    input:
        preflight=ancient(preflight_plan.report_file(SITE, "json")),
    output:
        json=preflight_plan.model_report_file(SITE, "{model}", "json"),
        md=preflight_plan.model_report_file(SITE, "{model}", "md"),
    log:
        f"{LOGS}/preflight/{preflight_plan.site_name(SITE)}/{{model}}.log",
    benchmark:
        f"{BENCH}/preflight/{preflight_plan.site_name(SITE)}/{{model}}.tsv"
    conda:
        gpu_env("train")
    # one training process's request: a GPU, the cores that feed it, its memory and rings
    threads: gpu_threads(1)
    resources:
        **gpu_request(),
        mem_mb=lambda wc, attempt: train_resources.process_mem_mb(
            config, None, attempt, train_rings.largest_ring_mb(config), 1
        ),
        runtime=class_runtime("light"),
    params:
        settings=lambda wc: to_arg(
            train_settings.PreflightSettings.for_model(config, SITE, wc.model)
        ),
    shell:
        step("preflight")
