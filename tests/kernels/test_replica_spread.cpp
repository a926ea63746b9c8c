// replica_spread (kernels/cpu/replica_spread.h) on hand-computed extremes.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/replica_spread.h"
#include "wallfacer/core/error.h"

namespace cpu = wf::kernels::cpu;

TEST_CASE("replica_spread gives each parameter's spread over the ranks and its largest entry",
          "[kernels][replica_spread]") {
  // Two parameters: elements [0, 2) and [2, 5). Over the ranks: max w | max −w (= −min w).
  const std::vector<double> own{1.0, -3.0, 0.5, 2.0, -0.25};
  const std::vector<double> extremes{1.0, -3.0, 0.75, 2.0, -0.25,   // max w
                                     -1.0, 3.0, -0.5, -2.0, 0.5};   // −min w
  std::vector<double> out(4, -1.0);
  cpu::replica_spread(5, {2, 5}, extremes.data(), own.data(), out.data());
  CHECK(out == std::vector<double>{0.0, 3.0, 0.25, 2.0});  // 0.75 − 0.5 and −0.25 − (−0.5): 0.25 each
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> with_nan{nan, 1.0, nan, -1.0};  // a NaN element is passed over, as std::max does
  cpu::replica_spread(2, {2}, with_nan.data(), own.data(), out.data());
  CHECK(out[0] == 0.0);
  CHECK_THROWS_AS(cpu::replica_spread(5, {2, 4}, extremes.data(), own.data(), out.data()), wf::Error);
}
