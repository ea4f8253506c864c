#!/usr/bin/env bash
# The preflight's checks (imagenot preflight, docs/gpu.md "First hour on a GPU") for AlexNet,
# ResNet-18, ConvNeXt-L and EfficientNet-V2-L at 224 px, as config/paper.yaml trains them
# (ImageNot ST: batch 256, the paper config's per-GPU caps, images stored at 256 px, its loader
# workers), on one GPU, printing one table: peak device memory at the per-GPU batch, the real
# feed against device-resident data, bf16 against float32. Minutes, not hours: made for the first
# lent GPU, with a prepared .venv (`make setup`). The report lands in OUT_DIR (default
# results/preflight): gpu_check.md and gpu_check.json when every check passed, else
# gpu_check.failed.md / .json.
#
#   benchmarks/gpu_check.sh [OUT_DIR]          # on a GPU node
#   benchmarks/gpu_check.sh --cpu [OUT_DIR]    # smoke run on the CPU: the tiny models, 64 px
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-.venv/bin/python}
if [[ "${1:-}" == "--cpu" ]]; then
    shift
    config=config/config.yaml
    models=alexnet_mini,resnet_mini,convnext_mini,efficientnet_mini
    args=(--spaces st --device cpu --workers 1 --threads 1
          --feed-steps 2 --feed-warmup 1 --feed-images 16)
else
    config=config/paper.yaml
    models=alexnet,resnet18,convnext_large,efficientnet_v2_l
    args=(--spaces imagenot_st --threads 8 --feed-steps 30 --feed-warmup 5 --feed-images 1024)
fi
out=${1:-results/preflight}
mkdir -p "$out"
exec "$python" -m imagenot.cli preflight --config "$config" --models "$models" "${args[@]}" \
    --table --json "$out/gpu_check.json" --md "$out/gpu_check.md"
