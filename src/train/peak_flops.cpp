#include "wallfacer/train/peak_flops.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>

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

namespace {

// The per-thread rate measured on this machine is kept (as the GEMM backend choice is, through
// gemm.h's machine cache), so that the MFU of every later run is against the same figure rather
// than one re-measured while other ranks share the cores. The file holds the key (the machine's and
// the backend), the rate and when it was measured; another key, or a file that cannot be read,
// is measured again.
struct CachedRate {
  double gflops = 0;
  std::string measured;  // "measured 2026-12-04 20:51 UTC"
};

std::optional<CachedRate> read_rate(const std::filesystem::path& file, const std::string& key) {
  const auto lines = kernels::cpu::read_machine_cache(file, key, 2);  // the rate, when it was measured
  if (!lines) return std::nullopt;
  const std::string& rate = (*lines)[0];
  char* end = nullptr;
  const double gflops = std::strtod(rate.c_str(), &end);
  if (end == rate.c_str() || *end != '\0' || !std::isfinite(gflops) || gflops <= 0) return std::nullopt;
  return CachedRate{gflops, (*lines)[1]};
}

}  // namespace

PeakFlops peak_flops(const config::LogConfig& log) {
  if (log.peak_gflops > 0) return {log.peak_gflops, "log.peak_gflops"};
  const int threads = num_threads();
  const char* backend = kernels::cpu::gemm_backend_name(kernels::cpu::default_gemm_backend());
  const std::filesystem::path dir = kernels::cpu::machine_cache_dir();
  const std::filesystem::path file = dir.empty() ? dir : dir / "peak-flops.txt";
  const std::string key = fmt::format("{}; sgemm {}", kernels::cpu::machine_cache_key(), backend);
  std::string where;
  std::optional<CachedRate> rate = file.empty() ? std::nullopt : read_rate(file, key);
  if (rate) {
    where = fmt::format("cached in {}", file.string());
  } else {
    // 512³: large enough for the kernel's full rate, small enough to take milliseconds.
    rate = CachedRate{sgemm_gflops(512, 512, 512, 5),
                      fmt::format("measured {:%Y-%m-%d %H:%M} UTC", fmt::gmtime(std::time(nullptr)))};
    if (!file.empty()) kernels::cpu::write_machine_cache(file, key, {fmt::format("{}", rate->gflops), rate->measured});
    where = file.empty() ? std::string("measured now (no cache directory)") : fmt::format("measured now, cached in {}",
                                                                                        file.string());
  }
  return {rate->gflops * threads, fmt::format("{}: sgemm ({}) {:.1f} GFLOP/s x {} thread{}, {}", where, backend,
                                              rate->gflops, threads, threads == 1 ? "" : "s", rate->measured)};
}

}  // namespace wf::train
