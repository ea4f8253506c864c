"""What the config says about one training experiment: its space, seeds, protocol, starting
weights and the GPUs, nodes and loader workers of its jobs (pure functions of the validated
config).

Why a module of its own: the rules' plan (:mod:`imagenot.train.plan`) and the rules' settings
objects (:mod:`imagenot.train.settings`) both read these facts, and the plan builds settings
objects (``check_results``); with the facts in the plan, each imported the other. Here, below
both, neither does. Kept free of heavy imports: every job's Snakemake parses the rules that read
them.
"""

from __future__ import annotations

from pathlib import Path

from imagenot.core.config import ConfigError
from imagenot.core.names import TORCHVISION  # the protocol source of published ImageNet weights
from imagenot.core.registries import RegistryError
from imagenot.train.facts import weight_facts
from imagenot.train.paths import FEATURES_DIR, FINAL_MODEL, FINAL_RESULT, PUBLISHED_SEED, RUN
from imagenot.train.registry import get_spec, input_size, weights_filename


def is_published(exp: dict) -> bool:
    """Whether an experiment takes torchvision's published weights instead of training."""
    return exp["weights"] == "published"


def seeds(config: dict, exp: dict) -> list[int]:
    """The final runs' seeds of an experiment (one, 0, for published weights)."""
    return (
        [PUBLISHED_SEED] if is_published(exp) else config["train"]["spaces"][exp["space"]]["seeds"]
    )


def experiment(config: dict, dataset: str, protocol: str) -> dict:
    """The ``train.experiments`` entry of (dataset, protocol)."""
    for exp in config["train"]["experiments"]:
        if (exp["dataset"], exp["protocol"]) == (dataset, protocol):
            return exp
    raise ConfigError(f"no train.experiments entry for dataset {dataset!r}, protocol {protocol!r}")


def source(protocol: str) -> str | None:
    """The dataset (or ``torchvision``) an ``ft-``/``tl-`` protocol starts from; None for st."""
    return None if protocol == "st" else protocol.split("-", 1)[1]


def is_tl(protocol: str) -> bool:
    """Whether a protocol is transfer learning (``tl-SOURCE``: the head alone is trained)."""
    return protocol.startswith("tl-")


def space_name(config: dict, dataset: str, protocol: str) -> str:
    """The ``train.spaces`` key of an experiment (the settings classes' ``{space}`` section)."""
    exp = experiment(config, dataset, protocol)
    if is_published(exp):
        raise ConfigError(f"train.experiments {dataset}/{protocol}: published weights, no space")
    return exp["space"]


def space(config: dict, dataset: str, protocol: str) -> dict:
    """The search space of an experiment."""
    return config["train"]["spaces"][space_name(config, dataset, protocol)]


def definition(config: dict, dataset: str, protocol: str) -> dict:
    """What is pre-registered for an experiment and shared by all its models: the space,
    budget, epochs, patience, halving, seeds and master seed (per-model batch sizes aside)."""
    shared = {
        k: v for k, v in space(config, dataset, protocol).items() if k != "batch_size_overrides"
    }
    return {"seed": config["seed"], **shared}


def model_settings(config: dict, dataset: str, protocol: str, model: str) -> dict:
    """The pre-registered settings of one model in an experiment (its batch size)."""
    sp = space(config, dataset, protocol)
    return {"batch_size": sp["batch_size_overrides"].get(model, sp["batch_size"])}


def image_size(config: dict, model: str) -> int:
    """The input side ``model``'s jobs resize every image to: its registry entry's own
    (``ModelSpec.image_size``: a ViT's 224), else ``train.image_size``
    (:func:`imagenot.train.registry.input_size`). The same in every experiment of the model, so
    an FT/TL run sees its backbone's training size."""
    return input_size(model, config["train"]["image_size"])


def run_dir(dataset: str, protocol: str, model: str) -> str:
    return RUN.format(dataset=dataset, protocol=protocol, model=model)


def features_dir(dataset: str, protocol: str, model: str) -> str:
    """Where a TL experiment's backbone features live: one file per split, a function of the
    starting weights (protocol and model name them), the dataset and the split."""
    return FEATURES_DIR.format(dataset=dataset, protocol=protocol, model=model)


def published_weights(train: dict, model: str) -> str | None:
    """The published ImageNet weights FT/TL-from-ImageNet starts ``model`` from (a weights
    reference of ``imagenot.train.registry.WEIGHT_SOURCES``: torchvision, timm or a file):
    config ``train.weights`` if set for it, else the registry's."""
    return train["weights"].get(model) or get_spec(model).weights


def normalisation(config: dict, protocol: str, model: str) -> dict[str, list[float]]:
    """The input statistics a training job of ``protocol`` normalises with: FT/TL from published
    ImageNet weights use the weights' own (``imagenot.train.facts``: EfficientNet-V2-L's are
    0.5), every other job ``train.normalisation`` (models trained here, and FT/TL from them)."""
    if source(protocol) == TORCHVISION:
        try:
            facts = weight_facts(published_weights(config["train"], model), model)
        except RegistryError as exc:
            raise ConfigError(f"config key train.weights.{model}: {exc}") from None
        return facts.preprocessing.normalisation()
    own = config["train"]["normalisation"]
    return {"mean": [float(v) for v in own["mean"]], "std": [float(v) for v in own["std"]]}


def init_weights(config: dict, protocol: str, model: str) -> list[str]:
    """The weights file an FT/TL run starts from ([] for st): published weights, or the weights
    of a final run of the source dataset (whose record :func:`init_record` names)."""
    start = source(protocol)
    if start is None:
        return []
    if start == TORCHVISION:  # published ImageNet weights, whatever their source
        weights = published_weights(config["train"], model)
        if weights is None or not config["train"]["weights_dir"]:
            raise ConfigError(
                f"config key train.weights_dir: protocol {protocol} needs published weights of "
                f"{model!r} in a local directory (registry weights: {weights})"
            )
        try:
            name = weights_filename(weights)
        except RegistryError as exc:
            raise ConfigError(f"config key train.weights.{model}: {exc}") from None
        return [str(Path(config["train"]["weights_dir"]) / name)]
    return [FINAL_MODEL.format(**_source_run(config, start, model))]


def init_record(config: dict, protocol: str, model: str) -> list[str]:
    """The record (``result.json``) of the final run whose weights an FT/TL run starts from,
    read with them (``imagenot.train.registry.read_state_dict``: its weights' digest, the run
    they are); [] for st and for published weights, which have none."""
    start = source(protocol)
    if start is None or start == TORCHVISION:
        return []
    return [FINAL_RESULT.format(**_source_run(config, start, model))]


def _source_run(config: dict, start: str, model: str) -> dict:
    """The final run of ``model`` on dataset ``start`` an FT/TL run starts from: its st
    experiment's first seed."""
    seed = seeds(config, experiment(config, start, "st"))[0]
    return {"dataset": start, "protocol": "st", "model": model, "seed": seed}


def gpus(config: dict, model: str | None = None) -> int:
    """GPUs a training job of ``model`` requests: its train.gpus_per_job_overrides entry, else
    train.gpus_per_job (also for ``model`` None: the value of the models not named), or 0
    when the config plans none."""
    if config["resources"]["gpus"] == 0:
        return 0
    train = config["train"]
    return train["gpus_per_job_overrides"].get(model, train["gpus_per_job"])


def widest(config: dict) -> int:
    """The most GPUs any training job of the config requests (0 when it plans none)."""
    return max(gpus(config, m) for m in [None, *config["train"]["models"]])


def nodes(config: dict, model: str | None = None) -> int:
    """Nodes of a training job: train.nodes_per_job (1 for CPU jobs)."""
    return config["train"]["nodes_per_job"] if gpus(config, model) else 1


def gpus_per_node(config: dict, model: str | None = None) -> int:
    """GPUs of a training job of ``model`` on each of its nodes (0 for a CPU job)."""
    return gpus(config, model) // nodes(config, model)


def num_workers(config: dict) -> int:
    """DataLoader workers per training process: train.num_workers if set; else, on GPU jobs,
    the GPU's cores but one (the process itself), and none on CPU jobs."""
    if config["train"]["num_workers"] is not None:
        return config["train"]["num_workers"]
    return config["resources"]["cpus_per_gpu"] - 1 if gpus(config) else 0


def decodes_on_gpu(value: bool | list, model: str) -> bool:
    """Whether ``model``'s jobs decode their JPEGs on the GPU (``imagenot.train.decode``) under
    a train.decode_on_gpu ``value``: true or false for every model, or the list of the models
    that do (the fast ones, whose training outruns the node's cores: the preflight's feed check
    measures both ways per model and names the list, docs/gpu.md)."""
    return model in value if isinstance(value, list) else bool(value)


def accumulation(global_size: int, world: int, max_batch: int | None) -> int:
    """Micro-batches per rank for a global batch: enough that the largest part fits in
    ``max_batch``. The same on every rank, so the ranks run the same forward passes (SyncBatchNorm
    and DDP hold collectives in them)."""
    largest = -(-global_size // world)
    return max(1, -(-largest // max_batch)) if max_batch else 1


def per_gpu_batch(global_size: int, world: int, max_batch: int | None) -> int:
    """The most images one GPU holds at once for a global batch (its largest micro-batch, as
    ``imagenot.train.loop`` cuts it): what must fit in the device's memory."""
    largest = -(-global_size // world)
    return -(-largest // accumulation(global_size, world, max_batch))
