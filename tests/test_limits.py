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
from imagenot.config import ConfigError, validate_config

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "resources.schema.yaml"
IMAGENOT = str(Path(sys.executable).parent / "imagenot")


def _resolve(node: dict, schema: dict) -> dict:
    ref = node.get("$ref", "")
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
BOUNDED = _bounded(SCHEMA_DOC, SCHEMA_DOC)


def test_every_request_a_job_makes_of_a_machine_has_a_bound():
    keys = {".".join(p) for p, _ in BOUNDED}
    assert {"gpus", "cpus_per_gpu", "max_runtime_min", "attempt_growth"} <= keys
    assert {"classes.gpu.mem_mb", "classes.gpu.runtime_min", "train_trial.mem_mb"} <= keys
    assert {"work.curate_embed.floor_mb", "work.acquire_split.min_per_gb"} <= keys


@pytest.mark.parametrize("path, maximum", BOUNDED, ids=[".".join(p) for p, _ in BOUNDED])
def test_a_request_past_its_bound_is_refused_naming_the_key(path, maximum):
    defaults = validate_config({})["resources"]
    validate_config({"resources": _with(path, maximum, defaults)})  # the bound itself: valid
    too_much = maximum * 1000 if isinstance(maximum, int) else maximum * 1000.0
    key = re.escape("resources." + ".".join(path))
    with pytest.raises(ConfigError, match=rf"{key}: .* greater than the maximum"):
        validate_config({"resources": _with(path, too_much, defaults)})


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


def test_an_evaluation_job_asks_for_at_most_a_nodes_cores():
    """evaluate.threads takes the resources schema's bound of a node's cores ($ref)."""
    cores = SCHEMA_DOC["$defs"]["cores"]["maximum"]
    assert validate_config({"evaluate": {"threads": cores}})["evaluate"]["threads"] == cores
    with pytest.raises(ConfigError, match=r"evaluate\.threads: 5000 is greater than the maximum"):
        validate_config({"evaluate": {"threads": 5000}})
