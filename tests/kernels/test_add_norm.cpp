// The residual add fused into LayerNorm / RMSNorm (kernels/cpu/norm.h's add_layernorm_forward...):
// bit for bit the unfused kernels with the add around them (what the ops compose without the
// fusion), and within the usual tolerances of the references (kernel_testing.h: f32 1e-5, f64 1e-12).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kernels/cpu/norm.h"
#include "kernels/kernel_testing.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

struct Size {
  std::int64_t rows, cols;
};
// Odd sizes, 0 rows, and one above the kernels' threading threshold (32K elements).
const std::vector<Size> kSizes = {{1, 1}, {4, 1}, {0, 8}, {5, 37}, {300, 130}};

template <class T>
std::vector<T> added(const std::vector<T>& a, const std::vector<T>& b) {
  std::vector<T> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("add_layernorm is bitwise the add then layernorm, forward and backward", "[kernels][norm]", float,
                   double) {
  using T = TestType;
  for (const Size s : kSizes) {
    for (const bool with_dsum_in : {true, false}) {
      CAPTURE(s.rows, s.cols, with_dsum_in);
      const std::int64_t n = s.rows * s.cols;
      const auto x = randn<T>(n, 1, 2.0, 3.0), branch = randn<T>(n, 2), dy = randn<T>(n, 3), dsum_in = randn<T>(n, 4);
      const auto w = randn<T>(s.cols, 5), b = randn<T>(s.cols, 6);
      const T* din = with_dsum_in ? dsum_in.data() : nullptr;

      std::vector<T> sum(n), y(n), mean(s.rows), rstd(s.rows);
      add_layernorm_forward(s.rows, s.cols, x.data(), branch.data(), w.data(), b.data(), 1e-5, sum.data(), y.data(),
                            mean.data(), rstd.data());
      const auto want_sum = added(x, branch);
      std::vector<T> want_y(n), want_mean(s.rows), want_rstd(s.rows);
      layernorm_forward(s.rows, s.cols, want_sum.data(), w.data(), b.data(), 1e-5, want_y.data(), want_mean.data(),
                        want_rstd.data());
      require_bitwise(sum, want_sum);
      require_bitwise(y, want_y);
      require_bitwise(mean, want_mean);
      require_bitwise(rstd, want_rstd);

      std::vector<T> ref_sum(n), ref_y(n), ref_mean(s.rows), ref_rstd(s.rows);
      add_layernorm_forward_reference(s.rows, s.cols, x.data(), branch.data(), w.data(), b.data(), 1e-5,
                                      ref_sum.data(), ref_y.data(), ref_mean.data(), ref_rstd.data());
      require_bitwise(sum, ref_sum);
      require_close(y, ref_y);

      // Parameter gradients start non-zero: the kernels add to them.
      std::vector<T> dsum(n), dx(n), ref_dsum(n);
      auto dw = randn<T>(s.cols, 7), db = randn<T>(s.cols, 8);
      auto want_dw = dw, want_db = db, ref_dw = dw, ref_db = db;
      add_layernorm_backward(s.rows, s.cols, sum.data(), w.data(), mean.data(), rstd.data(), dy.data(), din,
                             dsum.data(), dw.data(), db.data());
      layernorm_backward(s.rows, s.cols, sum.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                         want_dw.data(), want_db.data());
      require_bitwise(dsum, with_dsum_in ? added(dx, dsum_in) : dx);
      require_bitwise(dw, want_dw);
      require_bitwise(db, want_db);

      add_layernorm_backward_reference(s.rows, s.cols, sum.data(), w.data(), mean.data(), rstd.data(), dy.data(), din,
                                       ref_dsum.data(), ref_dw.data(), ref_db.data());
      require_close(dsum, ref_dsum);
      require_close(dw, ref_dw);
      require_close(db, ref_db);
    }
  }
}

TEMPLATE_TEST_CASE("add_rmsnorm is bitwise the add then rmsnorm, forward and backward", "[kernels][norm]", float,
                   double) {
  using T = TestType;
  for (const Size s : kSizes) {
    for (const bool with_dsum_in : {true, false}) {
      CAPTURE(s.rows, s.cols, with_dsum_in);
      const std::int64_t n = s.rows * s.cols;
      const auto x = randn<T>(n, 11), branch = randn<T>(n, 12), dy = randn<T>(n, 13), dsum_in = randn<T>(n, 14);
      const auto w = randn<T>(s.cols, 15);
      const T* din = with_dsum_in ? dsum_in.data() : nullptr;

      std::vector<T> sum(n), y(n), rstd(s.rows);
      add_rmsnorm_forward(s.rows, s.cols, x.data(), branch.data(), w.data(), 1e-6, sum.data(), y.data(),
                          rstd.data());
      const auto want_sum = added(x, branch);
      std::vector<T> want_y(n), want_rstd(s.rows);
      rmsnorm_forward(s.rows, s.cols, want_sum.data(), w.data(), 1e-6, want_y.data(), want_rstd.data());
      require_bitwise(sum, want_sum);
      require_bitwise(y, want_y);
      require_bitwise(rstd, want_rstd);

      std::vector<T> ref_sum(n), ref_y(n), ref_rstd(s.rows);
      add_rmsnorm_forward_reference(s.rows, s.cols, x.data(), branch.data(), w.data(), 1e-6, ref_sum.data(),
                                    ref_y.data(), ref_rstd.data());
      require_close(y, ref_y);

      std::vector<T> dsum(n), dx(n), ref_dsum(n);
      auto dw = randn<T>(s.cols, 16);
      auto want_dw = dw, ref_dw = dw;
      add_rmsnorm_backward(s.rows, s.cols, sum.data(), w.data(), rstd.data(), dy.data(), din, dsum.data(),
                           dw.data());
      rmsnorm_backward(s.rows, s.cols, sum.data(), w.data(), rstd.data(), dy.data(), dx.data(), want_dw.data());
      require_bitwise(dsum, with_dsum_in ? added(dx, dsum_in) : dx);
      require_bitwise(dw, want_dw);

      add_rmsnorm_backward_reference(s.rows, s.cols, sum.data(), w.data(), rstd.data(), dy.data(), din,
                                     ref_dsum.data(), ref_dw.data());
      require_close(dsum, ref_dsum);
      require_close(dw, ref_dw);
    }
  }
}

TEST_CASE("add_layernorm and add_rmsnorm name a missing branch or sum", "[kernels][norm]") {
  std::vector<float> x(6, 1.0f), y(6), rstd(2);
  REQUIRE_THROWS_WITH(add_layernorm_forward<float>(2, 3, x.data(), nullptr, nullptr, nullptr, 1e-5, y.data(),
                                                   y.data(), nullptr, rstd.data()),
                      Catch::Contains("add_layernorm_forward") && Catch::Contains("branch and sum are required"));
  REQUIRE_THROWS_WITH(add_rmsnorm_forward<float>(2, 3, x.data(), x.data(), nullptr, 1e-6, nullptr, y.data(),
                                                 rstd.data()),
                      Catch::Contains("add_rmsnorm_forward"));
  // Empty arrays need no storage.
  add_rmsnorm_forward<float>(0, 3, nullptr, nullptr, nullptr, 1e-6, nullptr, nullptr, nullptr);
}
