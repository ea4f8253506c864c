"""The preflight: its checks on the CPU (the GPU-only ones skipped with their reason), its
verdicts on stand-in measurements (a batch that does not fit becomes micro-batches, a /dev/shm or
the job's memory limit too small), the bf16 check on the CPU's bf16 (healthy models whose passes
draw different masks pass, a wrong bf16 path fails), the measured batch a training job takes (a
stand-in card, small and big), and the gates: with resources.gpus > 0 the site's failed CUDA gate
runs no GPU job, a model's failed gate holds that model's jobs alone,
resources.require_preflight: false lifts the gates, and a CPU config plans no preflight at all.
No GPU here: the GPU branch (CUDA, peak device memory, bf16 on CUDA) is the thin part that
benchmarks/gpu_check.py runs on a lent GPU (tests/test_gpu_check.py: its CPU smoke run)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import snakemake_workflow, toy_config, write_toy_dataset
from trial_records import write_decision

from imagenot.cli import main
from imagenot.core.config import load_config
from imagenot.train import experiments, preflight, preflight_plan, preflight_precision, rings
from imagenot.train.distributed import Dist
from imagenot.train.feed import Feeder
from imagenot.train.settings import PreflightSettings

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "config" / "paper.yaml"
GIB = preflight.GIB


def _config(tmp_path: Path, overlay: dict, base: Path = REPO / "config" / "config.yaml") -> Path:
    config = yaml.safe_load(base.read_text())
    for section, values in overlay.items():
        config.setdefault(section, {}).update(values)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_the_ring_arithmetic_is_the_feeders():
    assert rings.FEED_PREFETCH == Feeder.PREFETCH
    # paper: 7 workers, micro-batch 256 + eval 256 at 256 px stored: ~5.8 GB per process
    assert rings.ring_bytes(7, 256, 256, 256) == 29 * 512 * 3 * 256 * 256
    assert rings.ring_bytes(0, 256, 256, 256) == 0


@pytest.mark.parametrize(
    ("batch", "world", "cap"), [(256, 1, None), (256, 1, 64), (256, 2, 96), (250, 3, 32), (7, 2, 2)]
)
def test_per_gpu_batch_is_the_loops_largest_micro_batch(batch, world, cap):
    from imagenot.train.loop import _largest_piece

    job = SimpleNamespace(settings=SimpleNamespace(batch_size=batch))
    largest = max(
        _largest_piece(10_000, job, Dist(rank=r, world=world, local_rank=r), cap)
        for r in range(world)
    )
    assert experiments.per_gpu_batch(batch, world, cap) == largest


def test_the_paper_runs_keep_every_batch_whole_until_the_card_is_measured():
    """No per-model cap in the paper config: each run's per-GPU share is the space's batch
    over the model's GPUs per job, whole; what a card holds of it is the preflight's
    measurement (the next tests)."""
    config = load_config(PAPER)
    runs = {(r["model"], r["space"]): r for r in preflight_plan.runs(config)}
    for model in config["train"]["models"]:
        st, world = runs[(model, "imagenot_st")], experiments.gpus(config, model)
        assert st["batch_size"] == 256 and st["world"] == world and st["per_gpu"] == 256 // world
        assert st["stored_size"] == 256
    tl = runs[("resnet18", "cifar10_tl")]  # TL: the backbone's feature pass at the eval batch
    assert tl["mode"] == "features" and tl["per_gpu"] == config["train"]["eval_batch_size"]
    assert not any(r["space"] is None for r in runs.values())  # published ImageNet: nothing run
    settings = PreflightSettings.from_config(config, None)
    assert settings.gpu_job and settings.num_workers == experiments.num_workers(config)
    assert settings.checked_models == config["train"]["models"]
    # the gates: the site's checks CUDA alone, a model's its own runs and checks
    site = PreflightSettings.for_site(config, None)
    assert site.runs == [] and site.checked_models == []
    alexnet = PreflightSettings.for_model(config, None, "alexnet")
    assert alexnet.checked_models == ["alexnet"]
    assert alexnet.runs and {r["model"] for r in alexnet.runs} == {"alexnet"}


def test_a_config_naming_the_removed_caps_stops_on_one_line(tmp_path):
    from imagenot.core.config import ConfigError

    path = tmp_path / "old.yaml"
    config = yaml.safe_load(PAPER.read_text())
    config["train"]["max_batch_per_gpu_overrides"] = {"convnext_large": 64}
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert "\n" not in message
    assert "config key train.max_batch_per_gpu_overrides: removed" in message
    assert "preflight measured" in message and "train.max_batch_per_gpu stays" in message


def _train_run(per_gpu: int = 256, mode: str = "train") -> dict:
    return {"model": "convnext_large", "mode": mode, "per_gpu": per_gpu, "batch_size": per_gpu}


def test_a_batch_that_does_not_fit_becomes_micro_batches_of_the_largest_measured_to_fit():
    run = {**_train_run(), "space": "s", "world": 1}
    total = 80 * GIB

    def peak_of(batch):  # 2 GiB fixed + 0.5 GiB per image; beyond 160 the allocator gives up
        return None if batch > 160 else int((2 + 0.5 * batch) * GIB)

    check = preflight.memory_verdict("memory convnext_large (s)", run, total, peak_of)
    # runs, in micro-batches: a warning (BatchNorm sees the micro-batch), not a failure
    assert check.status == "warn" and check.values["peak_gib"] is None
    # 0.9 x 80 GiB = 72 GiB: (72 - 2) / 0.5 = 140 images fit; the search gets within 1/16
    fit = check.values["largest_fit"]
    assert 128 <= fit <= 140 and check.values["micro_batches"] == 2
    assert "out of device memory" in check.detail and "2 micro-batches" in check.detail
    ok = preflight.memory_verdict("m", {**run, "per_gpu": 64, "batch_size": 64}, total, peak_of)
    assert ok.status == "pass" and ok.values["peak_gib"] == 34.0
    assert ok.values["largest_fit"] == 64 and ok.values["micro_batches"] == 1
    tl = preflight.memory_verdict("m", {**run, "mode": "features"}, total, peak_of)
    assert tl.status == "fail" and "train.eval_batch_size:" in tl.detail  # not cut: it fails
    none = preflight.memory_verdict("m", run, total, lambda b: None)
    assert none.status == "fail" and "not even one image fits" in none.detail


@pytest.fixture(scope="module")
def toy_dataset(tmp_path_factory):
    """A materialised 3-class dataset of 32 px JPEGs (acquire's format), 36 training images."""
    return write_toy_dataset(tmp_path_factory.mktemp("ds") / "toy")


def _fake_card(total_gib: float):
    """A card of ``total_gib`` whose training steps peak at 0.1 GiB + 0.05 GiB per image."""
    return lambda device, image_size: preflight.Card(
        int(total_gib * GIB), lambda run, batch: int((0.1 + 0.05 * batch) * GIB)
    )


@pytest.mark.parametrize(
    ("card_gib", "largest_fit", "micro_batches"),
    # 0.9 x 0.48 GiB holds 6 images: 16 as 3 micro-batches; 0.9 x 4 GiB holds the 16 whole
    [(0.48, 6, 3), (4.0, 16, 1)],
    ids=["small-card", "big-card"],
)
def test_the_training_job_takes_the_batch_the_preflight_measured_on_the_card(
    card_gib, largest_fit, micro_batches, toy_dataset, tmp_path, monkeypatch, caplog
):
    """On the CPU with a stand-in card (no GPU here): the preflight measures the peak at the
    space's batch and the largest batch that fits; the training job given that report (as the
    rule gives it, ``--preflight``) trains in that many micro-batches and says so in its log
    and result. A small card gives micro-batches, a big one the batch whole."""
    from imagenot.core.settings import to_json
    from imagenot.train import settings as train_settings

    space = {"budget": 1, "max_epochs": 1, "batch_size": 16, "halving": {"enabled": False}}
    overlay = toy_config(space, image_size=32)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(overlay))
    config = load_config(path)
    monkeypatch.setattr(preflight, "card", _fake_card(card_gib))
    report_path = tmp_path / "preflight" / "resnet_mini.json"
    args = ["preflight", "--config", str(path), "--json", str(report_path)]
    assert main([*args, "--md", str(tmp_path / "preflight" / "resnet_mini.md")]) == 0
    report = json.loads(report_path.read_text())
    (memory,) = [c for c in report["checks"] if c["name"].startswith("memory ")]
    assert memory["status"] == ("pass" if micro_batches == 1 else "warn")
    assert memory["values"]["per_gpu"] == 16  # the space's batch, whole
    assert memory["values"]["peak_gib"] == 0.9  # at the space's batch
    assert memory["values"]["largest_fit"] == largest_fit
    assert memory["values"]["micro_batches"] == micro_batches
    assert preflight_plan.measured_batch(report, "resnet_mini") == largest_fit

    run = tmp_path / "toy" / "st" / "resnet_mini"
    draw = to_json(train_settings.DrawSettings.from_config(config, "toy", "st", "resnet_mini"))
    assert main(["train-draw-trials", "--settings", draw, "--record", str(tmp_path / "p.json"), "--trials", str(run / "trials.parquet")]) == 0  # fmt: skip
    trial = train_settings.TrialSettings.from_config(config, "toy", "st", "resnet_mini", 0)
    assert trial.job.max_batch_per_gpu is None  # nothing in the config: the report decides
    out = run / "stage-0" / "slot-0.json"
    caplog.set_level("INFO")
    assert main(["train-trial", "--settings", to_json(trial), "--manifest", str(toy_dataset / "manifest.parquet"), "--classes", str(toy_dataset / "classes.txt"), "--fingerprint", str(toy_dataset / "fingerprint.txt"), "--trials", str(run / "trials.parquet"), "--stage", "0", "--slot", "0", "--preflight", str(report_path), "--threads", "1", "--result", str(out)]) == 0  # fmt: skip
    result = json.loads(out.read_text())
    assert result["micro_batches"] == micro_batches
    assert result["micro_batch_size"] == -(-16 // micro_batches)
    assert f"{micro_batches} micro-batch(es) per GPU" in caplog.text


def test_host_check_names_what_is_too_small():
    settings = PreflightSettings.from_config(load_config(PAPER), None)
    ring = rings.ring_bytes(7, 256, 256, 256)
    # a node of more processes than /dev/shm holds rings for
    shm = os.statvfs("/dev/shm")
    crowded = dataclasses.replace(settings, gpus_per_node=shm.f_frsize * shm.f_blocks // ring + 1)
    check = preflight.check_host(crowded, workers=7)
    assert check.status == "fail" and "/dev/shm is smaller than the rings" in check.detail
    assert check.values["ring_gb_per_process"] == round(ring / 1e9, 2)
    assert preflight.check_host(settings, workers=0).status == "pass"  # no ring


def test_rings_above_mem_mb_are_not_a_fault():
    """Every training job asks for ``resources.train_trial.mem_mb`` plus its own rings
    (``plan.process_mem_mb``): rings larger than mem_mb are paid for, so the host check passes
    where /dev/shm and the job's limit hold them."""
    settings = PreflightSettings.from_config(load_config(PAPER), None)
    ring = rings.ring_bytes(7, 256, 256, 256)
    small = dataclasses.replace(settings, mem_mb=ring // 2_000_000, gpus_per_node=1)
    check = preflight.check_host(small, workers=7)
    shm = os.statvfs("/dev/shm")
    if shm.f_frsize * shm.f_blocks < ring:
        pytest.skip(f"this machine's /dev/shm holds less than one process's rings ({ring} bytes)")
    limit = preflight._cgroup_limit()
    if limit is not None and limit < ring:
        pytest.skip(f"this process's cgroup limit ({limit} bytes) is below the rings ({ring})")
    assert check.status == "pass", check.detail


NORMALISATION = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


class _DtypeDropout(torch.nn.Dropout):
    """Dropout whose draws depend on the dtype, as CUDA's kernels' do (healthy AlexNet
    and EfficientNet-V2-L failed the gate because the bf16 and float32 passes drew different
    masks under the same seed): the bf16 pass consumes the generator before drawing its mask."""

    def forward(self, x):
        if self.training and x.dtype == torch.bfloat16:
            torch.rand(7)
        return super().forward(x)


class _Residual(torch.nn.Module):
    def __init__(self, channels: int):
        from torchvision.ops import StochasticDepth

        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(channels, channels, 3, padding=1),
            torch.nn.BatchNorm2d(channels),
            torch.nn.ReLU(),
        )
        self.depth = StochasticDepth(0.5, "row")

    def forward(self, x):
        return x + self.depth(self.body(x))


def _net(dropout=_DtypeDropout) -> torch.nn.Sequential:
    """BatchNorm, stochastic depth and dropout whose masks differ between the two passes."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), _Residual(16),
        _Residual(16), nn.AdaptiveAvgPool2d(1), nn.Flatten(), dropout(0.5), nn.Linear(16, 64),
        nn.ReLU(), dropout(0.5), nn.Linear(64, preflight.NUM_CLASSES),
    )  # fmt: skip


def _precision(build, image_size: int = 16) -> preflight.Check:
    """The check's verdict for ``build`` under the CPU's bf16 autocast (on CUDA in a job)."""
    values = preflight.compare_precision(
        build, image_size, NORMALISATION, torch.device("cpu"), batch=4
    )
    return preflight.Check("precision", *preflight_precision.verdict(values), values)


def test_bf16_passes_a_healthy_model_whose_two_passes_draw_different_masks():
    """Dropout and stochastic depth draw differently in the bf16 and the float32 pass (here by
    construction, on CUDA by the kernels): the check switches them off, keeps BatchNorm
    training, and passes, with the power to tell float32 from bf16 intact (below)."""
    check = _precision(_net)
    assert check.status == "pass", check.detail
    values = check.values
    assert len(values["switched_off"]) == 4  # two dropouts, two stochastic depths
    assert values["random_left"] >= preflight_precision.SAME_PASS_COSINE
    assert values["loss_fp32"] != values["loss_bf16"]  # bf16 really ran
    assert values["grad_cosine"] >= preflight_precision.GRAD_COSINE
    assert len(values["loss_fp32"]) == preflight_precision.STEPS
    # a registry model, as the preflight builds it
    assert _precision("resnet_mini", 32).status == "pass"


class _OffInBf16(torch.nn.Linear):
    """A classifier whose low-precision result is 20% off (a broken kernel)."""

    def forward(self, x):
        y = super().forward(x)
        return y * 0.8 if torch.is_autocast_enabled(x.device.type) else y


class _HalfInBf16(torch.nn.Conv2d):
    """A convolution whose low-precision result loses half its channels."""

    def forward(self, x):
        y = super().forward(x)
        if torch.is_autocast_enabled(x.device.type):
            y = torch.cat([y[:, : y.shape[1] // 2], torch.zeros_like(y[:, y.shape[1] // 2 :])], 1)
        return y


def _with(index: int, layer):
    def build():
        net = _net()
        net[index] = layer
        return net

    return build


@pytest.mark.parametrize(
    "build",
    [
        _with(-1, _OffInBf16(64, preflight.NUM_CLASSES)),
        _with(0, _HalfInBf16(3, 16, 3, padding=1)),
    ],
    ids=["classifier-20%-off", "conv-half-channels"],
)
def test_a_wrong_bf16_path_still_fails(build):
    check = _precision(build)
    assert check.status == "fail", check.detail
    assert check.values["logits_rel_diff"] > preflight_precision.LOGITS_RTOL


class _FunctionalDropout(torch.nn.Module):
    """A random layer of a plugin's own making: no dropout module for the check to find."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        return torch.nn.functional.dropout(x, self.p, training=self.training)


def test_a_random_layer_left_on_is_named_and_only_evaluation_judged():
    """Two float32 passes under different seeds disagree: the training steps cannot tell bf16
    from the draws, so they are not judged (no false failure); evaluation still is."""
    check = _precision(lambda: _net(_FunctionalDropout))
    assert check.values["random_left"] < preflight_precision.SAME_PASS_COSINE
    assert check.status == "warn" and "a random layer the check could not switch off" in (
        check.detail
    )


def test_the_cpu_preflight_runs_every_check_and_skips_the_gpu_only_ones(
    tmp_path, capsys, monkeypatch
):
    # no node-local $TMPDIR: the feed source check's verdict rests on the setting, not on which
    # of two folders this machine happens to read faster (tests/test_preflight_feed.py)
    monkeypatch.delenv("TMPDIR", raising=False)
    config = _config(tmp_path, {"train": {"in_memory": False, "num_workers": 1}})
    out = tmp_path / "preflight"
    args = ["preflight", "--config", str(config), "--models", "resnet_mini", "--spaces", "st"]
    args += ["--feed-steps", "2", "--feed-warmup", "1", "--feed-images", "16"]
    args += ["--json", str(out / "local.json"), "--md", str(out / "local.md")]
    args += ["--datasets-root", str(tmp_path / "datasets")]  # where the feed's sample is read
    args += ["--feed-seconds", "0"]  # the steps asked for, no more
    assert main(args) == 0
    report = json.loads((out / "local.json").read_text())
    assert report["passed"] and report["environment"]["torch"] == torch.__version__
    checks = {c["name"].split(" (")[0].replace(" resnet_mini", ""): c for c in report["checks"]}
    assert checks["feed source"]["status"] == "pass" and not (tmp_path / "datasets").exists()
    assert checks["cuda"]["status"] == "skip" and "resources.gpus is 0" in checks["cuda"]["detail"]
    assert checks["precision"]["status"] == "skip" and "CUDA only" in checks["precision"]["detail"]
    assert checks["memory"]["status"] == "info"
    feed = checks["feed"]
    assert feed["status"] == "info" and feed["values"]["feed_images"] == 2 * 16
    assert len(feed["values"]["feed_worker_pids"]) == 1  # decoded in the one loader worker
    assert "64 px stored" in feed["name"]
    assert (
        checks["host"]["status"] == "pass" and checks["host"]["values"]["ring_gb_per_process"] > 0
    )
    md = (out / "local.md").read_text()
    assert md.startswith("# Preflight `local`: passed") and "| feed resnet_mini" in md
    assert md in capsys.readouterr().out


def test_a_gpu_config_without_a_gpu_fails_in_one_line_and_leaves_no_pass(tmp_path, capsys):
    out = tmp_path / "preflight"
    (out).mkdir()
    (out / "local.json").write_text("{}")  # an earlier pass: removed, it no longer holds
    args = ["preflight", "--config", str(PAPER), "--models", "alexnet", "--spaces", "imagenot_st"]
    args += ["--json", str(out / "local.json"), "--md", str(out / "local.md")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("imagenot preflight: error: preflight failed")
    assert "sees no CUDA device" in err[0] and "resources.require_preflight: false" in err[0]
    assert not (out / "local.json").exists() and not (out / "local.md").exists()
    failed = json.loads((out / "local.failed.json").read_text())
    assert not failed["passed"] and failed["checks"][0]["status"] == "fail"
    assert "**FAILED**" in (out / "local.failed.md").read_text()
    assert main([*args[:4], "nope", *args[5:]]) == 2  # a model the config does not train
    assert "--models: ['nope'] not trained by this config" in capsys.readouterr().err


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO / "workflow")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


def _snakemake(tmp_path: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = ["snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
    cmd += ["--configfile", str(config), *args]
    return subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)


def _planned(work: Path, config: Path, target: str) -> list[SimpleNamespace]:
    """The jobs a dry run of ``target`` lists (``snakemake -n -p``), each with its rule, input,
    output, wildcards and shell command: the Snakefile planned through Snakemake's API in this
    process (conftest.snakemake_workflow), nothing run."""
    from snakemake.settings.types import DAGSettings

    with snakemake_workflow(work, [config]) as api:
        api.dag(dag_settings=DAGSettings(targets={target}))
        workflow = api._workflow
        workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
        workflow._build_dag()
        return [
            SimpleNamespace(
                rule=job.rule.name,
                input=[str(f) for f in job.input],
                output=[str(f) for f in job.output],
                wildcards=dict(job.wildcards),
                shell=job.shellcmd or "",
            )
            for job in workflow.dag.needrun_jobs()
        ]


def test_the_preflight_takes_the_rules_settings_or_a_config_and_a_job_its_report(capsys):
    """``imagenot preflight`` refuses neither and both of --settings and --config in one line;
    a training job reads ``--preflight`` alone (the rule's, ungated) as no report, and a path
    as the report."""
    from imagenot.cli import build_parser
    from imagenot.core.settings import to_json

    out = ["--json", "x.json", "--md", "x.md"]
    settings = to_json(PreflightSettings.for_site(load_config(PAPER), None))
    assert main(["preflight", *out]) == 2
    assert main(["preflight", *out, "--settings", settings, "--config", str(PAPER)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["imagenot preflight: error: give either --config or --settings (the "
                   "workflow rule's), not both"] * 2  # fmt: skip
    argv = ["train-trial", "--settings", "{}", "--trials", "t", "--manifest", "m"]
    argv += ["--classes", "c", "--fingerprint", "f", "--result", "r", "--stage", "0", "--slot", "0"]
    argv += ["--threads", "1"]
    assert build_parser().parse_args([*argv, "--preflight"]).preflight is None
    assert build_parser().parse_args([*argv, "--preflight", "p.json"]).preflight == Path("p.json")


def test_gpu_rules_wait_for_their_gates_unless_the_config_lifts_them(tmp_path):
    """The plan: with GPUs every GPU rule's job takes the site's report (CUDA) as an input, a
    training job its model's as well, and gets that report as ``--preflight`` (its measured
    batch); caption embedding waits for the site's alone. resources.require_preflight: false
    and a CPU config plan no preflight."""
    target = "results/train/imagenot/st/resnet_mini/stage-0/slot-0.json"
    plans = {}
    for name, resources in {
        "gated": {"gpus": 1},
        "lifted": {"gpus": 1, "require_preflight": False},
        "cpu": {"gpus": 0},
    }.items():
        config = _config(tmp_path / name, {"resources": resources})
        plans[name] = _planned(tmp_path / name, config, target)

    def jobs(name, rule):
        return [job for job in plans[name] if job.rule == rule]

    (trial,) = jobs("gated", "train_trial")
    model_report = "results/preflight/local/resnet_mini.json"
    assert "results/preflight/local.json" in trial.input
    assert model_report in trial.input
    assert f"--preflight {model_report}" in trial.shell
    embeds = jobs("gated", "curate_embed")
    assert embeds and all(
        "results/preflight/local.json" in job.input
        and not any("results/preflight/local/" in text for text in [*job.input, job.shell])
        for job in embeds
    )
    (model,) = jobs("gated", "preflight_model")
    assert model.wildcards == {"model": "resnet_mini"}
    assert '"checked_models":["resnet_mini"]' in model.shell
    (site,) = jobs("gated", "preflight_site")
    assert '"checked_models":[]' in site.shell
    for name in ("lifted", "cpu"):
        assert not [job for job in plans[name] if job.rule.startswith("preflight")]
        texts = [t for job in plans[name] for t in (*job.input, *job.output, job.shell)]
        assert not any("results/preflight/" in text for text in texts)
        (trial,) = jobs(name, "train_trial")
        assert " --preflight  --threads " in trial.shell  # the flag alone: no report


def _empty_slot(work: Path, model: str) -> str:
    """Stand-ins of a stage-1 slot that nothing was promoted into (it writes its result without
    torch, tests/test_slurm_profile.py); its target."""
    run = work / "results" / "train" / "imagenot" / "st" / model
    (run / "halving").mkdir(parents=True)
    (work / "results" / "datasets" / "imagenot").mkdir(parents=True, exist_ok=True)
    for stand_in in ("manifest.parquet", "classes.txt", "fingerprint.txt"):
        (work / "results" / "datasets" / "imagenot" / stand_in).touch()
    (run / "trials.parquet").touch()
    time.sleep(1.1)  # the decision is newer than its stand-in inputs
    write_decision(run / "halving" / "rung-0.json", [])
    return f"results/train/imagenot/st/{model}/stage-1/slot-0.json"


def test_a_models_failed_gate_holds_its_own_jobs_alone(tmp_path):
    """For real, under Snakemake with --keep-going (the SLURM profile's): the site's gate and
    resnet_mini's have passed (their reports are there); alexnet_mini's gate fails on this
    GPU-less machine. resnet_mini's GPU job runs, alexnet_mini's does not, and the failed gate's
    log line says whose jobs wait."""
    work = tmp_path / "w"
    targets = [_empty_slot(work, "resnet_mini"), _empty_slot(work, "alexnet_mini")]
    reports = work / "results" / "preflight"
    (reports / "local").mkdir(parents=True)
    (reports / "local.json").write_text("{}")
    (reports / "local" / "resnet_mini.json").write_text("{}")
    config = _config(work, {"resources": {"gpus": 1}, "train": {"device": "auto"}})
    rules = ("train_trial", "preflight_site", "preflight_model")
    done = _snakemake(
        work, config, "--cores", "2", "--keep-going", "--allowed-rules", *rules, "--", *targets
    )
    assert done.returncode != 0
    assert (work / targets[0]).exists() and not (work / targets[1]).exists()
    assert "sees no CUDA device" in (reports / "local" / "alexnet_mini.failed.md").read_text()
    log = (work / "results" / "logs" / "preflight" / "local" / "alexnet_mini.log").read_text()
    (line,) = [x for x in log.splitlines() if "preflight failed" in x]
    assert "the GPU jobs of alexnet_mini (train_trial, train_final, train_features, " in line
    assert "the other models' jobs and caption and image embedding do not wait for it" in line


def test_the_message_says_which_jobs_wait():
    every = preflight_plan.waiting(["cuda"], [])
    assert every.startswith("every GPU job waits") and "caption and image embedding" in every
    one = preflight_plan.waiting(["precision alexnet"], ["alexnet"])
    assert one.startswith("the GPU jobs of alexnet (train_trial, train_final") and "do not" in one
    by_hand = ["alexnet", "resnet18", "vgg19"]
    assert "of alexnet, vgg19 (" in preflight_plan.waiting(
        ["precision alexnet", "memory vgg19 (imagenot_st)"], by_hand
    )
    assert "of alexnet, resnet18, vgg19 (" in preflight_plan.waiting(["host"], by_hand)
    assert preflight_plan.waiting(["cuda"], by_hand) == every


def test_a_failed_preflight_runs_no_gpu_job_and_the_override_runs_it(tmp_path):
    """For real, on this GPU-less machine, under a config that plans GPUs and trains on `auto`:
    the site's gate fails (no CUDA device), its report is left as <site>.failed.md, and the GPU
    job that waits for it never runs; with resources.require_preflight: false the same job runs
    (an empty slot: it writes its result without torch, tests/test_slurm_profile.py)."""
    results = {}
    for name, lifted in (("refused", False), ("override", True)):
        work = tmp_path / name
        target = _empty_slot(work, "resnet_mini")
        resources = {"gpus": 1, "require_preflight": not lifted}
        config = _config(work, {"resources": resources, "train": {"device": "auto"}})
        rules = ("train_trial", "preflight_site", "preflight_model")
        done = _snakemake(work, config, "--cores", "2", "--allowed-rules", *rules, "--", target)
        results[name] = (done, work / target, work / "results" / "preflight")
    done, slot, reports = results["refused"]
    assert done.returncode != 0
    assert not slot.exists() and not (reports / "local.json").exists()
    assert "sees no CUDA device" in (reports / "local.failed.md").read_text()
    log = (slot.parents[5] / "logs" / "preflight" / "local.log").read_text()
    assert "every GPU job waits until it passes" in log  # the site's CUDA gate holds them all
    done, slot, reports = results["override"]
    assert done.returncode == 0, done.stderr[-3000:]
    assert slot.exists() and not reports.exists()


def test_each_models_checks_are_written_as_they_finish_and_a_stop_loses_only_the_model_running(
    tmp_path, monkeypatch
):
    """``--progress``: one JSON line per check the moment it finishes, one model's memory, feed
    and precision before the next model's. Healthy: the file holds the report's checks in the
    report's order. Planted: the second model's run stops part-way (its precision check raises,
    as a time-out would end it): the first model's checks are all there, the second's up to the
    stop."""
    config = _config(tmp_path, {"train": {"in_memory": True}})  # no loader: the feed is skipped
    progress = tmp_path / "checks.jsonl"
    args = ["preflight", "--config", str(config), "--models", "alexnet_mini,resnet_mini"]
    args += ["--spaces", "st", "--progress", str(progress), "--json", str(tmp_path / "p.json")]
    args += ["--md", str(tmp_path / "p.md")]
    assert main(args) == 0
    report = json.loads((tmp_path / "p.json").read_text())
    written = [json.loads(line) for line in progress.read_text().splitlines()]
    assert written == report["checks"]
    models = [c["name"].split(" ")[1] for c in written if c["name"] not in ("cuda", "host")]
    assert models == ["alexnet_mini"] * 3 + ["resnet_mini"] * 3  # model after model

    real = preflight.check_precision

    def stopped(model, *rest):
        if model == "resnet_mini":
            raise KeyboardInterrupt  # the step's time limit, part-way through the second model
        return real(model, *rest)

    monkeypatch.setattr(preflight, "check_precision", stopped)
    assert main(args) != 0  # (the CLI reports the interrupt)
    kept = [json.loads(line)["name"] for line in progress.read_text().splitlines()]
    assert kept == [c["name"] for c in written][:-1]  # all but the check that was running
    assert "precision alexnet_mini" in kept and "precision resnet_mini" not in kept
