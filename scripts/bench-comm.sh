#!/usr/bin/env bash
# Communication benchmark: every Group primitive from 1 KiB to 64 MiB beside raw MPI on the
# same buffers, and the overlap of a non-blocking ring exchange with compute (progress thread
# off and on), under mpirun with 2 and 4 ranks. Overheads are measured within each run.
#
#   scripts/bench-comm.sh [wallfacer bench comm options...]   (default: --overlap)
#
# Environment:
#   WF_BUILD_DIR      build tree holding the wallfacer executable (default build; built if missing)
#   WF_BENCH_RANKS    world sizes to run (default "2 4")
#   WF_MPIRUN_FLAGS   extra mpirun flags, e.g. "--mca btl_vader_single_copy_mechanism cma" to
#                     use the shared-memory single-copy path scripts/mpi-env.sh turns off
set -euo pipefail
cd "$(dirname "$0")/.."
build="${WF_BUILD_DIR:-build}"
[ -x "$build/wallfacer" ] || scripts/build.sh "$build"
[ "$#" -gt 0 ] || set -- --overlap

# The settings of the mpirun tests (scripts/mpi-env.sh): root and more ranks than cores allowed,
# ranks that yield while they wait, and no CMA single-copy path (it needs ptrace rights some
# containers withhold). Flags given in WF_MPIRUN_FLAGS override them.
source scripts/mpi-env.sh
# shellcheck disable=SC2206  # WF_MPIRUN_FLAGS is a list of words on purpose
extra=(${WF_MPIRUN_FLAGS:-})

echo "== $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for ranks in ${WF_BENCH_RANKS:-2 4}; do
  echo
  echo "== mpirun -np $ranks ${extra[*]}"
  OMP_NUM_THREADS=1 mpirun -np "$ranks" "${extra[@]}" "$build/wallfacer" bench comm "$@"
done
