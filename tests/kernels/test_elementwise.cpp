// Elementwise kernels against plain loops (or binary_broadcast_reference), f32 and f64.
//
// Tolerances: the kernels do the same arithmetic as the loops they are compared with, so linear
// ops must match exactly; activations are compared with the f64 formula at 1e-6 (f32, a few
// ulps) or 1e-12 (f64) relative to |y| + |x|. Backward passes are checked against central
// finite differences of the forward in f64: relative error < 1e-7 (h = 1e-5, so truncation
// error ~h² and rounding ~1e-16/h are both far below it).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"

namespace cpu = wf::kernels::cpu;
using cpu::BinaryOp;
using Shape = std::vector<std::int64_t>;

namespace {

using namespace wf::testing;

template <class T>
constexpr double kRtol = tolerance<T>(1e-6, 1e-12);

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto e : s) n *= e;
  return n;
}

const BinaryOp kOps[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div};

// binary_broadcast vs the reference for every op; the shapes are already right-aligned.
template <class T>
void check_broadcast(const Shape& a_shape, const Shape& b_shape, const Shape& out_shape,
                     std::uint64_t seed) {
  const int nd = int(out_shape.size());
  const auto a = randn<T, std::mt19937_64>(numel(a_shape), seed);
  auto b = randn<T, std::mt19937_64>(numel(b_shape), seed + 1);
  for (T& x : b) x += x >= 0 ? T(0.5) : T(-0.5);  // keep divisors away from 0
  for (BinaryOp op : kOps) {
    std::vector<T> out(std::size_t(numel(out_shape)), T(-99)), ref(out.size(), T(-99));
    cpu::binary_broadcast<T>(op, a.data(), a_shape.data(), b.data(), b_shape.data(), out.data(),
                             out_shape.data(), nd);
    cpu::binary_broadcast_reference<T>(op, a.data(), a_shape.data(), b.data(), b_shape.data(),
                                       ref.data(), out_shape.data(), nd);
    INFO("op=" << cpu::binary_op_name(op) << " a=" << Catch::Detail::stringify(a_shape)
               << " b=" << Catch::Detail::stringify(b_shape));
    CHECK(out == ref);  // the same single operation per element: bitwise equal
  }
}

}  // namespace

TEMPLATE_TEST_CASE("binary_broadcast matches the reference", "[kernels][elementwise]", float, double) {
  struct Case {
    Shape a, b, out;
  };
  const Case cases[] = {
      {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}},        // equal shapes: the plain loop
      {{2, 3, 4}, {1, 1, 4}, {2, 3, 4}},        // [2,3,4] + [4]: a bias over the last dim
      {{1, 1, 4}, {2, 3, 4}, {2, 3, 4}},        // the bias on the left
      {{2, 1, 4}, {1, 3, 1}, {2, 3, 4}},        // [2,1,4] + [3,1]: both sides broadcast
      {{2, 3, 4}, {1, 1, 1}, {2, 3, 4}},        // tensor (op) scalar
      {{1, 1, 1}, {2, 3, 4}, {2, 3, 4}},        // scalar (op) tensor
      {{}, {}, {}},                             // 0-dim scalars
      {{5, 1}, {1, 7}, {5, 7}},                 // outer product
      {{3, 1, 5, 1}, {1, 4, 1, 6}, {3, 4, 5, 6}},
      {{2, 0, 3}, {1, 1, 3}, {2, 0, 3}},        // empty
      {{4, 1}, {1, 1}, {4, 1}},
      {{300, 257}, {1, 257}, {300, 257}},       // big enough to split over threads, odd rows
      {{70, 3, 300}, {70, 1, 300}, {70, 3, 300}},
  };
  std::uint64_t seed = 1;
  for (const auto& c : cases) check_broadcast<TestType>(c.a, c.b, c.out, seed += 2);
}

TEST_CASE("binary_broadcast rejects shapes that do not broadcast", "[kernels][elementwise]") {
  const Shape a{2, 3}, b{1, 4}, out{2, 3};
  std::vector<float> x(12), y(12), z(12);
  CHECK_THROWS_WITH(cpu::binary_broadcast<float>(BinaryOp::add, x.data(), a.data(), y.data(), b.data(),
                                                 z.data(), out.data(), 2),
                    Catch::Contains("[1, 4]") && Catch::Contains("dim 1"));
}

TEMPLATE_TEST_CASE("linear helpers and fused residuals match plain loops", "[kernels][elementwise]",
                   float, double) {
  using T = TestType;
  for (std::int64_t rows : {0, 1, 7, 129}) {
    for (std::int64_t cols : {1, 33, 300}) {
      const std::int64_t n = rows * cols;
      const auto x = randn<T, std::mt19937_64>(n, 10), r = randn<T, std::mt19937_64>(n, 11);
      const auto bias = randn<T, std::mt19937_64>(cols, 12);
      const T alpha = T(-1.25);
      std::vector<T> out(static_cast<std::size_t>(n)), y = randn<T, std::mt19937_64>(n, 13), y0 = y;
      std::vector<T> expect(static_cast<std::size_t>(n));

      cpu::scale<T>(n, alpha, x.data(), out.data());
      for (std::int64_t i = 0; i < n; ++i) expect[i] = alpha * x[i];
      CHECK(out == expect);

      cpu::add_scaled<T>(n, alpha, x.data(), y.data());
      for (std::int64_t i = 0; i < n; ++i) expect[i] = y0[i] + alpha * x[i];
      CHECK(y == expect);

      cpu::add_bias<T>(rows, cols, x.data(), bias.data(), out.data());
      for (std::int64_t i = 0; i < n; ++i) expect[i] = x[i] + bias[i % cols];
      CHECK(out == expect);

      cpu::residual_add<T>(n, x.data(), r.data(), out.data());
      for (std::int64_t i = 0; i < n; ++i) expect[i] = x[i] + r[i];
      CHECK(out == expect);

      cpu::bias_residual_add<T>(rows, cols, x.data(), bias.data(), r.data(), out.data());
      for (std::int64_t i = 0; i < n; ++i) expect[i] = x[i] + bias[i % cols] + r[i];
      CHECK(out == expect);

      // In place: out aliasing x.
      auto inplace = x;
      cpu::residual_add<T>(n, inplace.data(), r.data(), inplace.data());
      for (std::int64_t i = 0; i < n; ++i) expect[i] = x[i] + r[i];
      CHECK(inplace == expect);
    }
  }
}

namespace {

// The f64 formulas, written out independently of the kernels.
double gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double silu(double x) { return x / (1.0 + std::exp(-x)); }

using Forward = std::function<void(std::int64_t, const double*, double*)>;
using Backward = std::function<void(std::int64_t, const double*, const double*, double*)>;

// dx from the kernel vs dy·(f(x+h) - f(x-h)) / 2h from its own forward, elementwise.
void check_against_finite_differences(const Forward& forward, const Backward& backward) {
  const std::int64_t n = 2001;
  auto x = randn<double, std::mt19937_64>(n, 21, 2.5);
  x[0] = 0.0;
  x[1] = -6.0;
  x[2] = 6.0;
  const auto dy = randn<double, std::mt19937_64>(n, 22);
  std::vector<double> dx(static_cast<std::size_t>(n)), xp(x), xm(x), yp(static_cast<std::size_t>(n)), ym(static_cast<std::size_t>(n));
  const double h = 1e-5;
  for (std::int64_t i = 0; i < n; ++i) {
    xp[i] += h;
    xm[i] -= h;
  }
  backward(n, x.data(), dy.data(), dx.data());
  forward(n, xp.data(), yp.data());
  forward(n, xm.data(), ym.data());
  double worst = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double fd = dy[i] * (yp[i] - ym[i]) / (2 * h);
    // Relative, with a floor of 1e-3 so elements where the derivative crosses 0 are judged
    // by an absolute 1e-10.
    worst = std::max(worst, std::abs(dx[i] - fd) / std::max(std::abs(fd), 1e-3));
  }
  CHECK(worst < 1e-7);
}

// A kernel in T against the f64 formula f, over inputs in [-8, 8] and the special points.
template <class T>
void check_forward(const std::function<void(std::int64_t, const T*, T*)>& kernel, double (*f)(double)) {
  auto x = randn<T, std::mt19937_64>(40001, 31, 3.0);
  x[0] = T(0);
  x[1] = T(-8);
  x[2] = T(8);
  std::vector<T> y(x.size());
  kernel(std::int64_t(x.size()), x.data(), y.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double expect = f(double(x[i]));
    // GELU and SiLU cancel in (1 + t) for negative x, so their error scales with |x|·eps.
    bad += !(std::abs(double(y[i]) - expect) <= kRtol<T> * (std::abs(expect) + std::abs(double(x[i]))));
  }
  CHECK(bad == 0);
}

}  // namespace

TEMPLATE_TEST_CASE("activation forwards match the f64 formulas", "[kernels][elementwise]", float, double) {
  using T = TestType;
  check_forward<T>(cpu::gelu_forward<T>, gelu);
  check_forward<T>(cpu::silu_forward<T>, silu);
  check_forward<T>(cpu::exp_forward<T>, [](double x) { return std::exp(x); });
}

TEMPLATE_TEST_CASE("activation backwards in T match the f64 backward", "[kernels][elementwise]", float, double) {
  using T = TestType;
  const std::int64_t n = 40001;
  const auto x = randn<T, std::mt19937_64>(n, 41, 3.0), dy = randn<T, std::mt19937_64>(n, 42);
  const std::vector<double> x64(x.begin(), x.end()), dy64(dy.begin(), dy.end());
  const std::pair<Backward, std::function<void(std::int64_t, const T*, const T*, T*)>> pairs[] = {
      {cpu::gelu_backward<double>, cpu::gelu_backward<T>}, {cpu::silu_backward<double>, cpu::silu_backward<T>}};
  for (const auto& [backward64, backward] : pairs) {
    std::vector<T> dx(static_cast<std::size_t>(n));
    std::vector<double> dx64(static_cast<std::size_t>(n));
    backward(n, x.data(), dy.data(), dx.data());
    backward64(n, x64.data(), dy64.data(), dx64.data());
    std::size_t bad = 0;
    for (std::int64_t i = 0; i < n; ++i)
      bad += !(std::abs(double(dx[i]) - dx64[i]) <=
               10 * kRtol<T> * (std::abs(dx64[i]) + std::abs(dy64[i]) * (1 + std::abs(x64[i]))));
    CHECK(bad == 0);
  }
}

TEST_CASE("GELU backward matches finite differences (f64)", "[kernels][elementwise]") {
  check_against_finite_differences(cpu::gelu_forward<double>, cpu::gelu_backward<double>);
}

TEST_CASE("SiLU backward matches finite differences (f64)", "[kernels][elementwise]") {
  check_against_finite_differences(cpu::silu_forward<double>, cpu::silu_backward<double>);
}

TEST_CASE("elementwise kernels reject negative sizes", "[kernels][elementwise]") {
  std::vector<float> x(4);
  CHECK_THROWS_AS(cpu::scale<float>(-1, 1.f, x.data(), x.data()), wf::Error);
  CHECK_THROWS_AS(cpu::add_bias<float>(2, -2, x.data(), x.data(), x.data()), wf::Error);
  CHECK_THROWS_AS(cpu::gelu_forward<float>(-3, x.data(), x.data()), wf::Error);
}

TEST_CASE("f32 GELU at special values: 0, ±inf, NaN, huge and tiny inputs", "[kernels][elementwise]") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // 19 values: two whole 8-lane vectors and a partial one, so every lane position is used.
  std::vector<float> x = {0.f, -0.f, inf, nan, 1e30f, -1e30f, 1e-30f, -1e-30f, 20.f, -20.f,
                          3.f, -3.f, 0.5f, -0.5f, 1e-4f, -1e-4f, 88.f, -88.f, 1.f};
  std::vector<float> y(x.size()), dx(x.size()), dy(x.size(), 1.f);
  cpu::gelu_forward<float>(std::int64_t(x.size()), x.data(), y.data());
  cpu::gelu_backward<float>(std::int64_t(x.size()), x.data(), dy.data(), dx.data());
  CHECK(y[0] == 0.f);
  CHECK(y[2] == inf);
  CHECK(std::isnan(y[3]));
  CHECK(std::isnan(dx[3]));
  CHECK(y[4] == 1e30f);   // x·(1 + 1)/2
  CHECK((y[5] == 0.f && std::signbit(y[5])));  // x·(1 − 1)/2 = −0
  CHECK(dx[8] == 1.f);    // gelu' → 1 for large x
  CHECK(dx[9] == 0.f);    // and → 0 for very negative x
  for (std::size_t i = 6; i < x.size(); ++i) {
    const double expect = gelu(double(x[i]));
    CHECK(std::abs(double(y[i]) - expect) <= 1e-6 * (std::abs(expect) + std::abs(double(x[i]))));
  }
}
