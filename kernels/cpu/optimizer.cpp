#include "kernels/cpu/optimizer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/simd.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {
namespace {


// The same validation as torch.optim.AdamW's constructor, plus the step count.
void check_adamw(const char* who, std::int64_t n, const AdamWParams& p) {
  check_adamw_params(who, n, p);
  WF_CHECK(p.step >= 1, "{}: step is the 1-based count of updates (for bias correction), got {}",
           who, p.step);
}

template <class T>
struct AdamWScalars {
  T decay, avg_weight, beta2, sq_weight, neg_step_size, bias_correction2_sqrt, eps;
  // Formed in double and rounded to T once, as PyTorch does.
  explicit AdamWScalars(const AdamWParams& p)
      : decay(static_cast<T>(1.0 - p.lr * p.weight_decay)),
        avg_weight(static_cast<T>(1.0 - p.beta1)),
        beta2(static_cast<T>(p.beta2)),
        sq_weight(static_cast<T>(1.0 - p.beta2)),
        neg_step_size(static_cast<T>(-(p.lr / (1.0 - std::pow(p.beta1, double(p.step)))))),
        bias_correction2_sqrt(static_cast<T>(std::sqrt(1.0 - std::pow(p.beta2, double(p.step))))),
        eps(static_cast<T>(p.eps)) {}
};

// The AdamW update of elements [0, n), PyTorch's order of operations. exp_avg.lerp_(grad, w)
// is at::lerp's two-sided formula, exact at both ends; w = 1 − β1 is fixed for the whole call,
// so the side is a template argument and the loop has no branch (it vectorises).
template <class T, bool kWeightBelowHalf>
[[gnu::always_inline]] inline void adamw_span(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                                              const AdamWScalars<T>& s) {
  const T decay = s.decay, w = s.avg_weight, beta2 = s.beta2, sq_weight = s.sq_weight;
  const T neg_step_size = s.neg_step_size, bias_correction2_sqrt = s.bias_correction2_sqrt, eps = s.eps;
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = grad[i], a = exp_avg[i];
    const T m = kWeightBelowHalf ? a + w * (g - a) : g - (g - a) * (T(1) - w);
    const T v = exp_avg_sq[i] * beta2 + sq_weight * g * g;
    const T denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    param[i] = param[i] * decay + neg_step_size * m / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}
template <class T>
[[gnu::always_inline]] inline void adamw_span(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                                              const AdamWScalars<T>& s) {
  if (std::abs(s.avg_weight) < T(0.5)) {
    adamw_span<T, true>(n, param, grad, exp_avg, exp_avg_sq, s);
  } else {
    adamw_span<T, false>(n, param, grad, exp_avg, exp_avg_sq, s);
  }
}

// f32 AdamW compiled per ISA (kernels/cpu/simd.h): the update is a handful of flops per 28
// bytes moved, so the wide version runs at memory speed where SSE2's divides and square roots
// did not.
using AdamWFloatSpan = void (*)(std::int64_t, float*, const float*, float*, float*, const AdamWScalars<float>&);
#define WF_ADAMW_KERNEL(name, lanes, isa)                                                                    \
  WF_SIMD_TARGET(isa) void adamw_float_##name(std::int64_t n, float* param, const float* grad, float* exp_avg, \
                                              float* exp_avg_sq, const AdamWScalars<float>& s) {              \
    adamw_span<float>(n, param, grad, exp_avg, exp_avg_sq, s);                                               \
  }                                                                                                          \
  constexpr AdamWFloatSpan kAdamW_##name = adamw_float_##name;
WF_SIMD_FOR_EACH_ISA(WF_ADAMW_KERNEL)
#undef WF_ADAMW_KERNEL

AdamWFloatSpan adamw_float_span() {
  static const AdamWFloatSpan picked = WF_SIMD_PICK(kAdamW_);
  return picked;
}

// Elements per parallel block: long contiguous runs for the SIMD loop.
constexpr std::int64_t kAdamWBlock = 8192;

}  // namespace

template <class T>
void adamw_step(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                const AdamWParams& p) {
  check_adamw("adamw_step", n, p);
  const AdamWScalars<T> s(p);
  if constexpr (std::is_same_v<T, float>) {
    const AdamWFloatSpan span = adamw_float_span();  // picked outside the parallel region
    parallel_for_blocks(n, kAdamWBlock, [&](std::int64_t b, std::int64_t e) {
      span(e - b, param + b, grad + b, exp_avg + b, exp_avg_sq + b, s);
    });
  } else {
    parallel_for_blocks(n, kAdamWBlock, [&](std::int64_t b, std::int64_t e) {
      adamw_span<T>(e - b, param + b, grad + b, exp_avg + b, exp_avg_sq + b, s);
    });
  }
}

template <class T>
void adamw_step_reference(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                          const AdamWParams& p) {
  check_adamw("adamw_step_reference", n, p);
  const double t = double(p.step);
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = grad[i];
    double w = param[i];
    w -= p.lr * p.weight_decay * w;
    const double m = p.beta1 * exp_avg[i] + (1.0 - p.beta1) * g;
    const double v = p.beta2 * exp_avg_sq[i] + (1.0 - p.beta2) * g * g;
    const double m_hat = m / (1.0 - std::pow(p.beta1, t));
    const double v_hat = v / (1.0 - std::pow(p.beta2, t));
    param[i] = static_cast<T>(w - p.lr * m_hat / (std::sqrt(v_hat) + p.eps));
    exp_avg[i] = static_cast<T>(m);
    exp_avg_sq[i] = static_cast<T>(v);
  }
}

template <class T>
void adamw_update(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* ema, const AdamWParams& p,
                  const EmaParams& e, std::int64_t* applied, const double* grad_norm) {
  if (grad_norm != nullptr && !std::isfinite(*grad_norm)) return;
  AdamWParams at = p;
  at.step = *applied + 1;
  adamw_step<T>(n, param, grad, exp_avg, exp_avg_sq, at);
  if (ema != nullptr) {
    // d and 1 − d in T, as the host formed them before the update moved here.
    const T d = static_cast<T>(ema_decay_at(e.decay, *applied, e.warmup));
    scale_inplace<T>(n, ema, d);
    add_scaled<T>(n, T(1) - d, param, ema);
  }
  *applied += 1;
}

template <class T>
void adamw_update_reference(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq, T* ema,
                            const AdamWParams& p, const EmaParams& e, std::int64_t* applied, const double* grad_norm) {
  if (grad_norm != nullptr && !std::isfinite(*grad_norm)) return;
  AdamWParams at = p;
  at.step = *applied + 1;
  adamw_step_reference<T>(n, param, grad, exp_avg, exp_avg_sq, at);
  if (ema != nullptr) {
    const double d = ema_decay_at(e.decay, *applied, e.warmup);
    for (std::int64_t i = 0; i < n; ++i) ema[i] = static_cast<T>(d * double(ema[i]) + (1.0 - d) * double(param[i]));
  }
  *applied += 1;
}

template <class T>
double sum_of_squares(std::int64_t n, const T* x) {
  return sum_of_products(n, x, x);
}

template <class T>
void scale_inplace(std::int64_t n, T* x, T alpha) {
  scale(n, alpha, x, x);
}

void clip_coefficient_of_squares(std::int64_t parts, const double* sq_sums, double max_norm, double* norm,
                                 double* coefficient) {
  WF_CHECK(parts >= 0, "clip_coefficient_of_squares: the count of partial sums must be non-negative, got {}", parts);
  double sum = 0.0;
  for (std::int64_t i = 0; i < parts; ++i) sum += sq_sums[i];
  *norm = std::sqrt(sum);
  *coefficient = clip_coefficient(*norm, max_norm);
}

template <class T>
void scale_by_coefficient(std::int64_t n, T* x, double coefficient) {
  if (!(coefficient >= 1.0)) scale_inplace<T>(n, x, static_cast<T>(coefficient));
}

template <class T>
void scale_by_coefficient_reference(std::int64_t n, T* x, double coefficient) {
  if (coefficient >= 1.0) return;
  const double c = static_cast<T>(coefficient);  // the factor in T, as the gradients are scaled
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(double(x[i]) * c);
}

#define WF_INSTANTIATE_OPTIMIZER(T)                                                          \
  template void adamw_step<T>(std::int64_t, T*, const T*, T*, T*, const AdamWParams&);      \
  template void adamw_step_reference<T>(std::int64_t, T*, const T*, T*, T*, const AdamWParams&); \
  template void adamw_update<T>(std::int64_t, T*, const T*, T*, T*, T*, const AdamWParams&, const EmaParams&, \
                                std::int64_t*, const double*);                               \
  template void adamw_update_reference<T>(std::int64_t, T*, const T*, T*, T*, T*, const AdamWParams&,      \
                                          const EmaParams&, std::int64_t*, const double*);          \
  template double sum_of_squares<T>(std::int64_t, const T*);                                \
  template void scale_inplace<T>(std::int64_t, T*, T);                                      \
  template void scale_by_coefficient<T>(std::int64_t, T*, double);                          \
  template void scale_by_coefficient_reference<T>(std::int64_t, T*, double);
WF_INSTANTIATE_OPTIMIZER(float)
WF_INSTANTIATE_OPTIMIZER(double)
#undef WF_INSTANTIATE_OPTIMIZER

}  // namespace wf::kernels::cpu
