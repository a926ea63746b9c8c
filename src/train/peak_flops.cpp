#include "wallfacer/train/peak_flops.h"

#include <fmt/format.h>

#include "kernels/cpu/gemm.h"
#include "wallfacer/core/error.h"

#include "src/core/timing.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/core/threading.h"

namespace wf::train {

namespace {

kernels::cpu::GemmBackend backend_named(std::string_view name) {
  if (name == "default") return kernels::cpu::default_gemm_backend();
  const auto backend = kernels::cpu::parse_gemm_backend(name);
  WF_CHECK(backend.has_value(), "sgemm_gflops: no GEMM backend '{}' (default, openblas, onednn, eigen)", name);
  return *backend;
}

}  // namespace

double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters, std::string_view backend_name) {
  const kernels::cpu::GemmBackend backend = backend_named(backend_name);
  // Seeded draws, never the default generator: measuring must not move the dropout stream (a
  // resumed run would draw other masks).
  Tensor a = Tensor::randn_at({m, k}, 1, 0), b = Tensor::randn_at({k, n}, 2, 0), c = Tensor::zeros({m, n});
  const ScopedNumThreads one_thread(1);
  const double s = median_seconds(iters, [&] {
    kernels::cpu::gemm<float>(false, false, m, n, k, 1.0f, a.data<float>(), k, b.data<float>(), n, 0.0f,
                              c.data<float>(), n, backend);
  });
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / s * 1e-9;
}

std::string default_gemm_description() {
  const kernels::cpu::GemmChoice choice = kernels::cpu::gemm_choice();
  return fmt::format("{} ({})", kernels::cpu::gemm_backend_name(choice.backend), choice.reason);
}

PeakFlops peak_flops(const config::LogConfig& log) {
  if (log.peak_gflops > 0) return {log.peak_gflops, "log.peak_gflops"};
  // 512³: large enough for the kernel's full rate, small enough to take milliseconds.
  const double one_thread = sgemm_gflops(512, 512, 512, 5);
  const int threads = num_threads();
  return {one_thread * threads,
          fmt::format("measured: sgemm ({}) {:.1f} GFLOP/s x {} thread{}",
                      kernels::cpu::gemm_backend_name(kernels::cpu::default_gemm_backend()), one_thread, threads,
                      threads == 1 ? "" : "s")};
}

}  // namespace wf::train
