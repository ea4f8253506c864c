#!/usr/bin/env bash
# The GPU check (benchmarks/gpu_check.py; docs/gpu.md "What to run first on a GPU" and "One GPU
# check"): within six minutes, one table of the preflight for the seven paper models, the feed
# decoding on the CPU and on the GPU, the training step against the plain loop, the costliest
# evaluation (published EfficientNet-V2-L, 480 px, float32), caption and image embedding; then
# one PASS/FAIL line per goal and an exit status that reflects them (0: every goal passed).
# Each step runs in a process group of its own and is killed with everything it started at its
# time limit. Runs with a python that has only torch, torchvision and numpy and the wheels
# gpu_check_steps.WHEELS lists (the project from source, no venv needed): $PYTHON, else the
# clone's .venv, else python3. The report lands in OUT_DIR (default results/gpu_check):
# gpu_check.md and gpu_check.json, each step's JSON and log beside them.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]          # on a GPU node
#   bash benchmarks/gpu_check.sh --cpu [OUT_DIR]    # smoke run on the CPU: tiny sizes, no goal
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${PYTHON:-}" ]]; then
    python=$PYTHON
elif [[ -x .venv/bin/python ]]; then
    python=.venv/bin/python
else
    python=python3
fi
export PYTHONPATH="$PWD/workflow${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" benchmarks/gpu_check.py "$@"
