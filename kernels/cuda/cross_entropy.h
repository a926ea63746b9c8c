#pragma once
// Launchers of the cross-entropy kernels (kernels/cuda/cross_entropy.cu): the fused softmax
// cross-entropy of kernels/cpu/cross_entropy.h and the vocabulary-parallel pieces of
// kernels/cpu/vocab_parallel.h, for T = float or double. Every pointer is device memory; the
// scalars the step computes (grad_loss, count, max, lse) are read by the kernels, never by the
// host. Sizes are checked by the caller (kernels/cuda/cross_entropy.cpp). A target outside
// [0, vocab) other than ignore_index is reported to `record` with `message` (row, target) and
// its row treated as ignored. fmt-free: nvcc reads it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "src/core/cuda/device_error.h"

namespace wf::kernels::cuda {

// losses[r] (0 for ignored rows), lse[r] = logsumexp(logits_r) and *count = the rows not ignored.
template <class T>
void launch_cross_entropy_forward(cudaStream_t stream, std::int64_t rows, std::int64_t vocab, const T* logits,
                                  const std::int64_t* targets, std::int64_t ignore_index, T* losses, T* lse,
                                  std::int64_t* count, detail::DeviceErrorRecord* record, int message);
// *loss = Σ losses (in double), divided by *count when count is not null (0 when *count is 0).
template <class T>
void launch_cross_entropy_reduce(cudaStream_t stream, std::int64_t rows, const T* losses, const std::int64_t* count,
                                 T* loss);
// dlogits = (softmax − onehot)·scale·row_grad[r], scale = *grad_loss [/ *count]; may alias logits.
template <class T>
void launch_cross_entropy_backward(cudaStream_t stream, std::int64_t rows, std::int64_t vocab, const T* logits,
                                   const std::int64_t* targets, std::int64_t ignore_index, const T* lse,
                                   const T* grad_loss, const std::int64_t* count, T* dlogits, const T* row_grad,
                                   detail::DeviceErrorRecord* record, int message);

template <class T>
void launch_vocab_parallel_row_max(cudaStream_t stream, std::int64_t rows, std::int64_t k, std::int64_t own,
                                   const T* x, double* max);
template <class T>
void launch_vocab_parallel_partials(cudaStream_t stream, std::int64_t rows, std::int64_t k, std::int64_t own,
                                    std::int64_t start, const T* x, const double* max, const std::int64_t* targets,
                                    std::int64_t ignore_index, double* sums);
void launch_vocab_parallel_loss(cudaStream_t stream, std::int64_t rows, const double* max, const double* sums,
                                const std::int64_t* targets, std::int64_t ignore_index, const std::int64_t* count,
                                double* lse, double* loss);
template <class T>
void launch_vocab_parallel_backward(cudaStream_t stream, std::int64_t rows, std::int64_t k, std::int64_t own,
                                    std::int64_t start, const T* x, const std::int64_t* targets,
                                    std::int64_t ignore_index, const double* lse, const T* grad_loss,
                                    const std::int64_t* count, T* dx);
// An id outside [0, vocab) is reported (flat index, id) and mapped like one this rank does not hold.
void launch_vocab_parallel_local_ids(cudaStream_t stream, std::int64_t n, std::int64_t vocab, std::int64_t start,
                                     std::int64_t rows, const std::int64_t* ids, std::int64_t* local, double* mask,
                                     detail::DeviceErrorRecord* record, int message);

}  // namespace wf::kernels::cuda
