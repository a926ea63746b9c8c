#pragma once
// Elementwise CPU kernels on contiguous arrays. Outputs may alias inputs of the same size
// (out == x computes in place); partially overlapping buffers are not supported.
// Large arrays are split over OpenMP threads; every element is computed independently, so
// results never depend on the number of threads.
#include <cstdint>

namespace wf::kernels::cpu {

// ---- broadcasting binary ops ---------------------------------------------------------------
enum class BinaryOp { add, sub, mul, div };
const char* binary_op_name(BinaryOp op);

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

}  // namespace wf::kernels::cpu
