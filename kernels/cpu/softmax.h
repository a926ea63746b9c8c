#pragma once
// Softmax and log-softmax over the last dim of a row-major [rows, cols] array.
//
// Rows are independent and run in parallel (OpenMP, for arrays above ~32K elements). Each row
// is shifted by its max before exponentiating, so any finite logits are safe, and the row sum
// is accumulated in double so float rows are accurate and the result never depends on the
// thread count.
//
// Rows containing -inf (masked entries) are fine. A row that is entirely -inf has no
// probability mass anywhere: softmax gives all zeros (never NaN) and log-softmax gives all -inf
// (its exp is that same all-zero row). A +inf or NaN entry makes its row NaN.
#include <cstdint>

namespace wf::kernels::cpu {

// ---- building blocks (shared with cross_entropy) ------------------------------------------

// The largest entry of a row, in double; -inf for an empty or all -inf row (NaNs are skipped
// here and propagate through the exponentials instead).
template <typename T>
double row_max(std::int64_t cols, const T* x);

// sum_j exp(x_j - shift), accumulated in double. Stores each exp(x_j - shift) into `exps` when
// it is not null (exps may alias x). With shift = -inf (an all -inf row) it returns 0 and
// stores zeros instead of the NaNs that -inf - -inf would give.
template <typename T>
double row_sum_exp(std::int64_t cols, const T* x, double shift, T* exps);

// log(sum_j exp(x_j)), max-shifted; -inf for an all -inf row.
template <typename T>
double row_logsumexp(std::int64_t cols, const T* x);

// The f32 row primitives behind row_max<float> and row_sum_exp<float>, SIMD per ISA
// (kernels/cpu/simd.h); the attention and cross-entropy kernels call them in their inner loops.
// row_max_f32: -inf for n = 0. exp_shifted_sum_f32: out[j] = scale·exp(x[j] − shift) when out
// is not null (out may alias x); returns Σ exp(x[j] − shift) summed in float, for
// x[j] − shift <= 88 and a finite shift.
float row_max_f32(const float* x, std::int64_t n);
float exp_shifted_sum_f32(const float* x, std::int64_t n, float shift, float* out, float scale = 1.0f);

// ---- kernels ------------------------------------------------------------------------------

// y = softmax(x) row by row. y may alias x.
template <typename T>
void softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y);

// dx = y * (dy - rowsum(dy * y)), from the forward's output y. dx may alias dy.
template <typename T>
void softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx);

// y = x - logsumexp(x) row by row. y may alias x.
template <typename T>
void log_softmax_forward(std::int64_t rows, std::int64_t cols, const T* x, T* y);

// dx = dy − exp(y)·Σ_j dy_j row by row, from log_softmax's output y (the row sum in double).
template <typename T>
void log_softmax_backward(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx);
// ---- references: naive loops in double, for tests ----------------------------------------
template <typename T>
double row_logsumexp_reference(std::int64_t cols, const T* x);
template <typename T>
void softmax_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, T* y);
template <typename T>
void softmax_backward_reference(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx);
template <typename T>
void log_softmax_forward_reference(std::int64_t rows, std::int64_t cols, const T* x, T* y);
template <typename T>
void log_softmax_backward_reference(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx);

}  // namespace wf::kernels::cpu
