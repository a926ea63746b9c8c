#pragma once
// CPU threads. wallfacer owns parallelism through OpenMP; OpenBLAS is kept at one thread so
// kernels may call it from inside their own parallel regions without oversubscribing cores.
#include <cstdint>

namespace wf {

// Threads used by CPU kernels (OpenMP). Defaults to OMP_NUM_THREADS or the core count.
int num_threads();
void set_num_threads(int n);
// Pins OpenBLAS to one thread (idempotent; kernels call it before their first BLAS call).
void init_blas_threads();
// Name of the BLAS library and the core type it runs (e.g. "OpenBLAS 0.3.21 (Haswell)").
const char* blas_info();

}  // namespace wf
