// The cross-entropy kernels (kernels/cuda/cross_entropy.h): one block per row where a row is
// reduced (its max and its sum of exponentials, in a fixed order: deterministic), one thread per
// element where each element is independent (the backwards). Rows are looped over, so a row of
// any length (50257 and more) and any number of rows fit the grid.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"
#include "src/core/cuda/cuda_check.h"

namespace wf::kernels::cuda {
namespace {

// Threads of a row's block: more for long rows, so that a few long rows still spread over the GPU.
int row_threads(std::int64_t cols) { return cols >= 4096 ? 1024 : 256; }
// Blocks for one block per row (rows beyond the grid are looped over).
int row_blocks(std::int64_t rows) { return static_cast<int>(rows < kMaxBlocks ? (rows < 1 ? 1 : rows) : kMaxBlocks); }

// dLoss/dloss_r before the row's own factor: *grad_loss, divided by *count for the mean (0 when
// every row is ignored: the loss is then the constant 0).
template <class T>
__device__ __forceinline__ double loss_scale(const T* grad_loss, const std::int64_t* count) {
  const double g = static_cast<double>(*grad_loss);
  if (count == nullptr) return g;
  const std::int64_t c = *count;
  return c > 0 ? g / static_cast<double>(c) : 0.0;
}

template <class T>
__global__ void cross_entropy_forward_kernel(std::int64_t rows, std::int64_t vocab, const T* logits,
                                             const std::int64_t* targets, std::int64_t ignore_index, T* losses,
                                             T* lse, std::int64_t* count, detail::DeviceErrorRecord* record,
                                             int message) {
  __shared__ T max_scratch[32];
  __shared__ double sum_scratch[32];
  const T neg_inf = static_cast<T>(-INFINITY);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // the same r for the whole block
    const T* xr = logits + r * vocab;
    T m = neg_inf;
    for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const T v = xr[j];
      m = v > m ? v : m;
    }
    m = block_max(m, max_scratch, neg_inf);
    // An all -inf row has no finite shift: its sum stays 0 and its lse is -inf, as on the CPU.
    double sum = 0.0;
    if (m != neg_inf) {  // exponentials in T of arguments <= 0, as on the CPU; only the sum in double
      for (std::int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += static_cast<double>(dev_exp(xr[j] - m));
    }
    sum = block_sum(sum, sum_scratch);
    if (threadIdx.x == 0) {
      const double row_lse = m == neg_inf ? -INFINITY : static_cast<double>(m) + log(sum);
      lse[r] = static_cast<T>(row_lse);
      const std::int64_t t = targets[r];
      T loss = T(0);
      if (t != ignore_index) {
        if (t < 0 || t >= vocab) {
          report_device_error(record, message, r, t);  // and the row counts as ignored
        } else {
          // From the unrounded lse, as the CPU takes it.
          loss = static_cast<T>(row_lse - static_cast<double>(xr[t]));
          atomicAdd(reinterpret_cast<unsigned long long*>(count), 1ull);  // an integer: the same total in any order
        }
      }
      losses[r] = loss;
    }
  }
}

template <class T>
__global__ void cross_entropy_reduce_kernel(std::int64_t rows, const T* losses, const std::int64_t* count, T* loss) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += static_cast<double>(losses[r]);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    if (count == nullptr) {
      *loss = static_cast<T>(sum);
    } else {
      const std::int64_t c = *count;
      *loss = c > 0 ? static_cast<T>(sum / static_cast<double>(c)) : T(0);
    }
  }
}

template <class T>
__global__ void cross_entropy_backward_kernel(std::int64_t rows, std::int64_t vocab, const T* logits,
                                              const std::int64_t* targets, std::int64_t ignore_index, const T* lse,
                                              const T* grad_loss, const std::int64_t* count, T* dlogits,
                                              const T* row_grad, detail::DeviceErrorRecord* record, int message) {
  const std::int64_t n = rows * vocab;
  WF_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t r = i / vocab, j = i - r * vocab;
    const std::int64_t t = targets[r];
    T out = T(0);  // ignored rows (and rows with a bad target, reported once)
    if (t != ignore_index) {
      if (t < 0 || t >= vocab) {
        if (j == 0) report_device_error(record, message, r, t);
      } else {
        double scale = loss_scale(grad_loss, count);
        if (row_grad != nullptr) scale *= static_cast<double>(row_grad[r]);
        // Each element is read and written by this thread alone, so dlogits may alias logits.
        const T x = logits[i];
        if (j == t) {
          // p − 1 as expm1 in double: near 1 the difference would round away in T.
          out = static_cast<T>(expm1(static_cast<double>(x) - static_cast<double>(lse[r])) * scale);
        } else {
          out = dev_exp(x - lse[r]) * static_cast<T>(scale);
        }
      }
    }
    dlogits[i] = out;
  }
}

template <class T>
__global__ void vocab_parallel_row_max_kernel(std::int64_t rows, std::int64_t k, std::int64_t own, const T* x,
                                              double* max) {
  __shared__ double scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    double m = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < own; j += blockDim.x) {
      const double v = static_cast<double>(x[r * k + j]);
      m = m < v ? v : m;  // std::max's choice: a NaN is passed over, as on the CPU
    }
    m = block_max(m, scratch, static_cast<double>(-INFINITY));
    if (threadIdx.x == 0) max[r] = m;
  }
}

template <class T>
__global__ void vocab_parallel_partials_kernel(std::int64_t rows, std::int64_t k, std::int64_t own,
                                               std::int64_t start, const T* x, const double* max,
                                               const std::int64_t* targets, std::int64_t ignore_index,
                                               double* sums) {
  __shared__ double scratch[32];
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const double m = max[r];
    double s = 0.0;
    for (std::int64_t j = threadIdx.x; j < own; j += blockDim.x) s += exp(static_cast<double>(x[r * k + j]) - m);
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) {
      sums[r] = s;
      const std::int64_t t = targets[r] - start;
      sums[rows + r] = targets[r] != ignore_index && t >= 0 && t < k ? static_cast<double>(x[r * k + t]) : 0.0;
    }
  }
}

__global__ void vocab_parallel_loss_kernel(std::int64_t rows, const double* max, const double* sums,
                                           const std::int64_t* targets, std::int64_t ignore_index,
                                           const std::int64_t* count, double* lse, double* loss) {
  __shared__ double scratch[32];
  double total = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const double l = max[r] + log(sums[r]);
    lse[r] = l;
    if (targets[r] != ignore_index) total += l - sums[rows + r];
  }
  total = block_sum(total, scratch);
  if (threadIdx.x == 0) {
    if (count == nullptr) {
      *loss = total;
    } else {
      const std::int64_t c = *count;
      *loss = c > 0 ? total / static_cast<double>(c) : 0.0;
    }
  }
}

template <class T>
__global__ void vocab_parallel_backward_kernel(std::int64_t rows, std::int64_t k, std::int64_t own,
                                               std::int64_t start, const T* x, const std::int64_t* targets,
                                               std::int64_t ignore_index, const double* lse, const T* grad_loss,
                                               const std::int64_t* count, T* dx) {
  const std::int64_t n = rows * k;
  WF_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t r = i / k, j = i - r * k;
    T out = T(0);  // ignored rows and padding columns
    if (targets[r] != ignore_index) {
      const double scale = loss_scale(grad_loss, count);
      const double shifted = static_cast<double>(x[i]) - lse[r];
      // The target's column (wherever in [0, k) it falls, as on the CPU) takes p − 1 as expm1.
      if (j == targets[r] - start) {
        out = static_cast<T>(expm1(shifted) * scale);
      } else if (j < own) {
        out = static_cast<T>(exp(shifted) * scale);
      }
    }
    dx[i] = out;
  }
}

__global__ void vocab_parallel_local_ids_kernel(std::int64_t n, std::int64_t vocab, std::int64_t start,
                                                std::int64_t rows, const std::int64_t* ids, std::int64_t* local,
                                                double* mask, detail::DeviceErrorRecord* record, int message) {
  WF_GRID_STRIDE_LOOP(i, n) {
    const std::int64_t id = ids[i];
    bool mine = false;
    if (id < 0 || id >= vocab) {
      report_device_error(record, message, i, id);  // and the id adds nothing here
    } else {
      mine = id >= start && id < start + rows;
    }
    local[i] = mine ? id - start : 0;
    mask[i] = mine ? 1.0 : 0.0;
  }
}

}  // namespace

template <class T>
void launch_cross_entropy_forward(cudaStream_t stream, std::int64_t rows, std::int64_t vocab, const T* logits,
                                  const std::int64_t* targets, std::int64_t ignore_index, T* losses, T* lse,
                                  std::int64_t* count, detail::DeviceErrorRecord* record, int message) {
  WF_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(std::int64_t), stream));
  if (rows == 0) return;
  cross_entropy_forward_kernel<T><<<row_blocks(rows), row_threads(vocab), 0, stream>>>(
      rows, vocab, logits, targets, ignore_index, losses, lse, count, record, message);
  WF_CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
}

template <class T>
void launch_cross_entropy_reduce(cudaStream_t stream, std::int64_t rows, const T* losses, const std::int64_t* count,
                                 T* loss) {
  cross_entropy_reduce_kernel<T><<<1, 1024, 0, stream>>>(rows, losses, count, loss);
  WF_CUDA_CHECK_LAUNCH("cross_entropy_reduce_kernel");
}

template <class T>
void launch_cross_entropy_backward(cudaStream_t stream, std::int64_t rows, std::int64_t vocab, const T* logits,
                                   const std::int64_t* targets, std::int64_t ignore_index, const T* lse,
                                   const T* grad_loss, const std::int64_t* count, T* dlogits, const T* row_grad,
                                   detail::DeviceErrorRecord* record, int message) {
  const std::int64_t n = rows * vocab;
  if (n == 0) return;
  cross_entropy_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
      rows, vocab, logits, targets, ignore_index, lse, grad_loss, count, dlogits, row_grad, record, message);
  WF_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
}

template <class T>
void launch_vocab_parallel_row_max(cudaStream_t stream, std::int64_t rows, std::int64_t k, std::int64_t own,
                                   const T* x, double* max) {
  if (rows == 0) return;
  vocab_parallel_row_max_kernel<T><<<row_blocks(rows), row_threads(own), 0, stream>>>(rows, k, own, x, max);
  WF_CUDA_CHECK_LAUNCH("vocab_parallel_row_max_kernel");
}

template <class T>
void launch_vocab_parallel_partials(cudaStream_t stream, std::int64_t rows, std::int64_t k, std::int64_t own,
                                    std::int64_t start, const T* x, const double* max, const std::int64_t* targets,
                                    std::int64_t ignore_index, double* sums) {
  if (rows == 0) return;
  vocab_parallel_partials_kernel<T><<<row_blocks(rows), row_threads(own), 0, stream>>>(
      rows, k, own, start, x, max, targets, ignore_index, sums);
  WF_CUDA_CHECK_LAUNCH("vocab_parallel_partials_kernel");
}

void launch_vocab_parallel_loss(cudaStream_t stream, std::int64_t rows, const double* max, const double* sums,
                                const std::int64_t* targets, std::int64_t ignore_index, const std::int64_t* count,
                                double* lse, double* loss) {
  vocab_parallel_loss_kernel<<<1, 1024, 0, stream>>>(rows, max, sums, targets, ignore_index, count, lse, loss);
  WF_CUDA_CHECK_LAUNCH("vocab_parallel_loss_kernel");
}

template <class T>
void launch_vocab_parallel_backward(cudaStream_t stream, std::int64_t rows, std::int64_t k, std::int64_t own,
                                    std::int64_t start, const T* x, const std::int64_t* targets,
                                    std::int64_t ignore_index, const double* lse, const T* grad_loss,
                                    const std::int64_t* count, T* dx) {
  const std::int64_t n = rows * k;
  if (n == 0) return;
  vocab_parallel_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(rows, k, own, start, x, targets,
                                                                            ignore_index, lse, grad_loss, count, dx);
  WF_CUDA_CHECK_LAUNCH("vocab_parallel_backward_kernel");
}

void launch_vocab_parallel_local_ids(cudaStream_t stream, std::int64_t n, std::int64_t vocab, std::int64_t start,
                                     std::int64_t rows, const std::int64_t* ids, std::int64_t* local, double* mask,
                                     detail::DeviceErrorRecord* record, int message) {
  if (n == 0) return;
  vocab_parallel_local_ids_kernel<<<blocks_for(n), kThreads, 0, stream>>>(n, vocab, start, rows, ids, local, mask,
                                                                          record, message);
  WF_CUDA_CHECK_LAUNCH("vocab_parallel_local_ids_kernel");
}

#define WF_INSTANTIATE_CROSS_ENTROPY(T)                                                                              \
  template void launch_cross_entropy_forward<T>(cudaStream_t, std::int64_t, std::int64_t, const T*,                 \
                                                const std::int64_t*, std::int64_t, T*, T*, std::int64_t*,            \
                                                detail::DeviceErrorRecord*, int);                                    \
  template void launch_cross_entropy_reduce<T>(cudaStream_t, std::int64_t, const T*, const std::int64_t*, T*);       \
  template void launch_cross_entropy_backward<T>(cudaStream_t, std::int64_t, std::int64_t, const T*,                \
                                                 const std::int64_t*, std::int64_t, const T*, const T*,              \
                                                 const std::int64_t*, T*, const T*, detail::DeviceErrorRecord*, int); \
  template void launch_vocab_parallel_row_max<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t, const T*,  \
                                                 double*);                                                           \
  template void launch_vocab_parallel_partials<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t,           \
                                                  std::int64_t, const T*, const double*, const std::int64_t*,        \
                                                  std::int64_t, double*);                                            \
  template void launch_vocab_parallel_backward<T>(cudaStream_t, std::int64_t, std::int64_t, std::int64_t,           \
                                                  std::int64_t, const T*, const std::int64_t*, std::int64_t,         \
                                                  const double*, const T*, const std::int64_t*, T*);
WF_INSTANTIATE_CROSS_ENTROPY(float)
WF_INSTANTIATE_CROSS_ENTROPY(double)
#undef WF_INSTANTIATE_CROSS_ENTROPY

}  // namespace wf::kernels::cuda
