#pragma once
// Launchers of the fused QKV split + RoPE kernels (kernels/cuda/qkv_rope.cu), for T = float or
// double, with kernels/cpu/qkv_rope.h's semantics. Every pointer is device memory; sizes are
// checked by the caller (kernels/cuda/embedding.cpp). fmt-free: nvcc reads it.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace wf::kernels::cuda {

// projected [rows, groups, group_size + 2, head_dim]; positions has one entry per token, row r
// using positions[r % tokens].
struct QkvDims {
  std::int64_t rows, tokens, groups, group_size, head_dim;
};

// q, k, v from projected; q and k rotated by positions[t]·inv_freq[i] when inv_freq (the host's
// theta^(−2i/d) table, device memory) is not null, else the plain split.
template <class T>
void launch_qkv_rope_forward(cudaStream_t stream, const QkvDims& dims, const double* inv_freq,
                             const std::int64_t* positions, const T* projected, T* q, T* k, T* v);
// d_projected from dq, dk (rotated back) and dv; a null one writes zeros in its slots.
template <class T>
void launch_qkv_rope_backward(cudaStream_t stream, const QkvDims& dims, const double* inv_freq,
                              const std::int64_t* positions, const T* dq, const T* dk, const T* dv, T* d_projected);

}  // namespace wf::kernels::cuda
