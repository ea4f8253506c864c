"""The SLURM profiles on a real SLURM: a single-node cluster on loopback (scripts/slurm-local.sh).

As a user would: `imagenot slurm-profile` writes the site profile (here into a temporary HOME),
then `snakemake --profile slurm` runs from the clone's root, which also loads the workflow profile
profiles/default/. Checks that
  * every job went through SLURM: it is in the job completion log;
  * fan-out rules went as job arrays (one sbatch for the tasks of a rule);
  * GPU rules asked for a GPU the site's way (`--gres`, seen as tres-per-node gres:gpu:N), never
    by `--gpus`, and CPU rules asked for none;
  * a job that outgrew its memory request was killed by SLURM and its retry asked for more
    (memory grows with the attempt) and completed;
  * the outputs equal those of a local run of the same targets;
  * a training job run as an array task with a 1-minute time limit stops by its own deadline
    (checkpoint, exit 75) before the limit, and its retry resumes to an uninterrupted run's
    weights; scancel's SIGTERM reaches such a trainer, which checkpoints.
Needs root and apt (the harness installs slurmctld, slurmd, munge). Whatever the fixture started
is stopped by PID afterwards, also when the test fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import snakemake_rules
import yaml
from conftest import with_slurm

REPO = Path(__file__).resolve().parents[1]
HARNESS = REPO / "scripts" / "slurm-local.sh"
JOBCOMP = Path("/var/log/slurm/jobcomp.log")
CONFIGS = [str(REPO / "config" / "config.yaml"), str(REPO / ".test" / "config-slurm.yaml")]

# The SLURM run redoes, from a copy of a local run, caption selection of both LAION parts of a
# small demo world (.test/config-slurm.yaml) and the caption embedding of the first: the two
# caption jobs (a CPU rule) go as one job array (profiles/default slurm-array-jobs), run out of
# their first memory request (.test/config-slurm.yaml) and are retried with more; the embedding
# (a GPU rule, asking with --gres as the site profile says) waits for its part's captions from
# SLURM. One embedding, the costliest job, is enough for the GPU check.
SHARDS = ("00000", "00001")
EMBED_SHARD = SHARDS[0]
DATASET_DIR = "results/curate/imagenot"
TARGETS = [
    f"{DATASET_DIR}/scores/{EMBED_SHARD}.parquet",
    *(f"{DATASET_DIR}/captions/{shard}.parquet" for shard in SHARDS if shard != EMBED_SHARD),
]
REDO = [
    *(f"{DATASET_DIR}/captions/{shard}.{ext}" for shard in SHARDS for ext in ("parquet", "json")),
    f"{DATASET_DIR}/scores/{EMBED_SHARD}.parquet",
    f"{DATASET_DIR}/scores/{EMBED_SHARD}.json",
    f"{DATASET_DIR}/embeddings/{EMBED_SHARD}",  # the part's resumable chunks
]
# compared with the local run: every table the SLURM run makes
COMPARED = [*TARGETS, f"{DATASET_DIR}/captions/{EMBED_SHARD}.parquet"]
EXPECTED_RULES = {"curate_captions", "curate_embed"}
OOM_RULE = "curate_captions"
SLURMD_LOG = Path("/var/log/slurm/slurmd.log")
# The site profile as a user writes it (docs/cluster.md), for the test cluster: one partition
# `debug` with one (fake) GPU, GPUs by gres, no accounting database (squeue status).
SITE_ARGS = [
    "--partition",
    "debug",
    "--gpu-partition",
    "debug",
    "--max-gpus",
    "1",
    "--gpu-flag",
    "gres",
    "--status-command",
    "squeue",
    "--max-runtime",
    "60",
    "--retries",
    "1",
    # no conda here: jobs run with the clone's .venv (on PATH, passed by sbatch --export=ALL)
    "--software-deployment",
    "none",
]
# What the test machine adds to it: fast polling (MinJobAge=600 >= 3 x 5 s).
TEST_CLUSTER_KEYS = {
    "slurm-init-seconds-before-status-checks": 5,
    "seconds-between-status-checks": 5,
    "latency-wait": 10,
}

pytestmark = [pytest.mark.slurm, pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(2400)]


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root and apt to start SLURM (scripts/slurm-local.sh)"
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        return "needs apt to install SLURM (slurmctld, slurmd, munge), or SLURM installed"
    return None


def _env(home: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = f"{venv_bin}:{with_slurm(env.get('PATH', ''))}"
    if home is not None:
        env["HOME"] = str(home)
    return env


def gpu_rules() -> set[str]:
    """Rules that request GPUs (a ``gpu`` or ``gres`` resource: rules/common.smk gpu_request)
    under the test's configs, as Snakemake holds them (tests/snakemake_rules.py)."""
    rules = snakemake_rules.rules(*map(Path, CONFIGS))
    return {name for name, rule in rules.items() if {"gpu", "gres"} & set(rule.resources)}


@pytest.fixture(scope="module")
def slurm_cluster():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    was_up = (
        subprocess.run([str(HARNESS), "status"], env=_env(), capture_output=True).returncode == 0
    )
    started = subprocess.run([str(HARNESS), "start"], env=_env(), capture_output=True, text=True)
    try:
        assert started.returncode == 0, f"slurm-local.sh start failed:\n{started.stderr}"
        yield
    finally:
        if not was_up:  # stop only what this fixture started (the script stops by PID)
            subprocess.run([str(HARNESS), "stop"], env=_env(), capture_output=True)


def _run(cmd: list[str], home: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=REPO, env=_env(home), capture_output=True, text=True, timeout=1200
    )


def _local(workdir: Path) -> subprocess.CompletedProcess:
    cmd = ["snakemake", "--cores", "2", "--directory", str(workdir), "--configfile", *CONFIGS]
    return _run([*cmd, "--", *TARGETS])


def write_site_profile(home: Path) -> Path:
    """`imagenot slurm-profile` into HOME, plus the test machine's keys (TEST_CLUSTER_KEYS)."""
    directory = home / ".config" / "snakemake" / "slurm"
    written = _run(["imagenot", "slurm-profile", *SITE_ARGS, "--dir", str(directory)], home)
    assert written.returncode == 0, written.stderr
    profile = directory / "config.yaml"
    keys = yaml.safe_load(profile.read_text())
    profile.write_text(yaml.safe_dump({**keys, **TEST_CLUSTER_KEYS}, sort_keys=False))
    return directory


def _tree_digest(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {
        str(p.relative_to(path.parent)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files
    }


def _slurm_jobs(workdir: Path) -> dict[str, str]:
    """SLURM job -> rule, from the plugin's log files: rule_<rule>/<wildcards>/<jobid>.log for a
    single job, rule_<rule>/<arrayjobid>_<taskid>.log for a task of a job array."""
    jobs = {}
    for log in (workdir / ".snakemake" / "slurm_logs").rglob("*.log"):
        rule_dir = next(p for p in log.relative_to(workdir).parts if p.startswith("rule_"))
        jobs[log.stem] = rule_dir.removeprefix("rule_")
    return jobs


def _jobcomp() -> dict[str, dict[str, str]]:
    """Job (id, or <arrayjobid>_<taskid> for array tasks) -> its job completion log entry."""
    entries = {}
    for line in JOBCOMP.read_text().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "JobId" not in fields:
            continue
        if fields.get("ArrayTaskId", "") not in ("", "4294967294"):  # NO_VAL: not an array task
            entries[f"{fields['ArrayJobId']}_{fields['ArrayTaskId']}"] = fields
        entries[fields["JobId"]] = fields
    return entries


def _mem_mb(entry: dict[str, str]) -> int:
    """Memory a job asked for (the job completion log's Tres, mem=<n>M or <n>G)."""
    value = re.search(r"mem=(\d+)([MG])", entry["Tres"])
    return int(value.group(1)) * (1024 if value.group(2) == "G" else 1)


SQUEUE_FIELDS = "JobID:|,ArrayJobID:|,ArrayTaskID:|,tres-per-job:|,tres-per-node:|"


def _tres() -> dict[str, tuple[str, str]]:
    """Job -> (tres-per-job, tres-per-node) of jobs squeue still knows (`--gpus=N` shows in the
    first as gres:gpu:N, `--gres=gpu:N` in the second)."""
    out = subprocess.run(
        ["squeue", "--states=all", "--noheader", "-O", SQUEUE_FIELDS],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tres = {}
    for line in out.splitlines():
        row = [field.strip() for field in line.split("|")]
        if len(row) < 5:
            continue
        job, array_job, task, per_job, per_node = row[:5]
        tres[job] = (per_job, per_node)
        if task.isdigit():
            tres[f"{array_job}_{task}"] = (per_job, per_node)
    return tres


def _oom_killed(job_id: str) -> bool:
    return f"StepId={job_id}.batch exceeded memory limit" in SLURMD_LOG.read_text()


def test_gpu_rules_are_found():
    # the GPU assertion below relies on this reading of the rules
    assert "curate_embed" in gpu_rules(), (
        "curate_embed (a job of the run) requests no GPU under the test's configs"
    )


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def test_site_profile_runs_through_slurm(slurm_cluster, tmp_path):
    """`imagenot slurm-profile` (into a temporary HOME), then `snakemake --profile slurm` from the
    clone's root: arrays, GPUs by gres, an out-of-memory job retried with more memory."""
    local_dir, slurm_dir, home = tmp_path / "local", tmp_path / "slurm", tmp_path / "home"
    local = _local(local_dir)
    assert local.returncode == 0, local.stderr[-4000:]
    shutil.copytree(local_dir, slurm_dir, symlinks=True)
    for path in REDO:
        _remove(slurm_dir / path)

    write_site_profile(home)
    cmd = ["snakemake", "--profile", "slurm", "--directory", str(slurm_dir)]
    run = _run([*cmd, "--configfile", *CONFIGS, "--", *TARGETS], home)
    assert run.returncode == 0, run.stderr[-6000:]
    assert "Using profiles slurm and workflow specific profile profiles/default" in run.stderr

    jobs = _slurm_jobs(slurm_dir)
    assert jobs, "no SLURM job logs: did the slurm executor run?"
    assert set(jobs.values()) == EXPECTED_RULES, jobs
    entries = _jobcomp()
    for job, rule in jobs.items():
        assert job in entries, f"job {job} ({rule}) is not in the job completion log"

    # fan-out as job arrays: the two caption jobs went to SLURM in one array submission
    arrays = {rule for job, rule in jobs.items() if "_" in job}
    assert OOM_RULE in arrays, jobs

    # the first attempt of caption selection ran out of memory and was killed; the retry asked
    # for more and completed; every other job completed
    oom = [j for j, r in jobs.items() if r == OOM_RULE and _oom_killed(entries[j]["JobId"])]
    assert oom, f"no {OOM_RULE} job was killed for memory: {jobs}"
    retried = [j for j, r in jobs.items() if r == OOM_RULE and j not in oom]
    assert len(retried) == len(SHARDS), (jobs, oom)
    for job in retried:
        assert entries[job]["JobState"] == "COMPLETED", (job, entries[job])
        assert _mem_mb(entries[job]) > max(_mem_mb(entries[j]) for j in oom), (job, oom)
    for job, rule in jobs.items():
        if rule != OOM_RULE:
            assert entries[job]["JobState"] == "COMPLETED", (job, rule, entries[job])

    # GPUs by --gres (the site's flag), on GPU rules only, never by --gpus
    tres = _tres()
    gpu = gpu_rules()
    for job, rule in jobs.items():
        assert job in tres, f"job {job} ({rule}) no longer known to squeue"
        per_job, per_node = tres[job]
        assert "gpu" not in per_job, (job, rule, per_job)
        assert ("gpu" in per_node) == (rule in gpu), (job, rule, per_node)
    assert gpu & set(jobs.values()), "no GPU rule ran through SLURM"

    # same results as the local run
    for target in COMPARED:
        assert _tree_digest(slurm_dir / target) == _tree_digest(local_dir / target), target


def _scontrol_job(job: str) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job], env=_env(), capture_output=True, text=True
    ).stdout
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


# States of a job that has ended (scontrol's JobState)
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE"}  # fmt: skip


def _ended(job: str, log: Path, seconds: float = 900) -> dict[str, str]:
    """``scontrol show job`` of ``job`` once it has ended, asked every second. Not `sbatch
    --wait`: it asks 2, 10, 42, 74... s after submitting (sleeps of 2, 8, 32 s), which keeps a
    job of 20 s waited for 42 s."""
    waited = time.monotonic() + seconds
    while (state := _scontrol_job(job)).get("JobState") not in ENDED:
        assert time.monotonic() < waited, log.read_text()[-2000:] if log.exists() else job
        time.sleep(1)
    return state


def _shows(job: str, log: Path, text: str, seconds: float = 600) -> None:
    """Wait until ``log`` (the output of ``job``) shows ``text``, or ``job`` has ended."""
    waited = time.monotonic() + seconds
    while text not in (log.read_text(errors="replace") if log.exists() else ""):
        if _scontrol_job(job).get("JobState") in ENDED:
            return
        assert time.monotonic() < waited, log.read_text()[-2000:] if log.exists() else job
        time.sleep(1)


def _sbatch_array(cmd: list[str], minutes: int, log: Path, cwd: Path) -> str:
    """Submit ``cmd`` as a one-task job array with a time limit of ``minutes``, as the plugin
    submits an array rule's job (no srun step: the batch step runs it; the jobstep plugin
    drops SLURM_JOB_END_TIME from an array task's environment, so here too); return its job id
    (``<array job>_0``)."""
    line = " ".join(["env -u SLURM_JOB_END_TIME", *map(shlex.quote, cmd)])
    line += f" --runtime-min {minutes}"
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--array=0", f"--time={minutes}", "--mem=3000",
         "--cpus-per-task=1", f"--output={log}", f"--chdir={cwd}", f"--wrap={line}"],
        env=_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return submitted.stdout.strip().split(";")[0] + "_0"


def test_an_array_training_job_stops_before_its_time_limit_and_the_retry_resumes(
    slurm_cluster, tmp_path
):
    """A training job submitted as an array task (which no `--signal` warning reaches) with a
    time limit of 1 minute, training longer than that, stops by its own deadline (SLURM's end
    time from squeue less train.deadline_margin_minutes): it writes a checkpoint and exits 75
    before the limit (FAILED with 75, not TIMEOUT). Its retry, submitted as Snakemake's retry
    would (the same command, a longer limit), resumes there and ends with the weights and
    result of an uninterrupted run."""
    from test_train_preempt import _toy_trial

    from imagenot.train.checkpoints import read_state

    # 60 epochs without early stopping: about 30 s of training here (longer under load), past
    # the first job's deadline, which (margin 0.75 of its 1-minute limit, SLURM's least) comes
    # 15 s after the job started. The uninterrupted run to compare with starts once the first
    # job trains (not competing with its start-up, which the 15 s include), and runs while the
    # retry runs.
    space = {"s": {"budget": 1, "max_epochs": 60, "patience": 60, "batch_size": 4}}
    straight_cmd, run = _toy_trial(tmp_path / "local", spaces=space)
    cmd, run_slurm = _toy_trial(tmp_path / "slurm", spaces=space, deadline_margin_minutes=0.75)
    first_log, retry_log = tmp_path / "first.log", tmp_path / "retry.log"
    first = _sbatch_array(cmd, 1, first_log, tmp_path)
    _shows(first, first_log, "epoch 1:")
    straight_log = tmp_path / "straight.log"  # a file: a full pipe would stall the trainer
    with open(straight_log, "w") as f:
        straight = subprocess.Popen(straight_cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=f)

    job = _ended(first, first_log)
    log = first_log.read_text()
    assert (job["JobState"], job["ExitCode"]) == ("FAILED", "75:0"), (job, log[-3000:])
    assert "deadline reached: step-level checkpoint written" in log, log[-3000:]
    paused = read_state(run_slurm / "trial-0/checkpoint.safetensors")
    # it trained until the deadline, not stopped at start-up (a deadline already passed stops
    # the job after its first step), and left the rest to the retry
    assert paused.step > 1 and paused.epoch < 60, paused
    assert not (run_slurm / "stage-0/slot-0.json").exists()

    retry = _sbatch_array(cmd, 10, retry_log, tmp_path)
    assert straight.wait(timeout=600) == 0, straight_log.read_text()[-3000:]
    job = _ended(retry, retry_log)
    log = retry_log.read_text()
    assert (job["JobState"], job["ExitCode"]) == ("COMPLETED", "0:0"), (job, log[-3000:])
    assert f"at epoch {paused.epoch}, batch {paused.batch}" in log, log[-3000:]

    result = json.loads((run_slurm / "stage-0/slot-0.json").read_text())
    expected = json.loads((run / "stage-0/slot-0.json").read_text())
    assert result == expected
    best = "trial-0/best.safetensors"
    assert (run_slurm / best).read_bytes() == (run / best).read_bytes()


def test_scancel_of_an_array_training_job_reaches_the_trainer(slurm_cluster, tmp_path):
    """SLURM sends SIGTERM (scancel, preemption, the time limit) to every process of a job,
    also an array task's, whose rule runs in the batch step under the batch shell: the trainer
    gets it, writes a checkpoint and exits 75 within KillWait (docs/gpu.md)."""
    from test_train_preempt import _toy_trial

    from imagenot.train.checkpoints import read_state

    space = {"s": {"budget": 1, "max_epochs": 300, "patience": 300, "batch_size": 4}}
    cmd, run = _toy_trial(tmp_path, spaces=space, deadline_margin_minutes=0)
    log = tmp_path / "job.log"
    line = " ".join(map(shlex.quote, cmd)) + " --runtime-min 10"
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--array=0", "--time=10", "--mem=3000", "--cpus-per-task=1",
         f"--output={log}", f"--chdir={tmp_path}", f"--wrap={line}"],
        env=_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    job = submitted.stdout.strip().split(";")[0] + "_0"
    _shows(job, log, "epoch 3:")
    subprocess.run(["scancel", job], env=_env(), check=True)
    _ended(job, log, seconds=600)
    assert "SIGTERM received: step-level checkpoint written" in log.read_text(), log.read_text()[-2000:]  # fmt: skip
    assert read_state(run / "trial-0/checkpoint.safetensors").epoch >= 2
