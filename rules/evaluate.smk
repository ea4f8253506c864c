# Stage: evaluate. Config lookups: imagenot.evaluate.plan (imported as evaluate_plan in rules/common.smk).
# Each final run of the train stage, on its dataset's test split, under the 17 test-time
# transformations of method section 6 (parameters: the `evaluate` config section).


rule evaluate_robustness:
    input:
        model=train_paths.FINAL_MODEL,
        result=train_paths.FINAL_RESULT,
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
        preflight=preflight_gate(per_model=True),
    output:
        robustness=evaluate_paths.ROBUSTNESS,
        per_image=evaluate_paths.PER_IMAGE,
    log:
        f"{LOGS}/evaluate_robustness/{{dataset}}/{{protocol}}/{{model}}/seed-{{seed}}.log",
    benchmark:
        f"{BENCH}/evaluate_robustness/{{dataset}}/{{protocol}}/{{model}}/seed-{{seed}}.tsv"
    conda:
        gpu_env("train")
    threads: gpu_threads(evaluate_plan.threads(config))
    resources:
        **class_resources("gpu"),
        **gpu_request(),
    params:
        settings=to_arg(evaluate_settings.RobustnessSettings.from_config(config)),
        gpu_job=gpu_job_option(),
    shell:
        step("evaluate-robustness")
