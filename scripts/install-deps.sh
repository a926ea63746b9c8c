#!/usr/bin/env bash
# Installs wallfacer's build and test dependencies from Debian 12 packages.
# Idempotent and non-interactive: packages already present are left alone.
set -euo pipefail

# npm (for scripts/fetch-gpt2-bpe.sh) is not in this list: the machines come with their own npm,
# and Debian's npm package conflicts with it.
PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libopenmpi-dev openmpi-bin
  libeigen3-dev libopenblas-dev libdnnl-dev
  libyaml-cpp-dev libspdlog-dev libfmt-dev
  catch2 nlohmann-json3-dev libcli11-dev
  # src/data: zlib reads gzipped IDX images and documents, libpng writes sample grids.
  libpng-dev zlib1g-dev
  bible-kjv gnuplot-nox python3-torch
  # The DiT's images (tests/data/test_idx_images.cpp reads them): /usr/share/datasets/fashion-mnist/.
  dataset-fashion-mnist
  # scripts/fuzz.sh: clang with libFuzzer and the sanitizer runtimes, lld, clang's OpenMP.
  clang-14 lld-14 libclang-rt-14-dev libomp-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
