#pragma once
// The per-rank peak FLOP/s that model FLOP utilisation (MFU) is measured against: set in the
// config (log.peak_gflops, e.g. a GPU's datasheet rate), or measured on this machine as OpenBLAS
// sgemm's rate times the threads a rank computes with — the rate our GEMMs are built on, so an
// MFU near 100 % means the step runs at the machine's matmul speed.
#include <cstdint>
#include <string>

#include "wallfacer/config/run_config.h"

namespace wf::train {

// GFLOP/s (2·m·n·k per product) of C[m, n] = A[m, k]·B[k, n] with OpenBLAS sgemm on one thread
// (wallfacer keeps OpenBLAS single-threaded, core/threading.h), f32 row-major, median of `iters`
// runs after one warm-up: also the yardstick the `wallfacer bench` commands print.
double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters);

struct PeakFlops {
  double gflops_per_rank = 0;
  std::string source;  // "log.peak_gflops" or "measured: sgemm 91.3 GFLOP/s x 2 threads"
};

// log.peak_gflops when it is set (> 0); otherwise measured now (about 0.1 s).
PeakFlops peak_flops(const config::LogConfig& log);

}  // namespace wf::train
