#!/usr/bin/env bash
# Sequence-parallel attention at P = 4 ranks, 2048 tokens per rank (N = 8192), 8 heads (and 8
# K/V heads, so Ulysses runs), head dim 64, f32, causal and full masks: time, compute-only time,
# overlap, measured vs formula bytes, peak memory (docs/sequence-parallelism.md, "Measured on
# this machine"). One OpenMP thread per rank. On a machine with fewer than 4 cores the ranks
# share cores: the times then include the oversubscription, and overlap cannot reach 1.
#   scripts/bench-attention.sh [BUILD_DIR] [extra bench attention flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
[ -x "$build/wallfacer" ] || scripts/build.sh "$build"
ranks=4
cores=$(nproc)
if [ "$cores" -lt "$ranks" ]; then
  echo "note: $ranks ranks on $cores cores: oversubscribed, ranks time-share cores"
fi
source scripts/mpi-env.sh
for mask in causal full; do
  echo "== mask $mask"
  OMP_NUM_THREADS=1 mpirun -np "$ranks" "$build/wallfacer" bench attention \
    --seq 8192 --heads 8 --kv-heads 8 --head-dim 64 --dtype f32 --mask "$mask" --iters 3 --check "$@"
  echo
done
