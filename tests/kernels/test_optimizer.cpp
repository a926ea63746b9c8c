// AdamW and the gradient-clipping helpers against their references.
//
// Tolerances: after several steps, |fast - reference| <= rtol · (|reference| + 1) per element
// (parameters, gradients and moments here are O(1)), rtol = 1e-12 for f64 and 1e-5 for f32.
// The two differ only in rounding: the kernel uses PyTorch's order of operations in T, the
// reference the textbook formula in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/optimizer.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"

namespace cpu = wf::kernels::cpu;

namespace {

using namespace wf::testing;

template <class T>
std::size_t count_mismatches(const std::vector<T>& got, const std::vector<T>& want) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    bad += !(std::abs(double(got[i]) - double(want[i])) <= kTolerance<T> * (std::abs(double(want[i])) + 1.0));
  }
  return bad;
}

}  // namespace

TEMPLATE_TEST_CASE("adamw_step matches the reference over several steps", "[kernels][optimizer]",
                   float, double) {
  using T = TestType;
  struct Case {
    cpu::AdamWParams params;
    int steps;
  };
  const Case cases[] = {
      {{1e-3, 0.9, 0.999, 1e-8, 1e-2, 1}, 10},   // PyTorch's defaults
      {{3e-2, 0.8, 0.95, 1e-6, 0.1, 1}, 10},     // GPT-style betas, strong decay
      {{1e-2, 0.3, 0.5, 1e-8, 0.0, 1}, 8},       // beta1 < 0.5: the other branch of lerp
      {{5e-4, 0.9, 0.999, 1e-8, 1e-2, 1000}, 5},  // late steps: bias corrections near 1
  };
  std::uint64_t seed = 1;
  for (const auto& c : cases) {
    for (std::int64_t n : {0, 1, 257, 20000}) {  // 20000 runs over threads
      auto param = randn<T, std::mt19937_64>(n, seed++);
      std::vector<T> m(param.size(), T(0)), v(param.size(), T(0));
      auto param_ref = param, m_ref = m, v_ref = v;
      cpu::AdamWParams p = c.params;
      for (int s = 0; s < c.steps; ++s, ++p.step) {
        const auto grad = randn<T, std::mt19937_64>(param.size(), seed++, s % 2 ? 1.0 : 0.3);
        cpu::adamw_step<T>(n, param.data(), grad.data(), m.data(), v.data(), p);
        cpu::adamw_step_reference<T>(n, param_ref.data(), grad.data(), m_ref.data(), v_ref.data(), p);
      }
      INFO("n=" << n << " lr=" << c.params.lr << " betas=(" << c.params.beta1 << ", " << c.params.beta2
                << ") wd=" << c.params.weight_decay << " first step=" << c.params.step);
      CHECK(count_mismatches(param, param_ref) == 0);
      CHECK(count_mismatches(m, m_ref) == 0);
      CHECK(count_mismatches(v, v_ref) == 0);
    }
  }
}

TEST_CASE("adamw_step's first step moves each parameter by lr against its gradient's sign",
          "[kernels][optimizer]") {
  // From zero moments, step 1 has m̂ = g and v̂ = g², so the update is lr·g / (|g| + eps).
  const cpu::AdamWParams p{0.1, 0.9, 0.999, 1e-8, 0.5, 1};
  std::vector<double> param{1.0, -2.0, 0.5}, grad{3.0, -0.25, 0.0}, m(3), v(3);
  cpu::adamw_step<double>(3, param.data(), grad.data(), m.data(), v.data(), p);
  const double decay = 1 - 0.1 * 0.5;
  CHECK(param[0] == Approx(1.0 * decay - 0.1 * 3.0 / (3.0 + 1e-8)).epsilon(1e-14));
  CHECK(param[1] == Approx(-2.0 * decay + 0.1 * 0.25 / (0.25 + 1e-8)).epsilon(1e-14));
  CHECK(param[2] == Approx(0.5 * decay).epsilon(1e-14));  // no gradient: only weight decay
  CHECK(m[0] == Approx(0.3).epsilon(1e-14));
  CHECK(v[0] == Approx(0.001 * 9.0).epsilon(1e-12));
}

TEST_CASE("adamw_step rejects invalid hyperparameters", "[kernels][optimizer]") {
  std::vector<float> x(4), g(4), m(4), v(4);
  const auto step = [&](cpu::AdamWParams p) { cpu::adamw_step<float>(4, x.data(), g.data(), m.data(), v.data(), p); };
  CHECK_THROWS_WITH(step({1e-3, 0.9, 0.999, 1e-8, 0.0, 0}), Catch::Contains("step"));
  CHECK_THROWS_WITH(step({1e-3, 1.0, 0.999, 1e-8, 0.0, 1}), Catch::Contains("beta1=1"));
  CHECK_THROWS_AS(step({-1e-3, 0.9, 0.999, 1e-8, 0.0, 1}), wf::Error);
  CHECK_THROWS_AS(step({1e-3, 0.9, 0.999, -1e-8, 0.0, 1}), wf::Error);
  CHECK_THROWS_AS(step({1e-3, 0.9, 0.999, 1e-8, -0.1, 1}), wf::Error);
}

TEMPLATE_TEST_CASE("sum_of_squares and scale_inplace match loops", "[kernels][optimizer]", float, double) {
  using T = TestType;
  for (std::int64_t n : {0, 5, 40001}) {
    auto x = randn<T, std::mt19937_64>(n, 77);
    long double expect = 0;
    for (T v : x) expect += (long double)v * v;
    // Accumulated in double for either T: ~n·1e-16 relative.
    CHECK(cpu::sum_of_squares<T>(n, x.data()) == Approx(double(expect)).epsilon(1e-12));

    auto scaled = x;
    cpu::scale_inplace<T>(n, scaled.data(), T(0.25));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] *= T(0.25);
    CHECK(scaled == x);  // one multiply each: exact
  }
}

TEST_CASE("clip_coefficient follows clip_grad_norm_", "[kernels][optimizer]") {
  CHECK(cpu::clip_coefficient(10.0, 1.0) == 1.0 / (10.0 + 1e-6));
  CHECK(cpu::clip_coefficient(0.5, 1.0) == 1.0);  // already small enough: untouched
  CHECK(cpu::clip_coefficient(0.0, 1.0) == 1.0);
  CHECK(cpu::clip_coefficient(1.0, 1.0) < 1.0);   // the 1e-6 guard: barely below 1
  CHECK(std::isnan(cpu::clip_coefficient(std::numeric_limits<double>::quiet_NaN(), 1.0)));
  CHECK(cpu::clip_coefficient(std::numeric_limits<double>::infinity(), 1.0) == 0.0);
  CHECK_THROWS_AS(cpu::clip_coefficient(1.0, -1.0), wf::Error);
}

TEST_CASE("clip_coefficient_of_squares is sqrt of the ordered sum, then clip_coefficient", "[kernels][optimizer]") {
  const std::vector<double> parts{4.0, 0.0, 5.0, 1e-3};
  double norm = -1, coefficient = -1;
  cpu::clip_coefficient_of_squares(4, parts.data(), 1.0, &norm, &coefficient);
  CHECK(norm == std::sqrt(((0.0 + 4.0) + 0.0 + 5.0) + 1e-3));
  CHECK(coefficient == cpu::clip_coefficient(norm, 1.0));
  cpu::clip_coefficient_of_squares(0, parts.data(), 1.0, &norm, &coefficient);  // no gradients: norm 0
  CHECK(norm == 0.0);
  CHECK(coefficient == 1.0);
  const std::vector<double> nan{std::numeric_limits<double>::quiet_NaN()};
  cpu::clip_coefficient_of_squares(1, nan.data(), 1.0, &norm, &coefficient);
  CHECK((std::isnan(norm) && std::isnan(coefficient)));
  CHECK_THROWS_AS(cpu::clip_coefficient_of_squares(1, parts.data(), -1.0, &norm, &coefficient), wf::Error);
}

TEMPLATE_TEST_CASE("scale_by_coefficient matches its reference and scales only below 1", "[kernels][optimizer]", float,
                   double) {
  using T = TestType;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::int64_t n : {0, 7, 40001}) {  // 40001 runs over threads
    for (double coefficient : {0.3, 1.0 / (7.0 + 1e-6), 1.0, 2.5, nan}) {
      auto x = randn<T, std::mt19937_64>(n, 91);
      auto want = x;
      cpu::scale_by_coefficient<T>(n, x.data(), coefficient);
      cpu::scale_by_coefficient_reference<T>(n, want.data(), coefficient);
      INFO("n=" << n << " coefficient=" << coefficient);
      // One rounded multiply each (a product of two T is exact in double for f32): bitwise.
      for (std::size_t i = 0; i < x.size(); ++i) {
        REQUIRE((x[i] == want[i] || (std::isnan(double(x[i])) && std::isnan(double(want[i])))));
      }
      if (coefficient >= 1.0 && n > 0) CHECK(x == randn<T, std::mt19937_64>(n, 91));  // untouched
    }
  }
}
