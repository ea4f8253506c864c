#!/usr/bin/env bash
# Snakemake runs this once after creating the env, with the env activated, from the directory
# snakemake runs in (the repository root, unless --directory is used: then set IMAGENOT_REPO).
# Installs the imagenot package of the checkout, built into a wheel and installed as a copy
# (not editable: the env does not follow, or break with, one checkout's working tree; two
# checkouts sharing a conda prefix each get the version their env file names), without
# dependencies (they are pinned in the env file). The version is fixed here (generated with the
# env files by `python tests/test_envs.py --write`), so a new version makes a new env.
set -euo pipefail
repo=${IMAGENOT_REPO:-$PWD}
if ! grep -qs '^name = "imagenot"' "$repo/pyproject.toml"; then
  echo "post-deploy: $repo is not the imagenot repository; set IMAGENOT_REPO" >&2
  exit 1
fi
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/pyproject.toml")
wanted=0.1.0
if [ "$version" != "$wanted" ]; then
  echo "post-deploy: $repo has imagenot $version, the env file was made for $wanted:" \
       "regenerate envs (python tests/test_envs.py --write)" >&2
  exit 1
fi
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
python -m pip wheel --no-deps --no-build-isolation --wheel-dir "$wheels" "$repo"
python -m pip install --no-deps --force-reinstall "$wheels"/imagenot-"$wanted"-*.whl
