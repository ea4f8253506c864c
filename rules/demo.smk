# Stage: demo. Config lookups: imagenot.demo.plan (imported as demo_plan in rules/common.smk).
# The demo world: LAION-style metadata shards, the JPEGs their URLs point at, and ground truth.


rule demo_world:
    input:
        NLTK_DATA,
    output:
        shards=demo_plan.shard_files(config),
        images=directory("results/demo_world/images"),
        truth="results/demo_world/truth.parquet",
        world="results/demo_world/world.json",
    log:
        f"{LOGS}/demo_world.log",
    benchmark:
        f"{BENCH}/demo_world.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 1
    params:
        settings=to_arg(demo_settings.DemoSettings.from_config(config)),
    shell:
        "imagenot demo-world --nltk-data {input} --out results/demo_world"
        " --shards {output.shards} --settings {params.settings} > {log} 2>&1"
