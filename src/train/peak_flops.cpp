#include "wallfacer/train/peak_flops.h"

#include <cblas.h>
#include <fmt/format.h>

#include "src/core/timing.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/core/threading.h"

namespace wf::train {

double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters) {
  init_blas_threads();
  // Seeded draws, never the default generator: measuring must not move the dropout stream (a
  // resumed run would draw other masks).
  Tensor a = Tensor::randn_at({m, k}, 1, 0), b = Tensor::randn_at({k, n}, 2, 0), c = Tensor::zeros({m, n});
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  const double s = median_seconds(iters, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mi, ni, ki, 1.0f, a.data<float>(), ki, b.data<float>(), ni,
                0.0f, c.data<float>(), ni);
  });
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / s * 1e-9;
}

PeakFlops peak_flops(const config::LogConfig& log) {
  if (log.peak_gflops > 0) return {log.peak_gflops, "log.peak_gflops"};
  // 512³: large enough for the kernel's full rate, small enough to take milliseconds.
  const double one_thread = sgemm_gflops(512, 512, 512, 5);
  const int threads = num_threads();
  return {one_thread * threads, fmt::format("measured: sgemm {:.1f} GFLOP/s x {} thread{}", one_thread, threads,
                                            threads == 1 ? "" : "s")};
}

}  // namespace wf::train
