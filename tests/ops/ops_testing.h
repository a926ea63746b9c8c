#pragma once
// Shared helpers for the op tests: seeded random inputs, elementwise comparison, a gradcheck
// assertion that prints the first failure, and index arithmetic for reference loops.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "wallfacer/autograd/gradcheck.h"
#include "wallfacer/core/tensor.h"

namespace wf::testing {

using autograd::TensorList;

// Standard normal values, reproducible from the seed (f64 unless told).
inline Tensor random(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64) {
  return Tensor::randn_at(shape, seed, 0, dtype);
}
// The same, marked as a leaf that requires grad (for gradcheck and backward tests).
inline Tensor random_leaf(const Shape& shape, std::uint64_t seed) {
  Tensor t = random(shape, seed);
  t.set_requires_grad(true);
  return t;
}

// Same shape, and every element within atol + rtol·|expected|.
inline void require_close(const Tensor& actual, const Tensor& expected, double atol = 1e-12, double rtol = 1e-12) {
  REQUIRE(actual.defined());
  REQUIRE(actual.shape() == expected.shape());
  for (std::int64_t i = 0; i < expected.numel(); ++i) {
    const double a = actual.at(i), e = expected.at(i);
    if (std::isnan(e)) {
      REQUIRE(std::isnan(a));
      continue;
    }
    INFO("element " << i << " of shape " << shape_str(expected.shape()) << ": " << a << " vs " << e);
    REQUIRE(std::abs(a - e) <= atol + rtol * std::abs(e));
  }
}

// Same dtype, shape and bits (values and the signs of zeros; every dtype here widens to f64 exactly):
// fused ops against the composition they replace. Either tensor may live on any device.
inline void require_bitwise(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined() == want.defined());
  if (!got.defined()) return;
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const Tensor g = got.to(Device::cpu()).to(DType::f64), w = want.to(Device::cpu()).to(DType::f64);
  for (std::int64_t i = 0; i < g.numel(); ++i) {
    INFO("element " << i << ": " << g.at(i) << " vs " << w.at(i));
    REQUIRE((g.at(i) == w.at(i) && std::signbit(g.at(i)) == std::signbit(w.at(i))));
  }
}

inline void require_gradcheck(const autograd::GradcheckFn& fn, const TensorList& inputs,
                              const autograd::GradcheckOptions& options = {}) {
  const autograd::GradcheckResult r = autograd::gradcheck(fn, inputs, options);
  INFO(r.message);
  REQUIRE(r.elements_checked > 0);
  REQUIRE(r.ok);
}

// Multi-index of flat element i of a row-major shape, and back.
inline std::vector<std::int64_t> unravel(std::int64_t i, const Shape& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return index;
}
inline std::int64_t ravel(const std::vector<std::int64_t>& index, const Shape& shape) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}
// Flat element of `shape` read at an index of a broadcast result of more (or equal) dims.
inline std::int64_t broadcast_source(const std::vector<std::int64_t>& out_index, const Shape& shape) {
  const std::size_t skip = out_index.size() - shape.size();
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : out_index[skip + d]);
  return flat;
}

}  // namespace wf::testing
