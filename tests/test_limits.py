"""Resources and limits: requests past any machine refused by validate-config naming the key
(their bounds in workflow/schemas/resources.schema.yaml), and a command that runs out of memory
under a process memory limit ends in one line naming that limit."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from imagenot.cli import out_of_memory
from imagenot.core.config import ConfigError, load_configs, read_config_file, validate_config
from imagenot.core.stages import check_workflow_config
from imagenot.train.checks import check_nodes

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "resources.schema.yaml"
IMAGENOT = str(Path(sys.executable).parent / "imagenot")


def _resolve(node: dict, schema: dict) -> dict:
    """``node`` with the resources schema's ``$defs`` entry it refers to (a ``$ref`` of the
    resources schema itself, or of another stage's schema into it) merged in."""
    ref = node.get("$ref", "").removeprefix("resources.schema.yaml")
    if ref.startswith("#/$defs/"):
        return {**schema["$defs"][ref.removeprefix("#/$defs/")], **node}
    return node


def _bounded(node: dict, schema: dict, path: tuple[str, ...] = ()) -> list[tuple]:
    """(key path, maximum) of every bounded key of the resources schema, read from it."""
    node = _resolve(node, schema)
    if "maximum" in node:
        return [(path, node["maximum"])]
    out = []
    for name, child in node.get("properties", {}).items():
        out += _bounded(child, schema, (*path, name))
    return out


def _with(path: tuple[str, ...], value, defaults: dict) -> dict:
    """A ``resources`` section that sets the key at ``path`` to ``value``; an object the key
    lies in carries its siblings' defaults (the work costs require all four terms)."""
    section = copy.deepcopy(defaults)
    node = section
    for name in path[:-1]:
        node = node[name]
    node[path[-1]] = value
    return {path[0]: section[path[0]]}


SCHEMA_DOC = yaml.safe_load(SCHEMA.read_text())
# The sections whose keys ask a machine for something: resources, and the training and download
# settings that set a job's processes and threads (their bounds $ref'd from the resources schema
# or stated beside the key).
SECTIONS = ("resources", "train", "acquire")
BOUNDED = [
    (section, path, maximum)
    for section in SECTIONS
    for path, maximum in _bounded(
        yaml.safe_load((SCHEMA.parent / f"{section}.schema.yaml").read_text()), SCHEMA_DOC
    )
]


def test_every_request_a_job_makes_of_a_machine_has_a_bound():
    keys = {".".join((section, *p)) for section, p, _ in BOUNDED}
    assert {"resources.gpus", "resources.cpus_per_gpu", "resources.max_runtime_min"} <= keys
    assert {"resources.attempt_growth", "resources.train_trial.mem_mb"} <= keys
    assert {"resources.classes.gpu.mem_mb", "resources.classes.gpu.runtime_min"} <= keys
    assert {
        "resources.work.curate_embed.floor_mb",
        "resources.work.acquire_split.min_per_gb",
    } <= keys
    assert {"train.num_workers", "train.nodes_per_job", "acquire.threads_per_process"} <= keys


def test_a_loader_takes_at_most_a_nodes_cores_in_workers():
    """train.num_workers (null and 0 allowed, so a plain bound, not a $ref) is the resources
    schema's bound of a node's cores."""
    assert (
        dict(((s, p), m) for s, p, m in BOUNDED)[("train", ("num_workers",))]
        == (SCHEMA_DOC["$defs"]["cores"]["maximum"])
    )


@pytest.mark.parametrize(
    "section, path, maximum", BOUNDED, ids=[".".join((s, *p)) for s, p, _ in BOUNDED]
)
def test_a_request_past_its_bound_is_refused_naming_the_key(section, path, maximum):
    defaults = validate_config({})[section]
    validate_config({section: _with(path, maximum, defaults)})  # the bound itself: valid
    too_much = maximum * 1000 if isinstance(maximum, int) else maximum * 1000.0
    key = re.escape(f"{section}." + ".".join(path))
    with pytest.raises(ConfigError, match=rf"{key}: .* greater than the maximum"):
        validate_config({section: _with(path, too_much, defaults)})


def _demo_with(resources: dict, train: dict) -> dict:
    config = read_config_file(REPO / "config" / "config.yaml")
    config["resources"] = {**config.get("resources", {}), "require_preflight": False, **resources}
    config["train"] = {**config.get("train", {}), **train}
    return config


GPUS = SCHEMA_DOC["$defs"]["gpus"]["maximum"]
CORES = SCHEMA_DOC["$defs"]["cores"]["maximum"]


def test_a_training_job_asks_for_at_most_a_nodes_gpus_and_cores():
    """The demo config at a node's GPUs, its cores (16 GPUs x 24 cores = 384) and a model's
    override at the same bound passes the workflow's checks (those of validate-config)."""
    at = {"gpus_per_job": GPUS, "gpus_per_job_overrides": {"resnet_mini": GPUS}}
    config = _demo_with({"gpus": 1, "cpus_per_gpu": CORES // GPUS}, at)
    checked = check_workflow_config(config, against_results=False)
    assert checked["train"]["gpus_per_job"] == GPUS


@pytest.mark.parametrize(
    "resources, train, message",
    [
        ({"gpus": 8}, {"gpus_per_job": 4096}, "train.gpus_per_job: 4096 GPUs over "
         "train.nodes_per_job 1 is 4096 per node, more than the 16 GPUs one node holds"),
        ({"gpus": 1}, {"gpus_per_job": GPUS + 1}, f"train.gpus_per_job: {GPUS + 1} GPUs"),
        ({"gpus": 1}, {"gpus_per_job_overrides": {"resnet_mini": 100000}},
         "train.gpus_per_job_overrides.resnet_mini: 100000 GPUs over train.nodes_per_job 1"),
        ({"gpus": 1, "cpus_per_gpu": CORES // GPUS + 1}, {"gpus_per_job": GPUS},
         f"train.gpus_per_job: 16 GPUs per node times resources.cpus_per_gpu 25 is 400 cores "
         f"per node, more than the {CORES} of one node"),
    ],
    ids=["4096_gpus", "one_past_a_node", "override", "cores"],
)  # fmt: skip
def test_a_training_job_past_a_nodes_gpus_or_cores_is_refused_naming_the_key(
    resources, train, message
):
    with pytest.raises(ConfigError, match=re.escape(f"config key {message}")) as refused:
        check_workflow_config(_demo_with(resources, train), against_results=False)
    assert "\n" not in str(refused.value)


def test_gpus_per_node_count_the_nodes_a_job_spans():
    """Over two nodes a job takes twice a node's GPUs (healthy); a model's override of four
    times as many is refused naming its key. CPU jobs (resources.gpus 0) ignore the counts."""
    config = load_configs([REPO / "config" / "config.yaml"])
    config["resources"] |= {"gpus": 1, "site": "cluster"}
    config["train"] |= {"nodes_per_job": 2, "gpus_per_job": 2 * GPUS}
    check_nodes(config)
    config["train"]["gpus_per_job_overrides"] = {"resnet_mini": 4 * GPUS}
    with pytest.raises(ConfigError, match=r"gpus_per_job_overrides.resnet_mini: 64 GPUs over "
                       r"train.nodes_per_job 2 is 32 per node"):  # fmt: skip
        check_nodes(config)
    cpu = load_configs([REPO / "config" / "config.yaml"])
    cpu["resources"]["gpus"] = 0
    cpu["train"]["gpus_per_job"] = 4096
    check_nodes(cpu)


def test_validate_config_refuses_thousands_of_gpus_per_node_in_one_line(tmp_path):
    config = tmp_path / "gpus.yaml"
    config.write_text(yaml.safe_dump({"resources": {"gpus": 8}, "train": {"gpus_per_job": 4096}}))
    run = subprocess.run(
        [IMAGENOT, "validate-config", "config/config.yaml", str(config)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode != 0
    assert "config key train.gpus_per_job: 4096 GPUs over train.nodes_per_job 1" in (
        run.stdout + run.stderr
    )


def test_validate_config_refuses_petabytes_of_memory_in_one_line(tmp_path):
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump({"resources": {"classes": {"light": {
        "mem_mb": 10**12, "runtime_min": 30}}}}))  # fmt: skip
    run = subprocess.run(
        [IMAGENOT, "validate-config", "config/config.yaml", str(config)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode != 0
    assert "resources.classes.light.mem_mb: 1000000000000 is greater than the maximum" in (
        run.stdout + run.stderr
    )


def _under_limit(kib: int, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        ["bash", "-c", f'ulimit -v {kib}; exec "$@"', "bash", *command],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_command_loading_torch_under_a_memory_limit_ends_in_one_line_naming_it(tmp_path):
    """600 MB of address space cannot map torch's libraries: the command that loads them
    says so in one line that names the limit, not in a traceback."""
    command = [IMAGENOT, "preflight", "--config", "config/config.yaml", "--json",
               str(tmp_path / "p.json"), "--md", str(tmp_path / "p.md")]  # fmt: skip
    run = _under_limit(600000, *command)
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 1, run.stderr
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("imagenot preflight: error: ran out of memory loading ")
    assert "ulimit -v 600000 (RLIMIT_AS" in lines[0]
    # the workflow's jobs run the same entry point as `python -m imagenot`
    run = _under_limit(600000, sys.executable, "-m", "imagenot", *command[1:])
    assert run.returncode == 1 and len(run.stderr.strip().splitlines()) == 1, run.stderr


def test_only_errors_for_want_of_memory_are_read_as_such():
    assert out_of_memory(MemoryError()) is not None
    assert out_of_memory(ImportError("libx.so: failed to map segment from shared object"))
    assert out_of_memory(OSError(12, "Cannot allocate memory")) is not None
    assert out_of_memory(ImportError("cannot import name 'x' from 'y'")) is None
    assert out_of_memory(FileNotFoundError(2, "No such file or directory")) is None
    assert out_of_memory(ValueError("failed to map segment")) is None


# torch's CPU allocator's words (torch 2.13 under `ulimit -v 3800000`), and where malloc fails
CPU_ALLOCATOR = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 10000000000 bytes. Error code 12 (Cannot allocate memory)"
)
CPU_ALLOCATOR_MALLOC = (
    "[enforce fail at alloc_cpu.cpp:83] data. DefaultCPUAllocator: not enough memory: you tried "
    "to allocate 4096 bytes."
)


def test_torchs_cpu_allocator_refusing_memory_is_read_as_such():
    message = out_of_memory(RuntimeError(CPU_ALLOCATOR))
    assert message is not None and message.startswith(
        "ran out of memory allocating 9,536.7 MiB in torch"
    )
    assert out_of_memory(RuntimeError(CPU_ALLOCATOR_MALLOC)) is not None
    assert out_of_memory(RuntimeError("CUDA error: device-side assert triggered")) is None
    assert out_of_memory(RuntimeError("Error(s) in loading state_dict for ResNet")) is None
    assert out_of_memory(ValueError(CPU_ALLOCATOR)) is None  # torch raises a RuntimeError


def test_a_command_that_never_loaded_torch_reads_errors_without_importing_it():
    code = (
        "import sys; from imagenot.cli import out_of_memory; "
        f"assert out_of_memory(RuntimeError({CPU_ALLOCATOR!r})); "
        "assert out_of_memory(RuntimeError('a bug')) is None; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_a_gpu_out_of_memory_is_one_line_naming_the_cards_memory():
    torch = pytest.importorskip("torch", reason="torch.OutOfMemoryError needs torch installed")
    cuda = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.81 "
        "GiB of which 1.19 GiB is free. Including non-PyTorch memory, this process has 138.61 "
        "GiB memory in use.\nIf reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    )
    message = out_of_memory(torch.OutOfMemoryError(cuda))
    assert message is not None and "\n" not in message
    assert message.startswith("ran out of GPU memory: CUDA out of memory. Tried to allocate")
    assert "total capacity of 139.81 GiB" in message and "train.max_batch_per_gpu" in message
    assert out_of_memory(RuntimeError(cuda.replace("out of memory", "error"))) is None


def test_an_evaluation_job_asks_for_at_most_a_nodes_cores():
    """evaluate.threads takes the resources schema's bound of a node's cores ($ref)."""
    cores = SCHEMA_DOC["$defs"]["cores"]["maximum"]
    assert validate_config({"evaluate": {"threads": cores}})["evaluate"]["threads"] == cores
    with pytest.raises(ConfigError, match=r"evaluate\.threads: 5000 is greater than the maximum"):
        validate_config({"evaluate": {"threads": 5000}})
