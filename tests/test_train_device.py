"""Device by fact: a job given GPUs uses them; a planned GPU job without one stops."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imagenot.core.settings import to_json
from imagenot.train import experiments, plan
from imagenot.train import launch as train_launch
from imagenot.train import resources as train_resources
from imagenot.train import settings as train_settings
from imagenot.train.device import DeviceError, deterministic_for, resolve_device


def test_device_is_what_the_job_was_given():
    # a GPU given by gres while resources.gpus is 0: used, not ignored
    assert resolve_device("auto", gpu_job=False, cuda_available=True) == "cuda"
    assert resolve_device("auto", gpu_job=True, cuda_available=True) == "cuda"
    # CPU runs are chosen: explicitly, or by planning no GPUs
    assert resolve_device("cpu", gpu_job=True, cuda_available=True) == "cpu"
    assert resolve_device("auto", gpu_job=False, cuda_available=False) == "cpu"


def test_a_gpu_job_without_a_gpu_stops_with_a_message(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceError, match=r"GPU job \(resources.gpus > 0\) but sees no CUDA"):
        resolve_device("auto", gpu_job=True, cuda_available=False)
    with pytest.raises(DeviceError, match=r"train.device is cuda.*train.device: cpu"):
        resolve_device("cuda", gpu_job=False, cuda_available=False)


def test_the_refusal_reaches_the_training_job(tmp_path, capsys):
    """`imagenot train-trial` of a config with resources.gpus 1 on this GPU-less machine."""
    import torch

    from imagenot.cli import main
    from imagenot.core.config import validate_config

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    config = validate_config(
        {
            "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
            "resources": {"gpus": 1},
            "train": {
                "models": ["resnet_mini"],
                "image_size": 32,
                "experiments": [{"dataset": "toy", "protocol": "st", "space": "s"}],
                "spaces": {"s": {"budget": 1}},
            },
        }
    )
    job = train_settings.JobSettings.from_config(config, "toy", "st", "resnet_mini")
    assert (job.device, job.gpu_job) == ("auto", True)
    trials = tmp_path / "trials.parquet"
    draw = to_json(train_settings.DrawSettings.from_config(config, "toy", "st", "resnet_mini"))
    main(["train-draw-trials", "--settings", draw, "--record", str(tmp_path / "p.json"), "--trials", str(trials)])  # fmt: skip
    trial = to_json(train_settings.TrialSettings.from_config(config, "toy", "st", "resnet_mini", 0))
    code = main(["train-trial", "--settings", trial, "--manifest", str(tmp_path / "manifest.parquet"), "--classes", str(tmp_path / "classes.txt"), "--fingerprint", str(tmp_path / "fingerprint.txt"), "--trials", str(trials), "--stage", "0", "--slot", "0", "--threads", "1", "--result", str(tmp_path / "s.json")])  # fmt: skip
    assert code == 2  # one line (imagenot.cli), not a traceback
    assert "sees no CUDA device" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()


def test_one_check_names_each_rule_s_cpu_choice(monkeypatch):
    """The same function decides for every GPU rule (imagenot.core.device); the message names the
    key that makes the CPU an explicit choice: the rule's device key, else resources.gpus."""
    import imagenot.core.device

    assert resolve_device is imagenot.core.device.resolve_device
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(DeviceError, match=r"CUDA_VISIBLE_DEVICES=\).*set resources.gpus: 0"):
        resolve_device("auto", gpu_job=True, cuda_available=False, key=None)
    key = "curate.encoder.device"
    with pytest.raises(DeviceError, match=rf"{key} is cuda.*set {key}: cpu to run on CPUs"):
        resolve_device("cuda", gpu_job=False, cuda_available=False, key=key)
    assert resolve_device("auto", gpu_job=False, cuda_available=False, key=None) == "cpu"


def _gpu_job_commands(tmp_path, repo: Path) -> dict[str, list[str]]:
    """The evaluation and the two embedding commands as their GPU rules run them under a
    config that plans GPUs (--gpu-job), on inputs they never reach."""
    from imagenot.core.config import load_config
    from imagenot.core.settings import to_json
    from imagenot.curate.settings import EmbedSettings
    from imagenot.diagnostics.settings import EmbedSettings as ImageEmbedSettings
    from imagenot.evaluate.settings import RobustnessSettings

    config = load_config(repo / "config" / "config.yaml")
    # the demo's explicit cpu would be obeyed
    config["curate"]["encoder"]["device"] = config["train"]["device"] = "auto"
    m = str(tmp_path / "missing")
    curate, diagnostics = (
        EmbedSettings.from_config(config),
        ImageEmbedSettings.from_config(config, split="test"),
    )
    commands = {
        "evaluate-robustness": f"evaluate-robustness --model {m} --result {m} --manifest {m} "
        f"--classes {m} --fingerprint {m} --robustness {m} --per-image {m} --threads 1",
        "embed-images": f"embed-images --manifest {m}/manifest.parquet --classes "
        f"{m}/classes.txt --workers 0 --embeddings {m}",
        "curate-embed": f"curate-embed --captions {m} --candidates {m} --queries {m} "
        f"--work-dir {m} --scores {m} --stats {m}",
    }
    settings = {
        "evaluate-robustness": to_json(RobustnessSettings.from_config(config)),
        "embed-images": to_json(diagnostics),
        "curate-embed": to_json(curate),
    }
    return {name: [*line.split(), "--settings", settings[name]] for name, line in commands.items()}


@pytest.mark.parametrize("command", ["evaluate-robustness", "embed-images", "curate-embed"])
def test_evaluation_and_embedding_jobs_planned_for_a_gpu_stop_without_one(
    tmp_path, capsys, monkeypatch, command, repo_root
):
    """Each GPU rule's command applies the check before reading its inputs: one line naming
    CUDA_VISIBLE_DEVICES and the key, exit code 2. Without --gpu-job (resources.gpus: 0) the
    same command runs on the CPU (tests/test_evaluate_robustness.py, test_curate_embed.py,
    test_diagnostics_similarity.py)."""
    import torch

    from imagenot.cli import main

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here: the refusal cannot be shown")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    argv = _gpu_job_commands(tmp_path, repo_root)[command]
    assert main([*argv, "--gpu-job"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"imagenot {command}: error: this job is a GPU job")
    assert "CUDA_VISIBLE_DEVICES=)" in err and "resources.gpus" in err


def test_gpu_runs_autotune_unless_deterministic_is_asked():
    assert deterministic_for(None, "cpu") is True
    assert deterministic_for(None, "cuda") is False
    assert deterministic_for(True, "cuda") is True
    assert deterministic_for(False, "cpu") is False


def test_gpu_jobs_get_cores_and_workers_per_gpu():
    from imagenot.core.config import validate_config

    def config(gpus, **train):
        return validate_config(
            {
                "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
                "resources": {"gpus": gpus, "cpus_per_gpu": 6},
                "train": {"models": ["resnet_mini"], **train},
            }
        )

    cpu, gpu = config(0, gpus_per_job=4), config(1, gpus_per_job=4)
    cores = train_resources.threads
    assert (experiments.gpus(cpu), cores(cpu), experiments.num_workers(cpu)) == (0, 1, 0)
    assert (experiments.gpus(gpu), cores(gpu), experiments.num_workers(gpu)) == (4, 24, 5)
    assert experiments.num_workers(config(1, num_workers=2)) == 2  # explicit wins


def test_the_launcher_of_a_training_job_follows_its_gpus_and_nodes():
    """One process: no launcher (nothing between the rule and the job); GPUs on one node:
    torchrun --standalone; several nodes: srun, one torchrun per node, rendezvous on the
    first. Either launcher forwards SLURM's warning (SIGUSR1) to the ranks. A node count the
    GPUs do not fill evenly, a CPU job over nodes, or nodes outside SLURM, is a one-line error
    naming the key."""
    from imagenot.core.config import ConfigError, validate_config

    def config(gpus, **train):
        return validate_config(
            {
                "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
                "resources": {"gpus": gpus, "cpus_per_gpu": 6},
                "train": {"models": ["resnet_mini"], **train},
            }
        )

    assert train_launch.launcher(config(0, gpus_per_job=4)) == ""  # a CPU job: one process
    assert train_launch.launcher(config(1)) == ""  # one GPU
    one_node = train_launch.launcher(config(1, gpus_per_job=4)).split()
    assert one_node[:2] == ["torchrun", "--standalone"] and "--nproc-per-node=4" in one_node
    assert one_node[-1] == "--no-python"  # then the rule's `imagenot train-...` command
    nodes = config(1, gpus_per_job=8, nodes_per_job=2)
    assert (plan.nodes(nodes), plan.gpus_per_node(nodes), train_resources.threads(nodes)) == (
        2,
        4,
        24,
    )
    line = train_launch.launcher(nodes).split()
    srun, torchrun = line[: line.index("torchrun")], line[line.index("torchrun") :]
    assert srun[0] == "srun" and {"--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=24", "--kill-on-bad-exit=1"} <= set(srun)  # fmt: skip
    assert {"--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d", "--max-restarts=0"} <= set(torchrun)  # fmt: skip
    assert "--standalone" not in torchrun
    for launcher in (one_node, torchrun):
        (signals,) = [o for o in launcher if o.startswith("--signals-to-handle=")]
        assert {"SIGUSR1", "SIGTERM"} <= set(signals.split("=")[1].split(","))
    with pytest.raises(ConfigError, match=r"train.nodes_per_job: .*split evenly over 3 nodes"):
        plan.check(config(1, gpus_per_job=8, nodes_per_job=3))
    with pytest.raises(ConfigError, match=r"train.nodes_per_job: 2 nodes per job needs GPU"):
        plan.check(config(0, gpus_per_job=8, nodes_per_job=2))
    with pytest.raises(ConfigError, match=r"train.nodes_per_job: .*srun; run with the site prof"):
        plan.check(nodes)  # a local run: no srun
    plan.check({**nodes, "resources": {**nodes["resources"], "site": "site.yaml"}})


@pytest.fixture
def torch_settings_restored():
    import torch

    saved = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.benchmark,
        torch.get_num_threads(),
    )
    yield
    torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
    torch.backends.cudnn.benchmark = saved[2]
    torch.set_num_threads(saved[3])


def test_deterministic_jobs_fix_cublas_workspace_and_autotuning_jobs_leave_it(
    monkeypatch, torch_settings_restored
):
    """PyTorch's deterministic algorithms need CUBLAS_WORKSPACE_CONFIG on CUDA; a job configures
    its process before any CUDA work, so the variable is there when cuBLAS first reads it."""
    import torch

    from imagenot.train.device import CUBLAS_WORKSPACE, configure

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    configure(False, torch.get_num_threads())
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ  # autotuning: cuBLAS as it comes
    configure(True, torch.get_num_threads())
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE == ":4096:8"
    assert torch.are_deterministic_algorithms_enabled()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the site's own choice is kept
    configure(True, torch.get_num_threads())
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
