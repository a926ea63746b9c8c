// The step-total kernels against their plain references, on fresh random inputs. Both are exact
// (integer counts; one division and one product in double), so they must agree bit for bit.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/step_totals.h"

namespace cpu = wf::kernels::cpu;

TEST_CASE("count_not_equal counts the targets that are not ignored", "[kernels][step_totals]") {
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_int_distribution<std::int64_t> token(-1, 6);  // -1: the ignored index, often
  for (std::int64_t n : {0, 1, 7, 64, 1001}) {
    std::vector<std::int64_t> x(static_cast<std::size_t>(n));
    for (auto& v : x) v = token(gen);
    INFO("n=" << n);
    CHECK(cpu::count_not_equal(n, x.data(), -1) == cpu::count_not_equal_reference(n, x.data(), -1));
    CHECK(cpu::count_not_equal(n, x.data(), 1234) == n);
  }
  CHECK_THROWS(cpu::count_not_equal(-1, nullptr, 0));
}

TEST_CASE("loss_normaliser gives 1 / count and the mean, 0 for no count", "[kernels][step_totals]") {
  std::mt19937_64 gen(std::random_device{}());
  std::normal_distribution<double> loss(0.0, 50.0);
  std::uniform_int_distribution<int> count(0, 100000);
  const auto bits = [](double x) {
    std::uint64_t b = 0;
    std::memcpy(&b, &x, sizeof b);
    return b;
  };
  for (int trial = 0; trial < 200; ++trial) {
    const double totals[2] = {loss(gen), static_cast<double>(trial == 0 ? 0 : count(gen))};
    double got[2], want[2];
    cpu::loss_normaliser(totals, got);
    cpu::loss_normaliser_reference(totals, want);
    INFO("sum=" << totals[0] << " count=" << totals[1]);
    CHECK(bits(got[0]) == bits(want[0]));
    CHECK(bits(got[1]) == bits(want[1]));
  }
  const double none[2] = {3.5, 0.0};
  double out[2];
  cpu::loss_normaliser(none, out);
  CHECK(out[0] == 0.0);
  CHECK(out[1] == 0.0);
}
