// The CUDA AdamW entries (kernels/cuda/optimizer.cpp) against the CPU's on the same fresh random
// state: the plain step, and the masked update whose decision, bias correction and EMA decay the
// device takes from *grad_norm and *applied.
//
// Tolerances: both sides evaluate PyTorch's formula in the same order with coefficients formed in
// double and rounded to T once; the CPU's compiler may fuse a multiply-add where its ISA has one,
// and adamw_update's bias correction takes the device's pow, so an element may differ in its last
// ulp: 1e-5 relative in f32 (1e-6 absolute where the first moment, the parameter or the EMA
// cancels to near 0), 1e-12 in f64 (1e-14 absolute); the second moment, a sum of squares,
// relative only. The count of applied updates is exact, and a skipped update leaves every array
// bit for bit as it was.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace {

using namespace wf;
using namespace wf::cuda_test;

template <class T>
double rtol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}
template <class T>
double atol() {
  return std::is_same_v<T, float> ? 1e-6 : 1e-14;
}

// One parameter's optimizer state on one device.
struct State {
  Tensor param, grad, exp_avg, exp_avg_sq, ema;
  State to(Device device) const {
    return {param.to(device), grad.to(device), exp_avg.to(device), exp_avg_sq.to(device),
            ema.defined() ? ema.to(device) : Tensor()};
  }
  State clone() const {
    return {param.clone(), grad.clone(), exp_avg.clone(), exp_avg_sq.clone(), ema.defined() ? ema.clone() : Tensor()};
  }
  void* ema_data() { return ema.defined() ? ema.raw_data() : nullptr; }
};

// Fresh state of n elements in T on the CPU: moments as after some steps (the second positive).
State random_state(std::int64_t n, DType dt, bool with_ema, std::uint64_t seed) {
  Tensor sq = random_normal({n}, seed + 3, DType::f64);
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = sq.data<double>()[i];
    sq.data<double>()[i] = 1e-3 * v * v;
  }
  return {random_normal({n}, seed, dt), random_normal({n}, seed + 1, dt), random_normal({n}, seed + 2, dt), sq.to(dt),
          with_ema ? random_normal({n}, seed + 4, dt) : Tensor()};
}

void require_state_close(const State& got, const State& want, double rtol, double atol) {
  require_close(got.param, want.param, rtol, atol, "param");
  require_close(got.exp_avg, want.exp_avg, rtol, atol, "exp_avg");
  require_close(got.exp_avg_sq, want.exp_avg_sq, rtol, 0.0, "exp_avg_sq");  // a sum of squares: no cancellation
  if (want.ema.defined()) require_close(got.ema, want.ema, rtol, atol, "ema");
}

constexpr std::int64_t kSizes[] = {1, 31, 33, 257, 100003};
// The masked update's many combinations take the sizes with a tail and one of several blocks, and
// an empty parameter (no update kernel: the count still moves, as on the CPU).
constexpr std::int64_t kUpdateSizes[] = {0, 1, 33, 1031};

std::vector<kernels::AdamWParams> hyperparameters() {
  return {kernels::AdamWParams{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2, .step = 1},
          kernels::AdamWParams{.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1, .step = 7},
          // 1 − β1 above one half: the lerp's other side.
          kernels::AdamWParams{.lr = 1e-2, .beta1 = 0.3, .beta2 = 0.5, .eps = 1e-8, .weight_decay = 0, .step = 1000}};
}

}  // namespace

TEMPLATE_TEST_CASE("cuda adamw_step matches the CPU", "[cuda][optimizer]", float, double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  std::uint64_t salt = 10;
  for (const std::int64_t n : kSizes) {
    for (const kernels::AdamWParams& p : hyperparameters()) {
      CAPTURE(n, p.beta1, p.step);
      State want = random_state(n, dt, false, fresh_seed(++salt));
      State got = want.to(gpu());
      cpu_kernels().adamw_step(cpu_stream(), dt, n, want.param.raw_data(), want.grad.raw_data(),
                               want.exp_avg.raw_data(), want.exp_avg_sq.raw_data(), p);
      gpu_kernels().adamw_step(gpu_stream(), dt, n, got.param.raw_data(), got.grad.raw_data(), got.exp_avg.raw_data(),
                               got.exp_avg_sq.raw_data(), p);
      require_state_close(got, want, rtol<T>(), atol<T>());
    }
  }
}

TEMPLATE_TEST_CASE("cuda adamw_update applies, counts and skips as the CPU does, with and without EMA",
                   "[cuda][optimizer]", float, double) {
  using T = TestType;
  const DType dt = dtype_v<T>;
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::uint64_t salt = 100;
  for (const std::int64_t n : kUpdateSizes) {
    for (const kernels::EmaParams ema : {kernels::EmaParams{0.0, true}, kernels::EmaParams{0.9999, true},
                                         kernels::EmaParams{0.99, false}}) {
      const bool with_ema = ema.decay > 0;
      // A finite norm, a diverged one (NaN, inf) and none (always applies).
      for (const int norm_kind : {0, 1, 2, 3}) {
        CAPTURE(n, ema.decay, ema.warmup, norm_kind);
        const double norm_value = norm_kind == 0 ? 1.5 : norm_kind == 1 ? nan : inf;
        const bool applies = norm_kind == 0 || norm_kind == 3;
        const kernels::AdamWParams p = hyperparameters()[0];

        const State start = random_state(n, dt, with_ema, fresh_seed(++salt));
        State want = start.clone(), got = start.to(gpu());
        Tensor want_applied = Tensor::full({1}, 3, DType::i64), got_applied = want_applied.to(gpu());
        const Tensor norm = Tensor::full({1}, norm_value, DType::f64), g_norm = norm.to(gpu());
        const double* want_norm = norm_kind == 3 ? nullptr : norm.data<double>();
        const double* got_norm = norm_kind == 3 ? nullptr : g_norm.data<double>();
        for (int update = 0; update < 2; ++update) {  // the count moves the bias correction and EMA decay
          cpu_kernels().adamw_update(cpu_stream(), dt, n, want.param.raw_data(), want.grad.raw_data(),
                                     want.exp_avg.raw_data(), want.exp_avg_sq.raw_data(), want.ema_data(), p, ema,
                                     want_applied.data<std::int64_t>(), want_norm);
          gpu_kernels().adamw_update(gpu_stream(), dt, n, got.param.raw_data(), got.grad.raw_data(),
                                     got.exp_avg.raw_data(), got.exp_avg_sq.raw_data(), got.ema_data(), p, ema,
                                     got_applied.data<std::int64_t>(), got_norm);
        }
        require_equal(got_applied, want_applied, "applied");
        REQUIRE(want_applied.data<std::int64_t>()[0] == (applies ? 5 : 3));
        require_state_close(got, want, rtol<T>(), atol<T>());
        if (!applies) {
          require_equal(got.param, start.param, "param after a skipped update");
          require_equal(got.exp_avg, start.exp_avg, "exp_avg after a skipped update");
          require_equal(got.exp_avg_sq, start.exp_avg_sq, "exp_avg_sq after a skipped update");
          if (with_ema) require_equal(got.ema, start.ema, "ema after a skipped update");
        }
      }
    }
  }
}
