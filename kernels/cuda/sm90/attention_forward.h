#pragma once
// The attention forward for Hopper GPUs (sm_90: H100, H200) on its warpgroup tensor-core
// instructions (wgmma), beside the own kernels of attention.cu (SIMT and WMMA), which every GPU
// runs. bf16 q, k, v with f32 o and lse, as the CUDA backend's other bf16 attention; every mask
// AttentionShape expresses (causal at any offsets, full, packed documents' key windows), GQA.
// Design and status: docs/kernels-attention.md, "The sm_90 forward".
//
// It runs only where the per-shape choice (attention_choice.h) picked it after checking its
// results against the own kernel's at the shape's first use, or where WF_ATTENTION_BACKEND=sm90
// forces it. Built only when WF_CUDA_ARCHITECTURES includes 90 (the kernel is sm_90a code).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <string>

#include "kernels/kernel_args.h"

namespace wf::kernels::cuda {

// Why the sm_90 forward cannot take this call on `device`, or "" when it can: this build has the
// kernel; the device is compute capability 9.0; head_dim 64 or 128; q, k, v 16-byte aligned (the
// tiles are copied 16 bytes at a time).
std::string sm90_attention_refusal(int device, const AttentionShape& shape, const void* q, const void* k,
                                   const void* v);

// o [batch, q_len, heads, head_dim] and lse [batch, heads, q_len] as launch_attention_forward
// writes them (the shape checked, its scale resolved, its windows in device memory). Requires
// sm90_attention_refusal(...) to be "".
void launch_attention_forward_sm90(cudaStream_t stream, const AttentionShape& shape, const __nv_bfloat16* q,
                                   const __nv_bfloat16* k, const __nv_bfloat16* v, float* o, float* lse);

}  // namespace wf::kernels::cuda
