#pragma once
// cuDNN's fused attention through its backend C API (cudnn_graph.h; cudnn-frontend is not used),
// beside the project's own flash-attention kernels (attention.cu). Host code only.
//
// What it computes: the CUDA backend's bf16 attention entries (kernels/cuda/attention.h): bf16
// q, k, v (and d_o) in kernel_args.h's layouts, f32 o, lse and gradients. cuDNN's graphs take and
// give bf16 O, dQ, dK and dV, so the forward writes O into bf16 scratch and widens it into `o`,
// and the backward narrows the f32 `o` to bf16 scratch for cuDNN's D = rowsum(dO∘O) and widens
// (or adds, under accumulate) the bf16 gradients into dq, dk, dv: results within bf16 rounding
// of the own kernels', not their bits. lse is cuDNN's softmax statistics (max + log Σ exp of the
// scaled scores, f32 [batch, heads, q_len]): the same quantity the own kernels write.
//
// Which graph (plans built once per shape and direction, cached, see cudnn_attention.cpp):
//   - full attention: the native SDPA operation (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR);
//     when no engine of this cuDNN and GPU finalizes a plan for it, the composite graph unmasked;
//   - causal: on cuDNN 9.19 the native operation has no mask attribute, so the composite graph
//     (matmul, scale, a causal mask from GEN_INDEX and a comparison, softmax with its stats,
//     matmul) that cuDNN's fused attention engines recognise, and its backward.
// A shape no engine takes is remembered as such, and the caller runs its own kernel.
#include <cstdint>
#include <string>

#include "kernels/kernel_args.h"
#include "wallfacer/core/dtype.h"
#include "wallfacer/core/stream.h"

namespace wf::kernels::cuda {

// The causal diagonals cuDNN's causal graph expresses, in kernel_args.h's global positions.
enum class CudnnMask {
  none,          // full attention, or causal with every key in every query's past (a ring's earlier block)
  top_left,      // q_offset == kv_offset: query row i sees key rows j <= i
  bottom_right,  // q_offset − kv_offset == kv_len − q_len > 0 (q_len < kv_len): the last query sees every key
};

// Why cuDNN's attention cannot take this call, or "" when it may (a plan may still fail to build,
// which the call then reports by returning false). It may when: operands bf16; no key windows;
// q_len, kv_len >= 1 (and not both 1, which cuDNN's backward refuses); head_dim a multiple of 8
// and at most 128 (what the fused engines take in both directions on sm80 and sm90); a finite
// scale; full (or causal masking nothing), or causal with one of CudnnMask's diagonals (every query
// row then sees key 0, so no row is empty: cuDNN's stats for an empty row are not the own kernels'
// −inf).
std::string cudnn_attention_refusal(const AttentionShape& shape, DType operands);
inline bool cudnn_attention_supported(const AttentionShape& shape, DType operands) {
  return cudnn_attention_refusal(shape, operands).empty();
}
// The diagonal of a shape cudnn_attention_supported accepts.
CudnnMask cudnn_mask(const AttentionShape& shape);

// What the cached plans are keyed by: the fields the built graph depends on (the scale is a
// value passed at execution, not part of the graph).
struct CudnnPlanKey {
  int device = 0;
  std::int64_t batch = 0, q_len = 0, kv_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  CudnnMask mask = CudnnMask::none;
  bool backward = false;
  auto operator<=>(const CudnnPlanKey&) const = default;
};
CudnnPlanKey cudnn_plan_key(int device, const AttentionShape& shape, bool backward);
// "cuda:0 forward batch 2 q_len 1024 kv_len 1024 heads 16/4 head_dim 64 causal top-left"
std::string cudnn_plan_key_text(const CudnnPlanKey& key);

// The forward on `stream`: o (f32) and lse (f32) as attention_forward writes them. false when no
// cuDNN engine takes the shape or a pointer cuDNN reads or writes in place (q, k, v, lse; d_o in
// the backward) is not 16-byte aligned (nothing written); wf::Error when cuDNN fails to run a plan.
// Requires cudnn_attention_supported(shape, DType::bf16).
bool cudnn_attention_forward(const Stream& stream, const AttentionShape& shape, const void* q, const void* k,
                             const void* v, float* o, float* lse);
// The backward: dq, dk, dv (f32; added to under accumulate) from q, k, v, d_o (bf16) and the
// forward's o and lse (f32). No d_lse: a call with one runs the own kernel (cuDNN's graph computes
// D from dO and O alone). false when no engine takes the shape (nothing written).
bool cudnn_attention_backward(const Stream& stream, const AttentionShape& shape, const void* q, const void* k,
                              const void* v, const float* o, const float* lse, const void* d_o, float* dq, float* dk,
                              float* dv, bool accumulate);

// The graph the cached plan of `key` runs ("native SDPA operation" or "composite graph"); "" when
// none is cached or none planned. WF_CUDNN_NATIVE_SDPA=0 makes full attention plan the composite
// graph as well.
std::string cudnn_plan_kind(const CudnnPlanKey& key);

// "9.19.0" as cudnnGetVersion reports the library loaded at run time.
std::string cudnn_version_text();

}  // namespace wf::kernels::cuda
