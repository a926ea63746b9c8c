// LayerNorm / RMSNorm kernels against their naive references, against central finite
// differences of their own forward (f64), and for thread-count independent parameter gradients.
//
// Tolerances (relative, with the same value as an absolute floor for entries near 0):
//   f32 1e-5 — the kernels accumulate in double, so only the final rounding to float differs;
//   f64 1e-12 — the fast and reference kernels differ only in summation order.
//   finite differences (f64, h = 1e-5): max|analytic - numeric| / max|numeric| < 1e-7.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/norm.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

struct Size {
  std::int64_t rows, cols;
};
// Odd sizes on purpose: a single element, single column, 0 rows, a prime width.
const std::vector<Size> kSizes = {{1, 1}, {1, 37}, {4, 1}, {0, 8}, {5, 37}, {17, 64}};

}  // namespace

TEMPLATE_TEST_CASE("layernorm forward and backward match the reference", "[kernels][norm]", float, double) {
  using T = TestType;
  for (const Size s : kSizes) {
    for (const bool affine : {true, false}) {
      CAPTURE(s.rows, s.cols, affine);
      const std::int64_t n = s.rows * s.cols;
      // An offset mean checks that the variance does not cancel catastrophically.
      const auto x = randn<T>(n, 1, 2.0, 3.0);
      const auto w = randn<T>(s.cols, 2), b = randn<T>(s.cols, 3), dy = randn<T>(n, 4);
      const T* wp = affine ? w.data() : nullptr;
      const T* bp = affine ? b.data() : nullptr;

      std::vector<T> y(n), mean(s.rows), rstd(s.rows), y_ref(n), mean_ref(s.rows), rstd_ref(s.rows);
      layernorm_forward(s.rows, s.cols, x.data(), wp, bp, 1e-5, y.data(), mean.data(), rstd.data());
      layernorm_forward_reference(s.rows, s.cols, x.data(), wp, bp, 1e-5, y_ref.data(), mean_ref.data(),
                                  rstd_ref.data());
      require_close(y, y_ref);
      require_close(mean, mean_ref);
      require_close(rstd, rstd_ref);

      // Parameter gradients start non-zero: the kernels must add to them.
      std::vector<T> dx(n), dx_ref(n);
      auto dw = randn<T>(s.cols, 5), db = randn<T>(s.cols, 6);
      auto dw_ref = dw, db_ref = db;
      layernorm_backward(s.rows, s.cols, x.data(), wp, mean.data(), rstd.data(), dy.data(), dx.data(),
                         affine ? dw.data() : nullptr, affine ? db.data() : nullptr);
      layernorm_backward_reference(s.rows, s.cols, x.data(), wp, mean.data(), rstd.data(), dy.data(), dx_ref.data(),
                                   affine ? dw_ref.data() : nullptr, affine ? db_ref.data() : nullptr);
      require_close(dx, dx_ref);
      require_close(dw, dw_ref);
      require_close(db, db_ref);
    }
  }
}

TEMPLATE_TEST_CASE("rmsnorm forward and backward match the reference", "[kernels][norm]", float, double) {
  using T = TestType;
  for (const Size s : kSizes) {
    for (const bool affine : {true, false}) {
      CAPTURE(s.rows, s.cols, affine);
      const std::int64_t n = s.rows * s.cols;
      const auto x = randn<T>(n, 11, 2.0, 0.5);
      const auto w = randn<T>(s.cols, 12), dy = randn<T>(n, 13);
      const T* wp = affine ? w.data() : nullptr;

      std::vector<T> y(n), rstd(s.rows), y_ref(n), rstd_ref(s.rows);
      rmsnorm_forward(s.rows, s.cols, x.data(), wp, 1e-6, y.data(), rstd.data());
      rmsnorm_forward_reference(s.rows, s.cols, x.data(), wp, 1e-6, y_ref.data(), rstd_ref.data());
      require_close(y, y_ref);
      require_close(rstd, rstd_ref);

      std::vector<T> dx(n), dx_ref(n);
      auto dw = randn<T>(s.cols, 14);
      auto dw_ref = dw;
      rmsnorm_backward(s.rows, s.cols, x.data(), wp, rstd.data(), dy.data(), dx.data(), affine ? dw.data() : nullptr);
      rmsnorm_backward_reference(s.rows, s.cols, x.data(), wp, rstd.data(), dy.data(), dx_ref.data(),
                                 affine ? dw_ref.data() : nullptr);
      require_close(dx, dx_ref);
      require_close(dw, dw_ref);
    }
  }
}

TEST_CASE("layernorm backward matches finite differences of its forward (f64)", "[kernels][norm]") {
  const std::int64_t rows = 3, cols = 7, n = rows * cols;
  auto x = randn<double>(n, 21, 1.5, 0.7);
  auto w = randn<double>(cols, 22), b = randn<double>(cols, 23);
  const auto g = randn<double>(n, 24);  // L = sum(g * y), so dL/dy = g
  auto loss = [&] {
    std::vector<double> y(n);
    layernorm_forward(rows, cols, x.data(), w.data(), b.data(), 1e-5, y.data(), static_cast<double*>(nullptr),
                      static_cast<double*>(nullptr));
    return dot(y, g);
  };

  std::vector<double> y(n), mean(rows), rstd(rows), dx(n), dw(cols, 0.0), db(cols, 0.0);
  layernorm_forward(rows, cols, x.data(), w.data(), b.data(), 1e-5, y.data(), mean.data(), rstd.data());
  layernorm_backward(rows, cols, x.data(), w.data(), mean.data(), rstd.data(), g.data(), dx.data(), dw.data(),
                     db.data());

  CHECK(max_relative_error(dx, central_differences(x, loss)) < 1e-7);
  CHECK(max_relative_error(dw, central_differences(w, loss)) < 1e-7);
  CHECK(max_relative_error(db, central_differences(b, loss)) < 1e-7);
}

TEST_CASE("rmsnorm backward matches finite differences of its forward (f64)", "[kernels][norm]") {
  const std::int64_t rows = 3, cols = 7, n = rows * cols;
  auto x = randn<double>(n, 31, 1.5, 0.7);
  auto w = randn<double>(cols, 32);
  const auto g = randn<double>(n, 33);
  auto loss = [&] {
    std::vector<double> y(n);
    rmsnorm_forward(rows, cols, x.data(), w.data(), 1e-6, y.data(), static_cast<double*>(nullptr));
    return dot(y, g);
  };

  std::vector<double> y(n), rstd(rows), dx(n), dw(cols, 0.0);
  rmsnorm_forward(rows, cols, x.data(), w.data(), 1e-6, y.data(), rstd.data());
  rmsnorm_backward(rows, cols, x.data(), w.data(), rstd.data(), g.data(), dx.data(), dw.data());

  CHECK(max_relative_error(dx, central_differences(x, loss)) < 1e-7);
  CHECK(max_relative_error(dw, central_differences(w, loss)) < 1e-7);
}

// In f64 as well as f32: a different summation order changes the last bits of a double sum,
// but rounding the double partials to float would mostly hide it.
TEMPLATE_TEST_CASE("norm parameter gradients are bitwise independent of the thread count", "[kernels][norm]", float,
                   double) {
  using T = TestType;
  ThreadCountGuard guard;
  // Above the 32768-element threshold, so the multi-threaded runs really are parallel.
  const std::int64_t rows = 301, cols = 129, n = rows * cols;
  const auto x = randn<T>(n, 41), w = randn<T>(cols, 42), b = randn<T>(cols, 43), dy = randn<T>(n, 44);
  std::vector<T> y(n), mean(rows), rstd(rows);
  layernorm_forward(rows, cols, x.data(), w.data(), b.data(), 1e-5, y.data(), mean.data(), rstd.data());

  auto run = [&](int threads) {
    wf::set_num_threads(threads);
    std::vector<T> dx(n), dw(cols, T(0)), db(cols, T(0)), rms_dw(cols, T(0));
    layernorm_backward(rows, cols, x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dw.data(),
                       db.data());
    rmsnorm_backward(rows, cols, x.data(), w.data(), rstd.data(), dy.data(), dx.data(), rms_dw.data());
    return std::vector<std::vector<T>>{dw, db, rms_dw};
  };
  const auto serial = run(1);
  CHECK(run(2) == serial);
  CHECK(run(3) == serial);
}

TEST_CASE("norm kernels reject negative sizes and eps", "[kernels][norm]") {
  std::vector<float> buf(4);
  CHECK_THROWS_AS(layernorm_forward(-1, 4, buf.data(), static_cast<const float*>(nullptr),
                                    static_cast<const float*>(nullptr), 1e-5, buf.data(), buf.data(), buf.data()),
                  wf::Error);
  CHECK_THROWS_AS(rmsnorm_forward(1, 4, buf.data(), static_cast<const float*>(nullptr), -1.0, buf.data(), buf.data()),
                  wf::Error);
}
