#!/usr/bin/env bash
# Ensure the system data the workflow reads is present; install it with apt when we are root.
#   WordNet 3.0 database (wordnet-base, wordnet-sense-index), graphviz (dot, for --dag pictures),
#   Fashion-MNIST (dataset-fashion-mnist, the demo's downstream dataset), chromium (the headless
#   browser the report test renders results/report.html with).
# A second run installs nothing. Not root or no apt: print what to install and fail.
set -euo pipefail
declare -A check=(
  [wordnet-base]=/usr/share/wordnet/data.noun
  [wordnet-sense-index]=/usr/share/wordnet/index.sense
  [graphviz]=/usr/bin/dot
  [dataset-fashion-mnist]=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
  [chromium]=/usr/bin/chromium
)
missing=()
for pkg in "${!check[@]}"; do
  [ -e "${check[$pkg]}" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "[system-deps] installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "[system-deps] missing system packages: ${missing[*]}" >&2
  echo "  install them with: sudo apt-get install ${missing[*]}" >&2
  echo "  (or point config keys wordnet.dict_dir / datasets paths at your own copies)" >&2
  exit 1
fi
