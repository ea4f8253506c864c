"""The package as others install and cite it: the toolbox (``imagenot rankings``, ``ci``,
``validate-config`` and the command line itself) runs with the base dependencies of
pyproject.toml alone, without the workflow's extra (torch, snakemake, ...); every package it
imports is declared there; every declared package is imported; and the version, licence and
citation say the same thing in every file that states them."""

from __future__ import annotations

import ast
import functools
import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import INDEX, registry_reachable
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "workflow" / "imagenot"
TABLE = REPO / "resources" / "published" / "ssl_resnet50_imagenet_variants.csv"
CLASS_LIST = REPO / "resources" / "class_lists" / "imagenot_classes_2024-04-02.txt"
TWO_DATASETS = ("dataset", "imagenet-val", "imagenet-v2")  # the header's column, then two


def pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def declared(extra: str | None = None) -> set[str]:
    """Canonical names of the base dependencies, or of the optional ``extra``."""
    project = pyproject()["project"]
    reqs = project["optional-dependencies"][extra] if extra else project["dependencies"]
    return {canonicalize_name(Requirement(r).name) for r in reqs}


def closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, transitively, as installed here (their
    own extras left out: what ``pip install`` of ``names`` brings)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue  # not installed here: nothing of it can be imported either
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


@functools.cache
def top_level_names() -> dict[str, set[str]]:
    """Top-level import name -> the canonical names of the distributions that provide it."""
    return {
        top: {canonicalize_name(d) for d in dists}
        for top, dists in md.packages_distributions().items()
    }


def refused_names(allowed: set[str]) -> list[str]:
    """The installed top-level import names that no distribution of ``allowed`` provides: what a
    fresh environment holding only ``allowed`` could not import."""
    stdlib = set(sys.stdlib_module_names)
    return sorted(
        top for top, dists in top_level_names().items() if top not in stdlib and not dists & allowed
    )


def base_environment() -> set[str]:
    """What ``pip install .`` brings: this package and its base dependencies' closure."""
    return closure(declared()) | {"imagenot"}


# Runs the command line in-process for each argv of argv[3], with every top-level name of argv[2]
# made unimportable (as in an environment that lacks it); writes to argv[1] each command's exit
# status and output, the third-party modules loaded after start-up, those of them that imagenot's
# own loaded modules import by name, and which of argv[4]'s names failed to import (those loaded
# before the refusal, by site, aside). Run from the repository root.
RUNNER = r"""
import ast, contextlib, importlib, io, json, sys

report_path, refused_path, commands_path, probe_path = sys.argv[1:5]
preloaded = {m.partition(".")[0] for m in sys.modules}  # by site, before anything is refused
refused = set(json.load(open(refused_path))) - preloaded


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in refused:
            raise ModuleNotFoundError(f"No module named {name!r} (refused)", name=name)
        return None


sys.meta_path.insert(0, Refuse())
from imagenot.cli import main

runs = []
for argv in json.load(open(commands_path)):
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:
        code = exc.code
    except BaseException as exc:
        code = f"{type(exc).__name__}: {exc}"
    out, err = out.getvalue()[-2000:], err.getvalue()[-2000:]
    runs.append({"argv": argv, "code": code, "stdout": out, "stderr": err})

own = {"imagenot", "schemas"}
loaded = {m.partition(".")[0] for m in sys.modules} - set(sys.stdlib_module_names)
loaded -= own | preloaded
imported_by_package = set()
for name, module in list(sys.modules.items()):
    path = getattr(module, "__file__", None)
    if name.partition(".")[0] != "imagenot" or not path or not path.endswith(".py"):
        continue
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.Import):
            imported_by_package |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported_by_package.add(node.module.partition(".")[0])
failed = []
for name in json.load(open(probe_path)):
    try:
        importlib.import_module(name)
    except ImportError:
        failed.append(name)
json.dump(
    {
        "runs": runs,
        "loaded": sorted(loaded),
        "imported_by_package": sorted(imported_by_package & loaded),
        "probe_failed": failed,
        "preloaded": sorted(preloaded),
    },
    open(report_path, "w"),
)
"""


def run_toolbox(tmp: Path, commands: list[list[str]], allowed: set[str], probe=()) -> dict:
    """Run ``commands`` of the command line in one fresh interpreter where only the
    distributions ``allowed`` (and the standard library) can be imported; the runner's report."""
    files = {}
    for name, value in (("refused", refused_names(allowed)), ("commands", commands)):
        files[name] = tmp / f"{name}.json"
        files[name].write_text(json.dumps(value))
    (tmp / "probe.json").write_text(json.dumps(list(probe)))
    report = tmp / "report.json"
    args = [report, files["refused"], files["commands"], tmp / "probe.json"]
    run = subprocess.run(
        [sys.executable, "-c", RUNNER, *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(report.read_text())


def workflow_only_names() -> list[str]:
    """The top-level import names of the extra ``workflow``'s distributions (and what they
    bring) that the base dependencies do not provide."""
    base = base_environment()
    extra = closure(declared("workflow")) - base
    tops = top_level_names().items()
    stdlib = set(sys.stdlib_module_names)  # a backport's name (dataclasses) stays the stdlib's
    return sorted(
        top for top, dists in tops if dists & extra and not dists & base and top not in stdlib
    )


def toolbox_commands(tmp: Path, report: bool = True) -> list[list[str]]:
    """The toolbox's commands on real inputs: the published table's reference and one more
    dataset (every statistic, and with ``report`` every figure, at a fraction of the whole
    table's drawing time), the demo config, and the demo config with the authors' class list."""
    lines = TABLE.read_text(encoding="utf-8").splitlines(keepends=True)
    table = tmp / "two_datasets.csv"
    table.write_text("".join(line for line in lines if line.split(",")[1] in TWO_DATASETS))
    overlay = tmp / "class_list.yaml"  # the check of a class list reads WordNet's graph tools
    overlay.write_text(
        yaml.safe_dump({"diagnostics": {"class_lists": {"authors": str(CLASS_LIST)}}})
    )
    rankings = [
        "rankings",
        str(table),
        "--reference",
        "imagenet-val",
        "--bootstrap-over",
        "models",
        "--bootstrap-reps",
        "200",
        "--min-reference-accuracy",
        "70",
        "--out",
        str(tmp / "rankings.json"),
    ]
    if report:
        rankings += ["--report", str(tmp / "report"), "--dpi", "50"]
    return [
        ["--version"],
        ["--help"],
        rankings,
        ["ci", "--accuracy", "75.1", "--n", "10000"],
        ["validate-config", "config/config.yaml"],
        ["validate-config", "config/config.yaml", str(overlay)],
    ]  # fmt: skip


@pytest.fixture(scope="module")
def toolbox_run(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("toolbox")
    probe = workflow_only_names()
    return tmp, run_toolbox(tmp, toolbox_commands(tmp), base_environment(), probe)


def test_the_toolbox_runs_without_the_workflows_packages(toolbox_run):
    tmp, report = toolbox_run
    failed = [r for r in report["runs"] if r["code"] != 0]
    assert not failed, failed
    version = report["runs"][0]["stdout"].strip()
    assert version == f"imagenot {pyproject()['project']['version']}"
    assert len(list((tmp / "report").iterdir())) == 14  # every figure and table of --report
    assert len(json.loads((tmp / "rankings.json").read_text())["datasets"]) == 2
    # the refusal held: every workflow-only package failed to import, none was loaded
    probe = workflow_only_names()
    assert {"torch", "torchvision", "snakemake", "transformers", "img2dataset", "timm"} <= set(
        probe
    )
    assert report["probe_failed"] == [n for n in probe if n not in report["preloaded"]]
    assert not set(report["loaded"]) & set(probe)


def test_a_missing_base_dependency_stops_the_toolbox(tmp_path):
    """The planted case: without statsmodels (and what only it brings), rankings fails on its
    import while the command line itself still starts."""
    allowed = closure(declared() - {"statsmodels"}) | {"imagenot"}
    assert "statsmodels" not in allowed
    report = run_toolbox(tmp_path, [["--version"], toolbox_commands(tmp_path)[2]], allowed)
    version, rankings = report["runs"]
    assert version["code"] == 0
    assert rankings["code"] == 2  # one line naming the package and what to install
    (line,) = rankings["stderr"].strip().splitlines()
    assert line.startswith("imagenot rankings: error: the Python package 'statsmodels'")
    assert "pip install imagenot" in line


def test_a_workflow_command_without_the_workflows_packages_says_what_to_install(tmp_path):
    """A step of the workflow in the toolbox's install (no torch) ends in one line naming the
    missing package and the extra, not a traceback; under --debug the traceback."""
    out = ["--json", str(tmp_path / "p.json"), "--md", str(tmp_path / "p.md")]
    commands = [
        ["preflight", "--help"],
        ["preflight", "--config", "config/config.yaml", "--device", "cpu", *out],
        ["--debug", "preflight", "--config", "config/config.yaml", "--device", "cpu", *out],
    ]
    helped, refused, debug = run_toolbox(tmp_path, commands, base_environment())["runs"]
    assert helped["code"] == 0
    assert refused["code"] == 2, refused
    (line,) = refused["stderr"].strip().splitlines()
    assert line.startswith("imagenot preflight: error: the Python package 'torch'"), line
    assert 'pip install "imagenot[workflow]"' in line
    assert str(debug["code"]).startswith("ModuleNotFoundError"), debug


def undeclared_imports(imported: list[str], dependencies: set[str]) -> list[str]:
    """The names of ``imported`` that no distribution of ``dependencies`` provides."""
    tops = top_level_names()
    return [name for name in imported if not tops.get(name, set()) & dependencies]


def test_every_package_the_toolbox_imports_is_a_base_dependency(toolbox_run):
    """Declared itself, not only brought by another dependency (pandas, which statsmodels also
    requires): what the toolbox's own code imports while it runs."""
    _, report = toolbox_run
    imported = report["imported_by_package"]
    assert {"numpy", "pandas", "scipy", "statsmodels", "matplotlib"} <= set(imported)
    assert undeclared_imports(imported, declared()) == []
    # planted: the same imports against the base dependencies without pandas
    assert undeclared_imports(imported, declared() - {"pandas"}) == ["pandas"]


# an import statement of a Snakefile or rule file (Snakemake's Python dialect: no ast for it)
SMK_IMPORT = re.compile(r"^\s*(?:import|from) (\w+)", re.M)


def never_imported(dependencies: set[str]) -> list[str]:
    """The distributions of ``dependencies`` none of whose top-level names the workflow's code
    imports anywhere: the package (at module level or inside a function), the Snakefile and the
    rule files."""
    imported = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.partition(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.partition(".")[0])
    for path in [REPO / "Snakefile", *(REPO / "rules").glob("*.smk")]:
        imported |= set(SMK_IMPORT.findall(path.read_text("utf-8")))
    provides: dict[str, set[str]] = {}
    for top, dists in top_level_names().items():
        for dist in dists:
            provides.setdefault(dist, set()).add(top)
    return sorted(d for d in dependencies if not provides.get(d, set()) & imported)


def package_imports() -> list[str]:
    """The third-party top-level names the package imports anywhere (module level or inside a
    function), the toolbox's stand-in torch left out."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        if "without_torch" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.partition(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.partition(".")[0])
    return sorted(names - set(sys.stdlib_module_names) - {"imagenot", "__future__"})


def test_every_imported_distribution_is_declared():
    """What ``pip install ".[workflow]"`` brings (the declared distributions and what they
    require) provides every name the package imports."""
    everything = closure(declared() | declared("workflow"))
    assert undeclared_imports(package_imports(), everything) == []
    # planted: the audit's search library left out of the extra
    without = closure(declared() | declared("workflow") - {"faiss-cpu"})
    assert undeclared_imports(package_imports(), without) == ["faiss"]


def test_every_declared_dependency_is_imported():
    everything = declared() | declared("workflow")
    assert never_imported(everything) == []
    assert never_imported(everything | {"pytest"}) == ["pytest"]  # planted: a tool, not a need


# ---- version, licence, citation ------------------------------------------------------------------
ENTRY = re.compile(r"^## (\d+\.\d+\.\d+) \((\d{4}-\d{2}-\d{2})", re.M)


def metadata_problems(project: dict, citation: dict, changelog: str, licence: str) -> list[str]:
    """Where pyproject.toml's ``project``, CITATION.cff, docs/changelog.md and LICENSE disagree
    on the version, its date, or the licence, or the citation lacks what CFF 1.2.0 requires."""
    problems = []
    version = project["version"]
    entries = ENTRY.findall(changelog)
    if not entries:
        problems.append("docs/changelog.md: no entry '## X.Y.Z (YYYY-MM-DD)'")
    elif entries[0][0] != version:
        problems.append(f"docs/changelog.md: newest entry {entries[0][0]}, package {version}")
    versions = [Version(v) for v, _ in entries]
    if versions != sorted(versions, reverse=True) or len(set(versions)) != len(versions):
        problems.append("docs/changelog.md: entries not newest first, one per version")
    for key in ("cff-version", "message", "title", "authors"):
        if key not in citation:
            problems.append(f"CITATION.cff: no key {key}")
    if citation.get("cff-version") != "1.2.0":
        problems.append(f"CITATION.cff: cff-version {citation.get('cff-version')}")
    if str(citation.get("version")) != version:
        problems.append(f"CITATION.cff: version {citation.get('version')}, package {version}")
    if entries and str(citation.get("date-released")) != entries[0][1]:
        problems.append(
            f"CITATION.cff: date-released {citation.get('date-released')}, "
            f"changelog {entries[0][1]}"
        )
    if citation.get("license") != project["license"]:
        problems.append(f"CITATION.cff: license {citation.get('license')}, {project['license']}")
    if project["license"] != "MIT" or not licence.startswith("MIT License\n"):
        problems.append(f"LICENSE is not the MIT text pyproject.toml names ({project['license']})")
    paper = citation.get("preferred-citation", {})
    if "2404.02112" not in str(paper.get("url")):
        problems.append("CITATION.cff: preferred-citation is not the ImageNot paper")
    return problems


def test_version_licence_and_citation_agree():
    project = pyproject()["project"]
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    changelog = (REPO / "docs" / "changelog.md").read_text(encoding="utf-8")
    licence = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert metadata_problems(project, citation, changelog, licence) == []
    authors = [a["family-names"] for a in citation["preferred-citation"]["authors"]]
    assert authors == ["Salaudeen", "Hardt"]
    # planted: each file disagreeing in turn
    assert metadata_problems({**project, "version": "9.9.9"}, citation, changelog, licence)[:2] == [
        f"docs/changelog.md: newest entry {project['version']}, package 9.9.9",
        f"CITATION.cff: version {citation['version']}, package 9.9.9",
    ]
    old = {**citation, "date-released": "2000-01-01"}
    assert metadata_problems(project, old, changelog, licence)[0].startswith(
        "CITATION.cff: date-released 2000-01-01"
    )
    swapped = changelog.replace("## 0.1.0", "## 9.0.0")
    assert "not newest first" in metadata_problems(project, citation, swapped, licence)[0]
    assert metadata_problems(project, citation, changelog, "Apache License\n")[0].startswith(
        "LICENSE is not"
    )


def test_the_version_is_read_from_pyproject():
    import imagenot

    assert imagenot.__version__ == pyproject()["project"]["version"]


def test_requires_python_and_classifiers_name_only_the_tested_python():
    """The Python the envs pin (envs/*.yaml, cut from the lock) and this test runs under is the
    one requires-python admits and the classifiers name; the next minor version is refused."""
    project = pyproject()["project"]
    spec = SpecifierSet(project["requires-python"])
    pins = set()
    for env in (REPO / "envs").glob("*.yaml"):
        pins |= set(re.findall(r"^\s*- python=(\d+\.\d+)\.\d+$", env.read_text(), re.M))
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert pins == {running}
    named = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if re.search(r"3\.\d+$", c)}
    assert named == pins
    assert f"{running}.0" in spec
    minor = int(running.split(".")[1])
    assert f"3.{minor + 1}.0" not in spec and f"3.{minor - 1}.0" not in spec
    assert not any(c.startswith("License ::") for c in project["classifiers"])


# ---- a fresh environment, as a user installs it -------------------------------------------------


@pytest.mark.network
def test_the_toolbox_installs_and_runs_in_a_fresh_venv(tmp_path):
    """``pip install .`` into a new virtual environment (uv, to the lock's versions, from its
    cache when it holds them: seconds after `make setup`; else from the registry), then the
    toolbox's commands there: no torch installed, every command works."""
    uv = Path(sys.executable).with_name("uv")  # make setup installs it beside the interpreter
    if not uv.is_file():
        pytest.skip(f"no uv beside {sys.executable} (make setup installs it)")
    keep = ("HOME", "XDG_CACHE_HOME", "UV_CACHE_DIR")  # where make setup's uv left its cache
    env = {"UV_NO_CONFIG": "1", "PATH": "/usr/bin:/bin"}
    env |= {k: v for k, v in os.environ.items() if k in keep}
    venv = tmp_path / "venv"
    subprocess.run(
        [uv, "venv", "-q", "--python", sys.executable, venv], env=env, check=True, timeout=120
    )
    install = [uv, "pip", "install", "-q", "--python", venv / "bin" / "python"]
    # the clone's files a build reads, copied: setuptools would reuse the checkout's build/
    src = tmp_path / "src"
    shutil.copytree(
        REPO / "workflow",
        src / "workflow",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, src / name)
    install += ["-c", REPO / "envs" / "requirements.lock", src]
    run = subprocess.run([*install, "--offline"], env=env, capture_output=True, text=True)
    if run.returncode != 0:  # the cache lacks a file: the registry
        if not registry_reachable():
            pytest.skip(f"uv's cache lacks a package and {INDEX} is unreachable")
        run = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    python = venv / "bin" / "python"
    absent = "import importlib.util as u; print([u.find_spec(m) for m in ('torch', 'snakemake')])"
    found = subprocess.run([python, "-c", absent], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[None, None]"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    outputs = []
    for argv in toolbox_commands(tmp_path, report=False):
        done = subprocess.run(
            [venv / "bin" / "imagenot", *argv], cwd=REPO, env=clean, capture_output=True, text=True
        )
        assert done.returncode == 0, f"imagenot {' '.join(argv)}: {done.stderr[-2000:]}"
        outputs.append(done.stdout)
    assert outputs[0].strip() == f"imagenot {pyproject()['project']['version']}"  # the wheel's
