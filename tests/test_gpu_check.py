"""benchmarks/gpu_check.py, the one GPU check for the next lent GPU: its
CPU smoke run as a GPU node without a venv would run it. The interpreter is started with ``-S``
(no site-packages: no venv) and sees only torch, torchvision (with pillow) and numpy and the
wheels ``gpu_check_steps.WHEELS`` names, each with what it requires (a folder of links to the
venv's copies); the project comes from source (``PYTHONPATH=workflow``) and no ``imagenot``
script is on ``PATH``. Its figures are the GPU's to give: here only that every step runs and
lands in the one table."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import load_benchmark

REPO = Path(__file__).resolve().parents[1]
BASE = ("torch", "torchvision", "numpy")


def _name(requirement: str) -> str:
    return re.split(r"[ <>=!~;\[(]", requirement, maxsplit=1)[0]


def sandbox(root: Path, distributions) -> Path:
    """A folder of links to ``distributions`` and everything they require (this platform's
    markers, no extras), as installing their wheels would give."""
    from packaging.markers import Marker

    root.mkdir(parents=True, exist_ok=True)
    seen, todo = set(), list(distributions)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        dist = metadata.distribution(name)
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            if marker and not Marker(marker).evaluate({"extra": ""}):
                continue
            todo.append(_name(spec))
        for top in {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (root / top).exists():
                os.symlink(source, root / top)
    return root


def _env(paths: list[Path]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [REPO / "workflow", *paths])
    env["PATH"] = os.pathsep.join(p for p in ("/usr/bin", "/bin") if Path(p).is_dir())
    return env


def _python(env: dict, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def no_venv(tmp_path_factory):
    steps = load_benchmark("gpu_check_steps")
    root = tmp_path_factory.mktemp("python")
    wheels = sorted(set(steps.WHEELS.values()))
    return (sandbox(root / "base", BASE), sandbox(root / "wheels", wheels)), steps


@pytest.mark.slow  # the whole check, every step on the CPU: minutes (make test-slow)
def test_the_gpu_check_runs_every_step_with_only_torch_torchvision_numpy_and_its_wheels(
    no_venv, tmp_path
):
    paths, _ = no_venv
    env = _env(list(paths))
    for absent in ("scipy", "pandas", "snakemake", "transformers", "timm"):  # not there
        assert _python(env, f"import {absent}").returncode != 0, absent
    assert shutil.which("imagenot", path=env["PATH"]) is None
    out = tmp_path / "check"
    done = subprocess.run(
        [sys.executable, "-S", "benchmarks/gpu_check.py", "--cpu", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert {k: v["status"] for k, v in report["steps"].items()} == dict.fromkeys(
        ["env", "preflight", "plain", "step", "decode", "eval", "caption"], "ran"
    )
    checks = {(row[0], row[1].split(" (")[0]) for row in report["rows"]}
    for model in ("alexnet_mini", "resnet_mini"):
        for check in ("preflight", "feed, CPU workers", "feed, GPU decoding"):
            assert (check, model) in checks
    assert {("step vs plain loop", "alexnet"), ("loop vs plain loop", "alexnet")} <= checks
    assert ("GPU decode pixels", "as stored") in checks
    kinds = {row[0] for row in report["rows"]}
    assert {"environment", "feed source", "GPU decode ahead, under load"} <= kinds
    assert {"robustness eval batch", "caption embedding"} <= kinds
    assert report["steps"]["env"]["result"]["missing_wheels"] == []
    assert "torch.nn.TransformerEncoder" in report["steps"]["caption"]["result"]["model"]
    table = (out / "gpu_check.md").read_text()
    assert table.count("\n| ") == len(report["rows"]) + 1 and table in done.stdout
    assert not (REPO / "results" / "gpu_check").exists()  # everything went where it was told


def test_the_check_names_the_wheels_a_bare_python_lacks(no_venv, tmp_path):
    (base, _), _ = no_venv
    out = tmp_path / "env.json"
    done = subprocess.run(
        [sys.executable, "-S", "benchmarks/gpu_check_steps.py", "env", "--out", str(out)],
        cwd=REPO,
        env=_env([base]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    env = json.loads(out.read_text())
    assert {"pyyaml", "jsonschema", "pyarrow"} <= set(env["missing_wheels"])
    assert "imagenot.cli" in env["project_imports"]


def test_the_plain_loop_is_the_projects_reference_and_the_models_are_the_papers():
    """Both scripts default to benchmarks/gpu_plain_loop.py, which imports torch, torchvision
    and the standard library only (nothing of the project it is the yardstick for)."""
    import ast

    from imagenot.config import load_config

    steps = load_benchmark("gpu_check_steps")
    loop = REPO / "benchmarks" / "gpu_plain_loop.py"
    assert load_benchmark("gpu_check").plain_loop_path(None) == loop == steps.PLAIN_LOOP
    tree = ast.parse(loop.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}  # fmt: skip
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported - set(sys.stdlib_module_names) == {"torch", "torchvision"}, imported
    models = load_config(REPO / "config" / "paper.yaml")["train"]["models"]
    assert sorted(steps.BATCHES) == sorted(models)


def test_the_plain_loop_reports_a_failing_model_and_runs_the_others(tmp_path):
    done = subprocess.run(
        [sys.executable, "benchmarks/gpu_plain_loop.py", "alexnet:2", "no_such_model:2",
         *load_benchmark("gpu_check_steps").plain_loop_args(cpu=True)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["alexnet"]["batch"] == 2 and result["alexnet"]["img_per_s"] > 0
    assert "no_such_model" in result["no_such_model"]["error"]
    bad = subprocess.run(
        [sys.executable, "benchmarks/gpu_plain_loop.py", "alexnet"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert bad.returncode == 2 and "expected MODEL:BATCH" in bad.stderr
