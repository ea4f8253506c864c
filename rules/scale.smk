# Stage: demo (scale world). Config lookups: imagenot.demo.scale_plan (rules/common.smk).
# Paper-shaped LAION metadata, one job per shard, written where the laion section reads shards
# (config/scale.yaml; benchmarks/bench_scale.py measures the DAG on it).


if scale_plan.enabled(config):

    rule scale_world:
        input:
            captions=scale_plan.captions_path(config),
            lemmas=NOUN_LEMMAS,
        output:
            shard=scale_plan.output_pattern(config),
        log:
            f"{LOGS}/scale_world/{{shard}}.log",
        benchmark:
            f"{BENCH}/scale_world/{{shard}}.tsv"
        wildcard_constraints:
            shard=scale_plan.shard_constraint(config),
        priority: DATA_PRIORITY
        conda:
            gpu_env("curate")
        threads: 1
        resources:
            **class_resources("medium"),
        params:
            settings=to_arg(demo_settings.ScaleSettings.from_config(config)),
        shell:
            step("scale-world-shard")
