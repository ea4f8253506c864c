# Set-up alone: `make setup` (the venv and the system packages, minutes the first time). `make demo`
# and `make test` run it first, so either also does all set-up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
# Install the standard (CUDA-built) torch wheels from the package index: they also run on CPU,
# and torchvision's compiled ops need them. Ignore site-wide find-links that carry a CPU-only torch.
PIP := env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null $(BIN)/pip
# The pinned packages go in with uv (pip's drop-in installer: parallel downloads and unpacking),
# from the same index and to the same versions: 19 s against pip's 94 s for the ~6 GB of torch's
# CUDA build on this machine (docs/benchmarks.md, "The demo and the test suite"). pip stays in the venv (newest):
# tests/test_envs.py resolves the conda envs' pip parts with it.
UV_VERSION := 0.13.9
UV_LOUD := env -u PIP_FIND_LINKS UV_NO_CONFIG=1 $(BIN)/uv pip install --python $(BIN)/python
UV := $(UV_LOUD) -q
# The installed packages' bytecode, compiled once at set-up: where PYTHONDONTWRITEBYTECODE is set
# (this CI machine) no process caches a .pyc, and every job compiled torch again (a run took
# minutes longer). Not the files no workflow process imports, about a quarter of the 18,566: the
# packages' own test suites, setuptools, and transformers' model zoo but its configurations
# (which its auto classes import) and the encoders' families (BERT: the demo's MiniLM; RoBERTa
# and CLIP: the paper's). A file left out still works: it is compiled where it is imported.
# 38 s against 44-46 s for uv's --compile-bytecode, which compiles every file (measured back to
# back on 2 cores: docs/benchmarks.md, "The demo and the test suite").
NOT_IMPORTED := site-packages/(([^/]+/)*tests?/|setuptools/|transformers/models/(?!auto/|bert/|roberta/|clip/)[^/]+/(?!configuration_|__init__))
RUN := env PATH="$(BIN):$$PATH"
PROFILE ?= profiles/local
PYTEST_ARGS ?=
# make test: one worker per core (at most 3), each taking whole test modules (their fixtures are
# built once), the costliest first (tests/conftest.py). `pytest tests/test_x.py` runs in-process.
PYTEST_WORKERS ?= -n auto --maxprocesses 3 --dist loadscope --no-loadscope-reorder
# Three tiers, by pytest marker (pyproject.toml): `make test` runs every test but those of markers
# `slow` (end-to-end runs of the workflow or a benchmark: a whole tiny run and the reruns on it,
# a host workflow's jobs, the scale check, the GPU check's CPU run) and `cluster` (torchrun ranks,
# the real SLURM on loopback); `make test-slow` and `make test-cluster` run those. CI (.ci/run) runs
# all three. Select by marker here, not with -m in PYTEST_ARGS: pytest keeps the last -m, which
# would replace this one.
PYTEST_MARKS ?= not cluster and not slow

.PHONY: demo test test-slow test-cluster lint format setup sysdeps rulegraph clean help slurm-profile

help:
	@echo "make setup  - install only: .venv with the pinned packages (~6 GB, minutes the first"
	@echo "              time; nothing the second) and the system packages the workflow reads"
	@echo "make demo   - set up and run the whole workflow on the demo world (CPU, ~8 minutes)"
	@echo "make test   - set up and run the test suite but its end-to-end runs and cluster paths (~7 min)"
	@echo "make test-slow - the end-to-end runs: a tiny whole run and the reruns on it, ... (~8 min)"
	@echo "make test-cluster - the cluster paths: torchrun ranks, a real SLURM on loopback (~4 min)"
	@echo "make lint   - ruff, snakefmt --check, snakemake --lint"
	@echo "make rulegraph - redraw docs/rulegraph.svg"
	@echo "make slurm-profile ARGS='--partition P --gpu-partition G --max-runtime MIN ...'"
	@echo "             - write the SLURM site profile (then: snakemake --profile slurm all)"

# This package's bytecode, at every set-up (seconds the first time, nothing when it is current):
# where PYTHONDONTWRITEBYTECODE is set no process writes it, so every job and every Snakemake
# start compiled the modules of imagenot it imports (about 0.1 CPU-s a job, up to 0.25 s a
# Snakemake start; docs/benchmarks.md). A module edited later is compiled in memory until the
# next set-up.
setup: $(VENV)/.installed sysdeps
	$(BIN)/python -m compileall -q workflow/imagenot
	@echo "[setup] done: .venv/bin/imagenot, .venv/bin/snakemake (next: make demo, or README section 4)"

# Each step says what it does before it starts: the pinned set is ~6 GB (torch's CUDA build), a
# few minutes on a first run, with uv's own counts at its end.
$(VENV)/.installed: envs/requirements.lock pyproject.toml
	@echo "[setup 1/4] the virtual environment $(VENV)"
	test -x $(BIN)/python || python3 -m venv $(VENV)
	@echo "[setup 2/4] pip and uv (the installer)"
	$(PIP) install -q --upgrade pip uv==$(UV_VERSION)
	@echo "[setup 3/4] the pinned packages of envs/requirements.lock (~6 GB the first time: minutes)"
	$(UV_LOUD) -r envs/requirements.lock
	@echo "[setup 4/4] this package, editable (console script imagenot), and the bytecode"
	$(UV) --no-deps -e .
	@# a file that does not compile (a package's Python 2 example) is skipped, as uv skips it;
	@# torch's bytecode must be there
	site="$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
	$(BIN)/python -m compileall -q -j 0 -x '$(NOT_IMPORTED)' "$$site" > /dev/null; \
	ls "$$site"/torch/__pycache__/__init__.*.pyc > /dev/null \
		|| { echo "make setup: no bytecode compiled under $$site"; exit 1; }
	touch $@

sysdeps:
	@echo "[setup] system packages (WordNet 3.0, graphviz, Fashion-MNIST, chromium): apt if missing"
	bash scripts/system-deps.sh

demo: setup
	$(RUN) snakemake --profile $(PROFILE) all
	@# the report trusts .snakemake/metadata: checked first (docs/security.md)
	$(RUN) python -m imagenot.run.report_trust
	$(RUN) snakemake --profile $(PROFILE) --report results/report.html
	@echo "Report: results/report.html (summary: results/summary.md)"

test: setup
	$(RUN) pytest $(PYTEST_WORKERS) -m "$(PYTEST_MARKS)" $(PYTEST_ARGS)

test-slow: setup
	$(RUN) pytest $(PYTEST_WORKERS) -m "slow and not cluster" $(PYTEST_ARGS)

test-cluster: setup
	$(RUN) pytest $(PYTEST_WORKERS) -m cluster $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(RUN) ruff check workflow tests benchmarks
	$(RUN) ruff format --check workflow tests benchmarks
	$(RUN) snakefmt --check Snakefile rules
	$(RUN) snakemake --lint

format: $(VENV)/.installed
	$(RUN) ruff check --fix workflow tests benchmarks
	$(RUN) ruff format workflow tests benchmarks
	$(RUN) snakefmt Snakefile rules

# The SLURM site profile in ~/.config/snakemake/slurm/ (docs/cluster.md; flags: imagenot
# slurm-profile --help).
slurm-profile: $(VENV)/.installed
	$(RUN) imagenot slurm-profile $(ARGS)

rulegraph: $(VENV)/.installed
	$(RUN) snakemake --rulegraph | dot -Tsvg > docs/rulegraph.svg

clean:
	rm -rf results .snakemake
