#pragma once
// Shared helpers for the CPU kernel tests, which work on raw std::vector buffers: seeded normal
// inputs, per-precision tolerances, elementwise and whole-output comparisons, central finite
// differences, and a scoped OpenMP thread count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "wallfacer/core/threading.h"

namespace wf::testing {

// ---- inputs -----------------------------------------------------------------------------------

// n draws from N(mean, stddev²) taken from `gen`, rounded to T.
template <class T, std::uniform_random_bit_generator Engine>
std::vector<T> randn(std::int64_t n, Engine& gen, double stddev = 1.0, double mean = 0.0) {
  std::normal_distribution<double> dist(mean, stddev);
  std::vector<T> v(static_cast<std::size_t>(n));
  for (T& x : v) x = static_cast<T>(dist(gen));
  return v;
}

// The same from a fresh Engine seeded with `seed`. Each suite keeps the engine its seeds were
// chosen with (std::mt19937 unless it names std::mt19937_64), so its inputs stay the same.
template <class T, std::uniform_random_bit_generator Engine = std::mt19937>
std::vector<T> randn(std::int64_t n, std::uint64_t seed, double stddev = 1.0, double mean = 0.0) {
  Engine gen(seed);
  return randn<T>(n, gen, stddev, mean);
}

// ---- tolerances -------------------------------------------------------------------------------

// The tolerance a test states for T: `f32` for float, `f64` for double.
template <class T>
constexpr double tolerance(double f32, double f64) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "kernel tests run in f32 or f64");
  return std::is_same_v<T, float> ? f32 : f64;
}

// The usual pair: f32 kernels accumulate in double, so only the final rounding to float
// differs (1e-5); f64 kernels differ from their references only in the order of operations.
template <class T>
constexpr double kTolerance = tolerance<T>(1e-5, 1e-12);

// ---- comparisons ------------------------------------------------------------------------------

// Same size, and every element within kTolerance<T> relative to `want`, with the same value as
// an absolute floor for entries near 0.
template <class T>
void require_close(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE_THAT(got, Catch::Matchers::Approx(want).epsilon(kTolerance<T>).margin(kTolerance<T>));
}

// max|got − want| / max|want|: the error relative to the scale of the whole output, so entries
// near 0 are not judged by their own (meaningless) relative error. Infinities must match
// exactly (-inf log-sum-exps of masked rows) and any NaN in `got` is an infinite error. An
// all-zero `want` leaves no scale to divide by: then `got` must be zero as well.
template <class T, class U>
double max_relative_error(const std::vector<T>& got, const std::vector<U>& want) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  REQUIRE(got.size() == want.size());
  double scale = 0, err = 0;
  for (std::size_t e = 0; e < got.size(); ++e) {
    const double g = double(got[e]), w = double(want[e]);
    if (std::isnan(g)) return kInf;
    if (std::isinf(w) || std::isinf(g)) {
      if (g != w) return kInf;
      continue;
    }
    scale = std::max(scale, std::abs(w));
    err = std::max(err, std::abs(g - w));
  }
  return err / std::max(scale, 1e-300);
}

// The same bits, element for element (fused kernels against the composition they replace).
template <class T>
void require_bitwise(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  // (An empty vector's data() may be null, which memcmp must not get.)
  REQUIRE((got.empty() || std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0));
}

template <class T>
bool all_finite(const std::vector<T>& v) {
  return std::all_of(v.begin(), v.end(), [](T e) { return std::isfinite(double(e)); });
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// ---- gradients --------------------------------------------------------------------------------

// d loss / d x_i ≈ (loss(x + h·e_i) − loss(x − h·e_i)) / 2h for every element of x, each restored
// after use; loss() reads x. In f64 with h ~1e-5 both the truncation error (~h²) and the rounding
// error (~1e-16/h) stay far below the 1e-7 the tests ask for.
inline std::vector<double> central_differences(std::vector<double>& x, const std::function<double()>& loss,
                                               double h = 1e-5) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

// ---- threads ----------------------------------------------------------------------------------

// Sets the OpenMP thread count for one scope (or just guards it, when the test sets it itself)
// and restores the previous count when the scope ends, also when an assertion throws.
class ThreadCountGuard {
 public:
  ThreadCountGuard() = default;
  explicit ThreadCountGuard(int threads) { wf::set_num_threads(threads); }
  ~ThreadCountGuard() { wf::set_num_threads(saved_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int saved_ = wf::num_threads();
};

}  // namespace wf::testing
