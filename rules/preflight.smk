# The preflight (imagenot.train.preflight_plan, docs/gpu.md "First hour on a GPU"): one job on
# one GPU, in the training jobs' env (conda or the site's container) with a training process's
# cores and memory, that checks CUDA, each model's memory at its per-GPU batch, the feed at the
# stored size, /dev/shm and bf16 against float32. `snakemake --profile slurm preflight` runs it
# alone; with resources.gpus > 0 and resources.require_preflight every GPU rule takes its JSON
# as an `ancient` input (preflight_gate, rules/common.smk), so a failed preflight submits no GPU
# job, and a rerun of it (new config or env) never outdates finished jobs.


rule preflight:
    output:
        json=preflight_plan.report_file(SITE, "json"),
        md=preflight_plan.report_file(SITE, "md"),
    log:
        f"{LOGS}/preflight/{preflight_plan.site_name(SITE)}.log",
    benchmark:
        f"{BENCH}/preflight/{preflight_plan.site_name(SITE)}.tsv"
    conda:
        gpu_env("train")
    # a training job's request on one node (its memory: profiles/default); the checks use one
    # of its GPUs, and count the node's training processes against /dev/shm
    threads: train_resources.threads(config)
    resources:
        **gpu_request(train_plan.gpus_per_node(config)),
    params:
        settings=to_arg(train_settings.PreflightSettings.from_config(config, SITE)),
    shell:
        "imagenot preflight --settings {params.settings} --threads {threads}"
        " --json {output.json} --md {output.md} > {log} 2>&1"
