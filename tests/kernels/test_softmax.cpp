// Softmax / log-softmax kernels against their naive references, the backward against central
// finite differences of the forward (f64), and rows with -inf entries.
//
// Tolerances (relative, with the same value as an absolute floor for entries near 0):
//   f32 1e-5 — the row sum is accumulated in double, the exponentials run in float;
//   f64 1e-12 — fast and reference differ only in the order of operations.
//   finite differences (f64, h = 1e-5): max|analytic - numeric| / max|numeric| < 1e-7.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/softmax.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEMPLATE_TEST_CASE("softmax, log-softmax and softmax backward match the reference", "[kernels][softmax]", float,
                   double) {
  using T = TestType;
  struct Size {
    std::int64_t rows, cols;
  };
  // cols 0 (empty rows), and rows past 1024 whose exponentials are summed in several runs.
  for (const Size s : std::vector<Size>{{1, 1}, {1, 37}, {4, 1}, {0, 8}, {3, 0}, {5, 37}, {9, 100}, {3, 5000}, {2, 50257}}) {
    CAPTURE(s.rows, s.cols);
    const std::int64_t n = s.rows * s.cols;
    const auto x = randn<T>(n, 1, 3.0), dy = randn<T>(n, 2);

    std::vector<T> y(n), y_ref(n), logy(n), logy_ref(n), dx(n), dx_ref(n);
    softmax_forward(s.rows, s.cols, x.data(), y.data());
    softmax_forward_reference(s.rows, s.cols, x.data(), y_ref.data());
    require_close(y, y_ref);

    log_softmax_forward(s.rows, s.cols, x.data(), logy.data());
    log_softmax_forward_reference(s.rows, s.cols, x.data(), logy_ref.data());
    require_close(logy, logy_ref);

    softmax_backward(s.rows, s.cols, y.data(), dy.data(), dx.data());
    softmax_backward_reference(s.rows, s.cols, y.data(), dy.data(), dx_ref.data());
    require_close(dx, dx_ref);
  }
}

TEST_CASE("softmax backward matches finite differences of its forward (f64)", "[kernels][softmax]") {
  const std::int64_t rows = 3, cols = 7, n = rows * cols;
  auto x = randn<double>(n, 11, 2.0);
  const auto g = randn<double>(n, 12);  // L = sum(g * softmax(x)), so dL/dy = g
  auto loss = [&] {
    std::vector<double> y(n);
    softmax_forward(rows, cols, x.data(), y.data());
    return dot(g, y);
  };
  std::vector<double> y(n), dx(n);
  softmax_forward(rows, cols, x.data(), y.data());
  softmax_backward(rows, cols, y.data(), g.data(), dx.data());
  CHECK(max_relative_error(dx, central_differences(x, loss)) < 1e-7);
}

TEST_CASE("softmax handles -inf entries and all -inf rows without NaN", "[kernels][softmax]") {
  // Row 0: a masked row; row 1: fully masked; row 2: one live entry.
  const std::vector<float> x = {1.0f, -kInf, 2.0f, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, 0.5f, -kInf, -kInf};
  const std::int64_t rows = 3, cols = 4;
  std::vector<float> y(12), y_ref(12), logy(12), logy_ref(12);
  softmax_forward(rows, cols, x.data(), y.data());
  softmax_forward_reference(rows, cols, x.data(), y_ref.data());
  require_close(y, y_ref);
  CHECK(all_finite(y));

  const float e = std::exp(-1.0f);  // softmax([1, 2]) = [e^-1, 1] / (1 + e^-1)
  CHECK(y[0] == Approx(e / (1 + e)).epsilon(1e-6));
  CHECK(y[2] == Approx(1 / (1 + e)).epsilon(1e-6));
  CHECK(y[1] == 0.0f);
  CHECK(y[3] == 0.0f);
  for (int j = 4; j < 8; ++j) CHECK(y[j] == 0.0f);  // all -inf: zeros
  CHECK(y[9] == 1.0f);

  // log-softmax: -inf where softmax is 0 (also for the all -inf row), never NaN.
  log_softmax_forward(rows, cols, x.data(), logy.data());
  log_softmax_forward_reference(rows, cols, x.data(), logy_ref.data());
  for (int j = 0; j < 12; ++j) {
    CAPTURE(j);
    CHECK(!std::isnan(logy[j]));
    CHECK((y[j] == 0.0f ? logy[j] == -kInf : logy[j] == Approx(std::log(y[j])).margin(1e-6)));
    CHECK(logy[j] == Approx(logy_ref[j]).epsilon(1e-5).margin(1e-5));
  }

  // The backward through masked entries is finite too.
  const auto dy = randn<float>(12, 3);
  std::vector<float> dx(12);
  softmax_backward(rows, cols, y.data(), dy.data(), dx.data());
  CHECK(all_finite(dx));
  for (int j = 4; j < 8; ++j) CHECK(dx[j] == 0.0f);
}

TEST_CASE("softmax is stable for large logits", "[kernels][softmax]") {
  // exp(1e4) overflows float and double alike; the max shift must keep every value finite.
  const std::int64_t rows = 4, cols = 37, n = rows * cols;
  auto x = randn<float>(n, 21, 1e4);
  std::vector<float> y(n), y_ref(n), logy(n), logy_ref(n);
  softmax_forward(rows, cols, x.data(), y.data());
  softmax_forward_reference(rows, cols, x.data(), y_ref.data());
  CHECK(all_finite(y));
  require_close(y, y_ref);
  log_softmax_forward(rows, cols, x.data(), logy.data());
  log_softmax_forward_reference(rows, cols, x.data(), logy_ref.data());
  CHECK(all_finite(logy));
  // 1e-5 relative of values up to ~4e4 in float (ulp ~4e-3): compare relative only.
  REQUIRE_THAT(logy, Catch::Matchers::Approx(logy_ref).epsilon(1e-5));
}

TEST_CASE("softmax kernels reject negative sizes", "[kernels][softmax]") {
  std::vector<float> buf(4);
  CHECK_THROWS_AS(softmax_forward(2, -2, buf.data(), buf.data()), wf::Error);
  CHECK_THROWS_AS(log_softmax_forward(-1, 4, buf.data(), buf.data()), wf::Error);
  CHECK_THROWS_AS(softmax_backward(-1, 4, buf.data(), buf.data(), buf.data()), wf::Error);
}
