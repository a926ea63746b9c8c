#pragma once
// Launchers of the embedding and RoPE kernels (kernels/cuda/embedding.cu), for T = float or
// double, with kernels/cpu/embedding.h's and kernels/cpu/rope.h's semantics. Every pointer is
// device memory; sizes are checked by the caller (kernels/cuda/embedding.cpp). An id outside
// [0, vocab) is reported to `record` with `message` (token index, id) and the token skipped: a zero
// row forward, no contribution backward. fmt-free: nvcc reads it.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "src/core/cuda/device_error.h"

namespace wf::kernels::cuda {

// out[t, :] = weight[ids[t], :].
template <class T>
void launch_embedding_forward(cudaStream_t stream, std::int64_t tokens, std::int64_t dim, std::int64_t vocab,
                              const T* weight, const std::int64_t* ids, T* out, detail::DeviceErrorRecord* record,
                              int message);

// The device scratch launch_embedding_backward needs (tokens, vocab < 2^31): the sorted token
// list and the sort's own storage. Host only: asks CUB, queues nothing.
std::size_t embedding_backward_scratch_bytes(std::int64_t tokens, std::int64_t vocab);
// dweight[ids[t], :] += dout[t, :], deterministic without atomics: the tokens are sorted by id
// (a stable radix sort, so token order within an id), and one block per distinct id sums its
// tokens' rows in that order in double and adds the total once (bit for bit the CPU's result).
template <class T>
void launch_embedding_backward(cudaStream_t stream, std::int64_t tokens, std::int64_t dim, std::int64_t vocab,
                               const std::int64_t* ids, const T* dout, T* dweight, void* scratch,
                               std::size_t scratch_bytes, detail::DeviceErrorRecord* record, int message);

// RoPE of x [batch, tokens, heads, head_dim] into y (may alias x), rotate-half pairs, angle
// positions[t]·inv_freq[i] in double; inv_freq [head_dim / 2] is the host's table (device memory).
template <class T>
void launch_rope(cudaStream_t stream, std::int64_t batch, std::int64_t tokens, std::int64_t heads,
                 std::int64_t head_dim, const double* inv_freq, const T* x, const std::int64_t* positions,
                 bool inverse, T* y);

}  // namespace wf::kernels::cuda
