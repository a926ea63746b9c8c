#pragma once
// OpenBLAS sgemm called directly, on one thread (wallfacer keeps OpenBLAS single-threaded,
// wallfacer/core/threading.h): the yardstick the `wallfacer bench` commands print beside their
// own rates, measured in the same run so that the ratio means something on a noisy machine.
#include <cstdint>

namespace wf::cli {

// GFLOP/s (2·m·n·k per product) of C[m, n] = A[m, k]·B[k, n], f32 row-major, median of `iters`
// runs after one warm-up.
double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters);

}  // namespace wf::cli
