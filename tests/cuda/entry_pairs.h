#pragma once
// For the CUDA suite's kernel-entry cases (tests/cuda/test_reduce.cpp, test_norm.cpp): one entry run
// on the CPU and on the GPU from the same inputs. A Pair holds a tensor and its copy on the GPU;
// outputs start as the same filler on both sides, so an element the GPU leaves unwritten differs.
#include <cstring>
#include <string>
#include <type_traits>

#include "tests/cuda/cuda_test_util.h"

namespace wf::cuda_test {

template <class T>
constexpr DType kDType = std::is_same_v<T, float> ? DType::f32 : DType::f64;
// f32: the GPU rounds the same double sums (or T arithmetic) as the CPU, up to the order of the
// additions and FMA contraction: 1e-5 relative, 1e-6 absolute near 0. f64: the order only.
template <class T>
constexpr double kRtol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
template <class T>
constexpr double kAtol = std::is_same_v<T, float> ? 1e-6 : 1e-12;

struct Pair {
  Tensor cpu, gpu;
  void* c() { return cpu.raw_data(); }
  void* g() { return gpu.raw_data(); }
};
// `host` and its copy on the GPU.
inline Pair on_both(const Tensor& host) { return {host, host.to(gpu())}; }
// Random normal inputs of `shape` (fresh per call site through `salt`).
template <class T>
Pair random_pair(const Shape& shape, std::uint64_t salt) {
  return on_both(random_normal(shape, fresh_seed(salt), kDType<T>));
}
// Outputs: `fill` everywhere on both sides.
inline Pair output_pair(const Shape& shape, DType dtype, double fill = -7.0) {
  return {Tensor::full(shape, fill, dtype), Tensor::full(shape, fill, dtype, gpu())};
}

// The same bytes (a repeated run is deterministic, NaNs included).
inline void require_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  const Tensor x = a.to(Device::cpu()), y = b.to(Device::cpu());
  INFO(what);
  REQUIRE(x.shape() == y.shape());
  REQUIRE(x.dtype() == y.dtype());
  REQUIRE((x.nbytes() == 0 || std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0));
}

}  // namespace wf::cuda_test
