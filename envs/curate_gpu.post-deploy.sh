#!/usr/bin/env bash
# Snakemake runs this once after creating the env, with the env activated, from the directory
# snakemake runs in (the repository root, unless --directory is used: then set IMAGENOT_REPO).
# Installs the imagenot package in editable mode without dependencies (they are pinned in the
# env file), so rules run `imagenot <subcommand>` with this env's interpreter and the current code.
set -euo pipefail
repo=${IMAGENOT_REPO:-$PWD}
if ! grep -qs '^name = "imagenot"' "$repo/pyproject.toml"; then
  echo "post-deploy: $repo is not the imagenot repository; set IMAGENOT_REPO" >&2
  exit 1
fi
python -m pip install --no-deps -e "$repo"
