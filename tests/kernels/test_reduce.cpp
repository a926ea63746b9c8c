// Reductions against plain loops that accumulate in double.
//
// Tolerances: |got - ref| <= rtol · Σ|x| with rtol = 1e-6 for f32 (the kernel rounds a double
// sum to float once) and 1e-12 for f64 (only the summation order differs). Determinism is
// checked bitwise across thread counts.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/reduce.h"
#include "kernels/kernel_testing.h"
#include "wallfacer/core/error.h"
#include "wallfacer/core/threading.h"

namespace cpu = wf::kernels::cpu;
using Shape = std::vector<std::int64_t>;

namespace {

using namespace wf::testing;

template <class T>
constexpr double kRtol = tolerance<T>(1e-6, 1e-12);

struct Dims {
  std::int64_t outer, dim, inner;
};
// inner = 1 (rows), inner > the 128-column block (several blocks, one partial), empty extents.
const Dims kDims[] = {{1, 1, 1},  {3, 5, 1},   {4, 7, 3},     {2, 9, 300}, {1, 1000, 1},
                      {5, 1, 17}, {0, 4, 3},   {3, 0, 2},     {3, 4, 0},   {64, 33, 129},
                      {1, 300, 257}};

// Σ_d x[o, d, i] and Σ_d |x[o, d, i]| in double, the obvious way.
template <class T>
void sum_dim_by_loops(const Dims& s, const std::vector<T>& x, std::vector<double>& sum,
                      std::vector<double>& abs_sum) {
  sum.assign(static_cast<std::size_t>(s.outer * s.inner), 0.0);
  abs_sum = sum;
  for (std::int64_t o = 0; o < s.outer; ++o)
    for (std::int64_t d = 0; d < s.dim; ++d)
      for (std::int64_t i = 0; i < s.inner; ++i) {
        const double v = x[static_cast<std::size_t>((o * s.dim + d) * s.inner + i)];
        sum[static_cast<std::size_t>(o * s.inner + i)] += v;
        abs_sum[static_cast<std::size_t>(o * s.inner + i)] += std::abs(v);
      }
}

}  // namespace

TEMPLATE_TEST_CASE("sum_dim and mean_dim match loops", "[kernels][reduce]", float, double) {
  using T = TestType;
  std::uint64_t seed = 1;
  for (const Dims& s : kDims) {
    const auto x = randn<T, std::mt19937_64>(s.outer * s.dim * s.inner, seed++);
    std::vector<double> ref, abs_ref;
    sum_dim_by_loops(s, x, ref, abs_ref);
    std::vector<T> sum(ref.size(), T(-7)), mean(ref.size(), T(-7));
    cpu::sum_dim<T>(s.outer, s.dim, s.inner, x.data(), sum.data());
    cpu::mean_dim<T>(s.outer, s.dim, s.inner, x.data(), mean.data());
    INFO("outer=" << s.outer << " dim=" << s.dim << " inner=" << s.inner);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      bad += !(std::abs(double(sum[i]) - ref[i]) <= kRtol<T> * abs_ref[i]);
      if (s.dim == 0) {
        bad += !std::isnan(mean[i]);  // the mean of nothing
      } else {
        bad += !(std::abs(double(mean[i]) - ref[i] / double(s.dim)) <= kRtol<T> * abs_ref[i] / double(s.dim));
      }
    }
    CHECK(bad == 0);
  }
}

TEMPLATE_TEST_CASE("max_dim matches loops, keeps the first of ties and propagates NaN",
                   "[kernels][reduce]", float, double) {
  using T = TestType;
  std::uint64_t seed = 50;
  for (const Dims& s : kDims) {
    if (s.dim == 0) continue;
    auto x = randn<T, std::mt19937_64>(s.outer * s.dim * s.inner, seed++);
    for (T& v : x) v = std::round(v * T(2)) / T(2);  // coarse values: plenty of ties
    std::vector<T> values(static_cast<std::size_t>(s.outer * s.inner));
    std::vector<std::int64_t> args(values.size(), -1);
    cpu::max_dim<T>(s.outer, s.dim, s.inner, x.data(), values.data(), args.data());
    std::size_t bad = 0;
    for (std::int64_t o = 0; o < s.outer; ++o)
      for (std::int64_t i = 0; i < s.inner; ++i) {
        T best = x[static_cast<std::size_t>(o * s.dim * s.inner + i)];
        std::int64_t arg = 0;
        for (std::int64_t d = 1; d < s.dim; ++d) {
          const T v = x[static_cast<std::size_t>((o * s.dim + d) * s.inner + i)];
          if (v > best) best = v, arg = d;
        }
        bad += values[static_cast<std::size_t>(o * s.inner + i)] != best || args[static_cast<std::size_t>(o * s.inner + i)] != arg;
      }
    INFO("outer=" << s.outer << " dim=" << s.dim << " inner=" << s.inner);
    CHECK(bad == 0);
    // The values alone, without indices.
    std::vector<T> values_only(values.size());
    cpu::max_dim<T>(s.outer, s.dim, s.inner, x.data(), values_only.data(), nullptr);
    CHECK(values_only == values);
  }

  const T nan = std::numeric_limits<T>::quiet_NaN();
  const std::vector<T> with_nan{1, nan, 5, 2};
  T value = 0;
  std::int64_t arg = -1;
  cpu::max_dim<T>(1, 4, 1, with_nan.data(), &value, &arg);
  CHECK(std::isnan(value));
  CHECK(arg == 1);

  CHECK_THROWS_WITH(cpu::max_dim<T>(2, 0, 3, with_nan.data(), &value, &arg), Catch::Contains("empty dim"));
  cpu::max_dim<T>(0, 0, 3, with_nan.data(), &value, &arg);  // empty output: nothing to do
}

TEMPLATE_TEST_CASE("sum_all and sum_of_products are accurate", "[kernels][reduce]", float, double) {
  using T = TestType;
  for (std::int64_t n : {0, 1, 7, 8, 9, 16384, 16385, 100003}) {
    const auto x = randn<T, std::mt19937_64>(n, 7), y = randn<T, std::mt19937_64>(n, 8);
    long double sum = 0, abs_sum = 0, dot = 0, abs_dot = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      sum += x[i];
      abs_sum += std::abs(x[i]);
      dot += (long double)x[i] * y[i];
      abs_dot += std::abs((long double)x[i] * y[i]);
    }
    INFO("n=" << n);
    // Both accumulate in double whatever T is: error ~n·1e-16 of Σ|x|.
    CHECK(std::abs(cpu::sum_all<T>(n, x.data()) - double(sum)) <= 1e-12 * double(abs_sum));
    CHECK(std::abs(cpu::sum_of_products<T>(n, x.data(), y.data()) - double(dot)) <= 1e-12 * double(abs_dot));
  }
}

TEST_CASE("reductions are bitwise identical for any thread count", "[kernels][reduce]") {
  const std::int64_t outer = 7, dim = 900, inner = 130;
  const auto x = randn<float, std::mt19937_64>(outer * dim * inner, 99);
  const auto run = [&](int threads) {
    ThreadCountGuard tc(threads);
    std::vector<float> by_dim(static_cast<std::size_t>(outer * inner)), rows(static_cast<std::size_t>(outer * dim));
    cpu::sum_dim<float>(outer, dim, inner, x.data(), by_dim.data());
    cpu::sum_dim<float>(outer * dim, inner, 1, x.data(), rows.data());
    return std::make_tuple(cpu::sum_all<float>(std::int64_t(x.size()), x.data()),
                           cpu::sum_of_products<float>(std::int64_t(x.size()), x.data(), x.data()), by_dim,
                           rows);
  };
  const auto one = run(1);
  CHECK(run(2) == one);
  CHECK(run(3) == one);
}

TEMPLATE_TEST_CASE("reduce_broadcast sums a gradient back to the broadcast input's shape",
                   "[kernels][reduce]", float, double) {
  using T = TestType;
  struct Case {
    Shape out, in;  // in is right-aligned to out by the caller
  };
  const Case cases[] = {
      {{2, 3, 4}, {1, 1, 4}},          // [2,3,4] + [4]: bias gradient
      {{2, 3, 4}, {2, 1, 4}},          // middle dim
      {{2, 3, 4}, {1, 3, 1}},          // [3,1]: outer and inner dims summed
      {{2, 3, 4}, {1, 1, 1}},          // to a scalar
      {{2, 3, 4}, {2, 3, 4}},          // nothing to sum
      {{3, 4, 5, 6}, {3, 1, 5, 1}},    // alternating kept and summed dims
      {{3, 4, 5, 6}, {1, 4, 1, 6}},
      {{2, 0, 3}, {1, 1, 3}},          // summing over an empty dim gives zeros
      {{2, 0, 3}, {2, 0, 3}},          // empty result
      {{}, {}},                        // 0-dim
      {{300, 257}, {1, 257}},          // large enough to use threads
      {{300, 257}, {300, 1}},
      {{40, 50, 60}, {1, 1, 1}},
  };
  std::uint64_t seed = 300;
  for (const auto& c : cases) {
    const int nd = int(c.out.size());
    std::int64_t n_out = 1, n_in = 1;
    for (int d = 0; d < nd; ++d) n_out *= c.out[d], n_in *= c.in[d];
    const auto grad = randn<T, std::mt19937_64>(n_out, seed++);
    // Reference: walk the gradient once, adding each element where its input element is.
    std::vector<double> ref(static_cast<std::size_t>(n_in)), abs_ref(static_cast<std::size_t>(n_in));
    for (std::int64_t flat = 0; flat < n_out; ++flat) {
      std::int64_t rest = flat, target = 0, step = 1;
      for (int d = nd - 1; d >= 0; --d) {
        const std::int64_t idx = rest % c.out[d];
        rest /= c.out[d];
        target += (c.in[d] == 1 ? 0 : idx) * step;
        step *= c.in[d];
      }
      ref[static_cast<std::size_t>(target)] += grad[static_cast<std::size_t>(flat)];
      abs_ref[static_cast<std::size_t>(target)] += std::abs(double(grad[static_cast<std::size_t>(flat)]));
    }
    std::vector<T> result(static_cast<std::size_t>(n_in), T(-7));
    cpu::reduce_broadcast<T>(grad.data(), c.out.data(), result.data(), c.in.data(), nd);
    INFO("out=" << Catch::Detail::stringify(c.out) << " in=" << Catch::Detail::stringify(c.in));
    std::size_t bad = 0;
    for (std::int64_t i = 0; i < n_in; ++i) bad += !(std::abs(double(result[i]) - ref[i]) <= kRtol<T> * abs_ref[i]);
    CHECK(bad == 0);
  }

  const Shape out{2, 3}, in{1, 2};
  std::vector<T> g(6), r(2);
  CHECK_THROWS_WITH(cpu::reduce_broadcast<T>(g.data(), out.data(), r.data(), in.data(), 2),
                    Catch::Contains("[1, 2]"));
}

TEST_CASE("reductions reject negative sizes", "[kernels][reduce]") {
  std::vector<float> x(4);
  CHECK_THROWS_AS(cpu::sum_dim<float>(-1, 2, 2, x.data(), x.data()), wf::Error);
  CHECK_THROWS_AS(cpu::sum_all<float>(-1, x.data()), wf::Error);
}
