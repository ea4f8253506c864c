"""Device by fact: a job given GPUs uses them; a planned GPU job without one stops."""

from __future__ import annotations

import json

import pytest

from imagenot.train import plan
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


def test_the_refusal_reaches_the_training_job(tmp_path):
    """`imagenot train-trial` of a config with resources.gpus 1 on this GPU-less machine."""
    import torch

    from imagenot.cli import main
    from imagenot.config import validate_config

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
    job = plan.job_settings(config, "toy", "st", "resnet_mini")
    assert (job["device"], job["gpu_job"]) == ("auto", True)
    trials = tmp_path / "trials.parquet"
    draw = json.dumps(plan.draw_settings(config, "toy", "st", "resnet_mini"))
    main(["train-draw-trials", "--settings", draw, "--record", str(tmp_path / "p.json"), "--out", str(trials)])  # fmt: skip
    with pytest.raises(DeviceError, match="sees no CUDA device"):
        trial = json.dumps(plan.trial_settings(config, "toy", "st", "resnet_mini", 0))
        main(["train-trial", "--settings", trial, "--dataset-dir", str(tmp_path), "--trials", str(trials), "--stage", "0", "--slot", "0", "--threads", "1", "--out", str(tmp_path / "s.json")])  # fmt: skip
    assert not (tmp_path / "s.json").exists()


def test_gpu_runs_autotune_unless_deterministic_is_asked():
    assert deterministic_for(None, "cpu") is True
    assert deterministic_for(None, "cuda") is False
    assert deterministic_for(True, "cuda") is True
    assert deterministic_for(False, "cpu") is False


def test_gpu_jobs_get_cores_and_workers_per_gpu():
    from imagenot.config import validate_config

    def config(gpus, **train):
        return validate_config(
            {
                "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
                "resources": {"gpus": gpus, "cpus_per_gpu": 6},
                "train": {"models": ["resnet_mini"], **train},
            }
        )

    cpu, gpu = config(0, gpus_per_job=4), config(1, gpus_per_job=4)
    assert (plan.gpus(cpu), plan.threads(cpu), plan.num_workers(cpu)) == (0, 1, 0)
    assert (plan.gpus(gpu), plan.threads(gpu), plan.num_workers(gpu)) == (4, 24, 5)
    assert plan.num_workers(config(1, num_workers=2)) == 2  # explicit wins


def test_the_launcher_of_a_training_job_follows_its_gpus_and_nodes():
    """One process: no launcher (nothing between the rule and the job); GPUs on one node:
    torchrun --standalone; several nodes: srun, one torchrun per node, rendezvous on the
    first. Either launcher forwards SLURM's warning (SIGUSR1) to the ranks. A node count the
    GPUs do not fill evenly, a CPU job over nodes, or nodes outside SLURM, is a one-line error
    naming the key."""
    from imagenot.config import ConfigError, validate_config

    def config(gpus, **train):
        return validate_config(
            {
                "datasets": {"toy": {"kind": "imagefolder", "path": "x"}},
                "resources": {"gpus": gpus, "cpus_per_gpu": 6},
                "train": {"models": ["resnet_mini"], **train},
            }
        )

    assert plan.launcher(config(0, gpus_per_job=4)) == ""  # a CPU job: one process
    assert plan.launcher(config(1)) == ""  # one GPU
    one_node = plan.launcher(config(1, gpus_per_job=4)).split()
    assert one_node[:2] == ["torchrun", "--standalone"] and "--nproc-per-node=4" in one_node
    assert one_node[-1] == "--no-python"  # then the rule's `imagenot train-...` command
    nodes = config(1, gpus_per_job=8, nodes_per_job=2)
    assert (plan.nodes(nodes), plan.gpus_per_node(nodes), plan.threads(nodes)) == (2, 4, 24)
    line = plan.launcher(nodes).split()
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
