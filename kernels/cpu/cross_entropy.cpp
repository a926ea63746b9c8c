#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/softmax.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

std::int64_t checked_target_count(const char* what, std::int64_t rows, std::int64_t vocab, const std::int64_t* targets,
                                  std::int64_t ignore_index) {
  WF_CHECK(rows >= 0 && vocab >= 0, "{}: sizes must be non-negative, got rows={} vocab={}", what, rows, vocab);
  std::int64_t count = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t t = targets[r];
    if (t == ignore_index) continue;
    WF_CHECK(t >= 0 && t < vocab,
             "{}: target {} of row {} is outside the vocabulary [0, {}) and is not ignore_index ({}); "
             "fix the labels or mark padding with ignore_index",
             what, t, r, vocab, ignore_index);
    ++count;
  }
  return count;
}

namespace {

// dLoss/dloss_r: the global scale times the row's upstream gradient when there is one.
template <typename T>
double row_scale(double grad_scale, const T* row_grad, std::int64_t r) {
  return row_grad != nullptr ? grad_scale * static_cast<double>(row_grad[r]) : grad_scale;
}

}  // namespace

template <typename T>
std::int64_t cross_entropy_forward(std::int64_t rows, std::int64_t vocab, const T* logits, const std::int64_t* targets,
                                   std::int64_t ignore_index, T* losses, T* lse) {
  const std::int64_t count = checked_target_count("cross_entropy_forward", rows, vocab, targets, ignore_index);
#pragma omp parallel for if (rows * vocab > 32768)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * vocab;
    const double row_lse = row_logsumexp(vocab, xr);
    lse[r] = static_cast<T>(row_lse);
    // The loss is taken from the unrounded log-sum-exp: for float logits of magnitude 1e4 the
    // rounded one would already be off by ~5e-4.
    losses[r] = targets[r] == ignore_index ? T(0) : static_cast<T>(row_lse - xr[targets[r]]);
  }
  return count;
}

namespace {
template <typename T>
double sum_in_double(std::int64_t rows, const T* losses) {
  double sum = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) sum += losses[r];
  return sum;
}
}  // namespace

template <typename T>
T cross_entropy_mean(std::int64_t rows, const T* losses, std::int64_t count) {
  WF_CHECK(rows >= 0 && count >= 0 && count <= rows,
           "cross_entropy_mean: need 0 <= count <= rows, got count={} rows={}", count, rows);
  if (count == 0) return T(0);
  return static_cast<T>(sum_in_double(rows, losses) / static_cast<double>(count));
}

template <typename T>
T cross_entropy_sum(std::int64_t rows, const T* losses) {
  WF_CHECK(rows >= 0, "cross_entropy_sum: need rows >= 0, got {}", rows);
  return static_cast<T>(sum_in_double(rows, losses));
}

template <typename T>
void cross_entropy_backward(std::int64_t rows, std::int64_t vocab, const T* logits, const std::int64_t* targets,
                            std::int64_t ignore_index, const T* lse, double grad_scale, T* dlogits,
                            const T* row_grad) {
  checked_target_count("cross_entropy_backward", rows, vocab, targets, ignore_index);
#pragma omp parallel for if (rows * vocab > 32768)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = logits + r * vocab;
    T* dr = dlogits + r * vocab;
    const std::int64_t t = targets[r];
    if (t == ignore_index) {
      for (std::int64_t j = 0; j < vocab; ++j) dr[j] = T(0);
      continue;
    }
    const double scale = row_scale(grad_scale, row_grad, r);
    // The target's probability minus one is taken as expm1 in double before the loop can
    // overwrite its logit (dlogits may alias logits): when the model is confident, p - 1 is a
    // small difference of numbers near 1 that float would round away.
    const double target_grad = std::expm1(static_cast<double>(xr[t]) - lse[r]) * scale;
    // Each probability is exp(x - lse) <= 1, so the exponential runs in T (SIMD for float).
    const T t_lse = lse[r];
    const T t_scale = static_cast<T>(scale);
    if constexpr (std::is_same_v<T, float>) {
      exp_shifted_sum_f32(xr, vocab, t_lse, dr, t_scale);
    } else {
      for (std::int64_t j = 0; j < vocab; ++j) dr[j] = std::exp(xr[j] - t_lse) * t_scale;
    }
    dr[t] = static_cast<T>(target_grad);
  }
}

// ---- references ----------------------------------------------------------------------------

template <typename T>
std::int64_t cross_entropy_forward_reference(std::int64_t rows, std::int64_t vocab, const T* logits,
                                             const std::int64_t* targets, std::int64_t ignore_index, T* losses,
                                             T* lse) {
  const std::int64_t count = checked_target_count("cross_entropy_forward_reference", rows, vocab, targets, ignore_index);
  for (std::int64_t r = 0; r < rows; ++r) {
    const double row_lse = row_logsumexp_reference(vocab, logits + r * vocab);
    lse[r] = static_cast<T>(row_lse);
    losses[r] = targets[r] == ignore_index ? T(0) : static_cast<T>(row_lse - logits[r * vocab + targets[r]]);
  }
  return count;
}

template <typename T>
void cross_entropy_backward_reference(std::int64_t rows, std::int64_t vocab, const T* logits,
                                      const std::int64_t* targets, std::int64_t ignore_index, const T* lse,
                                      double grad_scale, T* dlogits, const T* row_grad) {
  checked_target_count("cross_entropy_backward_reference", rows, vocab, targets, ignore_index);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < vocab; ++j) {
      double g = 0.0;
      if (targets[r] != ignore_index) {
        const double p = std::exp(static_cast<double>(logits[r * vocab + j]) - lse[r]);
        const double onehot = j == targets[r] ? 1.0 : 0.0;
        g = (p - onehot) * row_scale(grad_scale, row_grad, r);
      }
      dlogits[r * vocab + j] = static_cast<T>(g);
    }
  }
}

#define WF_INSTANTIATE_CROSS_ENTROPY(T)                                                                              \
  template std::int64_t cross_entropy_forward<T>(std::int64_t, std::int64_t, const T*, const std::int64_t*,          \
                                                 std::int64_t, T*, T*);                                              \
  template T cross_entropy_mean<T>(std::int64_t, const T*, std::int64_t);                                            \
  template T cross_entropy_sum<T>(std::int64_t, const T*);                                            \
  template void cross_entropy_backward<T>(std::int64_t, std::int64_t, const T*, const std::int64_t*, std::int64_t,  \
                                          const T*, double, T*, const T*);                                           \
  template std::int64_t cross_entropy_forward_reference<T>(std::int64_t, std::int64_t, const T*,                     \
                                                           const std::int64_t*, std::int64_t, T*, T*);               \
  template void cross_entropy_backward_reference<T>(std::int64_t, std::int64_t, const T*, const std::int64_t*,      \
                                                    std::int64_t, const T*, double, T*, const T*);
WF_INSTANTIATE_CROSS_ENTROPY(float)
WF_INSTANTIATE_CROSS_ENTROPY(double)
#undef WF_INSTANTIATE_CROSS_ENTROPY

}  // namespace wf::kernels::cpu
