# The one setup line of the README's mpirun commands:   source scripts/mpi-env.sh
# Exports the Open MPI settings the mpirun tests pass as flags (tests/CMakeLists.txt,
# WF_MPIEXEC_FLAGS), so that a plain `mpirun -np 8 build/wallfacer ...` runs on a small machine as
# root; the benchmark scripts and scripts/demo.sh source it too. Nothing is exported for another MPI.
#   - running as root (containers, CI) is allowed: Open MPI refuses it unless told;
#   - more ranks than cores are allowed ("not enough slots" otherwise), and waiting ranks yield
#     the core to the ranks that share it instead of spinning;
#   - no CMA single-copy path in the shared-memory transport: it needs ptrace rights that some
#     containers withhold, and then fails mid-run ("Read -1, expected ...").
# Not set here: OMPI_MCA_odls_base_sigkill_timeout, which gives the ranks time to save a checkpoint
# on Ctrl-C (docs/training.md, "Interrupting a run"), because mpirun waits twice that long before
# it returns from ANY failed job (measured: 2.4 s at the default 1 s, 20 s at 10 s).
# OMP_NUM_THREADS is left alone: wallfacer gives each rank cores / local ranks OpenMP threads
# unless it is set (4 ranks on 2 cores: 1 thread each), so one value never fits every -np.
# Command-line flags still override these (e.g. --mca btl_vader_single_copy_mechanism cma).
# shellcheck shell=bash
if mpirun --version 2>&1 | grep -q "Open MPI\|OpenRTE"; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
fi
