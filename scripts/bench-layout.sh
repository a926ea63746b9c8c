#!/usr/bin/env bash
# Every dp x tp x sp layout of configs/gpt-tiny.yaml at 4 and at 8 ranks (`wallfacer bench
# layout`): step time, tokens/s, per-rank memory (parameters, gradients, AdamW moments,
# activations) and the bytes each process group sends per step beside train/step_traffic.h's
# prediction; layouts the trainer refuses are listed with the reason. Short sequences (64
# tokens) and one sequence per micro batch with 8 per step, so every layout trains the same
# tokens per step (dp 8 takes one each, dp 1 accumulates 8). One OpenMP thread per rank; on a
# machine with fewer cores than ranks the ranks time-share cores and the times show it. Then dp 4
# at ZeRO 0, 1 and 2, and pp 2 under 1F1B and GPipe (below).
#   scripts/bench-layout.sh [BUILD_DIR] [extra bench layout flags, e.g. --steps 5 --json]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
[ -x "$build/wallfacer" ] || scripts/build.sh "$build"
cores=$(nproc)
source scripts/mpi-env.sh
tiny=(configs/gpt-tiny.yaml --set train.seq_len=64 --set train.micro_batch_size=1 --set train.global_batch_size=8)
bench() {  # RANKS [bench layout flags...]
  local ranks=$1
  shift
  if [ "$cores" -lt "$ranks" ]; then
    echo "note: $ranks ranks on $cores cores: oversubscribed, ranks time-share cores"
  fi
  OMP_NUM_THREADS=1 mpirun -np "$ranks" "$build/wallfacer" bench layout "${tiny[@]}" "$@"
  echo
}
for ranks in 4 8; do
  echo "== mpirun -np $ranks"
  bench "$ranks" --steps 3 --check "$@"
done
# ZeRO 0, 1 and 2 on dp 4 (a replica group of 4, where docs/parallelism.md's targets apply):
# optimizer state and gradient bytes per rank and the step time of ZeRO-k over ZeRO-0. ZeRO-2
# keeps a quarter of the gradients plus its staging pool: ReplicaGradientOptions::staging_buffers
# (2) buffers of one bucket each. At the default 25 MiB the 12.6 MiB model is one bucket, so the
# pool alone is a whole model; ZeRO-2's buckets cut through parameters, so 128 KiB buckets (~100)
# keep the pool at 2 % of the model. Microbatches of 2 sequences, no accumulation: ZeRO-2
# reduce-scatters every microbatch, so with accumulation it sends more than ZeRO-0 by design.
# More measured steps than above: the step time ratio is a median of medians on a shared machine.
echo "== mpirun -np 4, ZeRO 0,1,2 at dp4"
bench 4 --layouts dp4 --zero 0,1,2 --set parallel.grad_bucket_mb=0.125 --set train.micro_batch_size=2 \
  --set train.global_batch_size=8 --steps 15 --check "$@"
# Pipeline parallelism: pp 2 on 2 ranks, one OpenMP thread each (one core per rank on a 2-core
# machine), m = 8 microbatches of one sequence (global batch 8, micro batch 1), under 1F1B and
# GPipe one after the other: the measured bubble beside the ideal (p - 1)/m = 0.125, and per
# stage 1F1B's step peak beside GPipe's / (m / p) + one microbatch. The config's 256-token
# sequences, so a microbatch's compute outweighs the point-to-point latency.
echo "== mpirun -np 2, pp 2, 1F1B and GPipe, m = 8"
bench 2 --layouts dp1.pp2 --pp-schedule 1f1b,gpipe --set train.seq_len=256 --steps 10 --check "$@"
