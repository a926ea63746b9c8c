// The GEMM rate and description of kernels/measure.h, measured with the CPU's kernels.
#include "kernels/measure.h"

#include <fmt/format.h>

#include "src/core/timing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/tensor.h"
#include "wallfacer/core/threading.h"

namespace wf::kernels {
namespace {

cpu::GemmBackend gemm_named(std::string_view name) {
  if (name == "default") return cpu::default_gemm_backend();
  const auto backend = cpu::parse_gemm_backend(name);
  WF_CHECK(backend.has_value(), "sgemm_gflops: no GEMM backend '{}' (default, openblas, onednn, eigen)", name);
  return *backend;
}

}  // namespace

double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters, std::string_view gemm) {
  const cpu::GemmBackend backend = gemm_named(gemm);
  // Seeded draws, never the default generator: measuring must not move the dropout stream (a
  // resumed run would draw other masks).
  Tensor a = Tensor::randn_at({m, k}, 1, 0), b = Tensor::randn_at({k, n}, 2, 0), c = Tensor::zeros({m, n});
  const ScopedNumThreads one_thread(1);
  const double s = median_seconds(iters, [&] {
    cpu::gemm<float>(false, false, m, n, k, 1.0f, a.data<float>(), k, b.data<float>(), n, 0.0f, c.data<float>(), n,
                     backend);
  });
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / s * 1e-9;
}

std::string default_gemm_description() {
  const cpu::GemmChoice choice = cpu::gemm_choice();
  return fmt::format("{} ({})", cpu::gemm_backend_name(choice.backend), choice.reason);
}

std::string default_gemm_name() { return cpu::gemm_backend_name(cpu::default_gemm_backend()); }

}  // namespace wf::kernels
