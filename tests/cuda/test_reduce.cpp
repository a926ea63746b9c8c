// The CUDA reductions, step totals and norms of the step (kernels/cuda/reduce.cpp) against the CPU
// entries on the same fresh inputs. Sums: both accumulate in double and differ only in the order
// of the additions, so kRtol/kAtol (tests/cuda/entry_pairs.h) with the absolute floor scaled by
// sqrt(terms summed), as that rounding grows. Exact (same bits as the CPU): max values and argmax
// (ties, ±0, −inf and NaN included), max's backward, counts, the step scalars (one thread, the
// CPU's arithmetic in the CPU's order), the replica spreads. A second run gives the same bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/cuda/entry_pairs.h"

using namespace wf;
using namespace wf::cuda_test;

namespace {

struct Dims {
  std::int64_t outer, dim, inner;
};
// Each of outer, dim, inner 1 and large; rows (inner 1) and columns (inner > 1); long sums with few
// outputs (cut into chunks and summed in two passes); empty extents.
const Dims kDims[] = {{1, 1, 1},     {1, 50257, 1}, {1000, 33, 1}, {4000, 3, 1}, {3, 5, 7},
                      {1, 4099, 2},  {2, 1000, 300}, {257, 1, 33}, {1, 3, 5000}, {31, 257, 1},
                      {0, 4, 3},     {3, 4, 0},      {5, 0, 3}};

double sqrt_terms(std::int64_t terms) { return std::sqrt(static_cast<double>(std::max<std::int64_t>(terms, 1))); }

// Values with many ties (halves in [−3, 3]), ±0 and −inf, and NaN when `nan` (about 1 in 50).
template <class T>
Tensor tied_values(std::int64_t n, std::uint64_t seed, bool nan) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> kind(0, 99);
  std::normal_distribution<double> normal(0.0, 1.5);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < v.size(); ++k) {
    const int c = kind(gen);
    if (nan && c < 2) {
      v[k] = std::numeric_limits<T>::quiet_NaN();
    } else if (c < 5) {
      v[k] = -std::numeric_limits<T>::infinity();
    } else if (c < 12) {
      v[k] = c % 2 == 0 ? T(0) : -T(0);
    } else {
      v[k] = static_cast<T>(std::clamp(std::round(normal(gen) * 2.0) / 2.0, -3.0, 3.0));
    }
  }
  return Tensor::from_vector(v, {n});
}

Pair i64_pair(const std::vector<std::int64_t>& values) {
  return on_both(Tensor::from_vector(values, {static_cast<std::int64_t>(values.size())}));
}

}  // namespace

TEMPLATE_TEST_CASE("cuda: sum_dim and mean_dim match the CPU's", "[cuda][reduce]", float, double) {
  using T = TestType;
  std::uint64_t salt = 100;
  for (const Dims& s : kDims) {
    INFO("[outer, dim, inner] = [" << s.outer << ", " << s.dim << ", " << s.inner << "]");
    Pair x = random_pair<T>({s.outer, s.dim, s.inner}, ++salt);
    for (bool mean : {false, true}) {
      auto run = [&](kernels::Backend& k, const Stream& stream, const void* in, void* out) {
        if (mean) {
          k.mean_dim(stream, kDType<T>, s.outer, s.dim, s.inner, in, out);
        } else {
          k.sum_dim(stream, kDType<T>, s.outer, s.dim, s.inner, in, out);
        }
      };
      Pair out = output_pair({s.outer, s.inner}, kDType<T>);
      run(cpu_kernels(), cpu_stream(), x.c(), out.c());
      run(gpu_kernels(), gpu_stream(), x.g(), out.g());
      require_close(out.gpu, out.cpu, kRtol<T>, kAtol<T> * sqrt_terms(s.dim), mean ? "mean_dim" : "sum_dim");
      Tensor again = Tensor::full({s.outer, s.inner}, -7.0, kDType<T>, gpu());
      run(gpu_kernels(), gpu_stream(), x.g(), again.raw_data());
      require_same_bits(again, out.gpu, "a second run");
    }
  }
}

TEMPLATE_TEST_CASE("cuda: max_dim picks the CPU's maximum and argmax, ties and NaN included", "[cuda][reduce]",
                   float, double) {
  using T = TestType;
  std::uint64_t salt = 200;
  for (const Dims& s : kDims) {
    if (s.dim == 0) continue;  // the maximum of nothing is an error (below)
    for (bool nan : {false, true}) {
      INFO("[outer, dim, inner] = [" << s.outer << ", " << s.dim << ", " << s.inner << "], NaN " << nan);
      Pair x = on_both(tied_values<T>(s.outer * s.dim * s.inner, fresh_seed(++salt), nan));
      Pair values = output_pair({s.outer, s.inner}, kDType<T>);
      Pair argmax = output_pair({s.outer, s.inner}, DType::i64);
      cpu_kernels().max_dim(cpu_stream(), kDType<T>, s.outer, s.dim, s.inner, x.c(), values.c(),
                            argmax.cpu.data<std::int64_t>());
      gpu_kernels().max_dim(gpu_stream(), kDType<T>, s.outer, s.dim, s.inner, x.g(), values.g(),
                            argmax.gpu.data<std::int64_t>());
      require_same_bits(values.gpu, values.cpu, "max_dim values");
      require_same_bits(argmax.gpu, argmax.cpu, "max_dim argmax");

      Tensor values_only = Tensor::full({s.outer, s.inner}, -7.0, kDType<T>, gpu());
      gpu_kernels().max_dim(gpu_stream(), kDType<T>, s.outer, s.dim, s.inner, x.g(), values_only.raw_data(),
                            nullptr);
      require_same_bits(values_only, values.cpu, "max_dim values without argmax");

      // The backward from the CPU's argmax: grad at the argmax, 0 everywhere else.
      Pair grad = random_pair<T>({s.outer, s.inner}, ++salt);
      Pair dx = output_pair({s.outer, s.dim, s.inner}, kDType<T>);
      cpu_kernels().max_dim_backward(cpu_stream(), kDType<T>, s.outer, s.dim, s.inner, grad.c(),
                                     argmax.cpu.data<std::int64_t>(), dx.c());
      gpu_kernels().max_dim_backward(gpu_stream(), kDType<T>, s.outer, s.dim, s.inner, grad.g(),
                                     argmax.gpu.data<std::int64_t>(), dx.g());
      require_same_bits(dx.gpu, dx.cpu, "max_dim_backward");
    }
  }
  Pair x = random_pair<T>({3, 0, 2}, 299);
  Pair values = output_pair({3, 2}, kDType<T>);
  CHECK_THROWS_WITH(gpu_kernels().max_dim(gpu_stream(), kDType<T>, 3, 0, 2, x.g(), values.g(), nullptr),
                    Catch::Contains("empty dim"));
}

TEMPLATE_TEST_CASE("cuda: reduce_broadcast sums a gradient down as the CPU does", "[cuda][reduce]", float, double) {
  using T = TestType;
  struct Case {
    Shape out, in;
  };
  // Leading, trailing, middle and alternating summed dims; a bias gradient over many rows (cut into
  // chunks); no sum at all; a scalar; an empty summed extent.
  const Case cases[] = {{{4, 33, 7}, {1, 33, 1}},     {{4, 33, 7}, {4, 1, 7}},   {{2, 3, 4, 5}, {1, 3, 1, 5}},
                        {{1000, 257}, {1, 257}},      {{257, 1000}, {257, 1}},   {{5, 6}, {1, 1}},
                        {{8, 1024, 64}, {1, 1, 64}},  {{3, 1, 4}, {1, 1, 4}},    {{6}, {6}},
                        {{}, {}},                     {{0, 3}, {1, 3}}};
  std::uint64_t salt = 300;
  for (const Case& c : cases) {
    INFO("from " << shape_str(c.out) << " to " << shape_str(c.in));
    Pair grad = random_pair<T>(c.out, ++salt);
    Pair result = output_pair(c.in, kDType<T>);
    cpu_kernels().reduce_broadcast(cpu_stream(), kDType<T>, grad.c(), c.out, result.c(), c.in);
    gpu_kernels().reduce_broadcast(gpu_stream(), kDType<T>, grad.g(), c.out, result.g(), c.in);
    const std::int64_t terms = result.cpu.numel() > 0 ? grad.cpu.numel() / result.cpu.numel() : 1;
    require_close(result.gpu, result.cpu, kRtol<T>, kAtol<T> * sqrt_terms(terms), "reduce_broadcast");
    Tensor again = Tensor::full(c.in, -7.0, kDType<T>, gpu());
    gpu_kernels().reduce_broadcast(gpu_stream(), kDType<T>, grad.g(), c.out, again.raw_data(), c.in);
    require_same_bits(again, result.gpu, "a second run");
  }
  Pair grad = random_pair<T>({4, 3}, 399);
  Pair result = output_pair({2, 3}, kDType<T>);
  CHECK_THROWS_WITH(
      gpu_kernels().reduce_broadcast(gpu_stream(), kDType<T>, grad.g(), {4, 3}, result.g(), {2, 3}),
      Catch::Contains("must be 1 or equal"));
}

TEMPLATE_TEST_CASE("cuda: sum_of_products accumulates in double over a fixed tree", "[cuda][reduce]", float,
                   double) {
  using T = TestType;
  std::uint64_t salt = 400;
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{33}, std::int64_t{1000},
                         std::int64_t{100003}, std::int64_t{3000017}}) {
    INFO("n = " << n);
    Pair x = random_pair<T>({n}, ++salt), y = random_pair<T>({n}, ++salt);
    for (bool squares : {false, true}) {
      Pair& other = squares ? x : y;
      Pair out = output_pair({1}, DType::f64);
      cpu_kernels().sum_of_products(cpu_stream(), kDType<T>, n, x.c(), other.c(), out.cpu.data<double>());
      gpu_kernels().sum_of_products(gpu_stream(), kDType<T>, n, x.g(), other.g(), out.gpu.data<double>());
      // Products of f32 are exact in double: the f64 tolerance holds for both.
      require_close(out.gpu, out.cpu, 1e-12, 1e-12 * sqrt_terms(n), squares ? "sum of squares" : "sum of products");
      Tensor again = Tensor::full({1}, -7.0, DType::f64, gpu());
      gpu_kernels().sum_of_products(gpu_stream(), kDType<T>, n, x.g(), other.g(), again.data<double>());
      require_same_bits(again, out.gpu, "a second run");
    }
  }
}

TEST_CASE("cuda: count_not_equal and loss_normaliser give the CPU's numbers", "[cuda][reduce]") {
  std::mt19937_64 gen(fresh_seed(500));
  std::uniform_int_distribution<std::int64_t> value(-1, 4);
  for (std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}, std::int64_t{262147}}) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    for (auto& e : v) e = value(gen);
    Pair x = i64_pair(v);
    for (std::int64_t excluded : {std::int64_t{-1}, std::int64_t{2}}) {
      INFO("n = " << n << ", value " << excluded);
      Pair count = output_pair({1}, DType::i64);
      cpu_kernels().count_not_equal(cpu_stream(), n, x.cpu.data<std::int64_t>(), excluded,
                                    count.cpu.data<std::int64_t>());
      gpu_kernels().count_not_equal(gpu_stream(), n, x.gpu.data<std::int64_t>(), excluded,
                                    count.gpu.data<std::int64_t>());
      require_same_bits(count.gpu, count.cpu, "count_not_equal");
    }
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const std::vector<double>& totals : {std::vector<double>{3.5, 7.0}, std::vector<double>{3.5, 0.0},
                                            std::vector<double>{-2.25, 1.0}, std::vector<double>{nan, 3.0},
                                            std::vector<double>{1e300, 3e-300}}) {
    INFO("totals " << totals[0] << ", " << totals[1]);
    Pair in = on_both(Tensor::from_vector(totals, {2}));
    Pair out = output_pair({2}, DType::f64);
    cpu_kernels().loss_normaliser(cpu_stream(), in.cpu.data<double>(), out.cpu.data<double>());
    gpu_kernels().loss_normaliser(gpu_stream(), in.gpu.data<double>(), out.gpu.data<double>());
    require_same_bits(out.gpu, out.cpu, "loss_normaliser");
  }
}

TEST_CASE("cuda: count_targets counts the targets the CPU counts", "[cuda][reduce]") {
  constexpr std::int64_t kVocab = 50257, kIgnore = -100;
  std::mt19937_64 gen(fresh_seed(600));
  std::uniform_int_distribution<std::int64_t> token(0, kVocab - 1);
  std::uniform_int_distribution<int> percent(0, 99);
  for (std::int64_t rows : {std::int64_t{0}, std::int64_t{1}, std::int64_t{1000}, std::int64_t{262147}}) {
    INFO("rows = " << rows);
    std::vector<std::int64_t> v(static_cast<std::size_t>(rows));
    for (auto& t : v) t = percent(gen) < 10 ? kIgnore : token(gen);
    Pair targets = i64_pair(v);
    Pair count = output_pair({1}, DType::i64);
    cpu_kernels().count_targets(cpu_stream(), "cross_entropy_forward", rows, kVocab,
                                targets.cpu.data<std::int64_t>(), kIgnore, count.cpu.data<std::int64_t>());
    gpu_kernels().count_targets(gpu_stream(), "cross_entropy_forward", rows, kVocab,
                                targets.gpu.data<std::int64_t>(), kIgnore, count.gpu.data<std::int64_t>());
    require_same_bits(count.gpu, count.cpu, "count_targets");
  }
}

TEST_CASE("cuda: a target outside the vocabulary is the CPU's error at the next synchronisation",
          "[cuda][reduce]") {
  constexpr std::int64_t kRows = 1000, kVocab = 50257, kIgnore = -100;
  std::vector<std::int64_t> v(kRows, 7);
  v[3] = kIgnore;
  v[5] = kVocab;  // the first bad row, as the CPU's loop finds it
  v[900] = -3;
  Pair targets = i64_pair(v);
  Pair count = output_pair({1}, DType::i64);
  CHECK_THROWS_WITH(cpu_kernels().count_targets(cpu_stream(), "cross_entropy_forward", kRows, kVocab,
                                                targets.cpu.data<std::int64_t>(), kIgnore,
                                                count.cpu.data<std::int64_t>()),
                    Catch::Contains("cross_entropy_forward: target 50257 of row 5 is outside the vocabulary "
                                    "[0, 50257) and is not ignore_index (-100)"));
  gpu_kernels().count_targets(gpu_stream(), "cross_entropy_forward", kRows, kVocab, targets.gpu.data<std::int64_t>(),
                              kIgnore, count.gpu.data<std::int64_t>());
  CHECK_THROWS_WITH(gpu_stream().synchronize(),
                    Catch::Contains("cross_entropy_forward: target 50257 of row 5 is outside the vocabulary "
                                    "[0, 50257) and is not ignore_index (-100)"));
  // Raised once; the bad targets were passed over as ignored.
  REQUIRE_NOTHROW(gpu_stream().synchronize());
  REQUIRE(count.gpu.to(Device::cpu()).data<std::int64_t>()[0] == kRows - 3);
}

TEST_CASE("cuda: clip_coefficient gives the CPU's norm and coefficient bit for bit", "[cuda][reduce]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::mt19937_64 gen(fresh_seed(700));
  std::normal_distribution<double> normal(0.0, 1.0);
  for (std::int64_t parts : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{300}}) {
    for (int special : {0, 1, 2}) {  // none, a NaN partial sum, an infinite one
      if (parts == 0 && special != 0) continue;
      std::vector<double> sq(static_cast<std::size_t>(parts));
      for (auto& s : sq) s = normal(gen) * normal(gen) * 10.0;
      for (auto& s : sq) s *= s;
      if (special == 1) sq[sq.size() / 2] = nan;
      if (special == 2) sq[0] = inf;
      Pair sums = on_both(Tensor::from_vector(sq, {parts}));
      for (double max_norm : {0.0, 1.0, 1e9, inf}) {
        INFO("parts " << parts << ", special " << special << ", max_norm " << max_norm);
        Pair norm = output_pair({1}, DType::f64), coefficient = output_pair({1}, DType::f64);
        cpu_kernels().clip_coefficient(cpu_stream(), parts, sums.cpu.data<double>(), max_norm,
                                       norm.cpu.data<double>(), coefficient.cpu.data<double>());
        gpu_kernels().clip_coefficient(gpu_stream(), parts, sums.gpu.data<double>(), max_norm,
                                       norm.gpu.data<double>(), coefficient.gpu.data<double>());
        require_same_bits(norm.gpu, norm.cpu, "norm");
        require_same_bits(coefficient.gpu, coefficient.cpu, "coefficient");
      }
    }
  }
  Pair sums = on_both(Tensor::from_vector(std::vector<double>{1.0}, {1}));
  Pair norm = output_pair({1}, DType::f64), coefficient = output_pair({1}, DType::f64);
  CHECK_THROWS_WITH(gpu_kernels().clip_coefficient(gpu_stream(), 1, sums.gpu.data<double>(), -1.0,
                                                   norm.gpu.data<double>(), coefficient.gpu.data<double>()),
                    Catch::Contains("max_norm must be >= 0"));
}

TEST_CASE("cuda: replica_spread gives the CPU's spreads and scales", "[cuda][reduce]") {
  constexpr std::int64_t n = 100000;
  // Empty parameters first and in the middle, a one-element one, one of NaNs only, a long one.
  const std::vector<std::int64_t> ends = {0, 5, 5, 3000, 3001, 3010, n};
  std::mt19937_64 gen(fresh_seed(800));
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> extremes(2 * n), own(n);
  for (auto& e : extremes) e = normal(gen);
  for (auto& w : own) w = normal(gen);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (std::int64_t k = 3001; k < 3010; ++k) extremes[k] = extremes[n + k] = own[k] = nan;
  extremes[50000] = own[60000] = nan;  // passed over inside the long parameter
  Pair e = on_both(Tensor::from_vector(extremes, {2 * n}));
  Pair w = on_both(Tensor::from_vector(own, {n}));
  const std::int64_t outputs = 2 * static_cast<std::int64_t>(ends.size());
  Pair out = output_pair({outputs}, DType::f64);
  cpu_kernels().replica_spread(cpu_stream(), n, ends, e.cpu.data<double>(), w.cpu.data<double>(),
                               out.cpu.data<double>());
  gpu_kernels().replica_spread(gpu_stream(), n, ends, e.gpu.data<double>(), w.gpu.data<double>(),
                               out.gpu.data<double>());
  require_same_bits(out.gpu, out.cpu, "replica_spread");
  CHECK_THROWS_WITH(gpu_kernels().replica_spread(gpu_stream(), n, {0, 7}, e.gpu.data<double>(),
                                                 w.gpu.data<double>(), out.gpu.data<double>()),
                    Catch::Contains("there are 100000 values"));
}
