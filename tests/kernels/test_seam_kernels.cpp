// The CPU kernels that used to be loops inside the ops (ln, tanh and its backward, affine, the
// dropout mask, log-softmax's backward, max's backward, the permute/broadcast gather and the block
// copy), each against a plain loop or its `_reference`, f32 and f64, on fresh random inputs.
//
// Tolerances: ln, tanh and the affine map are one libm call or one multiply-add per element, so
// they must equal the same expression evaluated in T exactly; tanh's backward and the dropout mask
// likewise. log_softmax_backward accumulates its row sum in double like its reference, so f32
// differs by the final rounding only (kTolerance: 1e-5 f32, 1e-12 f64). Movement is bitwise.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/host_kernels.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/softmax.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/rng.h"

namespace cpu = wf::kernels::cpu;
using namespace wf::testing;

TEMPLATE_TEST_CASE("ln, tanh, tanh's backward and affine equal their one-line formulas", "[kernels][seam]", float,
                   double) {
  using T = TestType;
  const std::int64_t n = 70001;  // above the threading threshold
  const auto x = randn<T, std::mt19937_64>(n, 7), dy = randn<T, std::mt19937_64>(n, 8);
  std::vector<T> positive(x.size()), y(x.size()), want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) positive[i] = x[i] * x[i] + T(0.25);

  cpu::ln_forward<T>(n, positive.data(), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = std::log(positive[i]);
  CHECK(y == want);

  cpu::tanh_forward<T>(n, x.data(), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = std::tanh(x[i]);
  CHECK(y == want);

  std::vector<T> dx(x.size());
  cpu::tanh_backward<T>(n, y.data(), dy.data(), dx.data());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = dy[i] * (1 - y[i] * y[i]);
  CHECK(dx == want);

  cpu::affine<T>(n, T(-0.75), T(1.5), x.data(), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = T(-0.75) * x[i] + T(1.5);
  CHECK(y == want);
  cpu::affine<T>(n, T(3), T(0), x.data(), y.data());  // no shift: scale()
  for (std::size_t i = 0; i < x.size(); ++i) want[i] = T(3) * x[i];
  CHECK(y == want);
}

TEMPLATE_TEST_CASE("the dropout mask keeps the elements its random stream keeps, scaled by 1/(1-p)",
                   "[kernels][seam]", float, double) {
  using T = TestType;
  const std::int64_t n = 40000;
  const auto x = randn<T, std::mt19937_64>(n, 9);
  const double p = 0.3;
  const std::uint64_t seed = 77, first = 1000;
  // A slice: rows of 10 of a tensor whose rows are 30 long, at column 20 (slice 2 of 3).
  const cpu::DropoutLayout layout{.block = 10, .stride = 30, .start = 20};
  std::vector<T> out(x.size());
  cpu::dropout_mask<T>(n, p, seed, first, layout, x.data(), out.data());
  std::int64_t kept = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    const std::uint64_t whole = std::uint64_t(k / 10) * 30 + 20 + std::uint64_t(k % 10);
    const bool keep = wf::uniform_at(seed, first + whole) >= p;
    kept += keep;
    REQUIRE(out[k] == (keep ? x[k] * static_cast<T>(1.0 / (1.0 - p)) : T(0)));
  }
  CHECK(std::abs(double(kept) / double(n) - (1 - p)) < 0.02);  // the mask is the stream's, not all-or-nothing
}

TEMPLATE_TEST_CASE("log_softmax_backward matches its reference", "[kernels][seam]", float, double) {
  using T = TestType;
  const std::int64_t rows = 37, cols = 1031;
  const auto x = randn<T, std::mt19937_64>(rows * cols, 10, 3.0), dy = randn<T, std::mt19937_64>(rows * cols, 11);
  std::vector<T> y(x.size()), dx(x.size()), ref(x.size());
  cpu::log_softmax_forward<T>(rows, cols, x.data(), y.data());
  cpu::log_softmax_backward<T>(rows, cols, y.data(), dy.data(), dx.data());
  cpu::log_softmax_backward_reference<T>(rows, cols, y.data(), dy.data(), ref.data());
  require_close(dx, ref);
}

TEMPLATE_TEST_CASE("max_dim_backward puts each gradient on its maximum and zero elsewhere", "[kernels][seam]", float,
                   double) {
  using T = TestType;
  const std::int64_t outer = 4, dim = 7, inner = 5;
  const auto x = randn<T, std::mt19937_64>(outer * dim * inner, 12), g = randn<T, std::mt19937_64>(outer * inner, 13);
  std::vector<T> values(std::size_t(outer * inner)), dx(x.size(), T(-99));
  std::vector<std::int64_t> arg(values.size());
  cpu::max_dim<T>(outer, dim, inner, x.data(), values.data(), arg.data());
  cpu::max_dim_backward<T>(outer, dim, inner, g.data(), arg.data(), dx.data());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t d = 0; d < dim; ++d) {
      for (std::int64_t i = 0; i < inner; ++i) {
        const T want = d == arg[o * inner + i] ? g[o * inner + i] : T(0);
        REQUIRE(dx[(o * dim + d) * inner + i] == want);
      }
    }
  }
}

TEST_CASE("gather permutes and broadcasts, and the block copy moves strided blocks, bit for bit",
          "[kernels][seam]") {
  // x [2, 3, 4] of u16 words, permuted to [4, 2, 3] (strides of x permuted), then broadcast [1, 4] to [3, 4].
  std::vector<std::uint16_t> x(24), out(24);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::uint16_t(1000 + i);
  cpu::gather_elements(2, x.data(), {4, 2, 3}, {1, 12, 4}, out.data());
  for (std::int64_t a = 0; a < 4; ++a)
    for (std::int64_t b = 0; b < 2; ++b)
      for (std::int64_t c = 0; c < 3; ++c) REQUIRE(out[(a * 2 + b) * 3 + c] == x[b * 12 + c * 4 + a]);
  std::vector<double> row{1.5, -2, 3, 4}, tiled(12);
  cpu::gather_elements(8, row.data(), {3, 4}, {0, 1}, tiled.data());
  for (std::size_t i = 0; i < tiled.size(); ++i) REQUIRE(tiled[i] == row[i % 4]);

  // Columns [1, 3) of each of 3 rows of 5 into columns [2, 4) of rows of 6.
  std::vector<float> src(15), dst(18, -1.0f);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = float(i);
  cpu::copy_element_blocks(4, src.data(), 5, 1, dst.data(), 6, 2, 3, 2);
  for (std::int64_t r = 0; r < 3; ++r)
    for (std::int64_t c = 0; c < 6; ++c)
      REQUIRE(dst[r * 6 + c] == (c >= 2 && c < 4 ? src[r * 5 + (c - 1)] : -1.0f));
}
