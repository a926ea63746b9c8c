#!/usr/bin/env bash
# Kernel throughput beside OpenBLAS sgemm, one thread, under both OpenBLAS core types:
# the environment's OPENBLAS_CORETYPE (Haswell here, which halves sgemm on AVX-512 cores) and
# OpenBLAS's own detection. Ratios are measured within each run.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/wallfacer ] || scripts/build.sh build
echo "== OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-(unset)} (as set by the environment)"
OMP_NUM_THREADS=1 build/wallfacer bench kernels --threads 1 "$@"
echo
echo "== OPENBLAS_CORETYPE unset (OpenBLAS detects the core)"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 build/wallfacer bench kernels --threads 1 "$@"
