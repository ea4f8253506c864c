"""The settings objects of the train stage's rules, one per rule (a training job's is shared).

Why: a training key that travels through dicts and dataclasses of their own (plan, CLI, the
loop), each with defaults of its own, drifts from the schema. So a key is written in the schema
and as a field here,
named as the schema names it; :meth:`FromConfig.from_config` reads it from the validated config
(the space's keys from the experiment's space, ``train.spaces.{space}``, then ``train``), the rule
hands the object over as one JSON argument, the command parses it back, and the jobs, the loop,
the feed and the interrupts take the object or values read from it, with no default of their
own. What the plan computes per job (the model's batch size, the schedule's horizon, the starting
weights, the launcher's world size) is a derived field with its reason.

Kept free of torch: every rule's params build these objects when Snakemake parses the rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from imagenot.core.settings import FromConfig
from imagenot.train import experiments, preflight_plan, search

# Names of schema keys used for something else (tests/test_settings_schema.py's guard).
NOT_SETTINGS = {
    "imagenot.train.preflight_cli:.get('gpu')": "the GPU name of the preflight's environment "
    "record (absent on the CPU), not resources.classes.gpu",
}


@dataclass(frozen=True)
class JobSettings(FromConfig):
    """A training job (trial or final run) and the TL backbone's feature pass."""

    SECTIONS: ClassVar = ("train.spaces.{space}", "train")  # the experiment's space first
    WILDCARDS: ClassVar = ("model",)
    DERIVED: ClassVar = {
        "batch_size": "the model's pre-registered batch size (experiments.model_settings)",
        "schedule_epochs": "the schedule's horizon (imagenot.train.search.schedule_epochs)",
        "trainable": "'head' for a tl-SOURCE protocol (the head alone is trained), else 'all'",
        "init": "an ft/tl run's starting weights file (experiments.init_weights), null for st",
        "gpu_job": "resources.gpus > 0: a job that sees no GPU stops, not trains on the CPU",
        "num_workers": "experiments.num_workers; 0 for a head fit over stored features",
        "world": "the processes the launcher starts, each rank checks it (experiments.gpus)",
        "features": "a head fit's stored features (experiments.features_dir), else null",
        "decode_on_gpu": "whether train.decode_on_gpu names it (experiments.decodes_on_gpu)",
        "image_size": "the model's input side (experiments.image_size)",
    }

    model: str
    image_size: int
    # train.normalisation ({"mean", "std"}), replaced by the starting weights' own statistics
    # for FT/TL from published weights (experiments.normalisation): what the input is normalised with
    normalisation: dict
    batch_size: int
    max_epochs: int
    schedule_epochs: int
    patience: int
    trainable: str
    init: str | None
    eval_batch_size: int
    device: str
    gpu_job: bool
    compile: bool
    deterministic: bool | None
    checkpoint_minutes: float
    deadline_margin_minutes: float
    in_memory: bool
    num_workers: int
    world: int
    max_batch_per_gpu: int | None
    decode_on_gpu: bool
    stage_to_local: bool
    features: str | None

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config, dataset: str, protocol: str, model: str
    ) -> JobSettings:
        """The job on images (TL too: the feature pass runs it so)."""
        space_name = experiments.space_name(config, dataset, protocol)
        space = config["train"]["spaces"][space_name]
        init = experiments.init_weights(config, protocol, model)
        values = cls.config_values(config, space=space_name, model=model)
        values["normalisation"] = experiments.normalisation(config, protocol, model)
        return cls(
            **values,
            **experiments.model_settings(config, dataset, protocol, model),  # its batch size
            schedule_epochs=search.schedule_epochs(space),
            trainable="head" if experiments.is_tl(protocol) else "all",
            init=init[0] if init else None,
            gpu_job=config["resources"]["gpus"] > 0,
            num_workers=experiments.num_workers(config),
            world=experiments.gpus(config, model) or 1,
            features=None,
            decode_on_gpu=experiments.decodes_on_gpu(config["train"]["decode_on_gpu"], model),
            image_size=experiments.image_size(config, model),
        )

    @classmethod
    def for_training(cls, config, dataset: str, protocol: str, model: str) -> JobSettings:
        """A trial's or final run's job: :meth:`from_config` on images; for TL, the head fit
        over the stored features on the CPU in one process (device cpu, no GPU, one rank, no
        loader workers, no compile: docs/gpu.md, benchmarks/bench_head.py). Device, workers
        and world size are no part of a job's identity, so its trials and checkpoints are those
        of the image path."""
        job = cls.from_config(config, dataset, protocol, model)
        if not experiments.is_tl(protocol):
            return job
        return dataclasses.replace(
            job,
            features=experiments.features_dir(dataset, protocol, model),
            device="cpu",
            gpu_job=False,
            world=1,
            num_workers=0,
            compile=False,
        )


@dataclass(frozen=True)
class DrawSettings(FromConfig):
    """``train-draw-trials``: what is pre-registered for one model of an experiment."""

    WILDCARDS: ClassVar = ("model",)
    DERIVED: ClassVar = {
        "experiment": "'{dataset}/{protocol}', the preregistration record's key",
        "definition": "what every model of the experiment shares (experiments.definition)",
        "model_settings": "the model's own pre-registered settings (its batch size)",
        "amendments": "train.amendments of the space or this model (one model's reruns it alone)",
    }

    experiment: str
    model: str
    definition: dict
    model_settings: dict
    amendments: list

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config, dataset: str, protocol: str, model: str
    ) -> DrawSettings:
        experiment = f"{dataset}/{protocol}"
        amendments = [
            a
            for a in config["train"]["amendments"]
            if a["experiment"] == experiment and (a["scope"] == "space" or a["model"] == model)
        ]
        return cls(
            **cls.config_values(config, model=model),
            experiment=experiment,
            definition=experiments.definition(config, dataset, protocol),
            model_settings=experiments.model_settings(config, dataset, protocol, model),
            amendments=amendments,
        )


@dataclass(frozen=True)
class TrialSettings(FromConfig):
    """``train-trial``: the job and the epoch its stage stops at (null: the end)."""

    DERIVED: ClassVar = {
        "job": "JobSettings.for_training of the experiment and model",
        "stage_epochs": "the stage's halving rung (search.rungs); null for the last stage",
    }

    job: JobSettings
    stage_epochs: int | None

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config, dataset: str, protocol: str, model: str, stage: Any
    ) -> TrialSettings:
        milestones = search.rungs(experiments.space(config, dataset, protocol))
        stage = int(stage)
        return cls(
            job=JobSettings.for_training(config, dataset, protocol, model),
            stage_epochs=milestones[stage] if stage < len(milestones) else None,
        )


@dataclass(frozen=True)
class FinalSettings(FromConfig):
    """``train-final``: the job, the master seed, whether the selected trial is reused."""

    DERIVED: ClassVar = {
        "job": "JobSettings.for_training of the experiment and model",
        "master_seed": "the top-level seed key, named apart from the run's seed wildcard",
        "reuse_trial": "whether the seed is the space's first, whose trial's weights are reused",
    }

    job: JobSettings
    master_seed: int
    reuse_trial: bool

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config, dataset: str, protocol: str, model: str, seed: Any
    ) -> FinalSettings:
        first = experiments.space(config, dataset, protocol)["seeds"][0]
        return cls(
            job=JobSettings.for_training(config, dataset, protocol, model),
            master_seed=config["seed"],
            reuse_trial=int(seed) == first,
        )


@dataclass(frozen=True)
class FeaturesSettings(FromConfig):
    """``train-features``: the TL job whose backbone features are computed (on images)."""

    DERIVED: ClassVar = {
        "job": "JobSettings.from_config of the TL experiment, in one process (world 1)",
    }

    job: JobSettings

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config, dataset: str, protocol: str, model: str
    ) -> FeaturesSettings:
        # the rule matches tl-SOURCE protocols only (plan.tl_protocol_regex), and
        # jobs.run_features refuses a job that is not TL
        job = JobSettings.from_config(config, dataset, protocol, model)
        return cls(job=dataclasses.replace(job, world=1))


@dataclass(frozen=True)
class HalveSettings(FromConfig):
    """``train-halve``: the experiment's halving rate."""

    SECTIONS: ClassVar = ("train.spaces.{space}.halving",)

    eta: int

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config, dataset: str, protocol: str
    ) -> HalveSettings:
        return cls(
            **cls.config_values(config, space=experiments.space_name(config, dataset, protocol))
        )


@dataclass(frozen=True)
class PublishedSettings(FromConfig):
    """``train-published``: the model and its published weights reference (their input size
    and preprocessing are the weights' own: ``imagenot.train.facts``)."""

    SECTIONS: ClassVar = ("train",)
    WILDCARDS: ClassVar = ("model",)
    DERIVED: ClassVar = {
        "weights": "the model's published weights (experiments.published_weights)",
    }

    model: str
    weights: str | None

    @classmethod
    def from_config(cls, config, model: str) -> PublishedSettings:  # type: ignore[override]
        return cls(
            **cls.config_values(config, model=model),
            weights=experiments.published_weights(config["train"], model),
        )


@dataclass(frozen=True)
class PreflightSettings(FromConfig):
    """``preflight``: what the training jobs of this config will ask of one GPU
    (``imagenot.train.preflight``, ``imagenot.train.preflight_plan``)."""

    SECTIONS: ClassVar = ("train",)
    DERIVED: ClassVar = {
        "site": "the report's name (preflight_plan.site_name)",
        "gpu_job": "resources.gpus > 0: a broken CUDA fails, else GPU-only checks are skipped",
        "runs": "each model and space trained (preflight_plan.runs)",
        "checked_models": "the models whose host, memory, feed and precision checks run",
        "num_workers": "a training process's loader workers (experiments.num_workers)",
        "gpus_per_node": "the most training processes sharing a node's /dev/shm",
        "mem_mb": "resources.train_trial.mem_mb: a process's memory besides its batch rings",
        "dataset_dirs": "where the jobs read each dataset (preflight_plan.dataset_dirs)",
    }

    # the input side of the models that declare none; a model that does is checked at its own
    # (imagenot.train.registry.input_size)
    image_size: int
    normalisation: dict
    device: str
    in_memory: bool
    # true, false, or the models that decode on the GPU (experiments.decodes_on_gpu; each run
    # of ``runs`` holds its model's answer)
    decode_on_gpu: bool | list
    stage_to_local: bool
    eval_batch_size: int
    site: str
    gpu_job: bool
    runs: list
    checked_models: list
    num_workers: int
    gpus_per_node: int
    mem_mb: int
    dataset_dirs: dict

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config, site: dict | None
    ) -> PreflightSettings:
        return cls(
            **cls.config_values(config),
            site=preflight_plan.site_name(site),
            gpu_job=config["resources"]["gpus"] > 0,
            runs=preflight_plan.runs(config),
            checked_models=list(config["train"]["models"]),
            num_workers=experiments.num_workers(config),
            gpus_per_node=max(1, experiments.widest(config) // experiments.nodes(config)),
            mem_mb=config["resources"]["train_trial"]["mem_mb"],
            dataset_dirs=preflight_plan.dataset_dirs(config),
        )

    def narrowed(self, models: list[str]) -> PreflightSettings:
        """These settings for ``models`` alone: their runs and checks."""
        runs = [r for r in self.runs if r["model"] in models]
        return dataclasses.replace(self, runs=runs, checked_models=list(models))

    @classmethod
    def for_site(cls, config, site: dict | None) -> PreflightSettings:
        """The site's gate (rule ``preflight``): CUDA alone, what every GPU job needs."""
        return cls.from_config(config, site).narrowed([])

    @classmethod
    def for_model(cls, config, site: dict | None, model: str) -> PreflightSettings:
        """A model's gate (rule ``preflight_model``): its host, memory, feed and precision."""
        return cls.from_config(config, site).narrowed([model])
