#include "kernels/cpu/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/reduce.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {
namespace {

// Optimizer updates touch four arrays per element; below this they are not worth threading.
constexpr std::int64_t kParallelElements = std::int64_t{1} << 14;

// The same validation as torch.optim.AdamW's constructor, plus the step count.
void check_adamw(const char* who, std::int64_t n, const AdamWParams& p) {
  WF_CHECK(n >= 0, "{}: element count must be non-negative, got {}", who, n);
  WF_CHECK(p.lr >= 0.0, "{}: learning rate must be >= 0, got lr={}", who, p.lr);
  WF_CHECK(p.eps >= 0.0, "{}: eps must be >= 0, got {}", who, p.eps);
  WF_CHECK(p.beta1 >= 0.0 && p.beta1 < 1.0 && p.beta2 >= 0.0 && p.beta2 < 1.0,
           "{}: betas must be in [0, 1), got beta1={} beta2={}", who, p.beta1, p.beta2);
  WF_CHECK(p.weight_decay >= 0.0, "{}: weight_decay must be >= 0, got {}", who, p.weight_decay);
  WF_CHECK(p.step >= 1, "{}: step is the 1-based count of updates (for bias correction), got {}",
           who, p.step);
}

// at::lerp's two-sided formula: exact at both ends and what exp_avg.lerp_(grad, w) computes.
template <class T>
T lerp(T start, T end, T weight) {
  return std::abs(weight) < T(0.5) ? start + weight * (end - start)
                                   : end - (end - start) * (T(1) - weight);
}

}  // namespace

template <class T>
void adamw_step(std::int64_t n, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                const AdamWParams& p) {
  check_adamw("adamw_step", n, p);
  const double t = double(p.step);
  const T decay = static_cast<T>(1.0 - p.lr * p.weight_decay);
  const T avg_weight = static_cast<T>(1.0 - p.beta1);
  const T beta2 = static_cast<T>(p.beta2);
  const T sq_weight = static_cast<T>(1.0 - p.beta2);
  const T neg_step_size = static_cast<T>(-(p.lr / (1.0 - std::pow(p.beta1, t))));
  const T bias_correction2_sqrt = static_cast<T>(std::sqrt(1.0 - std::pow(p.beta2, t)));
  const T eps = static_cast<T>(p.eps);
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = grad[i];
    const T m = lerp(exp_avg[i], g, avg_weight);
    const T v = exp_avg_sq[i] * beta2 + sq_weight * g * g;
    const T denom = std::sqrt(v) / bias_correction2_sqrt + eps;
    param[i] = param[i] * decay + neg_step_size * m / denom;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
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
double sum_of_squares(std::int64_t n, const T* x) {
  return sum_of_products(n, x, x);
}

template <class T>
void scale_inplace(std::int64_t n, T* x, T alpha) {
  scale(n, alpha, x, x);
}

double clip_coefficient(double total_norm, double max_norm) {
  WF_CHECK(max_norm >= 0.0, "clip_coefficient: max_norm must be >= 0, got {}", max_norm);
  // A NaN norm yields NaN (as in PyTorch with error_if_nonfinite=False): std::min would hide it.
  const double coefficient = max_norm / (total_norm + 1e-6);
  return std::isnan(coefficient) ? coefficient : std::min(1.0, coefficient);
}

#define WF_INSTANTIATE_OPTIMIZER(T)                                                          \
  template void adamw_step<T>(std::int64_t, T*, const T*, T*, T*, const AdamWParams&);      \
  template void adamw_step_reference<T>(std::int64_t, T*, const T*, T*, T*, const AdamWParams&); \
  template double sum_of_squares<T>(std::int64_t, const T*);                                \
  template void scale_inplace<T>(std::int64_t, T*, T);
WF_INSTANTIATE_OPTIMIZER(float)
WF_INSTANTIATE_OPTIMIZER(double)
#undef WF_INSTANTIATE_OPTIMIZER

}  // namespace wf::kernels::cpu
