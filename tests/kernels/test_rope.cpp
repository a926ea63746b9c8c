// Rotary position embedding against the plain f64 reference, a hand-computed case, the inverse
// rotation and in-place use.
//
// Tolerance: kTolerance<T> relative to the output scale (f64: 1e-12; f32: 1e-5, only the final
// rounding differs since both compute in double).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/rope.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"

namespace {

using namespace wf::kernels::cpu;
using namespace wf::testing;

// Zigzag-like, non-contiguous global positions (what a sequence-parallel rank holds).
std::vector<std::int64_t> scattered_positions(std::int64_t tokens) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) p[t] = (t % 2 == 0) ? 3 * t : 4097 - t;
  return p;
}

}  // namespace

TEMPLATE_TEST_CASE("rope matches the reference, inverts, and works in place", "[kernels][rope]", float, double) {
  using T = TestType;
  ThreadCountGuard threads;
  for (const RopeShape s : {RopeShape{1, 1, 1, 2, 10000.0}, RopeShape{2, 5, 3, 8, 10000.0},
                            RopeShape{2, 300, 4, 64, 500000.0}, RopeShape{0, 3, 2, 4, 10000.0}}) {
    CAPTURE(s.batch, s.tokens, s.heads, s.head_dim, s.theta);
    const std::int64_t n = s.batch * s.tokens * s.heads * s.head_dim;
    const auto x = randn<T>(n, 1);
    const auto pos = scattered_positions(s.tokens);
    for (const bool inverse : {false, true}) {
      std::vector<T> y(n), y_ref(n);
      for (const int t : {1, 2}) {
        wf::set_num_threads(t);
        rope(s, x.data(), pos.data(), inverse, y.data());
        rope_reference(s, x.data(), pos.data(), inverse, y_ref.data());
        CHECK(max_relative_error(y, y_ref) <= kTolerance<T>);
      }
      // Forward then inverse is the identity; in place (y aliases x) gives the same result.
      std::vector<T> back = y;
      rope(s, back.data(), pos.data(), !inverse, back.data());
      CHECK(max_relative_error(back, x) <= tolerance<T>(1e-5, 1e-13));
      std::vector<T> in_place = x;
      rope(s, in_place.data(), pos.data(), inverse, in_place.data());
      CHECK(in_place == y);
    }
  }
}

TEST_CASE("rope: hand-computed rotate-half pairs and position 0", "[kernels][rope]") {
  // d = 4: pairs (0, 2) at angle pos·1 and (1, 3) at angle pos·theta^(−1/2) = pos/100.
  const RopeShape s{1, 2, 1, 4, 10000.0};
  const std::vector<double> x{1, 2, 3, 4, 1, 2, 3, 4};
  const std::vector<std::int64_t> pos{0, 5};
  std::vector<double> y(8);
  rope(s, x.data(), pos.data(), false, y.data());
  for (int i = 0; i < 4; ++i) CHECK(y[i] == x[i]);  // position 0: no rotation
  const double a0 = 5.0, a1 = 0.05;
  CHECK(y[4] == Approx(1 * std::cos(a0) - 3 * std::sin(a0)).epsilon(1e-14));
  CHECK(y[6] == Approx(1 * std::sin(a0) + 3 * std::cos(a0)).epsilon(1e-14));
  CHECK(y[5] == Approx(2 * std::cos(a1) - 4 * std::sin(a1)).epsilon(1e-14));
  CHECK(y[7] == Approx(2 * std::sin(a1) + 4 * std::cos(a1)).epsilon(1e-14));
}

TEST_CASE("rope: odd head_dim and bad theta are errors", "[kernels][rope]") {
  std::vector<float> x(3), y(3);
  const std::vector<std::int64_t> pos{0};
  CHECK_THROWS_WITH(rope(RopeShape{1, 1, 1, 3, 10000.0}, x.data(), pos.data(), false, y.data()),
                    Catch::Contains("head_dim 3 is odd"));
  CHECK_THROWS_WITH(rope(RopeShape{1, 1, 1, 2, 0.0}, x.data(), pos.data(), false, y.data()),
                    Catch::Contains("theta must be positive"));
}
