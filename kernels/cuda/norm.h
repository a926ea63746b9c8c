#pragma once
// Launchers of softmax, log-softmax, LayerNorm and RMSNorm (kernels/cuda/norm.cu), for
// kernels/cuda/norm.cpp. Semantics are kernels/cpu/softmax.h and kernels/cpu/norm.h: row sums and
// row statistics in double, mean and rstd saved in T, dweight and dbias ACCUMULATED (+=), any row
// length (a block loops over the columns; nothing assumes a row fits in shared memory).
// T is float or double (instantiated in norm.cu). Deterministic: fixed reduction trees, no atomics.
//
// fmt-free: nvcc compiles this header too.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace wf::kernels::cuda {

// ---- softmax over the last dim of [rows, cols] (y may alias x; dx may alias dy) ----------------
template <class T>
void launch_softmax_forward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, T* y);
template <class T>
void launch_log_softmax_forward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, T* y);
template <class T>
void launch_softmax_backward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* y, const T* dy,
                             T* dx);
template <class T>
void launch_log_softmax_backward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* y,
                                 const T* dy, T* dx);

// ---- LayerNorm (rms false) and RMSNorm (rms true: no mean, no bias) ----------------------------
// weight, bias, mean, rstd nullable (mean and bias ignored for RMSNorm). branch nullable: when given,
// the row normalised is sum = x + branch (added in T), written to sum (the fused residual add).
template <class T>
void launch_norm_forward(cudaStream_t stream, bool rms, std::int64_t rows, std::int64_t cols, const T* x,
                         const T* branch, const T* weight, const T* bias, double eps, T* sum, T* y, T* mean,
                         T* rstd);
// dx from the saved mean (LayerNorm) and rstd; weight nullable. dsum_in nullable: when given,
// dx = T(the norm's dx) + dsum_in (the fused residual add's gradient).
template <class T>
void launch_norm_backward_dx(cudaStream_t stream, bool rms, std::int64_t rows, std::int64_t cols, const T* x,
                             const T* weight, const T* mean, const T* rstd, const T* dy, const T* dsum_in, T* dx);
// The row chunks the parameter gradients are summed in (a function of rows only), and the
// doubles of scratch their partials take.
std::int64_t norm_param_chunks(std::int64_t rows);
inline std::int64_t norm_param_partials_size(std::int64_t cols, std::int64_t chunks) { return 2 * chunks * cols; }
// dweight += Σ_r dy·xhat and dbias += Σ_r dy (each nullable; dbias only for LayerNorm): per chunk
// of rows a partial per column, then the partials added in chunk order.
template <class T>
void launch_norm_param_grads(cudaStream_t stream, bool rms, std::int64_t rows, std::int64_t cols,
                             std::int64_t chunks, const T* x, const T* mean, const T* rstd, const T* dy, T* dweight,
                             T* dbias, double* partials);

}  // namespace wf::kernels::cuda
