"""Cross-key checks of the train config that the schema cannot express (the stage's
``check``, run by ``imagenot.core.stages.check_workflow_config`` before any job, hence by the
workflow and ``imagenot validate-config``): the models' input sizes and names, each experiment's
dataset, space and starting weights, the spaces' search budgets, the nodes of a job, and the
stored image size that published weights need. Each raises ConfigError naming the key.
"""

from __future__ import annotations

from imagenot.acquire.sizes import stored_size
from imagenot.core.config import ConfigError, load_schema
from imagenot.core.names import name_problem
from imagenot.core.registries import RegistryError
from imagenot.train.experiments import TORCHVISION, is_published, published_weights, source
from imagenot.train.facts import weight_facts
from imagenot.train.registry import check_input_size
from imagenot.train.search import SearchError, check_budget, check_space


def check(config: dict) -> None:
    """Cross-key checks the schema cannot express; raise ConfigError naming the key."""
    train = config["train"]
    check_nodes(config)
    for model in train["models"]:
        try:
            check_input_size(model, train["image_size"])
        except RegistryError as exc:
            raise ConfigError(f"config key train.image_size: {exc}") from None
        problem = name_problem(model)  # a plugin's model name becomes a path and a wildcard
        if problem:
            raise ConfigError(f"config key train.models: model name {problem}")
    st = {e["dataset"] for e in train["experiments"] if e["protocol"] == "st"}
    seen: dict[tuple[str, str], int] = {}
    for i, exp in enumerate(train["experiments"]):
        where = f"train.experiments.{i}"
        pair = (exp["dataset"], exp["protocol"])
        if pair in seen:  # one results folder per pair: the second entry would be ignored
            also = f"train.experiments.{seen[pair]}"
            raise ConfigError(f"config key {where}: {'/'.join(pair)} is listed twice (also {also})")
        seen[pair] = i
        if exp["dataset"] not in config["datasets"]:
            allowed = f"allowed values: {sorted(config['datasets'])}"
            raise ConfigError(
                f"config key {where}.dataset: {exp['dataset']!r} not in datasets; {allowed}"
            )
        if is_published(exp):
            if exp["protocol"] != "st" or "space" in exp:
                raise ConfigError(
                    f"config key {where}: weights: published takes protocol st, no space"
                )
            if not train["weights_dir"]:
                need = f"{where} uses published weights: give their folder"
                raise ConfigError(f"config key train.weights_dir: {need}")
            check_stored_size(config, exp["dataset"])
            continue
        if "space" not in exp:
            raise ConfigError(f"config key {where}.space: required (a key of train.spaces)")
        if exp["space"] not in train["spaces"]:
            allowed = f"allowed values: {sorted(train['spaces'])}"
            raise ConfigError(
                f"config key {where}.space: {exp['space']!r} not in train.spaces; {allowed}"
            )
        start = source(exp["protocol"])
        if start and start != TORCHVISION and start not in st:
            allowed = f"allowed sources: {sorted(st | {TORCHVISION})}"
            raise ConfigError(
                f"config key {where}.protocol: source {start!r} has no st experiment; {allowed}"
            )
    for name, sp in train["spaces"].items():
        try:
            check_space(sp["hyperparameters"], f"train.spaces.{name}.hyperparameters")
            check_budget(sp, f"train.spaces.{name}")
        except SearchError as exc:
            raise ConfigError(f"config key {exc}") from None
        check_epochs(sp, f"train.spaces.{name}")
    known = {f"{e['dataset']}/{e['protocol']}" for e in train["experiments"]}
    for i, amendment in enumerate(train["amendments"]):
        if amendment["experiment"] not in known or amendment["model"] not in train["models"]:
            allowed = f"experiment must be one of {sorted(known)}, model one of {train['models']}"
            raise ConfigError(f"config key train.amendments.{i}: {allowed}")


def check_epochs(space: dict, where: str) -> None:
    """The space's epoch counts agree: the first halving rung (``halving.min_epochs``) comes
    before the epoch cap, else no rung is ever reached and halving does nothing (each value
    alone is in its schema's range; only together are they wrong)."""
    first, cap = space["halving"]["min_epochs"], space["max_epochs"]
    if first > cap:
        raise ConfigError(
            f"config key {where}.halving.min_epochs: {first} is above {where}.max_epochs "
            f"({cap}): the first halving rung would come after training ends"
        )


def check_nodes(config: dict) -> None:
    """train.nodes_per_job against the GPUs and the executor: whole GPUs per node, only GPU jobs
    span nodes, and only under SLURM (whose srun starts a launcher on each node); and each
    training job's GPUs and cores per node within one node (:func:`check_per_node`)."""
    train, n = config["train"], config["train"]["nodes_per_job"]
    if n > 1 and config["resources"]["gpus"] == 0:
        raise ConfigError(
            f"config key train.nodes_per_job: {n} nodes per job needs GPU jobs "
            f"(resources.gpus > 0); CPU training jobs run on one node"
        )
    own = {"train.gpus_per_job": train["gpus_per_job"]}
    for model, g in train["gpus_per_job_overrides"].items():
        own[f"train.gpus_per_job_overrides.{model}"] = g
    for key, g in own.items():
        if g % n:
            raise ConfigError(
                f"config key train.nodes_per_job: {key} ({g}) must split evenly over {n} nodes"
            )
    if config["resources"]["gpus"] > 0:  # GPU counts are ignored by CPU training jobs
        for key, g in own.items():
            check_per_node(key, g, n, config["resources"]["cpus_per_gpu"])
    if n == 1:
        return
    if not config["resources"]["site"]:
        raise ConfigError(
            f"config key train.nodes_per_job: {n} nodes per job are started by SLURM's srun; run "
            f"with the site profile (snakemake --profile slurm, docs/cluster.md)"
        )


def check_per_node(key: str, gpus: int, nodes: int, cpus_per_gpu: int) -> None:
    """A training job's GPUs per node (``gpus`` over ``nodes``) at most the GPUs of one node, and
    its cores per node (those GPUs times ``cpus_per_gpu``) at most the cores of one node: the
    bounds of workflow/schemas/resources.schema.yaml ($defs gpus, cores). A request past them
    is a typo no scheduler could place (torchrun would start thousands of processes)."""
    bounds = load_schema("resources.schema.yaml")["$defs"]
    per_node = gpus // nodes
    most = bounds["gpus"]["maximum"]
    if per_node > most:
        raise ConfigError(
            f"config key {key}: {gpus} GPUs over train.nodes_per_job {nodes} is {per_node} per "
            f"node, more than the {most} GPUs one node holds (resources.schema.yaml $defs/gpus)"
        )
    cores, most = per_node * cpus_per_gpu, bounds["cores"]["maximum"]
    if cores > most:
        raise ConfigError(
            f"config key {key}: {per_node} GPUs per node times resources.cpus_per_gpu "
            f"{cpus_per_gpu} is {cores} cores per node, more than the {most} of one node "
            f"(resources.schema.yaml $defs/cores)"
        )


def check_stored_size(config: dict, dataset: str) -> None:
    """Stop (ConfigError naming the key) when ``dataset`` is stored smaller than the published
    weights evaluated on it need (:func:`published_stored_size`): they would see upsampled
    images, and their measured accuracy would not be the published protocol's. A check, not a
    silent change of the size: the acquire stage comes before the models and knows none."""
    stored = stored_size(config, dataset)
    needed = published_stored_size(config, dataset)
    if stored < needed:
        raise ConfigError(
            f"config key datasets.{dataset}.image_size: stored at {stored} px, below the {needed} "
            f"px its published weights resize to; set datasets.{dataset}.image_size: {needed}"
        )


def published_stored_size(config: dict, dataset: str) -> int:
    """The smallest stored image side ``dataset`` needs for the published weights evaluated on
    it (0 where none are): the largest resize (or crop) of their own protocols
    (:mod:`imagenot.train.facts`: 480 px for EfficientNet-V2-L), so that no weight sees an
    upsampled image: the reference dataset's stored size follows from its models
    (:func:`check_stored_size`)."""
    if not any(is_published(e) and e["dataset"] == dataset for e in config["train"]["experiments"]):
        return 0
    needed = 0
    for model in config["train"]["models"]:
        weights = published_weights(config["train"], model)
        if weights is None:
            continue  # train_published stops with a message naming the model
        try:
            facts = weight_facts(weights, model)
        except RegistryError as exc:
            raise ConfigError(f"config key train.weights.{model}: {exc}") from None
        needed = max(needed, facts.preprocessing.smallest_stored_size())
    return needed
