"""Incremental re-execution and fault tolerance on a finished run.

One real run of the whole workflow on the demo world with the small overlay
.test/config-tiny.yaml (every stage, two models, one trial each), then dry runs against it:
  * nothing is scheduled after the finished run;
  * touching one figure's plotting code reruns that figure alone;
  * changing the similarity threshold reruns curation from the selection step and everything
    downstream, but neither WordNet preparation nor matching;
and faults on a copy of it: a training job killed mid-epoch by SIGKILL resumes from its checkpoint
to the same result as the uninterrupted run and leaves no output a downstream rule could consume;
a failed job's log path is printed; published-list mode builds a selection from a class list.
README section 5's examples run for real on copies of it, as a user runs them: the
threshold down then up over an interrupted trial's checkpoint and a truncated one; one model's
batch size (refused; its amendment refused for a model that trained, accepted for one at chance,
then that model's jobs alone rerun: whichever outcomes the run's records hold); a new model with
a batch size of its own (its jobs alone run, whatever the accuracies).
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
from types import SimpleNamespace

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


def jobs_in(text: str) -> list[tuple[str, dict]]:
    """The jobs Snakemake's output lists: (rule, wildcards) pairs, `all` left out."""
    jobs = []
    for rule, body in JOB.findall(text):
        found = re.search(r"^\s+wildcards: (.*)$", body, re.M)
        pairs = found.group(1).split(", ") if found else []
        jobs.append((rule, dict(p.split("=", 1) for p in pairs)))
    return [job for job in jobs if job[0] != "all"]


def planned(workdir: Path, *extra: str, configs: list[str] = CONFIGS) -> list[tuple[str, dict]]:
    """The jobs a dry run schedules."""
    run = snakemake(workdir, "--dry-run", *extra, configs=configs)
    assert run.returncode == 0, run.stderr[-3000:]
    return jobs_in(run.stdout)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("finished")
    run = snakemake(workdir, "--", "all")
    assert run.returncode == 0, run.stderr[-6000:]
    return workdir


def overlay(tmp_path: Path, settings: dict, name: str = "overlay.yaml") -> list[str]:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(settings))
    return [*CONFIGS, str(path)]


def test_nothing_is_scheduled_after_a_finished_run(finished):
    assert planned(finished) == []


def test_a_finished_run_moved_to_another_folder_plans_nothing(copy_of_finished):
    """Home to scratch, as clusters require: no job records a path of its folder or of the
    clone (tests/test_moved_run.py checks every job's record statically)."""
    assert planned(copy_of_finished) == []


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


def chromium() -> str | None:
    names = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
    return next(filter(None, map(shutil.which, names)), None)


def visible_text(dom: str) -> str:
    """Text a reader sees: the body without scripts and tags."""
    body = dom[dom.find("<body") :]
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


def test_the_report_of_the_finished_run_shows_every_figure_and_table(
    copy_of_finished, monkeypatch, tmp_path
):
    """The report command that the end of a run in a folder of its own prints (as a paper run
    does), typed in the clone's root: every figure and table registered, the config's
    description in the captions, and the page opens in headless Chromium on its landing page
    (the run summary's counts) with the report's categories."""
    from imagenot.run import run_summary, summary_plan

    workdir = copy_of_finished
    workflow = SimpleNamespace(configfiles=CONFIGS, main_snakefile=str(REPO / "Snakefile"))
    monkeypatch.chdir(workdir)  # the end of a run prints it in the run's folder
    command = summary_plan.run_report_command(workflow)
    done = subprocess.run(
        command, shell=True, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = workdir / run_summary.REPORT
    html = report.read_text(errors="replace")
    results = workdir / "results"
    registered = [
        *(results / "figures").glob("*.png"),
        *(results / "tables").glob("*.csv"),
        *(results / "analyse").glob("rankings_*.json"),
    ]
    assert len(registered) > 20, registered
    for path in registered:
        assert path.name in html, path
    assert yaml.safe_load(Path(CONFIGS[0]).read_text())["description"] in html  # in captions
    # the landing page: the run summary's counts (profiles/default/report_landing.yaml)
    landing = json.loads(re.search(r"metadata = (\{.*?\});?\n", html).group(1))
    assert landing["final runs"] == len(list((results / "train").glob("*/*/*/final/seed-*")))
    browser = chromium()
    if browser is None:
        pytest.skip("no chromium on PATH (Debian package 'chromium'): render check skipped")
    dom = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=15000",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    # the page's script ran and drew the navigation with the report's result categories
    text = visible_text(dom.stdout)
    for category in ("Results", "Figures", "Tables", "Analysis"):
        assert category in text, text[:2000]


def test_threshold_change_reruns_from_selection_not_matching(finished, tmp_path):
    jobs = planned(finished, configs=overlay(tmp_path, {"curate": {"threshold": 0.45}}))
    rules = {rule for rule, _ in jobs}
    assert "curate_select" in rules
    assert {"acquire_build", "train_final", "evaluate_robustness", "accuracy_table"} <= rules
    upstream = {"prepare_wordnet", "demo_world", "curate_match", "curate_candidates"}
    assert not rules & (upstream | {"curate_captions", "curate_embed"})


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


def _wait_for_checkpoint(path: Path, epoch: int, timeout: float = 600) -> None:
    """Until the checkpoint at ``path`` was written in epoch ``epoch`` (0-based) or later: a
    checkpoint replaces the last one by a rename, so a file there is whole."""
    from imagenot.train.checkpoints import read_state

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and read_state(path).epoch >= epoch:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never held a checkpoint of epoch {epoch}")


def test_training_job_killed_mid_epoch_resumes_to_the_same_result(copy_of_finished):
    from imagenot.train.records import check_seal
    from imagenot.train.trials import CHECKPOINT

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
        _wait_for_checkpoint(final / CHECKPOINT, 1)  # a step-level checkpoint of epoch 2
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
    check_seal(result, final / "result.json")  # each record seals its own contents
    assert result.pop("reused_trial") is False and expected.pop("reused_trial") is True
    result.pop("record_sha256"), expected.pop("record_sha256")  # they differ by reused_trial
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


# ---------------------------------------------------------------- README section 5, as run
# Each example of README section 5 run as a user runs it: the same `snakemake` command with a
# config overlay, on a copy of the finished run, with no file removed by hand between runs; then
# a dry run with the same config schedules nothing more for the same targets.

MODEL = "alexnet_mini"  # the model the threshold changes are followed through, to its evaluation
EXPERIMENT = "results/train/imagenot/st"


def _thresholds(workdir: Path) -> tuple[float, float]:
    """(down, up): thresholds two more, and two fewer, classes pass than the finished run's,
    each halfway between two classes' scores (from the run's own class scores)."""
    rows = pq.read_table(workdir / "results/curate/imagenot/class_scores.parquet").to_pylist()
    kept = sorted(r["score"] for r in rows if r["status"] == "kept")
    below = sorted(
        (r["score"] for r in rows if r["status"] == "removed" and r["reason"].startswith("score")),
        reverse=True,
    )
    assert len(kept) > 3 and len(below) >= 3, (kept, below)
    return (below[1] + below[2]) / 2, (kept[1] + kept[2]) / 2


def _interrupt_a_trial(workdir: Path, run_dir: str) -> Path:
    """Leave an interrupted trial behind, as a SLURM time limit does: the trial runs again
    (``--forcerun``, standing in for a run that had not finished) in an environment whose SLURM
    job ends now (``SLURM_JOB_END_TIME``), so its deadline (that end less
    ``train.deadline_margin_minutes``) has passed: after its first step it writes a checkpoint
    and exits 75 (imagenot.train.interrupts). Deterministic, unlike a Ctrl-C timed against a
    checkpoint that the tiny trial keeps for well under a second (that race failed in CI)."""
    from imagenot.train.trials import CHECKPOINT

    checkpoint = workdir / run_dir / "trial-0" / CHECKPOINT
    slot = f"{run_dir}/stage-0/slot-0.json"
    env = {**_env(), "SLURM_JOB_ID": "1", "SLURM_JOB_END_TIME": str(int(time.time()))}
    run = subprocess.run(
        snakemake_cmd(workdir, "--forcerun", slot, "--", slot),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = workdir / f"results/logs/train_trial/{run_dir.removeprefix('results/train/')}/0-0.log"
    assert run.returncode != 0, run.stdout[-2000:]
    assert "deadline reached: step-level checkpoint written" in log.read_text(), log.read_text()
    assert checkpoint.is_file() and not (workdir / slot).exists()
    return checkpoint


def _download_logs(workdir: Path) -> str:
    logs = sorted((workdir / "results/logs/acquire_download/imagenot").glob("*.log"))
    assert logs
    return "\n".join(path.read_text() for path in logs)


def _followed_through(workdir: Path, run_dir: str, configs: list[str], targets: list[str]):
    """Run to ``targets`` with ``configs``; return (classes, result) after checking the run
    succeeded, the trained model saw the whole new dataset, and nothing is left to do."""
    run = snakemake(workdir, "--", *targets, configs=configs)
    assert run.returncode == 0, run.stderr[-4000:]
    data = workdir / "results/datasets/imagenot"
    classes = (data / "classes.txt").read_text().split()
    manifest = pq.read_table(data / "manifest.parquet").to_pylist()
    assert {row["wnid"] for row in manifest if row["split"] == "train"} == set(classes)
    result = json.loads((workdir / run_dir / "final/seed-0/result.json").read_text())
    assert result["num_classes"] == len(classes)
    assert result["dataset_fingerprint"] == (data / "fingerprint.txt").read_text().strip()
    assert planned(workdir, "--", *targets, configs=configs) == []
    return classes, run


def test_readme5_threshold_down_then_up_over_a_stale_and_a_truncated_checkpoint(
    copy_of_finished, tmp_path
):
    """Section 5: a new `curate.threshold` reruns from the selection step, with no manual step.
    Down (two more classes) after a trial was interrupted on the old data: the download work
    made for the old selection is recognised by its fingerprint and its images reused, the
    new classes are in the dataset, the stale checkpoint is set aside (data-changed) and the
    trial trains afresh. Up (two fewer classes) over a truncated checkpoint: every image is
    reused, the checkpoint is set aside (unreadable). Both follow one model to its evaluation."""
    from imagenot.train.checkpoints import read_state

    workdir = copy_of_finished
    run_dir = f"{EXPERIMENT}/{MODEL}"
    data = workdir / "results/datasets/imagenot"
    targets = [
        f"{run_dir}/final/seed-0/result.json",
        f"results/evaluate/imagenot/st/{MODEL}/seed-0/robustness.parquet",
    ]
    before = (data / "classes.txt").read_text().split()
    old_fingerprint = (data / "fingerprint.txt").read_text().strip()
    down, up = _thresholds(workdir)
    trial_log = workdir / f"results/logs/train_trial/imagenot/st/{MODEL}/0-0.log"

    checkpoint = _interrupt_a_trial(workdir, run_dir)
    assert read_state(checkpoint).fingerprint == old_fingerprint

    # threshold down: more classes
    classes, _ = _followed_through(
        workdir, run_dir, overlay(tmp_path, {"curate": {"threshold": down}}), targets
    )
    assert set(before) < set(classes) and len(classes) == len(before) + 2
    downloads = _download_logs(workdir)
    assert "made for another selection" in downloads, downloads[-3000:]
    assert re.search(r"\d+ row\(s\) reused from earlier work", downloads), downloads[-3000:]
    aside = checkpoint.with_name(f"{checkpoint.name}.set-aside-data-changed")
    assert aside.is_file() and not checkpoint.exists()
    assert f"set aside as {aside.name}, training starts afresh" in trial_log.read_text()
    assert "resumed" not in trial_log.read_text()

    # threshold up: fewer classes, over a truncated checkpoint (a disk that filled up)
    blob = aside.read_bytes()
    checkpoint.write_bytes(blob[: len(blob) // 2])
    classes, _ = _followed_through(
        workdir, run_dir, overlay(tmp_path, {"curate": {"threshold": up}}), targets
    )
    assert set(classes) < set(before) and len(classes) == len(before) - 2
    downloads = _download_logs(workdir)
    assert "made for another selection" in downloads
    assert "reused from earlier work" in downloads
    unreadable = checkpoint.with_name(f"{checkpoint.name}.set-aside-unreadable")
    assert unreadable.read_bytes() == blob[: len(blob) // 2] and not checkpoint.exists()
    assert f"set aside as {unreadable.name}, training starts afresh" in trial_log.read_text()


def _st_outcomes(workdir: Path) -> dict[tuple[str, str], bool]:
    """Every (ST experiment, model) the run's preregistration record registers, and whether all
    that model's trials there ended at chance, read as the amendment guardrail reads them
    (``imagenot.train.prereg.trial_results``, ``imagenot.train.search.at_chance``). Which models
    train in the tiny run differs between machines: the tests below take it from here."""
    from imagenot.train.prereg import trial_results
    from imagenot.train.search import at_chance

    record = json.loads((workdir / "results/train/preregistration.json").read_text())
    outcomes = {}
    for experiment, entry in sorted(record["experiments"].items()):
        if not experiment.endswith("/st"):
            continue
        for model in entry["models"]:
            results = trial_results(workdir / "results/train" / experiment, model)
            assert results, (experiment, model)
            outcomes[experiment, model] = all(
                at_chance(r["val_accuracy"], r["num_classes"], r["n_val"]) for r in results
            )
    return outcomes


def _own_space(workdir: Path, experiment: str, model: str, batch_size: int) -> dict:
    """A config overlay setting ``model``'s batch size in ``experiment`` alone. The tiny config's
    ST experiments share space `st`: the experiment gets a space of its own, the same definition
    (as registered) plus the one model's batch size, so that no other experiment's
    pre-registered settings change (the check covers the whole config)."""
    record = json.loads((workdir / "results/train/preregistration.json").read_text())
    own = {k: v for k, v in record["experiments"][experiment]["definition"].items() if k != "seed"}
    own["batch_size_overrides"] = {model: batch_size}
    tiny = yaml.safe_load(Path(CONFIGS[-1]).read_text())["train"]["experiments"]
    experiments = [
        {**e, "space": "st_changed"} if f"{e['dataset']}/{e['protocol']}" == experiment else e
        for e in tiny
    ]
    return {"train": {"spaces": {"st_changed": own}, "experiments": experiments}}


def _batch_size_change(workdir: Path, experiment: str, model: str) -> tuple[int, int]:
    """(registered, changed): ``model``'s batch size in ``experiment`` as the record holds it,
    and another one."""
    record = json.loads((workdir / "results/train/preregistration.json").read_text())
    old = record["experiments"][experiment]["model_settings"][model]["batch_size"]
    return old, old // 2 if old > 1 else 2


def _targets(experiment: str, models: list[str]) -> list[str]:
    return [f"results/evaluate/{experiment}/{m}/seed-0/robustness.parquet" for m in models]


def _refused_touching_nothing(workdir: Path, targets: list[str], configs: list[str]) -> str:
    """Run to ``targets`` with ``configs``, which the guardrail refuses: the run fails before
    any job, with no traceback, and no file under results/ changes; reverting the config leaves
    nothing to do. Returns its stderr."""
    results = workdir / "results"
    before = {p: p.stat().st_mtime_ns for p in results.rglob("*") if p.is_file()}
    refused = snakemake(workdir, "--", *targets, configs=configs)
    assert refused.returncode != 0, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr and jobs_in(refused.stderr) == []
    assert {p: p.stat().st_mtime_ns for p in results.rglob("*") if p.is_file()} == before
    assert planned(workdir, "--", *targets) == []  # reverted: nothing lost, nothing to redo
    return refused.stderr


def _amended(workdir: Path, experiment: str, model: str, reason: str) -> dict:
    """The overlay changing ``model``'s batch size in ``experiment``, with its amendment."""
    _, new = _batch_size_change(workdir, experiment, model)
    changed = _own_space(workdir, experiment, model, new)
    changed["train"]["amendments"] = [
        {"experiment": experiment, "model": model, "reason": reason, "scope": "model"}
    ]
    return changed


def test_readme5_one_models_batch_size_reruns_that_models_jobs_only(copy_of_finished, tmp_path):
    """Section 5 with section 4's guardrail, on the outcomes this machine's run recorded (which
    models train differs between machines: `_st_outcomes` reads them). A model's batch size is
    pre-registered: changing it stops the workflow before any job runs, touching no file,
    naming `train.amendments` and `scope: model`. Recorded as an amendment, it is refused for a
    model that trained ("trained above chance"), again touching no file; for a model whose every
    trial ended at chance it is accepted, and then only that model's jobs run. Every outcome the
    run holds is checked: a model that trained, a model at chance, or both."""
    workdir = copy_of_finished
    models = yaml.safe_load(Path(CONFIGS[-1]).read_text())["train"]["models"]
    outcomes = _st_outcomes(workdir)
    assert {model for _, model in outcomes} == set(models), outcomes
    print(f"at chance in this run: {outcomes}")  # which checks below apply (-rP shows it)
    at_chance = [case for case, chance in outcomes.items() if chance]
    trained = [case for case, chance in outcomes.items() if not chance]

    # whatever the outcome: the change alone is refused
    experiment, model = (at_chance or trained)[0]
    _, new = _batch_size_change(workdir, experiment, model)
    changed = _own_space(workdir, experiment, model, new)
    stderr = _refused_touching_nothing(
        workdir, _targets(experiment, models), overlay(tmp_path, changed)
    )
    assert "train.amendments" in stderr and "scope: model" in stderr, stderr[-3000:]

    if trained:  # a model that trained: its amendment is refused, naming the trials
        experiment, model = trained[0]
        changed = _amended(workdir, experiment, model, "batch size")
        stderr = _refused_touching_nothing(
            workdir, _targets(experiment, models), overlay(tmp_path, changed)
        )
        assert f"amendment for model {model!r}" in stderr, stderr[-3000:]
        assert "trained above chance" in stderr, stderr[-3000:]

    if at_chance:  # a model at chance: amended, and its jobs alone rerun
        experiment, model = at_chance[0]
        old, new = _batch_size_change(workdir, experiment, model)
        reason = f"did not train at batch size {old} (every trial at chance): batch size {new}"
        configs = overlay(tmp_path, _amended(workdir, experiment, model, reason), "amended.yaml")
        targets = _targets(experiment, models)
        run = snakemake(workdir, "--", *targets, configs=configs)
        assert run.returncode == 0, run.stderr[-4000:]
        ran = jobs_in(run.stderr)
        assert {wc.get("model") for _, wc in ran} == {model}, ran
        rules = {rule for rule, _ in ran}
        assert {"train_draw_trials", "train_trial", "train_final", "evaluate_robustness"} <= rules
        record = json.loads((workdir / "results/train/preregistration.json").read_text())
        entry = record["experiments"][experiment]
        assert entry["model_settings"][model] == {"batch_size": new}
        assert [a["reason"] for a in entry["amendments"]] == [reason]
        result = json.loads(
            (workdir / f"results/train/{experiment}/{model}/final/seed-0/result.json").read_text()
        )
        assert json.loads(result["identity"])["batch_size"] == new
        assert planned(workdir, "--", *targets, configs=configs) == []


NEW_MODEL = "convnext_mini"  # a registered model the tiny config leaves out (README's sixth)


def test_readme5_a_new_model_with_its_own_batch_size_runs_its_jobs_only(copy_of_finished, tmp_path):
    """Section 5's my-change.yaml on the tiny run: one more model, with a batch size of its own,
    accepted whatever the trained models' accuracies. A dry run plans the new model's jobs in
    every experiment and no job of a trained model; run to one ST experiment's evaluations, only
    the new model's jobs run, the record registers its batch size and keeps every other entry,
    and nothing is left to do."""
    workdir = copy_of_finished
    tiny = yaml.safe_load(Path(CONFIGS[-1]).read_text())["train"]
    models = tiny["models"]
    assert NEW_MODEL not in models
    experiments = {(e["dataset"], e["protocol"]) for e in tiny["experiments"]}
    batch_sizes = {
        e["space"]: {"batch_size_overrides": {NEW_MODEL: 8}} for e in tiny["experiments"]
    }
    change = {"train": {"models": [*models, NEW_MODEL], "spaces": batch_sizes}}
    configs = overlay(tmp_path, change)

    plan = planned(workdir, configs=configs)
    assert {wc["model"] for _, wc in plan if "model" in wc} == {NEW_MODEL}, plan
    drawn = {(wc["dataset"], wc["protocol"]) for rule, wc in plan if rule == "train_draw_trials"}
    assert drawn == experiments, plan

    record_path = workdir / "results/train/preregistration.json"
    before = json.loads(record_path.read_text())["experiments"]
    dataset, protocol = tiny["experiments"][0]["dataset"], tiny["experiments"][0]["protocol"]
    assert protocol == "st"
    experiment = f"{dataset}/{protocol}"
    targets = _targets(experiment, [*models, NEW_MODEL])
    run = snakemake(workdir, "--", *targets, configs=configs)
    assert run.returncode == 0, run.stderr[-4000:]
    ran = jobs_in(run.stderr)
    assert {wc.get("model") for _, wc in ran} == {NEW_MODEL}, ran
    rules = {rule for rule, _ in ran}
    assert {"train_draw_trials", "train_trial", "train_final", "evaluate_robustness"} <= rules
    after = json.loads(record_path.read_text())["experiments"]
    assert after[experiment]["model_settings"].pop(NEW_MODEL) == {"batch_size": 8}
    assert NEW_MODEL in after[experiment].pop("models")
    before[experiment].pop("models")
    assert after == before  # the trained models' registrations, the definitions: unchanged
    result = json.loads(
        (workdir / f"results/train/{experiment}/{NEW_MODEL}/final/seed-0/result.json").read_text()
    )
    assert json.loads(result["identity"])["batch_size"] == 8
    assert planned(workdir, "--", *targets, configs=configs) == []
