"""benchmarks/gpu_check.py, the one GPU check for the next lent GPU.

The slow test is its CPU smoke run as a GPU node without a venv would run it: the interpreter
is started with ``-S`` (no site-packages: no venv) and sees only torch, torchvision (with
pillow) and numpy and the wheels ``gpu_check_steps.WHEELS`` names, each with what it requires
(a folder of links to the venv's copies); the project comes from source
(``PYTHONPATH=workflow``) and no ``imagenot`` script is on ``PATH``. Its figures are the GPU's
to give: here only that every step runs and lands in the one table, and that each goal says it
was not measured. The fast tests check the parts a GPU run rests on, each with a planted fault:
a step ends with every process it started, a stopped preflight keeps the models it finished,
each goal's verdict and the exit status, and the wheels named for every platform tag."""

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
        ["env", "preflight", "plain", "step", "decode", "eval", "caption", "embed"], "ran"
    )
    assert not any(v.get("left") for v in report["steps"].values())  # no step left a process
    checks = {(row[0], row[1].split(" (")[0]) for row in report["rows"]}
    for model in ("alexnet_mini", "resnet_mini"):
        for check in ("preflight", "feed, CPU workers", "feed, GPU decoding"):
            assert (check, model) in checks
    assert {("step vs plain loop", "alexnet"), ("loop vs plain loop", "alexnet")} <= checks
    assert ("GPU decode pixels", "as stored") in checks
    kinds = {row[0] for row in report["rows"]}
    assert {"environment", "feed source", "GPU decode ahead, under load"} <= kinds
    assert {"robustness eval, costliest", "caption embedding", "image embedding"} <= kinds
    assert report["steps"]["env"]["result"]["missing_wheels"] == []
    assert "torch.nn.TransformerEncoder" in report["steps"]["caption"]["result"]["model"]
    assert "VisionTransformer" in report["steps"]["embed"]["result"]["model"]
    assert report["steps"]["eval"]["result"]["interpolation"] == "bicubic"  # the published path
    # one line per goal, none measurable without a GPU, and the smoke run's verdict
    goals = [line for line in done.stdout.splitlines() if line.startswith("GOAL ")]
    assert len(goals) == 4 and all(g.endswith(": not measured: no GPU") for g in goals)
    assert done.stdout.rstrip().endswith("(exit 0)") and report["exit"] == 0
    table = (out / "gpu_check.md").read_text()
    assert table.count("\n| ") == len(report["rows"]) + 1 and table in done.stdout
    assert not (REPO / "results" / "gpu_check").exists()  # everything went where it was told


def test_the_check_names_the_wheels_a_bare_python_lacks(no_venv):
    """``gpu_check.py --wheels`` on a python with torch, torchvision and numpy alone: the wheels
    missing, the pip line for this node (each platform tag), and exit status 1."""
    (base, _), _ = no_venv
    done = subprocess.run(
        [sys.executable, "-S", "benchmarks/gpu_check.py", "--wheels"],
        cwd=REPO,
        env=_env([base]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    missing = next(line for line in lines if line.startswith("missing wheels: ")).split()[2:]
    assert {"pyyaml", "jsonschema", "pyarrow"} <= set(missing)
    assert (
        "pip download --only-binary=:all:" in done.stdout and "--platform manylinux" in done.stdout
    )
    assert "imagenot.cli" in done.stdout  # the project's modules wait for them


def test_the_plain_loop_is_the_projects_reference_and_the_models_are_the_papers():
    """Both scripts default to benchmarks/gpu_plain_loop.py, which imports torch, torchvision
    and the standard library only (nothing of the project it is the yardstick for)."""
    import ast

    from imagenot.core.config import load_config

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


# ---- a step ends clean ---------------------------------------------------------------------
def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _wait_for(path: Path, seconds: float = 60) -> str:
    import time

    until = time.monotonic() + seconds
    while not (path.is_file() and path.read_text().endswith("\n")):
        assert time.monotonic() < until, f"{path} never written"
        time.sleep(0.05)
    return path.read_text()


SPAWNS = """import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open(sys.argv[1], "w").write(f"{os.getpid()} {child.pid}\\n")
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads processes from /proc")
@pytest.mark.parametrize("runs_for", [0.0, 300.0], ids=["finishes", "times-out"])
def test_a_step_leaves_no_process_behind(tmp_path, runs_for):
    """Healthy: a step that ends in time keeps its exit status and output; planted: one that
    sleeps past its limit. Either way the grandchild it started (still sleeping) is killed
    with it before the next step: nothing of it runs after."""
    check = load_benchmark("gpu_check")
    pids = tmp_path / "pids"
    cmd = [sys.executable, "-c", SPAWNS, str(pids), str(runs_for)]
    code, left = check.run_step(cmd, 60 if not runs_for else 3, tmp_path / "log", dict(os.environ))
    step, grandchild = map(int, _wait_for(pids).split())
    assert (code, left) == ((0, 1) if not runs_for else (None, 1))  # the grandchild, left over
    assert not _alive(step) and not _alive(grandchild)
    assert check.group_members(step) == []


PLANTED_LOOP = """import os, sys, time
os.setsid()  # out of the step's process group: only its binding to the step ends it
open(os.environ["PLANTED_PID"], "w").write(f"{os.getpid()}\\n")
time.sleep(300)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_plain_loop_dies_with_its_step_even_outside_the_steps_group(tmp_path):
    """Planted: a plain loop that leaves the step's process group and sleeps; the ``plain``
    step killed at its limit takes it along (``lifeline.bind_to_parent``)."""
    check = load_benchmark("gpu_check")
    loop = tmp_path / "loop.py"
    loop.write_text(PLANTED_LOOP)
    pid_file = tmp_path / "pid"
    env = {**_env([]), "PLANTED_PID": str(pid_file)}
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_check_steps.py"), "plain", "--cpu",
           "--out", str(tmp_path / "plain.json"), "--plain-loop", str(loop)]  # fmt: skip
    code, _ = check.run_step(cmd, 5, tmp_path / "log", env)
    loop_pid = int(_wait_for(pid_file))
    assert code is None  # the step timed out: the loop sleeps
    import time

    until = time.monotonic() + 10
    while _alive(loop_pid) and time.monotonic() < until:
        time.sleep(0.05)
    assert not _alive(loop_pid)


# ---- the preflight keeps what it finished --------------------------------------------------
PLANTED_PREFLIGHT = """import json, sys, time
checks = [{"name": "memory alexnet (imagenot_st)", "status": "pass", "detail": "", "values": {}},
          {"name": "feed alexnet (256 px stored)", "status": "pass", "detail": "", "values": {}},
          {"name": "precision alexnet", "status": "pass", "detail": "", "values": {}}]
with open(sys.argv[1], "w") as f:
    for c in checks:
        f.write(json.dumps(c) + "\\n")
    f.write('{"name": "memory resn')  # a line cut short by the kill
    f.flush()
time.sleep(300)  # the second model: past the step's limit
"""


def test_a_preflight_stopped_at_its_limit_keeps_the_models_it_finished(tmp_path):
    from types import SimpleNamespace

    check = load_benchmark("gpu_check")
    cmd = [sys.executable, "-c", PLANTED_PREFLIGHT, str(tmp_path / "preflight.checks.jsonl")]
    args = SimpleNamespace(budget=60, cpu=False)
    ran = check.run_steps(args, tmp_path, Path("loop"), {"preflight": cmd}, {"preflight": 3})
    step = ran["preflight"]
    assert step["status"].startswith("timed out") and step["result"]["partial"]
    assert [c["name"].split(" ")[0] for c in step["result"]["checks"]] == [
        "memory", "feed", "precision"
    ]  # fmt: skip
    found = {g["goal"]: g for g in check.goals(ran, ["alexnet", "resnet18"], gpu=True)}
    assert found["precision"]["verdict"] == "FAIL"
    assert "resnet18 not measured" in found["precision"]["detail"]
    assert "alexnet" not in found["precision"]["detail"]  # the model it finished counts


# ---- one line per goal ----------------------------------------------------------------------
MODELS = ["alexnet", "convnext_large"]


def _ran(precision="pass", memory="pass", feed=0.95, step=0.97) -> dict:
    """A GPU run's step results: every model's checks and throughputs as given."""

    def check(kind, model, status, **values):
        return {"name": f"{kind} {model} (x)", "status": status, "detail": "d", "values": values}

    checks = []
    for model in MODELS:
        fits = {"per_gpu": 256, "largest_fit": 256 if memory == "pass" else 128,
                "micro_batches": 1 if memory == "pass" else 2, "peak_gib": 30.0}  # fmt: skip
        checks += [check("memory", model, memory, **fits), check("feed", model, "pass", ratio=feed),
                   check("precision", model, precision)]  # fmt: skip
    plain = {m: {"img_per_s": 1000.0} for m in MODELS}
    mine = {m: {"step_img_per_s": 1000.0 * step} for m in MODELS}
    return {
        "env": {"status": "ran", "result": {"gpu": "NVIDIA H200"}},
        "preflight": {"status": "ran", "result": {"checks": checks}},
        "plain": {"status": "ran", "result": {"models": plain}},
        "step": {"status": "ran", "result": {"models": mine}},
    }


def test_each_goal_passes_a_healthy_run_and_the_exit_status_says_so():
    check = load_benchmark("gpu_check")
    found = check.goals(_ran(), MODELS, gpu=True)
    assert [g["goal"] for g in found] == ["precision", "memory", "feed", "step"]
    assert {g["verdict"] for g in found} == {"PASS"}
    assert check.exit_status(_ran(), found, cpu=False) == 0
    lines = check.goal_lines(found).splitlines()
    assert len(lines) == 4 and all(line.startswith("GOAL ") and ": PASS" in line for line in lines)


@pytest.mark.parametrize(
    "planted, goal",
    [({"precision": "fail"}, "precision"), ({"memory": "warn"}, "memory"),
     ({"feed": 0.85}, "feed"), ({"step": 0.9}, "step")],
)  # fmt: skip
def test_each_goal_fails_its_planted_shortfall_alone(planted, goal):
    check = load_benchmark("gpu_check")
    ran = _ran(**planted)
    found = {g["goal"]: g for g in check.goals(ran, MODELS, gpu=True)}
    assert found[goal]["verdict"] == "FAIL" and "alexnet" in found[goal]["detail"]
    assert {g["verdict"] for k, g in found.items() if k != goal} == {"PASS"}
    assert check.exit_status(ran, list(found.values()), cpu=False) == 1


def test_without_a_gpu_every_goal_is_not_measured_and_only_a_smoke_run_exits_0():
    check = load_benchmark("gpu_check")
    ran = _ran()
    found = check.goals(ran, MODELS, gpu=False)
    assert {g["verdict"] for g in found} == {"not measured: no GPU"}
    assert all(line.endswith(": not measured: no GPU") for line in
               check.goal_lines(found).splitlines())  # fmt: skip
    assert check.exit_status(ran, found, cpu=True) == 0
    assert check.exit_status(ran, found, cpu=False) == 1  # a GPU run that saw no GPU
    ran["step"]["status"] = "timed out after 70 s"
    assert check.exit_status(ran, found, cpu=True) == 1  # a step that did not finish


# ---- the wheels ------------------------------------------------------------------------------
def test_the_wheels_are_the_locks_and_the_pip_line_names_every_platform_they_are_published_under(
    tmp_path,
):
    """Every wheel the check needs is pinned alike by both locks and has its published platform
    tags; the pip line asks for each tag (pyarrow's manylinux_2_28 beside rpds-py's
    manylinux2014: pip takes --platform literally), and a node whose glibc is older than a
    wheel's only tag is told which."""
    steps = load_benchmark("gpu_check_steps")
    assert set(steps.WHEEL_PLATFORMS) == set(steps.WHEELS.values())
    cu12 = steps.locked_versions(REPO / "envs" / "requirements-cu12.lock")
    assert steps.locked_versions() == cu12
    line = steps.pip_download("3.12", "x86_64")
    assert "--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64" in line
    assert f"pyarrow=={cu12['pyarrow']}" in line and "--only-binary=:all:" in line
    assert "--platform" not in steps.pip_download("3.12", "x86_64", ["tqdm", "attrs"])
    assert set(steps.glibc_short(steps.WHEEL_PLATFORMS, (2, 17))) == {"pyarrow"}
    assert steps.glibc_short(steps.WHEEL_PLATFORMS, (2, 28)) == {}
    lock = REPO / "envs" / "requirements.lock"
    planted = lock.read_text().replace("\npyarrow==", "\n# pyarrow==")
    (bad := tmp_path / "planted.lock").write_text(planted)
    with pytest.raises(ValueError, match="does not pin pyarrow"):
        steps.locked_versions(bad)


# ---- eval and image embedding ------------------------------------------------------------------
def test_eval_is_timed_at_the_costliest_published_case_and_embedding_as_embed_images_runs():
    """The eval step times the paper model whose published weights see the largest input
    (EfficientNet-V2-L, 480 px) through the published path; on the CPU (tiny sizes) both the
    eval and the image embedding steps run and report their figures."""
    from types import SimpleNamespace

    from imagenot.train.facts import shipped_rows

    steps = load_benchmark("gpu_check_steps")
    rows = [r for r in shipped_rows() if r["model"] in steps.BATCHES]
    costliest = max(rows, key=lambda r: int(r["crop_size"]))
    assert (steps.EVAL_MODEL, costliest["crop_size"]) == (costliest["model"], "480")
    args = SimpleNamespace(cpu=True, threads=1)
    ev = steps.step_eval(args)
    assert ev["transforms"] == 17 and ev["float32_img_per_s"] > 0 and ev["bf16_img_per_s"] > 0
    assert ev["interpolation"] == "bicubic" and ev["reference_gpu_hours_est"] > 0
    emb = steps.step_embed(args)
    assert emb["img_per_s"] > 0 and emb["images"] == 8 and "ViT-L/14" in emb["model"]


def test_the_docs_pip_line_is_the_one_the_check_writes_from_the_lock():
    text = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    section = text[text.index("## What to run first on a GPU") : text.index("## One GPU check")]
    start = section.index("pip download --")
    line = " ".join(section[start : section.index("# on the node", start)].split()).replace(
        "\\ ", ""
    )
    assert line == load_benchmark("gpu_check_steps").pip_download("3.12", "x86_64")
