#!/usr/bin/env bash
# DiT under sequence parallelism (`wallfacer bench layout` on configs/dit-fashion.yaml reshaped):
# a DiT-S-like model (12 blocks, d_model 384, 6 heads) on synthetic 3-channel 128x128 images in
# 2x2 patches, 4096 patches per image, one image per micro batch, at sp = 1, 2 and 4 with ring,
# Ulysses and WallFacer (each team size C with C² | sp). Per layout: step time, patches/s (the
# "tokens/s" column), achieved GFLOP/s (patches/s × the model's training FLOPs per patch,
# Model::train_flops_per_token), per-rank memory, and the bytes each group sends per step beside
# train/step_traffic.h's formula (--check: the command fails when one differs). One OpenMP thread
# per rank; on a machine with fewer cores than ranks the ranks time-share cores and the times show
# it (the byte counts do not depend on it).
#   scripts/bench-dit.sh [BUILD_DIR] [extra bench layout flags, e.g. --json]
# WF_BENCH_QUICK=1 runs a 1-block DiT on 16x16 images (64 patches) for 1 step instead: checks
# that the script runs (the tests), measures nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
[ -x "$build/wallfacer" ] || scripts/build.sh "$build"
cores=$(nproc)
source scripts/mpi-env.sh
steps=2
image=(--set model.image_size=128 --set model.d_model=384 --set model.n_layer=12 --set train.seq_len=4096)
if [ "${WF_BENCH_QUICK:-0}" = 1 ]; then
  steps=1
  image=(--set model.image_size=16 --set model.d_model=48 --set model.n_layer=1 --set train.seq_len=64)
fi
dit_s=(configs/dit-fashion.yaml --set data.source=synthetic "${image[@]}"
       --set model.in_channels=3 --set model.patch_size=2 --set model.n_head=6
       --set train.micro_batch_size=1 --set train.global_batch_size=1
       --set parallel.dp=1 --set parallel.C=1)
for sp in 1 2 4; do
  echo "== mpirun -np $sp: sp $sp"
  [ "$cores" -lt "$sp" ] && echo "note: $sp ranks on $cores cores: oversubscribed, ranks time-share cores"
  # Only the sequence-parallel layouts of the world (dp 1, tp 1): sp1, or sp<N> under every strategy.
  OMP_NUM_THREADS=1 mpirun -np "$sp" "$build/wallfacer" bench layout "${dit_s[@]}" \
    --set parallel.sp="$sp" --layouts "$( [ "$sp" = 1 ] && echo dp1.tp1.sp1 ||
      { echo -n "dp1.tp1.sp$sp.ring,dp1.tp1.sp$sp.ulysses,dp1.tp1.sp$sp.wallfacer.C1";
        [ "$sp" = 4 ] && echo -n ",dp1.tp1.sp4.wallfacer.C2"; echo; } )" --steps "$steps" --check "$@"
  echo
done
