"""The two-profile layout: the site profile written by `imagenot slurm-profile` and the workflow
profile profiles/default/ (docs/cluster.md). No SLURM needed: the plan is a dry run
(tests/test_slurm.py runs jobs on a real SLURM)."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import snakemake_rules
import yaml
from conftest import dry_run, planned_jobs, snakemake_workflow
from trial_records import write_decision

from imagenot.cli import main
from imagenot.core.config import ConfigError
from imagenot.plan import slurm_profile

REPO = Path(__file__).resolve().parents[1]
WORKFLOW_PROFILE = REPO / "profiles" / "default" / "config.yaml"
# (conda is not installed here: the site profile is told that jobs use it, as a site with it)
CONDA = ["--software-deployment", "conda"]
SITE_ARGS = ["--partition", "cpu", "--gpu-partition", "gpu", "--max-runtime", "720", *CONDA]


def _write(home: Path, *extra: str) -> Path:
    directory = home / ".config" / "snakemake" / "slurm"
    site = (
        SITE_ARGS[: -len(CONDA)]
        if {"--container", "--software-deployment"} & set(extra)
        else SITE_ARGS
    )
    assert main(["slurm-profile", *site, *extra, "--dir", str(directory)]) == 0
    return directory


def _workflow_profile() -> dict:
    return yaml.safe_load(WORKFLOW_PROFILE.read_text())


def _resource(rule, key: str):
    """The function that gives resource ``key`` of a job of rule object ``rule``, the rule's own
    (Snakemake wraps a size's in its unit's converter); None: a plain value, or no such
    resource."""
    if key not in rule.resources or not rule.resources[key].is_evaluable():
        return None
    return inspect.unwrap(rule.resources[key]._evaluator)


def _made_by(function, *makers: str) -> bool:
    """Whether ``function`` (a rule's resource) is one that a function of rules/common.smk named
    in ``makers`` returned (``class_resources``, ``work_resources``, ...)."""
    return function is not None and function.__qualname__.split(".")[0] in makers


def _calls(function, name: str) -> bool:
    """Whether ``function`` (a rule's own ``lambda``) calls ``name``."""
    return function is not None and name in function.__code__.co_names


def _job_class(rule) -> str | None:
    """The job class of a rule whose memory is ``**class_resources(CLASS)``'s, else None."""
    memory = _resource(rule, "mem_mb")
    if not _made_by(memory, "class_resources"):
        return None
    return inspect.getclosurevars(memory).nonlocals["job_class"]


def test_command_writes_the_site_profile(tmp_path):
    directory = _write(tmp_path, "--gpu-flag", "gres", "--account", "lab1")
    profile = yaml.safe_load((directory / "config.yaml").read_text())
    assert profile["executor"] == "slurm"
    assert profile["slurm-partition-config"] == str(directory / "partitions.yaml")
    assert profile["default-resources"] == ["slurm_account='lab1'"] or profile[
        "default-resources"
    ] == {"slurm_account": "'lab1'"}
    assert profile["config"] == [f'resources={{"site": "{directory / "site.yaml"}"}}']
    site = slurm_profile.load_site(directory / "site.yaml")
    assert site["gpu_flag"] == "gres" and site["max_runtime_min"] == 720
    assert site["status_command"] == "sacct"  # the schema default, filled
    parts = yaml.safe_load((directory / "partitions.yaml").read_text())["partitions"]
    assert parts == {
        "cpu": {"max_runtime": 720, "max_gpu": 0},
        "gpu": {"max_runtime": 720, "max_gpu": 8},
    }


def test_an_existing_site_profile_is_never_overwritten_silently(tmp_path, capsys):
    """The same command again changes nothing; other settings are refused in one line naming
    the file, with nothing written; --force replaces them and keeps the old files as .bak."""
    directory = _write(tmp_path, "--account", "lab1")
    before = {p.name: p.read_text() for p in directory.iterdir()}
    capsys.readouterr()
    assert main(["slurm-profile", *SITE_ARGS, "--account", "lab1", "--dir", str(directory)]) == 0
    assert {p.name: p.read_text() for p in directory.iterdir()} == before
    capsys.readouterr()  # (what it said: the software deployment)
    other = ["slurm-profile", *SITE_ARGS, "--account", "lab2", "--dir", str(directory)]
    assert main(other) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(directory / "config.yaml") in err, err
    assert "--force" in err
    assert {p.name: p.read_text() for p in directory.iterdir()} == before
    assert main([*other, "--force"]) == 0
    out = capsys.readouterr().out
    assert f"the previous one is kept as {directory / 'config.yaml.bak'}" in out, out
    assert (directory / "config.yaml.bak").read_text() == before["config.yaml"]
    assert "lab2" in (directory / "config.yaml").read_text()
    assert not (directory / "partitions.yaml.bak").exists()  # unchanged: no backup
    # a second replacement keeps the first backup
    assert main([*other[:-3], "lab3", "--dir", str(directory), "--force"]) == 0
    assert (directory / "config.yaml.bak").read_text() == before["config.yaml"]
    assert "lab2" in (directory / "config.yaml.bak.2").read_text()


def test_one_partition_for_cpu_and_gpu(tmp_path):
    site = slurm_profile.validate_site(
        {"partition": "p", "gpu_partition": "p", "max_runtime_min": 60, "max_gpus": 2}, "t"
    )
    assert slurm_profile.partitions(site) == {
        "partitions": {"p": {"max_runtime": 60, "max_gpu": 2}}
    }


def test_site_keys_never_collide_with_the_workflow_profile(tmp_path):
    # Snakemake merges the profiles key by key and the workflow profile wins: a site key that the
    # workflow profile also sets would be dropped without a word.
    directory = _write(tmp_path, "--account", "lab1", "--conda-prefix", "/shared/conda")
    site_keys = set(yaml.safe_load((directory / "config.yaml").read_text()))
    assert not site_keys & set(_workflow_profile())


def test_bad_site_input_is_named(tmp_path, capsys):
    bad = tmp_path / "site.yaml"
    bad.write_text("partition: cpu\ngpu_partition: gpu\nmax_runtime_min: 60\ngpu_flg: gres\n")
    with pytest.raises(ConfigError, match=rf"(?s){bad}: .*'gpu_flg'"):
        slurm_profile.load_site(bad)
    with pytest.raises(FileNotFoundError, match="imagenot slurm-profile"):
        slurm_profile.load_site(tmp_path / "missing.yaml")
    with pytest.raises(SystemExit):  # argparse: choices come from the schema enum
        main(["slurm-profile", *SITE_ARGS, "--gpu-flag", "gpu"])
    assert "gpus" in capsys.readouterr().err
    assert main(["slurm-profile", *SITE_ARGS, "--max-runtime", "0", "--dir", str(tmp_path)]) == 2
    assert "max_runtime_min" in capsys.readouterr().err
    assert main(["slurm-profile", *SITE_ARGS, "--jobs", "50", "--dir", str(tmp_path)]) == 2
    assert "array_limit (100) must not exceed jobs (50)" in capsys.readouterr().err


def test_gpu_request_follows_the_site():
    config = {"resources": {"gpus": 2}}
    site = {"gpu_flag": "gres", "gpu_model": None}
    # several GPUs of one job on one node: --nodes=1, or SLURM may split them over nodes
    assert slurm_profile.gpu_request(config, None) == {"gpu": 2, "nodes": 1}
    assert slurm_profile.gpu_request(config, site) == {"gres": "gpu:2", "nodes": 1}
    assert slurm_profile.gpu_request(config, {**site, "gpu_model": "a100"}) == {
        "gres": "gpu:a100:2",
        "nodes": 1,
    }
    assert slurm_profile.gpu_request(config, {"gpu_flag": "gpus", "gpu_model": "a100"}) == {
        "gpu": 2,
        "gpu_model": "a100",
        "nodes": 1,
    }
    assert slurm_profile.gpu_request(config, None, 1) == {"gpu": 1}  # one GPU: one node anyway
    assert slurm_profile.gpu_request({"resources": {"gpus": 0}}, site) == {}
    # every GPU job gets the cores that feed its GPUs; a CPU job keeps its rule's own
    fed = {"resources": {"gpus": 2, "cpus_per_gpu": 6}}
    assert slurm_profile.gpu_threads(fed, 2) == 12
    assert slurm_profile.gpu_threads({"resources": {"gpus": 0, "cpus_per_gpu": 6}}, 2) == 2


def test_every_rule_asks_for_its_own_memory_and_runtime():
    """Every rule with a job names its memory and runtime in its own resources (a class, its
    input's size, or a training process's), so a run without the workflow profile asks for the
    same; the workflow profile sets none."""
    profile = _workflow_profile()
    assert "set-resources" not in profile and "default-resources" not in profile
    rules = snakemake_rules.rules()  # as Snakemake holds them (tests/snakemake_rules.py)
    for name, rule in rules.items():
        if not snakemake_rules.runs_something(rule):
            continue  # a gather of targets (rules all, preflight): no job
        memory, runtime = _resource(rule, "mem_mb"), _resource(rule, "runtime")
        classed = _made_by(memory, "class_resources") and _made_by(runtime, "class_resources")
        own = _made_by(memory, "work_resources", "train_slot_resources") and _made_by(
            runtime, "work_resources", "train_slot_resources"
        )
        process = _calls(memory, "process_mem_mb") and (
            _made_by(runtime, "class_runtime") or _calls(runtime, "final_runtime_min")
        )
        assert [classed, own, process].count(True) == 1, name
    arrays = profile["slurm-array-jobs"].split(",")
    assert set(arrays) <= set(rules), set(arrays) - set(rules)


def test_resources_grow_with_attempt_up_to_the_maximum():
    from imagenot.core.config import validate_config
    from imagenot.plan import job_resources

    config = validate_config({"resources": {"max_runtime_min": 720}})
    for job_class in config["resources"]["classes"]:
        mem = [job_resources.mem_mb(config, job_class, a) for a in (1, 2, 3)]
        assert all(isinstance(m, int) for m in mem), (job_class, mem)
        assert mem[0] < mem[1] < mem[2], (job_class, mem)
        runtime = [job_resources.runtime_min(config, job_class, a) for a in (1, 2, 3, 10)]
        assert runtime == sorted(runtime) and runtime[-1] == 720, (job_class, runtime)
        assert runtime[0] < runtime[1] or runtime[0] == 720, (job_class, runtime)
    full = validate_config({})
    assert job_resources.runtime_min(full, "gpu") == 1440
    assert job_resources.runtime_min(config, "gpu") == 720  # capped at the site maximum
    with pytest.raises(ValueError, match="resource class 'huge' is not one of"):
        job_resources.mem_mb(full, "huge")


def test_no_rule_asks_slurm_for_a_warning_signal():
    """USR1 without B: kills a job step's Snakemake and misses array tasks, with B: it kills the
    plugin's batch shell; training stops by its own deadline and on SIGTERM instead (docs/gpu.md
    "Preemption and time limits"). The rule files' text is searched, not the rule objects: a
    flag to SLURM can sit in any expression (a resource's function, a ``slurm_extra``), which a
    rule object holds unevaluated until a job exists."""
    texts = [p.read_text() for p in (REPO / "rules").glob("*.smk")]
    assert not any("--signal" in t for t in texts)
    assert "--signal" not in (REPO / "profiles" / "default" / "config.yaml").read_text()


def test_plan_with_the_site_profile_from_the_clone_root(tmp_path):
    """`imagenot slurm-profile`, then `snakemake --profile slurm -n all` from the clone's root
    plans; GPU rules ask with gres as the site says, every runtime within the site maximum."""
    home = tmp_path / "home"
    _write(home, "--gpu-flag", "gres")
    env = {**os.environ, "HOME": str(home)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    cmd = [
        "snakemake",
        "--profile",
        "slurm",
        # this machine has no conda: plan without deploying envs (the site profile says conda)
        "--software-deployment-method",
        "env-modules",
        "-n",
        "--forceall",  # every job
        # from the clone's root, but results/ in an empty folder (never the working tree's)
        "--directory",
        str(tmp_path / "work"),
        "--configfile",
        "config/config.yaml",
        ".test/config-slurm.yaml",  # resources.gpus: 1
        "--",
        "all",
    ]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    assert "Using profiles slurm and workflow specific profile profiles/default" in out
    assert re.search(r"rule train_trial:(?:\n    .*)*\n    resources: .*gres=gpu:1", out)
    assert re.search(r"rule prepare_wordnet:(?:\n    .*)*\n    resources: .*runtime=30", out)
    assert "gpu=1" not in out  # no --gpus under the gres style
    runtimes = [int(r) for r in re.findall(r"runtime=(\d+)", out)]
    assert runtimes and max(runtimes) <= 720


# ---- downloads where the internet is -------------------------------------------------------------
def _slot_config(**resources):
    from imagenot.core.config import load_config

    config = load_config(REPO / "config" / "config.yaml")
    config["resources"].update({"gpus": 1, **resources})
    return config


def test_a_slot_is_sized_from_its_promotion_input(tmp_path):
    """An empty slot (its rung promoted fewer trials than there are slots) asks for one core,
    little memory and a short runtime; a slot that trains, and any slot while its decision is
    not written yet (planning), asks for the full GPU job; both grow per attempt, capped."""
    from imagenot.train import resources as train_resources

    config = _slot_config(max_runtime_min=2000)
    decision = tmp_path / "rung-0.json"
    write_decision(decision, [3], slots=2)
    missing = str(tmp_path / "rung-9.json")
    own = config["resources"]["train_trial"]
    assert own == {"mem_mb": 32000, "runtime_min": 1440, "empty_mem_mb": 2000,
                   "empty_runtime_min": 10, "runtime_estimate_factor": 3,
                   "startup_min": 15}  # fmt: skip
    for previous, slot in (([], 5), (str(decision), 0), (missing, 1)):  # trains / unknown
        assert train_resources.slot_trains(previous, slot), (previous, slot)
        assert (
            train_resources.slot_threads(config, previous, slot)
            == config["resources"]["cpus_per_gpu"]
        )
        assert train_resources.slot_mem_mb(config, previous, slot, 1) == 32000
        assert train_resources.slot_runtime_min(config, previous, slot, 1) == 1440
        assert train_resources.slot_runtime_min(config, previous, slot, 2) == 2000  # capped
    assert not train_resources.slot_trains(str(decision), 1)
    assert train_resources.slot_threads(config, str(decision), 1) == 1
    assert train_resources.slot_mem_mb(config, str(decision), 1, 1) == 2000
    assert train_resources.slot_mem_mb(config, str(decision), 1, 2) == 3000  # attempt_growth 1.5
    assert train_resources.slot_runtime_min(config, str(decision), 1, 1) == 10
    # the SLURM plugin (2.8) submits an array with its first task's resources for every task:
    # slots sized one by one must go one sbatch each
    assert "train_trial" not in _workflow_profile()["slurm-array-jobs"].split(",")


def _plugin_job(resources: dict, threads: int):
    class Resources(dict):
        __getattr__ = dict.__getitem__

    class Job:
        name = "train_trial"
        is_group = staticmethod(lambda: False)

    job = Job()
    job.resources, job.threads = Resources(resources), threads
    return job


@pytest.mark.parametrize("flag", ["gpus", "gres"])
def test_an_empty_slot_goes_to_the_cpu_partition_without_a_gpu(tmp_path, flag):
    """What the SLURM plugin submits for the two kinds of slot (its own functions, the
    partitions file `imagenot slurm-profile` writes): no --gpus/--gres and the CPU partition
    for an empty slot; the GPU partition, the GPU and its cores for a slot that trains."""
    from snakemake_executor_plugin_slurm.partitions import get_best_partition, read_partition_file
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    from imagenot.train import resources as train_resources

    site = slurm_profile.validate_site(
        {"partition": "cpu", "gpu_partition": "gpu", "max_runtime_min": 720, "gpu_flag": flag},
        "test",
    )
    (tmp_path / "partitions.yaml").write_text(yaml.safe_dump(slurm_profile.partitions(site)))
    partitions = read_partition_file(tmp_path / "partitions.yaml")
    config = _slot_config(max_runtime_min=720)
    decision = str(tmp_path / "rung-0.json")
    write_decision(Path(decision), [3], slots=2)
    full = slurm_profile.gpu_request(config, site, 1)

    class Log:
        info = debug = warning = staticmethod(lambda *a, **k: None)

    submitted = {}
    for slot in (0, 1):  # as rules/common.smk train_slot_resources asks
        resources = {
            **(full if train_resources.slot_trains(decision, slot) else {}),
            "mem_mb": train_resources.slot_mem_mb(config, decision, slot, 1),
            "runtime": train_resources.slot_runtime_min(config, decision, slot, 1),
        }
        job = _plugin_job(resources, train_resources.slot_threads(config, decision, slot))
        partition = get_best_partition(partitions, job, Log())
        params = {"run_uuid": "u", "slurm_logfile": "l", "comment_str": "c", "account": "",
                  "partition": f"-p {partition}", "workdir": None}  # fmt: skip
        submitted[slot] = get_submit_command(job, params) + set_gres_string(job)
    assert " -p gpu " in submitted[0] and "--cpus-per-task=8" in submitted[0]
    assert ("--gpus=1" if flag == "gpus" else "--gres=gpu:1") in submitted[0]
    assert " -p cpu " in submitted[1] and "gpu" not in submitted[1]
    assert "--cpus-per-task=1" in submitted[1] and "--mem 2000" in submitted[1]
    assert "-t 10 " in submitted[1]


def test_snakemake_sizes_an_empty_slot_when_its_decision_exists(tmp_path):
    """The workflow itself (a dry run with a GPU config): the stage-1 slot whose rung decision
    promoted nothing asks for no GPU, one core, 2 GB and 10 minutes; a slot whose decision
    promotes a trial, and one whose decision is not written yet, ask for the GPU job."""
    run = tmp_path / "results" / "train" / "imagenot" / "st"
    for model, decision in (("resnet_mini", []), ("vgg_mini", [1])):
        (run / model / "halving").mkdir(parents=True)
        write_decision(run / model / "halving" / "rung-0.json", decision)
    targets = [
        f"results/train/imagenot/st/{m}/stage-1/slot-0.json"
        for m in ("resnet_mini", "vgg_mini", "alexnet_mini")
    ]
    stdout = dry_run(tmp_path, [".test/config-slurm.yaml"], targets)
    jobs = planned_jobs(stdout, "train_trial", r"output: \S+/st/(\w+)/stage-1/slot-0\.json")
    assert set(jobs) == {"resnet_mini", "vgg_mini", "alexnet_mini"}, stdout[-3000:]
    cpus = yaml.safe_load((REPO / ".test" / "config-slurm.yaml").read_text())["resources"][
        "cpus_per_gpu"
    ]
    empty = jobs.pop("resnet_mini")
    assert "gpu" not in re.search(r"resources: (.*)", empty).group(1)
    assert "runtime=10," in empty and "mem_mb=2000," in empty and "threads:" not in empty
    for model, block in jobs.items():
        resources = re.search(r"resources: (.*)", block).group(1)
        assert "gpu=1" in resources and "runtime=1440" in resources, (model, block)
        assert f"threads: {cpus}" in block, (model, block)  # resources.cpus_per_gpu x 1 GPU


def test_an_empty_slot_runs_without_a_gpu_under_a_gpu_config(tmp_path):
    """The job itself, run by Snakemake (local executor) on this GPU-less machine under a config
    that plans GPUs: the empty slot asks for 2 GB, 10 min and no GPU, and writes its empty
    result without a device check (it imports no torch). Upstream files are stand-ins: only
    train_trial may run (--allowed-rules)."""
    import time

    results = tmp_path / "results"
    run = results / "train" / "imagenot" / "st" / "resnet_mini"
    (run / "halving").mkdir(parents=True)
    (results / "datasets" / "imagenot").mkdir(parents=True)
    for stand_in in ("manifest.parquet", "classes.txt", "fingerprint.txt"):
        (results / "datasets/imagenot" / stand_in).touch()
    (run / "trials.parquet").touch()
    time.sleep(1.1)  # the decision is newer than its stand-in inputs
    write_decision(run / "halving" / "rung-0.json", [])
    target = "results/train/imagenot/st/resnet_mini/stage-1/slot-0.json"
    cmd = ["snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
           "--allowed-rules", "train_trial", "--cores", "4", "--configfile", "config/config.yaml",
           ".test/config-slurm.yaml", "--", target]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    resources = re.search(r"rule train_trial:(?:\n    .*)*?\n    resources: (.*)", log).group(1)
    assert "gpu" not in resources and "mem_mb=2000," in resources and "runtime=10," in resources
    assert yaml.safe_load((tmp_path / target).read_text())["trial"] is None


def test_download_placement():
    from imagenot.acquire.plan import download_local

    local = {"acquire": {"download_on": "local"}}
    cluster = {"acquire": {"download_on": "cluster"}}
    with_partition = {"download_partition": "transfer"}
    assert download_local(local, None) and download_local(local, {"download_partition": None})
    assert not download_local(local, with_partition)  # jobs, in the partition with internet
    assert not download_local(cluster, None)
    assert slurm_profile.download_resources("local", with_partition) == {
        "slurm_partition": "transfer"
    }
    assert slurm_profile.download_resources("cluster", with_partition) == {}
    assert slurm_profile.download_resources("local", None) == {}


def test_a_part_without_internet_fails_with_the_reason(tmp_path):
    from imagenot.acquire.download import DownloadError, check_reachable

    offline = {"network_error": 45, "timeout": 5, "success": 0}
    with pytest.raises(DownloadError, match=r"part 3: 50 of 50 .*download_on: local"):
        check_reachable(offline, 3, 0.9, tmp_path)
    # dead links are not a missing internet; small parts are not judged
    check_reachable({"http_error": 50}, 3, 0.9, tmp_path)
    check_reachable({"network_error": 19}, 3, 0.9, tmp_path)
    check_reachable({"network_error": 40, "success": 10}, 3, 0.9, tmp_path)


def _parsed(tmp_path: Path, *configfiles: Path) -> tuple[set[str], set]:
    """(local rules, the rules' containers) of the workflow parsed with these config files
    (Snakemake's API: parses the Snakefile, plans nothing)."""
    configs = [REPO / "config" / "config.yaml", *configfiles]
    with snakemake_workflow(tmp_path, configs) as workflow_api:
        workflow = workflow_api._workflow
        containers = {rule.container_img for rule in workflow.rules if rule.name != "all"}
        return set(workflow._localrules), containers


def _local_rules(tmp_path: Path, *configfiles: Path) -> set[str]:
    return _parsed(tmp_path, *configfiles)[0]


def test_downloads_run_on_the_submitting_node_when_asked(tmp_path, monkeypatch):
    """acquire.download_on: local makes both download rules local rules (the submitting node);
    with a download partition in the site settings they stay jobs, sent there."""
    downloads = {"acquire_download", "acquire_topup_download"}
    monkeypatch.chdir(REPO)
    local = tmp_path / "local.yaml"
    local.write_text("acquire:\n  download_on: local\n")
    assert downloads <= _local_rules(tmp_path / "a", local)
    assert not downloads & _local_rules(tmp_path / "b")
    directory = _write(tmp_path / "home", "--download-partition", "transfer")
    site = tmp_path / "site.yaml"
    site.write_text(f"resources:\n  site: {directory / 'site.yaml'}\n")
    assert not downloads & _local_rules(tmp_path / "c", local, site)


def test_bookkeeping_rules_are_local_and_light(tmp_path, monkeypatch):
    """Bookkeeping (drawing trials, halving, selection, gathers, small tables and plots) runs on
    the submitting host, not as jobs; none of it is heavy or a fan-out array."""
    monkeypatch.chdir(REPO)
    local = _local_rules(tmp_path)
    assert {"train_halve", "train_select", "acquire_build", "rankings_json", "results_table"} <= (
        local
    )
    assert {"diagnostics_table", "diagnostics_figure"} <= local
    profile = _workflow_profile()
    rules = snakemake_rules.rules()
    for rule in local - {"preflight"}:  # preflight gathers the preflight's reports: no job
        assert _job_class(rules[rule]) == "light", rule
    assert not local & set(profile["slurm-array-jobs"].split(","))


# ---- Apptainer, for sites without conda -------------------------------------------------------
DEFINITION = REPO / "containers" / "imagenot.def"


def test_a_site_with_an_image_runs_every_job_in_it(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    image = "/images/imagenot.sif"
    directory = _write(tmp_path / "home", "--container", image)
    profile = yaml.safe_load((directory / "config.yaml").read_text())
    assert profile["software-deployment-method"] == "apptainer"
    # the node's GPUs and driver inside the image, and the clone whose package every job runs
    assert profile["apptainer-args"] == f"--nv --bind {REPO}"
    site = tmp_path / "site.yaml"
    site.write_text(f"resources:\n  site: {directory / 'site.yaml'}\n")
    assert _parsed(tmp_path / "a", site)[1] == {image}
    assert _parsed(tmp_path / "b")[1] == {None}  # conda envs, as before


def test_the_site_profile_says_how_jobs_get_their_software(tmp_path, monkeypatch):
    """conda, apptainer (with an image) or none (the clone's .venv alone): a submit node without
    conda needs none of it. Not said and no conda here: the command asks, naming the choices."""
    monkeypatch.setenv("PATH", "/nonexistent")  # no conda, no mamba
    none = _write(tmp_path / "none", "--software-deployment", "none", "--conda-prefix", "/c")
    profile = yaml.safe_load((none / "config.yaml").read_text())
    assert "software-deployment-method" not in profile and "conda-prefix" not in profile
    assert yaml.safe_load((none / "site.yaml").read_text())["software_deployment"] == "none"
    conda = yaml.safe_load((_write(tmp_path / "conda") / "config.yaml").read_text())
    assert conda["software-deployment-method"] == "conda"
    image = _write(tmp_path / "image", "--container", "/images/imagenot.sif")
    assert yaml.safe_load((image / "site.yaml").read_text())["software_deployment"] == "apptainer"
    directory = tmp_path / "asked" / ".config" / "snakemake" / "slurm"
    asked = ["slurm-profile", *SITE_ARGS[: -len(CONDA)], "--dir", str(directory)]
    with pytest.raises(ValueError, match=r"--software-deployment conda\|apptainer\|none"):
        _run(asked)
    assert not directory.exists()
    for bad, message in (
        (["--software-deployment", "apptainer"], "needs --container IMAGE"),
        (["--software-deployment", "none", "--container", "/i.sif"], "apptainer, not none"),
    ):
        with pytest.raises(ValueError, match=message):
            _run(["slurm-profile", *SITE_ARGS[: -len(CONDA)], *bad])


def _run(argv: list[str]):
    """The command's handler on ``argv``, its errors raised (``imagenot.cli.main`` prints them)."""
    from imagenot.cli import build_parser

    args = build_parser().parse_args(argv)
    return args.func(args)


def test_the_image_holds_the_locked_set_and_the_package():
    """containers/imagenot.def: the env files' Python, requirements.lock, and this checkout's
    package installed as a copy (never editable)."""
    from test_envs import PYTHON

    text = DEFINITION.read_text()
    assert re.search(rf"^From: python:{re.escape(PYTHON)}-slim-bookworm$", text, flags=re.M)
    from imagenot.core.conda_envs import CUDA_VARIANTS

    files = text.split("%files", 1)[1].split("%post", 1)[0].split()
    locks = {variant.lock for variant in CUDA_VARIANTS.values()}  # each CUDA variant's lock
    assert {"pyproject.toml", "workflow", *locks} <= set(files[::2])
    # the build argument LOCK picks one, requirements.lock (CUDA 13) unless given
    arguments = text.split("%arguments", 1)[1].split("%files", 1)[0].split()
    assert arguments == ["LOCK=requirements.lock"]
    post = text.split("%post", 1)[1].split("%environment", 1)[0]
    assert re.search(r"pip install .*-r /opt/imagenot/src/\{\{ LOCK \}\}$", post, flags=re.M)
    assert re.search(r"pip install .*--no-deps /opt/imagenot/src$", post, flags=re.M)
    assert " -e " not in post


@pytest.mark.slow
def test_the_image_builds(tmp_path):
    import shutil

    apptainer = shutil.which("apptainer")
    if apptainer is None:
        pytest.skip("Apptainer is not installed here: the image is built only where it exists")
    image = tmp_path / "imagenot.sif"
    built = subprocess.run(
        [apptainer, "build", str(image), str(DEFINITION)], cwd=REPO, capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-4000:]
    version = subprocess.run([apptainer, "run", str(image), "--version"], capture_output=True)
    assert version.returncode == 0 and b"imagenot" in version.stdout


# ---- CUDA variant of the GPU envs --------------------------------------------------------------
def _rule_envs(tmp_path: Path, *configfiles: Path) -> tuple[dict[str, str], set[str]]:
    """({rule: its conda env file}, the GPU rules) of the workflow parsed with these config files
    over the demo config with one GPU per GPU rule."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    gpus = tmp_path / "gpus.yaml"
    gpus.write_text("resources:\n  gpus: 1\n")
    configs = [REPO / "config" / "config.yaml", gpus, *configfiles]
    with snakemake_workflow(tmp_path, configs) as workflow_api:
        workflow = workflow_api._workflow
        rules = [rule for rule in workflow.rules if rule.name != "all"]
        envs = {rule.name: rule.conda_env for rule in rules}
        gpu = {rule.name for rule in rules if {"gpu", "gres"} & set(rule.resources)}
        return envs, gpu


def test_the_cuda_key_switches_the_env_of_every_gpu_rule(tmp_path, monkeypatch):
    """config resources.cuda (or the site's `cuda`) picks the CUDA variant of the GPU envs for
    every GPU rule, and for the CPU rules sharing those envs (one variant per checkout); the
    other envs stay as they are."""
    from imagenot.core.conda_envs import CUDA_VARIANTS, GPU_ENVS

    monkeypatch.chdir(REPO)
    gpu_env_files = {
        f"../envs/{env}{variant.suffix}.yaml": cuda
        for cuda, variant in CUDA_VARIANTS.items()
        for env in GPU_ENVS
    }
    default, gpu_rules = _rule_envs(tmp_path / "default")
    assert {"curate_embed", "train_trial", "train_final", "evaluate_robustness"} <= gpu_rules
    assert {default[rule] for rule in gpu_rules} == {"../envs/curate.yaml", "../envs/train.yaml"}
    cu12 = tmp_path / "cu12.yaml"
    cu12.write_text("resources:\n  cuda: '12'\n")
    chosen, gpu_rules_12 = _rule_envs(tmp_path / "cu12", cu12)
    assert gpu_rules_12 == gpu_rules
    assert {chosen[rule] for rule in gpu_rules} == {
        "../envs/curate-cu12.yaml",
        "../envs/train-cu12.yaml",
    }
    for rule, env in default.items():
        if env in gpu_env_files:  # every rule of a GPU env follows the key
            assert gpu_env_files[env] == "13" and gpu_env_files[chosen[rule]] == "12", rule
        else:
            assert chosen[rule] == env, rule
    # the site's driver decides over the workflow config: --cuda 12 with resources.cuda 13
    directory = _write(tmp_path / "home", "--cuda", "12")
    assert slurm_profile.load_site(directory / "site.yaml")["cuda"] == "12"
    site = tmp_path / "site.yaml"
    site.write_text(f"resources:\n  cuda: '13'\n  site: {directory / 'site.yaml'}\n")
    assert _rule_envs(tmp_path / "site", site)[0] == chosen


def test_cuda_choices_come_from_the_registry(tmp_path, capsys):
    from imagenot.core.conda_envs import CUDA_VARIANTS, cuda_major, env_file
    from imagenot.core.config import ConfigError, load_schema, validate_config
    from imagenot.core.registries import RegistryError, names

    # the schemas name the registry; loaded, they list its names
    for name in ("resources.schema.yaml", "site.schema.yaml"):
        assert "x-registry: cuda_variants" in (REPO / "workflow" / "schemas" / name).read_text()
    assert names("cuda_variants") == tuple(CUDA_VARIANTS)
    cuda = load_schema("resources.schema.yaml")["properties"]["cuda"]
    assert cuda["enum"] == list(CUDA_VARIANTS)
    with pytest.raises(ConfigError, match=r"cuda: 12 is not allowed"):
        validate_config({"cuda": 12}, schema="resources.schema.yaml")
    config = {"resources": {"cuda": "13"}}
    assert cuda_major(config, None) == "13"
    assert cuda_major(config, {"cuda": None}) == "13"
    assert cuda_major(config, {"cuda": "12"}) == "12"
    assert env_file({"resources": {"cuda": "12"}}, "train") == "../envs/train-cu12.yaml"
    with pytest.raises(ValueError, match="not a GPU env"):
        env_file(config, "analyse")
    with pytest.raises(RegistryError, match="unknown CUDA variant '11'"):
        env_file({"resources": {"cuda": "11"}}, "train")
    for variant in CUDA_VARIANTS.values():
        assert (REPO / variant.lock).is_file(), variant
    with pytest.raises(SystemExit):
        _write(tmp_path, "--cuda", "11")
    assert "--cuda: invalid choice: '11'" in capsys.readouterr().err


# ---- training jobs over several nodes (train.nodes_per_job) --------------------------------------
def test_multi_node_jobs_ask_whole_nodes_of_gpus():
    """A multi-node job asks --nodes and its GPUs per node with --gres (SLURM counts it per
    node) whatever the site's flag: the plugin's --gpus is a job total that SLURM may split
    unevenly, and it has no --gpus-per-node."""
    config = {"resources": {"gpus": 1}}
    for site in (None, {"gpu_flag": "gpus", "gpu_model": None}):
        assert slurm_profile.gpu_request(config, site, 4, nodes=2) == {"gres": "gpu:4", "nodes": 2}
    a100 = {"gpu_flag": "gres", "gpu_model": "a100"}
    assert slurm_profile.gpu_request(config, a100, 8, 3) == {"gres": "gpu:a100:8", "nodes": 3}
    # one node of 4 GPUs: --gpus=4 on exactly one node
    assert slurm_profile.gpu_request(config, None, 4, nodes=1) == {"gpu": 4, "nodes": 1}


def test_the_plugin_submits_a_multi_node_job_with_gpus_cores_and_memory_per_node():
    """What the SLURM executor plugin makes of a multi-node training job's resources: one task
    per node, each with the node's GPUs (gres), cores (threads) and memory (--mem is per node),
    and nothing that would split the GPUs or multiply the tasks."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    from imagenot.train import plan
    from imagenot.train import resources as train_resources

    class Resources(dict):
        __getattr__ = dict.__getitem__

    config = {
        "resources": {"gpus": 1, "cpus_per_gpu": 6},
        "train": {"gpus_per_job": 8, "gpus_per_job_overrides": {}, "nodes_per_job": 2},
    }
    resources = slurm_profile.gpu_request(config, None, plan.gpus_per_node(config), plan.nodes(config))  # fmt: skip
    job = type("Job", (), {})()
    job.threads = train_resources.threads(config)
    job.resources = Resources(resources, mem_mb=4 * 32000, runtime=60)
    params = {"run_uuid": "u", "slurm_logfile": "l", "comment_str": "c", "account": "", "partition": "-p gpu", "workdir": "."}  # fmt: skip
    call = (get_submit_command(job, params) + set_gres_string(job)).split()  # as the plugin
    assert {"--nodes=2", "--gres=gpu:4", "--cpus-per-task=24", "--mem"} <= set(call), call
    assert call[call.index("--mem") + 1] == "128000"
    assert not [o for o in call if o.startswith(("--ntasks", "--gpus"))], call


def test_the_plugin_submits_a_one_node_multi_gpu_job_on_one_node():
    """A data-parallel job on one node (torchrun --standalone) asks SLURM for exactly one node:
    ``--gpus=4`` alone lets SLURM spread the 4 GPUs over nodes the one launcher cannot reach."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    from imagenot.train import plan
    from imagenot.train import resources as train_resources

    class Resources(dict):
        __getattr__ = dict.__getitem__

    config = {
        "resources": {"gpus": 1, "cpus_per_gpu": 6},
        "train": {"gpus_per_job": 4, "gpus_per_job_overrides": {}, "nodes_per_job": 1},
    }
    for site in (None, {"gpu_flag": "gres", "gpu_model": None}):
        resources = slurm_profile.gpu_request(config, site, plan.gpus_per_node(config), plan.nodes(config))  # fmt: skip
        job = type("Job", (), {})()
        job.threads = train_resources.threads(config)
        job.resources = Resources(resources, mem_mb=4 * 32000, runtime=60)
        params = {"run_uuid": "u", "slurm_logfile": "l", "comment_str": "c", "account": "", "partition": "-p gpu", "workdir": "."}  # fmt: skip
        call = (get_submit_command(job, params) + set_gres_string(job)).split()
        assert "--nodes=1" in call, call
        assert {"--gpus=4", "--gres=gpu:4"} & set(call), call


def test_multi_node_training_plans_srun_and_torchrun(tmp_path):
    """`snakemake --profile slurm -n` with train.nodes_per_job 2 and 8 GPUs per job: training
    jobs ask 2 nodes of 4 GPUs (gres), each node's cores and 4 GPUs' memory, and their shell
    line starts one torchrun per node under srun."""
    home = tmp_path / "home"
    _write(home)
    overlay = tmp_path / "nodes.yaml"
    overlay.write_text("train: {gpus_per_job: 8, nodes_per_job: 2}\nresources: {cpus_per_gpu: 6}\n")
    env = {**os.environ, "HOME": str(home)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    cmd = ["snakemake", "--profile", "slurm", "--software-deployment-method", "env-modules", "-n",
           "--printshellcmds", "--forceall", "--directory", str(tmp_path / "work"),
           "--configfile", "config/config.yaml", ".test/config-slurm.yaml",
           str(overlay), "--", "all"]  # fmt: skip
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    block = re.search(r"rule train_trial:(?:\n    .*)*", out).group(0)
    assert re.search(r"resources: .*mem_mb=128000", block), block
    assert "nodes=2" in block and "gres=gpu:4" in block, block
    assert re.search(
        r"srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=24 .*torchrun "
        r"--nnodes=2 --nproc-per-node=4 .*--rdzv-backend=c10d .*--no-python python -m imagenot train-trial ",
        out,
    ), out[-4000:]
