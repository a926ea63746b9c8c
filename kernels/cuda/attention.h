#pragma once
// Launchers of the CUDA attention kernels (attention.cu) and of sequence-parallel attention's
// pieces (sp_attention.cu). fmt-free: read by nvcc and by the host compiler (attention.cpp).
//
// Layouts, masks and GQA are kernels/kernel_args.h's AttentionShape, whose `scale` the caller
// resolves (attention_scale) before launching: the kernels read it as given. The element types:
// f32 operands with f32 results, f64 with f64, or bf16 operands (__nv_bfloat16) with f32 o, lse
// and gradients. Launchers queue work on `stream` and never wait for it.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kernel_args.h"

namespace wf::kernels::cuda {

// The largest head_dim the kernels take: tiles of K and V rows live in shared memory.
constexpr std::int64_t kMaxAttentionHeadDim = 256;

// Writes o and lse. bf16 operands with head_dim a multiple of 16 run on tensor cores (WMMA);
// every other case runs the plain SIMT kernel.
void launch_attention_forward(cudaStream_t stream, const AttentionShape& shape, const float* q, const float* k,
                              const float* v, float* o, float* lse);
void launch_attention_forward(cudaStream_t stream, const AttentionShape& shape, const double* q, const double* k,
                              const double* v, double* o, double* lse);
void launch_attention_forward(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                              const __nv_bfloat16* k, const __nv_bfloat16* v, float* o, float* lse);

// dq, dk, dv (added to when accumulate) from the forward's o and lse and the output gradient d_o;
// d_lse nullable. minus_delta: device scratch of batch·heads·q_len elements (the backward's −D).
// bf16 operands run on tensor cores under the forward's condition, else the SIMT kernels.
void launch_attention_backward(cudaStream_t stream, const AttentionShape& shape, const float* q, const float* k,
                               const float* v, const float* o, const float* lse, const float* d_o, float* dq,
                               float* dk, float* dv, bool accumulate, const float* d_lse, float* minus_delta);
void launch_attention_backward(cudaStream_t stream, const AttentionShape& shape, const double* q, const double* k,
                               const double* v, const double* o, const double* lse, const double* d_o, double* dq,
                               double* dk, double* dv, bool accumulate, const double* d_lse, double* minus_delta);
void launch_attention_backward(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                               const __nv_bfloat16* k, const __nv_bfloat16* v, const float* o, const float* lse,
                               const __nv_bfloat16* d_o, float* dq, float* dk, float* dv, bool accumulate,
                               const float* d_lse, float* minus_delta);

// ---- sp_attention.cu: the lse merge and sequence-parallel attention's pieces (kernels/cpu/sp_attention.h)
template <class T>
void launch_attention_merge(cudaStream_t stream, std::int64_t batch, std::int64_t q_len, std::int64_t heads,
                            std::int64_t head_dim, T* o, T* lse, const T* o_i, const T* lse_i);
template <class T>
void launch_team_lse_combine(cudaStream_t stream, int members, std::int64_t rows, int member, const T* all,
                             T* lse_star, T* weight);
template <class T>
void launch_scale_attention_rows(cudaStream_t stream, std::int64_t B, std::int64_t n, std::int64_t h,
                                 std::int64_t d, T* o, const T* weight);
// out [B, h, n] = d_lse − rowsum(d_o∘o) (d_lse nullable). In is d_o's type (T, or bf16 beside f32 o):
// the attention backward's −D too.
template <class In, class T>
void launch_attention_minus_delta(cudaStream_t stream, std::int64_t B, std::int64_t n, std::int64_t h,
                                  std::int64_t d, const In* d_o, const T* o, const T* d_lse, T* out);

}  // namespace wf::kernels::cuda
