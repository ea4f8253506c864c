"""Shared fixtures: repository paths, the prepared WordNet corpus, the shared data folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
NO_SLURM = REPO / "tests" / "no-slurm"


def pytest_configure(config):
    """Tests run without a SLURM cluster, except tests/test_slurm.py (which calls `with_slurm`).

    tests/no-slurm/scontrol fails at once, instead of the 9 s that the real client waits for a
    controller that is not running; every Snakemake command asks it (see that file)."""
    os.environ["PATH"] = f"{NO_SLURM}{os.pathsep}{os.environ.get('PATH', '')}"


# The end-to-end modules, costliest first (measured: docs/benchmarks.md, "make test"). `make test`
# runs the suite on several workers (pytest-xdist, one module per worker at a time, in collection
# order): starting these first keeps one long module from running alone at the end.
COSTLIEST_FIRST = ("test_incremental.py", "test_slurm.py", "test_scale_world.py", "test_envs.py")


def pytest_collection_modifyitems(config, items):
    """Collect the modules of COSTLIEST_FIRST first (a stable sort: the rest keep their order)."""
    rank = {name: i for i, name in enumerate(COSTLIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def with_slurm(path: str) -> str:
    """PATH without tests/no-slurm: for commands that talk to the real (loopback) cluster."""
    return os.pathsep.join(p for p in path.split(os.pathsep) if Path(p) != NO_SLURM)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data beside the clone (as CI has it)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} not present beside the repository")
    return SHARED_DATA


@pytest.fixture(scope="session")
def nltk_data(tmp_path_factory) -> Path:
    """An NLTK_DATA directory with WordNet 3.0, prepared once per test session."""
    from imagenot.wordnet import prepare_nltk_wordnet

    return prepare_nltk_wordnet(tmp_path_factory.mktemp("nltk_data"))


@pytest.fixture(scope="session")
def wn(nltk_data):
    """The WordNet 3.0 corpus reader."""
    from imagenot.wordnet import load_wordnet

    return load_wordnet(str(nltk_data))
