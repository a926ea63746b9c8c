#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/parallel_for.h"
#include "kernels/cpu/simd.h"
#include "wallfacer/core/error.h"

namespace wf::kernels::cpu {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check_sizes(const char* what, std::int64_t rows, std::int64_t cols) {
  WF_CHECK(rows >= 0 && cols >= 0, "{}: sizes must be non-negative, got rows={} cols={}", what, rows, cols);
}

}  // namespace

struct FloatRowKernels {
  float (*row_max)(const float*, std::int64_t);
  float (*exp_shifted_sum)(const float*, std::int64_t, float, float*, float);
};
#define WF_FLOAT_ROW_KERNELS(name, lanes, isa)                                                                   \
  WF_SIMD_TARGET(isa) float row_max_##name(const float* x, std::int64_t n) { return simd::row_max<lanes>(x, n); } \
  WF_SIMD_TARGET(isa) float exp_shifted_sum_##name(const float* x, std::int64_t n, float shift, float* out,       \
                                                   float scale) {                                                \
    return simd::exp_shifted_sum<lanes>(x, n, shift, out, scale);                                                \
  }                                                                                                              \
  constexpr FloatRowKernels kFloatRows_##name{row_max_##name, exp_shifted_sum_##name};
namespace {
WF_SIMD_FOR_EACH_ISA(WF_FLOAT_ROW_KERNELS)
#undef WF_FLOAT_ROW_KERNELS

const FloatRowKernels& float_rows() {
  static const FloatRowKernels kernels = WF_SIMD_PICK(kFloatRows_);  // lanes() never throws
  return kernels;
}

// Float exps are summed in float lanes over runs this long, and the runs in double: the sum of
// a 50k-entry vocabulary row stays within ~1e-6 relative (5e-7 measured).
constexpr std::int64_t kFloatSumRun = 1024;
}  // namespace

float row_max_f32(const float* x, std::int64_t n) { return float_rows().row_max(x, n); }
float exp_shifted_sum_f32(const float* x, std::int64_t n, float shift, float* out, float scale) {
  return float_rows().exp_shifted_sum(x, n, shift, out, scale);
}

template <typename T>
double row_max(std::int64_t cols, const T* x) {
  if constexpr (std::is_same_v<T, float>) {
    return row_max_f32(x, cols);
  } else {
    double m = kNegInf;
    for (std::int64_t j = 0; j < cols; ++j) {
      if (x[j] > m) m = x[j];
    }
    return m;
  }
}

template <typename T>
double row_sum_exp(std::int64_t cols, const T* x, double shift, T* exps) {
  if (shift == kNegInf) {
    if (exps != nullptr) {
      for (std::int64_t j = 0; j < cols; ++j) exps[j] = T(0);
    }
    return 0.0;
  }
  // The exponential runs in T (the shifted argument is <= 0, so the result is in [0, 1] and
  // float's relative accuracy suffices); only the sum needs double.
  const T t_shift = static_cast<T>(shift);
  double sum = 0.0;
  if constexpr (std::is_same_v<T, float>) {
    for (std::int64_t j = 0; j < cols; j += kFloatSumRun) {
      const std::int64_t n = std::min(kFloatSumRun, cols - j);
      sum += exp_shifted_sum_f32(x + j, n, t_shift, exps != nullptr ? exps + j : nullptr);
    }
  } else {
    for (std::int64_t j = 0; j < cols; ++j) {
      const T e = std::exp(x[j] - t_shift);
      if (exps != nullptr) exps[j] = e;
      sum += e;
    }
  }
  return sum;
}

template <typename T>
double row_logsumexp(std::int64_t cols, const T* x) {
  const double m = row_max(cols, x);
  if (m == kNegInf) return kNegInf;
  return m + std::log(row_sum_exp(cols, x, m, static_cast<T*>(nullptr)));
}

template <typename T>
void softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  check_sizes("softmax_forward", rows, cols);
  parallel_for_rows(rows, cols, [=](std::int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const double sum = row_sum_exp(cols, xr, row_max(cols, xr), yr);
    // sum == 0 only for an all -inf row, whose exps are already zeros.
    const T scale = sum > 0.0 ? static_cast<T>(1.0 / sum) : T(0);
    for (std::int64_t j = 0; j < cols; ++j) yr[j] *= scale;
  });
}

template <typename T>
void softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx) {
  check_sizes("softmax_backward", rows, cols);
  parallel_for_rows(rows, cols, [=](std::int64_t r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    double dot = 0.0;
    // A vector-lane split of the sum, fixed at compile time: deterministic for any thread count.
#pragma omp simd reduction(+ : dot)
    for (std::int64_t j = 0; j < cols; ++j) dot += static_cast<double>(dyr[j]) * yr[j];
    const T t_dot = static_cast<T>(dot);
    for (std::int64_t j = 0; j < cols; ++j) dxr[j] = yr[j] * (dyr[j] - t_dot);
  });
}

template <typename T>
void log_softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  check_sizes("log_softmax_forward", rows, cols);
  parallel_for_rows(rows, cols, [=](std::int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const double lse = row_logsumexp(cols, xr);
    if (lse == kNegInf) {  // all -inf: x - lse would be NaN
      for (std::int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(kNegInf);
      return;
    }
    for (std::int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(xr[j] - lse);
  });
}

template <typename T>
void log_softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx) {
  check_sizes("log_softmax_backward", rows, cols);
  parallel_for_rows(rows, cols, [=](std::int64_t r) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    double total = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) total += dyr[j];
    for (std::int64_t j = 0; j < cols; ++j) dxr[j] = dyr[j] - std::exp(yr[j]) * static_cast<T>(total);
  });
}

// ---- references ----------------------------------------------------------------------------

// row_logsumexp by the textbook formula, in double throughout.
template <typename T>
double row_logsumexp_reference(std::int64_t cols, const T* x) {
  double m = kNegInf;
  for (std::int64_t j = 0; j < cols; ++j) m = std::fmax(m, static_cast<double>(x[j]));
  if (m == kNegInf) return kNegInf;
  double sum = 0.0;
  for (std::int64_t j = 0; j < cols; ++j) sum += std::exp(static_cast<double>(x[j]) - m);
  return m + std::log(sum);
}

template <typename T>
void softmax_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const double lse = row_logsumexp_reference(cols, x + r * cols);
    for (std::int64_t j = 0; j < cols; ++j) {
      const double xj = x[r * cols + j];
      y[r * cols + j] = static_cast<T>(lse == kNegInf ? 0.0 : std::exp(xj - lse));
    }
  }
}

template <typename T>
void softmax_backward_reference(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx) {
  for (std::int64_t r = 0; r < rows; ++r) {
    double dot = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) dot += static_cast<double>(dy[r * cols + j]) * y[r * cols + j];
    for (std::int64_t j = 0; j < cols; ++j) {
      dx[r * cols + j] = static_cast<T>(static_cast<double>(y[r * cols + j]) * (dy[r * cols + j] - dot));
    }
  }
}

template <typename T>
void log_softmax_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const double lse = row_logsumexp_reference(cols, x + r * cols);
    for (std::int64_t j = 0; j < cols; ++j) {
      y[r * cols + j] = static_cast<T>(lse == kNegInf ? kNegInf : x[r * cols + j] - lse);
    }
  }
}

template <typename T>
void log_softmax_backward_reference(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx) {
  for (std::int64_t r = 0; r < rows; ++r) {
    double total = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) total += dy[r * cols + j];
    for (std::int64_t j = 0; j < cols; ++j) {
      dx[r * cols + j] = static_cast<T>(dy[r * cols + j] - std::exp(static_cast<double>(y[r * cols + j])) * total);
    }
  }
}

#define WF_INSTANTIATE_SOFTMAX(T)                                                                 \
  template double row_max<T>(std::int64_t, const T*);                                             \
  template double row_sum_exp<T>(std::int64_t, const T*, double, T*);                             \
  template double row_logsumexp<T>(std::int64_t, const T*);                                       \
  template void softmax_forward<T>(std::int64_t, std::int64_t, const T*, T*);                     \
  template void softmax_backward<T>(std::int64_t, std::int64_t, const T*, const T*, T*);          \
  template void log_softmax_forward<T>(std::int64_t, std::int64_t, const T*, T*);                 \
  template void log_softmax_backward<T>(std::int64_t, std::int64_t, const T*, const T*, T*);      \
  template void log_softmax_backward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, T*); \
  template void softmax_forward_reference<T>(std::int64_t, std::int64_t, const T*, T*);           \
  template void softmax_backward_reference<T>(std::int64_t, std::int64_t, const T*, const T*, T*); \
  template void log_softmax_forward_reference<T>(std::int64_t, std::int64_t, const T*, T*); \
  template double row_logsumexp_reference<T>(std::int64_t, const T*);
WF_INSTANTIATE_SOFTMAX(float)
WF_INSTANTIATE_SOFTMAX(double)
#undef WF_INSTANTIATE_SOFTMAX

}  // namespace wf::kernels::cpu
