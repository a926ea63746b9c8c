#pragma once
// The per-rank peak FLOP/s that model FLOP utilisation (MFU) is measured against: set in the
// config (log.peak_gflops, e.g. a GPU's datasheet rate), or measured on this machine as the
// default GEMM backend's sgemm rate times the threads a rank computes with — the rate our GEMMs
// run at, so an MFU near 100 % means the step runs at the machine's matmul speed.
#include <cstdint>
#include <string>
#include <string_view>

#include "wallfacer/config/run_config.h"

namespace wf::train {

// GFLOP/s (2·m·n·k per product) of C[m, n] = A[m, k]·B[k, n] in f32 on one thread, median of
// `iters` runs after one warm-up, with the GEMM backend named as WF_CPU_GEMM names it
// ("openblas", "onednn", "eigen"), or "default": the one the process runs (kernels/cpu/gemm.h).
// OpenBLAS's rate is the yardstick the `wallfacer bench` commands print.
double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters, std::string_view backend = "default");
// The name of the backend "default" stands for, and why it was chosen.
std::string default_gemm_description();

struct PeakFlops {
  double gflops_per_rank = 0;
  // "log.peak_gflops", or where the rate came from: "cached in ~/.cache/wallfacer/peak-flops.txt:
  // sgemm (onednn) 91.3 GFLOP/s x 2 threads, measured 2026-12-04 20:51 UTC" ("measured now, cached in ...").
  std::string source;
};

// log.peak_gflops when it is set (> 0); otherwise the default backend's one-thread sgemm rate
// (measured once per machine, about 0.1 s, and kept beside the GEMM backend choice:
// <machine_cache_dir>/peak-flops.txt) times the rank's threads.
PeakFlops peak_flops(const config::LogConfig& log);

}  // namespace wf::train
