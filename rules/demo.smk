# Stage: demo. Config lookups: imagenot.demo.plan (imported as demo_plan in rules/common.smk).
# The demo world: LAION-style metadata shards, the JPEGs their URLs point at, ground truth and
# the planted duplicates (the near-duplicate audit's known answer).


rule demo_world:
    input:
        nltk_data=NLTK_DATA,
    output:
        shards=demo_plan.shard_files(config),
        images=directory(demo_plan.IMAGES),
        truth=demo_plan.TRUTH,
        planted_duplicates=demo_plan.PLANTED_DUPLICATES,
        world=demo_plan.WORLD,
    log:
        f"{LOGS}/demo_world.log",
    benchmark:
        f"{BENCH}/demo_world.tsv"
    priority: DATA_PRIORITY
    conda:
        gpu_env("curate")
    threads: 2  # rendering processes: the images are three quarters of the job
    resources:
        **class_resources("light"),
    params:
        out=lambda wc, output: os.path.dirname(output.world),  # the world's folder
        settings=to_arg(demo_settings.DemoSettings.from_config(config)),
    shell:
        step("demo-world")
