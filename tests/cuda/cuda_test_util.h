#pragma once
// Helpers of the CUDA suite (tests/cuda): every case runs one kernel entry (or op, or model) on the
// GPU and on the CPU from the same fresh random inputs and compares them with a stated tolerance.
// The suite runs only where a GPU is visible (tests/CMakeLists.txt: elsewhere CTest reports it as
// not run, with the reason), so cases may assume Device::cuda() works.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/backend.h"
#include "wallfacer/core/stream.h"
#include "wallfacer/core/tensor.h"

namespace wf::cuda_test {

inline Device gpu() { return Device::cuda(0); }
inline kernels::Backend& gpu_kernels() { return kernels::backend_for(gpu()); }
inline kernels::Backend& cpu_kernels() { return kernels::backend_for(Device::cpu()); }
inline Stream gpu_stream() { return Stream::current(gpu()); }
inline Stream cpu_stream() { return Stream::current(Device::cpu()); }

// Normal values from a seed (fresh per case: callers pass a seed drawn from the case's name and
// Catch's random seed), made on the CPU in f64 and converted to `dtype`.
inline Tensor random_normal(const Shape& shape, std::uint64_t seed, DType dtype = DType::f32) {
  return Tensor::randn_at(shape, seed, 0, DType::f64).to(dtype);
}
// A seed that differs per run (Catch's --rng-seed, which CTest leaves at its default 0: pass
// `--rng-seed time` to draw new inputs) and per call site.
inline std::uint64_t fresh_seed(std::uint64_t salt) {
  return (static_cast<std::uint64_t>(Catch::rngSeed()) << 20) ^ (salt * 0x9E3779B97F4A7C15ull);
}

// REQUIREs |got − want| <= atol + rtol·|want| elementwise (both copied to the CPU as f64), no NaN
// in `got` unless `want` has it there; the message names `what`, the worst element and both values.
inline void require_close(const Tensor& got, const Tensor& want, double rtol, double atol, const std::string& what) {
  const Tensor g = got.to(Device::cpu()).to(DType::f64);
  const Tensor w = want.to(Device::cpu()).to(DType::f64);
  INFO(what);
  REQUIRE(g.shape() == w.shape());
  const double* gp = g.data<double>();
  const double* wp = w.data<double>();
  std::int64_t worst = -1;
  double worst_excess = 0;
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    const bool g_nan = std::isnan(gp[i]), w_nan = std::isnan(wp[i]);
    if (g_nan || w_nan) {
      INFO("element " << i << ": got " << gp[i] << ", want " << wp[i]);
      REQUIRE(g_nan == w_nan);
      continue;
    }
    if (std::isinf(wp[i]) || std::isinf(gp[i])) {
      INFO("element " << i << ": got " << gp[i] << ", want " << wp[i]);
      REQUIRE(gp[i] == wp[i]);
      continue;
    }
    const double excess = std::abs(gp[i] - wp[i]) - (atol + rtol * std::abs(wp[i]));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (worst >= 0) {
    INFO("worst element " << worst << " of " << g.numel() << ": got " << gp[worst] << ", want " << wp[worst]
                          << " (rtol " << rtol << ", atol " << atol << ")");
    REQUIRE(worst < 0);
  }
}

// REQUIREs the same bytes (counts, masks, gathers: exact by design).
inline void require_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  require_close(got, want, 0.0, 0.0, what);
}

}  // namespace wf::cuda_test
