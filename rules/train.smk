# Stage: train. Config lookups: imagenot.train.plan (imported as train_plan in rules/common.smk);
# a job's cores, memory and runtime: imagenot.train.resources (train_resources); its launcher:
# imagenot.train.launch (train_launch).
# Per dataset x protocol x model: pre-registered trials, one job per trained slot of each
# halving stage, selection of the best trial, and its final runs with each configured seed (the
# first reuses the selected trial's weights when it ran the full schedule). Only training and
# evaluation request a GPU; drawing, halving and selection are local jobs. A training job of
# several GPUs runs under torchrun, on one node or (train.nodes_per_job) under srun on several:
# the launcher is its shell line's prefix (imagenot.train.launch.launcher; empty for one GPU).
# Training jobs get their runtime resource (--runtime-min): they checkpoint and exit 75
# train.deadline_margin_minutes before their time limit, needing no signal (docs/gpu.md).


# Bookkeeping rules (no torch: drawing, halving, selection, the preregistration table) run on
# the submitting host under a cluster executor (`localrule: True`).


TRAIN_WC = "{dataset}/{protocol}/{model}"


rule train_draw_trials:
    output:
        trials=train_paths.TRIALS,
    log:
        f"{LOGS}/train_draw_trials/{TRAIN_WC}.log",
    benchmark:
        f"{BENCH}/train_draw_trials/{TRAIN_WC}.tsv"
    localrule: True
    conda:
        gpu_env("train")
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wc: to_arg(
            train_settings.DrawSettings.from_config(
                config, wc.dataset, wc.protocol, wc.model
            )
        ),
        # read and amended by every draw, so no input or output: imagenot.train.files says
        # why and what guards it
        record=train_plan.PREREGISTRATION,
    shell:
        step("train-draw-trials")


# One GPU job per slot of a stage (see imagenot.train.plan): stage 0 trains every trial to the
# first rung; each later stage trains only the trials the previous rung promoted. Rung barriers
# (synchronous successive halving) rather than the paper's asynchronous ASHA: the decisions are
# then a function of the results alone, not of which job finished first, so a rerun promotes
# the same trials, and the DAG stays static (no job is planned for a trial that is dropped).
rule train_trial:
    input:
        trials=train_paths.TRIALS,
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
        init=lambda wc: train_plan.init_weights(config, wc.protocol, wc.model),
        init_record=lambda wc: train_plan.init_record(config, wc.protocol, wc.model),
        features=[],  # images: a TL head fit (train_head_trial) reads stored features
        previous=lambda wc: train_plan.previous_decision(
            config, wc.dataset, wc.protocol, wc.model, wc.stage
        ),
        preflight=preflight_gate(per_model=True),
    output:
        result=train_paths.SLOT,
    log:
        f"{LOGS}/train_trial/{TRAIN_WC}/{{stage}}-{{slot}}.log",
    benchmark:
        f"{BENCH}/train_trial/{TRAIN_WC}/{{stage}}-{{slot}}.tsv"
    wildcard_constraints:
        stage="[0-9]+",
        slot="[0-9]+",
    conda:
        gpu_env("train")
    # sized from the promotion input when the job is ready: an empty slot asks for no GPU
    threads:
        lambda wc, input, attempt: train_resources.slot_threads(
            config, input.previous, wc.slot, slot_status(wc), attempt, wc.model
        )
    resources:
        **train_slot_resources(),
    params:
        settings=lambda wc: to_arg(
            train_settings.TrialSettings.from_config(
                config, wc.dataset, wc.protocol, wc.model, wc.stage
            )
        ),
        launch=lambda wc: lifeline.job_prefix(train_launch.launcher(config, wc.model)),
        # the model's preflight report: the largest batch per GPU measured to fit this site's
        # card (imagenot.train.preflight_plan.batch_option; nothing ungated)
        preflight=lambda wc, input: preflight_plan.batch_option(input.preflight),
    shell:
        step("train-trial")


# Transfer learning (tl-SOURCE) trains the head alone over a frozen, eval-mode backbone without
# augmentation, so what the head sees never changes: one GPU job per (starting weights, dataset)
# computes the backbone's features of the train and val splits once, one file per split
# (imagenot.train.features, plan.FEATURE_SPLITS; the test split is the evaluation's), and the TL
# trials and final runs fit the head over them on the CPU (same loop, seeds and selection; the
# final weights are the full model, as before). One job for both splits: the model loads once.
# docs/gpu.md gives the GPU time this saves.
rule train_features:
    input:
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
        init=lambda wc: train_plan.init_weights(config, wc.protocol, wc.model),
        init_record=lambda wc: train_plan.init_record(config, wc.protocol, wc.model),
        preflight=preflight_gate(per_model=True),
    output:
        features=train_plan.feature_files("{dataset}", "{protocol}", "{model}"),
    log:
        f"{LOGS}/train_features/{TRAIN_WC}.log",
    benchmark:
        f"{BENCH}/train_features/{TRAIN_WC}.tsv"
    wildcard_constraints:
        protocol=train_plan.tl_protocol_regex(config),
    conda:
        gpu_env("train")
    # one process: one GPU (resources.gpus), the cores that feed it; none on the retry of a job
    # that failed for good (imagenot.train.failfast)
    threads: gpu_threads(1)
    resources:
        **refused_gpu_request(
            gpu_request(),
            lambda wc: failfast.status_for(
                train_plan.features_dir(wc.dataset, wc.protocol, wc.model)
            ),
        ),
        mem_mb=lambda wc, attempt: train_resources.process_mem_mb(
            config,
            failfast.status_for(
                train_plan.features_dir(wc.dataset, wc.protocol, wc.model)
            ),
            attempt,
            train_rings.ring_mb(config, wc.dataset, wc.protocol, wc.model),
            1,
        ),
        # one pass of a backbone over each split (CIFAR-10 at 224 px: minutes on one GPU)
        runtime=class_runtime("medium_long"),
    params:
        settings=lambda wc: to_arg(
            train_settings.FeaturesSettings.from_config(
                config, wc.dataset, wc.protocol, wc.model
            )
        ),
    shell:
        step("train-features")


# A TL slot: the same job as train_trial (its settings name the features folder), over the
# train and val features, on one core and no GPU.
use rule train_trial as train_head_trial with:
    input:
        trials=train_paths.TRIALS,
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
        init=lambda wc: train_plan.init_weights(config, wc.protocol, wc.model),
        init_record=lambda wc: train_plan.init_record(config, wc.protocol, wc.model),
        previous=lambda wc: train_plan.previous_decision(
            config, wc.dataset, wc.protocol, wc.model, wc.stage
        ),
        features=lambda wc: train_plan.feature_files(wc.dataset, wc.protocol, wc.model),
    log:
        f"{LOGS}/train_head_trial/{TRAIN_WC}/{{stage}}-{{slot}}.log",
    benchmark:
        f"{BENCH}/train_head_trial/{TRAIN_WC}/{{stage}}-{{slot}}.tsv"
    wildcard_constraints:
        protocol=train_plan.tl_protocol_regex(config),
        stage="[0-9]+",
        slot="[0-9]+",
    threads: 1
    resources:
        **class_resources("medium_long"),
        **gpu_request(0),
    params:
        settings=lambda wc: to_arg(
            train_settings.TrialSettings.from_config(
                config, wc.dataset, wc.protocol, wc.model, wc.stage
            )
        ),
        # one process on the CPU: no launcher, whatever train.gpus_per_job says
        launch=lifeline.job_prefix(),
        preflight=[],  # a head fit on the CPU: no GPU batch to measure


# TL slots match train_trial too: the head-fitting rule takes them.
ruleorder: train_head_trial > train_trial


rule train_halve:
    input:
        results=lambda wc: train_plan.stage_results(
            config, wc.dataset, wc.protocol, wc.model, wc.rung
        ),
    output:
        decision=train_paths.DECISION,
    log:
        f"{LOGS}/train_halve/{TRAIN_WC}/{{rung}}.log",
    benchmark:
        f"{BENCH}/train_halve/{TRAIN_WC}/{{rung}}.tsv"
    wildcard_constraints:
        rung="[0-9]+",
    localrule: True
    conda:
        gpu_env("train")
    threads: 1
    resources:
        **class_resources("light"),
    params:
        settings=lambda wc: to_arg(
            train_settings.HalveSettings.from_config(config, wc.dataset, wc.protocol)
        ),
    shell:
        step("train-halve")


rule train_select:
    input:
        results=lambda wc: train_plan.all_results(
            config, wc.dataset, wc.protocol, wc.model
        ),
    output:
        selection=train_paths.TRIAL_SELECTION,
    log:
        f"{LOGS}/train_select/{TRAIN_WC}.log",
    benchmark:
        f"{BENCH}/train_select/{TRAIN_WC}.tsv"
    localrule: True
    conda:
        gpu_env("train")
    threads: 1
    resources:
        **class_resources("light"),
    shell:
        step("train-select")


rule train_final:
    input:
        trials=train_paths.TRIALS,
        selection=train_paths.TRIAL_SELECTION,
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
        init=lambda wc: train_plan.init_weights(config, wc.protocol, wc.model),
        init_record=lambda wc: train_plan.init_record(config, wc.protocol, wc.model),
        features=[],  # images: a TL head fit (train_head_final) reads stored features
        preflight=preflight_gate(per_model=True),
    output:
        model=train_paths.FINAL_MODEL,
        result=train_paths.FINAL_RESULT,
    log:
        f"{LOGS}/train_final/{TRAIN_WC}/{{seed}}.log",
    benchmark:
        f"{BENCH}/train_final/{TRAIN_WC}/{{seed}}.tsv"
    conda:
        gpu_env("train")
    threads: lambda wc: train_resources.threads(config, wc.model)
    resources:
        **refused_gpu_request(
            train_gpu_request(),
            lambda wc: failfast.status_for(train_plan.final_dir(dict(wc.items()))),
        ),
        mem_mb=lambda wc, attempt: train_resources.process_mem_mb(
            config,
            failfast.status_for(train_plan.final_dir(dict(wc.items()))),
            attempt,
            train_rings.ring_mb(config, wc.dataset, wc.protocol, wc.model),
            train_plan.gpus_per_node(config, wc.model),
        ),
        # sized when the job is ready: a first seed reusing its trial's weights (a file copy)
        # asks for startup_min, not 24 h (imagenot.train.resources.final_runtime_min)
        runtime=lambda wc, input, attempt: train_resources.final_runtime_min(
            config,
            wc,
            input.selection,
            attempt,
            failfast.status_for(train_plan.final_dir(dict(wc.items()))),
        ),
    params:
        settings=lambda wc: to_arg(
            train_settings.FinalSettings.from_config(
                config, wc.dataset, wc.protocol, wc.model, wc.seed
            )
        ),
        launch=lambda wc: lifeline.job_prefix(train_launch.launcher(config, wc.model)),
        preflight=lambda wc, input: preflight_plan.batch_option(input.preflight),
    shell:
        step("train-final")


# A TL final run over the train and val features; it writes the full model, as train_final,
# and its test accuracy is its evaluation's Identity row, as every final run's.
use rule train_final as train_head_final with:
    input:
        trials=train_paths.TRIALS,
        selection=train_paths.TRIAL_SELECTION,
        manifest=paths.MANIFEST,
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
        init=lambda wc: train_plan.init_weights(config, wc.protocol, wc.model),
        init_record=lambda wc: train_plan.init_record(config, wc.protocol, wc.model),
        features=lambda wc: train_plan.feature_files(wc.dataset, wc.protocol, wc.model),
    log:
        f"{LOGS}/train_head_final/{TRAIN_WC}/{{seed}}.log",
    benchmark:
        f"{BENCH}/train_head_final/{TRAIN_WC}/{{seed}}.tsv"
    wildcard_constraints:
        protocol=train_plan.tl_protocol_regex(config),
    threads: 1
    resources:
        **class_resources("medium_long"),
        **gpu_request(0),
    params:
        settings=lambda wc: to_arg(
            train_settings.FinalSettings.from_config(
                config, wc.dataset, wc.protocol, wc.model, wc.seed
            )
        ),
        # one process on the CPU: no launcher, whatever train.gpus_per_job says
        launch=lifeline.job_prefix(),
        preflight=[],  # a head fit on the CPU: no GPU batch to measure


# TL runs match train_final too: the head-fitting rule takes them.
ruleorder: train_head_final > train_final
# The paper's ImageNet models are torchvision's published weights (its appendix A.1): written as
# final runs (head rows matched to the dataset's wnids) for the evaluate stage; no GPU, no search.
ruleorder: train_published > train_final


rule train_published:
    input:
        weights=lambda wc: train_plan.published_weights_file(config, wc.model),
        classes=paths.CLASSES,
        fingerprint=paths.FINGERPRINT,
    output:
        model=train_paths.published(train_paths.FINAL_MODEL),
        result=train_paths.published(train_paths.FINAL_RESULT),
    log:
        f"{LOGS}/train_published/{TRAIN_WC}.log",
    benchmark:
        f"{BENCH}/train_published/{TRAIN_WC}.tsv"
    wildcard_constraints:
        dataset=train_plan.published_pattern(config),
        protocol="st",
    conda:
        gpu_env("train")
    threads: 1
    resources:
        **class_resources("medium"),
    params:
        settings=lambda wc: to_arg(
            train_settings.PublishedSettings.from_config(config, wc.model)
        ),
    shell:
        step("train-published")


# The preregistration record (spaces, budgets, models, amendments) as a report table; read once
# every trials table exists, each written after its draw amended the record (the record is no
# input: no rule makes it, every draw amends it; imagenot.train.files).
rule train_preregistration_table:
    input:
        trials_tables=train_plan.trials_tables(config),
    output:
        table=report(
            train_plan.PREREGISTRATION_TABLE,
            caption="../report/train_preregistration.rst",
            category="Training",
        ),
    log:
        f"{LOGS}/train_preregistration_table.log",
    benchmark:
        f"{BENCH}/train_preregistration_table.tsv"
    localrule: True
    conda:
        gpu_env("train")
    threads: 1
    resources:
        **class_resources("light"),
    params:
        record=train_plan.PREREGISTRATION,
    shell:
        step("train-preregistration-table")
