# Two commands do all set-up on a fresh machine:  `make demo`  and  `make test`.
SHELL := /bin/bash
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
# Install the standard (CUDA-built) torch wheels from the package index: they also run on CPU,
# and torchvision's compiled ops need them. Ignore site-wide find-links that carry a CPU-only torch.
PIP := env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null $(BIN)/pip
# The pinned packages go in with uv (pip's drop-in installer: parallel downloads and unpacking),
# from the same index and to the same versions: 19 s against pip's 94 s for the ~6 GB of torch's
# CUDA build on this machine (docs/benchmarks.md, "make test"). pip stays in the venv (newest):
# tests/test_envs.py resolves the conda envs' pip parts with it.
UV_VERSION := 0.13.9
# --compile-bytecode as pip does: where PYTHONDONTWRITEBYTECODE is set (this CI machine), no job
# would cache the .pyc files, and every process compiled torch again (a run took minutes longer).
UV := env -u PIP_FIND_LINKS UV_NO_CONFIG=1 $(BIN)/uv pip install -q --compile-bytecode \
	--python $(BIN)/python
RUN := env PATH="$(BIN):$$PATH"
PROFILE ?= profiles/local
PYTEST_ARGS ?=
# make test: one worker per core (at most 3), each taking whole test modules (their fixtures are
# built once), the costliest first (tests/conftest.py). `pytest tests/test_x.py` runs in-process.
PYTEST_WORKERS ?= -n auto --maxprocesses 3 --dist loadscope --no-loadscope-reorder

.PHONY: demo test lint format setup sysdeps rulegraph clean help slurm-profile

help:
	@echo "make demo   - set up and run the whole workflow on the demo world (CPU, minutes)"
	@echo "make test   - set up and run the test suite"
	@echo "make lint   - ruff, snakefmt --check, snakemake --lint"
	@echo "make rulegraph - redraw docs/rulegraph.svg"
	@echo "make slurm-profile ARGS='--partition P --gpu-partition G --max-runtime MIN ...'"
	@echo "             - write the SLURM site profile (then: snakemake --profile slurm all)"

setup: $(VENV)/.installed sysdeps

$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(BIN)/python || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip uv==$(UV_VERSION)
	$(UV) -r requirements.lock
	$(UV) --no-deps -e .
	touch $@

sysdeps:
	bash scripts/system-deps.sh

demo: setup
	$(RUN) snakemake --profile $(PROFILE) all
	$(RUN) snakemake --profile $(PROFILE) --report results/report.html
	@echo "Report: results/report.html (summary: results/summary.md)"

test: setup
	$(RUN) pytest $(PYTEST_WORKERS) $(PYTEST_ARGS)

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
