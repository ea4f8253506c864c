"""Config lookups for the train stage's rules (pure functions of the workflow config).

The rule file rules/train.smk calls these; Snakemake files themselves define no functions.
What the config says about one experiment (its space, seeds, starting weights, GPUs and nodes)
lives below this module and the settings objects, in :mod:`imagenot.train.experiments`.
Layout: ``results/train/{dataset}/{protocol}/{model}/`` holds ``trials.parquet``,
``trial-{trial}/`` (``rung-{k}.json`` per halving rung, ``result.json``, ``metrics.csv``),
``halving/rung-{k}.json``, ``selection.json`` and ``final/seed-{seed}/``.
"""

from __future__ import annotations

from pathlib import Path

from imagenot.config import ConfigError
from imagenot.names import name_problem
from imagenot.paths import FINGERPRINT, MANIFEST
from imagenot.registries import RegistryError
from imagenot.train.experiments import (
    TORCHVISION,
    features_dir,  # noqa: F401 (the rules' name for a TL run's features folder)
    gpus_per_node,
    init_weights,
    is_published,
    is_tl,
    nodes,
    published_weights,
    run_dir,  # noqa: F401 (tests' name for an experiment x model's folder)
    seeds,
    source,
    space,
)
from imagenot.train.paths import (
    DECISION,
    FEATURES,
    FINAL_DIR,
    FINAL_RESULT,
    PREREGISTRATION,
    PREREGISTRATION_TABLE,
    SLOT,
    TRAIN,
    TRIALS,
)
from imagenot.train.registry import MODELS, check_input_size
from imagenot.train.search import (
    SearchError,
    check_budget,
    check_space,
    promoted_count,
    rungs,
)


def check(config: dict) -> None:
    """Cross-key checks the schema cannot express; raise ConfigError naming the key."""
    train = config["train"]
    check_nodes(config)
    for model in train["models"]:
        try:
            check_input_size(model, train["image_size"])
        except RegistryError as exc:
            raise ConfigError(f"config key train.image_size: {exc}") from None
    for model in train["models"]:  # a plugin's model name becomes a path and a wildcard
        problem = name_problem(model)
        if problem:
            raise ConfigError(f"config key train.models: model name {problem}")
    st = {e["dataset"] for e in train["experiments"] if e["protocol"] == "st"}
    seen: dict[tuple[str, str], int] = {}
    for i, exp in enumerate(train["experiments"]):
        where = f"train.experiments.{i}"
        pair = (exp["dataset"], exp["protocol"])
        if pair in seen:  # one results folder per pair: the second entry would be ignored
            raise ConfigError(
                f"config key {where}: experiment {'/'.join(pair)} is listed twice (also "
                f"train.experiments.{seen[pair]}); each dataset/protocol is one experiment"
            )
        seen[pair] = i
        if exp["dataset"] not in config["datasets"]:
            raise ConfigError(
                f"config key {where}.dataset: {exp['dataset']!r} is not a configured dataset; "
                f"allowed values: {sorted(config['datasets'])}"
            )
        if is_published(exp):
            if exp["protocol"] != "st" or "space" in exp:
                raise ConfigError(
                    f"config key {where}: weights: published takes protocol st and no space "
                    f"(nothing is searched or trained)"
                )
            if not train["weights_dir"]:
                raise ConfigError(
                    f"config key train.weights_dir: {where} uses published weights; give the "
                    f"directory holding torchvision's weights files"
                )
            check_stored_size(config, exp["dataset"])
            continue
        if "space" not in exp:
            raise ConfigError(f"config key {where}.space: required (a key of train.spaces)")
        if exp["space"] not in train["spaces"]:
            raise ConfigError(
                f"config key {where}.space: {exp['space']!r} is not defined; allowed values: "
                f"{sorted(train['spaces'])}"
            )
        start = source(exp["protocol"])
        if start and start != TORCHVISION and start not in st:
            raise ConfigError(
                f"config key {where}.protocol: source {start!r} has no st experiment; allowed "
                f"sources: {sorted(st | {TORCHVISION})}"
            )
    for name, sp in train["spaces"].items():
        try:
            check_space(sp["hyperparameters"], f"train.spaces.{name}.hyperparameters")
            check_budget(sp, f"train.spaces.{name}")
        except SearchError as exc:
            raise ConfigError(f"config key {exc}") from None
        for model in sp["batch_size_overrides"]:
            if model not in MODELS:
                raise ConfigError(
                    f"config key train.spaces.{name}.batch_size_overrides: {model!r} is not in "
                    f"the registry; allowed values: {sorted(MODELS)}"
                )
    for model in train["max_batch_per_gpu_overrides"]:
        if model not in MODELS:
            raise ConfigError(
                f"config key train.max_batch_per_gpu_overrides: {model!r} is not in the "
                f"registry; allowed values: {sorted(MODELS)}"
            )
    known = {f"{e['dataset']}/{e['protocol']}" for e in train["experiments"]}
    for i, amendment in enumerate(train["amendments"]):
        if amendment["experiment"] not in known or amendment["model"] not in train["models"]:
            raise ConfigError(
                f"config key train.amendments.{i}: experiment must be one of {sorted(known)} "
                f"and model one of {train['models']}"
            )


def published_pattern(config: dict) -> str:
    """Regex of the datasets whose st runs are published weights (rule train_published's
    wildcard constraint; ``ruleorder`` prefers it to train_final there)."""
    names = sorted({e["dataset"] for e in config["train"]["experiments"] if is_published(e)})
    return "|".join(names) or "(?!)"


def protocol_regex(config: dict) -> str:
    """The one ``protocol`` wildcard constraint of the workflow (rules/common.smk): the
    protocols of the configured train.experiments (``st``, ``ft-SOURCE``, ``tl-SOURCE``), so no
    rule matches a protocol the config does not train. Never matches without experiments."""
    return _protocols_regex(e["protocol"] for e in config["train"]["experiments"])


def _protocols_regex(protocols) -> str:
    """An alternation of the given protocols, escaped; a regex matching nothing for none."""
    import re

    return "|".join(map(re.escape, sorted(set(protocols)))) or "(?!)"


def experiments(config: dict) -> list[dict]:
    """The configured experiments (validated)."""
    check(config)
    return config["train"]["experiments"]


def check_stored_size(config: dict, dataset: str) -> None:
    """Stop (ConfigError naming the key) when ``dataset`` is stored smaller than the published
    weights evaluated on it need (:func:`published_stored_size`): they would see upsampled
    images, and their measured accuracy would not be the published protocol's. A check, not a
    silent change of the size: the acquire stage comes before the models and knows none."""
    from imagenot.acquire.sizes import stored_size
    from imagenot.config import ConfigError

    stored = stored_size(config, dataset)
    needed = published_stored_size(config, dataset)
    if stored < needed:
        raise ConfigError(
            f"config key datasets.{dataset}.image_size: {dataset} would be stored at {stored} "
            f"px, but the published weights evaluated on it resize to {needed} px (their own "
            f"protocol, imagenot.train.facts); set datasets.{dataset}.image_size: {needed}"
        )


def published_stored_size(config: dict, dataset: str) -> int:
    """The smallest stored image side ``dataset`` needs for the published weights evaluated on
    it (0 where none are): the largest resize (or crop) of their own protocols
    (:mod:`imagenot.train.facts`: 480 px for EfficientNet-V2-L), so that no weight sees an
    upsampled image: the reference dataset's stored size follows from its models
    (:func:`check_stored_size`)."""
    from imagenot.config import ConfigError
    from imagenot.train.facts import weight_facts

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


def tl_protocol_regex(config: dict) -> str:
    """The configured TL protocols (constraint of the feature and head-fitting rules)."""
    return _protocols_regex(
        e["protocol"] for e in config["train"]["experiments"] if is_tl(e["protocol"])
    )


# A dataset's splits: imagenot.acquire.dataset.SPLITS, not imported (plan modules stay free of
# pyarrow: every job's Snakemake parses the rules); tests/test_train_features.py checks they agree.
SPLITS = ("train", "val", "test")
# What a trial reads: it selects on validation accuracy and never sees the test split.
TRIAL_SPLITS = ("train", "val")


def feature_files(dataset: str, protocol: str, model: str, splits=SPLITS) -> list[str]:
    """The features files of ``splits`` (a trial's TRIAL_SPLITS; every split for a final run,
    which also scores the test split)."""
    run = {"dataset": dataset, "protocol": protocol, "model": model}
    return [FEATURES.format(**run, split=split) for split in splits]


def threads(config: dict) -> int:
    """CPU cores of a training job on each of its nodes (the rule's threads, SLURM's
    --cpus-per-task of its one task per node): resources.cpus_per_gpu per GPU of the node
    (decoding and feeding), one for a CPU job (``slurm_profile.gpu_threads``, as every GPU
    rule's)."""
    from imagenot.slurm_profile import gpu_threads

    return gpu_threads(config, 1, gpus_per_node(config))


def check_nodes(config: dict) -> None:
    """train.nodes_per_job against the GPUs and the executor: whole GPUs per node, only GPU jobs
    span nodes, and only under SLURM (whose srun starts a launcher on each node)."""
    train, n = config["train"], config["train"]["nodes_per_job"]
    if n == 1:
        return
    if config["resources"]["gpus"] == 0:
        raise ConfigError(
            f"config key train.nodes_per_job: {n} nodes per job needs GPU jobs "
            f"(resources.gpus > 0); CPU training jobs run on one node"
        )
    if train["gpus_per_job"] % n:
        raise ConfigError(
            f"config key train.nodes_per_job: train.gpus_per_job ({train['gpus_per_job']}) must "
            f"split evenly over {n} nodes (the same GPUs on every node)"
        )
    if not config["resources"]["site"]:
        raise ConfigError(
            f"config key train.nodes_per_job: {n} nodes per job are started by SLURM's srun; run "
            f"with the site profile (snakemake --profile slurm, docs/cluster.md)"
        )


# torchrun's stop signals: its defaults and SIGUSR1 (a warning a site may send with --signal),
# forwarded to every rank, which checkpoints and exits. A time limit needs none: every rank stops
# by the job's own deadline (imagenot.train.interrupts.job_deadline)
STOP_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"
# How long torchrun waits for its ranks to agree on a step, checkpoint and exit after a stop
# signal before it kills them: well inside the default 10-minute deadline margin (a check every
# loop.CHECK_EVERY steps, then one checkpoint written by rank 0)
SHUTDOWN_S = 300
# The c10d rendezvous port of a multi-node job: this base plus the SLURM job id modulo 1000,
# so two jobs sharing a first node rarely collide (their ids differ in the last digits)
RDZV_PORT_BASE = 29500


def launcher(config: dict) -> str:
    """What the training rules' shell line puts before ``imagenot train-trial|train-final``:
    nothing for one process (no launcher, no process group), torchrun for a data-parallel
    job on one node, and ``srun`` starting one torchrun per node for a multi-node job
    (``imagenot.train.distributed``, docs/gpu.md "Data parallelism")."""
    return launch_line(nodes(config), gpus_per_node(config), threads(config))


def launch_line(n_nodes: int, per_node: int, threads: int) -> str:
    """The launcher of :func:`launcher` for ``n_nodes`` nodes of ``per_node`` processes."""
    if n_nodes * per_node <= 1:
        return ""
    torchrun = [
        "torchrun",
        f"--nnodes={n_nodes}",
        f"--nproc-per-node={per_node}",
        "--max-restarts=0",  # a failed rank ends the job; its retry resumes the checkpoint
        f"--signals-to-handle={STOP_SIGNALS}",
        f"--shutdown-timeout={SHUTDOWN_S}",
    ]
    if n_nodes == 1:
        return " ".join(["torchrun", "--standalone", *torchrun[1:], "--no-python"])
    # SLURM's job id names the rendezvous; the shell that runs the line runs on the job's
    # first node, whose launcher hosts it. --overlap: outside a job array the workflow's own
    # step already holds the first node (the executor plugin wraps the rule in `srun -n1`)
    endpoint = f'"$(hostname):$(({RDZV_PORT_BASE}+SLURM_JOB_ID%1000))"'
    rdzv = ["--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", '--rdzv-id="$SLURM_JOB_ID"']
    srun = [
        "srun",
        f"--nodes={n_nodes}",
        f"--ntasks={n_nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={threads}",
        "--overlap",
        "--kill-on-bad-exit=1",  # one node's launcher failing ends the others at once
    ]
    return " ".join([*srun, *torchrun, *rdzv, "--no-python"])


def dataset_inputs(dataset: str) -> list[str]:
    """The materialised dataset's manifest and fingerprint (acquire's outputs)."""
    return [MANIFEST.format(dataset=dataset), FINGERPRINT.format(dataset=dataset)]


# Successive halving as a static DAG of *slots*: stage k (k < number of rungs) trains to the
# k-th rung, the last stage to the end of training. Stage 0 has one slot per trial; each later
# stage has the ceil(n / eta) slots that the previous rung promotes into, and slot s of it
# trains the s-th promoted trial (read from halving/rung-{k-1}.json at run time). A trial that
# is not promoted therefore has no job at all: no GPU is requested to copy a result forward.


def stage_ids(config: dict, dataset: str, protocol: str) -> list[int]:
    """The training stages of a trial: one per halving rung, then the end."""
    return list(range(len(rungs(space(config, dataset, protocol))) + 1))


def slot_counts(config: dict, dataset: str, protocol: str) -> list[int]:
    """Jobs per stage: the budget, then ceil(n / eta) after each rung (search.promote's count)."""
    sp = space(config, dataset, protocol)
    counts = [sp["budget"]]
    for _ in rungs(sp):
        counts.append(promoted_count(counts[-1], sp["halving"]["eta"]))
    return counts


def slot_ids(config: dict, dataset: str, protocol: str, stage) -> list[int]:
    return list(range(slot_counts(config, dataset, protocol)[int(stage)]))


def slot_file(dataset: str, protocol: str, model: str, stage, slot) -> str:
    return SLOT.format(dataset=dataset, protocol=protocol, model=model, stage=stage, slot=slot)


def decision_file(dataset: str, protocol: str, model: str, rung) -> str:
    return DECISION.format(dataset=dataset, protocol=protocol, model=model, rung=rung)


def previous_decision(config: dict, dataset: str, protocol: str, model: str, stage) -> list[str]:
    """The halving decision a stage's slots read their trial from ([] for stage 0)."""
    stage = int(stage)
    return [decision_file(dataset, protocol, model, stage - 1)] if stage > 0 else []


def slot_trains(previous, slot) -> bool:
    """Whether a slot has a trial to train, read from its promotion input ``previous`` (the
    rule's ``input.previous``: the previous rung's decision file, none at stage 0) when the job
    becomes ready. Why: a slot no trial was promoted into exits at once (``jobs.run_slot``), so
    it must not wait in the GPU queue for a GPU, 24 h and 32 GB. A decision not written yet
    (``snakemake -n`` plans before it exists) or unreadable counts as a slot that trains: the
    full request, and the job itself reports a bad file."""
    from imagenot.train.trials import slot_trial

    files = [previous] if isinstance(previous, str) else list(previous)
    if not files:
        return True
    try:
        return slot_trial(int(slot), Path(files[0])) is not None
    except (OSError, ValueError, KeyError, TypeError):
        return True


def slot_status(dataset: str, protocol: str, model: str, stage, slot) -> Path:
    """A slot job's status file (``imagenot.train.failfast``: a permanent fault, deadline
    stops), beside the slot's result."""
    from imagenot.train.failfast import status_for

    return status_for(slot_file(dataset, protocol, model, stage, slot))


def slot_gets_gpu(previous, slot, status: Path | None = None, attempt: int = 1) -> bool:
    """Whether a train_trial job asks for its GPUs: a slot that trains, unless an earlier
    attempt of it failed for good in this run (``failfast.refused``: its retry only exits)."""
    from imagenot.train.failfast import refused

    if status is not None and refused(status, attempt):
        return False
    return slot_trains(previous, slot)


def slot_threads(config: dict, previous, slot, status: Path | None = None, attempt: int = 1) -> int:
    """Cores of a train_trial job: :func:`threads`, one for an empty slot or a refused retry."""
    return threads(config) if slot_gets_gpu(previous, slot, status, attempt) else 1


def slot_mem_mb(
    config: dict, previous, slot, attempt: int, status: Path | None = None, ring: int = 0
) -> int:
    """Memory (MB) of a train_trial job: :func:`process_mem_mb` when the slot trains, the small
    ``empty_mem_mb`` for an empty slot (it exits at once; grown per attempt as every rule's)."""
    from imagenot.train.failfast import memory_attempt, refused

    if slot_gets_gpu(previous, slot, status, attempt):
        return process_mem_mb(config, status, attempt, ring, gpus_per_node(config))
    own = config["resources"]["train_trial"]
    if status is not None and refused(status, attempt):
        return own["empty_mem_mb"]
    grown = memory_attempt(status, attempt) if status is not None else attempt
    return int(own["empty_mem_mb"] * config["resources"]["attempt_growth"] ** max(grown - 1, 0))


def process_mem_mb(
    config: dict, status: Path | None, attempt: int, ring: int, processes: int
) -> int:
    """Memory (MB) of a training job (train_trial, train_final, train_features: the same
    model's process per GPU): ``resources.train_trial.mem_mb`` plus ``ring``, its batch rings
    (``rings.ring_mb``), for each of the ``processes`` of its node (SLURM's --mem counts per
    node), grown per attempt by ``resources.attempt_growth`` except for attempts that followed a
    deadline stop (``failfast.memory_attempt``: the clock stopped it, not its memory); the small
    ``empty_mem_mb``, not grown, for the retry of a job that failed for good (it only exits)."""
    from imagenot.train.failfast import memory_attempt, refused

    own = config["resources"]["train_trial"]
    if status is not None and refused(status, attempt):
        return own["empty_mem_mb"]
    base = (own["mem_mb"] + ring) * max(1, processes)
    grown = memory_attempt(status, attempt) if status is not None else attempt
    return int(base * config["resources"]["attempt_growth"] ** max(grown - 1, 0))


def slot_runtime_min(config: dict, previous, slot, attempt: int, status: Path | None = None) -> int:
    """Runtime (minutes) of a train_trial job (``resources.train_trial``), grown per attempt
    and capped at ``resources.max_runtime_min`` (the site's maximum under a site profile);
    ``empty_runtime_min`` for an empty slot, and for a refused retry without growth."""
    from imagenot.train.failfast import refused

    own = config["resources"]["train_trial"]
    if status is not None and refused(status, attempt):  # it only exits: the least, not grown
        return own["empty_runtime_min"]
    key = "runtime_min" if slot_trains(previous, slot) else "empty_runtime_min"
    grown = int(own[key] * config["resources"]["attempt_growth"] ** max(attempt - 1, 0))
    return min(grown, config["resources"]["max_runtime_min"])


def promoted_option(config: dict, dataset: str, protocol: str, model: str, stage) -> str:
    files = previous_decision(config, dataset, protocol, model, stage)
    return f"--promoted {files[0]}" if files else ""


def stage_results(config: dict, dataset: str, protocol: str, model: str, stage) -> list[str]:
    """The slot results of one stage (a halving rung's inputs)."""
    return [
        slot_file(dataset, protocol, model, stage, s)
        for s in slot_ids(config, dataset, protocol, stage)
    ]


def all_results(config: dict, dataset: str, protocol: str, model: str) -> list[str]:
    """Every stage's slot results (selection's inputs: each trial's latest result is there)."""
    return [
        f
        for stage in stage_ids(config, dataset, protocol)
        for f in stage_results(config, dataset, protocol, model, stage)
    ]


def trial_ids(config: dict, dataset: str, protocol: str) -> list[int]:
    return list(range(space(config, dataset, protocol)["budget"]))


def final_runs(config: dict) -> list[dict]:
    """Every final (retrained-best) run the workflow makes: dicts with keys ``dataset``,
    ``protocol``, ``model``, ``seed``; their outputs are
    ``results/train/{dataset}/{protocol}/{model}/final/seed-{seed}/model.safetensors``."""
    return [
        {"dataset": e["dataset"], "protocol": e["protocol"], "model": m, "seed": s}
        for e in experiments(config)
        for m in config["train"]["models"]
        for s in seeds(config, e)
    ]


def final_dir(run: dict) -> str:
    return FINAL_DIR.format(**run)


def _drawn(config: dict) -> list[tuple[str, str, str]]:
    """(dataset, protocol, model) of every trials-drawing job; published-weights experiments
    register nothing."""
    trained = {(e["dataset"], e["protocol"]) for e in experiments(config) if not is_published(e)}
    runs = {
        (r["dataset"], r["protocol"], r["model"])
        for r in final_runs(config)
        if (r["dataset"], r["protocol"]) in trained
    }
    return sorted(runs)


def trials_tables(config: dict) -> list[str]:
    """Every trained experiment x model's trials table (each written after its
    preregistration check)."""
    return [TRIALS.format(dataset=d, protocol=p, model=m) for d, p, m in _drawn(config)]


def check_results(config: dict) -> None:
    """The config against the preregistration record in the working directory: a changed space,
    budget or model setting without its amendment stops the workflow before any job runs, as
    the trials-drawing job would (imagenot.train.prereg.check_planned says why), losing nothing.
    Nothing to check before the first run."""
    from imagenot.train.prereg import check_planned

    if not Path(PREREGISTRATION).is_file():
        return
    from imagenot.train.settings import DrawSettings

    drawing = [DrawSettings.from_config(config, *run) for run in _drawn(config)]
    check_planned(Path(PREREGISTRATION), drawing, Path(TRAIN))


def published_weights_file(config: dict, model: str) -> str:
    """The local file of ``model``'s published ImageNet weights (train.weights_dir)."""
    return init_weights(config, "ft-torchvision", model)[0]


def targets(config: dict) -> list[str]:
    """Final outputs of this stage for ``rule all``: every final run's result.json and the
    preregistration table of the report."""
    return [FINAL_RESULT.format(**run) for run in final_runs(config)] + [PREREGISTRATION_TABLE]
