"""Incremental re-execution and fault tolerance on a finished run (issue "Running on a cluster").

One real run of the whole workflow on the demo world with the small overlay
.test/config-tiny.yaml (every stage, three models, one trial each), then dry runs against it:
  * nothing is scheduled after the finished run;
  * touching one figure's plotting code reruns that figure alone;
  * changing the similarity threshold reruns curation from the selection step and everything
    downstream, but neither WordNet preparation nor matching;
  * changing one model's settings (its batch size) reruns that model's jobs only;
and faults on a copy of it: a training job killed mid-epoch by SIGKILL resumes from its checkpoint
to the same result as the uninterrupted run and leaves no output a downstream rule could consume;
a failed job's log path is printed; published-list mode builds a selection from a class list.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CONFIGS = [str(REPO / "config" / "config.yaml"), str(REPO / ".test" / "config-tiny.yaml")]
FINAL = "results/train/imagenot/st/resnet_mini/final/seed-0"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{REPO / '.venv' / 'bin'}:{env.get('PATH', '')}"
    return env


def snakemake_cmd(workdir: Path, *extra: str, configs: list[str] = CONFIGS) -> list[str]:
    return [
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(REPO / "profiles" / "local"),
        "--configfile",
        *configs,
        *extra,
    ]


def snakemake(workdir: Path, *extra: str, configs: list[str] = CONFIGS):
    return subprocess.run(
        snakemake_cmd(workdir, *extra, configs=configs),
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=1500,
    )


JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:[ \t]+.*\n)*)", re.M)


def planned(workdir: Path, *extra: str, configs: list[str] = CONFIGS) -> list[tuple[str, dict]]:
    """The jobs a dry run schedules: (rule, wildcards) pairs, `all` left out."""
    run = snakemake(workdir, "--dry-run", *extra, configs=configs)
    assert run.returncode == 0, run.stderr[-3000:]
    jobs = []
    for rule, body in JOB.findall(run.stdout):
        found = re.search(r"^\s+wildcards: (.*)$", body, re.M)
        pairs = found.group(1).split(", ") if found else []
        jobs.append((rule, dict(p.split("=", 1) for p in pairs)))
    return [job for job in jobs if job[0] != "all"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("finished")
    run = snakemake(workdir, "--", "all")
    assert run.returncode == 0, run.stderr[-6000:]
    return workdir


def overlay(tmp_path: Path, settings: dict) -> list[str]:
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump(settings))
    return [*CONFIGS, str(path)]


def test_nothing_is_scheduled_after_a_finished_run(finished):
    assert planned(finished) == []


def test_editing_one_figures_code_reruns_that_figure_alone(finished):
    from imagenot.figures import plan as figures_plan

    # Snakemake compares checksums of small inputs, so the code must change, not just its mtime.
    code = Path(figures_plan.code("relative_progress"))
    original = code.read_bytes()
    before = code.stat()
    try:
        code.write_bytes(original + b"# edited by tests/test_incremental.py\n")
        jobs = planned(finished)
        code.write_bytes(original)
        untouched = planned(finished)
    finally:
        code.write_bytes(original)
        os.utime(code, ns=(before.st_atime_ns, before.st_mtime_ns))
    # the one figure rule, for the relative-progress figure only
    assert jobs == [("figure", {"figure": "relative_progress"})]
    assert untouched == []  # same content again, though newer: nothing to do


def test_threshold_change_reruns_from_selection_not_matching(finished, tmp_path):
    jobs = planned(finished, configs=overlay(tmp_path, {"curate": {"threshold": 0.45}}))
    rules = {rule for rule, _ in jobs}
    assert "curate_select" in rules
    assert {"acquire_build", "train_final", "evaluate_robustness", "accuracy_table"} <= rules
    upstream = {"prepare_wordnet", "demo_world", "curate_match", "curate_candidates"}
    assert not rules & (upstream | {"curate_captions", "curate_embed"})


def test_one_models_settings_change_reruns_that_model_only(finished, tmp_path):
    changed = {"train": {"spaces": {"st": {"batch_size_overrides": {"vgg_mini": 8}}}}}
    jobs = planned(finished, configs=overlay(tmp_path, changed))
    per_model = [(rule, wc) for rule, wc in jobs if "model" in wc]
    assert per_model, jobs
    assert {wc["model"] for _, wc in per_model} == {"vgg_mini"}
    assert ("train_final", {"dataset": "imagenot", "protocol": "st", "model": "vgg_mini"}) in [
        (rule, {k: wc[k] for k in ("dataset", "protocol", "model")})
        for rule, wc in per_model
        if rule == "train_final"
    ]
    assert not {rule for rule, _ in jobs} & {"curate_select", "acquire_build", "demo_world"}


def test_the_funnel_removes_each_hazard_of_the_demo_world_at_its_step(finished):
    """The demo world plants one group of synsets per hazard; the audit of the real run names
    the step that removed each (method section 2), and keeps the intended survivors."""
    world = json.loads((finished / "results/demo_world/world.json").read_text())
    audit = pq.read_table(finished / "results/curate/imagenot/audit.parquet").to_pylist()
    fate = {row["wnid"]: (row["step_name"], row["status"]) for row in audit}
    expected = {
        "imagenet_classes": "imagenet_overlap",
        "shares_imagenet_lemma": "imagenet_overlap",
        "rare": "min_count",
        "ancestors": "leaves",
        "nsfw": "nsfw",
        "low_similarity": "similarity_threshold",
    }
    assert set(world["hazards"]) == {*expected, "intended_survivors"}
    for hazard, step in expected.items():
        assert world["hazards"][hazard], hazard
        for wnid in world["hazards"][hazard]:
            assert fate[wnid] == (step, "removed"), (hazard, wnid, fate.get(wnid))
    for wnid in world["hazards"]["intended_survivors"]:
        assert fate[wnid] == ("top_classes", "kept"), (wnid, fate.get(wnid))
    funnel = (finished / "results/curate/imagenot/funnel.csv").read_text()
    assert all(f",{step}," in funnel for step in expected.values())


def test_curation_reruns_to_byte_identical_selections(copy_of_finished):
    """Everything of curation rerun from matching (--forcerun) writes the same bytes."""
    base = "results/curate/imagenot"
    names = ("classes.parquet", "selection.parquet", "class_scores.parquet", "audit.parquet")
    before = {name: (copy_of_finished / base / name).read_bytes() for name in names}
    targets = [f"{base}/{name}" for name in names]
    run = snakemake(copy_of_finished, "--forcerun", "curate_match", "--", *targets)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "curate_embed" in run.stderr and "curate_match" in run.stderr  # really recomputed
    for name in names:
        assert (copy_of_finished / base / name).read_bytes() == before[name], name


@pytest.fixture
def copy_of_finished(finished, tmp_path) -> Path:
    workdir = tmp_path / "copy"
    shutil.copytree(finished, workdir, symlinks=True)
    return workdir


def _wait_for(path: Path, pattern: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and re.search(pattern, path.read_text(errors="replace")):
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} never showed {pattern!r}")


def test_training_job_killed_mid_epoch_resumes_to_the_same_result(copy_of_finished):
    workdir = copy_of_finished
    final = workdir / FINAL
    expected = json.loads((final / "result.json").read_text())
    for name in ("result.json", "model.safetensors"):
        (final / name).unlink()
    log = workdir / "results/logs/train_final/imagenot/st/resnet_mini/0.log"
    log.unlink()
    # seed 0 reuses the selected trial's weights; without them the final run retrains (to the
    # same weights), which is the job killed here
    (workdir / "results/train/imagenot/st/resnet_mini/trial-0/best.safetensors").unlink()
    cmd = snakemake_cmd(workdir, "--cores", "1", "--", f"{FINAL}/result.json")
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for(log, r"epoch 2: +\d+%")  # epoch 1 and its checkpoint are done, epoch 2 runs
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # nothing a downstream rule could consume, and the incomplete job is scheduled again
    assert not (final / "result.json").exists() and not (final / "model.safetensors").exists()
    assert ("train_final", {"dataset": "imagenot", "protocol": "st", "model": "resnet_mini"}) in [
        (rule, {k: v for k, v in wc.items() if k != "seed"})
        for rule, wc in planned(workdir, "--", f"{FINAL}/result.json")
    ]
    # Snakemake itself was killed too (the worst case: the head node died), so its lock remains:
    # the rerun says so, `--unlock` (as the README says) clears it, and the job resumes.
    locked = snakemake(workdir, "--", f"{FINAL}/result.json")
    assert locked.returncode != 0 and "--unlock" in locked.stderr, locked.stderr[-2000:]
    unlocked = snakemake(workdir, "--unlock")
    assert unlocked.returncode == 0, unlocked.stderr[-2000:]
    rerun = snakemake(workdir, "--", f"{FINAL}/result.json")
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert re.search(r"resumed .* at epoch 1", log.read_text())
    result = json.loads((final / "result.json").read_text())
    assert result.pop("reused_trial") is False and expected.pop("reused_trial") is True
    assert result == expected


def test_failed_job_prints_its_log_path(copy_of_finished):
    workdir = copy_of_finished
    selection = workdir / "results/train/imagenot/st/alexnet_mini/selection.json"
    selection.write_text("{not json")
    run = snakemake(
        workdir, "--", "results/train/imagenot/st/alexnet_mini/final/seed-0/result.json"
    )
    assert run.returncode != 0
    assert "results/logs/train_final/imagenot/st/alexnet_mini/0.log" in run.stderr + run.stdout


def test_published_list_mode_runs_on_the_demo_world(copy_of_finished, tmp_path):
    from imagenot.curate.candidates import read_class_list

    listed = REPO / "resources" / "demo_class_list.txt"
    # the list holds an ImageNet class (zebra) on purpose: allowed explicitly
    classes = {"from_file": str(listed), "allow_imagenet_classes": True}
    dataset = {"listed": {"kind": "laion", "classes": classes}}
    configs = overlay(tmp_path, {"datasets": dataset})
    target = "results/curate/listed/selection.parquet"
    rules = {rule for rule, _ in planned(copy_of_finished, "--", target, configs=configs)}
    assert "curate_select" in rules and "curate_candidates" in rules
    assert not rules & {"curate_match", "demo_world", "prepare_wordnet"}  # matches are reused
    run = snakemake(copy_of_finished, "--", target, configs=configs)
    assert run.returncode == 0, run.stderr[-4000:]
    selected = pq.read_table(copy_of_finished / target).column("wnid").unique().to_pylist()
    assert set(selected) == set(read_class_list(listed))  # a published list is kept as given


def test_a_threshold_keeping_no_class_stops_before_the_dataset(copy_of_finished, tmp_path):
    """A threshold no class reaches stops at the selection step, naming the numbers and keys;
    the dataset built before (and everything downstream) is left as it was."""
    manifest = copy_of_finished / "results/datasets/imagenot/manifest.parquet"
    before = manifest.read_bytes()
    configs = overlay(tmp_path, {"curate": {"threshold": 0.99}})
    run = snakemake(
        copy_of_finished, "--", "results/datasets/imagenot/manifest.parquet", configs=configs
    )
    assert run.returncode != 0
    log = (copy_of_finished / "results/logs/curate_select/imagenot.log").read_text()
    assert "0 classes pass" in log and "curate.threshold" in log
    assert "Traceback" not in log
    assert manifest.read_bytes() == before
