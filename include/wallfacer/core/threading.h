#pragma once
// CPU threads. wallfacer owns parallelism through OpenMP; OpenBLAS is kept at one thread so
// kernels may call it from inside their own parallel regions without oversubscribing cores.
#include <cstdint>

namespace wf {

// Threads used by CPU kernels (OpenMP). Defaults to OMP_NUM_THREADS or the core count.
int num_threads();
void set_num_threads(int n);
// Sets the calling thread's OpenMP thread count for a scope and restores it on exit (a
// measurement on one thread, a library call that must not start a team).
class ScopedNumThreads {
 public:
  explicit ScopedNumThreads(int n);
  ~ScopedNumThreads();
  ScopedNumThreads(const ScopedNumThreads&) = delete;
  ScopedNumThreads& operator=(const ScopedNumThreads&) = delete;

 private:
  int saved_;
};
// Pins OpenBLAS to one thread (idempotent; kernels call it before their first BLAS call).
void init_blas_threads();
// Name of the BLAS library and the core type it runs (e.g. "OpenBLAS 0.3.21 (Haswell)").
const char* blas_info();

}  // namespace wf
