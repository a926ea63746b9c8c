// adamw_update: AdamW's step (and its EMA) taken on the device only when the gradient norm is
// finite, its bias correction from the count of updates applied.
//
// Against adamw_update_reference (the textbook update and EMA in double) after several steps:
// |fast - reference| <= rtol · (|reference| + 1) per element, rtol = 1e-12 for f64 and 1e-5 for
// f32 (values are O(1)). Against the host-decided path it replaced (adamw_step with the host's step
// count, then the EMA with d and 1 − d formed in T on the host): bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/kernel_testing.h"

namespace cpu = wf::kernels::cpu;

namespace {

using namespace wf::testing;

template <class T>
struct State {
  std::vector<T> param, exp_avg, exp_avg_sq, ema;
  std::int64_t applied = 0;
};

template <class T>
State<T> fresh_state(std::int64_t n, std::uint64_t seed) {
  State<T> s{randn<T, std::mt19937_64>(n, seed), std::vector<T>(n, T(0)), std::vector<T>(n, T(0)), {}, 0};
  s.ema = s.param;  // the EMA starts at the parameter's value
  return s;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
bool close(const std::vector<T>& got, const std::vector<T>& want) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(double(got[i]) - double(want[i]));
    if (!(error <= kTolerance<T> * (std::abs(double(want[i])) + 1.0))) return false;
  }
  return got.size() == want.size();
}

// The norms of 6 steps: the 3rd and 5th are not finite (skipped).
const double kNorms[] = {2.0, 0.5, std::numeric_limits<double>::quiet_NaN(), 1.0,
                         std::numeric_limits<double>::infinity(), 3.0};

}  // namespace

TEMPLATE_TEST_CASE("adamw_update skips a non-finite step and matches its reference and the host-decided path",
                   "[kernels][optimizer]", float, double) {
  using T = TestType;
  const cpu::AdamWParams p{.lr = 3e-2, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1, .step = 99};
  for (const bool warmup : {true, false}) {
    const cpu::EmaParams e{.decay = 0.9, .warmup = warmup};
    for (std::int64_t n : {0, 1, 257, 20000}) {  // 20000 runs over threads
      CAPTURE(n, warmup);
      State<T> fast = fresh_state<T>(n, 7 + n), ref = fast, host = fast;
      std::int64_t host_steps = 0;  // the host-decided path's count
      for (int s = 0; s < 6; ++s) {
        CAPTURE(s);
        const auto grad = randn<T, std::mt19937_64>(n, 100 + s, s % 2 ? 1.0 : 0.3);
        const State<T> before = fast;
        cpu::adamw_update<T>(n, fast.param.data(), grad.data(), fast.exp_avg.data(), fast.exp_avg_sq.data(),
                             fast.ema.data(), p, e, &fast.applied, &kNorms[s]);
        cpu::adamw_update_reference<T>(n, ref.param.data(), grad.data(), ref.exp_avg.data(), ref.exp_avg_sq.data(),
                                       ref.ema.data(), p, e, &ref.applied, &kNorms[s]);
        if (!std::isfinite(kNorms[s])) {  // skipped: nothing moves, the count included
          CHECK(fast.applied == before.applied);
          CHECK(same_bits(fast.param, before.param));
          CHECK(same_bits(fast.exp_avg, before.exp_avg));
          CHECK(same_bits(fast.exp_avg_sq, before.exp_avg_sq));
          CHECK(same_bits(fast.ema, before.ema));
          continue;
        }
        // The path the update replaced: the step count and the EMA's d formed on the host.
        cpu::AdamWParams at = p;
        at.step = ++host_steps;
        cpu::adamw_step<T>(n, host.param.data(), grad.data(), host.exp_avg.data(), host.exp_avg_sq.data(), at);
        const T d = static_cast<T>(wf::kernels::ema_decay_at(e.decay, host_steps - 1, e.warmup));
        cpu::scale_inplace<T>(n, host.ema.data(), d);
        cpu::add_scaled<T>(n, T(1) - d, host.param.data(), host.ema.data());
      }
      CHECK(fast.applied == 4);
      CHECK(ref.applied == 4);
      CHECK(same_bits(fast.param, host.param));
      CHECK(same_bits(fast.exp_avg, host.exp_avg));
      CHECK(same_bits(fast.exp_avg_sq, host.exp_avg_sq));
      CHECK(same_bits(fast.ema, host.ema));
      CHECK(close(fast.param, ref.param));
      CHECK(close(fast.exp_avg, ref.exp_avg));
      CHECK(close(fast.exp_avg_sq, ref.exp_avg_sq));
      CHECK(close(fast.ema, ref.ema));
    }
  }
}

TEST_CASE("adamw_update without a norm always applies, and without an EMA leaves none", "[kernels][optimizer]") {
  const cpu::AdamWParams p{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0, .step = 1};
  State<double> fast = fresh_state<double>(33, 3), host = fast;
  fast.applied = host.applied = 41;  // resumed: the bias correction continues from t = 42
  const auto grad = randn<double, std::mt19937_64>(33, 4);
  cpu::adamw_update<double>(33, fast.param.data(), grad.data(), fast.exp_avg.data(), fast.exp_avg_sq.data(), nullptr,
                            p, {}, &fast.applied, nullptr);
  cpu::AdamWParams at = p;
  at.step = 42;
  cpu::adamw_step<double>(33, host.param.data(), grad.data(), host.exp_avg.data(), host.exp_avg_sq.data(), at);
  CHECK(fast.applied == 42);
  CHECK(same_bits(fast.param, host.param));
  CHECK(same_bits(fast.exp_avg_sq, host.exp_avg_sq));
  CHECK(same_bits(fast.ema, host.ema));  // untouched
}
