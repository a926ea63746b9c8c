#pragma once
// Launchers of the elementwise CUDA kernels (kernels/cuda/elementwise.cu), for the entries of
// kernels/cuda/elementwise.cpp. T is float or double. Every launcher queues its kernel on
// `stream` and returns: no synchronisation, no host read of device memory.
//
// The products and sums are rounded one at a time, never fused into an FMA, as the CPU's loops
// compute them: binary_broadcast, affine, add_scaled, the bias and residual adds, tanh's backward,
// clamp, dropout and the scalings give the CPU's bits. gelu, silu, exp, ln and tanh call CUDA's
// libm (within a few ulps of the CPU's). Free of fmt (nvcc reads it).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/strided.h"
#include "kernels/kernel_args.h"

namespace wf::kernels::cuda {

// out[i] = a[offset 0 of i] (op) b[offset 1 of i] for i < n (layout: operand 0 is a, 1 is b).
template <class T>
void launch_binary_broadcast(cudaStream_t stream, BinaryOp op, std::int64_t n, const StridedLayout<2>& layout,
                             const T* a, const T* b, T* out);
// out = alpha·x + shift, or alpha·x when shift is 0 (the CPU's scale(), which adds no +0).
template <class T>
void launch_affine(cudaStream_t stream, std::int64_t n, T alpha, T shift, const T* x, T* out);
// y += alpha·x
template <class T>
void launch_add_scaled(cudaStream_t stream, std::int64_t n, T alpha, const T* x, T* y);
// out[r, c] = (x[r, c] + bias[c]) + residual[r, c], each term skipped when its pointer is null.
template <class T>
void launch_bias_residual_add(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, const T* bias,
                              const T* residual, T* out);
template <class T>
void launch_unary_forward(cudaStream_t stream, UnaryOp op, std::int64_t n, const T* x, T* y);
// op is gelu, silu (saved = x) or tanh (saved = y).
template <class T>
void launch_unary_backward(cudaStream_t stream, UnaryOp op, std::int64_t n, const T* saved, const T* dy, T* dx);
// out[k] = x[k]·keep_scale where philox_uniform(seed, first + whole index of k) >= p, else 0.
template <class T>
void launch_dropout_mask(cudaStream_t stream, std::int64_t n, double p, T keep_scale, std::uint64_t seed,
                         std::uint64_t first, std::uint64_t block, std::uint64_t stride, std::uint64_t start,
                         const T* x, T* out);
// y = x < lo ? lo : (hi < x ? hi : x)  (std::clamp: NaN stays NaN)
template <class T>
void launch_clamp(cudaStream_t stream, std::int64_t n, T lo, T hi, const T* x, T* y);
// x *= alpha
template <class T>
void launch_scale(cudaStream_t stream, std::int64_t n, T* x, T alpha);
// x *= static_cast<T>(*factor), factor one f64 in device memory; with only_below_one nothing
// changes unless *factor < 1 or NaN (scale_by_coefficient: !(c >= 1)).
template <class T>
void launch_scale_by_device_factor(cudaStream_t stream, std::int64_t n, T* x, const double* factor,
                                   bool only_below_one);

}  // namespace wf::kernels::cuda
