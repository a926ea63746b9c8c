#!/usr/bin/env bash
# Every dp x tp x sp layout of configs/gpt-tiny.yaml at 4 and at 8 ranks (`wallfacer bench
# layout`): step time, tokens/s, per-rank memory (parameters, gradients, AdamW moments,
# activations) and the bytes each process group sends per step beside train/step_traffic.h's
# prediction; layouts the trainer refuses are listed with the reason. Short sequences (64
# tokens) and one sequence per micro batch with 8 per step, so every layout trains the same
# tokens per step (dp 8 takes one each, dp 1 accumulates 8). One OpenMP thread per rank; on a
# machine with fewer cores than ranks the ranks time-share cores and the times show it.
#   scripts/bench-layout.sh [BUILD_DIR] [extra bench layout flags, e.g. --steps 5 --json]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
[ -x "$build/wallfacer" ] || scripts/build.sh "$build"
cores=$(nproc)
# The flags of the dist tests (tests/CMakeLists.txt, WF_MPIEXEC_FLAGS) for Open MPI.
mpi_flags=()
if mpirun --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  mpi_flags=(--oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1
             --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1)
fi
for ranks in 4 8; do
  echo "== mpirun -np $ranks"
  if [ "$cores" -lt "$ranks" ]; then
    echo "note: $ranks ranks on $cores cores: oversubscribed, ranks time-share cores"
  fi
  OMP_NUM_THREADS=1 mpirun -np "$ranks" "${mpi_flags[@]}" "$build/wallfacer" bench layout configs/gpt-tiny.yaml \
    --set train.seq_len=64 --set train.micro_batch_size=1 --set train.global_batch_size=8 --steps 3 --check "$@"
  echo
done
