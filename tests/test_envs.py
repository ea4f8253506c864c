"""Conda envs: every rule names one, every env pins exact versions, each rule's imports are in it.

A rule's imports are found statically: the rule's shell calls `imagenot <subcommand>`; the stage
package that registers the subcommand is imported in full (every import of every file, following
`imagenot.*` imports), and the `imagenot` command line itself (cli.py and the module-level imports
of every stage's cli module, which it loads at start-up). Third-party import names are mapped to
distributions with the metadata of the installed .venv (the tested environment); the env file
must pin each of them, and every dependency of a pinned distribution too (a closed set: pip then
installs exactly what the .venv has).

`python tests/test_envs.py --write` regenerates envs/*.yaml from this analysis and
envs/requirements.lock.

CUDA variants (imagenot.core.conda_envs): each GPU env has a CUDA 12 variant, envs/<env>-cu12.yaml,
the same imports pinned from requirements-cu12.lock: requirements.lock with the newest torch and
torchvision whose PyPI wheels use CUDA 12 (CUDA12_TORCH) and what they pull in. That lock, and the
requirements (wheel METADATA) of its packages the .venv does not hold at its version
(requirements-cu12.metadata.json), are made with the package registry's resolver by
`python tests/test_envs.py --lock-cuda12` (network); `--write` then needs no network.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import importlib.metadata as md
import re
import sys
from functools import cache
from pathlib import Path

import pytest
import snakemake_rules
import yaml
from conftest import INDEX, registry_reachable
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagenot.core.conda_envs import CUDA_VARIANTS, GPU_ENVS, env_name

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "workflow" / "imagenot"
ENVS = REPO / "envs"
BASE_ENVS = ("curate", "acquire", "train", "analyse")
# every env file: the base envs (CUDA 13 where they hold torch) and the other CUDA variants of
# the GPU envs (imagenot.core.conda_envs)
ENV_NAMES = BASE_ENVS + tuple(
    env_name(env, cuda) for cuda in CUDA_VARIANTS if CUDA_VARIANTS[cuda].suffix for env in GPU_ENVS
)
PYTHON = "3.11.7"
# The torch of the CUDA 12 variant: the newest torch/torchvision pair whose PyPI wheels require
# the nvidia-*-cu12 runtime (torch 2.10 is built with CUDA 12.8; from torch 2.11 on, PyPI's
# default wheels require CUDA 13: cuda-toolkit 13, nvidia-cudnn-cu13). Input of --lock-cuda12.
CUDA12_TORCH = ("torch==2.10.0", "torchvision==0.25.0")
# Distributions a CUDA variant installs in place of the .venv's CPU build of the same import:
# FAISS for CUDA 12 (the audit's search on the GPU; `faiss`, as faiss-cpu). Input of
# --lock-cuda12 beside CUDA12_TORCH.
CUDA_DISTS = {"12": {"faiss-cpu": "faiss-gpu-cu12==1.14.1.post1"}}
# Packages of requirements.lock that belong to torch's CUDA build: replaced in the CUDA 12 lock
# by whatever the CUDA 12 torch requires.
CUDA_BUILD = re.compile(r"torch|torchvision|triton|nvidia-.*|cuda-.*|faiss-.*")


# the CUDA variant of the base env files (no suffix), pinned by requirements.lock
BASE_CUDA = next(cuda for cuda, variant in CUDA_VARIANTS.items() if not variant.suffix)


def env_cuda(env: str) -> tuple[str, str]:
    """(the base env, the CUDA major version whose lock pins it) of an env file's stem."""
    for cuda, variant in CUDA_VARIANTS.items():
        if variant.suffix and env.endswith(variant.suffix):
            return env.removesuffix(variant.suffix), cuda
    return env, BASE_CUDA


def package_version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


# ---- rules ---------------------------------------------------------------------------------------
# The configs under which each rule's conda env is read: the demo config (with the scale world, so
# that every rule is defined), the paper's, and the demo in each CUDA variant (resources.cuda).
ENV_CONFIGS = [
    ((snakemake_rules.DEMO, snakemake_rules.SCALE), None),
    ((snakemake_rules.PAPER,), None),
    *(
        ((snakemake_rules.DEMO, snakemake_rules.SCALE), {"resources": {"cuda": c}})
        for c in CUDA_VARIANTS
    ),
]


def rule_envs(name: str) -> list[str]:
    """The env files (relative to rules/) that rule ``name``'s ``conda:`` gives, as Snakemake holds
    the rule under each of :data:`ENV_CONFIGS` (a GPU env in every CUDA variant, a plan's choice
    for the demo and the paper)."""
    envs = set()
    for configs, overlay in ENV_CONFIGS:
        rule = snakemake_rules.rules(*configs, overlay=overlay).get(name)
        if rule is not None and rule.conda_env:
            envs.add(rule.conda_env)
    return sorted(envs)


def rule_subcommands(rule) -> set[str]:
    """The commands rule object ``rule``'s shell line runs (``imagenot NAME``; a declared step's
    line is its declaration's, :mod:`imagenot.core.steps`)."""
    return set(re.findall(r"\bimagenot ([a-z][a-z0-9-]*)", rule.shellcmd or ""))


# ---- imports -------------------------------------------------------------------------------------
def _module_file(module: str) -> Path | None:
    rel = Path(*module.split("."))
    for cand in (
        REPO / "workflow" / rel.with_suffix(".py"),
        REPO / "workflow" / rel / "__init__.py",
    ):
        if cand.is_file():
            return cand
    return None


def _imports(path: Path, module_level_only: bool) -> set[str]:
    """Absolute module names imported by a file (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(REPO / "workflow").with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    nodes = []
    if module_level_only:
        stack = list(tree.body)
        while stack:  # top-level statements, including inside top-level if/try blocks
            node = stack.pop()
            if isinstance(node, ast.Import | ast.ImportFrom):
                nodes.append(node)
            elif isinstance(node, ast.If | ast.Try):
                stack += node.body + node.orelse + getattr(node, "finalbody", [])
                stack += [s for h in getattr(node, "handlers", []) for s in h.body]
    else:
        nodes = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif node.level:  # relative
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            mod = f"{base}.{node.module}" if node.module else base
            names.add(mod)
            names |= {f"{mod}.{a.name}" for a in node.names}
        else:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def external_imports(roots_full: list[Path], roots_top: list[Path]) -> set[str]:
    """Top-level third-party names imported from `roots_full` (every import, followed through
    imagenot modules) and `roots_top` (module-level imports only)."""
    seen: dict[Path, bool] = {}
    todo = [(p, True) for p in roots_full] + [(p, False) for p in roots_top]
    external: set[str] = set()
    while todo:
        path, full = todo.pop()
        if seen.get(path) is True or (path in seen and not full):
            continue
        seen[path] = full
        for name in _imports(path, module_level_only=not full):
            top = name.split(".")[0]
            if top == "imagenot":
                f = _module_file(name)
                if f is not None:
                    todo.append((f, full))
            elif top not in sys.stdlib_module_names and top != "__future__":
                external.add(top)
    return external


@cache
@cache
def subcommand_packages() -> dict[str, list[Path]]:
    """Subcommand -> the files that implement it: its handler's stage package, or the handler's
    module for a CLI module of a shared room (core, plan, run). Read from the real parser (``imagenot.cli.build_parser``),
    however a stage registers its commands."""
    from imagenot.cli import build_parser

    parser = build_parser()
    choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for sub, sub_parser in choices.choices.items():
        func = sub_parser.get_default("func")
        if isinstance(func, functools.partial):  # a declared step: its handler's module
            name = func.args[0].run.partition(":")[0]
        else:
            name = func.__module__
        module = Path(importlib.import_module(name).__file__)
        shared = module.parent == PKG or module.parent.name in ("core", "plan", "run")
        out[sub] = [module] if shared else sorted(module.parent.rglob("*.py"))
    return out


def cli_startup_files() -> list[Path]:
    return [
        PKG / "__main__.py",
        PKG / "cli.py",
        *sorted(PKG.glob("*/cli.py")),
    ]


# ---- distributions -------------------------------------------------------------------------------
@cache
def import_to_dists() -> dict[str, list[str]]:
    return {k: [canonicalize_name(d) for d in v] for k, v in md.packages_distributions().items()}


def dists_for_imports(names: set[str]) -> set[str]:
    mapping = import_to_dists()
    missing = sorted(n for n in names if n not in mapping)
    assert not missing, f"imports with no installed distribution in the .venv: {missing}"
    return {d for n in names for d in mapping[n] if d != "imagenot"}


def variant_dists(dists: set[str], cuda: str) -> set[str]:
    """``dists`` as CUDA variant ``cuda`` installs them (CUDA_DISTS: its build of a package the
    .venv holds for the CPU)."""
    swap = {
        d: canonicalize_name(spec.split("==")[0]) for d, spec in CUDA_DISTS.get(cuda, {}).items()
    }
    return {swap.get(d, d) for d in dists}


def requirement_closure(dists: set[str], cuda: str) -> set[str]:
    """`dists` and, recursively, their marker-applicable requirements, following extras: torch
    requires `cuda-toolkit[cudart,cufft,...]`, whose extras pull the CUDA runtime libraries; an
    env that left them out would let pip pick their versions when the env is created. The
    requirements are those of the lock of CUDA variant `cuda`: the .venv's installed metadata,
    except for the packages that lock holds at another version (lock_metadata)."""
    metadata = lock_metadata(cuda)
    env = default_environment()
    todo: list[tuple[str, frozenset[str]]] = [(d, frozenset()) for d in dists]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        d, extras = todo.pop()
        if (d, extras) in done:
            continue
        done.add((d, extras))
        for spec in metadata[d] if d in metadata else md.requires(d) or []:
            req = Requirement(spec)
            if req.marker and not any(
                req.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras)
            ):
                continue
            todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return {d for d, _ in done}


def read_lock(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


@cache
def lock_versions(cuda: str) -> dict[str, str]:
    """The pins of CUDA variant `cuda`: requirements.lock (the tested .venv) or the variant's."""
    pins = read_lock(REPO / CUDA_VARIANTS[cuda].lock)
    # `pip freeze` leaves out setuptools: pin the version installed in the .venv
    pins.setdefault("setuptools", md.version("setuptools"))
    return pins


def metadata_file(cuda: str) -> Path:
    return REPO / CUDA_VARIANTS[cuda].lock.replace(".lock", ".metadata.json")


@cache
def lock_metadata(cuda: str) -> dict[str, list[str]]:
    """Requirements (Requires-Dist of the registry's wheels) of the packages a variant's lock
    pins at another version than the .venv: the .venv cannot tell them. Empty for the .venv's own
    lock."""
    import json

    if cuda == BASE_CUDA:
        return {}
    return json.loads(metadata_file(cuda).read_text())["requires"]


# ---- env files -----------------------------------------------------------------------------------
def env_rules() -> dict[str, list[str]]:
    """env name -> rules that use it."""
    out: dict[str, list[str]] = {}
    for name in snakemake_rules.rules():
        for env in rule_envs(name):
            out.setdefault(Path(env).stem, []).append(name)
    return out


def rule_imports(rule) -> set[str]:
    files = [f for sub in rule_subcommands(rule) for f in subcommand_packages().get(sub, [])]
    return external_imports(files, cli_startup_files())


def needed_dists(env: str) -> set[str]:
    rules = snakemake_rules.rules()
    names = set()
    for rule in env_rules().get(env, []):
        names |= rule_imports(rules[rule])
    names |= external_imports([], cli_startup_files())
    return dists_for_imports(names)


def parse_env(path: Path) -> tuple[list[str], dict[str, str]]:
    """(conda dependency strings, {canonical pip name: pinned version})."""
    spec = yaml.safe_load(path.read_text())
    conda, pip = [], {}
    for dep in spec["dependencies"]:
        if isinstance(dep, dict):
            for line in dep.get("pip", []):
                name, _, version = line.partition("==")
                pip[canonicalize_name(name)] = version
        else:
            conda.append(dep)
    return conda, pip


def write_envs() -> None:
    pip_version = md.version("pip")
    for env in ENV_NAMES:
        cuda = env_cuda(env)[1]
        lock_file = CUDA_VARIANTS[cuda].lock
        lock = lock_versions(cuda)
        dists = sorted(requirement_closure(variant_dists(needed_dists(env), cuda), cuda))
        unlocked = [d for d in dists if d not in lock]
        assert not unlocked, f"{env}: not in {lock_file}: {unlocked}"
        rules = ", ".join(sorted(env_rules().get(env, []))) or "(none yet)"
        source = (
            [
                "# imports of the rules that use it and the exact versions of requirements.lock (the",
                "# tested .venv). Closed set: every dependency of a listed package is listed.",
            ]
            if lock_file == CUDA_VARIANTS["13"].lock
            else [
                f"# imports of the rules that use it and the exact versions of {Path(lock_file).name}",
                f"# (the tested .venv's, with torch for CUDA {cuda}: `--lock-cuda{cuda}`). Closed set:",
                "# every dependency of a listed package is listed.",
            ]
        )
        lines = [
            f"# imagenot env '{env}': generated by `python tests/test_envs.py --write` from the",
            *source,
            "# No imagenot package: every job runs the package of the checkout it was launched",
            "# from (`python -m imagenot` with the checkout first on the path: imagenot.core.checkout).",
            f"# Rules: {rules}",
            "channels:",
            "  - conda-forge",
            "  - nodefaults",
            "dependencies:",
            f"  - python={PYTHON}",
            f"  - pip={pip_version}",
            "  - pip:",
            *[f"      - {d}=={lock[d]}" for d in dists],
        ]
        (ENVS / f"{env}.yaml").write_text("\n".join(lines) + "\n")


# ---- tests ---------------------------------------------------------------------------------------
def test_every_rule_names_an_env_file():
    rules = snakemake_rules.rules()
    assert "prepare_wordnet" in rules and "scale_world" in rules
    # the exemption holds for the rules that run nothing, not for a rule that forgot its env
    runs = snakemake_rules.runs_something
    assert not runs(rules["all"]) and not runs(rules["preflight"])
    assert runs(rules["preflight_site"])
    for name, rule in rules.items():
        if not runs(rule):
            continue
        envs = rule_envs(name)
        assert envs, f"rule {name} has no conda: directive"
        for env in envs:
            assert (REPO / "rules" / env).resolve().parent == ENVS, (name, env)
            assert Path(env).stem in ENV_NAMES, (name, env)
            assert (REPO / "rules" / env).is_file(), (name, env)


def test_every_rule_subcommand_is_known():
    known = subcommand_packages()
    for name, rule in snakemake_rules.rules().items():
        for sub in rule_subcommands(rule):
            assert sub in known, f"rule {name}: `imagenot {sub}` is registered by no cli module"


@pytest.mark.parametrize("env", ENV_NAMES)
def test_env_pins_exact_versions(env):
    conda, pip = parse_env(ENVS / f"{env}.yaml")
    assert f"python={PYTHON}" in conda
    for dep in conda:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==?[0-9][A-Za-z0-9_.]*", dep), f"unpinned: {dep}"
    cuda = env_cuda(env)[1]
    lock = lock_versions(cuda)
    for name, version in pip.items():
        assert version, f"{env}: {name} not pinned with =="
        assert lock.get(name) == version, (
            f"{env}: {name}=={version} differs from {CUDA_VARIANTS[cuda].lock}"
        )


@pytest.mark.parametrize("env", ENV_NAMES)
def test_env_is_closed_under_dependencies(env):
    _, pip = parse_env(ENVS / f"{env}.yaml")
    missing = requirement_closure(set(pip), env_cuda(env)[1]) - set(pip)
    assert not missing, f"{env}: dependencies not pinned: {sorted(missing)}"


def test_each_rules_imports_are_in_its_env():
    rule_objects = snakemake_rules.rules()
    for env, rules in env_rules().items():
        _, pip = parse_env(ENVS / f"{env}.yaml")
        for rule in rules:
            wanted = variant_dists(
                dists_for_imports(rule_imports(rule_objects[rule])), env_cuda(env)[1]
            )
            missing = wanted - set(pip)
            assert not missing, f"rule {rule} imports {sorted(missing)}, not in envs/{env}.yaml"


def test_import_analysis_sees_heavy_imports():
    # guards the static analysis itself: curate-embed reaches sentence_transformers / torch
    files = subcommand_packages()["curate-embed"]
    assert {"torch", "pyarrow"} <= external_imports(files, [])


def test_no_env_installs_the_package():
    """The envs hold the dependencies only: a copy of the package installed into an env would be
    the code its jobs ran for as long as the env exists, whatever the checkout says since. Every
    job runs the checkout's package instead (tests/test_module.py runs an edited one)."""
    assert not list(ENVS.glob("*post-deploy*"))
    for env in ENV_NAMES:
        text = (ENVS / f"{env}.yaml").read_text()
        assert "imagenot" not in parse_env(ENVS / f"{env}.yaml")[1], env
        assert "python -m imagenot" in text, env  # the header says where the code comes from


def test_cuda_variant_locks_differ_from_requirements_lock_only_in_the_cuda_build():
    """A variant's lock is requirements.lock with another CUDA build of torch: every other pin is
    the same (rerun --lock-cuda12 after changing requirements.lock), each package it holds at
    another version has its requirements recorded, and its envs hold that CUDA's runtime only."""
    base = lock_versions(BASE_CUDA)
    for cuda, variant in CUDA_VARIANTS.items():
        if cuda == BASE_CUDA:
            continue
        lock, metadata = lock_versions(cuda), lock_metadata(cuda)
        for name, version in base.items():
            if not CUDA_BUILD.fullmatch(name):
                assert lock.get(name) == version, (
                    f"{variant.lock}: {name} is not {version} as in requirements.lock: "
                    f"python tests/test_envs.py --lock-cuda{cuda}"
                )
        changed = {name for name, version in lock.items() if base.get(name) != version}
        assert changed - {"setuptools"} <= set(metadata), sorted(changed - set(metadata))
        torch_requires = {canonicalize_name(Requirement(r).name) for r in metadata["torch"]}
        assert f"nvidia-cuda-runtime-cu{cuda}" in torch_requires
        for env in GPU_ENVS:
            pins = parse_env(ENVS / f"{env_name(env, cuda)}.yaml")[1]
            assert f"nvidia-cuda-runtime-cu{cuda}" in pins
            other = [n for n in pins if n == "cuda-toolkit" or re.fullmatch(r"nvidia-[a-z-]+", n)]
            other += [n for n in pins if re.search(r"-cu\d+$", n) and not n.endswith(f"cu{cuda}")]
            assert not other, f"{env_name(env, cuda)}: another CUDA's packages {other}"


PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet"]


def test_the_built_package_holds_the_schemas(tmp_path):
    """The envs get a wheel of the checkout (not the checkout itself): every `imagenot` command
    reads workflow/schemas at start-up (imagenot.core.config.SCHEMA_DIR, beside the package), so the
    wheel must carry them there."""
    import shutil
    import subprocess
    import zipfile

    from imagenot.core.config import SCHEMA_DIR

    # a clean copy: setuptools would reuse an earlier build/ of the checkout
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(REPO / "workflow", src / "workflow", ignore=skip)
    built = subprocess.run(
        [*PIP_WHEEL, "--wheel-dir", str(tmp_path), str(src)],
        env=_pip_env(),
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob(f"imagenot-{package_version()}-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "imagenot/core/config.py" in names
    relative = SCHEMA_DIR.relative_to((PKG / "config.py").parents[1])  # as config.py finds it
    schemas = sorted(p.name for p in SCHEMA_DIR.glob("*.yaml"))
    assert schemas
    missing = [s for s in schemas if f"{relative.as_posix()}/{s}" not in names]
    assert not missing, f"the wheel lacks {missing}"


# ---- resolution against the package registry ---------------------------------------------------
# The target: Linux x86_64 with glibc >= 2.17 (pip does not widen a given --platform to older
# manylinux tags: list them), CPython 3.11, the env files' Python.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)] + [
    "manylinux2014_x86_64"
]


def _pip_env() -> dict[str, str]:
    """This process's environment without pip settings: no site config, find-links or
    constraints of this machine."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def resolve_command(requirements: Path, report: Path) -> list[str]:
    """pip's resolver, for the env files' platform and Python, binary wheels only, against the
    public index alone (no site config, find-links or constraints of this machine)."""
    python = ".".join(PYTHON.split(".")[:2])
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    cmd += ["--only-binary", ":all:", "--python-version", python, "--implementation", "cp"]
    for abi in (f"cp{python.replace('.', '')}", "abi3", "none"):
        cmd += ["--abi", abi]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    return [*cmd, "--index-url", INDEX, "--report", str(report), "-r", str(requirements)]


def resolve(requirements: list[str], tmp: Path) -> dict[str, dict]:
    """pip's resolution of `requirements` on the registry for the env files' platform: canonical
    name -> the wheel's metadata (version, requires_dist, ...)."""
    import json
    import subprocess

    path, report = tmp / "requirements.txt", tmp / "report.json"
    path.write_text("".join(f"{line}\n" for line in requirements))
    run = subprocess.run(
        resolve_command(path, report), env=_pip_env(), capture_output=True, text=True
    )
    assert run.returncode == 0, f"does not resolve on {INDEX}:\n{run.stderr[-3000:]}"
    return {
        canonicalize_name(item["metadata"]["name"]): item["metadata"]
        for item in json.loads(report.read_text())["install"]
    }


def resolve_versions(requirements: list[str], tmp: Path) -> dict[str, str]:
    """uv's resolution of ``requirements`` on the registry for the env files' platform and
    Python, binary wheels only (the question :func:`resolve` asks pip, in about 2 s instead of
    about a minute: uv fetches the wheels' metadata in parallel): canonical name -> version.
    ``x86_64-manylinux_2_28``: a wheel for glibc 2.28 or older, the tags :data:`PLATFORMS`
    lists for pip."""
    import os
    import subprocess

    path = tmp / "requirements.txt"
    path.write_text("".join(f"{line}\n" for line in requirements))
    python = ".".join(PYTHON.split(".")[:2])
    uv = Path(sys.executable).with_name("uv")  # make setup installs it beside the interpreter
    cmd = [str(uv), "pip", "compile", str(path), "--python-version", python]
    cmd += ["--python-platform", "x86_64-manylinux_2_28", "--only-binary", ":all:"]
    cmd += ["--index-url", INDEX, "--no-config", "--no-header", "--no-annotate", "--quiet"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert run.returncode == 0, f"does not resolve on {INDEX}:\n{run.stderr[-3000:]}"
    pinned = [line.split("==", 1) for line in run.stdout.splitlines() if "==" in line]
    return {canonicalize_name(name.strip()): version.strip() for name, version in pinned}


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("cuda", sorted(CUDA_VARIANTS))
def test_env_files_resolve_on_the_registry(tmp_path, cuda):
    """Every pin of every env file installs on Linux x86_64 with the env's Python, from the
    public index: an unsatisfiable pin (a version never published, a wheel missing for the
    platform) fails here, not on a user's cluster. The envs of one CUDA variant take their pins
    from one lock, so their union is one consistent set: one resolver call per variant resolves
    them all, and it must install exactly the pinned set (nothing unpinned pulled in)."""
    if not registry_reachable():
        pytest.skip(f"the package registry {INDEX} is unreachable")
    pins: dict[str, str] = {}
    envs = [env for env in ENV_NAMES if env_cuda(env)[1] == cuda]
    assert envs
    for env in envs:
        pins.update(parse_env(ENVS / f"{env}.yaml")[1])
    installed = resolve_versions([f"{n}=={v}" for n, v in pins.items()], tmp_path)
    pins = {canonicalize_name(n): v for n, v in pins.items()}
    assert installed == pins, {
        "envs": envs,
        "unpinned": sorted(set(installed) - set(pins)),
        "changed": {k: (v, installed.get(k)) for k, v in pins.items() if installed.get(k) != v},
    }


@pytest.mark.network
def test_the_resolver_fails_on_a_pin_never_published_and_names_what_a_pin_pulls_in(tmp_path):
    """The planted cases of the check above: a version PyPI never published does not resolve,
    and a pin whose dependencies are not pinned resolves to more than the pinned set."""
    if not registry_reachable():
        pytest.skip(f"the package registry {INDEX} is unreachable")
    with pytest.raises(AssertionError, match="does not resolve"):
        resolve_versions(["numpy==0.0.1"], tmp_path)
    resolved = resolve_versions(["requests==2.32.3"], tmp_path)
    assert resolved["requests"] == "2.32.3" and {"urllib3", "idna"} <= set(resolved)


def lock_cuda12(tmp: Path) -> None:
    """Write requirements-cu12.lock and its metadata: requirements.lock with its CUDA build of
    torch (CUDA_BUILD) replaced by CUDA12_TORCH and what the registry's resolver installs with it.
    Resolved: the pins of the CUDA 13 env files (requirements.lock as a whole has packages with no
    wheel on PyPI, e.g. snakemake's connection-pool, which no env needs) without their CUDA build,
    plus CUDA12_TORCH; every other pin is kept (pip fails if one does not fit), and the lock's
    packages that no env holds keep their versions (none of them depends on torch's build)."""
    import json

    cuda = "12"
    base = read_lock(REPO / CUDA_VARIANTS["13"].lock)
    pins = {}
    for env in ENV_NAMES:
        if env_cuda(env)[1] != cuda:
            pins.update(parse_env(ENVS / f"{env}.yaml")[1])
    kept = [f"{n}=={v}" for n, v in pins.items() if not CUDA_BUILD.fullmatch(n)]
    resolved = resolve([*kept, *CUDA12_TORCH, *CUDA_DISTS[cuda].values()], tmp)
    for name, meta in resolved.items():
        for spec in meta.get("requires_dist", []):
            req = canonicalize_name(Requirement(spec).name)
            if req == "cuda-toolkit" or (req.startswith("nvidia-") and not req.endswith("-cu12")):
                raise SystemExit(f"{name} {meta['version']} requires a CUDA other than 12: {spec}")
    lock_file = REPO / CUDA_VARIANTS[cuda].lock
    header = [
        "# requirements.lock for the CUDA 12 variant of the GPU envs (imagenot.core.conda_envs):",
        f"# the same pins, with {' '.join(CUDA12_TORCH)} from PyPI (built with CUDA 12) and the",
        "# versions pip's resolver installs with them. Generated by",
        "# `python tests/test_envs.py --lock-cuda12` (network); do not edit.",
    ]
    lock = {n: v for n, v in base.items() if not CUDA_BUILD.fullmatch(n)}
    lock |= {name: meta["version"] for name, meta in resolved.items()}
    body = [f"{name}=={version}" for name, version in sorted(lock.items())]
    lock_file.write_text("\n".join(header + body) + "\n")
    changed = {
        name: meta.get("requires_dist", [])
        for name, meta in sorted(resolved.items())
        if base.get(name) != meta["version"]
    }
    metadata_file(cuda).write_text(
        json.dumps(
            {
                "about": "Requires-Dist of the packages requirements-cu12.lock pins at another "
                "version than requirements.lock (from the registry; --lock-cuda12)",
                "requires": changed,
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_envs()
    elif sys.argv[1:] == ["--lock-cuda12"]:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            lock_cuda12(Path(tmp))
    else:
        sys.exit("usage: python tests/test_envs.py --write | --lock-cuda12")
