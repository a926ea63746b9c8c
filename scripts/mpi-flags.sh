# Sourced by the benchmark scripts: sets mpi_flags to the flags of the dist tests
# (tests/CMakeLists.txt, WF_MPIEXEC_FLAGS) for Open MPI, which refuses root and more ranks than
# cores unless told; one OpenMP thread per rank. Empty for another MPI.
# shellcheck shell=bash
mpi_flags=()
if mpirun --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  mpi_flags=(--oversubscribe --allow-run-as-root --mca mpi_yield_when_idle 1
             --mca btl_vader_single_copy_mechanism none -x OMP_NUM_THREADS=1)
fi
