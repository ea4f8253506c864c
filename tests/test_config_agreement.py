"""`imagenot validate-config` accepts exactly what the workflow accepts.

A seeded generator (hypothesis is not in the environment) makes odd configs from the default one:
a leaf of the config replaced by a value of another kind (a float where an int stands, zero, a
negative or huge number, an empty list, an odd string), a name that becomes a path or a lookup
key (dataset, space) replaced by an odd one, an experiment listed twice, an odd shard pattern. For
each, the config check either accepts it, and then the workflow's planning (every stage plan's
targets) succeeds too, or refuses it in one line naming the key. A few go through `snakemake -n`
as well, which must agree with the in-process check.
"""

from __future__ import annotations

import copy
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from imagenot.core.config import ConfigError, read_config_file
from imagenot.core.stages import check_workflow_config, stage_plans

REPO = Path(__file__).resolve().parents[1]

# Odd values, and some that are fine (so that the generator makes configs of both outcomes).
ODD_NAMES = ["torchvision", "Imagenet", "a-b", "a.b", "a/b", "", "é", "1abc", "_x", "x" * 80]
ODD_NAMES += ["st", "all", "results", "x1", "a_b"]
ODD_PATTERNS = [
    "{j}.parquet",
    "{}.parquet",
    "{i:s}",
    "{i}/x.parquet",
    "x.parquet",
    "{i[0]}",
    "{i!r",
]
ODD_PATTERNS += ["{i:03d}.parquet", "{i}{i}.pq", "{i:x}"]
ODD_VALUES = [0, -1, 1.0, 2.5, 10**12, True, "3", "", [], {}, None, [0, 0], 1, 2, 0.5]


def _leaves(node, path=()):
    """Every (path, value) of the config whose value is not a mapping."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, node


def _set(config: dict, path: tuple, value) -> None:
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def _rename_dataset(config: dict, rng: random.Random) -> str:
    old = rng.choice(sorted(config["datasets"]))
    new = rng.choice(ODD_NAMES)
    config["datasets"] = {new if k == old else k: v for k, v in config["datasets"].items()}
    for exp in config["train"]["experiments"]:
        if exp["dataset"] == old:
            exp["dataset"] = new
    return f"dataset {old!r} -> {new!r}"


def _rename_space(config: dict, rng: random.Random) -> str:
    spaces = config["train"]["spaces"]
    old = rng.choice(sorted(spaces))
    new = rng.choice(ODD_NAMES)
    config["train"]["spaces"] = {new if k == old else k: v for k, v in spaces.items()}
    for exp in config["train"]["experiments"]:
        if exp.get("space") == old:
            exp["space"] = new
    return f"space {old!r} -> {new!r}"


def _twice(config: dict, rng: random.Random) -> str:
    exps = config["train"]["experiments"]
    exp = copy.deepcopy(rng.choice(exps))
    exp["space"] = rng.choice(sorted(config["train"]["spaces"]))
    exps.append(exp)
    return f"experiment {exp['dataset']}/{exp['protocol']} twice"


def _pattern(config: dict, rng: random.Random) -> str:
    config["laion"]["shard_pattern"] = rng.choice(ODD_PATTERNS)
    return f"shard_pattern {config['laion']['shard_pattern']!r}"


def _leaf(config: dict, rng: random.Random) -> str:
    path, _ = rng.choice(list(_leaves(config)))
    value = rng.choice(ODD_VALUES)
    _set(config, path, copy.deepcopy(value))
    return f"{'.'.join(map(str, path))} = {value!r}"


MUTATIONS = [_rename_dataset, _rename_space, _twice, _pattern, _leaf, _leaf, _leaf]


def odd_config(base: dict, seed: int) -> tuple[dict, list[str]]:
    """The default config with one or two seeded mutations, and what they were."""
    rng = random.Random(seed)
    config = copy.deepcopy(base)
    done = []
    for _ in range(rng.randint(1, 2)):
        mutation = rng.choice(MUTATIONS)
        try:
            done.append(mutation(config, rng))
        except (TypeError, KeyError, AttributeError, IndexError):  # an earlier one removed its
            done.append(f"{mutation.__name__}: not applicable")  # section: the config stays odd
    return config, done


def _check(config: dict) -> str | None:
    """None when the config check accepts ``config``, else its one-line refusal."""
    try:
        check_workflow_config(copy.deepcopy(config), against_results=False)
    except ValueError as exc:  # ConfigError included
        return str(exc)
    return None


def _plan(config: dict) -> list[str]:
    """The workflow's planning in-process: the check, then every stage plan's targets."""
    config = check_workflow_config(copy.deepcopy(config), against_results=False)
    return [t for plan in stage_plans() for t in plan.targets(config)]


def _one_line_naming_a_key(message: str) -> bool:
    """A refusal: one line per problem (after validate_config's count header, which lists up to
    ten), each naming the key it is about."""
    lines = message.strip().splitlines()
    lines = lines[1:] if lines[0].startswith("invalid workflow config (") else lines
    return 1 <= len(lines) <= 10 and all("config key" in line for line in lines)


@pytest.fixture(scope="module")
def base() -> dict:
    return read_config_file(REPO / "config" / "config.yaml")


SEEDS = range(80)


@pytest.fixture(scope="module")
def checked(base) -> dict[int, tuple[dict, list[str], str | None]]:
    """Each seed's odd config, what made it odd, and the check's refusal (None: accepted),
    made once for the module's three tests."""
    out = {}
    for seed in SEEDS:
        config, what = odd_config(base, seed)
        out[seed] = (config, what, _check(config))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_check_and_planning_agree_on_odd_configs(checked, seed):
    config, what, refusal = checked[seed]
    if refusal is None:
        try:
            targets = _plan(config)
        except Exception as exc:  # any failure here is the disagreement
            pytest.fail(f"{what}: validates, but planning fails: {type(exc).__name__}: {exc}")
        assert targets, what
    else:
        assert _one_line_naming_a_key(refusal), f"{what}: {refusal!r}"
        with pytest.raises(ValueError):
            _plan(config)


def test_the_generator_makes_both_outcomes(checked):
    """The property above is only worth something if the generator makes configs of both kinds."""
    outcomes = [refusal is None for _, _, refusal in checked.values()]
    assert 10 <= sum(outcomes) <= len(outcomes) - 10


def _snakemake_n(tmp_path: Path, config: dict) -> subprocess.CompletedProcess:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, allow_unicode=True))
    command = [str(Path(sys.executable).parent / "snakemake"), "-n", "-q"]
    command += ["--configfile", str(path), "-s", str(REPO / "Snakefile")]
    return subprocess.run(
        [*command, "--directory", str(tmp_path / "wd")],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_snakemake_n_agrees_with_the_check(checked, tmp_path):
    """A few accepted and a few refused configs through the real workflow: `snakemake -n` plans
    each accepted one and stops each refused one with the check's own line, no traceback."""
    accepted, refused = [], []
    for config, what, refusal in checked.values():
        (accepted if refusal is None else refused).append((config, what, refusal))
    for config, what, refusal in accepted[:2] + refused[:3]:
        run = _snakemake_n(tmp_path, config)
        if refusal is None:
            assert run.returncode == 0, f"{what}: {run.stderr[-2000:]}"
        else:
            assert run.returncode != 0, what
            assert refusal.strip().splitlines()[-1].strip() in run.stderr, (what, run.stderr)
            assert "Traceback" not in run.stderr, what


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("{}\n", "is empty"),
        ("- seed: 1\n", "not a mapping"),
        ("just a string\n", "not a mapping"),
    ],
)
def test_config_files_that_are_not_a_mapping_are_refused(tmp_path, text, message):
    path = tmp_path / "overlay.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        read_config_file(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def _merged(base: dict, overlay: dict) -> dict:
    """``overlay`` on ``base`` as Snakemake merges config files: mappings key by key."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both else copy.deepcopy(value)
    return out


@pytest.mark.parametrize(
    ("overlay", "key"),
    [
        ({"datasets": {"torchvision": {"kind": "laion"}}}, "config key datasets: name"),
        ({"train": {"spaces": {"a.b": {}}}}, "config key train.spaces: name 'a.b'"),
        ({"seed": 1.0}, "config key seed: 1.0 is not of type 'integer'"),
        ({"laion": {"shard_pattern": "part-{j}.parquet"}}, "config key laion.shard_pattern"),
        ({"laion": {"n_shards": 0}}, "config key laion.n_shards"),
        ({"train": {"spaces": {"big": {"budget": 10**9}}}}, "config key train.spaces.big.budget"),
        ({"train": {"weights": {"nope": "x"}}}, "config key train.weights"),
        ({"acquire": {"download_parts": 10**9}}, "config key acquire.download_parts"),
        ({"acquire": {"url_map": {"http://x/": ""}}}, "config key acquire.url_map.http://x/"),
        ({"laion": {"dir": ""}}, "config key laion.dir"),
        (
            {"train": {"spaces": {"s": {"hyperparameters": {"warmup_steps": {"grid": [1, 2.5]}}}}}},
            # the schema's domain of the hyperparameter (x-values) names the value's place
            "config key train.spaces.s.hyperparameters.warmup_steps.grid.1: 2.5 is not of type",
        ),
        (
            {"train": {"spaces": {"s": {"hyperparameters": {"lr": {"value": "0.1"}}}}}},
            "config key train.spaces.s.hyperparameters.lr.value: '0.1' is not of type 'number'",
        ),
    ],
)
def test_named_cases_are_refused_naming_the_key(base, overlay, key):
    refusal = _check(_merged(base, overlay))
    assert refusal is not None and key in refusal, refusal


def test_an_experiment_listed_twice_is_refused(base):
    config = copy.deepcopy(base)
    exp = dict(config["train"]["experiments"][0])
    config["train"]["spaces"]["other"] = {}
    config["train"]["experiments"].append({**exp, "space": "other"})
    refusal = _check(config)
    assert refusal is not None and "is listed twice" in refusal
    assert f"train.experiments.{len(config['train']['experiments']) - 1}" in refusal
