#pragma once
// Attention for Hopper GPUs (sm_90: H100, H200) on their warpgroup tensor-core instructions
// (wgmma), beside the own kernels of attention.cu (SIMT and WMMA), which every GPU runs. bf16 q,
// k, v (and d_o) with f32 o, lse and gradients, as the CUDA backend's other bf16 attention; every
// mask AttentionShape expresses (causal at any offsets, full, packed documents' key windows), GQA.
// Design and status: docs/kernels-attention.md, "The sm_90 kernels".
//
// They run only where the per-shape choice (attention_choice.h) picked them after checking their
// results against the own kernels' at the shape's first use, or where WF_ATTENTION_BACKEND=sm90
// forces them. Built only when WF_CUDA_ARCHITECTURES includes 90 (the kernels are sm_90a code).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/kernel_args.h"

namespace wf::kernels::cuda {

// Why the sm_90 kernels cannot take this call on `device`, or "" when they can: this build has
// them; the device is compute capability 9.0; head_dim 64 or 128; q, k, v 16-byte aligned (the
// tiles are copied 16 bytes at a time; the backward requires d_o to be as well).
std::string sm90_attention_refusal(int device, const AttentionShape& shape, const void* q, const void* k,
                                   const void* v);

// o [batch, q_len, heads, head_dim] and lse [batch, heads, q_len] as launch_attention_forward
// writes them (the shape checked, its scale resolved, its windows in device memory). Requires
// sm90_attention_refusal(...) to be "".
void launch_attention_forward_sm90(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                                   const __nv_bfloat16* k, const __nv_bfloat16* v, float* o, float* lse);

// dq, dk, dv (added to when accumulate) as launch_attention_backward computes them from the
// forward's o and lse, d_o and d_lse (nullable); minus_delta: device scratch of batch·heads·q_len
// floats (the backward's −D). Requires sm90_attention_refusal(...) to be "" and d_o 16-byte aligned.
void launch_attention_backward_sm90(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                                    const __nv_bfloat16* k, const __nv_bfloat16* v, const float* o,
                                    const float* lse, const __nv_bfloat16* d_o, float* dq, float* dk, float* dv,
                                    bool accumulate, const float* d_lse, float* minus_delta);

}  // namespace wf::kernels::cuda
