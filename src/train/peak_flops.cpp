#include "wallfacer/train/peak_flops.h"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>

#include "kernels/measure.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace wf::train {

double sgemm_gflops(std::int64_t m, std::int64_t n, std::int64_t k, int iters, std::string_view backend_name) {
  return kernels::sgemm_gflops(m, n, k, iters, backend_name);
}

std::string default_gemm_description() { return kernels::default_gemm_description(); }

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
  const auto lines = kernels::read_machine_cache(file, key, 2);  // the rate, when it was measured
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
  const std::string backend = kernels::default_gemm_name();
  const std::filesystem::path dir = kernels::machine_cache_dir();
  const std::filesystem::path file = dir.empty() ? dir : dir / "peak-flops.txt";
  const std::string key = fmt::format("{}; sgemm {}", kernels::machine_cache_key(), backend);
  std::string where;
  std::optional<CachedRate> rate = file.empty() ? std::nullopt : read_rate(file, key);
  if (rate) {
    where = fmt::format("cached in {}", file.string());
  } else {
    // 512³: large enough for the kernel's full rate, small enough to take milliseconds.
    rate = CachedRate{sgemm_gflops(512, 512, 512, 5),
                      fmt::format("measured {:%Y-%m-%d %H:%M} UTC", fmt::gmtime(std::time(nullptr)))};
    if (!file.empty()) kernels::write_machine_cache(file, key, {fmt::format("{}", rate->gflops), rate->measured});
    where = file.empty() ? std::string("measured now (no cache directory)") : fmt::format("measured now, cached in {}",
                                                                                        file.string());
  }
  return {rate->gflops * threads, fmt::format("{}: sgemm ({}) {:.1f} GFLOP/s x {} thread{}, {}", where, backend,
                                              rate->gflops, threads, threads == 1 ? "" : "s", rate->measured)};
}

}  // namespace wf::train
