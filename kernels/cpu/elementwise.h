#pragma once
// Elementwise CPU kernels on contiguous arrays. Outputs may alias inputs of the same size
// (out == x computes in place); partially overlapping buffers are not supported.
// Large arrays are split over OpenMP threads; every element is computed independently, so
// results never depend on the number of threads.
#include <cstdint>

#include "kernels/kernel_args.h"

namespace wf::kernels::cpu {

// ---- broadcasting binary ops ---------------------------------------------------------------
using kernels::BinaryOp;  // kernels/kernel_args.h
using kernels::binary_op_name;

// out = a (op) b with NumPy broadcasting. The caller has right-aligned both input shapes to
// `ndim` dims (padding with 1s); an input extent of 1 broadcasts against out_shape, any other
// extent must equal it. ndim == 0 is a scalar op. All three arrays are contiguous row-major.
template <class T>
void binary_broadcast(BinaryOp op, const T* a, const std::int64_t* a_shape, const T* b,
                      const std::int64_t* b_shape, T* out, const std::int64_t* out_shape, int ndim);
// One multi-index per element, no fast paths: the oracle for binary_broadcast.
template <class T>
void binary_broadcast_reference(BinaryOp op, const T* a, const std::int64_t* a_shape, const T* b,
                                const std::int64_t* b_shape, T* out,
                                const std::int64_t* out_shape, int ndim);

// ---- linear helpers --------------------------------------------------------------------------
template <class T>
void scale(std::int64_t n, T alpha, const T* x, T* out);  // out = alpha·x
template <class T>
void add_scaled(std::int64_t n, T alpha, const T* x, T* y);  // y += alpha·x  (axpy)
template <class T>
void add_bias(std::int64_t rows, std::int64_t cols, const T* x, const T* bias, T* out);  // out[r,c] = x[r,c] + bias[c]

// Fused residual connections: out = x + residual, and out = x + bias + residual (the output
// projection of a transformer block followed by its skip connection, in one pass).
template <class T>
void residual_add(std::int64_t n, const T* x, const T* residual, T* out);
template <class T>
void bias_residual_add(std::int64_t rows, std::int64_t cols, const T* x, const T* bias,
                       const T* residual, T* out);

// ---- activations -----------------------------------------------------------------------------
// GELU, tanh approximation as in GPT-2: y = x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³))).
template <class T>
void gelu_forward(std::int64_t n, const T* x, T* y);
// dx = dy · gelu'(x). In f32, |x| > ~1e19 gives NaN (x² overflows in the derivative's formula),
// as the scalar formula does.
template <class T>
void gelu_backward(std::int64_t n, const T* x, const T* dy, T* dx);

// SiLU (swish): y = x·σ(x).
template <class T>
void silu_forward(std::int64_t n, const T* x, T* y);
template <class T>
void silu_backward(std::int64_t n, const T* x, const T* dy, T* dx);  // dx = dy · silu'(x)

template <class T>
void exp_forward(std::int64_t n, const T* x, T* y);  // y = eˣ (its backward is dy·y)
template <class T>
void ln_forward(std::int64_t n, const T* x, T* y);  // y = ln x (its backward is dy/x)
template <class T>
void tanh_forward(std::int64_t n, const T* x, T* y);
template <class T>
void tanh_backward(std::int64_t n, const T* y, const T* dy, T* dx);  // dx = dy·(1 − y²), from the output y
// out = alpha·x + shift (scale() when shift is 0).
template <class T>
void affine(std::int64_t n, T alpha, T shift, const T* x, T* out);

// ---- dropout ---------------------------------------------------------------------------------
using kernels::DropoutLayout;  // kernels/kernel_args.h
// out[k] = x[k] / (1 − p) where uniform_at(seed, first + whole index of k) >= p, else 0: the
// forward and the backward of dropout call it alike, so the gradient sees the forward's mask.
template <class T>
void dropout_mask(std::int64_t n, double p, std::uint64_t seed, std::uint64_t first, const DropoutLayout& layout,
                  const T* x, T* out);

}  // namespace wf::kernels::cpu
