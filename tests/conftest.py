"""Shared fixtures: repository paths, the prepared WordNet corpus, the published data files
shipped under resources/ (resources/README.md names each one's source)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESOURCES = REPO / "resources"
NO_SLURM = REPO / "tests" / "no-slurm"
# The rules whose jobs ask for GPUs when the config plans them (docs/gpu.md, "Which jobs ask for a
# GPU"): tests/test_train_search.py finds them among the rules Snakemake holds, tests/test_plan.py
# in a plan.
GPU_RULES = frozenset(
    {
        "train_trial",
        "train_final",
        "train_features",
        "evaluate_robustness",
        "curate_embed",
        "diagnostics_embed_images",
        "audit_calibrate",  # the encoder on held-apart images and their copies
        "audit_pool",  # the encoder on a download pool, before its splits are built
        "preflight_site",  # CUDA on the site, before every other GPU job (rules/preflight.smk)
        "preflight_model",  # a model's checks, before its own jobs
    }
)


def pytest_configure(config):
    """Tests run without a SLURM cluster, except tests/test_slurm.py (which calls `with_slurm`).

    tests/no-slurm/scontrol fails at once, instead of the 9 s that the real client waits for a
    controller that is not running; every Snakemake command asks it (see that file).

    The interpreter's own bin folder comes next, as the rules put it (rules/common.smk): the
    documented `.venv/bin/python -m pytest ...` runs without an activated venv, and the tests'
    `snakemake`, `torchrun` and `imagenot` are this venv's."""
    bin_dir = Path(sys.executable).parent
    os.environ["PATH"] = os.pathsep.join([str(NO_SLURM), str(bin_dir), os.environ.get("PATH", "")])


# The modules of 15 s or more, costliest first (measured in clean-clone CI runs, 2026-11-25/26:
# docs/benchmarks.md, "The demo and the test suite"). `make test` and `make test-cluster` run their
# tests on several workers (pytest-xdist, one module per worker at a time, in collection order): longest first, so that the last modules
# to start are short and the workers end together (with only the four end-to-end modules first, a
# 90 s module could start last and one worker ran ~40 s alone).
COSTLIEST_FIRST = (
    "test_incremental.py",  # ~680 s in CI (2026-11-28; the finished fixture 455 s)
    "test_slurm.py",  # ~215 s in CI (2026-11-28); `make test-cluster`
    "test_scale_world.py",  # ~55 s in CI (2026-11-28)
    "test_module.py",  # 53 s, ~40 CPU-s on the 2-core dev machine (a host folder's run)
    "test_train_ddp.py",  # 89 s, 180 CPU-s on a loaded machine; its torchrun tests: test-cluster
    "test_faults.py",  # 85 s; 131 CPU-s alone on the loaded 2-core dev machine (8 downloads)
    "test_docs_commands.py",  # 82 s CPU (every documented command; a busy machine)
    "test_preflight.py",  # 35 CPU-s, 45-60 s alone on the loaded 2-core dev machine
    "test_validation.py",  # 36 CPU-s, 55-60 s alone on the loaded 2-core dev machine
    "test_envs.py",  # ~35 s (its two registry resolutions by uv: seconds)
    "test_acquire_download.py",  # 27 s
    "test_moved_run.py",  # 25 s (two DAGs built through Snakemake's API)
    "test_acquire_build.py",  # 19 s
    "test_train_feed.py",  # 18 s
    "test_train.py",  # 17 s
    "test_train_preempt.py",  # 15 s
)


def pytest_collection_modifyitems(config, items):
    """Collect the modules of COSTLIEST_FIRST first (a stable sort: the rest keep their order)."""
    rank = {name: i for i, name in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def with_slurm(path: str) -> str:
    """PATH without tests/no-slurm: for commands that talk to the real (loopback) cluster."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if Path(p) != NO_SLURM)


# The package index the network tests resolve and install from (marker `network`).
INDEX = "https://pypi.org/simple"


def registry_reachable() -> bool:
    """Whether the package index answers: a `network` test skips, saying so, when it does not."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{INDEX}/pip/", timeout=10):
            return True
    except OSError:
        return False


def load_benchmark(name: str):
    """The module ``benchmarks/<name>.py``, imported as its script runs it (with benchmarks/ on
    ``sys.path``, for their shared ``snakemake_run``)."""
    import importlib
    import sys

    folder = str(REPO / "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def download_settings(**fields):
    """``acquire-download`` settings of a config holding only the schema's defaults
    (imagenot.acquire.settings.DownloadSettings.from_config), with the ``fields`` a test sets:
    the library has no defaults of its own (they live in the schema only)."""
    import dataclasses

    from imagenot.acquire.settings import DownloadSettings
    from imagenot.core.config import validate_config

    return dataclasses.replace(DownloadSettings.from_config(validate_config({})), **fields)


def materialise_settings(kind: str, path, **fields):
    """The ``materialise-range`` settings of dataset ``kind`` at ``path`` in a config holding
    only the schema's defaults (``acquire.*``, imagenot.acquire.settings.MaterialiseSettings.
    from_config) and the ``fields`` a test sets. The tests' class folders hold a handful of
    images: no validation split and no unreadable file tolerated, unless a test says
    otherwise."""
    import dataclasses

    from imagenot.acquire.settings import MaterialiseSettings
    from imagenot.core.config import validate_config

    config = validate_config({"datasets": {"under_test": {"kind": kind, "path": str(path)}}})
    settings = MaterialiseSettings.from_config(config, dataset="under_test")
    small = {"val_per_class": 0, "max_unreadable_share": 0.0}
    return dataclasses.replace(settings, **{**small, **fields})


def materialise(kind: str, path, out_dir, parts_dir=None, **fields):
    """imagenot.acquire.materialise.materialise with :func:`materialise_settings`."""
    from imagenot.acquire import materialise as range_job

    settings = materialise_settings(kind, path, **fields)
    return range_job.materialise(out_dir, settings, parts_dir=parts_dir)


def write_toy_dataset(out: Path) -> Path:
    """A materialised 3-class dataset of 32 px one-colour JPEGs at ``out`` (acquire's format):
    60 images, 36 of them training, 12 validation, 12 test."""
    import io

    from PIL import Image

    from imagenot.acquire.dataset import Record, write_dataset

    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    records = []
    for i in range(60):
        c, split = i % 3, ["train", "train", "train", "val", "test"][(i // 3) % 5]
        buf = io.BytesIO()
        Image.new("RGB", (32, 32), colours[c]).save(buf, format="JPEG")
        records.append(Record(f"k{i:03d}", f"c{c}", split, buf.getvalue()))
    write_dataset(out, records, ["c0", "c1", "c2"], shard_size=5000)
    return out


def toy_config(space: dict, **dataset) -> dict:
    """A config of the toy dataset (:func:`write_toy_dataset`; kind imagefolder, with
    ``dataset``'s own keys) trained on the CPU: resnet_mini at 32 px in one ST experiment of
    ``space``."""
    return {
        "seed": 0,
        "datasets": {"toy": {"kind": "imagefolder", "path": "x", **dataset}},
        "resources": {"gpus": 0},
        "train": {
            "models": ["resnet_mini"],
            "image_size": 32,
            "experiments": [{"dataset": "toy", "protocol": "st", "space": "s"}],
            "spaces": {"s": space},
        },
    }


@contextlib.contextmanager
def snakemake_workflow(workdir: Path, configfiles: list[Path]):
    """The repository's Snakefile with ``configfiles`` in ``workdir``, through Snakemake's API:
    its workflow API object (parsed; ``.dag()`` plans, nothing runs), inside the API's
    context. The environment the Snakefile sets for its jobs (rules/common.smk: PATH, the SLURM
    profile's and job usage's variables) is this process's again afterwards, so that it
    reaches no later test's commands."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
    )

    saved = os.environ.copy()
    try:
        with SnakemakeApi(OutputSettings()) as api:
            yield api.workflow(
                snakefile=REPO / "Snakefile",
                workdir=workdir,
                config_settings=ConfigSettings(configfiles=configfiles),
                resource_settings=ResourceSettings(),
                storage_settings=StorageSettings(),
            )
    finally:
        os.environ.clear()
        os.environ.update(saved)


def dry_run(workdir: Path, overlays: list, targets: list[str]) -> str:
    """The standard output of Snakemake's dry run (``-n``, 16 cores) of ``targets`` with the
    demo config and ``overlays``, outputs under ``workdir``, this repository's package first on
    the path; the test fails with the end of its output when it fails."""
    import subprocess

    cmd = ["snakemake", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
           "-n", "--cores", "16", "--configfile", "config/config.yaml", *map(str, overlays),
           "--", *targets]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env["PYTHONPATH"] = str(REPO / "workflow")
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return out.stdout


def planned_jobs(stdout: str, rule: str, output: str) -> dict[str, str]:
    """The blocks of a dry run's jobs of ``rule`` whose output matches the pattern ``output``,
    by the pattern's first group."""
    import re

    jobs = {}
    for block in re.split(r"\n(?=rule )", stdout):
        m = re.search(output, block)
        if block.startswith(f"rule {rule}:") and m:
            jobs[m.group(1)] = block
    return jobs


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def class_lists() -> Path:
    """The authors' two published ImageNot class lists (resources/class_lists/)."""
    return RESOURCES / "class_lists"


@pytest.fixture(scope="session")
def web_captions() -> Path:
    """1,000 real web captions with their URLs (resources/captions/)."""
    return RESOURCES / "captions" / "web_captions_1000.parquet"


@pytest.fixture(scope="session")
def published_tables() -> Path:
    """Results tables of neighbouring papers (resources/published/)."""
    return RESOURCES / "published"


@pytest.fixture(scope="session")
def nltk_data(tmp_path_factory) -> Path:
    """An NLTK_DATA directory with WordNet 3.0, prepared once per test session."""
    from imagenot.core.config import validate_config
    from imagenot.core.wordnet import prepare_nltk_wordnet
    from imagenot.curate.settings import WordnetSettings

    settings = WordnetSettings.from_config(validate_config({}))  # the schema's source
    return prepare_nltk_wordnet(tmp_path_factory.mktemp("nltk_data"), settings.dict_dir)


@pytest.fixture(scope="session")
def wn(nltk_data):
    """The WordNet 3.0 corpus reader."""
    from imagenot.core.wordnet import load_wordnet

    return load_wordnet(str(nltk_data))


@pytest.fixture(autouse=True)
def _not_a_workflow_job():
    """Tests run commands as a person does, not as a workflow job: no usage line at the end of
    a command's output (imagenot.core.job_usage). A test that loads the Snakefile in-process (which sets
    the variable for its jobs, rules/common.smk) must not leak it into the next test's commands."""
    from imagenot.core import job_usage

    os.environ.pop(job_usage.ENV, None)
    yield
    os.environ.pop(job_usage.ENV, None)
