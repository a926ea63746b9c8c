#pragma once
// Helpers for the nn tests: gradient checks of whole modules (inputs and every parameter) by
// central differences in f64, and tensor comparisons.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>

#include "src/core/address_sanitizer.h"
#include "wallfacer/autograd/grad_mode.h"
#include "wallfacer/autograd/gradcheck.h"
#include "wallfacer/nn/module.h"
#include "wallfacer/ops/ops.h"

namespace wf::nn::testing {

// Seeded standard-normal f64 values of the given shape.
inline Tensor randn64(const Shape& shape, std::uint64_t seed) { return Tensor::randn_at(shape, seed, 0, DType::f64); }

// max |a − b| over all elements (shapes must match).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  const auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// Σ out·w in f64, without recording a graph.
inline double weighted_sum(const Tensor& out, const Tensor& w) {
  const auto o = out.to_vector<double>(), g = w.to_vector<double>();
  double total = 0;
  for (std::size_t i = 0; i < o.size(); ++i) total += o[i] * g[i];
  return total;
}

// Checks the gradients of L = Σ fn(x)·w with respect to x (wf::autograd::gradcheck) and to every
// parameter of `module` by central differences, |analytic − numeric| <= atol + rtol·|numeric|.
// Up to kElementsPerParameter elements of each parameter, spread evenly over it, are perturbed:
// enough to catch a wrong formula or layout, few enough to keep the tests fast. Under the
// sanitizers 3: they look for memory and UB errors, every perturbation runs the same code again,
// and the DiT's 12 cost 109 s there. The module must already be f64 and deterministic (no active
// dropout).
inline void check_module_gradients(Module& module, const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                                   double atol = 1e-7, double rtol = 1e-5) {
  constexpr double eps = 1e-6;
  constexpr std::int64_t kElementsPerParameter = wf::detail::kAddressSanitizerBuild ? 3 : 12;
  if (is_floating(x.dtype())) {
    Tensor input = x.clone();
    input.set_requires_grad(true);
    const auto result = autograd::gradcheck([&](const autograd::TensorList& in) { return autograd::TensorList{fn(in[0])}; },
                                            {input});
    INFO(result.message);
    CHECK(result.ok);
  }

  if (module.named_parameters().empty()) return;
  const Tensor input = x.clone();
  module.zero_grad();
  const Tensor out = fn(input);
  const Tensor w = Tensor::randn_at(out.shape(), 99, 0, DType::f64);
  sum(mul(out, w)).backward();

  NoGradGuard no_grad;
  for (auto& [name, param] : module.named_parameters()) {
    REQUIRE(param.dtype() == DType::f64);
    REQUIRE(param.grad().defined());
    const Tensor analytic = param.grad();
    const std::int64_t stride = std::max<std::int64_t>(1, param.numel() / kElementsPerParameter);
    for (std::int64_t j = 0; j < param.numel(); j += stride) {
      const double original = param.at(j);
      param.set(j, original + eps);
      const double plus = weighted_sum(fn(input), w);
      param.set(j, original - eps);
      const double minus = weighted_sum(fn(input), w);
      param.set(j, original);
      const double numeric = (plus - minus) / (2 * eps);
      const double error = std::abs(analytic.at(j) - numeric);
      if (error > atol + rtol * std::abs(numeric)) {
        FAIL_CHECK(name << "[" << j << "]: analytic " << analytic.at(j) << " numeric " << numeric);
        return;
      }
    }
  }
}

}  // namespace wf::nn::testing
