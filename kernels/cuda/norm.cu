// Kernels of softmax, log-softmax, LayerNorm and RMSNorm (kernels/cuda/norm.h), line for line the
// arithmetic of kernels/cpu/softmax.cpp and kernels/cpu/norm.cpp: row sums and statistics in double,
// elementwise results in the precision the CPU computes them in.
//
// Row kernels: one block per row (a grid-stride loop over rows beyond the grid), its threads
// striding over the columns, so any row length works (a 50257-entry vocabulary row included);
// block reductions are fixed trees (kernels/cuda/launch.cuh), so results repeat bit for bit.
// Every loop over rows is uniform over the block, as the __syncthreads in the reductions need.
#include "kernels/cuda/norm.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

constexpr int kMaxRowThreads = 512;
constexpr int kParamThreads = 128;              // columns per block of the parameter-gradient kernels
constexpr std::int64_t kMaxParamChunks = 256;   // row chunks of the parameter gradients

// Threads for rows of `cols` columns: a power of two from 32 to kMaxRowThreads, no larger than
// the row needs.
int row_threads(std::int64_t cols) {
  int threads = 32;
  while (threads < cols && threads < kMaxRowThreads) threads *= 2;
  return threads;
}
int row_blocks(std::int64_t rows) { return static_cast<int>(rows < kMaxBlocks ? rows : kMaxBlocks); }

// The largest entry of row[0, cols), NaNs passed over (kernels/cpu/softmax.h's row_max): -inf for an
// empty or all -inf row. Every thread's running maximum is a number, so the block tree is exact.
template <class T>
__device__ T block_row_max(std::int64_t cols, const T* row, T* scratch) {
  T m = neg_inf<T>();
  for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const T v = row[j];
    m = v > m ? v : m;
  }
  return block_max(m, scratch, neg_inf<T>());
}

// ---- softmax ------------------------------------------------------------------------------------

// softmax: y = exp(x − max) · (1 / Σ exp), the exponentials in T and their sum in double; a row
// with no finite mass (max −inf) is zeros. log-softmax: y = x − (max + log Σ exp) in double; −inf
// for such a row. A NaN sum (a NaN or +inf entry) gives the CPU's result too: the scale is 0, so
// only the entries whose exponential is NaN stay NaN.
template <class T, bool kLog>
__global__ void softmax_forward_kernel(std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  __shared__ T max_scratch[32];
  __shared__ double sum_scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T shift = block_row_max(cols, xr, max_scratch);
    if (shift == neg_inf<T>()) {  // the same for every thread of the block
      for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = kLog ? neg_inf<T>() : T(0);
      continue;
    }
    double sum = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += static_cast<double>(dev_exp(xr[j] - shift));
    sum = block_sum(sum, sum_scratch);
    if constexpr (kLog) {
      const double lse = static_cast<double>(shift) + log(sum);
      for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
        yr[j] = static_cast<T>(static_cast<double>(xr[j]) - lse);
      }
    } else {
      const T scale = sum > 0.0 ? static_cast<T>(1.0 / sum) : T(0);
      for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = dev_exp(xr[j] - shift) * scale;
    }
  }
}

// softmax: dx = y·(dy − Σ dy·y); log-softmax: dx = dy − exp(y)·Σ dy. The sums in double, rounded
// to T before the elementwise step, as on the CPU.
template <class T, bool kLog>
__global__ void softmax_backward_kernel(std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx) {
  __shared__ double scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    double sum = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      sum += kLog ? static_cast<double>(dyr[j]) : static_cast<double>(dyr[j]) * static_cast<double>(yr[j]);
    }
    const T total = static_cast<T>(block_sum(sum, scratch));
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      dxr[j] = kLog ? dyr[j] - dev_exp(yr[j]) * total : yr[j] * (dyr[j] - total);
    }
  }
}

template <class T, bool kLog>
void softmax_forward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  if (rows == 0 || cols == 0) return;
  softmax_forward_kernel<T, kLog><<<row_blocks(rows), row_threads(cols), 0, stream>>>(rows, cols, x, y);
  WF_CUDA_CHECK_LAUNCH("softmax_forward_kernel");
}
template <class T, bool kLog>
void softmax_backward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* y, const T* dy, T* dx) {
  if (rows == 0 || cols == 0) return;
  softmax_backward_kernel<T, kLog><<<row_blocks(rows), row_threads(cols), 0, stream>>>(rows, cols, y, dy, dx);
  WF_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

// ---- LayerNorm and RMSNorm ----------------------------------------------------------------------
// RMSNorm is LayerNorm with the mean pinned to 0 and no bias (kRms), as in kernels/cpu/norm.cpp.

// Two passes in double: the mean, then the mean square about it; rstd = 1 / sqrt(that + eps).
// y = (x − mean)·rstd·weight + bias in double, rounded to T. inv_cols: 1 / cols, 0 for cols 0.
// With a branch (the fused residual add) the row normalised is sum = x + branch, added in T and
// written first; each thread then reads back only the columns it wrote itself (every loop below
// strides the same way), so no barrier is needed between the write and the reads.
template <class T, bool kRms>
__global__ void norm_forward_kernel(std::int64_t rows, std::int64_t cols, double inv_cols, const T* x,
                                    const T* branch, const T* weight, const T* bias, double eps, T* sum, T* y,
                                    T* mean_out, T* rstd_out) {
  __shared__ double scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    if (branch != nullptr) {
      const T* br = branch + r * cols;
      T* sr = sum + r * cols;
      for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) sr[j] = xr[j] + br[j];
      xr = sr;
    }
    T* yr = y + r * cols;
    double mean = 0.0;
    if constexpr (!kRms) {
      double sum = 0.0;
      for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += static_cast<double>(xr[j]);
      mean = block_sum(sum, scratch) * inv_cols;
    }
    double sum_sq = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double d = static_cast<double>(xr[j]) - mean;
      sum_sq += d * d;
    }
    const double rstd = 1.0 / sqrt(block_sum(sum_sq, scratch) * inv_cols + eps);
    if (threadIdx.x == 0) {
      if (mean_out != nullptr) mean_out[r] = static_cast<T>(mean);
      if (rstd_out != nullptr) rstd_out[r] = static_cast<T>(rstd);
    }
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      double v = (static_cast<double>(xr[j]) - mean) * rstd;
      if (weight != nullptr) v *= static_cast<double>(weight[j]);
      if (bias != nullptr) v += static_cast<double>(bias[j]);
      yr[j] = static_cast<T>(v);
    }
  }
}

// dx = rstd·(g − mean(g) − xhat·mean(g·xhat)), g = dy·weight, xhat = (x − mean)·rstd, from the saved
// mean and rstd (in T, read back to double as the CPU does); RMSNorm drops the mean(g) term.
// dsum_in (nullable; the fused residual add): dx = T(that) + dsum_in, added in T.
template <class T, bool kRms>
__global__ void norm_backward_dx_kernel(std::int64_t rows, std::int64_t cols, double inv_cols, const T* x,
                                        const T* weight, const T* mean, const T* rstd, const T* dy,
                                        const T* dsum_in, T* dx) {
  __shared__ double scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* dyr = dy + r * cols;
    T* dxr = dx + r * cols;
    const double row_mean = kRms ? 0.0 : static_cast<double>(mean[r]);
    const double row_rstd = static_cast<double>(rstd[r]);
    double sum_g = 0.0, sum_g_xhat = 0.0;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double g = weight != nullptr ? static_cast<double>(dyr[j]) * static_cast<double>(weight[j])
                                         : static_cast<double>(dyr[j]);
      sum_g += g;
      sum_g_xhat += g * ((static_cast<double>(xr[j]) - row_mean) * row_rstd);
    }
    sum_g = block_sum(sum_g, scratch);
    sum_g_xhat = block_sum(sum_g_xhat, scratch);
    const double mean_g = kRms ? 0.0 : sum_g * inv_cols;
    const double mean_g_xhat = sum_g_xhat * inv_cols;
    for (std::int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const double g = weight != nullptr ? static_cast<double>(dyr[j]) * static_cast<double>(weight[j])
                                         : static_cast<double>(dyr[j]);
      const double xhat = (static_cast<double>(xr[j]) - row_mean) * row_rstd;
      const T dx_norm = static_cast<T>(row_rstd * (g - mean_g - xhat * mean_g_xhat));
      dxr[j] = dsum_in != nullptr ? dx_norm + dsum_in[r * cols + j] : dx_norm;
    }
  }
}

// Pass 1 of the parameter gradients: thread (column j, chunk c = blockIdx.y) adds dy·xhat and dy
// over the chunk's rows [c·rows/chunks, (c+1)·rows/chunks) in order, into partials[c·cols + j]
// (dweight) and partials[(chunks + c)·cols + j] (dbias). Neighbouring threads read neighbouring
// columns of each row.
template <class T, bool kRms>
__global__ void norm_param_partials_kernel(std::int64_t rows, std::int64_t cols, std::int64_t chunks, const T* x,
                                           const T* mean, const T* rstd, const T* dy, double* partials) {
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t c = blockIdx.y;
  if (j >= cols) return;
  double dweight = 0.0, dbias = 0.0;
  for (std::int64_t r = c * rows / chunks; r < (c + 1) * rows / chunks; ++r) {
    const double row_mean = kRms ? 0.0 : static_cast<double>(mean[r]);
    const double xhat = (static_cast<double>(x[r * cols + j]) - row_mean) * static_cast<double>(rstd[r]);
    const double g = static_cast<double>(dy[r * cols + j]);
    dweight += g * xhat;
    dbias += g;
  }
  partials[c * cols + j] = dweight;
  partials[(chunks + c) * cols + j] = dbias;
}

// Pass 2: each column's partials added in chunk order onto dweight and dbias (+=).
template <class T>
__global__ void norm_param_finish_kernel(std::int64_t cols, std::int64_t chunks, const double* partials, T* dweight,
                                         T* dbias) {
  WF_GRID_STRIDE_LOOP(j, cols) {
    if (dweight != nullptr) {
      double total = 0.0;
      for (std::int64_t c = 0; c < chunks; ++c) total += partials[c * cols + j];
      dweight[j] = static_cast<T>(static_cast<double>(dweight[j]) + total);
    }
    if (dbias != nullptr) {
      double total = 0.0;
      for (std::int64_t c = 0; c < chunks; ++c) total += partials[(chunks + c) * cols + j];
      dbias[j] = static_cast<T>(static_cast<double>(dbias[j]) + total);
    }
  }
}

double inverse_cols(std::int64_t cols) { return cols > 0 ? 1.0 / static_cast<double>(cols) : 0.0; }

template <class T, bool kRms>
void norm_forward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, const T* branch,
                  const T* weight, const T* bias, double eps, T* sum, T* y, T* mean, T* rstd) {
  if (rows == 0) return;
  norm_forward_kernel<T, kRms><<<row_blocks(rows), row_threads(cols), 0, stream>>>(
      rows, cols, inverse_cols(cols), x, branch, weight, kRms ? nullptr : bias, eps, sum, y, kRms ? nullptr : mean,
      rstd);
  WF_CUDA_CHECK_LAUNCH("norm_forward_kernel");
}

template <class T, bool kRms>
void norm_backward_dx(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, const T* weight,
                      const T* mean, const T* rstd, const T* dy, const T* dsum_in, T* dx) {
  if (rows == 0 || cols == 0) return;
  norm_backward_dx_kernel<T, kRms><<<row_blocks(rows), row_threads(cols), 0, stream>>>(
      rows, cols, inverse_cols(cols), x, weight, mean, rstd, dy, dsum_in, dx);
  WF_CUDA_CHECK_LAUNCH("norm_backward_dx_kernel");
}

template <class T, bool kRms>
void norm_param_grads(cudaStream_t stream, std::int64_t rows, std::int64_t cols, std::int64_t chunks, const T* x,
                      const T* mean, const T* rstd, const T* dy, T* dweight, T* dbias, double* partials) {
  if (kRms) dbias = nullptr;
  // No rows add nothing (T(w + 0.0) == w), and no columns leave nothing to add to.
  if (rows == 0 || cols == 0 || (dweight == nullptr && dbias == nullptr)) return;
  const dim3 grid(static_cast<unsigned>((cols + kParamThreads - 1) / kParamThreads), static_cast<unsigned>(chunks));
  norm_param_partials_kernel<T, kRms><<<grid, kParamThreads, 0, stream>>>(rows, cols, chunks, x, mean, rstd, dy,
                                                                         partials);
  WF_CUDA_CHECK_LAUNCH("norm_param_partials_kernel");
  norm_param_finish_kernel<T><<<blocks_for(cols), kThreads, 0, stream>>>(cols, chunks, partials, dweight, dbias);
  WF_CUDA_CHECK_LAUNCH("norm_param_finish_kernel");
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

template <class T>
void launch_softmax_forward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  softmax_forward<T, false>(stream, rows, cols, x, y);
}
template <class T>
void launch_log_softmax_forward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* x, T* y) {
  softmax_forward<T, true>(stream, rows, cols, x, y);
}
template <class T>
void launch_softmax_backward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* y, const T* dy,
                             T* dx) {
  softmax_backward<T, false>(stream, rows, cols, y, dy, dx);
}
template <class T>
void launch_log_softmax_backward(cudaStream_t stream, std::int64_t rows, std::int64_t cols, const T* y,
                                 const T* dy, T* dx) {
  softmax_backward<T, true>(stream, rows, cols, y, dy, dx);
}

template <class T>
void launch_norm_forward(cudaStream_t stream, bool rms, std::int64_t rows, std::int64_t cols, const T* x,
                         const T* branch, const T* weight, const T* bias, double eps, T* sum, T* y, T* mean,
                         T* rstd) {
  if (rms) {
    norm_forward<T, true>(stream, rows, cols, x, branch, weight, bias, eps, sum, y, mean, rstd);
  } else {
    norm_forward<T, false>(stream, rows, cols, x, branch, weight, bias, eps, sum, y, mean, rstd);
  }
}

template <class T>
void launch_norm_backward_dx(cudaStream_t stream, bool rms, std::int64_t rows, std::int64_t cols, const T* x,
                             const T* weight, const T* mean, const T* rstd, const T* dy, const T* dsum_in, T* dx) {
  if (rms) {
    norm_backward_dx<T, true>(stream, rows, cols, x, weight, mean, rstd, dy, dsum_in, dx);
  } else {
    norm_backward_dx<T, false>(stream, rows, cols, x, weight, mean, rstd, dy, dsum_in, dx);
  }
}

std::int64_t norm_param_chunks(std::int64_t rows) { return rows < kMaxParamChunks ? rows : kMaxParamChunks; }

template <class T>
void launch_norm_param_grads(cudaStream_t stream, bool rms, std::int64_t rows, std::int64_t cols,
                             std::int64_t chunks, const T* x, const T* mean, const T* rstd, const T* dy, T* dweight,
                             T* dbias, double* partials) {
  if (rms) {
    norm_param_grads<T, true>(stream, rows, cols, chunks, x, mean, rstd, dy, dweight, dbias, partials);
  } else {
    norm_param_grads<T, false>(stream, rows, cols, chunks, x, mean, rstd, dy, dweight, dbias, partials);
  }
}

#define WF_INSTANTIATE_NORM_LAUNCHERS(T)                                                                          \
  template void launch_softmax_forward<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, T*);                \
  template void launch_log_softmax_forward<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, T*);            \
  template void launch_softmax_backward<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, const T*, T*);     \
  template void launch_log_softmax_backward<T>(cudaStream_t, std::int64_t, std::int64_t, const T*, const T*, T*); \
  template void launch_norm_forward<T>(cudaStream_t, bool, std::int64_t, std::int64_t, const T*, const T*,        \
                                       const T*, const T*, double, T*, T*, T*, T*);                               \
  template void launch_norm_backward_dx<T>(cudaStream_t, bool, std::int64_t, std::int64_t, const T*, const T*,    \
                                           const T*, const T*, const T*, const T*, T*);                           \
  template void launch_norm_param_grads<T>(cudaStream_t, bool, std::int64_t, std::int64_t, std::int64_t,          \
                                           const T*, const T*, const T*, const T*, T*, T*, double*);
WF_INSTANTIATE_NORM_LAUNCHERS(float)
WF_INSTANTIATE_NORM_LAUNCHERS(double)
#undef WF_INSTANTIATE_NORM_LAUNCHERS

}  // namespace wf::kernels::cuda
